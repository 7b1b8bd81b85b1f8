"""dtypes.index -> a machine integer: int32 when every index value of the kernel provably fits, else int64."""

from __future__ import annotations

from kiln.uops import DType, Ops, PtrDType, UOp, dtypes

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


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


def lower_index_dtype(sink: UOp) -> UOp:
    """`sink` with every dtypes.index (scalar or vector) replaced by the machine integer `index_dtype_for` picks."""
    target = index_dtype_for(sink)
    rebuilt: dict[UOp, UOp] = {}
    for node in sink.toposort():
        src = tuple(rebuilt[s] for s in node.src)
        dtype = node.dtype
        if not isinstance(dtype, PtrDType) and dtype.scalar() == dtypes.index:
            dtype = target.vec(dtype.count)
        rebuilt[node] = (
            node if src == node.src and dtype == node.dtype else UOp(node.op, dtype, src, node.arg, node.tag)
        )
    return rebuilt[sink]
