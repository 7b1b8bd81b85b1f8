"""Shape and device inference for tensor-graph nodes (`kiln.tensor.graph`'s primitives): the shape and the
placement of a node, computed from its op, payload and sources and cached on the node in the `SHAPE` and `DEVICE`
node slots, and the checks the builders run on their operands' shapes and devices. `kiln.tensor.graph` re-exports
the public names: its builders are the usual way in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, TypeVar
from typing import cast as typing_cast

from kiln.tensor.symbolic import settle
from kiln.uops import ConstType, GroupOp, NodeSlot, Ops, UOp

Shape = tuple[int, ...]

Placement = str | tuple[str, ...]
"""Where a node lives: one device name, or the tuple of the devices a MULTI node (and any node over one) spans."""

MOVEMENT_OPS: Final = GroupOp.Movement
ELEMENTWISE_OPS: Final = GroupOp.Elementwise


def _fail_shape(uop: UOp, message: str) -> ValueError:
    return ValueError(f"{uop.op.name}: {message}")


T = TypeVar("T")

SHAPE: NodeSlot[Shape] = NodeSlot("tensor_shape", __name__, "the shape of a tensor-graph node")
DEVICE: NodeSlot[Placement] = NodeSlot(
    "tensor_device", __name__, "the device (or devices) a tensor-graph node lives on"
)


def shape_of(uop: UOp) -> Shape:
    """The shape of a tensor-graph node (cached on the node). Raises ValueError for nodes that have no shape."""
    cached = SHAPE.get(uop)
    if cached is not None:
        return cached
    ready = True  # a loop, not all() over a generator: this runs several times per op built
    for source in uop.src:
        if source.op is not Ops.DEVICE and SHAPE.missing(source):
            ready = False
            break
    return _infer_and_cache(uop, SHAPE, _infer_shape, ready)


def _infer_and_cache(uop: UOp, slot: NodeSlot[T], infer: Callable[[UOp], T], sources_ready: bool) -> T:
    """`infer(uop)` stored in `slot`; when the sources `infer` reads lack their value, first for every node below
    that lacks it (an iterative walk: deep graphs never hit the recursion limit)."""
    if sources_ready:  # the usual case, a new node over inferred sources: no walk
        value = infer(uop)
        slot.set(uop, value)
        return value
    for node in uop.toposort(gate=slot.missing):
        if slot.missing(node):
            slot.set(node, infer(node))
    return slot[uop]


def _infer_shape(uop: UOp) -> Shape:
    op = uop.op
    if op is Ops.BUFFER:
        return (uop.arg.size,)
    if op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
        return ()
    if op is Ops.DEVICE:
        return ()
    if op in (Ops.RESHAPE, Ops.EXPAND):
        return tuple(uop.arg)
    sources: list[Shape] = [SHAPE[source] for source in uop.src if source.op is not Ops.DEVICE]
    if not sources:
        raise _fail_shape(uop, "has no shaped source")
    first = sources[0]
    if op in ELEMENTWISE_OPS:
        return first
    if op is Ops.PERMUTE:
        return tuple(first[axis] for axis in uop.arg)
    if op is Ops.PAD:
        return _settled(tuple(size + before + after for size, (before, after) in zip(first, uop.arg)))
    if op is Ops.SHRINK:
        return _settled(tuple(end if type(start) is int and start == 0 else end - start for start, end in uop.arg))
    if op is Ops.REDUCE_AXIS:
        return tuple(1 if axis in uop.arg.axes else size for axis, size in enumerate(first))
    if op in (Ops.FLIP, Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY, Ops.ASSIGN):
        return first
    if op is Ops.MULTI:
        return first if uop.arg is None else multi_shape(sources, uop.arg)
    raise _fail_shape(uop, f"{op!r} is not a tensor-graph primitive")


def _settled(shape: Shape) -> Shape:
    # a shape with its symbolic entries simplified, as the builders make them
    return shape if all(type(size) is int for size in shape) else tuple(_simplified(size) for size in shape)


def multi_shape(shards: Sequence[Shape], axis: int) -> Shape:
    """The shape of shards joined along `axis`."""
    first = shards[0]
    return (*first[:axis], sum(shard[axis] for shard in shards), *first[axis + 1 :])


def placement_of(uop: UOp) -> Placement:
    """The device name a tensor-graph node lives on, or the tuple of devices of a sharded one (cached on the node)."""
    cached = DEVICE.get(uop)
    if cached is not None:
        return cached
    # a node's device is its first source's (DEVICE, BUFFER and COPY name their own): follow the first sources down
    # to a node that knows its device (a loop, however deep), and cache it on every node passed
    chain = []
    node = uop
    while (found := DEVICE.get(node)) is None:
        if node.op in _OWN_DEVICE_OPS or not node.src:
            found = _infer_device(node)
            DEVICE.set(node, found)
            break
        chain.append(node)
        node = node.src[0]
    for passed in chain:
        DEVICE.set(passed, found)
    return found


_OWN_DEVICE_OPS: Final = frozenset({Ops.DEVICE, Ops.BUFFER, Ops.COPY, Ops.MULTI})


def _infer_device(uop: UOp) -> Placement:
    if uop.op is Ops.DEVICE:
        return uop.arg if isinstance(uop.arg, tuple) else str(uop.arg)
    if uop.op is Ops.BUFFER:
        return str(uop.arg.device)
    if uop.op is Ops.COPY:
        return _infer_device(uop.src[1])
    if uop.op is Ops.MULTI:
        return tuple(device_of(source) for source in uop.src)
    if not uop.src:
        raise ValueError(f"{uop.op.name} node has no device: a CONST needs a DEVICE source")
    return DEVICE[uop.src[0]]


def const_value(uop: UOp) -> ConstType | None:
    """The value of a node that is a constant broadcast (movement ops over a CONST), else None."""
    while uop.op in MOVEMENT_OPS or uop.op is Ops.DETACH:
        if uop.op is Ops.PAD:
            return None  # the padding is zero, not the constant
        uop = uop.src[0]
    if uop.op is not Ops.CONST:
        return None
    value: ConstType = uop.arg
    return value


def operands_agree(uops: Sequence[UOp], op: Ops, fact: Callable[[UOp], T], requirement: str) -> T:
    """`fact` (shape_of, placement_of) of the operands of `op`, which must agree; ValueError naming `requirement`
    and each operand's value otherwise."""
    # plain loop, no generators: this runs twice on every elementwise op built
    first = fact(uops[0])
    for u in uops[1:]:
        if fact(u) != first:
            raise ValueError(f"{op.name}: operands must {requirement}, got {[fact(u) for u in uops]}")
    return first


def device_of(uop: UOp) -> str:
    """The one device `uop` lives on (`placement_of`); ValueError naming the devices for a node over several."""
    device = DEVICE.get(uop)  # the cached placement first: this runs for every node scheduled
    if type(device) is str:
        return device
    device = placement_of(uop)
    if isinstance(device, tuple):
        raise ValueError(f"expected a tensor on one device, got one sharded over {list(device)}")
    return device


def _simplified(size: int) -> int:
    # a symbolic size in its simplest form (so `x[:v]` has the very variable as its size); ints unchanged
    return typing_cast(int, settle(size))
