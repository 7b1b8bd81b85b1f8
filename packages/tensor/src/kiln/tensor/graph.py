"""The tensor graph: the primitive UOps a `Tensor` is built from, their payloads and builders (shape and device
inference: `kiln.tensor.graph_inference`).

A tensor graph is an immutable, hash-consed graph of `kiln.uops.UOp` nodes made only of these primitives:

| op | sources | arg | shape |
| --- | --- | --- | --- |
| BUFFER | () | `BufferArg(number, size, device)` | (size,) |
| CONST | (DEVICE,) | the scalar value (already truncated to the dtype) | () |
| DEVICE | () | device name | (not a value) |
| ALU ops, CAST, BITCAST | operands of one shape | None | the operands' shape |
| RESHAPE / EXPAND | (x,) | the new shape, tuple of ints | arg |
| PERMUTE | (x,) | the order, a permutation of range(ndim) | x's dims reordered |
| PAD | (x,) | ((before, after), ...) per dim, zero padding | dims grown |
| SHRINK | (x,) | ((start, end), ...) per dim | end - start per dim |
| FLIP | (x,) | tuple of bools, True = reverse that dim | x's shape |
| REDUCE_AXIS | (x,) | `ReduceArg(op, axes)`, op in ADD / MUL / MAX | reduced dims kept as 1 |
| CONTIGUOUS | (x,) | None | x's shape (forces a buffer) |
| DETACH | (x,) | None | x's shape (stops gradients; identity otherwise) |
| COPY | (x, DEVICE) | None | x's shape, on the DEVICE's device |
| ASSIGN | (target, value) | None | target's shape (writes value into target's buffer) |
| MULTI | one node per device | the split axis, or None (each source holds all of it) | the sources joined along it |

A node over MULTI nodes is a value on several devices (its device is the tuple of theirs; a CONST whose DEVICE names
a tuple is one on each): `kiln.tensor.sharding` rewrites such a graph into one graph per device before it is
scheduled.

The builders below check their operands and raise `ValueError` / `TypeError` naming the bad value; they also fold
no-ops (a reshape to the same shape, an identity permute, ...) so graphs stay small. They keep chains of movement
ops (a reshape of a reshape) as built: each link may be a tensor the user holds and differentiates with respect to.
`fold_movement_chains` collapses those chains into one op each before a graph is scheduled. `shape_of`,
`device_of` and `fold_movement_chains` are cached on each node.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from kiln.tensor.graph_inference import (
    DEVICE,
    ELEMENTWISE_OPS,
    MOVEMENT_OPS,
    SHAPE,
    Placement,
    Shape,
    _simplified,
    const_value,
    device_of,
    multi_shape,
    operands_agree,
    placement_of,
    shape_of,
)
from kiln.tensor.symbolic import (
    check_symbolic_size,
    format_shape,
    format_size,
    is_symbolic,
    pairs_symbolic,
    provably_le,
    sizes_equal,
)
from kiln.uops import ConstType, DType, GroupOp, NodeSlot, Ops, UOp, dtypes

# the builders, and the inference names (graph_inference) their users read from here
__all__ = [
    "DEVICE", "ELEMENTWISE_OPS", "FOLDED", "MOVEMENT_OPS", "REDUCE_OPS", "SHAPE", "BufferArg", "Placement", "ReduceArg",
    "Shape", "alu", "assign", "binary_alu", "bitcast", "buffer_uop", "cast", "const", "const_value", "contiguous",
    "copy_to", "detach", "device_of", "device_uop", "expand", "flip", "fold_movement_chains", "mark_folded",
    "merge_movement_link", "movement", "multi", "multi_shape", "pad", "permute", "placement_of", "reduce_axis",
    "reshape", "shape_of", "shrink",
]  # fmt: skip

REDUCE_OPS: Final = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})


class BufferArg(NamedTuple):
    """Payload of BUFFER: a realized device buffer known by its unique `number`, holding `size` elements on `device`.

    The runtime Buffer object itself lives in a side table (`kiln.tensor.realize.buffers`), keyed by `number`.
    A named tuple rather than a dataclass: every realize makes a BUFFER node per output, and hash-consing hashes its
    payload four times (made, freed), which a tuple does in C. Only BUFFER nodes carry it, so it never meets the
    payloads of other ops it could compare equal to as a tuple.
    """

    number: int
    size: int
    device: str


@dataclass(frozen=True)
class ReduceArg:
    """Payload of REDUCE_AXIS: reduce with `op` (ADD, MUL or MAX) over `axes` (sorted, unique; kept as size 1)."""

    op: Ops
    axes: tuple[int, ...]


_buffer_numbers = itertools.count()


# ---------------------------------------------------------------------------------------------------------------
# sources
# ---------------------------------------------------------------------------------------------------------------


def device_uop(device: Placement) -> UOp:
    """The DEVICE node naming `device` (or the tuple of devices of a sharded value)."""
    names = device if isinstance(device, tuple) else (device,)
    if not names or any(not isinstance(name, str) or not name for name in names):
        raise TypeError(f"a device name must be a non-empty str (or a tuple of them), got {device!r}")
    return UOp(Ops.DEVICE, arg=device)


def buffer_uop(device: str, size: int, dtype: DType) -> UOp:
    """A BUFFER node for a new (not yet attached) buffer of `size` elements of `dtype` on `device`."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"a buffer size must be a non-negative int, got {size!r}")
    _check_storable(dtype)
    return UOp(Ops.BUFFER, dtype, (), BufferArg(next(_buffer_numbers), size, device))


