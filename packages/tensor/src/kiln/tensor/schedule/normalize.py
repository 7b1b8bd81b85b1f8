"""Normalizing the graphs to realize: realized nodes become their buffer views, buffers become numbered inputs,
and chains of movement ops are merged (what `graph.fold_movement_chains` does, in the same walk).

Two requests with the same structure (the same ops and constants over buffers of the same sizes and dtypes, in the
same positions) normalize to the very same SINK node (UOps are hash-consed), which keys the schedule cache.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from kiln.tensor.graph import MOVEMENT_OPS, SHAPE, merge_movement_link, shape_of
from kiln.tensor.schedule.indexing import and_gates, movement_indices
from kiln.tensor.schedule.items import InputSlot
from kiln.uops import ConstType, DType, NodeSlot, Ops, UOp, content_arg, dtypes

REALIZED: NodeSlot[UOp] = NodeSlot("tensor_realized", __name__, "the buffer view a node's value was realized into")
REALIZED_SERIAL: NodeSlot[int] = NodeSlot(
    "tensor_realized_serial", __name__, "when (a serial number) a node's REALIZED view was recorded"
)
_serials = itertools.count()
# A node whose graph holds no BUFFER and no realized node (a pure graph) normalizes to itself with its movement
# chains merged; such a node remembers so in this slot (with the epoch it was seen in), and later walks stop there
# (taking its merged form from PURE_FORM when merging changed it). Such a graph is never recorded as realized.
SELF_EPOCH: NodeSlot[int] = NodeSlot(
    "tensor_normalizes_to_self", __name__, "the epoch in which a node was seen to be pure (no buffer, not realized)"
)
PURE_FORM: NodeSlot[UOp] = NodeSlot(
    "tensor_pure_form", __name__, "a pure node's normalized form when merging its movement chains changed it"
)
_CHAIN_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND})
OVERWRITTEN: NodeSlot[bool] = NodeSlot(
    "tensor_overwritten", __name__, "a BUFFER node whose contents a write has replaced (its graphs are stale)"
)
# The nodes recorded as realized into each BUFFER node (weakly: the list lives on the BUFFER node), so a write can
# forget them.
RECORDED_INTO: NodeSlot[list[weakref.ref[UOp]]] = NodeSlot(
    "tensor_recorded_into", __name__, "(weak references to) the nodes recorded as realized into a BUFFER node"
)
_epoch = [0]


class _CaptureScope(threading.local):
    """A TinyJit capture running on this thread (`capture_scope`): the first serial number recorded inside it (None:
    no capture), the nodes recorded inside it, and which nodes' graphs read an overwritten buffer."""

    def __init__(self) -> None:
        self.floor: int | None = None
        self.recorded: list[weakref.ref[UOp]] = []
        self.frozen: set[UOp] = set()


_scope = _CaptureScope()  # module-state: a threading.local: each thread sees only its own capture


@contextmanager
def capture_scope() -> Iterator[None]:
    """While a TinyJit capture runs, a value realized before it is computed again from its buffers when they all
    still hold what they held (a captured step must hold every kernel a replay needs: a replay on new inputs or
    updated weights would otherwise return the old result); one whose graph reads an overwritten buffer can only be
    read where it was realized (a tensor kept for backward: its value is fixed). On exit, the values realized
    inside the capture that can be computed again are forgotten: they live in buffers the replays overwrite (the
    others are only read through the tensors that hold them, which a replay's outputs replace as in tinygrad)."""
    outer = _scope.floor, _scope.recorded, _scope.frozen
    _scope.floor, _scope.recorded, _scope.frozen = next(_serials), [], set()
    try:
        yield
    finally:
        for reference in _scope.recorded:
            node = reference()
            if node is not None and not _reads_overwritten(node):
                REALIZED.discard(node)
        _scope.floor, _scope.recorded, _scope.frozen = outer


def _reads_overwritten(root: UOp) -> bool:
    """Whether `root`'s graph reads a BUFFER node whose contents a write replaced. Only the yes answers are kept for
    the capture (a buffer stays overwritten; one still live may be overwritten by the capture's next write)."""
    frozen = _scope.frozen
    seen: set[UOp] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node in frozen or (node.op is Ops.BUFFER and OVERWRITTEN.has(node)):
            frozen.add(root)
            return True
        for source in node.src:
            if source not in seen:
                seen.add(source)
                stack.append(source)
    return False


