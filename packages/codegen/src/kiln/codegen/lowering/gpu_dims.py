"""Hardware indices: GLOBAL / LOCAL / GROUP_REDUCE / THREAD ranges -> SPECIAL uops within the renderer's limits.

Global axes map to gidx0..n and local axes to lidx0..n with the innermost (last) axis on dimension 0, the one
whose neighbouring threads are launched together. When there are more axes than dimensions, adjacent axes share a
dimension (the smallest products first); when a dimension is larger than its limit and a dimension is free, it is
split in two. Each original axis is then recovered from its dimension(s) by division and modulo.
THREAD axes (at most one) become SPECIAL `CORE_ID`. GLOBAL axes of a renderer without local threads stay loops.
The lane axis of a WMMA's warp goes innermost, so a warp is made of threads whose linear ids differ only in their
low bits (as on the hardware).
"""

from __future__ import annotations

import math

from kiln.codegen.kernel_signature import CORE_ID
from kiln.codegen.loop_structure import kernel_ranges, replace_ranges
from kiln.codegen.renderer import Renderer
from kiln.codegen.tensor_core import WARP_LANE_TAG
from kiln.uops import AxisKind, Ops, UOp, dtypes


def _size_bound(size: UOp) -> int:
    return int(size.vmax)


def _largest_divisor_at_most(value: int, limit: int) -> int:
    """The largest divisor of `value` (>= 1) that is at most `limit` (>= 1), in O(sqrt(value)) steps.

    Counting every candidate up to `limit` took minutes for a grid of 2**31 + 64 threads (limit 2**31 - 1)."""
    # a divisor d > sqrt(value) pairs with a cofactor value // d < sqrt(value): the smallest cofactor >= value / limit
    # gives the largest such divisor within the limit
    cofactor = -(-value // limit)
    while cofactor * cofactor < value:
        if value % cofactor == 0:
            return value // cofactor
        cofactor += 1
    # otherwise the answer is at most sqrt(value) (and at most `limit`): count down
    divisor = min(limit, math.isqrt(value))
    while value % divisor:
        divisor -= 1
    return divisor


def hardware_indices(ranges: list[UOp], max_sizes: tuple[int, ...], prefix: str) -> dict[UOp, UOp]:
    """Index expressions replacing `ranges` (outermost axis first) built from SPECIALs `prefix`0.. within `max_sizes`.

    Raises ValueError when the axes cannot fit the limits.
    """
    if not ranges:
        return {}
    if not max_sizes:
        raise ValueError(f"the renderer has no {prefix} dimensions for {len(ranges)} axes")
    dims = list(reversed(ranges))  # dimension 0 takes the innermost axis
    groups: list[list[UOp]] = [[rng] for rng in dims]
    while len(groups) > len(max_sizes):
        products = [math.prod(_size_bound(r.src[0]) for r in groups[i] + groups[i + 1]) for i in range(len(groups) - 1)]
        best = products.index(min(products))
        groups[best : best + 2] = [groups[best] + groups[best + 1]]
    values: dict[UOp, UOp] = {}
    slot = 0
    for position, group in enumerate(groups):
        size = _group_size(group)
        bound = _size_bound(size)
        free = len(max_sizes) - slot - (len(groups) - position)
        if bound <= max_sizes[slot]:
            flat = UOp.special(size, f"{prefix}{slot}")
            slot += 1
        elif free > 0 and size.op is Ops.CONST:
            fast = _largest_divisor_at_most(bound, max_sizes[slot])
            slow = bound // fast
            if fast == 1 or slow > max_sizes[slot + 1]:
                raise ValueError(f"{prefix} size {bound} cannot be split to fit the limits {max_sizes}")
            flat = UOp.special(fast, f"{prefix}{slot}") + UOp.special(slow, f"{prefix}{slot + 1}") * fast
            slot += 2
        else:
            raise ValueError(
                f"{prefix} size {bound} of axes {[r.arg.axis for r in group]} exceeds the limits {max_sizes}"
            )
        stride: UOp | int = 1
        for index, rng in enumerate(group):
            value = flat if index == 0 else flat // stride
            values[rng] = value if index == len(group) - 1 else value % rng.src[0]
            stride = rng.src[0] * stride
    return values


def _group_size(group: list[UOp]) -> UOp:
    size = group[0].src[0]
    for rng in group[1:]:
        size = size * rng.src[0]
    return size.simplify()


def warp_lane_ranges(sink: UOp) -> set[UOp]:
    """The LOCAL ranges that number the lanes of a WMMA's warp (made by the TC opt, tagged WARP_LANE_TAG)."""
    return {r for r in kernel_ranges(sink) if r.arg.kind is AxisKind.LOCAL and r.tag == WARP_LANE_TAG}


def map_hardware_dims(sink: UOp, renderer: Renderer) -> UOp:
    """`sink` with its GLOBAL, LOCAL, GROUP_REDUCE and THREAD ranges replaced by SPECIAL-based indices."""
    ranges = kernel_ranges(sink)
    by_kind = {kind: [r for r in ranges if r.arg.kind is kind] for kind in AxisKind}
    values: dict[UOp, UOp] = {}
    threads = by_kind[AxisKind.THREAD]
    if len(threads) > 1:
        raise ValueError(f"a kernel has at most one THREAD axis, got axes {[r.arg.axis for r in threads]}")
    if threads:
        values[threads[0]] = UOp.special(threads[0].src[0], CORE_ID)
    local = by_kind[AxisKind.LOCAL] + by_kind[AxisKind.GROUP_REDUCE]
    if renderer.has_local:
        values.update(hardware_indices(by_kind[AxisKind.GLOBAL], renderer.global_max or (), "gidx"))
        lanes = warp_lane_ranges(sink)
        local.sort(key=lambda r: (r in lanes, r.arg.axis))  # warp lanes last: the low bits of the thread id
        values.update(hardware_indices(local, renderer.local_max or (), "lidx"))
    else:
        if local:
            raise ValueError(f"{renderer!r} has no local threads for LOCAL/GROUP axes {[r.arg.axis for r in local]}")
        for rng in by_kind[AxisKind.GLOBAL]:
            values[rng] = UOp.range(rng.src[0], rng.arg.axis, AxisKind.LOOP)
    if not values:
        return sink
    assert all(v.dtype == dtypes.index for v in values.values())
    return replace_ranges(sink, values)