def _check_storable(dtype: DType) -> None:
    if not isinstance(dtype, DType):
        raise TypeError(f"expected a DType such as dtypes.float32, got {dtype!r}")
    if dtype.count != 1 or dtype in (dtypes.void, dtypes.index):
        raise TypeError(f"tensors hold scalar storable dtypes, got {dtype!r}")


def const(value: ConstType, dtype: DType, device: Placement, shape: Shape = ()) -> UOp:
    """The scalar `value` (truncated to `dtype`) on `device` (on each of a tuple of devices), broadcast to `shape` by
    RESHAPE + EXPAND."""
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"a constant must be a bool, int or float, got {value!r} of type {type(value).__name__}")
    key_shape = shape if type(shape) is tuple else _check_shape(shape, "const shape")
    # floats by their bits: 0.0 and -0.0 are equal as keys otherwise, and nan is not equal to itself
    kind = type(value).__name__
    return _const_node(kind, value.hex() if isinstance(value, float) else value, dtype, device, key_shape)


# Constants are built on every scalar operation: recent ones are remembered. A true cache, so it stays module-level: a
# pure function of immutable keys (type, value bits, dtype, device, shape) whose results are hash-consed, immutable
# nodes that never change meaning; bounded (least recently used out) and thread-safe (functools.lru_cache).
@functools.lru_cache(maxsize=1024)
def _const_node(kind: str, key: ConstType | str, dtype: DType, device: Placement, shape: Shape) -> UOp:
    value = float.fromhex(key) if isinstance(key, str) else key
    _check_storable(dtype)
    if isinstance(value, float) and not dtypes.is_float(dtype) and not math.isfinite(value) and dtype != dtypes.bool:
        raise ValueError(f"cannot represent {value!r} in {dtype!r}")
    scalar = UOp.const(dtype, value).replace(src=(device_uop(device),))
    checked = _check_shape(shape, "const shape")
    return expand(reshape(scalar, (1,) * len(checked)), checked) if checked else scalar


def _check_shape(shape: Sequence[int], what: str) -> Shape:
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"{what} must be a tuple of ints, got {shape!r}")
    for size in shape:
        if isinstance(size, bool) or not isinstance(size, int):
            if isinstance(size, UOp):
                check_symbolic_size(size, what)
                continue
            raise TypeError(f"{what} must be a tuple of ints, got {tuple(shape)!r}")
        if size < 0:
            raise ValueError(f"{what} must not have negative sizes, got {tuple(shape)!r}")
    return tuple(shape)


# ---------------------------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------------------------


def alu(op: Ops, *operands: UOp) -> UOp:
    """The ALU op `op` over `operands` of one shape and device (and one dtype; WHERE takes a bool condition)."""
    if op not in GroupOp.ALU:
        raise ValueError(f"{op!r} is not an ALU op; expected one of GroupOp.ALU")
    shape = operands_agree(operands, op, shape_of, "have one shape (broadcast first)")
    device = operands_agree(operands, op, placement_of, "be on one device (use .to(device))")
    node = operands[0].alu(op, *operands[1:])
    # an elementwise op has its operands' shape and device: cached now, so no inference runs for the new node
    SHAPE.setdefault(node, shape)
    DEVICE.setdefault(node, device)
    return node


