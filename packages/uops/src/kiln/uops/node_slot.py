"""`NodeSlot`: a named, typed fact that a layer above the IR memoizes on UOp nodes.

UOps are immutable and hash-consed, and the layers above keep facts per node that must live exactly as long as the
node: the tensor graph's shapes and devices, the buffer view a node was realized into, the runtime buffer behind a
BUFFER node. A `NodeSlot` declares one such fact once, with its name and value type; the value is stored on the node
itself (so it is freed with the node, and a lookup is one dictionary probe) and never takes part in the node's
identity, equality or hash. Every slot is listed by `NodeSlot.declared()`.

    SHAPE: NodeSlot[tuple[int, ...]] = NodeSlot("tensor_shape", "kiln.tensor.graph", "the node's tensor shape")
    SHAPE.set(node, (2, 3)); SHAPE.get(node)  # (2, 3); None for a node without one
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from kiln.uops.uop import UOp

__all__ = ["NodeSlot"]

V = TypeVar("V")


class NodeSlot(Generic[V]):
    """One memoized per-node fact: `name` (unique in the process), the module that owns it, and what it holds.

    Values are never None (`get` answers None for "not set").
    """

    __slots__ = ("description", "name", "owner")
    _declared: ClassVar[dict[str, NodeSlot[Any]]] = {}
    name: str
    owner: str
    description: str

    def __init__(self, name: str, owner: str, description: str) -> None:
        if not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"a node slot name must be a public identifier, got {name!r}")
        existing = NodeSlot._declared.get(name)
        if existing is not None and existing.owner != owner:
            raise ValueError(f"node slot {name!r} is declared by {existing.owner} already (not {owner})")
        self.name, self.owner, self.description = name, owner, description
        NodeSlot._declared[name] = self

    def __repr__(self) -> str:
        return f"NodeSlot({self.name!r}, owner={self.owner!r})"

    @classmethod
    def declared(cls) -> dict[str, NodeSlot[Any]]:
        """Every slot declared in this process, by name."""
        return dict(cls._declared)

    def get(self, node: UOp) -> V | None:
        """The value on `node`, or None."""
        value: V | None = node.__dict__.get(self.name)
        return value

    def __getitem__(self, node: UOp) -> V:
        """The value on `node`; KeyError naming the slot when it has none."""
        try:
            value: V = node.__dict__[self.name]
        except KeyError:
            raise KeyError(f"{node.op.name} node has no {self.name!r} ({self.description})") from None
        return value

    def set(self, node: UOp, value: V) -> None:
        """Stores `value` on `node` (replacing an earlier one)."""
        if value is None:
            raise ValueError(f"node slot {self.name!r} cannot hold None; use discard()")
        node.__dict__[self.name] = value

    def setdefault(self, node: UOp, value: V) -> V:
        """The value on `node`, storing `value` first when it has none."""
        found: V = node.__dict__.setdefault(self.name, value)
        return found

    def copy_missing(self, source: UOp, target: UOp) -> None:
        """Gives `target` the value on `source`, unless `target` holds one already or `source` holds none (one call
        where `setdefault(target, get(source))` would be two; an elementwise node takes its operand's shape so)."""
        value = source.__dict__.get(self.name)
        if value is not None:
            target.__dict__.setdefault(self.name, value)

    def has(self, node: UOp) -> bool:
        """Whether `node` holds a value."""
        return self.name in node.__dict__

    def missing(self, node: UOp) -> bool:
        """Whether `node` holds no value (a toposort gate for filling the slot over a graph)."""
        return self.name not in node.__dict__

    def discard(self, node: UOp) -> None:
        """Forgets the value on `node`, if any."""
        node.__dict__.pop(self.name, None)