def realized_view(uop: UOp) -> UOp | None:
    """The buffer view `uop`'s value was realized into, or None (inside a capture, None for a value realized before
    it that can be computed again: see `capture_scope`)."""
    view = REALIZED.get(uop)
    if view is None or _scope.floor is None:
        return view
    serial = REALIZED_SERIAL.get(uop)
    if serial is not None and serial >= _scope.floor:
        return view
    return view if _reads_overwritten(uop) else None


def _realized_lookup() -> Callable[[UOp], UOp | None]:
    """`realized_view`, or the slot's own lookup when no capture runs (the walks call it on every node)."""
    return REALIZED.get if _scope.floor is None else realized_view


_ALIAS_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.DETACH})
_INDEX_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.PAD, Ops.FLIP})
PADDING_HIDDEN: NodeSlot[bool] = NodeSlot(
    "tensor_padding_hidden",
    __name__,
    "whether every element of a movement chain holding a PAD comes from its source (a strided slice's padding is "
    "cut away again), so the chain is a view",
)


def padding_hidden(top: UOp) -> bool:
    """Whether no element of the movement chain `top` (holding PADs) reads padding: every position maps to an
    element of the node under the chain. A strided slice (`x[::2]`) pads a dim to a multiple of the step and keeps
    the first of each group, which is never padding: a view, as in PyTorch; `pad()` itself is a new value.

    Decided once per node by the symbolic simplifier: the chain's validity condition over index variables with
    the view's bounds must fold to True."""
    found = PADDING_HIDDEN.get(top)
    if found is not None:
        return found
    indices = tuple(UOp.variable(f"view{axis}", 0, max(size - 1, 0)) for axis, size in enumerate(shape_of(top)))
    node, gate = top, None
    while node.op in _INDEX_OPS or node.op in (Ops.DETACH, Ops.CONTIGUOUS, Ops.ASSIGN):
        if node.op in _INDEX_OPS:
            indices, valid = movement_indices(node, indices, shape_of(node.src[0]))
            gate = and_gates(gate, valid)
        node = node.src[0]
    folded = None if gate is None else gate.simplify()
    hidden = folded is None or (folded.op is Ops.CONST and folded.arg is True)
    PADDING_HIDDEN.set(top, hidden)
    return hidden


def alias_base(uop: UOp, through_assign: bool = False) -> UOp | None:
    """The BUFFER node `uop` is a view of, else None.

    A view has only RESHAPE / PERMUTE / EXPAND / SHRINK / FLIP / DETACH (and CONTIGUOUS of the whole buffer; a PAD whose
    padding the ops above it cut away again, `padding_hidden`; with `through_assign`, the target of an ASSIGN)
    between it and the buffer. Like a PyTorch view, it reads the buffer's current contents: it sees every later
    write into the buffer, and it is never recorded as realized.
    """
    top, padded = uop, False
    while (
        uop.op in _ALIAS_OPS
        or (uop.op is Ops.ASSIGN and through_assign)
        or (uop.op is Ops.CONTIGUOUS and whole_buffer(uop.src[0]))
        or uop.op is Ops.PAD
    ):
        padded = padded or uop.op is Ops.PAD
        uop = uop.src[0]
    if uop.op is not Ops.BUFFER:
        return None
    return uop if not padded or padding_hidden(top) else None


# the ops a view of a buffer can end in: `alias_base` of a node with any other op is None (checked first where
# realizing asks on every call)
_VIEW_END_OPS = _ALIAS_OPS | {Ops.ASSIGN, Ops.CONTIGUOUS, Ops.BUFFER, Ops.PAD}


def whole_buffer(uop: UOp) -> bool:
    # CONTIGUOUS of the whole buffer in row-major order realizes to the buffer itself (PyTorch: returns self)
    while uop.op in (Ops.RESHAPE, Ops.DETACH):
        uop = uop.src[0]
    return uop.op is Ops.BUFFER