def binary_alu(op: Ops, left: UOp, right: UOp) -> UOp:
    """The binary ALU op `op` of two nodes of one shape, device and dtype that the caller built so (a tensor and
    a constant broadcast over its shape): `alu`'s result without re-checking them."""
    if op not in GroupOp.Binary:
        raise ValueError(f"{op!r} is not a binary ALU op")
    if left.dtype is not right.dtype:
        raise TypeError(f"{op!r} operands must share one dtype, got {left.dtype!r} and {right.dtype!r}")
    node = UOp(op, dtypes.bool if op in GroupOp.Comparison else left.dtype, (left, right))
    # the operands' shape and device (one shape by the caller's construction)
    SHAPE.copy_missing(left, node)
    DEVICE.copy_missing(left, node)
    return node


def cast(x: UOp, dtype: DType) -> UOp:
    """`x` converted to `dtype` (the same node when it already has it)."""
    _check_storable(dtype)
    return x if x.dtype == dtype else UOp(Ops.CAST, dtype, (x,))


def bitcast(x: UOp, dtype: DType) -> UOp:
    """`x`'s bits reinterpreted as `dtype` of the same item size."""
    _check_storable(dtype)
    if dtype.itemsize != x.dtype.itemsize:
        raise TypeError(
            f"bitcast needs equal item sizes: {x.dtype!r} has {x.dtype.itemsize}, {dtype!r} {dtype.itemsize}"
        )
    return x if x.dtype == dtype else UOp(Ops.BITCAST, dtype, (x,))


# ---------------------------------------------------------------------------------------------------------------
# movement
# ---------------------------------------------------------------------------------------------------------------


def reshape(x: UOp, shape: Sequence[int]) -> UOp:
    """`x` with the same elements in row-major order viewed as `shape`."""
    old = shape_of(x)
    new = _check_shape(shape, "reshape shape")
    if (old_count := math.prod(old)) != (new_count := math.prod(new)) and not sizes_equal(old_count, new_count):
        raise ValueError(f"cannot reshape {old} ({math.prod(old)} elements) to {new} ({math.prod(new)} elements)")
    if new == old:
        return x
    return _moved(UOp(Ops.RESHAPE, x.dtype, (x,), new), x, new)


def permute(x: UOp, order: Sequence[int]) -> UOp:
    """`x` with its dims reordered: dim i of the result is dim order[i] of x."""
    shape = shape_of(x)
    order = tuple(order)
    if sorted(order) != list(range(len(shape))) or any(isinstance(axis, bool) for axis in order):
        raise ValueError(f"permute order {order} is not a permutation of range({len(shape)}) for shape {shape}")
    if order == tuple(range(len(shape))):
        return x
    return _moved(UOp(Ops.PERMUTE, x.dtype, (x,), order), x, tuple(shape[axis] for axis in order))


def expand(x: UOp, shape: Sequence[int]) -> UOp:
    """`x` with size-1 dims repeated to `shape` (same number of dims)."""
    old = shape_of(x)
    new = _check_shape(shape, "expand shape")
    if len(new) != len(old) or any(o != n and o != 1 for o, n in zip(old, new)):
        raise ValueError(f"cannot expand {old} to {new}: only size-1 dims can grow and the rank must match")
    if new == old:
        return x
    return _moved(UOp(Ops.EXPAND, x.dtype, (x,), new), x, new)


def _check_pairs(x: UOp, pairs: Sequence[tuple[int, int]], what: str) -> tuple[tuple[int, int], ...]:
    shape = shape_of(x)
    try:
        result = tuple((_pair_entry(a), _pair_entry(b)) for a, b in pairs)
    except (TypeError, ValueError):
        raise TypeError(f"{what} needs one (int, int) pair per dim, got {pairs!r}") from None
    if len(result) != len(shape) or any(isinstance(v, bool) or not isinstance(v, int) for pair in pairs for v in pair):
        if len(result) == len(shape) and all(isinstance(v, UOp) or type(v) is int for pair in pairs for v in pair):
            # symbolic entries (bound variables): simplified (an int when constant) and checked, off the int path
            result = tuple((_simplified(first), _simplified(second)) for first, second in result)
            for pair in result:
                for entry in pair:
                    if isinstance(entry, UOp):
                        check_symbolic_size(entry, what)
            return result
        raise ValueError(f"{what} needs one (int, int) pair per dim of shape {shape}, got {tuple(pairs)!r}")
    return result


