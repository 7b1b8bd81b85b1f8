"""exec_alu against numpy (every op, every integer dtype with wrap-around, float32/float16 with inf/nan/-0.0)."""

from __future__ import annotations

import math
import struct
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from kiln.uops import DType, Ops, dtypes
from kiln.uops.alu import exec_alu, threefry2x32, truncated_div, truncated_mod

INT_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64]
INT_DTYPES += [dtypes.uint64]
NUMPY: dict[DType, Any] = {
    dtypes.int8: np.int8,
    dtypes.uint8: np.uint8,
    dtypes.int16: np.int16,
    dtypes.uint16: np.uint16,
    dtypes.int32: np.int32,
    dtypes.uint32: np.uint32,
    dtypes.int64: np.int64,
    dtypes.uint64: np.uint64,
    dtypes.float16: np.float16,
    dtypes.float32: np.float32,
}


def int_operands(dtype: DType, count: int, seed: int) -> np.ndarray:
    """Random values of `dtype` plus its edge values (min, max, 0, +-1)."""
    info = np.iinfo(NUMPY[dtype])
    rng = np.random.default_rng(seed)
    edges = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
    if info.min < 0:
        edges += [-1, -2]
    randoms = rng.integers(info.min, info.max, size=count, dtype=NUMPY[dtype], endpoint=True)
    small = rng.integers(max(info.min, -9), 10, size=count // 2, dtype=NUMPY[dtype])
    return np.concatenate([np.array(edges, dtype=NUMPY[dtype]), randoms, small])


def pairs(dtype: DType, seed: int) -> tuple[np.ndarray, np.ndarray]:
    a = int_operands(dtype, 120, seed)
    b = int_operands(dtype, 120, seed + 1)
    rng = np.random.default_rng(seed + 2)
    return np.concatenate([a, rng.permutation(a)]), np.concatenate([rng.permutation(b), b])


def python_ints(values: np.ndarray) -> list[int]:
    return [int(v) for v in values]


INT_BINARY_NUMPY = {
    Ops.ADD: np.add,
    Ops.SUB: np.subtract,
    Ops.MUL: np.multiply,
    Ops.MAX: np.maximum,
    Ops.AND: np.bitwise_and,
    Ops.OR: np.bitwise_or,
    Ops.XOR: np.bitwise_xor,
    Ops.CMPLT: np.less,
    Ops.CMPNE: np.not_equal,
    Ops.CMPEQ: np.equal,
}


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(INT_BINARY_NUMPY), ids=lambda o: o.name)
def test_integer_binary_ops_match_numpy(dtype: DType, op: Ops) -> None:
    a, b = pairs(dtype, seed=op.value)
    with np.errstate(over="ignore"):
        expected = INT_BINARY_NUMPY[op](a, b)
    result_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtype
    for x, y, want in zip(python_ints(a), python_ints(b), expected.tolist()):
        assert exec_alu(op, result_dtype, (x, y)) == want, (op, dtype, x, y)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.name)
def test_integer_division_and_modulo_truncate_like_c(dtype: DType) -> None:
    a, b = pairs(dtype, seed=7)
    info = np.iinfo(NUMPY[dtype])
    keep = (b != 0) & ~((a == info.min) & (b == -1) if info.min < 0 else False)  # x/0 and MIN/-1 are undefined in C
    a, b = a[keep], b[keep]
    remainder = np.fmod(a, b)  # numpy's fmod is C's % on integers: the dividend's sign
    quotient = (a - remainder) // b  # an exact division
    for x, y, want_q, want_r in zip(python_ints(a), python_ints(b), quotient.tolist(), remainder.tolist()):
        assert exec_alu(Ops.IDIV, dtype, (x, y)) == want_q, (dtype, x, y)
        assert exec_alu(Ops.MOD, dtype, (x, y)) == want_r, (dtype, x, y)


