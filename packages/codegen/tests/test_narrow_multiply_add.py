"""Tests of the multiply-add pass: MULACC of float16 / fp8 rounds the exact a*b+c once, even near rounding midpoints.

The oracle is codegen's interpreter running the original MULACC (exact rational arithmetic rounded once, the IR's
definition); the rewritten program runs in the same interpreter, so only the rewrite is under test. Inputs are
drawn so that a*b+c falls just beside midpoints between neighbouring values of the format, where rounding twice
(through a wider format, then the format) goes wrong.
"""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer

from kiln.codegen import linearize, run_program
from kiln.codegen.lowering.float_formats import emulate_float_formats
from kiln.codegen.lowering.fused_multiply_add import pm_multiply_add
from kiln.codegen.numpy_semantics import EMULATED
from kiln.uops import DType, Ops, SpecialArg, UOp, dtypes, graph_rewrite


class _FusingRenderer(CPULikeRenderer):
    """A renderer with MULACC among its ops (the C and LLVM renderers' case)."""

    native_ops = CPULikeRenderer.native_ops | {Ops.MULACC}


def _rewritten(program: list[UOp], emulated: list[DType]) -> list[UOp]:
    sink = graph_rewrite(UOp.sink(program[-1]), pm_multiply_add, ctx=_FusingRenderer(), name="multiply-add")
    return linearize(emulate_float_formats(sink, emulated))


def _program(dtype: DType, size: int) -> list[UOp]:
    out = UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), arg=0)
    inputs = [UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), arg=slot) for slot in (1, 2, 3)]
    count = UOp.const(dtypes.int32, size)
    thread = UOp(Ops.SPECIAL, dtypes.int32, (count,), SpecialArg("gidx0"))
    program = [out, *inputs, count, thread]
    loads = []
    for buffer in inputs:
        loads.append(buffer.index(thread).load())
        program += [buffer.index(thread), loads[-1]]
    fused = loads[0].alu(Ops.MULACC, loads[1], loads[2])
    return [*program, fused, out.index(thread), out.index(thread).store(fused)]


def _values(dtype: DType, raw: np.ndarray) -> np.ndarray:
    return raw.view(np.float16).astype(np.float64) if dtype == dtypes.float16 else EMULATED[dtype].decode(raw)


def _raw(dtype: DType, values: np.ndarray) -> np.ndarray:
    if dtype == dtypes.float16:
        return values.astype(np.float16).view(np.uint16)
    emulated = EMULATED[dtype]
    return emulated.encode(emulated.round(values))


def _near_midpoints(dtype: DType, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    storage = np.uint16 if dtype == dtypes.float16 else np.uint8
    codes = np.arange(1 << (8 * np.dtype(storage).itemsize)).astype(storage)
    finite = np.unique(_values(dtype, codes)[np.isfinite(_values(dtype, codes))])
    a, b = rng.choice(finite, size), rng.choice(finite, size)
    # c puts a*b+c next to the midpoint between two neighbours t < u: c = round(m - a*b), off by a little
    low = rng.integers(0, len(finite) - 1, size)
    midpoint = (finite[low] + finite[low + 1]) / 2
    with np.errstate(all="ignore"):
        c = _values(dtype, _raw(dtype, midpoint - a * b))
    c = np.where(rng.random(size) < 0.2, rng.choice(finite, size), c)
    return [_raw(dtype, v) for v in (a, b, c)]


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.fp8e4m3, dtypes.fp8e5m2], ids=repr)
def test_narrow_multiply_adds_round_once(dtype: DType) -> None:
    size = 20000
    inputs = _near_midpoints(dtype, size, np.random.default_rng(7))
    program = _program(dtype, size)
    rewritten = _rewritten(program, [] if dtype == dtypes.float16 else [dtype])  # the CPU renderers' fp8 case
    assert not any(u.op is Ops.MULACC for u in rewritten)
    launch = ((size, 1, 1), (1, 1, 1))
    expected = np.zeros(size, inputs[0].dtype)
    run_program(program, [expected, *(x.copy() for x in inputs)], {}, *launch)
    got = np.zeros(size, inputs[0].dtype)
    run_program(rewritten, [got, *(x.copy() for x in inputs)], {}, *launch)
    both_nan = np.isnan(_values(dtype, got)) & np.isnan(_values(dtype, expected))
    assert ((got == expected) | both_nan).all()
    # the inputs do reach the cases rounding twice gets wrong (a fused result in a wider format, then the format)
    wider = np.float32 if dtype == dtypes.float16 else np.float16
    with np.errstate(all="ignore"):
        a, b, c = (_values(dtype, x) for x in inputs)
        twice = _raw(dtype, (a * b + c).astype(wider).astype(np.float64))
    assert (twice != expected).sum() > 0


def test_wide_and_integer_multiply_adds_are_left_alone() -> None:
    for dtype in (dtypes.float32, dtypes.float64, dtypes.int32):
        sink = UOp.sink(_program(dtype, 4)[-1])
        assert graph_rewrite(sink, pm_multiply_add, ctx=_FusingRenderer(), name="multiply-add") is sink