def _pair_entry(value: object) -> int:
    # a symbolic entry (a UOp) passes through as is: its type is the runtime extension `kiln.tensor.symbolic` names
    return value if isinstance(value, UOp) else int(value)  # type: ignore[call-overload,return-value]


def _all_ints(shape: Sequence[int], pairs: Sequence[tuple[int, int]]) -> bool:
    return not is_symbolic(shape) and not pairs_symbolic(pairs)


def pad(x: UOp, padding: Sequence[tuple[int, int]]) -> UOp:
    """`x` with `before` zeros in front and `after` zeros behind along each dim (a bound Variable may be one)."""
    pairs = _check_pairs(x, padding, "pad")
    if not _all_ints(shape_of(x), pairs):
        return _symbolic_pad(x, pairs)
    if any(before < 0 or after < 0 for before, after in pairs):
        raise ValueError(f"pad amounts must be >= 0 (use shrink to cut), got {pairs}")
    if all(before == 0 and after == 0 for before, after in pairs):
        return x
    shape = tuple(size + before + after for size, (before, after) in zip(shape_of(x), pairs))
    return _moved(UOp(Ops.PAD, x.dtype, (x,), pairs), x, shape)


def _symbolic_pad(x: UOp, pairs: tuple[tuple[int, int], ...]) -> UOp:
    if any(not (provably_le(0, before) and provably_le(0, after)) for before, after in pairs):
        raise ValueError(f"pad amounts must be >= 0 for every value of their variables, got {pairs}")
    shape = tuple(_simplified(size + before + after) for size, (before, after) in zip(shape_of(x), pairs))
    return _moved(UOp(Ops.PAD, x.dtype, (x,), pairs), x, shape)


def shrink(x: UOp, bounds: Sequence[tuple[int, int]]) -> UOp:
    """The window [start, end) of `x` along each dim (a bound Variable may be a bound, or a size of `x`)."""
    shape = shape_of(x)
    pairs = _check_pairs(x, bounds, "shrink")
    if not _all_ints(shape, pairs):
        return _symbolic_shrink(x, shape, pairs)
    if any(not 0 <= start <= end <= size for (start, end), size in zip(pairs, shape)):
        raise ValueError(f"shrink bounds {pairs} must satisfy 0 <= start <= end <= size for shape {shape}")
    if all(start == 0 and end == size for (start, end), size in zip(pairs, shape)):
        return x
    return _moved(UOp(Ops.SHRINK, x.dtype, (x,), pairs), x, tuple(end - start for start, end in pairs))


def _format_pairs(pairs: tuple[tuple[int, int], ...]) -> str:
    return "(" + ", ".join(f"({format_size(start)}, {format_size(end)})" for start, end in pairs) + ")"


def _symbolic_shrink(x: UOp, shape: Shape, pairs: tuple[tuple[int, int], ...]) -> UOp:
    for (start, end), size in zip(pairs, shape):
        if not (provably_le(0, start) and provably_le(start, end) and provably_le(end, size)):
            raise ValueError(
                f"shrink bounds {_format_pairs(pairs)} must satisfy 0 <= start <= end <= size for shape "
                f"{format_shape(shape)} for every value of their variables ({_ranges(start, end, size)})"
            )
    if all(start == 0 and sizes_equal(end, size) for (start, end), size in zip(pairs, shape)):
        return x
    new_shape = tuple(_simplified(end if type(start) is int and start == 0 else end - start) for start, end in pairs)
    return _moved(UOp(Ops.SHRINK, x.dtype, (x,), pairs), x, new_shape)


def _ranges(*sizes: int) -> str:
    # each variable in `sizes` with its range, for error messages
    found: dict[str, str] = {}
    for size in sizes:
        if isinstance(size, UOp):
            for node in size.toposort():
                if node.op is Ops.DEFINE_VAR:
                    found[node.arg.name] = f"{node.arg.name!r} in [{node.arg.lo}, {node.arg.hi}]"
    return ", ".join(found.values()) or "no variables"


def flip(x: UOp, axes: Sequence[bool]) -> UOp:
    """`x` reversed along each dim whose flag is True."""
    shape = shape_of(x)
    flags = tuple(axes)
    if len(flags) != len(shape) or any(not isinstance(flag, bool) for flag in flags):
        raise ValueError(f"flip needs one bool per dim of shape {shape}, got {flags!r}")
    if not any(flags):
        return x
    return _moved(UOp(Ops.FLIP, x.dtype, (x,), flags), x, shape)


