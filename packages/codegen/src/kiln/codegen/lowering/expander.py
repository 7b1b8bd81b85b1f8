"""UPCAST / UNROLL ranges -> vector lanes.

An UPCAST or UNROLL RANGE of size n becomes UNROLL(VCONST(0..n-1), arg=((axis, n),)): "this value has one lane per
iteration of axis". Every op with an UNROLL source is rebuilt on vectors: its sources are swizzled (GEP) or broadcast
to the union of their axes, lanes in row-major order of the axes sorted by axis number, and the result is wrapped in
UNROLL again. A REDUCE folds the lanes of its UNROLL axes together (a horizontal reduce, in loop order) and keeps
looping over its other ranges; with ctx True (vector-ALU renderers) a REDUCE that still loops keeps every lane in its
accumulator instead (up to DEFERRED_LANES_MAX lanes) and folds them once, after the loop: one vector update per
iteration instead of lane shuffles (float sums are reassociated, as any unroll does); an END forgets the axes it
closed. A STORE takes vectors directly: after this pass no UNROLL is left, and loads/stores address memory through
vectors of pointers (one per lane), which the devectorizer turns into real (possibly wide) accesses.
"""

from __future__ import annotations

import itertools
import math

from kiln.uops import AxisKind, GroupOp, Ops, PatternMatcher, UOp, UPat, dtypes

Axes = tuple[tuple[int, int], ...]
"""(axis number, size) pairs sorted by axis number: the lanes of an expanded value, row-major."""

EXPANDED_KINDS = frozenset({AxisKind.UPCAST, AxisKind.UNROLL})
DEFERRED_LANES_MAX = 256
"""Most accumulator lanes a REDUCE keeps to fold its unrolled lanes after its loop (16 AVX-512 registers)."""


def merge_axes(*axes_list: Axes) -> Axes:
    """The union of several axis lists, sorted by axis number."""
    merged: dict[int, int] = {}
    for axes in axes_list:
        for axis, size in axes:
            if merged.setdefault(axis, size) != size:
                raise ValueError(f"axis {axis} is expanded with two sizes {merged[axis]} and {size}")
    return tuple(sorted(merged.items()))


def _strides(axes: Axes) -> dict[int, int]:
    strides: dict[int, int] = {}
    stride = 1
    for axis, size in reversed(axes):
        strides[axis] = stride
        stride *= size
    return strides


def lane_map(target: Axes, source: Axes) -> tuple[int, ...]:
    """For every lane of `target`, the lane of `source` (a subset of its axes) with the same coordinates."""
    strides = _strides(source)
    lanes = []
    for coordinates in itertools.product(*(range(size) for _, size in target)):
        lanes.append(sum(c * strides[axis] for (axis, _), c in zip(target, coordinates) if axis in strides))
    return tuple(lanes)


def _broadcast(value: UOp, count: int) -> UOp:
    if count == 1:
        return value
    if value.op is Ops.CONST:
        return UOp.const(value.dtype.vec(count), value.arg)
    return UOp(Ops.VECTORIZE, value.dtype.vec(count), (value,) * count)


def swizzle(value: UOp, source: Axes, target: Axes) -> UOp:
    """`value` (lanes over `source`) rearranged to lanes over `target` (a superset of `source`)."""
    if source == target:
        return value
    if not source:
        return _broadcast(value, math.prod(size for _, size in target))
    return value.gep(lane_map(target, source))


def _expand_range(rng: UOp) -> UOp | None:
    if rng.arg.kind not in EXPANDED_KINDS:
        return None
    size = rng.src[0]
    if size.op is not Ops.CONST:
        raise ValueError(f"{rng.arg.kind.name} axis {rng.arg.axis} needs a constant size, got {size.render()}")
    lanes = UOp.const(rng.dtype.vec(size.arg), tuple(range(size.arg))) if size.arg > 1 else UOp.const(rng.dtype, 0)
    return UOp(Ops.UNROLL, rng.dtype, (lanes,), ((rng.arg.axis, size.arg),))


def _affine_lanes(source: UOp) -> tuple[UOp | None, Axes, tuple[int, ...]] | None:
    """An index value as (scalar base or None, lane axes, per-lane constants): lane k is base + constants[k]."""
    if source.op is not Ops.UNROLL:
        return (source, (), (0,)) if source.op is not Ops.CONST else (None, (), (int(source.arg),))
    vector = source.src[0]
    if vector.op is Ops.VCONST:
        return None, source.arg, tuple(vector.arg)
    if vector.op is Ops.CONST:
        return None, source.arg, (int(vector.arg),) * vector.dtype.count
    if vector.op is Ops.ADD and vector.src[1].op is Ops.VCONST and vector.src[0].op is Ops.VECTORIZE:
        lanes = vector.src[0].src
        if all(lane is lanes[0] for lane in lanes):
            return lanes[0], source.arg, tuple(vector.src[1].arg)
    return None