def test_integer_division_known_values() -> None:
    for (a, b), (q, r) in {(7, 2): (3, 1), (-7, 2): (-3, -1), (7, -2): (-3, 1), (-7, -2): (3, -1)}.items():
        assert exec_alu(Ops.IDIV, dtypes.int32, (a, b)) == q == truncated_div(a, b)
        assert exec_alu(Ops.MOD, dtypes.int32, (a, b)) == r == truncated_mod(a, b)
    # int8 -128 / -1 wraps to -128 (C leaves it undefined; the hardware result on wrap-around targets)
    assert exec_alu(Ops.IDIV, dtypes.int8, (-128, -1)) == -128
    with pytest.raises(ZeroDivisionError):
        exec_alu(Ops.IDIV, dtypes.int32, (1, 0))
    with pytest.raises(ZeroDivisionError):
        exec_alu(Ops.MOD, dtypes.uint8, (1, 0))


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.name)
def test_integer_unary_ternary_and_shifts_match_numpy(dtype: DType) -> None:
    a, b = pairs(dtype, seed=11)
    c = np.roll(a, 3)
    bits = dtype.itemsize * 8
    counts = python_ints(np.abs(b.astype(np.int64)) % bits) if dtype != dtypes.uint64 else [int(v) % 64 for v in b]
    shift_counts = np.array(counts, dtype=NUMPY[dtype])
    with np.errstate(over="ignore"):
        negated = np.negative(a) if info_signed(dtype) else (np.zeros_like(a) - a)
        left = np.left_shift(a, shift_counts)
        right = np.right_shift(a, shift_counts)
        fused = a * b + c
        powers = np.power(a, shift_counts % 9)
        selected = np.where(a < b, b, c)
    for i, (x, y, z) in enumerate(zip(python_ints(a), python_ints(b), python_ints(c))):
        assert exec_alu(Ops.NEG, dtype, (x,)) == int(negated[i])
        assert exec_alu(Ops.TRUNC, dtype, (x,)) == x
        assert exec_alu(Ops.SHL, dtype, (x, counts[i])) == int(left[i]), (x, counts[i])
        assert exec_alu(Ops.SHR, dtype, (x, counts[i])) == int(right[i]), (x, counts[i])
        assert exec_alu(Ops.MULACC, dtype, (x, y, z)) == int(fused[i])
        assert exec_alu(Ops.POW, dtype, (x, counts[i] % 9)) == int(powers[i])
        assert exec_alu(Ops.WHERE, dtype, (x < y, y, z)) == int(selected[i])


def info_signed(dtype: DType) -> bool:
    return not dtypes.is_unsigned(dtype)


def test_shift_counts_outside_the_width_clamp_like_ptx() -> None:
    assert exec_alu(Ops.SHL, dtypes.int32, (1, 32)) == 0
    assert exec_alu(Ops.SHL, dtypes.uint8, (255, 200)) == 0
    assert exec_alu(Ops.SHR, dtypes.int32, (-5, 40)) == -1
    assert exec_alu(Ops.SHR, dtypes.int32, (5, 40)) == 0
    assert exec_alu(Ops.SHR, dtypes.int16, (-5, -1)) == -1  # a negative count reads as a huge unsigned count


def test_integer_power_with_negative_exponent_truncates() -> None:
    assert exec_alu(Ops.POW, dtypes.int32, (2, -1)) == 0
    assert exec_alu(Ops.POW, dtypes.int32, (-1, -3)) == -1
    assert exec_alu(Ops.POW, dtypes.int32, (1, -5)) == 1
    assert exec_alu(Ops.POW, dtypes.index, (3, 40)) == 3**40  # index is exact, no wrap
    assert exec_alu(Ops.POW, dtypes.int32, (3, 40)) == (3**40 % 2**32) - (2**32 if 3**40 % 2**32 >= 2**31 else 0)


def test_bool_ops() -> None:
    table = [(False, False), (False, True), (True, False), (True, True)]
    for a, b in table:
        assert exec_alu(Ops.AND, dtypes.bool, (a, b)) is (a and b)
        assert exec_alu(Ops.OR, dtypes.bool, (a, b)) is (a or b)
        assert exec_alu(Ops.XOR, dtypes.bool, (a, b)) is (a != b)
        assert exec_alu(Ops.ADD, dtypes.bool, (a, b)) is (a or b)
        assert exec_alu(Ops.MUL, dtypes.bool, (a, b)) is (a and b)
        assert exec_alu(Ops.MAX, dtypes.bool, (a, b)) is (a or b)
        assert exec_alu(Ops.CMPLT, dtypes.bool, (a, b)) is (a < b)
    assert exec_alu(Ops.NEG, dtypes.bool, (True,)) is False


# ---- floats ----------------------------------------------------------------------------------------------------------

FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -2.5, 1e-8, 65504.0, 70000.0, 1e30, -1e30, 1e-40]
FLOAT_EDGES += [math.inf, -math.inf, math.nan, 2.0**-14, 2.0**-24, 1.0000001, 100.0, 0.1]


def float_operands(dtype: DType, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    randoms = rng.standard_normal(200) * np.exp2(rng.integers(-20, 20, 200))
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(FLOAT_EDGES), randoms]).astype(NUMPY[dtype])


def same_float(got: float, want: float) -> bool:
    """Equal as floats of the dtype: both nan, or equal with the same sign of zero."""
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


def ulps_apart(got: float, want: float, dtype: DType) -> float:
    if math.isnan(want) or math.isnan(got) or math.isinf(want) or math.isinf(got):
        return 0.0 if same_float(got, want) else math.inf
    spacing = float(np.spacing(NUMPY[dtype](abs(want)))) if want != 0 else float(np.spacing(NUMPY[dtype](0)))
    return abs(got - want) / spacing


