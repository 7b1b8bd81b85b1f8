"""Random legal opt sequences over the corpus: each optimized program must compute what the unoptimized one does.

Hypothesis draws a corpus kernel, a test renderer and up to four opts; illegal opts (KernelOptError) are skipped
while drawing, so every example runs a non-empty legal sequence. 500 examples per run; the interpreter's race,
barrier and bounds checks catch lowering bugs the values alone would not show.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from corpus import CORPUS, KernelCase, assert_matches, run_case
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer

from kiln.codegen import KernelOptError, Opt, OptOps, Renderer, apply_opt
from kiln.codegen.loop_structure import range_by_axis
from kiln.codegen.opt.apply import prepare_axes
from kiln.codegen.opt.kernel_axes import constant_size
from kiln.codegen.opt.optimize import prepare_kernel
from kiln.uops import AxisKind, UOp

RENDERERS: list[Renderer] = [ScalarRenderer(), CPULikeRenderer(), GPULikeRenderer()]
# conv2d runs too long per example on serial targets; the others keep a run well under a minute
CASES = [case for case in CORPUS if case.name != "conv2d"]
FUZZED_OPS = [op for op in OptOps if op is not OptOps.TC]
EXAMPLES = 500
_REDUCE = (AxisKind.REDUCE,)
_OUTPUT = (AxisKind.LOOP, AxisKind.GLOBAL, AxisKind.LOCAL)
AXIS_KINDS = {
    OptOps.UNROLL: _REDUCE,
    OptOps.GROUP: _REDUCE,
    OptOps.GROUPTOP: _REDUCE,
    OptOps.UPCAST: _OUTPUT,
    OptOps.LOCAL: (AxisKind.GLOBAL,),
    OptOps.SWAP: (AxisKind.GLOBAL, AxisKind.LOOP, AxisKind.UPCAST),
    OptOps.THREAD: (AxisKind.LOOP,),
    OptOps.BLOCK: _REDUCE,
}


@functools.cache
def inputs_of(case_index: int) -> list[np.ndarray]:
    return CASES[case_index].inputs(np.random.default_rng(case_index))


@functools.cache
def unoptimized(case_index: int, renderer_index: int) -> list[np.ndarray]:
    return run_case(CASES[case_index], RENDERERS[renderer_index], [], inputs_of(case_index))


def draw_opt(data: st.DataObject, sink: UOp) -> Opt:
    """A plausible opt for `sink`: an existing axis and (mostly) a divisor of its size."""
    op = data.draw(st.sampled_from(FUZZED_OPS), label="op")
    if op is OptOps.NOLOCALS:
        return Opt(op)
    axes = range_by_axis(sink)
    # mostly an axis of a kind the op works on (apply_opt is the judge; this only avoids wasted draws)
    fitting = sorted(a for a, r in axes.items() if r.arg.kind in AXIS_KINDS.get(op, ()))
    axis = data.draw(st.sampled_from(fitting or sorted(axes)), label="axis")
    if op is OptOps.SWAP:
        return Opt(op, axis, data.draw(st.sampled_from(sorted(axes)), label="other axis"))
    size = constant_size(axes[axis]) or 1
    divisors = [d for d in range(2, min(size, 32) + 1) if size % d == 0]
    amount = data.draw(st.sampled_from([0, 2, 3, 4, 5, 8, *divisors]), label="amount")
    return Opt(op, axis, amount)


def draw_legal_opts(data: st.DataObject, sink: UOp, renderer: Renderer) -> list[Opt]:
    """Up to four drawn opts for `sink` on `renderer`, the illegal ones (KernelOptError) skipped; never empty."""
    # what get_program's opts apply to: the prepared kernel (a softmax row keeps its values on serial renderers) with
    # its loops as GLOBAL axes on GPUs
    sink = prepare_axes(prepare_kernel(sink, renderer), renderer)
    opts: list[Opt] = []
    for _ in range(data.draw(st.integers(1, 4), label="length")):
        opt = draw_opt(data, sink)
        try:
            sink = apply_opt(sink, opt, renderer)
        except KernelOptError:
            continue
        opts.append(opt)
        event(f"{renderer.device} {opt.op.name}")
    assume(opts)
    return opts


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(data=st.data())
def test_random_legal_opt_sequences_keep_results(data: st.DataObject) -> None:
    case_index = data.draw(st.integers(0, len(CASES) - 1), label="case")
    renderer_index = data.draw(st.integers(0, len(RENDERERS) - 1), label="renderer")
    case: KernelCase = CASES[case_index]
    renderer = RENDERERS[renderer_index]
    opts = draw_legal_opts(data, case.sink, renderer)
    got = run_case(case, renderer, opts, inputs_of(case_index))
    assert_matches(case, got, unoptimized(case_index, renderer_index), exact=case.exact)


# sequences the fuzzer found failing once, kept as fixed cases: (corpus case, renderer index, opts)
FOUND_FAILING = [
    # a group reduce (row max, local memory) inside an unrolled outer reduce (the rows): every row's partials shared
    # one local slot, so all rows got the last row's max (found 2026-12-04)
    ("sum_of_row_maxima", 2, [Opt(OptOps.GROUP, 1, 0), Opt(OptOps.UNROLL, 0, 0)]),
    ("sum_of_row_maxima", 2, [Opt(OptOps.GROUP, 1, 0), Opt(OptOps.UNROLL, 0, 2)]),
    ("sum_of_row_maxima", 2, [Opt(OptOps.GROUPTOP, 1, 4), Opt(OptOps.UNROLL, 0, 3)]),
]


@pytest.mark.parametrize(("name", "renderer_index", "opts"), FOUND_FAILING)
def test_sequences_found_failing_keep_results(name: str, renderer_index: int, opts: list[Opt]) -> None:
    case_index = next(index for index, case in enumerate(CASES) if case.name == name)
    case = CASES[case_index]
    got = run_case(case, RENDERERS[renderer_index], opts, inputs_of(case_index))
    assert_matches(case, got, case.reference(inputs_of(case_index), case.var_vals), exact=case.exact)