def _expand_index_math(node: UOp) -> UOp | None:
    """ADD / SUB / MUL-by-constant of index values as `broadcast(base) + VCONST(lane constants)`.

    Index math is exact, so every lane of an expanded address is one scalar base (simplified once, later) plus a
    constant; without this, each lane would carry its own copy of the whole expression to simplify.
    """
    if node.dtype != dtypes.index or node.op not in (Ops.ADD, Ops.SUB, Ops.MUL):
        return None
    parts = [_affine_lanes(source) for source in node.src]
    if parts[0] is None or parts[1] is None:
        return None
    (left_base, left_axes, left_lanes), (right_base, right_axes, right_lanes) = parts[0], parts[1]
    axes = merge_axes(left_axes, right_axes)
    if math.prod(size for _, size in axes) == 1:
        return None  # one lane: nothing to share
    left = [left_lanes[lane] for lane in lane_map(axes, left_axes)]
    right = [right_lanes[lane] for lane in lane_map(axes, right_axes)]
    base: UOp | None
    if node.op is Ops.MUL:
        # only a product with a plain constant stays affine
        if right_base is None and right_axes == ():
            factor, base, offsets = right_lanes[0], left_base, left
        elif left_base is None and left_axes == ():
            factor, base, offsets = left_lanes[0], right_base, right
        else:
            return None
        base = None if base is None else base * factor
        lanes = [offset * factor for offset in offsets]
    else:
        sign = 1 if node.op is Ops.ADD else -1
        lanes = [a + sign * b for a, b in zip(left, right)]
        if right_base is None:
            base = left_base
        elif left_base is None:
            base = right_base if sign == 1 else -right_base
        else:
            base = UOp(node.op, dtypes.index, (left_base, right_base))
    count = len(lanes)
    offsets_vector = UOp.const(dtypes.index.vec(count), tuple(lanes))
    vector = (
        offsets_vector
        if base is None
        else UOp(Ops.ADD, offsets_vector.dtype, (_broadcast(base, count), offsets_vector))
    )
    return UOp(Ops.UNROLL, dtypes.index, (vector,), axes)


def _expand_op(node: UOp) -> UOp | None:
    if not any(source.op is Ops.UNROLL for source in node.src):
        return None
    if (affine := _expand_index_math(node)) is not None:
        return affine
    if node.op is Ops.BARRIER:
        # its sources only order it: one lane will do (a whole vector would be a VECTORIZE a scalar renderer, WGSL,
        # cannot print)
        return node.replace(src=tuple(s.src[0].gep(0) if s.op is Ops.UNROLL else s for s in node.src))
    axes = merge_axes(*(source.arg for source in node.src if source.op is Ops.UNROLL))
    count = math.prod(size for _, size in axes)
    sources: list[UOp] = []
    for position, source in enumerate(node.src):
        if source.op is Ops.UNROLL:
            sources.append(swizzle(source.src[0], source.arg, axes))
        elif node.op is Ops.INDEX and position == 0:
            sources.append(source)  # the buffer: lane k addresses buffer + offset[k]
        elif source.op is Ops.INDEX:
            # a store of many lanes to one address: every lane gets the same pointer
            broadcast = tuple(_broadcast(s, count) for s in source.src[1:])
            sources.append(source.replace(dtype=source.dtype.vec(count), src=(source.src[0], *broadcast)))
        else:
            sources.append(_broadcast(source, count))
    if node.op is Ops.STORE:
        return node.replace(src=tuple(sources))
    expanded = UOp(node.op, node.dtype.vec(count), tuple(sources), node.arg)
    return UOp(Ops.UNROLL, node.dtype, (expanded,), axes)


def _expand_reduce(reduction: UOp, ctx: bool | None = None) -> UOp | None:
    value, ranges = reduction.src[0], reduction.src[1:]
    unrolled = [r for r in ranges if r.op is Ops.UNROLL]
    if not unrolled and value.op is not Ops.UNROLL:
        return None
    loops = tuple(r for r in ranges if r.op is not Ops.UNROLL)
    reduce_axes = merge_axes(*(r.arg for r in unrolled))
    value_axes: Axes = value.arg if value.op is Ops.UNROLL else ()
    vector = value.src[0] if value.op is Ops.UNROLL else value
    reduced = {axis for axis, _ in reduce_axes}
    out_axes = tuple((axis, size) for axis, size in value_axes if axis not in reduced)
    all_axes = merge_axes(out_axes, reduce_axes)
    full = swizzle(vector, value_axes, all_axes)
    strides = _strides(all_axes)
    out_coordinates = list(itertools.product(*(range(size) for _, size in out_axes)))
    parts = []
    part_lanes: list[tuple[int, ...]] = []
    for reduce_coordinates in itertools.product(*(range(size) for _, size in reduce_axes)):
        lanes = []
        for out in out_coordinates:
            lane = sum(c * strides[axis] for (axis, _), c in zip(out_axes, out))
            lane += sum(c * strides[axis] for (axis, _), c in zip(reduce_axes, reduce_coordinates))
            lanes.append(lane)
        parts.append(full.gep(tuple(lanes)))
        part_lanes.append(tuple(lanes))
    if ctx and loops and len(parts) > 1 and len(parts) * len(out_coordinates) <= DEFERRED_LANES_MAX:
        # every lane accumulates on its own through the loops, in the lane order the value already has (no shuffle
        # per iteration: with output lanes outside the unrolled ones, each output's lanes are one contiguous load);
        # the unrolled lanes are folded once, after the loops
        partial = UOp(Ops.REDUCE, full.dtype, (full, *loops), reduction.arg)
        result = _fold_tree(partial, part_lanes, reduction.arg)
        return UOp(Ops.UNROLL, reduction.dtype, (result,), out_axes) if out_axes else result
    combined = parts[0]
    for part in parts[1:]:
        combined = combined.alu(reduction.arg, part)
    result = UOp(Ops.REDUCE, combined.dtype, (combined, *loops), reduction.arg) if loops else combined
    return UOp(Ops.UNROLL, reduction.dtype, (result,), out_axes) if out_axes else result


