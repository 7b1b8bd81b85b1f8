"""Group reduces through local memory: results, barriers, and no data race (the interpreter checks races)."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import GPULikeRenderer
from sinks_for_tests import buffer, kernel, row_sum

from kiln.codegen import Opt, OptOps, Program, get_program, run_program
from kiln.uops import AxisKind, MemoryScope, Ops, UOp

GPU = GPULikeRenderer()


def local_buffers(program: Program) -> list[UOp]:
    return [u for u in program.uops if u.op is Ops.DEFINE_LOCAL]


@pytest.mark.parametrize(
    "opts",
    [
        (Opt(OptOps.GROUP, 1, 16),),
        (Opt(OptOps.GROUPTOP, 1, 32),),
        (Opt(OptOps.GROUP, 1, 8), Opt(OptOps.UPCAST, 0, 2)),
        (Opt(OptOps.GROUP, 1, 4), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 1, 4)),
        (Opt(OptOps.GROUPTOP, 1, 4), Opt(OptOps.GROUP, 1, 2)),
    ],
)
def test_group_reduce_matches_numpy_without_races(opts: tuple[Opt, ...]) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal(8 * 128).astype(np.float32)
    out = np.zeros(8, np.float32)
    program = Program(get_program(row_sum(8, 128), GPU, opts))
    global_size, local_size = program.launch_dims()
    run_program(program, [out, a], {}, global_size, local_size)
    np.testing.assert_allclose(out, a.reshape(8, 128).sum(1), rtol=1e-5, atol=1e-5)
    assert [u.op for u in program.uops].count(Ops.BARRIER) == 1
    (shared,) = local_buffers(program)
    # one partial per thread of the block (and per upcast lane)
    assert shared.dtype.scope is MemoryScope.LOCAL and shared.dtype.size == np.prod(local_size) * (
        2 if Opt(OptOps.UPCAST, 0, 2) in opts else 1
    )


def test_group_reduce_inside_a_loop_waits_before_reusing_local_memory() -> None:
    # out[o] = sum_i max_j a[o, i, j]: the grouped max runs once per iteration of the i loop
    out, a = buffer(0, 2), buffer(1, 2 * 4 * 64)
    o, i, j = UOp.range(2, 0), UOp.range(4, 1, AxisKind.REDUCE), UOp.range(64, 2, AxisKind.REDUCE)
    inner = a.index(o * 256 + i * 64 + j).load().reduce(j, op=Ops.MAX)
    sink = kernel(out.index(o).store(inner.reduce(i)).end(o))
    program = Program(get_program(sink, GPU, (Opt(OptOps.GROUP, 2, 16),)))
    values = np.random.default_rng(4).random(512).astype(np.float32)
    result = np.zeros(2, np.float32)
    run_program(program, [result, values])  # raises DataRaceError if a partial is overwritten while being read
    np.testing.assert_allclose(result, values.reshape(2, 4, 64).max(2).sum(1), rtol=1e-6)
    uops = list(program.uops)
    loop = next(u for u in uops if u.op is Ops.RANGE and u.arg.axis == 1)
    end = next(u for u in uops if u.op is Ops.END and u.src[0] is loop)
    assert [u.op for u in uops[uops.index(loop) : uops.index(end)]].count(Ops.BARRIER) == 2


def test_two_group_reduces_use_two_buffers() -> None:
    # softmax-like: a grouped max, then a grouped sum that needs the max
    out, a = buffer(0, 4), buffer(1, 4 * 64)
    o, j1, j2 = UOp.range(4, 0), UOp.range(64, 1, AxisKind.REDUCE), UOp.range(64, 2, AxisKind.REDUCE)
    peak = a.index(o * 64 + j1).load().reduce(j1, op=Ops.MAX)
    total = (a.index(o * 64 + j2).load() - peak).reduce(j2)
    sink = kernel(out.index(o).store(total).end(o))
    program = Program(get_program(sink, GPU, (Opt(OptOps.GROUP, 1, 16), Opt(OptOps.GROUPTOP, 2, 8))))
    values = np.random.default_rng(5).random(256).astype(np.float32)
    result = np.zeros(4, np.float32)
    global_size, local_size = program.launch_dims()
    run_program(program, [result, values], {}, global_size, local_size)
    rows = values.reshape(4, 64)
    np.testing.assert_allclose(result, (rows - rows.max(1, keepdims=True)).sum(1), rtol=1e-5, atol=1e-5)
    assert len(local_buffers(program)) == 2