def record_realized(uop: UOp, view: UOp) -> None:
    """Remembers that `uop`'s value lives in `view` (movement ops over BUFFER nodes) for later schedules.

    A view of a buffer (`alias_base`) is not recorded: it reads the buffer, whatever is written into it later.
    """
    if uop is not view and (uop.op not in _VIEW_END_OPS or alias_base(uop) is None):
        if SELF_EPOCH.has(uop):
            # a graph of constants only (a mark of any epoch says so) is computed again for each tensor, so each one
            # gets memory of its own (as in PyTorch: a write into one never shows in another), and no cache that
            # holds the node keeps a buffer alive
            return
        REALIZED.set(uop, view)
        REALIZED_SERIAL.set(uop, next(_serials))
        reference = weakref.ref(uop)
        if _scope.floor is not None:
            _scope.recorded.append(reference)
        if view.op is Ops.BUFFER:  # the usual view: a fresh output buffer
            RECORDED_INTO.setdefault(view, []).append(reference)
            return
        for node in view.toposort():
            if node.op is Ops.BUFFER:
                RECORDED_INTO.setdefault(node, []).append(reference)


def mark_overwritten(buffer: UOp) -> None:
    """Marks BUFFER node `buffer` as standing for contents a write has replaced: a graph still reading it is stale
    (every live tensor reading it was rebound), and realizing one raises instead of reading the new contents."""
    OVERWRITTEN.set(buffer, True)


def forget_realized_into(buffer: UOp) -> None:
    """Forgets every record of a value realized into BUFFER node `buffer` (it is being overwritten): later schedules
    compute those nodes again from their graphs."""
    references = RECORDED_INTO.get(buffer)
    RECORDED_INTO.discard(buffer)
    for reference in references or ():
        node = reference()
        if node is None:
            continue
        view = REALIZED.get(node)
        if view is not None and any(inner is buffer for inner in view.toposort()):
            REALIZED.discard(node)


class NormalizedGraph(NamedTuple):
    """The normalized requested nodes (`roots`, their SINK is `sink`) and the real BUFFER node of each input
    position (a named tuple: one is made on every realize)."""

    roots: tuple[UOp, ...]
    inputs: tuple[UOp, ...]
    constants: tuple[ConstKey, ...] = ()

    @property
    def sink(self) -> UOp:
        """The SINK of the normalized requested nodes (hash-consed: the same node for the same structure)."""
        return UOp(Ops.SINK, src=self.roots)


PlaceholderMemo = dict[tuple[int, int, DType, str], UOp]
"""Placeholder nodes by (position, size, dtype, device): hash-consed anyway, a memo only saves building them (the
realize engine keeps one in its ScheduleCache)."""


def _placeholder(position: int, node: UOp, memo: PlaceholderMemo | None) -> UOp:
    arg = node.arg
    key = (position, arg.size, node.dtype, arg.device)
    found = memo.get(key) if memo is not None else None
    if found is None:
        found = UOp(Ops.BUFFER, node.dtype, (), InputSlot(position, arg.size, arg.device))
        if memo is not None and len(memo) < 65536:
            memo[key] = found
    return found


ConstKey = tuple[type, object]


def const_key(value: ConstType) -> ConstKey:
    """`value` as a dict key that tells 0.0 from -0.0 and equals itself for NaN."""
    return (type(value), value.hex() if isinstance(value, float) else value)


def _constant_placeholder(position: int, node: UOp) -> UOp:
    # a lifted constant reads element 0 of a one-element input buffer
    return UOp(Ops.BUFFER, node.dtype, (), InputSlot(position, 1, str(node.src[0].arg)))