FLOAT_BINARY_EXACT = {
    Ops.ADD: np.add,
    Ops.SUB: np.subtract,
    Ops.MUL: np.multiply,
    Ops.FDIV: np.divide,
    Ops.MAX: np.fmax,  # C fmax: a nan operand is ignored
    Ops.MOD: np.fmod,
    Ops.CMPLT: np.less,
    Ops.CMPNE: np.not_equal,
    Ops.CMPEQ: np.equal,
}
FLOAT_UNARY_EXACT = {Ops.NEG: np.negative, Ops.SQRT: np.sqrt, Ops.RECIPROCAL: np.reciprocal, Ops.TRUNC: np.trunc}
FLOAT_UNARY_APPROXIMATE = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}
FLOAT_DTYPES = [dtypes.float32, dtypes.float16]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(FLOAT_BINARY_EXACT), ids=lambda o: o.name)
def test_float_binary_ops_match_numpy(dtype: DType, op: Ops) -> None:
    a = float_operands(dtype, 1)
    b = np.random.default_rng(2).permutation(float_operands(dtype, 3))
    with np.errstate(all="ignore"):
        expected = FLOAT_BINARY_EXACT[op](a, b)
    result_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtype
    for x, y, want in zip(a.tolist(), b.tolist(), expected.tolist()):
        got = exec_alu(op, result_dtype, (x, y))
        if op is Ops.MAX and x == y == 0:
            # numpy returns its second operand for equal values; kiln orders -0.0 below +0.0 (commutative)
            want = 0.0 if math.copysign(1.0, x) > 0 or math.copysign(1.0, y) > 0 else -0.0
        assert same_float(got, want), (op, dtype, x, y, got, want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_float_unary_ops_match_numpy(dtype: DType) -> None:
    a = float_operands(dtype, 5)
    with np.errstate(all="ignore"):
        for op, function in FLOAT_UNARY_EXACT.items():
            for x, want in zip(a.tolist(), function(a).tolist()):
                assert same_float(exec_alu(op, dtype, (x,)), want), (op, x)
        for op, function in FLOAT_UNARY_APPROXIMATE.items():
            # numpy's float32 transcendentals are not correctly rounded; kiln's are (computed in float64)
            for x, want in zip(a.tolist(), function(a).tolist()):
                if op is Ops.SIN and abs(x) > 1e4:
                    continue  # large-argument reduction differs between libraries
                assert ulps_apart(exec_alu(op, dtype, (x,)), want, dtype) <= 1, (op, x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_float_power_matches_numpy(dtype: DType) -> None:
    bases = float_operands(dtype, 8)
    exponents = np.array([0.0, -0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 2.5, math.inf, -math.inf, math.nan] * 17)
    exponents = exponents[: len(bases)].astype(NUMPY[dtype])
    with np.errstate(all="ignore"):
        expected = np.power(bases, exponents)
    for x, y, want in zip(bases.tolist(), exponents.tolist(), expected.tolist()):
        assert ulps_apart(exec_alu(Ops.POW, dtype, (x, y)), want, dtype) <= 1, (x, y)


def test_float_results_round_to_the_dtype() -> None:
    assert exec_alu(Ops.ADD, dtypes.float16, (65504.0, 15.0)) == 65504.0  # below the halfway point 65520
    assert exec_alu(Ops.ADD, dtypes.float16, (65504.0, 16.0)) == math.inf  # the tie rounds to even: overflow
    assert exec_alu(Ops.ADD, dtypes.float16, (65504.0, 32.0)) == math.inf  # overflows
    assert exec_alu(Ops.MUL, dtypes.float32, (1e30, 1e30)) == math.inf
    assert exec_alu(Ops.ADD, dtypes.float32, (1.0, 2.0**-24)) == 1.0  # tie to even
    assert exec_alu(Ops.ADD, dtypes.float32, (1.0, 2.0**-23)) == 1.0 + 2.0**-23
    # bfloat16 keeps 8 significant bits: 1 + 2**-8 is a tie that rounds to even (1.0), 1 + 3*2**-8 rounds up
    assert exec_alu(Ops.ADD, dtypes.bfloat16, (1.0, 2.0**-8)) == 1.0
    assert exec_alu(Ops.ADD, dtypes.bfloat16, (1.0, 3 * 2.0**-8)) == 1.0 + 2.0**-6


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, dtypes.float64], ids=lambda d: d.name)
def test_fused_multiply_add_rounds_once(dtype: DType) -> None:
    np_type = {dtypes.float64: np.float64}.get(dtype, NUMPY.get(dtype))
    rng = np.random.default_rng(13)
    a = (1 + rng.standard_normal(300) * 1e-3).astype(np_type)
    b = (1 + rng.standard_normal(300) * 1e-3).astype(np_type)
    c = -(a.astype(np.float64) * b.astype(np.float64)).astype(np_type)  # cancellation exposes double rounding
    for x, y, z in zip(a.tolist(), b.tolist(), c.tolist()):
        got = exec_alu(Ops.MULACC, dtype, (x, y, z))
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        # the nearest value of the dtype: no neighbour of the result is closer to the exact value
        error = abs(Fraction(got) - exact)
        for direction in (math.inf, -math.inf):
            neighbour = float(np.nextafter(np_type(got), np_type(direction)))
            assert error <= abs(Fraction(neighbour) - exact), (x, y, z, got)


