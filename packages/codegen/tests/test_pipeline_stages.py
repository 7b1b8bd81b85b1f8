"""The pipeline as data: stage order, extra renderer passes, dtype checks after the decompositions, SPEC checks."""

from __future__ import annotations

import pytest
from renderers_for_tests import CPULikeRenderer
from sinks_for_tests import buffer, elementwise_add, kernel

from kiln.codegen import Program, get_program
from kiln.codegen.lowering.pipeline import LOWERING_PASSES, PIPELINE, run_stage
from kiln.uops import Context, GroupOp, MemoryScope, Ops, PatternMatcher, SpecError, UOp, UPat, dtypes, tracing


def test_pipeline_declares_optimize_lowering_then_linearize_with_emulation_after_decompositions() -> None:
    assert PIPELINE[0] == "optimize" and PIPELINE[-1] == "linearize"
    assert PIPELINE[1:-1] == tuple(p.name for p in LOWERING_PASSES)
    order = list(PIPELINE)
    assert order.index("multiply-add") < order.index("decompositions") < order.index("dtype emulation")
    assert order.index("dtype emulation") < order.index("renderer passes") < order.index("linear form")


class _NegatingRenderer(CPULikeRenderer):
    """Its own pass turns every float32 ADD into a SUB (a visible change to check the pass ran, traced)."""

    device = "TESTEXTRA"
    extra_passes = (
        (
            "add to sub",
            PatternMatcher([(UPat(Ops.ADD, dtype=dtypes.float32, name="x"), lambda x: UOp(Ops.SUB, x.dtype, x.src))]),
        ),
    )


def test_extra_passes_run_before_linearize_and_are_traced() -> None:
    with tracing() as traces:
        program = Program(get_program(elementwise_add(16), _NegatingRenderer(), ()))
    names = [t.name for t in traces]
    assert names.index("renderer passes") < names.index("add to sub") < names.index("linearize")
    float_ops = {u.op for u in program.uops if u.dtype == dtypes.float32 and u.op in (Ops.ADD, Ops.SUB)}
    assert float_ops == {Ops.SUB}


class _NoUint64Renderer(CPULikeRenderer):
    device = "TESTNOU64"
    native_dtypes = frozenset(dtypes.all) - {dtypes.uint64, dtypes.int64, dtypes.bfloat16}
    native_ops = GroupOp.ALU - {Ops.MULACC, Ops.SIN}


def test_dtypes_created_by_decompositions_are_checked() -> None:
    # SIN's decomposition (argument reduction) computes in 64-bit integers: a renderer without them is refused
    out, a = buffer(0, 4), buffer(1, 4)
    i = UOp.range(4, 0)
    sink = kernel(out.index(i).store(a.index(i).load().alu(Ops.SIN)).end(i))
    with pytest.raises(ValueError, match=r"cannot compute in \[.*int64"):
        get_program(sink, _NoUint64Renderer(), ())


def test_spec_knob_checks_each_stage_result() -> None:
    bad = UOp(Ops.ADD, dtypes.float32, (UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.int32, 2)))
    sink = UOp(Ops.SINK, dtypes.void, (bad,))
    assert run_stage("broken", sink, lambda s: s) is sink  # SPEC off: not checked
    with Context(SPEC=1), pytest.raises(SpecError):
        run_stage("broken", sink, lambda s: s)


def test_function_stages_are_traced_under_their_name() -> None:
    with tracing() as traces:
        result = run_stage("my stage", elementwise_add(4), lambda s: s)
    assert [t.name for t in traces] == ["my stage"] and traces[0].result is result


def test_each_stage_has_the_spec_of_its_ir_level() -> None:
    from kiln.codegen.lowering.pipeline import stage_spec
    from kiln.codegen.spec import pm_spec_kernel, pm_spec_lowered, pm_spec_lowering

    levels = [stage_spec(name) for name in PIPELINE[:-1]]
    assert levels[0] is pm_spec_kernel and levels[-1] is pm_spec_lowered and pm_spec_lowering in levels
    # the levels only ever move forward: kernel format, then lowering format, then no index dtype
    order = [pm_spec_kernel, pm_spec_lowering, pm_spec_lowered]
    assert [order.index(level) for level in levels] == sorted(order.index(level) for level in levels)
    assert stage_spec("linearize") is None and stage_spec("not a stage") is None


def test_spec_1_checks_every_corpus_kernel_at_every_stage_for_every_renderer() -> None:
    from corpus import CORPUS

    from kiln.renderers import CRenderer, CUDARenderer, LLVMRenderer, PTXRenderer, PythonRenderer

    with Context(SPEC=1):
        for renderer in (CRenderer(), LLVMRenderer(), CUDARenderer(), PTXRenderer(), PythonRenderer()):
            for case in CORPUS:
                get_program(case.sink, renderer)


def test_spec_1_rejects_a_stage_result_outside_its_level() -> None:
    # an index-dtype node after the "index dtype" stage, and a register after "optimize", are spec errors
    with Context(SPEC=1):
        leftover = UOp(Ops.SINK, dtypes.void, (UOp(Ops.ADD, dtypes.index, (UOp.const(dtypes.index, 1),) * 2),))
        with pytest.raises(SpecError, match="fails the spec"):
            run_stage("loop ends", leftover, lambda s: s)
        run_stage("accumulators", leftover, lambda s: s)  # index dtype is still allowed before "index dtype"
        register = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1, MemoryScope.REG), (), 0)
        registers = UOp(Ops.SINK, dtypes.void, (register,))
        with pytest.raises(SpecError, match="fails the spec"):
            run_stage("optimize", registers, lambda s: s)
        run_stage("accumulators", registers, lambda s: s)