def normalize(
    uops: Sequence[UOp], lift: Callable[[int], bool] | None = None, placeholders: PlaceholderMemo | None = None
) -> NormalizedGraph:
    """The normalized form of the graphs of `uops` (see the module docstring).

    With `lift`, the constants (CONST nodes, not bools, not a requested constant broadcast) are numbered in walk
    order and their values listed in `constants`; each one `lift(number)` accepts becomes a one-element input
    buffer (its input is the CONST node itself, which the engine turns into a buffer), so graphs that differ only
    in those values share one schedule and one kernel. `placeholders`: a memo of input placeholder nodes to reuse.
    """
    lifting = lift is not None
    epoch = -1 if lifting else _epoch[0]  # marks describe graphs with their constants: not used when lifting
    if not lifting and len(uops) == 1:
        shallow = _normalize_shallow(uops[0], epoch, placeholders)
        if shallow is not None:
            return shallow
    kept = {const_node(uop) for uop in uops} if lifting else set()
    constants: list[ConstKey] = []
    inputs: list[UOp] = []
    resolved: dict[UOp, UOp] = {}
    self_epoch, overwritten, realized, pure_form = SELF_EPOCH.get, OVERWRITTEN.has, _realized_lookup(), PURE_FORM.get
    # iterative post-order walk (sources left to right); a realized node stands for its view (movement ops over
    # BUFFER nodes). A node is pushed again under its unresolved sources and finished when it comes back on top.
    stack: list[UOp] = list(reversed(uops))
    # nodes whose sources were pushed (`_descend`): on top again, every source is resolved (a DAG), so it is finished
    expanded: set[UOp] = set()
    while stack:
        node = stack[-1]
        if node in resolved:
            stack.pop()
            continue
        if node not in expanded:
            if self_epoch(node) == epoch:
                resolved[node] = pure_form(node) or node
                stack.pop()
                continue
            if node.op is Ops.BUFFER:
                if overwritten(node):
                    raise RuntimeError(
                        "one of the buffers this computation reads has been modified by an in-place operation "
                        f"(buffer {node.arg.number}, {node.arg.size} x {node.dtype!r}): a graph kept from before the "
                        "write (e.g. for backward()) cannot be computed again; compute it before the write"
                    )
                resolved[node] = _placeholder(len(inputs), node, placeholders)
                inputs.append(node)
                stack.pop()
                continue
            if (
                lift is not None
                and node.op is Ops.CONST
                and node.dtype != dtypes.bool
                and node.dtype.fmt is not None
                and node not in kept
            ):
                stack.pop()
                resolved[node] = node
                if lift(len(constants)):
                    slot = _constant_placeholder(len(inputs), node)
                    resolved[node] = UOp(Ops.RESHAPE, node.dtype, (slot,), ())
                    inputs.append(node)
                constants.append(const_key(node.arg))
                continue
            view = realized(node)
            if view is not None:
                if view in resolved:
                    resolved[node] = resolved[view]
                    stack.pop()
                else:
                    stack.append(view)
                continue
            if _descend(node, stack, resolved, expanded):
                continue
        stack.pop()
        _rebuild(node, resolved, lifting, epoch)
    return NormalizedGraph(tuple([resolved[uop] for uop in uops]), tuple(inputs), tuple(constants))


def _descend(node: UOp, stack: list[UOp], resolved: Mapping[UOp, object], expanded: set[UOp]) -> bool:
    """Pushes the unresolved sources of `node`, the top of a walk's `stack`; True (`node` then expanded) if any."""
    waiting = len(stack)
    for source in reversed(node.src):
        if source not in resolved:
            stack.append(source)
    if len(stack) == waiting:
        return False
    expanded.add(node)
    return True


def _rebuild(node: UOp, resolved: dict[UOp, UOp], lifting: bool, epoch: int) -> None:
    """Sets `resolved[node]`: `node` over its sources' normalized forms (itself when they are all unchanged), with a
    movement chain merged; when not lifting, marks a node over pure sources (no buffer, nothing realized) as pure
    for this epoch, with its normalized form."""
    sources = node.src
    if not sources:
        resolved[node] = node
        if not lifting:
            SELF_EPOCH.set(node, epoch)
        return
    new_sources = tuple([resolved[source] for source in sources])
    # UOps compare by identity: the same sources when every source normalized to itself
    if new_sources == sources:
        result = node
    else:
        result = UOp(node.op, node.dtype, new_sources, node.arg, node.tag)
        # normalizing keeps every shape (placeholders, views and merged chains have their node's): the rebuilt
        # node takes the original's known shape, so merging a chain above it infers none (a walk per merge)
        SHAPE.copy_missing(node, result)
    if new_sources[0].op is result.op and result.op in _CHAIN_OPS:
        result = merge_movement_link(result)  # chains merged here: `fold_movement_chains` is not needed first
    resolved[node] = result
    if lifting:
        return
    for source in sources:
        if SELF_EPOCH.get(source) != epoch:
            break
    else:  # a pure graph (no buffer, nothing realized): its form never changes
        SELF_EPOCH.set(node, epoch)
        if result is not node:
            PURE_FORM.set(node, result)


def normalize_shallow(root: UOp, placeholders: PlaceholderMemo | None = None) -> NormalizedGraph | None:
    """`normalize([root])` when `root` is one op over buffers and pure graphs (see `_normalize_shallow`), else None."""
    return _normalize_shallow(root, _epoch[0], placeholders)


