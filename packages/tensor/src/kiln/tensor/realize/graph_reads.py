"""What a graph reads of buffers a write replaces, and how it is rebound (for `kiln.tensor.realize.mutation`).

A write finds, in every live tensor's graph not realized yet, the nodes through which it reads the written buffer:
its BUFFER nodes, and realized nodes whose buffer view reads it (`storage_reads`, `reads_by_storage` for several
buffers at once). Those nodes are then rebound: to the buffer's new node (`rebind`: views see the new contents) or to
a snapshot of the old contents (`to_snapshot`: a lazy reader built before the write keeps its values; a realized
node reading it is marked modified, which `check_gradient_operands` reports like PyTorch's version counter).
"""

from __future__ import annotations

from collections.abc import Iterable

from kiln.runtime import Buffer
from kiln.tensor import graph
from kiln.tensor.realize.buffers import buffer_of, has_buffer
from kiln.tensor.realize.engine import default_engine, engines_in_context
from kiln.tensor.realize.views import VIEW_OPS
from kiln.tensor.schedule import realized_view, record_realized
from kiln.uops import NodeSlot, Ops, UOp

__all__ = [
    "check_gradient_operands",
    "computes_new_values",
    "reads_a_buffer",
    "reads_by_storage",
    "reads_other_target",
    "rebind",
    "storage_of",
    "storage_reads",
    "storages_read",
    "target_base",
    "to_snapshot",
    "unrealized",
    "unrealized_nodes",
    "view_over",
]


def target_base(node: UOp) -> UOp | None:
    # the buffer under the movement ops of a write's target (the planner rejects PAD and EXPAND there)
    while node.op in graph.MOVEMENT_OPS or node.op in (Ops.DETACH, Ops.ASSIGN, Ops.CONTIGUOUS):
        node = node.src[0]
    return node if node.op is Ops.BUFFER else None


def storage_of(node: UOp) -> Buffer | None:
    return buffer_of(node) if node.op is Ops.BUFFER and has_buffer(node) else None


def storage_reads(uop: UOp, storage: Buffer) -> list[UOp]:
    """Nodes of `uop`'s not-yet-realized graph through which it reads `storage`: BUFFER nodes of it, and realized
    nodes whose buffer view reads it."""
    found: list[UOp] = []

    def descend(node: UOp) -> bool:
        return node.op is not Ops.BUFFER and realized_view(node) is None

    for node in uop.toposort(gate=descend):
        if node.op is Ops.BUFFER:
            if storage_of(node) is storage:
                found.append(node)
            continue
        view = realized_view(node)
        if view is not None and any(storage_of(inner) is storage for inner in view.toposort()):
            found.append(node)
    return found


def view_over(node: UOp, storage: Buffer, replacement: UOp) -> UOp:
    # the buffer view realized node `node` lives in, with each BUFFER node of `storage` made `replacement`
    view = realized_view(node)
    assert view is not None
    return view.substitute({inner: replacement for inner in view.toposort() if storage_of(inner) is storage})


def rebind(uop: UOp, reads: Iterable[UOp], storage: Buffer, replacement: UOp) -> UOp:
    # each BUFFER node of `storage` becomes `replacement`; a realized node reading it becomes its view rebuilt so
    mapping = {node: replacement if node.op is Ops.BUFFER else view_over(node, storage, replacement) for node in reads}
    return uop.substitute(mapping)


# A realized node whose buffer was written after it was built: its values now live in a snapshot. A gradient that
# needs them as an operand (`s = v * v; v.mul_(2); s.backward()`) is PyTorch's version-counter error.
_MODIFIED: NodeSlot[bool] = NodeSlot(
    "tensor_modified_in_place", __name__, "a realized node whose buffer an in-place write changed after it was built"
)


def check_gradient_operands(gradients: Iterable[UOp], forward: set[UOp]) -> None:
    """Raises PyTorch's RuntimeError when a node that the gradients added to the forward graph (`forward`, its
    nodes) reads, as an operand (through view ops only), a value a later in-place write replaced: PyTorch saved
    that tensor for backward and its version has changed since."""
    if not any(engine.tensors.modified_count for engine in engines_in_context()):
        return  # no node was ever marked: nothing to find
    for gradient in gradients:
        for node in gradient.toposort(gate=lambda n: n not in forward):
            if node in forward:
                continue
            for source in node.src:
                operand = source
                while operand.op in VIEW_OPS and not _MODIFIED.has(operand):
                    operand = operand.src[0]
                if _MODIFIED.has(operand):
                    raise RuntimeError(
                        "one of the variables needed for gradient computation has been modified by an inplace "
                        f"operation: a tensor of shape {list(graph.shape_of(operand))} was written in place after "
                        "it was used; its old version is needed here (clone() it before the write)"
                    )


def to_snapshot(uop: UOp, reads: Iterable[UOp], storage: Buffer, snapshot: UOp) -> UOp:
    """`uop` reading the copy `snapshot` of `storage`'s old contents instead of `storage`: its BUFFER nodes of the
    storage are replaced; a realized node reading it keeps its place in the graph (and so its gradient path) and is
    recorded as realized into the copy (every graph still holding it means the old values)."""
    mapping: dict[UOp, UOp] = {}
    for node in reads:
        if node.op is Ops.BUFFER:
            mapping[node] = snapshot
            continue
        record_realized(node, view_over(node, storage, snapshot))
        _MODIFIED.set(node, True)
        default_engine().tensors.modified_count += 1
    return uop.substitute(mapping) if mapping else uop