def test_fused_multiply_add_special_values() -> None:
    assert math.isnan(exec_alu(Ops.MULACC, dtypes.float32, (math.inf, 0.0, 1.0)))
    assert exec_alu(Ops.MULACC, dtypes.float32, (2.0, 3.0, math.inf)) == math.inf
    negative_zero = exec_alu(Ops.MULACC, dtypes.float32, (-0.0, 1.0, -0.0))
    assert negative_zero == 0 and math.copysign(1.0, negative_zero) < 0
    assert exec_alu(Ops.MULACC, dtypes.float64, (1e308, 10.0, -1e308)) == math.inf


def test_float_division_by_zero_and_special_cases() -> None:
    assert exec_alu(Ops.FDIV, dtypes.float32, (1.0, -0.0)) == -math.inf
    assert math.isnan(exec_alu(Ops.FDIV, dtypes.float32, (0.0, 0.0)))
    assert exec_alu(Ops.RECIPROCAL, dtypes.float32, (-0.0,)) == -math.inf
    assert exec_alu(Ops.LOG2, dtypes.float32, (0.0,)) == -math.inf
    assert math.isnan(exec_alu(Ops.LOG2, dtypes.float32, (-1.0,)))
    assert math.isnan(exec_alu(Ops.SIN, dtypes.float32, (math.inf,)))
    assert exec_alu(Ops.EXP2, dtypes.float32, (200.0,)) == math.inf
    assert exec_alu(Ops.POW, dtypes.float64, (-0.0, -3.0)) == -math.inf
    assert exec_alu(Ops.POW, dtypes.float64, (-10.0, 1001.0)) == -math.inf
    trunc = exec_alu(Ops.TRUNC, dtypes.float32, (-0.5,))
    assert trunc == 0 and math.copysign(1.0, trunc) < 0


# ---- vectors, threefry, errors -------------------------------------------------------------------------------------


def test_vector_operands_evaluate_per_lane() -> None:
    assert exec_alu(Ops.ADD, dtypes.int8.vec(3), ((1, 2, 127), (1, 2, 1))) == (2, 4, -128)
    assert exec_alu(Ops.MUL, dtypes.int32.vec(2), ((3, 4), 2)) == (6, 8)  # a scalar operand serves every lane
    assert exec_alu(Ops.CMPLT, dtypes.bool.vec(2), ((1, 5), (3, 3))) == (True, False)
    with pytest.raises(ValueError, match="lanes"):
        exec_alu(Ops.ADD, dtypes.int32.vec(2), ((1, 2, 3), (1, 2)))


def test_threefry_matches_random123_known_answers() -> None:
    # Random123 kat_vectors, threefry2x32 with 20 rounds: counter words, key words -> output words
    vectors = [
        ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
    ]
    for (c0, c1), (k0, k1), (o0, o1) in vectors:
        packed = exec_alu(Ops.THREEFRY, dtypes.uint64, ((c1 << 32) | c0, (k1 << 32) | k0))
        assert packed == (o1 << 32) | o0 == threefry2x32((c1 << 32) | c0, (k1 << 32) | k0)


def test_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="ALU"):
        exec_alu(Ops.LOAD, dtypes.int32, (1,))
    with pytest.raises(ValueError, match="2 operands"):
        exec_alu(Ops.ADD, dtypes.int32, (1,))
    with pytest.raises(TypeError, match="IDIV"):
        exec_alu(Ops.IDIV, dtypes.float32, (1.0, 2.0))
    with pytest.raises(TypeError, match="AND"):
        exec_alu(Ops.AND, dtypes.float32, (1.0, 2.0))


def test_float16_results_are_representable() -> None:
    # every float16 result round-trips through struct's half format unchanged
    for x, y in [(0.1, 0.2), (1e-5, 3.0), (300.0, 300.0), (-7.3, 2.9)]:
        value = exec_alu(Ops.MUL, dtypes.float16, (x, y))
        assert struct.unpack("e", struct.pack("e", value))[0] == value
