"""Keep the values a row's sum was taken of (the `row reuse` rewrite of `optimize`, serial renderers only).

softmax's row kernel is `out[r, k] = e(k) * f(sum_j e(j))` with `e(k) = exp(x[r, k] - max_r)`: the output loop
computes every `e` a second time after the sum loop computed it once. When the output is a product with (or a
quotient by) a function of one ADD reduce whose reduced expression is the output's own factor with the reduce's
range in place of an output loop of the same size, and `e` has a costly op in it (a transcendental, a division), the
sum loop also stores `e(j)` into the output, and the output loop reads it back and scales it:

    REDUCE(AFTER(e(j), STORE(out[.. j ..], e(j))), j)          the sum; each value is stored as it is added
    STORE(out[.. k ..], LOAD(AFTER(out, that REDUCE)[.. k ..]) * f(sum))

AFTER(value, store) is the value with the store ordered before its use (the store sits in the reduce's loop, under
whatever UNROLL/UPCAST lanes the opts give that loop); AFTER(out, sum) orders the loads after the whole loop.

Only for renderers without local threads: on a GPU the two loops of a row can run on different threads of a block,
and a barrier that orders shared memory need not order global memory (WGSL's workgroupBarrier). A THREAD split of
the output loop would let threads race on the stored row; `apply_opt` refuses THREAD on an axis some store of the
kernel does not depend on. The output buffer must not be read by the kernel (the scheduler never reads and writes
one buffer in a reduce kernel: an assign of such a kernel goes through a copy).
"""

from __future__ import annotations

from kiln.codegen.renderer import Renderer
from kiln.uops import Ops, UOp, dtypes

__all__ = ["reuse_row_values"]

_COSTLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.FDIV, Ops.RECIPROCAL})
"""Ops whose decomposition costs more than the store and reload (a row without one is left as it is)."""


def _fused(sink: UOp, end: UOp) -> UOp | None:
    store = end.src[0]
    if store.op is not Ops.STORE:
        return None
    index, value = store.src
    buffer = index.src[0]
    if buffer.op is not Ops.DEFINE_GLOBAL or len(index.src) != 2:
        return None
    if value.op is Ops.MUL:
        pairs = [(value.src[0], value.src[1]), (value.src[1], value.src[0])]
    elif value.op is Ops.FDIV:
        pairs = [(value.src[0], value.src[1])]
    else:
        return None
    if any(n.op is Ops.INDEX and n.src[0] is buffer for n in value.toposort()):
        return None  # the kernel reads its own output: storing early could change what it reads
    index_nodes = set(index.toposort())
    for row, scale in pairs:
        scale_nodes = set(scale.toposort())
        row_nodes = set(row.toposort())
        if not any(n.op in _COSTLY for n in row_nodes):
            continue  # a row of loads and cheap ALU ops: storing and reloading it would save nothing
        for reduction in (n for n in scale.toposort() if n.op is Ops.REDUCE):
            if reduction.arg is not Ops.ADD or len(reduction.src) != 2 or reduction.dtype != row.dtype:
                continue
            reduced, rng = reduction.src
            for loop in end.src[1:]:
                if loop in scale_nodes or loop not in row_nodes or loop not in index_nodes:
                    continue
                if loop.src[0] is not rng.src[0]:
                    continue
                if row.substitute({loop: rng}) is not reduced:
                    continue
                early = UOp(Ops.STORE, dtypes.void, (index.substitute({loop: rng}), reduced))
                kept = UOp(Ops.REDUCE, reduction.dtype, (UOp(Ops.AFTER, reduced.dtype, (reduced, early)), rng), Ops.ADD)
                scale = scale.substitute({reduction: kept})
                stored = UOp(Ops.AFTER, buffer.dtype, (buffer, kept))
                reread = UOp(Ops.LOAD, row.dtype, (index.replace(src=(stored, index.src[1])),))
                new_value = value.replace(src=(reread, scale) if value.src[0] is row else (scale, reread))
                return end.replace(src=(store.replace(src=(index, new_value)), *end.src[1:]))
    return None


def reuse_row_values(sink: UOp, renderer: Renderer) -> UOp:
    """`sink` with a row's scaled values stored by its sum loop and rescaled in place (see the module docstring);
    `sink` itself when the kernel has no such row or the renderer has local threads."""
    if renderer.has_local or len(sink.src) != 1 or sink.src[0].op is not Ops.END:
        return sink
    if any(n.op is Ops.AFTER for n in sink.toposort()):
        return sink  # already rewritten (or built by hand with its own ordering)
    fused = _fused(sink, sink.src[0])
    return sink if fused is None else sink.replace(src=(fused,))
