"""The interpreter's value semantics against the IR's scalar definition (kiln.uops exec_alu) and raw bits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kiln.codegen.numpy_semantics import EMULATED, alu_kernel, bitcast, from_storage, storage_dtype
from kiln.uops import DType, Ops, dtypes
from kiln.uops.alu import exec_alu

SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), 2.5e-3]


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bfloat16, dtypes.fp8e5m2])
def test_float_max_matches_exec_alu_on_every_pair_of_special_values(dtype: DType) -> None:
    pairs = list(itertools.product(SPECIAL_FLOATS, repeat=2))
    numpy_dtype = np.float64 if dtype in EMULATED else storage_dtype(dtype)
    a = np.array([x for x, _ in pairs], numpy_dtype)
    b = np.array([y for _, y in pairs], numpy_dtype)
    got = alu_kernel(Ops.MAX, dtype, dtype)((a, b), None)
    for k, (x, y) in enumerate(pairs):
        expected = float(exec_alu(Ops.MAX, dtype, (x, y)))
        value = float(got[k])
        if np.isnan(expected):
            assert np.isnan(value), (x, y, value)
            continue
        assert value == expected and np.signbit(value) == np.signbit(expected), (x, y, value, expected)


def test_float_max_of_opposite_zeros_is_positive_in_either_order() -> None:
    a = np.array([0.0, -0.0], np.float32)
    got = alu_kernel(Ops.MAX, dtypes.float32, dtypes.float32)((a, a[::-1].copy()), None)
    assert not np.signbit(got).any()


@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2])
def test_bitcast_moves_every_bit_pattern_untouched(dtype: DType) -> None:
    emulated = EMULATED[dtype]
    codes = np.arange(1 << emulated.bits, dtype=np.int64).astype(emulated.storage)
    unsigned = dtypes.uint16 if emulated.bits == 16 else dtypes.uint8
    values = from_storage(codes, dtype)
    exponent = (codes.astype(np.int64) >> emulated.mantissa_bits) & ((1 << emulated.exponent_bits) - 1)
    assert np.isnan(values[exponent == (1 << emulated.exponent_bits) - 1]).any()  # NaN patterns are in the sweep
    np.testing.assert_array_equal(bitcast(values, dtype, unsigned), codes)  # format -> raw bits
    round_trip = bitcast(bitcast(codes, unsigned, dtype), dtype, unsigned)  # raw bits -> format -> raw bits
    np.testing.assert_array_equal(round_trip, codes)
    if emulated.bits == 16:  # the same size as float16: NaN payloads survive a detour through it too
        through_half = bitcast(bitcast(values, dtype, dtypes.float16), dtypes.float16, dtype)
        np.testing.assert_array_equal(bitcast(through_half, dtype, unsigned), codes)


def test_nan_patterns_of_one_format_do_not_leak_into_another() -> None:
    bfloat16, fp8 = EMULATED[dtypes.bfloat16], EMULATED[dtypes.fp8e5m2]
    nan = bfloat16.decode(np.array([0x7F81], np.uint16))  # a signalling-NaN pattern of bfloat16
    assert fp8.encode(nan)[0] == fp8.nan_bits  # not the bfloat16 pattern's low byte