def _moved(node: UOp, source: UOp, shape: Shape) -> UOp:
    # a movement node's shape is known where it is built, and its device is its source's: cached now, so a node
    # built on it later infers nothing (without this, the first shape asked of an op over it walked the graph)
    SHAPE.setdefault(node, shape)
    DEVICE.copy_missing(source, node)
    return node


def movement(op: Ops, x: UOp, arg: object) -> UOp:
    """The movement op `op` (RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, FLIP) of `x` with payload `arg`."""
    builder = _MOVEMENT_BUILDERS.get(op)
    if builder is None:
        raise ValueError(f"{op!r} is not a movement op; expected one of {sorted(o.name for o in MOVEMENT_OPS)}")
    result: UOp = builder(x, arg)  # type: ignore[operator]
    return result


_MOVEMENT_BUILDERS: Final = {
    Ops.RESHAPE: reshape,
    Ops.PERMUTE: permute,
    Ops.EXPAND: expand,
    Ops.PAD: pad,
    Ops.SHRINK: shrink,
    Ops.FLIP: flip,
}


# the folded form of a node, or _UNCHANGED for a node that folds to itself (a node referring to itself would stay
# alive until a gc cycle pass)
FOLDED: NodeSlot[object] = NodeSlot("tensor_folded", __name__, "the node with its movement chains merged")


def fold_movement_chains(uop: UOp) -> UOp:
    """`uop`'s graph with each reshape of a reshape, permute of a permute and expand of an expand made one op.

    The builders keep such chains (every link can be a tensor the user holds); the scheduler indexes one movement op
    at a time, and one merged op gives it simpler index math. The result is cached on each node, so folding a graph
    built on an already folded one only visits the new nodes.
    """
    # iterative post-order walk over the nodes not folded yet (the cache entry doubles as the visited mark); a node
    # is pushed again under its unfolded sources and finished when it comes back on top with all of them folded
    folded_of = FOLDED.get
    if folded_of(uop) is not None:
        return _folded(uop)
    stack = [uop]
    while stack:
        node = stack[-1]
        changed = pending = False
        for source in node.src:  # a loop, not comprehensions: this walk runs on every realize
            found = folded_of(source)
            if found is None:
                stack.append(source)
                pending = True
            elif found is not _UNCHANGED:
                changed = True
        if pending:
            continue
        stack.pop()
        if folded_of(node) is not None:  # reached twice through different users before it was finished
            continue
        folded = node
        if changed:
            folded = node.replace(src=tuple([_folded(source) for source in node.src]))
            # same sources' shapes and devices, so the same shape and device: keep the cached ones
            shape, device = SHAPE.get(node), DEVICE.get(node)
            if shape is not None:
                SHAPE.setdefault(folded, shape)
            if device is not None:
                DEVICE.setdefault(folded, device)
        if folded.src and folded.src[0].op is folded.op:
            folded = merge_movement_link(folded)
        FOLDED.set(node, _UNCHANGED if folded is node else folded)
    return _folded(uop)


_UNCHANGED: Final = object()


def mark_folded(node: UOp) -> None:
    """Records that `node` (a new BUFFER node, say) has no movement chain to fold: later folds stop at it."""
    FOLDED.set(node, _UNCHANGED)


def _folded(node: UOp) -> UOp:
    found = FOLDED[node]
    return found if isinstance(found, UOp) else node


def merge_movement_link(node: UOp) -> UOp:
    """`node` (a RESHAPE / PERMUTE / EXPAND of a node of the same op) as one op of that kind over the inner source.

    Any other node comes back unchanged. `fold_movement_chains` applies it bottom-up, so chains of any length merge.
    """
    if not node.src or node.src[0].op is not node.op:
        return node
    source = node.src[0]
    base = source.src[0]
    if node.op is Ops.PERMUTE:
        order = tuple(source.arg[axis] for axis in node.arg)
        if order == tuple(range(len(order))):
            return base
        merged = UOp(Ops.PERMUTE, node.dtype, (base,), order)
    elif node.op in (Ops.RESHAPE, Ops.EXPAND):
        if shape_of(base) == node.arg:
            return base
        merged = UOp(node.op, node.dtype, (base,), node.arg)
    else:
        return node
    SHAPE.setdefault(merged, shape_of(node))
    return merged


