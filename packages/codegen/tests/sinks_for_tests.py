"""Small kernel sinks for codegen's own tests (helper B's corpus covers breadth; these are the shapes we reason on)."""

from __future__ import annotations

from kiln.codegen import KernelInfo
from kiln.uops import AxisKind, DType, Ops, UOp, dtypes


def buffer(slot: int, size: int, dtype: DType = dtypes.float32) -> UOp:
    """DEFINE_GLOBAL `slot` of `size` elements."""
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), slot)


def kernel(*effects: UOp, name: str = "") -> UOp:
    """A kernel SINK of `effects` (END/STORE uops)."""
    return UOp(Ops.SINK, src=effects, arg=KernelInfo(name))


def elementwise_add(n: int) -> UOp:
    """out[i] = a[i] + b[i]; buffers (out, a, b)."""
    out, a, b = buffer(0, n), buffer(1, n), buffer(2, n)
    i = UOp.range(n, 0)
    return kernel(out.index(i).store(a.index(i).load() + b.index(i).load()).end(i))


def row_sum(rows: int, columns: int, op: Ops = Ops.ADD) -> UOp:
    """out[i] = reduce_j a[i * columns + j]; buffers (out, a)."""
    out, a = buffer(0, rows), buffer(1, rows * columns)
    i, j = UOp.range(rows, 0), UOp.range(columns, 1, AxisKind.REDUCE)
    return kernel(out.index(i).store(a.index(i * columns + j).load().reduce(j, op=op)).end(i))


def matmul(m: int, n: int, k: int, dtype: DType = dtypes.float32) -> UOp:
    """c[i, j] = sum_k a[i, k] * b[k, j] (row-major); axes i=0, j=1, k=2; buffers (c, a, b)."""
    c, a, b = buffer(0, m * n, dtype), buffer(1, m * k, dtype), buffer(2, k * n, dtype)
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisKind.REDUCE)
    product = a.index(i * k + r).load() * b.index(r * n + j).load()
    return kernel(c.index(i * n + j).store(product.reduce(r)).end(i, j))


def symbolic_scale(high: int) -> UOp:
    """out[i] = 2 * a[i] for i < n, n a variable in 1..high; buffers (out, a) of `high` elements."""
    n = UOp.variable("n", 1, high)
    out, a = buffer(0, high), buffer(1, high)
    i = UOp.range(n, 0)
    return kernel(out.index(i).store(a.index(i).load() * 2.0).end(i))