def _fold_tree(vector: UOp, part_lanes: list[tuple[int, ...]], op: Ops) -> UOp:
    """Fold the parts of `vector` (each part: the lanes of one unrolled reduce coordinate, in output-lane order) by
    halves: the first half of the parts against the second, one vector op per level (log2 of the part count levels),
    instead of a chain of one op per part. An odd part out at a level is set aside and folded in at the end. The
    folded order is the graph's, so it is the same on every renderer (the interpreter runs this graph too).

    Each level's vectors keep the lane order of `vector`: when an output's parts are its adjacent lanes (a 4 x 4
    tile of 16 unrolled lanes: lane = output * 16 + part), an output's remaining parts stay adjacent, so every
    register of a level draws on two registers of the level before (one two-source shuffle each); parts laid out
    one after the other are taken as whole slices. Grouping the lanes by part instead (the transpose of an output-
    major accumulator) cost ~20 shuffles a register: a 4 x 4 x 16 dot-product tile's fold was ~360 instructions
    against ~50 for its 48 reduce steps' 768 fused multiply-adds' worth of loop."""
    leftovers: list[UOp] = []
    width = len(part_lanes[0])
    output_major = (
        width > 1 and len(part_lanes) > 1 and part_lanes[1][0] - part_lanes[0][0] < part_lanes[0][1] - part_lanes[0][0]
    )
    while len(part_lanes) > 1:
        half = len(part_lanes) // 2
        if len(part_lanes) % 2:
            leftovers.append(vector.gep(part_lanes[-1]))
        if output_major:
            # output o's parts p and p + half are added into lane o * half + p
            first = tuple(part_lanes[p][o] for o in range(width) for p in range(half))
            second = tuple(part_lanes[p + half][o] for o in range(width) for p in range(half))
            part_lanes = [tuple(o * half + p for o in range(width)) for p in range(half)]
        else:
            first = tuple(lane for lanes in part_lanes[:half] for lane in lanes)
            second = tuple(lane for lanes in part_lanes[half : 2 * half] for lane in lanes)
            part_lanes = [tuple(range(i * width, (i + 1) * width)) for i in range(half)]
        vector = vector.gep(first).alu(op, vector.gep(second))
    result = vector.gep(part_lanes[0])
    for leftover in leftovers:
        result = result.alu(op, leftover)
    return result


def _expand_after(after: UOp) -> UOp | None:
    """AFTER(value, effects...): the value keeps its lanes; the effects only order it, any lanes of theirs will do."""
    if not any(source.op is Ops.UNROLL for source in after.src):
        return None
    first, *effects = after.src
    ordered = tuple(s.src[0] if s.op is Ops.UNROLL else s for s in effects)
    if first.op is not Ops.UNROLL:
        return after.replace(src=(first, *ordered))
    inner = first.src[0]
    return UOp(Ops.UNROLL, after.dtype, (UOp(Ops.AFTER, inner.dtype, (inner, *ordered)),), first.arg)


def _expand_end(end: UOp) -> UOp | None:
    if not any(r.op is Ops.UNROLL for r in end.src[1:]):
        return None
    loops = tuple(r for r in end.src[1:] if r.op is not Ops.UNROLL)
    return end.replace(src=(end.src[0], *loops)) if loops else end.src[0]


pm_expand = PatternMatcher(
    [
        (UPat(Ops.RANGE, name="rng"), _expand_range),
        (UPat(Ops.REDUCE, name="reduction"), _expand_reduce),
        (UPat(Ops.END, name="end"), _expand_end),
        (UPat(Ops.AFTER, name="after"), _expand_after),
        (UPat(GroupOp.Elementwise | {Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.BARRIER}, name="node"), _expand_op),
    ]
)
"""UPCAST/UNROLL ranges -> vectors (see the module docstring)."""
