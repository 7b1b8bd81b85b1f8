"""GROUP_REDUCE axes -> a reduce shared by the threads of a block through local memory.

    REDUCE(value, r, g)          g: GROUP_REDUCE axis (a local thread index)
becomes
    partial = REDUCE(value, r)                      each thread reduces its share
    STORE(INDEX(buf, slot), partial); BARRIER       buf = DEFINE_LOCAL, one slot per thread (and expanded lane)
    REDUCE(LOAD(INDEX(AFTER(buf, BARRIER), slot with g -> g')), g')   every thread reduces the partials
Inside an outer loop a second BARRIER precedes the store, so no thread overwrites partials others still read.
Global stores are then gated to the threads with g == 0, so each output is written once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.codegen.loop_structure import kernel_ranges, open_ranges
from kiln.uops import AxisKind, MemoryScope, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite


@dataclass
class GroupReduceContext:
    """State of one group-reduce lowering: the block's thread axes, fresh axis numbers, buffer slots, group axes."""

    local_axes: list[UOp]
    next_axis: int
    next_slot: int = 0
    group_axes: list[UOp] = field(default_factory=list)


def _flat_index(ranges: list[UOp]) -> tuple[UOp, int]:
    index = UOp.const(dtypes.index, 0)
    stride = 1
    for rng in reversed(ranges):
        index = index + rng * stride if stride != 1 else index + rng
        stride *= rng.src[0].arg
    return index, stride


def _lower_group_reduce(ctx: GroupReduceContext, reduction: UOp) -> UOp | None:
    groups = [r for r in reduction.src[1:] if r.arg.kind is AxisKind.GROUP_REDUCE]
    if not groups:
        return None
    value = reduction.src[0]
    others = [r for r in reduction.src[1:] if r.arg.kind is not AxisKind.GROUP_REDUCE]
    partial = UOp(Ops.REDUCE, reduction.dtype, (value, *others), reduction.arg) if others else value
    # every lane gets its own slot: the output's UPCAST lanes and the UNROLL lanes of an outer reduce the partial
    # is computed for (sum of row maxima with the rows unrolled: one max per row, not one slot they all overwrite)
    upcasts = sorted(
        (r for r in open_ranges(partial) - set(others) if r.arg.kind in (AxisKind.UPCAST, AxisKind.UNROLL)),
        key=lambda r: r.arg.axis,
    )
    index, size = _flat_index([*ctx.local_axes, *upcasts])
    buffer = UOp(Ops.DEFINE_LOCAL, reduction.dtype.ptr(size, MemoryScope.LOCAL), (), ctx.next_slot)
    ctx.next_slot += 1
    target = buffer
    if any(r.arg.kind in (AxisKind.LOOP, AxisKind.REDUCE) for r in open_ranges(partial) - set(others)):
        # inside an outer loop the buffer is reused every iteration: wait until every thread read the last partials
        target = UOp(Ops.AFTER, buffer.dtype, (buffer, UOp(Ops.BARRIER, dtypes.void, (partial,))))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buffer.dtype, (target, index)), partial))
    barrier = UOp(Ops.BARRIER, dtypes.void, (store,))
    walkers = []
    for group in groups:
        walkers.append(UOp.range(group.src[0], ctx.next_axis, AxisKind.REDUCE))
        ctx.next_axis += 1
    ctx.group_axes.extend(g for g in groups if g not in ctx.group_axes)
    final_index = index.substitute(dict(zip(groups, walkers)))
    ready = UOp(Ops.AFTER, buffer.dtype, (buffer, barrier))
    loaded = UOp(Ops.LOAD, reduction.dtype, (UOp(Ops.INDEX, buffer.dtype, (ready, final_index)),))
    return UOp(Ops.REDUCE, reduction.dtype, (loaded, *walkers), reduction.arg)


pm_group_reduce = PatternMatcher([(UPat(Ops.REDUCE, name="reduction"), _lower_group_reduce)])
"""REDUCE over GROUP_REDUCE axes -> partial reduce, local memory, barrier, final reduce (ctx: GroupReduceContext)."""


def gate_global_stores(sink: UOp, groups: list[UOp]) -> UOp:
    """`sink` with every STORE to a global buffer gated to the threads whose `groups` indices are all 0."""
    first_thread = groups[0].eq(0)
    for group in groups[1:]:
        first_thread = first_thread & group.eq(0)
    replacements: dict[UOp, UOp] = {}
    for node in sink.toposort():
        if node.op is Ops.STORE and node.src[0].src[0].op is Ops.DEFINE_GLOBAL:
            index = node.src[0]
            gate = first_thread if len(index.src) == 2 else index.src[2] & first_thread
            replacements[node] = node.replace(src=(index.replace(src=(*index.src[:2], gate)), *node.src[1:]))
    return sink.substitute(replacements)


def lower_group_reduces(sink: UOp) -> UOp:
    """`sink` with its group reduces lowered through local memory (unchanged when it has none)."""
    ranges = kernel_ranges(sink)
    if not any(r.arg.kind is AxisKind.GROUP_REDUCE for r in ranges):
        return sink
    # every thread of the block (LOCAL and GROUP_REDUCE axes) gets its own slot
    local_axes = sorted(
        (r for r in ranges if r.arg.kind in (AxisKind.LOCAL, AxisKind.GROUP_REDUCE)), key=lambda r: r.arg.axis
    )
    ctx = GroupReduceContext(local_axes, next_axis=max(r.arg.axis for r in ranges) + 1)
    sink = graph_rewrite(sink, pm_group_reduce, ctx=ctx, name="group reduce")
    return gate_global_stores(sink, ctx.group_axes)
