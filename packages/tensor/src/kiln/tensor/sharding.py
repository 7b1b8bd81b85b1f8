"""Lowering a sharded tensor graph to one graph per device, before it is scheduled.

A sharded value is a MULTI node (one source per device, `arg` the split axis or None when every device holds all of
it); the ops built over it are ordinary tensor-graph nodes whose placement is the tuple of devices. `pm_lower_multi`
pushes each such op through the MULTI nodes below it, bottom-up, until the graph is one MULTI node over per-device
graphs that the scheduler plans as usual (each device's kernels on its own queue):

- a constant on a tuple of devices is one constant per device (replicated);
- an elementwise op runs per device once its operands share one layout: a replicated operand is sliced to the
  split one's parts, an operand split otherwise is gathered first (`allgather`) and then sliced;
- a reduction runs per device; over the split axis every device holds a partial result, which a ring `allreduce`
  combines (the result is replicated);
- a permute moves the split axis, a reshape keeps it when each device's part stays one block of the result, an
  expand grows the other axes; a reshape that would cut a device's part, and a pad, shrink or flip along the split
  axis, gather first;
- a copy to the same devices keeps the layout, a copy of a one-device value to several devices replicates it.

Column- and row-parallel matmul are no rules of their own: a matmul is a reshape, an expand, a multiply and a sum,
and the sum over a split contracted axis ends in the allreduce.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from kiln.tensor import graph
from kiln.uops import GroupOp, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

__all__ = [
    "LoweredRoots",
    "allgather_shards",
    "allreduce_shards",
    "gathered",
    "lower_roots",
    "lower_sharded",
    "pieces_like",
    "pm_lower_multi",
]

Bounds = tuple[tuple[int, int], ...]


def bounds_of(multi: UOp) -> Bounds:
    """The (start, end) along the split axis of each shard of a split MULTI node."""
    assert multi.arg is not None
    result, start = [], 0
    for shard in multi.src:
        size = graph.shape_of(shard)[multi.arg]
        result.append((start, start + size))
        start += size
    return tuple(result)


def _devices(multi: UOp) -> tuple[str, ...]:
    return tuple(graph.device_of(shard) for shard in multi.src)


def _window(shape: Sequence[int], axis: int, bound: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    return tuple(bound if dim == axis else (0, size) for dim, size in enumerate(shape))


def _joined(pieces: Sequence[UOp], axis: int) -> UOp:
    """`pieces` (on one device) concatenated along `axis`: each padded to the whole and summed (or-ed for bool)."""
    total = sum(graph.shape_of(piece)[axis] for piece in pieces)
    combine = Ops.OR if pieces[0].dtype == dtypes.bool else Ops.ADD
    result: UOp | None = None
    start = 0
    for piece in pieces:
        shape = graph.shape_of(piece)
        size = shape[axis]
        padding = tuple((start, total - start - size) if dim == axis else (0, 0) for dim in range(len(shape)))
        padded = graph.pad(piece, padding)
        result = padded if result is None else graph.alu(combine, result, padded)
        start += size
    assert result is not None
    return result


_COMBINE: Final = {Ops.ADD: Ops.ADD, Ops.MUL: Ops.MUL, Ops.MAX: Ops.MAX}
_COMBINE_BOOL: Final = {Ops.ADD: Ops.OR, Ops.MUL: Ops.AND, Ops.MAX: Ops.OR}


def allreduce_shards(shards: Sequence[UOp], op: Ops) -> list[UOp]:
    """The elementwise reduction with `op` (ADD, MUL or MAX) of `shards` (one per device, one shape), on every device.

    A ring: the flat data is cut into one chunk per device; in `n - 1` steps each device sends one chunk to the next
    while receiving another (reduce-scatter), then `n - 1` steps hand every reduced chunk around (all-gather).
    """
    count = len(shards)
    if count == 1:
        return list(shards)
    combine = (_COMBINE_BOOL if shards[0].dtype == dtypes.bool else _COMBINE)[op]
    devices = [graph.device_of(shard) for shard in shards]
    shape = graph.shape_of(shards[0])
    size = math.prod(shape)
    if size < count:  # too few elements for one chunk per device: every device reduces all the copies itself
        results = []
        for name in devices:
            total = graph.copy_to(shards[0], name)
            for shard in shards[1:]:
                total = graph.alu(combine, total, graph.copy_to(shard, name))
            results.append(total)
        return results
    base, extra = divmod(size, count)
    starts = [index * base + min(index, extra) for index in range(count + 1)]
    chunks = [
        [graph.shrink(graph.reshape(shard, (size,)), ((starts[i], starts[i + 1]),)) for i in range(count)]
        for shard in shards
    ]
    for step in range(count - 1):  # reduce-scatter: device d ends holding chunk d reduced over all devices
        sent = [(device, (device - 1 - step) % count) for device in range(count)]
        received = [graph.copy_to(chunks[device][chunk], devices[(device + 1) % count]) for device, chunk in sent]
        for (device, chunk), value in zip(sent, received):
            target = (device + 1) % count
            chunks[target][chunk] = graph.alu(combine, chunks[target][chunk], value)
    for step in range(count - 1):  # all-gather: every reduced chunk goes around the ring
        sent = [(device, (device - step) % count) for device in range(count)]
        received = [graph.copy_to(chunks[device][chunk], devices[(device + 1) % count]) for device, chunk in sent]
        for (device, chunk), value in zip(sent, received):
            chunks[(device + 1) % count][chunk] = value
    return [graph.reshape(_joined(row, 0), shape) for row in chunks]


def allgather_shards(multi: UOp) -> list[UOp]:
    """The whole value of split MULTI node `multi` on each of its devices (every shard copied to every device)."""
    devices = _devices(multi)
    return [_joined([graph.copy_to(shard, device) for shard in multi.src], multi.arg) for device in devices]


def replicated(multi: UOp) -> UOp:
    """`multi` held whole on every device."""
    return multi if multi.arg is None else graph.multi(allgather_shards(multi), None)


def _laid_out(multi: UOp, axis: int, bounds: Bounds) -> list[UOp]:
    """The shards of `multi` cut to `bounds` along `axis` (gathered first when it is split otherwise)."""
    if multi.arg == axis and bounds_of(multi) == bounds:
        return list(multi.src)
    whole = replicated(multi)
    result = []
    for shard, bound in zip(whole.src, bounds):
        shape = graph.shape_of(shard)
        # an axis of size 1 broadcasts: every device takes it whole
        result.append(shard if shape[axis] == 1 else graph.shrink(shard, _window(shape, axis, bound)))
    return result


# ---------------------------------------------------------------------------------------------------------------
# the rules
# ---------------------------------------------------------------------------------------------------------------


def _const_on_devices(device: UOp, constant: UOp) -> UOp | None:
    if not isinstance(device.arg, tuple):
        return None
    return graph.multi([constant.replace(src=(graph.device_uop(name),)) for name in device.arg], None)


def _elementwise(node: UOp) -> UOp | None:
    if not any(source.op is Ops.MULTI for source in node.src):
        return None
    lead = next((source for source in node.src if source.op is Ops.MULTI and source.arg is not None), None)
    if lead is None:
        return graph.multi([node.replace(src=row) for row in zip(*(source.src for source in node.src))], None)
    bounds = bounds_of(lead)
    columns = [_laid_out(source, lead.arg, bounds) for source in node.src]
    return graph.multi([node.replace(src=tuple(row)) for row in zip(*columns)], lead.arg)


def _reduce(node: UOp, multi: UOp) -> UOp:
    partial = [graph.reduce_axis(shard, node.arg.op, node.arg.axes) for shard in multi.src]
    if multi.arg is None or multi.arg not in node.arg.axes:
        return graph.multi(partial, multi.arg)
    return graph.multi(allreduce_shards(partial, node.arg.op), None)


def _per_shard(node: UOp, multi: UOp) -> UOp:
    return graph.multi([node.replace(src=(shard, *node.src[1:])) for shard in multi.src], multi.arg)


def _permute(node: UOp, multi: UOp) -> UOp:
    axis = None if multi.arg is None else node.arg.index(multi.arg)
    return graph.multi([graph.permute(shard, node.arg) for shard in multi.src], axis)


def _expand(node: UOp, multi: UOp) -> UOp:
    shards = []
    for shard in multi.src:
        shape = graph.shape_of(shard)
        shards.append(graph.expand(shard, tuple(shape[d] if d == multi.arg else s for d, s in enumerate(node.arg))))
    return graph.multi(shards, multi.arg)


def _reshape(node: UOp, multi: UOp) -> UOp:
    new_shape: tuple[int, ...] = node.arg
    if multi.arg is None:
        return graph.multi([graph.reshape(shard, new_shape) for shard in multi.src], None)
    old_shape = graph.shape_of(multi)
    axis = multi.arg
    prefix, inner = math.prod(old_shape[:axis]), math.prod(old_shape[axis + 1 :])
    # the result axis that takes the split one: the axes before it hold exactly the axes before the split axis
    target = next((j for j in range(len(new_shape)) if math.prod(new_shape[:j]) == prefix and new_shape[j] != 1), None)
    if target is not None:
        rows = math.prod(new_shape[target + 1 :])
        bounds = bounds_of(multi)
        if all(((end - start) * inner) % rows == 0 and (start * inner) % rows == 0 for start, end in bounds):
            shards = []
            for shard, (start, end) in zip(multi.src, bounds):
                local = (*new_shape[:target], (end - start) * inner // rows, *new_shape[target + 1 :])
                shards.append(graph.reshape(shard, local))
            return graph.multi(shards, target)
    # a device's part would be cut: gather, then reshape the whole
    return graph.multi([graph.reshape(shard, new_shape) for shard in replicated(multi).src], None)


def _movement(node: UOp, multi: UOp) -> UOp:
    if node.op is Ops.PERMUTE:
        return _permute(node, multi)
    if node.op is Ops.EXPAND:
        return _expand(node, multi)
    if node.op is Ops.RESHAPE:
        return _reshape(node, multi)
    # PAD / SHRINK / FLIP: per device unless they touch the split axis, which is gathered first
    axis = multi.arg
    touches = axis is not None and (
        (node.op is Ops.FLIP and node.arg[axis])
        or (node.op is Ops.PAD and node.arg[axis] != (0, 0))
        or (node.op is Ops.SHRINK and node.arg[axis] != (0, graph.shape_of(multi)[axis]))
    )
    if touches:
        multi = replicated(multi)
    shards = []
    for shard in multi.src:
        arg = node.arg
        if node.op is Ops.SHRINK and multi.arg is not None:  # the split axis stays whole on each device
            arg = tuple((0, graph.shape_of(shard)[d]) if d == multi.arg else pair for d, pair in enumerate(arg))
        shards.append(graph.movement(node.op, shard, arg))
    return graph.multi(shards, multi.arg)


def _replicate(node: UOp) -> UOp | None:
    # a one-device value copied to several devices: one copy on each
    target, source = node.src[1].arg, node.src[0]
    if not isinstance(target, tuple) or source.op is Ops.MULTI:
        return None
    return graph.multi([graph.copy_to(source, name) for name in target], None)


def _copy(node: UOp, multi: UOp) -> UOp:
    target = node.src[1].arg
    if target != _devices(multi):
        raise ValueError(
            f"a tensor sharded over {list(_devices(multi))} cannot be copied to {target!r} in the graph; gather it "
            "(`.to(device)`) or shard it again"
        )
    return multi


def _assign(target: UOp, value: UOp) -> UOp | None:
    if target.op is not Ops.MULTI and value.op is not Ops.MULTI:
        return None
    if target.op is not Ops.MULTI or value.op is not Ops.MULTI:
        raise ValueError("assign of a sharded value needs a sharded target on the same devices")
    if target.arg is None:
        values = list(replicated(value).src)
    else:
        values = _laid_out(value, target.arg, bounds_of(target))
    return graph.multi([graph.assign(shard, piece) for shard, piece in zip(target.src, values)], target.arg)


_MULTI = UPat(Ops.MULTI, name="multi")

pm_lower_multi: Final = PatternMatcher(
    [
        (UPat(Ops.CONST, src=(UPat(Ops.DEVICE, name="device"),), name="constant"), _const_on_devices),
        (UPat(GroupOp.Elementwise, name="node"), _elementwise),
        (UPat(Ops.REDUCE_AXIS, src=(_MULTI,), name="node"), _reduce),
        (UPat(GroupOp.Movement, src=(_MULTI,), name="node"), _movement),
        (UPat((Ops.CONTIGUOUS, Ops.DETACH), src=(_MULTI,), name="node"), _per_shard),
        (UPat(Ops.COPY, src=(_MULTI, UPat(Ops.DEVICE)), name="node"), _copy),
        (UPat(Ops.COPY, name="node"), _replicate),
        (UPat(Ops.ASSIGN, src=(UPat.var("target"), UPat.var("value"))), _assign),
    ]
)
"""Pushes every op on several devices through the MULTI nodes below it (see the module docstring)."""


def lower_sharded(root: UOp) -> UOp:
    """`root` (a node on several devices) as one MULTI node over one graph per device."""
    lowered = graph_rewrite(root, pm_lower_multi, name="lower multi")
    if lowered.op is not Ops.MULTI:
        raise ValueError(f"lowering a sharded {root.op.name} node left a {lowered.op.name} node, not a MULTI")
    return lowered


def pieces_like(value: UOp, like: UOp) -> list[UOp]:
    """The per-device pieces of `value` (a node on `like`'s devices, of its shape) laid out as MULTI node `like`:
    piece i has shard i's part of the split axis (the whole value when `like` is replicated), on shard i's device."""
    lowered = lower_sharded(value)
    if like.arg is None:
        return list(replicated(lowered).src)
    return _laid_out(lowered, like.arg, bounds_of(like))


def gathered(value: UOp, device: str) -> UOp:
    """`value` (a node on several devices) whole on one `device`: the shards copied there and joined (a replicated
    value: the copy on `device`, else the first one, copied)."""
    lowered = lower_sharded(value)
    if lowered.arg is None:
        devices = _devices(lowered)
        return graph.copy_to(lowered.src[devices.index(device) if device in devices else 0], device)
    return _joined([graph.copy_to(shard, device) for shard in lowered.src], lowered.arg)


@dataclass(frozen=True)
class RootLayout:
    """Where a sharded realize root's per-device graphs sit in `LoweredRoots.nodes`, and its split axis."""

    first: int
    count: int
    axis: int | None


class LoweredRoots(NamedTuple):
    """Realize roots with every sharded one replaced by its per-device graphs (`nodes`); `join` makes the views
    the scheduler returns for `nodes` into one view per root (a MULTI node over a sharded root's shard views).

    A named tuple: every realize makes one, and the usual one (no sharded root) must cost next to nothing.
    """

    nodes: Sequence[UOp]
    layout: tuple[RootLayout | int, ...]  # per root: a sharded root's layout, or the index of a plain root's node

    def join(self, views: list[UOp]) -> list[UOp]:
        """The view of each root, from the views of `nodes`."""
        if not self.layout:
            return views
        return [
            views[entry]
            if isinstance(entry, int)
            else graph.multi(views[entry.first : entry.first + entry.count], entry.axis)
            for entry in self.layout
        ]


def lower_roots(roots: Sequence[UOp]) -> LoweredRoots:
    """The roots of one realize, each sharded one lowered to its per-device graphs (the others as they are)."""
    placement = graph.DEVICE.get
    for root in roots:  # a loop, not any(): this runs on every realize
        found = placement(root)
        if found is None or type(found) is tuple:
            break
    else:
        return LoweredRoots(roots, ())
    if not any(isinstance(graph.placement_of(root), tuple) for root in roots):
        return LoweredRoots(roots, ())
    nodes: list[UOp] = []
    layout: list[RootLayout | int] = []
    for root in roots:
        if not isinstance(graph.placement_of(root), tuple):
            layout.append(len(nodes))
            nodes.append(root)
            continue
        lowered = lower_sharded(root)
        layout.append(RootLayout(len(nodes), len(lowered.src), lowered.arg))
        nodes.extend(lowered.src)
    return LoweredRoots(nodes, tuple(layout))
