"""Row fusion: a reduce over short rows stays in the kernel that reads it back over the same rows.

softmax, log_softmax, layer_norm, rms_norm and logsumexp reduce a row, broadcast the result back over the row and
reduce or store again: max, then sum(exp(x - max)), then exp(x - max) / sum. Cut at every reduce this is three
kernels, and the whole array crosses memory once per kernel plus a write. When a row is small enough to stay in the
cache (`MachineCosts.row_cache_bytes`, cost.py), one kernel does it all: for each row, a loop computes the max, a
second loop the sum, a third one the output; the row is read from memory once.

The planner keeps such a reduce in its reader (instead of giving it a buffer) when every reduce involved is over
short rows (`fits_in_a_row`). Whether the fused kernel really computes each reduce once per row is only known once
it is built: the reduce must not depend on a loop that also runs over the row it broadcasts into (a column sum read
back over the rows would sit inside the row loop), nor sit inside another reduce's loop (a loss summed over the
rows of a cross-entropy: every row's work would run serially, on one core). `recomputed_reduces` reads that off the
built kernel, and the planner gives such a reduce a buffer after all (the cut it would have without row fusion).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from kiln.tensor.graph import device_of, shape_of
from kiln.tensor.schedule.cost import DEFAULT_COSTS, MachineCosts, machine_costs
from kiln.uops import Ops, UOp

ROW_FUSION_BYTES = DEFAULT_COSTS.row_cache_bytes
"""Largest row (reduced elements times their size) a fused reduce may have (`MachineCosts.row_cache_bytes`)."""
ROW_FUSION_MIN_ELEMENTS = DEFAULT_COSTS.row_min_elements
"""Shortest row a fused reduce may have (`MachineCosts.row_min_elements`)."""


def fits_in_a_row(reduce: UOp, costs: MachineCosts | None = None) -> bool:
    """Whether REDUCE_AXIS `reduce` reduces rows of `row_min_elements` up to `row_cache_bytes` on a device that
    fuses rows (it may then be fused into the kernel that reads it back); `costs`: the device's by default."""
    costs = machine_costs(device_of(reduce)) if costs is None else costs
    if not costs.fuses_rows:
        return False
    source = reduce.src[0]
    shape = shape_of(source)
    reduced: int = math.prod(shape[axis] for axis in reduce.arg.axes)
    return reduced >= costs.row_min_elements and reduced * source.dtype.itemsize <= costs.row_cache_bytes


def fuses_rows(device: str) -> bool:
    """Whether kernels for `device` fuse short rows (`MachineCosts.fuses_rows` of `machine_costs(device)`)."""
    return machine_costs(device).fuses_rows


def _open_ranges(sink: UOp) -> dict[UOp, frozenset[UOp]]:
    # the RANGEs each node of a built kernel depends on that no REDUCE on the way closes
    found: dict[UOp, frozenset[UOp]] = {}
    for node in sink.toposort():
        if node.op is Ops.RANGE:
            found[node] = frozenset({node})
        elif node.op is Ops.REDUCE:
            found[node] = found[node.src[0]] - frozenset(node.src[1:])
        else:
            found[node] = frozenset().union(*(found[source] for source in node.src))
    return found


def recomputed_reduces(sink: UOp, reduces: Mapping[UOp, UOp]) -> list[UOp]:
    """The tensor-graph reduces of a built kernel `sink` that its loops would compute more than once per value, or
    inside another reduce's loop.

    `reduces` maps each REDUCE of the kernel to the REDUCE_AXIS node it computes. A REDUCE runs once per iteration
    of the loops it depends on and of every loop around those: the output loops before it (they nest in order)
    and, inside another reduce, that reduce's loops and the loops around it. More runs than the reduce has values
    means it sits inside a loop it does not depend on.
    """
    open_map = _open_ranges(sink)
    output_loops: list[UOp] = []
    for node in sink.src:
        if node.op is Ops.END:
            output_loops.extend(r for r in node.src[1:] if r.op is Ops.RANGE and r not in output_loops)
    output_loops.sort(key=lambda r: r.arg.axis)
    enclosing: dict[UOp, frozenset[UOp]] = {
        loop: frozenset(output_loops[:position]) for position, loop in enumerate(output_loops)
    }
    for uop in reduces:
        own = sorted((r for r in uop.src[1:] if r.op is Ops.RANGE), key=lambda r: r.arg.axis)
        for position, rng in enumerate(own):
            enclosing[rng] = open_map[uop] | frozenset(own[:position])
    reduce_loops = {rng for uop in reduces for rng in uop.src[1:]}
    found = []
    for uop, node in reduces.items():
        loops: set[UOp] = set()
        pending = list(open_map[uop])
        while pending:
            rng = pending.pop()
            if rng not in loops:
                loops.add(rng)
                pending.extend(enclosing.get(rng, ()))
        runs = math.prod(int(rng.src[0].vmax) for rng in loops)
        # inside another reduce's loop it is computed once per value, but serially: a loss summed over the rows
        # of a cross-entropy would run its per-row work on one core instead of one row kernel per output row
        if runs > math.prod(shape_of(node)) or loops & reduce_loops:
            found.append(node)
    return found
