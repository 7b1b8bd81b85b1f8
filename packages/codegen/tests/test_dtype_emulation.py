"""bfloat16 emulated through float32 for renderers without it: bit-exact against per-op rounded numpy."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import GPULikeRenderer, ScalarRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import Program, get_program, run_program
from kiln.uops import DType, Ops, PtrDType, UOp, dtypes

NO_BF16 = frozenset(set(dtypes.all) - {dtypes.bfloat16, dtypes.float16})


class NoBfloat16Renderer(ScalarRenderer):
    device = "TESTNOBF16"
    native_dtypes = NO_BF16
    emulated_dtypes = frozenset({dtypes.bfloat16})


def to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest even), as uint16 bit patterns; NaN stays NaN."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), (bits >> 16).astype(np.uint16) | 0x40, rounded).astype(np.uint16)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def rounded(values: np.ndarray) -> np.ndarray:
    return from_bfloat16_bits(to_bfloat16_bits(values))


def run(sink: UOp, buffers: list[np.ndarray]) -> Program:
    program = Program(get_program(sink, NoBfloat16Renderer(), ()))
    run_program(program, buffers)
    return program


def test_arithmetic_rounds_after_every_op() -> None:
    bf16 = dtypes.bfloat16
    out, a, b = buffer(0, 64, bf16), buffer(1, 64, bf16), buffer(2, 64, bf16)
    i = UOp.range(64, 0)
    x, y = a.index(i).load(), b.index(i).load()
    sink = kernel(out.index(i).store(x * y + x.maximum(y) - UOp.const(bf16, 0.1)).end(i))
    rng = np.random.default_rng(5)
    a_bits = to_bfloat16_bits(rng.standard_normal(64).astype(np.float32) * 10)
    b_bits = to_bfloat16_bits(rng.standard_normal(64).astype(np.float32) * 10)
    b_bits[:4] = to_bfloat16_bits(np.array([np.inf, -np.inf, np.nan, 3.0e38], np.float32))
    result = np.zeros(64, np.uint16)
    program = run(sink, [result, a_bits, b_bits])
    xa, yb = from_bfloat16_bits(a_bits), from_bfloat16_bits(b_bits)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = rounded(rounded(rounded(xa * yb) + np.maximum(xa, yb)) - rounded(np.float32(0.1)))
    np.testing.assert_array_equal(from_bfloat16_bits(result), expected)
    # no bfloat16 is left in the program, memory is uint16
    dtypes_used: set[DType] = {
        (u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar() for u in program.uops
    }
    assert dtypes.bfloat16 not in dtypes_used and dtypes.uint16 in dtypes_used


def test_casts_between_bfloat16_and_other_dtypes() -> None:
    out_bf, out_int, a = buffer(0, 32, dtypes.bfloat16), buffer(1, 32, dtypes.int32), buffer(2, 32, dtypes.float32)
    i = UOp.range(32, 0)
    narrowed = a.index(i).load().cast(dtypes.bfloat16)
    sink = kernel(out_bf.index(i).store(narrowed).end(i), out_int.index(i).store(narrowed.cast(dtypes.int32)).end(i))
    values = np.linspace(-300.7, 300.3, 32).astype(np.float32)
    bits, ints = np.zeros(32, np.uint16), np.zeros(32, np.int32)
    run(sink, [bits, ints, values])
    np.testing.assert_array_equal(bits, to_bfloat16_bits(values))
    np.testing.assert_array_equal(ints, from_bfloat16_bits(to_bfloat16_bits(values)).astype(np.int32))


def test_bitcast_exposes_the_bit_pattern() -> None:
    out, a = buffer(0, 8, dtypes.uint16), buffer(1, 8, dtypes.bfloat16)
    i = UOp.range(8, 0)
    sink = kernel(out.index(i).store(a.index(i).load().bitcast(dtypes.uint16)).end(i))
    bits = to_bfloat16_bits(np.array([0.0, -0.0, 1.0, -2.5, 1e-40, 3e38, np.inf, np.nan], np.float32))
    result = np.zeros(8, np.uint16)
    run(sink, [result, bits])
    np.testing.assert_array_equal(result, bits)


def test_other_missing_dtypes_raise_with_their_name() -> None:
    out, a = buffer(0, 4, dtypes.float16), buffer(1, 4, dtypes.float16)
    i = UOp.range(4, 0)
    sink = kernel(out.index(i).store(a.index(i).load() + UOp.const(dtypes.float16, 1.0)).end(i))
    with pytest.raises(ValueError, match=r"cannot compute in \['float16'\]"):
        get_program(sink, NoBfloat16Renderer(), ())


def test_native_renderers_are_untouched() -> None:
    out, a = buffer(0, 4, dtypes.bfloat16), buffer(1, 4, dtypes.bfloat16)
    i = UOp.range(4, 0)
    sink = kernel(out.index(i).store(a.index(i).load() * UOp.const(dtypes.bfloat16, 2.0)).end(i))
    program = Program(get_program(sink, ScalarRenderer(), ()))
    assert any(u.op is Ops.MUL and u.dtype == dtypes.bfloat16 for u in program.uops)


class NoBfloat16GpuRenderer(GPULikeRenderer):
    device = "TESTNOBF16GPU"
    native_dtypes = NO_BF16
    emulated_dtypes = frozenset({dtypes.bfloat16})


def test_bitcasts_and_copies_keep_every_bfloat16_bit_pattern() -> None:
    # all 2**16 patterns, signalling and quiet NaN payloads included, through the emulation's loads and stores
    count = 1 << 16
    patterns = np.arange(count, dtype=np.uint16)
    i = UOp.range(count, 0)
    bf16_in, raw_in = buffer(3, count, dtypes.bfloat16), buffer(4, count, dtypes.uint16)
    copy = buffer(0, count, dtypes.bfloat16).index(i).store(bf16_in.index(i).load())
    to_bits = buffer(1, count, dtypes.int16).index(i).store(bf16_in.index(i).load().bitcast(dtypes.int16))
    from_bits = buffer(2, count, dtypes.bfloat16).index(i).store(raw_in.index(i).load().bitcast(dtypes.bfloat16))
    sink = kernel(copy.end(i), to_bits.end(i), from_bits.end(i))
    program = Program(get_program(sink, NoBfloat16GpuRenderer()))
    assert dtypes.bfloat16 not in {u.dtype.scalar() for u in program.uops if not isinstance(u.dtype, PtrDType)}
    outputs = [np.zeros(count, np.uint16), np.zeros(count, np.int16), np.zeros(count, np.uint16)]
    global_size, local_size = program.launch_dims({})
    run_program(program, [*outputs, patterns.copy(), patterns.copy()], {}, global_size, local_size)
    for output in outputs:
        np.testing.assert_array_equal(output.view(np.uint16), patterns)
