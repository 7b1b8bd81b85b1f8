"""The UOp: the one immutable, hash-consed node of the IR, and its builders (its arithmetic: UOpMath, uop_math.py)."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

from kiln.uops.args import AxisKind, RangeArg, SpecialArg, VarArg
from kiln.uops.dtype import ConstType, DType, PtrDType, dtypes, truncate
from kiln.uops.node_text import nested_repr, render, stable_repr
from kiln.uops.ops import GroupOp, Ops
from kiln.uops.range_analysis import bounds
from kiln.uops.uop_math import UOpMath


# Hash-consing table: content tuple -> weak reference to the one live UOp with that content. The reference's
# callback removes the entry when the UOp is freed: the idea of weakref.WeakValueDictionary without its overhead
# (a slotted ref subclass is built in C; KeyedRef or a partial callback cost an extra Python call or GC object).
class _CacheRef(weakref.ref["UOp"]):
    __slots__ = ("content",)
    content: tuple[Any, ...]


def _forget(reference: _CacheRef) -> None:
    # the entry is this reference unless a node of the same content was built after this one died and before this
    # callback ran. Compared before deleting (a pop and a put-back had a window without the live node's entry): a
    # Ctrl-C that Python delivers inside this callback (it reports it as "Exception ignored" and drops it) can only
    # leave a dead reference behind, which `UOp.__new__` overwrites.
    content = reference.content
    if _live_uops.get(content) is reference:
        del _live_uops[content]


_live_uops: dict[tuple[Any, ...], _CacheRef] = {}


# The symbolic simplifier is built from the pattern matcher, which is built on UOp: it cannot sit below this module.
# kiln.uops.symbolic hands its `simplify` to `install_simplifier` when it is imported (kiln.uops imports it), so
# `UOp.simplify` reaches it without this module importing the layers above it.
_simplifier: Callable[[UOp], UOp] | None = None


def install_simplifier(simplifier: Callable[[UOp], UOp]) -> None:
    """Make `UOp.simplify()` call `simplifier` (kiln.uops.symbolic installs its fixed-point rewrite on import)."""
    global _simplifier
    _simplifier = simplifier


def live_uop_count() -> int:
    """How many distinct UOps are alive (entries of the hash-consing table); for tests and memory diagnostics."""
    return len(_live_uops)


def _normalized_arg(arg: Any) -> Any:
    # 1 == 1.0 == True and 0.0 == -0.0 hash alike: tag floats and bools by type (and exact bits) so they stay distinct
    kind = type(arg)
    if kind is float:
        return (float, arg.hex())
    if kind is bool:
        return (bool, arg)
    if kind is tuple:
        for item in arg:  # most tuples (shapes, lanes, axes) hold only ints: they are their own normal form
            item_kind = type(item)
            if item_kind is tuple:
                # pairs of ints (PAD / SHRINK bounds) are their own normal form too: checked here without a call
                for inner in item:
                    if type(inner) in _NORMALIZED_TYPES:
                        return tuple([_normalized_arg(each) for each in arg])
            elif item_kind in _NORMALIZED_TYPES:
                return tuple([_normalized_arg(each) for each in arg])
        return arg
    return arg


_NORMALIZED_TYPES: Final = frozenset({float, bool, tuple})


def content_arg(value: Any) -> Any:
    """`value` (an arg or tag) as hash-consing compares it: floats by their exact bits (0.0 and -0.0 apart, NaN
    equal to itself), bools apart from ints, tuples element by element. Two payloads make the same UOp exactly when
    their `content_arg`s are equal (for keys that must tell nodes apart the way UOp does)."""
    return _normalized_arg(value) if type(value) in _NORMALIZED_TYPES else value


_INDEX: Final = dtypes.index
_KEEP: Final = object()


class UOp(UOpMath):
    """An immutable IR node: `op` applied to `src` producing a value of `dtype`, with payload `arg` and `tag`.

    Building the same content twice returns the same object (hash-consing), so equality is identity and a UOp is
    freed when nothing references it. `arg` and `tag` must be hashable.
    """

    __slots__ = ("__dict__", "__weakref__", "arg", "dtype", "op", "src", "tag")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    tag: Any

    def __new__(
        cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None
    ) -> UOp:
        if type(src) is not tuple:
            src = tuple(src)
        content = (
            op,
            dtype,
            src,
            _normalized_arg(arg) if type(arg) in _NORMALIZED_TYPES else arg,
            _normalized_arg(tag) if type(tag) in _NORMALIZED_TYPES else tag,
        )
        try:
            reference = _live_uops.get(content)
        except TypeError:
            raise TypeError(f"UOp arg and tag must be hashable, got arg={arg!r} tag={tag!r} for {op!r}") from None
        if reference is not None and (existing := reference()) is not None:
            return existing
        # validation runs only for new content; exact type checks are cheaper than isinstance
        if type(op) is not Ops:
            raise TypeError(f"UOp op must be an Ops member, got {op!r}")
        if type(dtype) is not DType and not isinstance(dtype, DType):
            raise TypeError(f"UOp dtype must be a DType, got {dtype!r} for {op!r}")
        for source in src:
            if type(source) is not UOp:
                raise TypeError(f"UOp sources must be UOps, got {source!r} in the sources of {op!r}")
        # fill the fields through the slots' own descriptors (UOp.__setattr__ refuses every write): 0.46 us per new
        # node where a mutable twin class and a __class__ swap took 0.83
        node: UOp = _new_object(UOp)
        _set_op(node, op)
        _set_dtype(node, dtype)
        _set_src(node, src)
        _set_arg(node, arg)
        _set_tag(node, tag)
        reference = _CacheRef(node, _forget)
        reference.content = content
        _live_uops[content] = reference
        return node

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable: cannot set {name!r}; use .replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"UOp is immutable: cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # unpickling rebuilds through __new__, so a pickled graph is hash-consed again on load
        return (UOp, (self.op, self.dtype, self.src, self.arg, self.tag))

    def __copy__(self) -> UOp:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> UOp:
        return self

    def __repr__(self) -> str:
        return nested_repr(self)

    # ----------------------------------------------------------------------------------------------------------
    # graph structure
    # ----------------------------------------------------------------------------------------------------------

    def toposort(self, gate: Callable[[UOp], bool] | None = None) -> list[UOp]:
        """Every UOp this one depends on, itself last; sources come before their users, in source order.

        `gate(node)` False stops the walk from descending into `node`'s sources (the node itself is listed).
        A SINK's ungated order is computed once and kept on it (a graph never changes; the pipeline's passes and
        analyses walk the same kernel sink many times); each call returns a new list.
        """
        if gate is None and self.op is Ops.SINK:
            # kept without the sink itself: holding itself, a sink would be freed by the garbage collector only
            sources: tuple[UOp, ...] | None = self.__dict__.get("_toposort")
            if sources is None:
                order = self._walk(None)
                self.__dict__["_toposort"] = tuple(order[:-1])
                return order
            return [*sources, self]
        return self._walk(gate)

    def _walk(self, gate: Callable[[UOp], bool] | None) -> list[UOp]:
        # a depth-first walk with an explicit stack of (node, iterator over its sources): a node is listed when its
        # iterator runs out, and each node is visited (gated) once, when it is first met
        order: list[UOp] = []
        visited = {self}
        no_sources: tuple[UOp, ...] = ()
        stack = [(self, iter(self.src if gate is None or gate(self) else no_sources))]
        push, pop, visit, emit = stack.append, stack.pop, visited.add, order.append
        while stack:
            node, sources = stack[-1]
            for source in sources:
                if source not in visited:
                    visit(source)
                    push((source, iter(source.src if gate is None or gate(source) else no_sources)))
                    break
            else:
                pop()
                emit(node)
        return order

    def substitute(self, mapping: Mapping[UOp, UOp]) -> UOp:
        """This graph with each key of `mapping` replaced by its value (replacements are not searched again)."""
        if not mapping:
            return self
        rebuilt: dict[UOp, UOp] = {}
        for node in self.toposort(gate=lambda node: node not in mapping):
            if node in mapping:
                rebuilt[node] = mapping[node]
                continue
            new_src = tuple(rebuilt[source] for source in node.src)
            changed = any(new is not old for new, old in zip(new_src, node.src))
            rebuilt[node] = node.replace(src=new_src) if changed else node
        return rebuilt[self]

    def replace(
        self,
        *,
        op: Ops | None = None,
        dtype: DType | None = None,
        src: tuple[UOp, ...] | None = None,
        arg: Any = _KEEP,
        tag: Any = _KEEP,
    ) -> UOp:
        """This UOp with the given fields changed (the same object when nothing changes)."""
        return UOp(
            self.op if op is None else op,
            self.dtype if dtype is None else dtype,
            self.src if src is None else src,
            self.arg if arg is _KEEP else arg,
            self.tag if tag is _KEEP else tag,
        )

    @property
    def key(self) -> bytes:
        """A sha256 content hash of the graph, stable across processes (args need a stable repr)."""
        cached = self.__dict__.get("_key")
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        for node in self.toposort(gate=lambda node: "_key" not in node.__dict__):
            if "_key" in node.__dict__:
                continue
            digest = hashlib.sha256()
            digest.update(f"{node.op.name}|{node.dtype!r}|{stable_repr(node.arg)}|{stable_repr(node.tag)}".encode())
            for source in node.src:
                digest.update(source.__dict__["_key"])
            node.__dict__["_key"] = digest.digest()
        return self.__dict__["_key"]  # type: ignore[no-any-return]

    # ----------------------------------------------------------------------------------------------------------
    # range analysis and symbolic helpers (implemented in the modules below this one; the simplifier, which builds
    # UOps with the pattern matcher, sits above and installs itself: see `install_simplifier`)
    # ----------------------------------------------------------------------------------------------------------

    def _vbounds(self) -> tuple[ConstType, ConstType]:
        # computed once and kept in the instance dict under "_bounds" (range_analysis looks for that key); a plain
        # dict probe, not functools.cached_property, whose first access takes a lock (every new index node has one)
        found: tuple[ConstType, ConstType] | None = self.__dict__.get("_bounds")
        if found is None:
            found = self.__dict__["_bounds"] = bounds(self)
        return found

    @property
    def vmin(self) -> ConstType:
        """The proven smallest value of this UOp over every assignment of its variables (range analysis)."""
        return self._vbounds()[0]

    @property
    def vmax(self) -> ConstType:
        """The proven largest value of this UOp over every assignment of its variables (range analysis)."""
        return self._vbounds()[1]

    def simplify(self) -> UOp:
        """This expression rewritten to a fixed point by the symbolic simplifier."""
        if _simplifier is None:
            raise RuntimeError("no symbolic simplifier installed: import kiln.uops (its __init__ installs one)")
        return _simplifier(self)

    def render(self) -> str:
        """A C-like string of a symbolic expression, e.g. '((a*4)+b)'."""
        return render(self)

    # ----------------------------------------------------------------------------------------------------------
    # builders
    # ----------------------------------------------------------------------------------------------------------

    @classmethod
    def const(cls, dtype: DType, value: ConstType | tuple[ConstType, ...]) -> UOp:
        """A constant of `dtype` holding `value` truncated to it (a vector dtype or a tuple gives VCONST)."""
        if dtype is _INDEX and type(value) is int:
            return UOp(Ops.CONST, dtype, (), value)  # the most common constant: an index int is exact already
        if isinstance(dtype, PtrDType) or not isinstance(dtype, DType) or dtype.scalar() == dtypes.void:
            raise TypeError(f"constants need a bool, int or float dtype, got {dtype!r}")
        if isinstance(value, (tuple, list)):
            if dtype.count not in (1, len(value)):
                raise ValueError(
                    f"vector constant {value!r} has {len(value)} lanes but dtype {dtype!r} has {dtype.count}"
                )
            scalar = dtype.scalar()
            lanes = tuple(truncate(scalar, _check_const(item)) for item in value)
            return UOp(Ops.VCONST, scalar.vec(len(lanes)), (), lanes)
        truncated = truncate(dtype, _check_const(value))
        if dtype.count > 1:
            return UOp(Ops.VCONST, dtype, (), (truncated,) * dtype.count)
        return UOp(Ops.CONST, dtype, (), truncated)

    def const_like(self, value: ConstType | tuple[ConstType, ...]) -> UOp:
        """A constant of this UOp's dtype."""
        return UOp.const(self.dtype, value)

    @classmethod
    def variable(cls, name: str, lo: int, hi: int, dtype: DType = dtypes.index) -> UOp:
        """A symbolic integer variable `name` with inclusive bounds lo <= value <= hi (DEFINE_VAR)."""
        if not dtypes.is_int(dtype):
            raise TypeError(f"variable {name!r} needs an integer dtype, got {dtype!r}")
        return UOp(Ops.DEFINE_VAR, dtype, (), VarArg(name, lo, hi))

    @classmethod
    def range(cls, size: UOp | int, axis: int, kind: AxisKind = AxisKind.LOOP) -> UOp:
        """A loop variable running 0..size-1 on `axis` of the given `kind` (RANGE)."""
        size_uop = size if isinstance(size, UOp) else UOp.const(dtypes.index, size)
        return UOp(Ops.RANGE, dtypes.index, (size_uop,), RangeArg(axis, kind))

    @classmethod
    def special(cls, size: UOp | int, name: str) -> UOp:
        """A hardware index such as 'gidx0' or 'lidx1' running 0..size-1 (SPECIAL)."""
        size_uop = size if isinstance(size, UOp) else UOp.const(dtypes.index, size)
        return UOp(Ops.SPECIAL, dtypes.index, (size_uop,), SpecialArg(name))

    def bind(self, value: int) -> UOp:
        """This DEFINE_VAR bound to a concrete value (BIND)."""
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"only DEFINE_VAR can be bound, got {self.op!r}")
        if not self.arg.lo <= value <= self.arg.hi:
            raise ValueError(f"value {value} is outside the bounds [{self.arg.lo}, {self.arg.hi}] of {self.arg.name!r}")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(value)))

    def sink(self, *srcs: UOp) -> UOp:
        """A SINK of this UOp and `srcs`; also callable as `UOp.sink(a, b, ...)`."""
        return UOp(Ops.SINK, dtypes.void, (self, *srcs))

    @classmethod
    def vectorize(cls, *uops: UOp) -> UOp:
        """A vector whose lanes are `uops` (VECTORIZE); a single UOp is returned unchanged."""
        if not uops:
            raise ValueError("vectorize needs at least one UOp")
        if len(uops) == 1:
            return uops[0]
        return UOp(Ops.VECTORIZE, uops[0].dtype.vec(len(uops)), uops)

    def gep(self, lanes: int | tuple[int, ...]) -> UOp:
        """The lanes `lanes` of this vector (GEP); lane 0 of a scalar is the scalar itself."""
        indices = (lanes,) if isinstance(lanes, int) else tuple(lanes)
        for lane in indices:
            if not 0 <= lane < self.dtype.count:
                raise ValueError(f"lane {lane} is out of range for {self.dtype!r}")
        if self.dtype.count == 1:
            return self
        return UOp(Ops.GEP, self.dtype.scalar().vec(len(indices)), (self,), indices)

    def index(self, *indices: UOp | int, gate: UOp | None = None) -> UOp:
        """The address of element `indices` of this buffer, optionally valid only where `gate` is true (INDEX)."""
        index_uops = tuple(i if isinstance(i, UOp) else UOp.const(dtypes.index, i) for i in indices)
        return UOp(Ops.INDEX, self.dtype, (self, *index_uops) if gate is None else (self, *index_uops, gate))

    def load(self, *srcs: UOp, dtype: DType | None = None) -> UOp:
        """The value loaded from this address (LOAD); the dtype defaults to the pointer's element dtype."""
        if dtype is None:
            dtype = self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype
        return UOp(Ops.LOAD, dtype, (self, *srcs))

    def store(self, value: UOp, *srcs: UOp) -> UOp:
        """Store `value` at this address (STORE)."""
        return UOp(Ops.STORE, dtypes.void, (self, value, *srcs))

    def reduce(self, *ranges: UOp, op: Ops = Ops.ADD) -> UOp:
        """This value reduced with `op` over `ranges` (REDUCE)."""
        if op not in (Ops.ADD, Ops.MUL, Ops.MAX):
            raise ValueError(f"reduce op must be Ops.ADD, Ops.MUL or Ops.MAX, got {op!r}")
        return UOp(Ops.REDUCE, self.dtype, (self, *ranges), op)

    def end(self, *ranges: UOp) -> UOp:
        """Close the loops `ranges` after this UOp (END)."""
        return UOp(Ops.END, dtypes.void, (self, *ranges))

    # ----------------------------------------------------------------------------------------------------------
    # ALU node, casts (the ALU builders by name and Python's operators: UOpMath)
    # ----------------------------------------------------------------------------------------------------------

    def alu(self, op: Ops, *others: UOp) -> UOp:
        """The ALU op `op` applied to this UOp and `others`; comparisons give bool, WHERE the branches' dtype."""
        srcs = (self, *others)
        expected = 1 if op in GroupOp.Unary else 2 if op in GroupOp.Binary else 3 if op in GroupOp.Ternary else 0
        if expected == 0:
            raise ValueError(f"{op!r} is not an ALU op")
        if len(srcs) != expected:
            raise ValueError(f"{op!r} takes {expected} operands, got {len(srcs)}")
        if op is Ops.WHERE:
            if self.dtype.scalar() != dtypes.bool:
                raise TypeError(f"WHERE condition must be bool, got {self.dtype!r}")
            operands: tuple[UOp, ...] = others
        else:
            operands = srcs
        if any(operand.dtype != operands[0].dtype for operand in operands):
            raise TypeError(f"{op!r} operands must share one dtype, got {[o.dtype for o in operands]!r}")
        if op in GroupOp.Comparison:
            out_dtype = dtypes.bool.vec(self.dtype.count)
        else:
            out_dtype = operands[0].dtype
        return UOp(op, out_dtype, srcs)

    def cast(self, dtype: DType) -> UOp:
        """This value converted to `dtype` (CAST); a cast to the same dtype returns self."""
        return self if dtype == self.dtype else UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        """This value's bits reinterpreted as `dtype` of the same size (BITCAST)."""
        if dtype.nbytes != self.dtype.nbytes:
            raise TypeError(
                f"bitcast needs equal sizes: {self.dtype!r} has {self.dtype.nbytes} bytes, {dtype!r} {dtype.nbytes}"
            )
        return self if dtype == self.dtype else UOp(Ops.BITCAST, dtype, (self,))


# the setters of UOp's field slots (member descriptors), for UOp.__new__
_new_object: Final = object.__new__
_set_op, _set_dtype, _set_src, _set_arg, _set_tag = (
    UOp.__dict__[name].__set__ for name in ("op", "dtype", "src", "arg", "tag")
)


def _check_const(value: object) -> ConstType:
    if not isinstance(value, (int, float)):
        raise TypeError(f"a constant must be an int, float or bool, got {value!r} of type {type(value).__name__}")
    return value
