"""Bool math on data stays a vector op on vector-ALU renderers (vector_folding._is_index_math): a relu written as
`(x < 0) | (x == 0)` kept its OR one lane at a time (8 extracts, 8 ORs, 8 inserts), which cost the LLVM code
generator ~2 ms on a small kernel. Bool math on indices (a gate) is still split per lane. Values against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer, VectorCPU
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, get_program, run_program
from kiln.uops import Ops, UOp, dtypes

LENGTH = 64


def _relu_sink() -> UOp:
    # out[i] = 0 where a[i] < 0 or a[i] == 0, else a[i]
    out, a = buffer(0, LENGTH), buffer(1, LENGTH)
    i = UOp.range(LENGTH, 0)
    value = a.index(i).load()
    clipped = (value.lt(0.0) | value.eq(0.0)).where(0.0, value)
    return kernel(out.index(i).store(clipped).end(i))


def _gated_sink() -> UOp:
    # out[i] = a[i] where i < 5 or i == 9 (bool math on the index), else 1.0
    out, a = buffer(0, LENGTH), buffer(1, LENGTH)
    i = UOp.range(LENGTH, 0)
    return kernel(out.index(i).store((i.lt(5) | i.eq(9)).where(a.index(i).load(), 1.0)).end(i))


def _lowered(sink: UOp, renderer: CPULikeRenderer) -> Program:
    return Program(get_program(sink, renderer, [Opt(OptOps.UPCAST, 0, 8)]))


def _run(program: Program, values: np.ndarray) -> np.ndarray:
    out = np.zeros(LENGTH, np.float32)
    run_program(program, [out, values.copy()], {}, *program.launch_dims({}))
    return out


def _values() -> np.ndarray:
    values = np.random.default_rng(3).standard_normal(LENGTH).astype(np.float32)
    values[::7] = 0.0
    return values


def test_or_of_float_comparisons_stays_one_eight_lane_op() -> None:
    program = _lowered(_relu_sink(), VectorCPU())
    ors = [u for u in program.uops if u.op is Ops.OR]
    assert [u.dtype.count for u in ors] == [8]
    assert ors[0].dtype.scalar() == dtypes.bool
    values = _values()
    np.testing.assert_array_equal(_run(program, values), np.where(values <= 0, np.float32(0), values))


def test_or_of_index_comparisons_is_still_split_per_lane() -> None:
    program = _lowered(_gated_sink(), VectorCPU())
    ors = [u for u in program.uops if u.op is Ops.OR]
    assert ors and all(u.dtype.count == 1 for u in ors)
    values = _values()
    lanes = np.arange(LENGTH)
    np.testing.assert_array_equal(_run(program, values), np.where((lanes < 5) | (lanes == 9), values, np.float32(1)))


@pytest.mark.parametrize("renderer", [VectorCPU(), CPULikeRenderer()], ids=["vector", "scalar"])
def test_relu_matches_numpy_on_both_renderers(renderer: CPULikeRenderer) -> None:
    values = _values()
    got = _run(_lowered(_relu_sink(), renderer), values)
    np.testing.assert_array_equal(got, np.where(values <= 0, np.float32(0), values))