def _normalize_shallow(root: UOp, epoch: int, placeholders: PlaceholderMemo | None) -> NormalizedGraph | None:
    """`normalize([root])` without the walk when `root` is an op (not a movement chain link, not realized) whose
    sources are each a BUFFER or a pure graph, one of them at least a BUFFER (the usual small op: an elementwise op
    of buffers and constants); None for any other node (then the walk runs). The same result: sources in order, one
    input per distinct buffer, pure sources in their merged form; the root is not pure, so nothing is marked."""
    if root.op in _CHAIN_OPS or not root.src or realized_view(root) is not None:
        return None
    inputs: list[UOp] = []
    new_sources: list[UOp] = []
    for source in root.src:
        if source.op is Ops.BUFFER:
            if OVERWRITTEN.has(source):
                return None  # the walk raises the error naming the buffer
            if source in inputs:
                new_sources.append(new_sources[root.src.index(source)])
                continue
            new_sources.append(_placeholder(len(inputs), source, placeholders))
            inputs.append(source)
        elif SELF_EPOCH.get(source) == epoch:
            new_sources.append(PURE_FORM.get(source) or source)
        else:
            return None
    if not inputs:
        return None
    result = UOp(root.op, root.dtype, tuple(new_sources), root.arg, root.tag)
    # `NormalizedGraph((result,), tuple(inputs))` as the named tuple's own `_make` builds it (in C)
    return tuple.__new__(NormalizedGraph, ((result,), tuple(inputs), ()))


class StructureKey(NamedTuple):
    """A request's structure (`key`: one number per requested node, then the constants' values) and the BUFFER
    nodes it reads (`inputs`, in `normalize`'s order)."""

    key: tuple[object, ...]
    inputs: tuple[UOp, ...]


