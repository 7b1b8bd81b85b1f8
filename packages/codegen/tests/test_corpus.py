"""Every corpus kernel, lowered by get_program for several test renderers and run by the interpreter, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import CORPUS, KernelCase, assert_matches, evaluate_sink, run_case
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer

from kiln.codegen import Renderer
from kiln.uops import DType, GroupOp, Ops, dtypes


class NoTranscendentalsRenderer(ScalarRenderer):
    """A target without EXP2/LOG2/SIN/POW: lowering must decompose them (kiln.codegen.transcendental)."""

    device = "TESTBARE"
    native_ops = GroupOp.ALU - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW, Ops.MULACC}


RENDERERS: list[Renderer] = [ScalarRenderer(), CPULikeRenderer(), GPULikeRenderer(), NoTranscendentalsRenderer()]


def test_corpus_has_the_promised_kernels() -> None:
    names = {c.name for c in CORPUS}
    assert len(CORPUS) >= 30 and len(names) == len(CORPUS)
    assert {f"elementwise_{d.name}" for d in dtypes.all} <= names
    assert {"matmul", "conv2d", "softmax", "pad_both_sides", "symbolic_row_sum"} <= names


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_reference_agrees_with_the_direct_reading_of_the_sink(case: KernelCase) -> None:
    inputs = case.inputs(np.random.default_rng(0))
    buffers = [[dtype_zero(dtype)] * size for dtype, size in case.buffers[: case.outputs]]
    buffers += [values.tolist() for values in inputs]
    evaluate_sink(case.sink, buffers, case.var_vals)
    direct = [np.array(values) for values in buffers[: case.outputs]]
    # the scalar definition rounds transcendentals from float64; numpy's float32 ones may differ by an ulp
    assert_matches(case, direct, case.reference(inputs, case.var_vals), exact=case.exact)


def dtype_zero(dtype: DType) -> bool | int | float:
    return False if dtype == dtypes.bool else 0.0 if dtypes.is_float(dtype) else 0


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda r: r.device)
@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_lowered_program_matches_numpy(case: KernelCase, renderer: Renderer) -> None:
    inputs = case.inputs(np.random.default_rng(1))
    expected = case.reference(inputs, case.var_vals)
    for opts in ([], None):  # no optimization, then the heuristic's choice
        assert_matches(case, run_case(case, renderer, opts, inputs), expected, exact=case.exact)
