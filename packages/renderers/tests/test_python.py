"""Tests of the Python renderer: its text form parses back into the very same uops, and runs in the interpreter."""

from __future__ import annotations

import math
from typing import Any

import cpu_kernels as kernels
import numpy as np
import pytest

from kiln.codegen import Opt, OptOps, Program, get_program, run_program
from kiln.renderers import PythonCompiler, PythonRenderer, parse_linear, render_linear
from kiln.renderers.python import decode_arg, decode_dtype, encode_arg, encode_dtype
from kiln.uops import AxisKind, DType, MemoryScope, Ops, RangeArg, SpecialArg, UOp, VarArg, dtypes

CORPUS = kernels.load_corpus().CORPUS


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_round_trips_and_runs_like_numpy(case: Any) -> None:
    corpus = kernels.load_corpus()
    renderer = PythonRenderer()
    program = Program(get_program(case.sink, renderer))
    assert program.binary == program.source.encode()
    uops = renderer.compiler.load(program.binary)
    assert len(uops) == len(program.uops)
    assert all(parsed is original for parsed, original in zip(uops, program.uops))  # hash-consing: same objects
    rng = np.random.default_rng(2)
    inputs = case.inputs(rng)
    outputs = case.output_buffers()
    stored = [corpus.to_storage(v, d) for v, (d, _) in zip(inputs, case.buffers[case.outputs :])]
    global_size, local_size = program.launch_dims(case.var_vals)
    run_program(uops, [*outputs, *stored], case.var_vals, global_size, local_size)
    got = [corpus.from_storage(raw, d) for raw, (d, _) in zip(outputs, case.buffers)]
    corpus.assert_matches(case, got, case.reference(inputs, case.var_vals), case.exact)


def test_gpu_style_program_round_trips() -> None:
    # blocks, local threads, shared memory and barriers (a grouped reduction) survive the text form
    corpus = kernels.load_corpus()
    case = corpus.CASES_BY_NAME["sum_axis1"]
    opts = [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUPTOP, 1, 4)]
    program = Program(get_program(case.sink, PythonRenderer(), opts))
    ops = {u.op for u in program.uops}
    assert {Ops.SPECIAL, Ops.DEFINE_LOCAL, Ops.BARRIER} <= ops
    assert tuple(parse_linear(program.source)) == program.uops


@pytest.mark.parametrize(
    "arg",
    [
        None,
        True,
        False,
        0,
        -(2**63),
        2**64 - 1,
        1.5,
        -0.0,
        math.inf,
        -math.inf,
        5e-324,
        (0, 3),
        RangeArg(2, AxisKind.REDUCE),
        VarArg("start pos", 1, 4096),
        SpecialArg("lidx1"),
        Ops.MAX,
    ],
)
def test_args_round_trip_exactly(arg: object) -> None:
    decoded = decode_arg(encode_arg(arg))
    assert type(decoded) is type(arg) and repr(decoded) == repr(arg)
    if isinstance(arg, float):
        assert math.copysign(1.0, decoded) == math.copysign(1.0, arg)


def test_nan_constant_round_trips() -> None:
    uops = [UOp.const(dtypes.float32, math.nan)]
    assert parse_linear(render_linear(uops))[0] is uops[0]


@pytest.mark.parametrize(
    "dtype",
    [
        dtypes.void,
        dtypes.index,
        dtypes.fp8e5m2,
        dtypes.float16.vec(4),
        dtypes.int32.ptr(12),
        dtypes.float32.vec(4).ptr(64),
        dtypes.uint8.ptr(8, MemoryScope.LOCAL),
        dtypes.float32.ptr(4, MemoryScope.REG).vec(2),
    ],
    ids=repr,
)
def test_dtypes_round_trip(dtype: DType) -> None:
    assert decode_dtype(encode_dtype(dtype)) is dtype


def test_bad_programs_name_the_line() -> None:
    with pytest.raises(ValueError, match="starts with"):
        parse_linear("not a program\n")
    good = render_linear([UOp.const(dtypes.int32, 3)])
    with pytest.raises(ValueError, match="line 3"):
        parse_linear(good + '["ADD","int32",[0,7],null]\n')
    with pytest.raises(ValueError, match="line 2"):
        parse_linear(good.replace("CONST", "NOT_AN_OP"))
    with pytest.raises(RuntimeError, match="invalid"):
        PythonCompiler().compile(good + '["ADD","int32",[0],null]\n')  # ADD with one source fails the spec


def test_uses_before_definition_are_refused() -> None:
    late = UOp.const(dtypes.int32, 1)
    with pytest.raises(ValueError, match="not earlier"):
        render_linear([late + late])


@pytest.mark.parametrize("dtype", kernels.NEGATIVE_CONSTANT_DTYPES, ids=lambda d: d.name)
def test_negative_constants_round_trip_and_compute(dtype: DType) -> None:
    # negative literals (-0.0, -inf, the minimum) are JSON values in the text form: they parse back exactly
    sink, buffers, expected = kernels.negative_constants_case(dtype)
    renderer = PythonRenderer()
    program = Program(get_program(sink, renderer, []))
    uops = renderer.compiler.load(program.binary)
    assert all(parsed is original for parsed, original in zip(uops, program.uops))
    run_program(uops, buffers, {}, *program.launch_dims({}))
    kernels.check_negative_constants(buffers, expected, dtype, f"Python renderer {dtype.name}")