class StructureNumbering:
    """The numbers `structure_key` gives node contents, in the order first seen: (op, dtype, arg, tag, the sources'
    numbers), a placeholder's (position, size, dtype, device), or a constant's (dtype, tag, its position among the
    request's constants: the values themselves go into the key, not into this table, so new constant values do not
    grow it). One per schedule cache (an engine's), which empties it when it grows past `limit` entries."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self.numbers: dict[tuple[object, ...], int] = {}

    def clear(self) -> None:
        """Forgets every number (keys made before must then be forgotten too: they could mean other graphs)."""
        self.numbers = {}


_CONSTANT = object()  # heads a constant's content in the numbering, apart from any node's


def structure_key(uops: Sequence[UOp], numbering: StructureNumbering) -> StructureKey | None:
    """A key for the structure `normalize(uops)` (without lifting) finds, computed without building its nodes
    (`StructureWalk.key`; None when a buffer was overwritten: `normalize` raises the error)."""
    walk = walk_structure(uops, numbering)
    return None if walk is None else StructureKey(walk.key, walk.inputs)


class StructureWalk:
    """One walk over the graphs of `uops`: their structure key and, when asked, their normalized forms.

    The walk is `normalize`'s (the same order, realized nodes standing for their views, buffers numbered as inputs
    where first reached), but each node becomes a number instead of a rebuilt node, and `key` is the roots' numbers
    followed by the constants' values in the order first reached. Equal keys mean equal normalized roots (by
    induction over the nodes: equal numbers and equal constants, equal normalized nodes; a pure part, which normalize
    keeps as its merged form, is numbered by its own structure), so a plan found by key runs with `inputs` as it would
    with `normalize`'s. Different keys may still normalize alike (merged movement chains): that only costs a lookup
    through `normalize`.

    The walk keeps the nodes in the order it finished them, so `normalized` builds `normalize`'s result (with or
    without lifting) by one pass over that list, without walking the graph again.
    """

    __slots__ = ("inputs", "key", "order", "replayable", "uops", "views")

    def __init__(
        self,
        uops: Sequence[UOp],
        key: tuple[object, ...],
        inputs: tuple[UOp, ...],
        order: list[UOp],
        views: dict[UOp, UOp],
        replayable: bool,
    ) -> None:
        self.uops, self.key, self.inputs, self.order, self.views = tuple(uops), key, inputs, order, views
        # False when the walk met a case `normalize` takes another way (a realized CONST): `normalized` then walks
        self.replayable = replayable

    def normalized(
        self, lift: Callable[[int], bool] | None = None, placeholders: PlaceholderMemo | None = None
    ) -> NormalizedGraph:
        """`normalize(self.uops, lift, placeholders)`, built from this walk's nodes (the same nodes, inputs, constants
        and marks on pure nodes)."""
        if not self.replayable:
            return normalize(self.uops, lift, placeholders)
        lifting = lift is not None
        epoch = -1 if lifting else _epoch[0]
        kept = {const_node(uop) for uop in self.uops} if lifting else set()
        constants: list[ConstKey] = []
        inputs: list[UOp] = []
        resolved: dict[UOp, UOp] = {}
        self_epoch, pure_form, views = SELF_EPOCH.get, PURE_FORM.get, self.views
        for node in self.order:
            if not lifting and self_epoch(node) == epoch:  # no node carries the mark of a lifting walk (-1)
                resolved[node] = pure_form(node) or node
                continue
            op = node.op
            if op is Ops.BUFFER:
                resolved[node] = _placeholder(len(inputs), node, placeholders)
                inputs.append(node)
                continue
            if op is Ops.CONST:
                if lift is not None:
                    resolved[node] = node
                    if node.dtype != dtypes.bool and node.dtype.fmt is not None and node not in kept:
                        if lift(len(constants)):
                            slot = _constant_placeholder(len(inputs), node)
                            resolved[node] = UOp(Ops.RESHAPE, node.dtype, (slot,), ())
                            inputs.append(node)
                        constants.append(const_key(node.arg))
                    continue
                for device in node.src:  # the DEVICE node the walk did not enter: pure, itself
                    if self_epoch(device) != epoch:
                        SELF_EPOCH.set(device, epoch)
                    resolved[device] = device
            view = views.get(node)
            if view is not None:
                resolved[node] = resolved[view]
                continue
            _rebuild(node, resolved, lifting, epoch)
        return NormalizedGraph(tuple([resolved[uop] for uop in self.uops]), tuple(inputs), tuple(constants))


def walk_structure(uops: Sequence[UOp], numbering: StructureNumbering) -> StructureWalk | None:
    """The `StructureWalk` of the graphs of `uops`, numbering node contents in `numbering`; None when a buffer was
    overwritten (`normalize` raises the error naming it)."""
    number = numbering.numbers.setdefault
    count = numbering.numbers.__len__
    resolved: dict[UOp, int] = {}
    inputs: list[UOp] = []
    constants: list[object] = []
    order: list[UOp] = []
    views: dict[UOp, UOp] = {}
    replayable = True
    overwritten, realized = OVERWRITTEN.has, _realized_lookup()
    stack: list[UOp] = list(reversed(uops))
    expanded: set[UOp] = set()
    while stack:
        node = stack[-1]
        if node in resolved:
            stack.pop()
            continue
        sources = node.src
        if node not in expanded:
            op = node.op
            if op is Ops.BUFFER:
                if overwritten(node):
                    return None
                arg = node.arg
                resolved[node] = number((Ops.BUFFER, len(inputs), arg.size, node.dtype, arg.device), count())
                inputs.append(node)
                order.append(node)
                stack.pop()
                continue
            if op is Ops.CONST:
                # its sources (the DEVICE node) as they are: a handful of long-lived nodes, one per device
                content = (_CONSTANT, node.dtype, content_arg(node.tag), len(constants), sources)
                resolved[node] = number(content, count())
                constants.append(content_arg(node.arg))
                order.append(node)
                replayable = replayable and realized(node) is None
                stack.pop()
                continue
            view = realized(node)  # never set inside a pure part (record_realized skips those)
            if view is not None:
                if view in resolved:
                    resolved[node] = resolved[view]
                    views[node] = view
                    order.append(node)
                    stack.pop()
                else:
                    stack.append(view)
                continue
            if _descend(node, stack, resolved, expanded):
                continue
        stack.pop()
        content = (node.op, node.dtype, content_arg(node.arg), content_arg(node.tag), *[resolved[s] for s in sources])
        resolved[node] = number(content, count())
        order.append(node)
    key = (*[resolved[uop] for uop in uops], *constants)
    return StructureWalk(uops, key, tuple(inputs), order, views, replayable)


def const_node(uop: UOp) -> UOp | None:
    """The CONST node under a constant broadcast (movement ops over a CONST), else None."""
    while uop.op in MOVEMENT_OPS or uop.op is Ops.DETACH:
        if uop.op is Ops.PAD:
            return None
        uop = uop.src[0]
    return uop if uop.op is Ops.CONST else None
