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


def conv_weight_gradient(batch: int, outputs: int, inputs: int, size: int) -> UOp:
    """conv2d's weight gradient, padding 1, 3 x 3 taps: w[o, c, u, v] = sum_{n, y, x} g[n, o, y, x] * p[n, c, y+u, x+v]
    with p the padded image (size + 2 wide, the buffer the convolution writes first); axes o, c, u, v are the
    outputs, n, y, x the reduce."""
    padded = size + 2
    w = buffer(0, outputs * inputs * 9)
    g, p = buffer(1, batch * outputs * size * size), buffer(2, batch * inputs * padded * padded)
    o, c, u, v = (UOp.range(n, axis) for axis, n in enumerate((outputs, inputs, 3, 3)))
    n, y, x = (UOp.range(s, axis, AxisKind.REDUCE) for axis, s in ((4, batch), (5, size), (6, size)))
    grad = g.index(((n * outputs + o) * size + y) * size + x).load()
    image = p.index(((n * inputs + c) * padded + y + u) * padded + x + v).load()
    return kernel(w.index(((o * inputs + c) * 3 + u) * 3 + v).store((grad * image).reduce(n, y, x)).end(o, c, u, v))
