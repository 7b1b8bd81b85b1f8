"""The TC opt: a matmul-shaped reduce -> WMMA uops on one of the renderer's tensor cores.

A kernel qualifies when its only REDUCE is a sum over one REDUCE axis K of `A * B` (each side a LOAD of the tensor
core's input dtype, cast to its output dtype when the two differ), where A depends on an output axis M that B does
not and B on an output axis N that A does not, with M, N, K multiples of the tile. The opt then rewrites

    out[m, n] = f(sum_k A[m, k] * B[k, n])
into
    lane  = a new LOCAL axis of size `threads`, tagged WARP_LANE_TAG (lowering puts it in the low bits of the thread id)
    a     = VECTORIZE(A[mo*TM + rowA(lane, e), ko*TK + colA(lane, e)] for e in registers of A)
    b     = VECTORIZE(B[ko*TK + rowB(lane, e), no*TN + colB(lane, e)] for e in registers of B)
    acc   = REDUCE(WMMA(a, b, 0), ko)                        one tile product per iteration of K / TK
    out[mo*TM + rowC(lane, e), no*TN + colC(lane, e)] = f(acc[e])      for e in registers of C

where mo, no, ko keep the axis numbers of M, N, K. The accumulator pass later feeds the accumulator into the WMMA.

`Opt(TC, axis, index)` names one of `renderer.tensor_cores`; `Opt(TC, axis, -1)` takes the first unit the kernel
fits, in the renderer's order: the unit whose input dtype is the loads' (float16 or bfloat16) and whose accumulator
is the sum's dtype.
"""

from __future__ import annotations

from kiln.codegen.kernel_info import KernelOptError, Opt
from kiln.codegen.loop_structure import kernel_ranges, replace_ranges
from kiln.codegen.opt.kernel_axes import applied_opts, constant_size, reduces_of
from kiln.codegen.renderer import Renderer
from kiln.codegen.tensor_core import WARP_LANE_TAG, FragmentLayout, TensorCore
from kiln.uops import AxisKind, Ops, UOp, dtypes


def _fail(message: str) -> KernelOptError:
    return KernelOptError(f"TC: {message}")


ANY_TENSOR_CORE = -1
"""The TC opt's arg that picks the first of the renderer's tensor cores the kernel fits."""


def _tensor_core(opt: Opt, renderer: Renderer) -> TensorCore:
    if not renderer.tensor_cores:
        raise KernelOptError(f"TC needs a renderer with tensor cores; {renderer!r} has none")
    if not isinstance(opt.arg, int) or isinstance(opt.arg, bool) or not 0 <= opt.arg < len(renderer.tensor_cores):
        raise _fail(
            f"arg must be a tensor core index 0..{len(renderer.tensor_cores) - 1} or {ANY_TENSOR_CORE} (the first "
            f"that fits), got {opt.arg!r}"
        )
    tc = renderer.tensor_cores[opt.arg]
    if tc.layouts is None:
        raise _fail(f"tensor core {tc} declares no fragment layouts")
    if not renderer.has_local or tc.threads > renderer.local_size_max:
        raise _fail(f"{renderer!r} cannot run the {tc.threads} threads of a warp in one block")
    return tc


def _operand_load(side: UOp, tc: TensorCore) -> UOp | None:
    """The LOAD of dtype_in that `side` reads (through a CAST to dtype_out when the dtypes differ), if it is one."""
    if tc.dtype_in != tc.dtype_out:
        if side.op is not Ops.CAST or side.dtype != tc.dtype_out:
            return None
        side = side.src[0]
    if side.op is not Ops.LOAD or side.dtype != tc.dtype_in or len(side.src) != 1:
        return None
    index = side.src[0]
    if index.op is not Ops.INDEX or len(index.src) != 2 or index.src[0].op is not Ops.DEFINE_GLOBAL:
        return None
    return side


def _ranges_in(uop: UOp) -> set[UOp]:
    return {node for node in uop.toposort() if node.op is Ops.RANGE}


def _pick_axis(own: set[UOp], other: set[UOp], outputs: set[UOp], tile: int) -> UOp | None:
    # the innermost output axis this operand alone depends on, with a size the tile divides
    candidates = [
        r
        for r in own - other
        if r in outputs
        and r.arg.kind is AxisKind.GLOBAL
        and (size := constant_size(r)) is not None
        and size % tile == 0
    ]
    return max(candidates, key=lambda r: r.arg.axis) if candidates else None


