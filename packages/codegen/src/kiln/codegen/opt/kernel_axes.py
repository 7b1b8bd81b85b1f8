"""Read-only facts about a kernel sink's axes that the optimizations, the heuristic and BEAM ask about."""

from __future__ import annotations

import math

from kiln.codegen.kernel_info import KernelInfo, Opt, OptOps
from kiln.codegen.loop_structure import kernel_ranges
from kiln.uops import AxisKind, Ops, UOp

MAX_LANES = 256
"""Largest number of vector lanes (product of UPCAST and UNROLL sizes) a kernel may expand to."""


def kernel_info(sink: UOp) -> KernelInfo:
    """The KernelInfo of a kernel sink (a default one when the sink has none)."""
    return sink.arg if isinstance(sink.arg, KernelInfo) else KernelInfo()


def applied_opts(sink: UOp) -> tuple[Opt, ...]:
    """The optimizations already applied to `sink`."""
    return kernel_info(sink).applied_opts


def axes_of(sink: UOp, *kinds: AxisKind) -> list[UOp]:
    """The RANGEs of the given kinds in nesting order (all RANGEs when no kind is given)."""
    ranges = kernel_ranges(sink)
    return ranges if not kinds else [r for r in ranges if r.arg.kind in kinds]


def constant_size(rng: UOp) -> int | None:
    """The size of a RANGE when it is a constant."""
    size = rng.src[0]
    return size.arg if size.op is Ops.CONST else None


def product_of_sizes(ranges: list[UOp]) -> int:
    """The product of constant RANGE sizes (symbolic sizes count by their upper bound)."""
    return math.prod(int(r.src[0].vmax) for r in ranges)


_NO_RANGES: frozenset[UOp] = frozenset()


def _union_of_sources(node: UOp, sets: dict[UOp, frozenset[UOp]]) -> frozenset[UOp]:
    # the union of the sources' sets; most sources share one set (or a subset of it): reuse it, build none
    sources = node.src
    if not sources:
        return _NO_RANGES
    combined = sets[sources[0]]
    for source in sources[1:]:
        other = sets[source]
        if other is not combined and not other <= combined:
            combined = combined | other
    return combined


def lane_count(sink: UOp) -> int:
    """How many vector lanes the widest value of the kernel expands to: the product of the UPCAST and UNROLL sizes
    it depends on. A REDUCE folds its own lanes, so the reduces of a row kernel (softmax: max, then sum, then the
    output) each count their own unroll, not the product of all of them."""
    expanded: dict[UOp, frozenset[UOp]] = {}
    widths: dict[frozenset[UOp], int] = {_NO_RANGES: 1}  # most nodes share a set: its product is computed once
    widest = 1
    for node in sink.toposort():
        if node.op is Ops.RANGE:
            lanes = frozenset({node}) if node.arg.kind in (AxisKind.UPCAST, AxisKind.UNROLL) else _NO_RANGES
        else:
            lanes = _union_of_sources(node, expanded)
            if node.op is Ops.REDUCE:
                lanes = lanes - frozenset(node.src[1:])
        expanded[node] = lanes
        width = widths.get(lanes)
        if width is None:
            width = widths[lanes] = product_of_sizes(list(lanes))
        widest = max(widest, width)
    return widest


def loop_work(sink: UOp) -> int:
    """Iterations the kernel's loop nests run in total: each REDUCE runs over its own ranges and the ones around it,
    each store over its loops. A row kernel's loops (max, sum, output per row) add up rather than multiply."""
    running: dict[UOp, frozenset[UOp]] = {}
    total = 0
    for node in sink.toposort():
        if node.op is Ops.RANGE:
            running[node] = frozenset({node})
            continue
        ranges = _union_of_sources(node, running)
        if node.op in (Ops.REDUCE, Ops.END):
            total += product_of_sizes(list(ranges))
            ranges -= frozenset(node.src[1:])
        running[node] = ranges
    return max(total, 1)


def uses_nolocals(sink: UOp) -> bool:
    """True once NOLOCALS was applied."""
    return any(opt.op is OptOps.NOLOCALS for opt in applied_opts(sink))


def reduces_of(sink: UOp) -> list[UOp]:
    """The REDUCE uops of the kernel in graph order."""
    return [node for node in sink.toposort() if node.op is Ops.REDUCE]


def buffer_accesses(sink: UOp) -> list[UOp]:
    """Every INDEX into a global buffer (loads and stores)."""
    return [node for node in sink.toposort() if node.op is Ops.INDEX and node.src[0].op is Ops.DEFINE_GLOBAL]


def stride_of(index_expression: UOp, rng: UOp) -> int | None:
    """How much `index_expression` grows when `rng` grows by one, if that is a constant (0: independent of rng)."""
    if rng not in index_expression.toposort():
        return 0
    shifted = index_expression.substitute({rng: rng + 1})
    difference = (shifted - index_expression).simplify()
    return difference.arg if difference.op is Ops.CONST else None


def kernel_name(sink: UOp) -> str:
    """A readable C identifier from the loop shape: 'r_' for kernels that reduce ('E_' otherwise), then the sizes."""
    ranges = kernel_ranges(sink)
    prefix = (
        "r" if any(r.arg.kind in (AxisKind.REDUCE, AxisKind.GROUP_REDUCE, AxisKind.UNROLL) for r in ranges) else "E"
    )
    parts = [prefix]
    for rng in ranges:
        size = rng.src[0]
        parts.append(
            str(size.arg) if size.op is Ops.CONST else "".join(c if c.isalnum() else "_" for c in size.render())
        )
    return "_".join(parts) if len(parts) > 1 else f"{prefix}_scalar"
