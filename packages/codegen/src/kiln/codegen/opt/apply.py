"""`apply_opts`: each optimization rewrites the kernel's RANGE structure; illegal ones raise KernelOptError.

Most opts split one RANGE r of size s by an amount a into two: `r -> outer * a + inner` (the inner part gets the
new kind) or, for the "top" variants (GROUPTOP, THREAD), `r -> inner * (s / a) + outer`. The remaining part keeps
r's axis number and kind; the new part takes the next unused axis number (a split by the whole size just changes
the axis's kind). END and REDUCE range lists follow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kiln.codegen.kernel_info import KernelInfo, KernelOptError, Opt, OptOps
from kiln.codegen.loop_structure import kernel_ranges, range_by_axis, range_sort_key, replace_ranges
from kiln.codegen.lowering.accumulators import reduce_identity
from kiln.codegen.lowering.gpu_dims import hardware_indices
from kiln.codegen.opt.kernel_axes import (
    MAX_LANES,
    applied_opts,
    axes_of,
    constant_size,
    kernel_info,
    lane_count,
    product_of_sizes,
    reduces_of,
    uses_nolocals,
)
from kiln.codegen.opt.reduce_blocking import block_reduce
from kiln.codegen.opt.tensor_core_opt import apply_tensor_core
from kiln.codegen.renderer import Renderer
from kiln.uops import AxisKind, Ops, UOp

_SPLIT_KIND = {
    OptOps.UPCAST: AxisKind.UPCAST,
    OptOps.UNROLL: AxisKind.UNROLL,
    OptOps.LOCAL: AxisKind.LOCAL,
    OptOps.GROUP: AxisKind.GROUP_REDUCE,
    OptOps.GROUPTOP: AxisKind.GROUP_REDUCE,
    OptOps.THREAD: AxisKind.THREAD,
}
_ALLOWED_KINDS = {
    OptOps.UPCAST: (AxisKind.LOOP, AxisKind.GLOBAL, AxisKind.LOCAL),
    OptOps.UNROLL: (AxisKind.REDUCE,),
    OptOps.LOCAL: (AxisKind.GLOBAL,),
    OptOps.GROUP: (AxisKind.REDUCE,),
    OptOps.GROUPTOP: (AxisKind.REDUCE,),
    OptOps.THREAD: (AxisKind.LOOP,),
    OptOps.PADTO: (AxisKind.LOOP, AxisKind.GLOBAL, AxisKind.REDUCE),
    OptOps.SWAP: (AxisKind.GLOBAL, AxisKind.LOOP, AxisKind.UPCAST),
    OptOps.BLOCK: (AxisKind.REDUCE,),
}


# opts that keep the tile structure of a TC kernel intact (they only move whole tiles between blocks)
_AFTER_TC = frozenset({OptOps.LOCAL, OptOps.SWAP})


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise KernelOptError(message)


def prepare_axes(sink: UOp, renderer: Renderer) -> UOp:
    """Loops become GLOBAL axes on renderers with local threads (GLOBAL become loops on the others), except a loop
    some REDUCE does not depend on: the loop over a row after its reduces (softmax's output loop, the scheduler's
    row fusion). As threads, every one of them would compute the row's reduces again; as a loop, each thread
    computes them once and then walks the row."""
    source, target = (AxisKind.LOOP, AxisKind.GLOBAL) if renderer.has_local else (AxisKind.GLOBAL, AxisKind.LOOP)
    candidates = [r for r in kernel_ranges(sink) if r.arg.kind is source]
    if renderer.has_local and candidates:
        depends = [set(reduction.toposort()) for reduction in reduces_of(sink)]
        candidates = [r for r in candidates if all(r in needed for needed in depends)]
    values = {r: UOp.range(r.src[0], r.arg.axis, target) for r in candidates}
    return replace_ranges(sink, values) if values else sink


_LOOP_KINDS = (AxisKind.THREAD, AxisKind.GLOBAL, AxisKind.LOOP)


def _kept_rows_stay_inside(sink: UOp, opt: Opt) -> None:
    """A reduce that stores the values it sums (`reuse_row_values`) must run once per row before the loop that
    rescales the row: every loop of the output that the reduce does not depend on has to nest inside every loop it
    does depend on (a SWAP putting the output loop outside the row loop would store the row again after scaling
    part of it)."""
    nodes = sink.toposort()
    if not any(node.op is Ops.AFTER and node.src[0].op is not Ops.DEFINE_GLOBAL for node in nodes):
        return
    loops = [r for r in kernel_ranges(sink) if r.arg.kind in _LOOP_KINDS]
    for reduction in (node for node in nodes if node.op is Ops.REDUCE):
        needed = set(reduction.toposort())
        if not any(n.op is Ops.STORE for n in needed):
            continue
        inner = [range_sort_key(r) for r in loops if r in needed]
        outer = [range_sort_key(r) for r in loops if r not in needed]
        _check(
            not inner or not outer or max(inner) < min(outer),
            f"{opt.op.name}: a loop over the output would enclose the reduce that stores the row it rescales",
        )


def _record(sink: UOp, opt: Opt) -> UOp:
    _kept_rows_stay_inside(sink, opt)
    info = kernel_info(sink)
    return sink.replace(arg=dataclasses.replace(info, applied_opts=(*info.applied_opts, opt)))


def _split(sink: UOp, rng: UOp, amount: int, kind: AxisKind, top: bool) -> UOp:
    size = constant_size(rng)
    assert size is not None and size % amount == 0
    remaining_size = size // amount
    if remaining_size == 1:
        # the whole axis changes kind and keeps its number
        return replace_ranges(sink, {rng: UOp.range(amount, rng.arg.axis, kind)})
    inner = UOp.range(amount, max(r.arg.axis for r in kernel_ranges(sink)) + 1, kind)
    remaining = UOp.range(remaining_size, rng.arg.axis, rng.arg.kind)
    value = inner * remaining_size + remaining if top else remaining * amount + inner
    return replace_ranges(sink, {rng: value}, {rng: (remaining, inner)})


def _pad(sink: UOp, rng: UOp, amount: int) -> UOp:
    size = constant_size(rng)
    assert size is not None
    padded = UOp.range(-(-size // amount) * amount, rng.arg.axis, rng.arg.kind)
    valid = padded.lt(size)
    depends: dict[UOp, bool] = {}
    rebuilt: dict[UOp, UOp] = {}
    for node in sink.toposort():
        depends[node] = node is rng or any(depends[s] for s in node.src)
        src = tuple(rebuilt[s] for s in node.src)
        if node is rng:
            rebuilt[node] = padded
            continue
        if node.op is Ops.INDEX and any(depends[s] for s in node.src[1:]):  # the address, not an AFTER's order
            gate = valid if len(src) == 2 else src[2] & valid
            src = (src[0], src[1], gate)
        elif node.op is Ops.REDUCE and rng in node.src[1:]:
            identity = UOp.const(node.dtype, reduce_identity(node.arg, node.dtype))
            src = (valid.where(src[0], identity), *src[1:])
        elif node.op is Ops.END and rng in node.src[1:] and src[0].op is Ops.STORE and not depends[node.src[0].src[0]]:
            index = src[0].src[0]
            gate = valid if len(index.src) == 2 else index.src[2] & valid
            src = (src[0].replace(src=(index.replace(src=(*index.src[:2], gate)), *src[0].src[1:])), *src[1:])
        rebuilt[node] = node.replace(src=src) if src != node.src else node
    return rebuilt[sink]


def _local_indices_fit(sink: UOp, renderer: Renderer) -> None:
    local = axes_of(sink, AxisKind.LOCAL, AxisKind.GROUP_REDUCE)
    threads = product_of_sizes(local)
    _check(
        threads <= renderer.local_size_max, f"{threads} threads per block exceed the limit {renderer.local_size_max}"
    )
    try:
        hardware_indices(sorted(local, key=lambda r: r.arg.axis), renderer.local_max or (), "lidx")
    except ValueError as error:
        raise KernelOptError(f"local axes do not fit the renderer: {error}") from None


def _shared_memory_fits(sink: UOp, renderer: Renderer) -> None:
    # one buffer per grouped REDUCE, one slot per thread of the block and upcast lane (an upper bound)
    lanes = product_of_sizes(axes_of(sink, AxisKind.LOCAL, AxisKind.GROUP_REDUCE, AxisKind.UPCAST))
    grouped = [r for r in reduces_of(sink) if any(s.arg.kind is AxisKind.GROUP_REDUCE for s in r.src[1:])]
    needed = lanes * sum(r.dtype.itemsize for r in grouped)
    _check(
        needed <= renderer.shared_max,
        f"group reduce needs {needed} bytes of shared memory, the renderer has {renderer.shared_max}",
    )


def apply_opt(sink: UOp, opt: Opt, renderer: Renderer) -> UOp:
    """`sink` with one optimization applied and recorded in KernelInfo.applied_opts; KernelOptError if illegal."""
    if not isinstance(opt, Opt):
        raise TypeError(f"expected an Opt, got {opt!r}")
    if opt.op is OptOps.NOLOCALS:
        _check(opt.axis is None and opt.arg is None, f"NOLOCALS takes no axis or arg, got {opt}")
        _check(renderer.has_local, f"NOLOCALS needs a renderer with local threads; {renderer!r} has none")
        _check(not uses_nolocals(sink), "NOLOCALS is already applied")
        _check(not axes_of(sink, AxisKind.LOCAL, AxisKind.GROUP_REDUCE), "NOLOCALS after LOCAL or GROUP axes exist")
        return _record(sink, opt)
    if opt.op is OptOps.TC:
        _check(not axes_of(sink, AxisKind.BLOCK), "TC after BLOCK is not supported")
        result = apply_tensor_core(sink, opt, renderer)
        _local_indices_fit(result, renderer)
        return _record(result, opt)
    _check(
        opt.op in _AFTER_TC or not any(applied.op is OptOps.TC for applied in applied_opts(sink)),
        f"{opt.op.name} after TC is not supported (only {', '.join(sorted(op.name for op in _AFTER_TC))})",
    )
    axes = range_by_axis(sink)
    _check(
        isinstance(opt.axis, int) and opt.axis in axes, f"{opt.op.name}: no axis {opt.axis!r}; axes are {sorted(axes)}"
    )
    assert isinstance(opt.axis, int)
    rng = axes[opt.axis]
    kind, size = rng.arg.kind, constant_size(rng)
    allowed = _ALLOWED_KINDS[opt.op]
    _check(
        kind in allowed,
        f"{opt.op.name} needs a {' or '.join(k.name for k in allowed)} axis; axis {opt.axis} is {kind.name}",
    )
    if opt.op is OptOps.SWAP:
        other = axes.get(opt.arg) if isinstance(opt.arg, int) else None
        _check(
            other is not None and other is not rng and other.arg.kind is kind,
            f"SWAP needs another {kind.name} axis as arg, got {opt.arg!r}",
        )
        assert other is not None
        swapped = {
            rng: UOp.range(rng.src[0], other.arg.axis, kind),
            other: UOp.range(other.src[0], rng.arg.axis, kind),
        }
        return _record(replace_ranges(sink, swapped), opt)
    _check(
        isinstance(opt.arg, int) and not isinstance(opt.arg, bool),
        f"{opt.op.name} needs an int amount, got {opt.arg!r}",
    )
    assert isinstance(opt.arg, int)
    _check(size is not None, f"{opt.op.name}: axis {opt.axis} has the symbolic size {rng.src[0].render()}")
    assert size is not None
    amount = size if opt.arg == 0 else opt.arg
    if opt.op is OptOps.PADTO:
        _check(amount > 1, f"PADTO needs an amount > 1, got {amount}")
        padded = -(-size // amount) * amount
        _check(padded != size, f"PADTO: axis {opt.axis} of size {size} is already a multiple of {amount}")
        _check(padded <= 2 * size, f"PADTO: padding axis {opt.axis} from {size} to {padded} more than doubles it")
        return _record(_pad(sink, rng, amount), opt)
    _check(amount > 1, f"{opt.op.name} needs an amount > 1, got {opt.arg}")
    _check(size % amount == 0, f"{opt.op.name}: amount {amount} does not divide axis {opt.axis} of size {size}")
    if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):
        _check(renderer.has_local, f"{opt.op.name} needs a renderer with local threads; {renderer!r} has none")
        _check(not uses_nolocals(sink), f"{opt.op.name} after NOLOCALS")
    if opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
        _check(renderer.has_shared, f"{opt.op.name} needs shared memory; {renderer!r} has none")
        _check(not axes_of(sink, AxisKind.BLOCK), f"{opt.op.name} after BLOCK: partial results would be shared")
    if opt.op is OptOps.BLOCK:
        return _record(block_reduce(sink, rng, amount), opt)
    if opt.op is OptOps.THREAD:
        _check(renderer.has_threads, f"THREAD needs a renderer with CPU threads; {renderer!r} has none")
        _check(not axes_of(sink, AxisKind.THREAD), "THREAD: the kernel already has a THREAD axis")
        _check(amount <= renderer.thread_max, f"THREAD: {amount} threads exceed the limit {renderer.thread_max}")
        stores = [node for node in sink.toposort() if node.op is Ops.STORE]
        _check(
            all(rng in node.src[0].toposort() for node in stores),
            f"THREAD: axis {opt.axis} does not split every store of the kernel (threads would write one address)",
        )
    top = opt.op in (OptOps.GROUPTOP, OptOps.THREAD)
    result = _split(sink, rng, amount, _SPLIT_KIND[opt.op], top)
    if opt.op in (OptOps.UPCAST, OptOps.UNROLL):
        lanes = lane_count(result)
        _check(lanes <= MAX_LANES, f"{opt.op.name} by {amount} makes {lanes} vector lanes (limit {MAX_LANES})")
    if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):
        _local_indices_fit(result, renderer)
    if opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
        _shared_memory_fits(result, renderer)
    return _record(result, opt)


def apply_opts(sink: UOp, opts: Sequence[Opt], renderer: Renderer) -> UOp:
    """`sink` with `opts` applied in order for `renderer` (after `prepare_axes`); KernelOptError if one is illegal."""
    if sink.op is not Ops.SINK:
        raise TypeError(f"apply_opts needs a kernel SINK, got {sink.op!r}")
    sink = prepare_axes(sink if isinstance(sink.arg, KernelInfo) else sink.replace(arg=KernelInfo()), renderer)
    for opt in opts:
        sink = apply_opt(sink, opt, renderer)
    return sink
