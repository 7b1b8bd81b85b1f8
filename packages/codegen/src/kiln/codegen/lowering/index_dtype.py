"""dtypes.index -> a machine integer: int32 when every index value of the kernel provably fits, else int64.

A hardware index (SPECIAL) is the exception: it reads a 32-bit register (a GPU's block and thread ids) or the CPU
kernels' `int core_id` parameter, whatever width the kernel's index math takes. It stays `HARDWARE_INDEX_DTYPE`
(its size too) and an int64 kernel widens it with a CAST, so no renderer has to (issue 36: an LLVM kernel declared
`i32 %core_id` and used it as an i64).
"""

from __future__ import annotations

from kiln.uops import DType, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes, graph_rewrite

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

HARDWARE_INDEX_DTYPE = dtypes.int32
"""The dtype of every SPECIAL once index dtypes are lowered (the lowered and linear specs check it)."""


def index_dtype_for(sink: UOp) -> DType:
    """int32 if every index-typed node of `sink` stays within int32 (range analysis), else int64."""
    for node in sink.toposort():
        if isinstance(node.dtype, PtrDType) or node.dtype.scalar() != dtypes.index:
            continue
        if node.op is Ops.VCONST:
            values = node.arg
        elif node.dtype.count == 1:
            values = (node.vmin, node.vmax)
        else:
            continue  # vector index math is scalarized before this pass; its lanes are checked there
        if any(not isinstance(v, int) or not _INT32_MIN <= v <= _INT32_MAX for v in values):
            return dtypes.int64
    return dtypes.int32


def _machine_int(ctx: DType, x: UOp) -> UOp | None:
    dtype = x.dtype
    if isinstance(dtype, PtrDType) or dtype.scalar() != dtypes.index:
        return None
    return UOp(x.op, ctx.vec(dtype.count), x.src, x.arg, x.tag)


def _hardware_index(ctx: DType, x: UOp) -> UOp:
    size = x.src[0]  # already in `ctx`: sources are rewritten first
    if not 0 < size.vmax <= _INT32_MAX:
        raise ValueError(f"hardware index {x.arg.name!r} of size up to {size.vmax} does not fit int32")
    narrow = UOp.const(HARDWARE_INDEX_DTYPE, size.arg) if size.op is Ops.CONST else size.cast(HARDWARE_INDEX_DTYPE)
    return UOp(Ops.SPECIAL, HARDWARE_INDEX_DTYPE, (narrow,), x.arg, x.tag).cast(ctx)


pm_index_dtype = PatternMatcher(
    [
        (UPat(Ops.SPECIAL, dtype=dtypes.index, name="x"), _hardware_index),
        (UPat(dtype=dtypes.index, name="x"), _machine_int),
    ]
)
"""Every dtypes.index node (scalar or vector) -> the same node in the machine integer `ctx` (the rewrite rebuilds
its users on it); a SPECIAL -> an int32 SPECIAL, cast to `ctx` when that is wider."""


def lower_index_dtype(sink: UOp) -> UOp:
    """`sink` with every dtypes.index (scalar or vector) replaced by the machine integer `index_dtype_for` picks: one
    named graph_rewrite ("index dtype") of `pm_index_dtype`."""
    return graph_rewrite(sink, pm_index_dtype, ctx=index_dtype_for(sink), name="index dtype")