def unrealized(node: UOp) -> bool:
    return node.op is not Ops.BUFFER and realized_view(node) is None


def reads_a_buffer(uop: UOp, memo: dict[UOp, bool] | None = None) -> bool:
    """Whether `uop`'s graph reads memory: holds a BUFFER node or a realized node. `memo` (node -> answer) shares the
    walk between calls on overlapping graphs (the tensors of one training step all share its graph)."""
    memo = {} if memo is None else memo
    found = memo.get(uop)
    if found is not None:
        return found
    if uop.op is Ops.BUFFER or realized_view(uop) is not None:
        memo[uop] = True
        return True
    # depth-first, stopping at the first node that reads memory: then every node on the path reads it; a node
    # whose sources are all exhausted reads none. Each node is decided once across the calls sharing `memo`.
    path = [(uop, iter(uop.src))]
    while path:
        node, sources = path[-1]
        for source in sources:
            known = memo.get(source)
            if known is False:
                continue
            if known is True or source.op is Ops.BUFFER or realized_view(source) is not None:
                for on_path, _ in path:
                    memo[on_path] = True
                return True
            path.append((source, iter(source.src)))
            break
        else:
            path.pop()
            memo[node] = False
    return False


def unrealized_nodes(roots: Iterable[UOp]) -> set[UOp]:
    """Every node of the graphs of `roots`, not descending into realized nodes or buffers (one shared walk)."""
    seen: set[UOp] = set()
    stack = list(roots)
    pop, push, visit, buffer_op = stack.pop, stack.append, seen.add, Ops.BUFFER
    while stack:  # plain loops and local names: this walks a whole training step's graph on every optimizer step
        node = pop()
        if node in seen:
            continue
        visit(node)
        if node.op is not buffer_op and realized_view(node) is None:
            for source in node.src:
                if source not in seen:
                    push(source)
    return seen


def reads_by_storage(uop: UOp, storages: dict[int, Buffer]) -> dict[int, list[UOp]]:
    """Like `storage_reads`, for several buffers in one walk: id(buffer) -> the nodes through which `uop` reads it."""
    found: dict[int, list[UOp]] = {}

    def descend(node: UOp) -> bool:
        return node.op is not Ops.BUFFER and realized_view(node) is None

    for node in uop.toposort(gate=descend):
        if node.op is Ops.BUFFER:
            storage = storage_of(node)
            if storage is not None and id(storage) in storages:
                found.setdefault(id(storage), []).append(node)
            continue
        view = realized_view(node)
        if view is None:
            continue
        for key in {id(s) for s in (storage_of(inner) for inner in view.toposort()) if s is not None}:
            if key in storages:
                found.setdefault(key, []).append(node)
    return found


def reads_other_target(
    value: UOp, own: Buffer, storages: dict[int, Buffer], memo: dict[UOp, frozenset[int]] | None = None
) -> bool:
    """Whether `value` reads one of the written buffers `storages` other than its own target's `own`. `memo` (node
    -> the keys of `storages` it reads) shares the walk between the values of one update (an optimizer step's
    values all read one gradient graph: walked once, not once per parameter)."""
    if len(storages) < 2:
        return False
    return any(key != id(own) for key in storages_read(value, storages, {} if memo is None else memo))


_NONE: frozenset[int] = frozenset()


def storages_read(root: UOp, storages: dict[int, Buffer], memo: dict[UOp, frozenset[int]]) -> frozenset[int]:
    """The keys of `storages` (id of a buffer) whose buffers `root`'s graph reads, as `reads_by_storage` finds them
    (BUFFER nodes, and realized nodes whose view reads them; no walk below either); each node's answer is kept in
    `memo` for the next root."""
    stack = [root]
    while stack:
        node = stack[-1]
        if node in memo:
            stack.pop()
            continue
        if node.op is Ops.BUFFER:
            storage = storage_of(node)
            memo[node] = frozenset((id(storage),)) if storage is not None and id(storage) in storages else _NONE
            stack.pop()
            continue
        view = realized_view(node)
        if view is not None:
            read = {id(s) for s in map(storage_of, view.toposort()) if s is not None and id(s) in storages}
            memo[node] = frozenset(read) if read else _NONE
            stack.pop()
            continue
        waiting = False
        for source in node.src:
            if source not in memo:
                stack.append(source)
                waiting = True
        if waiting:
            continue
        stack.pop()
        found = [memo[source] for source in node.src if memo[source]]
        memo[node] = _NONE if not found else found[0] if len(found) == 1 else frozenset().union(*found)
    return memo[root]


def computes_new_values(uop: UOp) -> bool:
    """Whether realizing `uop` computes values into new memory (not a view of memory that is already realized)."""
    node = uop
    while node.op in graph.MOVEMENT_OPS or node.op in (Ops.DETACH, Ops.CONTIGUOUS):
        if realized_view(node) is not None:
            return False
        node = node.src[0]
    return realized_view(node) is None and node.op not in (Ops.BUFFER, Ops.CONST)