# ---------------------------------------------------------------------------------------------------------------
# reduce and the rest
# ---------------------------------------------------------------------------------------------------------------


def reduce_axis(x: UOp, op: Ops, axes: Sequence[int]) -> UOp:
    """`x` reduced with `op` (ADD, MUL, MAX) over `axes`; reduced dims stay as size 1."""
    if op not in REDUCE_OPS:
        raise ValueError(f"reduce op must be Ops.ADD, Ops.MUL or Ops.MAX, got {op!r}")
    shape = shape_of(x)
    normalized = tuple(sorted(set(axes)))
    if any(isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(shape) for axis in normalized):
        raise ValueError(f"reduce axes {tuple(axes)} must be ints in range({len(shape)}) for shape {shape}")
    # reducing only size-1 dims changes nothing
    if all(shape[axis] == 1 for axis in normalized):
        return x
    return UOp(Ops.REDUCE_AXIS, x.dtype, (x,), ReduceArg(op, normalized))


def contiguous(x: UOp) -> UOp:
    """`x` forced into its own buffer when scheduled."""
    return x if x.op is Ops.CONTIGUOUS else UOp(Ops.CONTIGUOUS, x.dtype, (x,))


def detach(x: UOp) -> UOp:
    """`x` as a gradient stop (the identity for the scheduler)."""
    return x if x.op is Ops.DETACH else UOp(Ops.DETACH, x.dtype, (x,))


def copy_to(x: UOp, device: Placement) -> UOp:
    """`x` copied to `device` (to each of a tuple of devices: replicated; from several devices to one: gathered)."""
    source = placement_of(x)
    if source == device:
        return x
    if isinstance(source, tuple):
        raise ValueError(
            f"cannot copy a value sharded over {list(source)} to {device!r} in the graph: gather it first "
            "(kiln.tensor.multi)"
        )
    return UOp(Ops.COPY, x.dtype, (x, device_uop(device)))


def assign(target: UOp, value: UOp) -> UOp:
    """Write `value` into the buffer behind `target` (same shape, dtype and device); the node's value is `value`."""
    if shape_of(target) != shape_of(value):
        raise ValueError(f"assign: value shape {shape_of(value)} must equal the target shape {shape_of(target)}")
    if target.dtype != value.dtype:
        raise TypeError(f"assign: value dtype {value.dtype!r} must equal the target dtype {target.dtype!r}")
    if placement_of(target) != placement_of(value):
        raise ValueError(
            f"assign: value device {placement_of(value)!r} must equal the target device {placement_of(target)!r}"
        )
    return UOp(Ops.ASSIGN, target.dtype, (target, value))


def multi(shards: Sequence[UOp], axis: int | None) -> UOp:
    """One value over several devices: `shards[i]` on its own device, joined along `axis` (None: each holds all of it).

    The shards share one dtype and, outside `axis`, one shape (with `axis` None: one shape); their devices differ.
    """
    if not shards:
        raise ValueError("a MULTI node needs at least one shard, got none")
    shapes = [shape_of(shard) for shard in shards]
    devices = [device_of(shard) for shard in shards]
    if len(set(devices)) != len(devices):
        raise ValueError(f"the shards of a MULTI node must be on distinct devices, got {devices}")
    first = shards[0]
    if axis is not None and not (isinstance(axis, int) and not isinstance(axis, bool) and 0 <= axis < len(shapes[0])):
        raise ValueError(f"MULTI axis must be None or an int in range({len(shapes[0])}), got {axis!r}")
    for index, (shard, shape) in enumerate(zip(shards, shapes)):
        if shard.dtype != first.dtype:
            raise TypeError(f"MULTI shard {index} has dtype {shard.dtype!r}, shard 0 has {first.dtype!r}")
        outside = [size for dim, size in enumerate(shape) if dim != axis]
        if len(shape) != len(shapes[0]) or outside != [size for dim, size in enumerate(shapes[0]) if dim != axis]:
            raise ValueError(f"MULTI shard {index} has shape {shape}, which does not fit shard 0's {shapes[0]}")
    node = UOp(Ops.MULTI, first.dtype, tuple(shards), axis)
    SHAPE.setdefault(node, shapes[0] if axis is None else multi_shape(shapes, axis))
    DEVICE.setdefault(node, tuple(devices))
    return node