def _coordinate(layout: FragmentLayout, lane: UOp, element: int) -> tuple[UOp, UOp]:
    """(row, column) of register `element` of the warp lane `lane` (an index uop) as index expressions."""
    row_constant, column_constant = layout.coordinate(0, element)
    row: UOp = UOp.const(dtypes.index, row_constant)
    column: UOp = UOp.const(dtypes.index, column_constant)
    for bit, (row_offset, column_offset) in enumerate(layout.lane_bits):
        value = (lane // (1 << bit)) % 2 if bit < len(layout.lane_bits) - 1 else lane // (1 << bit)
        if row_offset:
            row = row + value * row_offset
        if column_offset:
            column = column + value * column_offset
    return row, column


def apply_tensor_core(sink: UOp, opt: Opt, renderer: Renderer) -> UOp:
    """`sink` with its matmul mapped onto tensor core `opt.arg` over REDUCE axis `opt.axis` (module docstring)."""
    if opt.arg == ANY_TENSOR_CORE and not isinstance(opt.arg, bool) and renderer.tensor_cores:
        refusals = []
        for index in range(len(renderer.tensor_cores)):
            try:
                return _apply_tensor_core(sink, Opt(opt.op, opt.axis, index), renderer)
            except KernelOptError as error:
                refusals.append(f"{renderer.tensor_cores[index]}: {error}")
        raise _fail(f"the kernel fits none of {renderer!r}'s tensor cores ({'; '.join(refusals)})")
    return _apply_tensor_core(sink, opt, renderer)


def _apply_tensor_core(sink: UOp, opt: Opt, renderer: Renderer) -> UOp:
    tc = _tensor_core(opt, renderer)
    assert tc.layouts is not None
    if applied_opts(sink):
        raise _fail(f"must be the first opt; already applied {list(applied_opts(sink))}")
    reduces = reduces_of(sink)
    if len(reduces) != 1:
        raise _fail(f"needs exactly one REDUCE, the kernel has {len(reduces)}")
    reduction = reduces[0]
    k = next((r for r in reduction.src[1:] if r.arg.axis == opt.axis), None)
    if k is None or len(reduction.src) != 2 or reduction.arg is not Ops.ADD:
        raise _fail(
            f"needs a sum over the single REDUCE axis {opt.axis!r}, got {reduction.arg!r} over "
            f"{[r.arg.axis for r in reduction.src[1:]]}"
        )
    value = reduction.src[0]
    if reduction.dtype != tc.dtype_out or value.op is not Ops.MUL:
        raise _fail(f"needs a {tc.dtype_out.name} sum of a product, got {reduction.dtype.name} of {value.op!r}")
    n_tile, m_tile, k_tile = tc.dims
    k_size = constant_size(k)
    if k_size is None or k_size % k_tile:
        raise _fail(f"reduce axis {opt.axis} of size {k.src[0].render()} is not a multiple of K={k_tile}")
    if len(sink.src) != 1 or sink.src[0].op is not Ops.END or sink.src[0].src[0].op is not Ops.STORE:
        raise _fail("needs a kernel with one output")
    end = sink.src[0]
    outputs = set(end.src[1:])
    found = None
    for first, second in ((value.src[0], value.src[1]), (value.src[1], value.src[0])):
        a_load, b_load = _operand_load(first, tc), _operand_load(second, tc)
        if a_load is None or b_load is None:
            continue
        a_ranges, b_ranges = _ranges_in(a_load), _ranges_in(b_load)
        m = _pick_axis(a_ranges, b_ranges, outputs, m_tile)
        n = _pick_axis(b_ranges, a_ranges, outputs, n_tile)
        if m is not None and n is not None and k in a_ranges and k in b_ranges:
            found = (a_load, b_load, m, n)
            break
    if found is None:
        raise _fail(
            f"needs a product of two {tc.dtype_in.name} loads over axes M, N (multiples of {m_tile}, {n_tile}) that "
            f"only one side reads; tensor core {tc}"
        )
    a_load, b_load, m, n = found
    a_layout, b_layout, c_layout = tc.layouts
    lane_axis = max(r.arg.axis for r in kernel_ranges(sink)) + 1
    lane = UOp.range(tc.threads, lane_axis, AxisKind.LOCAL).replace(tag=WARP_LANE_TAG)
    outer = {
        r: UOp.range(int(r.src[0].arg) // tile, r.arg.axis, r.arg.kind)
        for r, tile in ((m, m_tile), (n, n_tile), (k, k_tile))
    }
    mo, no, ko = outer[m], outer[n], outer[k]

    def fragment(load: UOp, layout: FragmentLayout, rows: tuple[UOp, UOp, int], columns: tuple[UOp, UOp, int]) -> UOp:
        elements = []
        for element in range(layout.elements):
            row, column = _coordinate(layout, lane, element)
            mapping = {rows[0]: rows[1] * rows[2] + row, columns[0]: columns[1] * columns[2] + column}
            elements.append(load.substitute(mapping))
        return UOp.vectorize(*elements)

    a = fragment(a_load, a_layout, (m, mo, m_tile), (k, ko, k_tile))
    b = fragment(b_load, b_layout, (k, ko, k_tile), (n, no, n_tile))
    accumulator_dtype = tc.dtype_out.vec(c_layout.elements)
    zero = UOp.const(accumulator_dtype, 0.0 if dtypes.is_float(tc.dtype_out) else 0)
    wmma = UOp(Ops.WMMA, accumulator_dtype, (a, b, zero), tc.wmma_arg())
    total = UOp(Ops.REDUCE, accumulator_dtype, (wmma, ko), Ops.ADD)
    store = end.src[0]
    ends = []
    for element in range(c_layout.elements):
        row, column = _coordinate(c_layout, lane, element)
        mapping = {reduction: total.gep(element), m: mo * m_tile + row, n: no * n_tile + column}
        ranges = [outer.get(r, r) for r in end.src[1:]]
        ends.append(UOp(Ops.END, dtypes.void, (store.substitute(mapping), *ranges, lane)))
    rebuilt = sink.replace(src=tuple(ends))
    # outer ranges of size 1 are no loops at all
    return replace_ranges(rebuilt, {r: UOp.const(dtypes.index, 0) for r in outer.values() if constant_size(r) == 1})
