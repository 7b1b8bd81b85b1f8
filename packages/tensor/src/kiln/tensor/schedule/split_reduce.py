"""Splitting large reductions in two stages, so a few outputs reduced over millions of elements still run in parallel.

A reduction of R elements into each of O outputs with R / O huge (a full `sum()`) would be one long serial loop:
one kernel output, one accumulator. Split R = k * (R / k): the first stage reduces into O * k partial results (k
independent loops the kernel can spread over cores and vector lanes), the second reduces the k partials.
"""

from __future__ import annotations

import math

from kiln.tensor.graph import contiguous, permute, reduce_axis, reshape, shape_of
from kiln.uops import Ops, UOp

SPLIT_THRESHOLD = 1 << 15
"""Reduced elements per output from which a reduction is split."""
_PARTIALS = (256, 128, 64, 32, 16, 8)  # partial results per output, the first that divides R


def split_reduction(node: UOp) -> UOp | None:
    """The two-stage form of REDUCE_AXIS `node`, or None if it is small or cannot be split evenly."""
    source = node.src[0]
    shape = shape_of(source)
    axes = node.arg.axes
    reduced = math.prod(shape[axis] for axis in axes)
    outputs = math.prod(shape_of(node))
    if outputs == 0 or reduced // outputs < SPLIT_THRESHOLD:
        return None
    partials = next((k for k in _PARTIALS if reduced % k == 0 and reduced // k >= k), None)
    if partials is None:
        return None
    kept = [axis for axis in range(len(shape)) if axis not in axes]
    kept_shape = tuple(shape[axis] for axis in kept)
    ordered = permute(source, (*kept, *axes))
    staged = reshape(ordered, (*kept_shape, partials, reduced // partials))
    first = contiguous(reduce_axis(staged, node.arg.op, (len(kept_shape) + 1,)))
    second = reduce_axis(first, node.arg.op, (len(kept_shape),))
    return reshape(second, shape_of(node))


def split_large_reductions(sink: UOp) -> UOp:
    """`sink` with every large reduction split in two stages."""
    replace = {}
    for node in sink.toposort():
        if node.op is Ops.REDUCE_AXIS and (split := split_reduction(node)) is not None:
            replace[node] = split
    return sink.substitute(replace) if replace else sink
