"""Decomposed transcendentals, run by the interpreter over sweeps of bit patterns, against numpy (in ulps)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from kiln.codegen.interpreter import run_program
from kiln.codegen.numpy_semantics import EMULATED
from kiln.codegen.transcendental import DECOMPOSABLE_OPS, decompose, pm_transcendental, transcendental_rewrites
from kiln.uops import DType, GroupOp, Ops, SpecialArg, UOp, dtypes, graph_rewrite

RNG = np.random.default_rng(7)
NUMPY = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.POW: np.power}
# what a decomposition may use: the renderer that needs it has at least these
BASIC_OPS = {
    Ops.ADD,
    Ops.SUB,
    Ops.MUL,
    Ops.CMPLT,
    Ops.CMPNE,
    Ops.WHERE,
    Ops.AND,
    Ops.OR,
    Ops.SHL,
    Ops.SHR,
    Ops.XOR,
    Ops.MAX,
    Ops.CAST,
    Ops.BITCAST,
    Ops.CONST,
    Ops.VCONST,
    Ops.CMPEQ,
}


def evaluate(op: Ops, dtype: DType, *arrays: np.ndarray, fused: bool = False) -> np.ndarray:
    """The decomposition of `op` on `arrays` (one thread per element), run by the interpreter; `fused`: the form for
    a renderer with a native MULACC (its polynomials fused, rounded once per step)."""
    count = arrays[0].size
    out = UOp(Ops.DEFINE_GLOBAL, dtype.ptr(count), (), 0)
    inputs = [UOp(Ops.DEFINE_GLOBAL, dtype.ptr(count), (), k + 1) for k in range(len(arrays))]
    thread = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, count),), SpecialArg("gidx0"))
    value = decompose(op, *(b.index(thread).load() for b in inputs), fused=fused)
    program = [*out.index(thread).store(value).toposort()]
    program = [u for u in program if u.op is Ops.DEFINE_GLOBAL] + [u for u in program if u.op is not Ops.DEFINE_GLOBAL]
    result = np.zeros(count, arrays[0].dtype)
    run_program(program, [result, *arrays])
    return result


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in representable values (NaN to NaN is 0, NaN to a number infinite, +0 to -0 is 0)."""
    signed = np.dtype(f"i{a.itemsize}")
    bits = [x.view(signed).astype(np.int64) for x in (a, b)]
    magnitude = (1 << (8 * a.itemsize - 1)) - 1
    ordered = [np.where(x < 0, -(x & magnitude), x) for x in bits]
    # the difference wraps in int64 but is exact as uint64
    with np.errstate(over="ignore"):
        difference = np.where(ordered[0] >= ordered[1], ordered[0] - ordered[1], ordered[1] - ordered[0])
    distance = difference.view(np.uint64).astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    return np.where(nan_a & nan_b, 0.0, np.where(nan_a | nan_b, np.inf, distance))


def sweep(dtype: type[np.floating], count: int = 1 << 16) -> np.ndarray:
    """`count` evenly spaced bit patterns (every sign, exponent and mantissa region) plus special values."""
    bits = 8 * np.dtype(dtype).itemsize
    unsigned = np.dtype(f"u{bits // 8}")
    step = ((1 << bits) - 1) // (count - 1)
    patterns = np.arange(count, dtype=np.uint64) * np.uint64(step)
    values = patterns.astype(unsigned).view(dtype)
    info = np.finfo(dtype)
    specials = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        1.0,
        -1.0,
        0.5,
        2.0,
        info.tiny,
        info.smallest_subnormal,
        -info.smallest_subnormal,
        info.max,
        -info.max,
        np.pi,
        np.pi / 2,
        np.pi / 4,
        1e-30,
        1e30,
    ]
    return np.concatenate([values, np.array(specials, dtype=dtype)])


def exp2_edges(dtype: type[np.floating]) -> np.ndarray:
    # around overflow, the normal/subnormal boundary, the last subnormal and beyond
    top = 128 if dtype == np.float32 else 1024
    low = 149 if dtype == np.float32 else 1074
    centers = [top, -(top - 2), -low, -(low + 1), 0.0]
    return np.concatenate([np.linspace(c - 2, c + 2, 4001, dtype=np.float64) for c in centers]).astype(dtype)


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, Ops.SIN], ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_unary_within_two_ulps_of_numpy(op: Ops, dtype: type[np.floating], fused: bool) -> None:
    x = sweep(dtype)
    if op is Ops.EXP2:
        x = np.concatenate([x, exp2_edges(dtype)])
    if op is Ops.LOG2:
        x = np.concatenate([x, (1 + RNG.uniform(-1e-3, 1e-3, 20000)).astype(dtype)])  # results near zero
    got = evaluate(op, dtypes.float32 if dtype == np.float32 else dtypes.float64, x, fused=fused)
    with np.errstate(all="ignore"):
        expected = NUMPY[op](x)
    distance = ulps(got, expected)
    worst = int(np.argmax(distance))
    assert distance.max() <= 2, f"{op} {dtype.__name__}({x[worst]!r}) = {got[worst]!r}, numpy {expected[worst]!r}"
    # zeros keep numpy's sign (sin(-0) = -0, exp2 underflow = +0)
    zeros = expected == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(expected[zeros]))


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, Ops.SIN], ids=lambda o: o.name)
def test_float32_within_one_ulp_of_the_exact_result(op: Ops, fused: bool) -> None:
    # float64 numpy rounded to float32 is the correctly rounded result up to a double-rounding tie
    x = sweep(np.float32)
    got = evaluate(op, dtypes.float32, x, fused=fused)
    with np.errstate(all="ignore"):
        exact = NUMPY[op](x.astype(np.float64)).astype(np.float32)
    assert ulps(got, exact).max() <= 1


def test_sin_of_huge_arguments() -> None:
    # large arguments need an exact reduction modulo pi/2: every exponent up to float32's largest
    x32 = (RNG.uniform(1, 2, 30000) * 2.0 ** RNG.integers(0, 128, 30000)).astype(np.float32)
    x32[::2] *= -1
    got = evaluate(Ops.SIN, dtypes.float32, x32)
    exact = np.sin(x32.astype(np.float64)).astype(np.float32)
    assert ulps(got, exact).max() <= 1
    # float64's hardest argument (closest to a multiple of pi/2) and a spread of huge ones
    x64 = np.concatenate(
        [
            [6381956970095103 * 2.0**797, 5319372648326954 * 2.0**-10],
            RNG.uniform(1, 2, 5000) * 2.0 ** RNG.integers(0, 1024, 5000),
        ]
    )
    assert ulps(evaluate(Ops.SIN, dtypes.float64, x64), np.sin(x64)).max() <= 2


def pow_operands(dtype: type[np.floating], count: int) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        return _pow_operands(dtype, count)


def _pow_operands(dtype: type[np.floating], count: int) -> tuple[np.ndarray, np.ndarray]:
    base = np.concatenate([RNG.standard_normal(count) * 10.0 ** RNG.integers(-8, 8, count), sweep(dtype, count)])
    spread = base.size - count
    exponent = np.concatenate(
        [
            RNG.standard_normal(count) * 10.0 ** RNG.integers(-3, 3, count),
            RNG.integers(-60, 60, spread).astype(np.float64),
        ]
    )
    mantissa = 23 if dtype == np.float32 else 52
    specials = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            1.0,
            -1.0,
            2.0,
            0.5,
            -2.0,
            -0.5,
            3.0,
            -3.0,
            1e-300,
            2.0**mantissa + 1,
            -(2.0**mantissa + 1),
            2.0 ** (mantissa + 1),
            0.3,
            -0.3,
        ]
    )
    grid_x, grid_y = np.meshgrid(specials, specials)
    return (
        np.concatenate([base, grid_x.ravel()]).astype(dtype),
        np.concatenate([exponent, grid_y.ravel()]).astype(dtype),
    )


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_pow_within_two_ulps_of_numpy_with_c99_special_cases(dtype: type[np.floating], fused: bool) -> None:
    x, y = pow_operands(dtype, 20000)
    got = evaluate(Ops.POW, dtypes.float32 if dtype == np.float32 else dtypes.float64, x, y, fused=fused)
    with np.errstate(all="ignore"):
        expected = np.power(x, y)
    distance = ulps(got, expected)
    worst = int(np.argmax(distance))
    assert distance.max() <= 2, f"pow({x[worst]!r}, {y[worst]!r}) = {got[worst]!r}, numpy {expected[worst]!r}"
    zeros = expected == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(expected[zeros]))
    infinite = np.isinf(expected)
    np.testing.assert_array_equal(got[infinite], expected[infinite])


def test_half_precision_formats_go_through_float32() -> None:
    bits = np.arange(1 << 16, dtype=np.uint16)
    halves = bits.view(np.float16)
    for op in (Ops.EXP2, Ops.LOG2, Ops.SIN):
        got = evaluate(op, dtypes.float16, halves)
        with np.errstate(all="ignore"):
            expected = NUMPY[op](halves)
        assert ulps(got, expected).max() <= 1, op
    bf16 = EMULATED[dtypes.bfloat16]
    for op in (Ops.EXP2, Ops.LOG2, Ops.SIN):
        raw = evaluate(op, dtypes.bfloat16, bits)
        with np.errstate(all="ignore"):
            exact = bf16.encode(bf16.round(NUMPY[op](bf16.decode(bits))))
        got_values, exact_values = bf16.decode(raw).astype(np.float32), bf16.decode(exact).astype(np.float32)
        # one bfloat16 ulp is 2**16 float32 ulps
        assert ulps(got_values, exact_values).max() <= 1 << 16, op


def test_vector_lanes_match_scalars() -> None:
    x = sweep(np.float32, 1 << 10)[: 1 << 10]
    thread = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, 256),), SpecialArg("gidx0"))
    source = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(1024), (), 1)
    target = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(1024), (), 0)
    lanes = dtypes.float32.vec(4).ptr(1024)
    value = decompose(Ops.SIN, UOp(Ops.INDEX, lanes, (source, thread * 4)).load())
    assert value.dtype == dtypes.float32.vec(4)
    nodes = UOp(Ops.INDEX, lanes, (target, thread * 4)).store(value).toposort()
    program = [u for u in nodes if u.op is Ops.DEFINE_GLOBAL] + [u for u in nodes if u.op is not Ops.DEFINE_GLOBAL]
    result = np.zeros(1024, np.float32)
    run_program(program, [result, x])
    np.testing.assert_array_equal(result, evaluate(Ops.SIN, dtypes.float32, x))


def test_rewrites_remove_only_missing_ops_and_use_basic_ops() -> None:
    x = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), (), 0).index(UOp.const(dtypes.index, 0)).load()
    graph = UOp.sink(x.exp2(), x.log2(), x.sin(), x.alu(Ops.POW, x), x.sqrt())
    rewritten = graph_rewrite(graph, pm_transcendental)
    ops = {u.op for u in rewritten.toposort()}
    assert not ops & DECOMPOSABLE_OPS
    alu_used = ops & GroupOp.ALU
    assert alu_used - {Ops.SQRT} <= BASIC_OPS, alu_used - BASIC_OPS
    partial = graph_rewrite(graph, transcendental_rewrites({Ops.SIN, Ops.EXP2}))
    partial_ops = {u.op for u in partial.toposort()}
    assert {Ops.SIN, Ops.EXP2} <= partial_ops and not partial_ops & {Ops.LOG2, Ops.POW}
    # with a native MULACC the polynomials fuse (and nothing else new appears)
    fused_ops = {u.op for u in graph_rewrite(graph, transcendental_rewrites({Ops.MULACC})).toposort()} & GroupOp.ALU
    assert Ops.MULACC in fused_ops and fused_ops - {Ops.SQRT, Ops.MULACC} <= BASIC_OPS
    with pytest.raises(TypeError, match="only floats"):
        decompose(Ops.EXP2, UOp.const(dtypes.int32, 1))
    with pytest.raises(ValueError, match="no decomposition"):
        decompose(Ops.SQRT, x)


# ---- float64 sin of large arguments against an exact oracle --------------------------------------------------

_ORACLE_BITS = 1300  # fraction bits of pi: x < 2**1024 times pi's error stays far below 2**-200


def _arctan_inverse_fixed(n: int, scale: int) -> int:
    """atan(1/n) * 2**scale (truncated series; error a few units)."""
    total, power, k = 0, (1 << scale) // n, 0
    while power:
        total += power // (2 * k + 1) if k % 2 == 0 else -(power // (2 * k + 1))
        power //= n * n
        k += 1
    return total


def _exact_sin(x: float) -> float:
    """sin(x) correctly rounded to float64 (barring a double-rounding tie), by integer fixed-point arithmetic:
    Machin's formula for pi, an exact reduction by the nearest multiple of pi/2, Taylor series at 2**-250."""
    guard = 16
    scale = _ORACLE_BITS + guard
    pi = (16 * _arctan_inverse_fixed(5, scale) - 4 * _arctan_inverse_fixed(239, scale)) >> guard
    half_pi = pi >> 1  # scaled by 2**_ORACLE_BITS
    mantissa, exponent = math.frexp(abs(x))
    numerator = int(mantissa * 2**53)
    shift = exponent - 53 + _ORACLE_BITS
    fixed = numerator << shift if shift >= 0 else numerator >> -shift
    quotient = (2 * fixed + half_pi) // (2 * half_pi)  # nearest multiple of pi/2
    remainder = (fixed - quotient * half_pi) >> (_ORACLE_BITS - 250)  # |r| <= pi/4, scaled by 2**250
    one = 1 << 250

    def series(start: int) -> int:
        term = one if start == 0 else remainder
        total, k = 0, start
        while term:
            total += term
            term = -term * remainder * remainder // ((k + 1) * (k + 2) * one * one)
            k += 2
        return total

    sine, cosine = series(1), series(0)
    value = [sine, cosine, -sine, -cosine][quotient % 4]
    result = float(Fraction(value, one))
    return -result if x < 0 else result


def test_exact_sin_oracle_on_known_values() -> None:
    assert _exact_sin(math.pi / 6) == pytest.approx(0.5, abs=2**-52)
    assert _exact_sin(1.0) == math.sin(1.0)
    assert _exact_sin(-(2.0**40)) == -_exact_sin(2.0**40)
    # the argument closest to a multiple of pi/2 (an odd one: sin is within 2**-60 of +-1), by cos**2 + sin**2 = 1
    hardest = 6381956970095103 * 2.0**797
    assert abs(abs(_exact_sin(hardest)) - 1.0) <= 2.0**-53
    assert _exact_sin(hardest + math.ulp(hardest) * 2**40) != _exact_sin(hardest)


def test_float64_sin_of_large_arguments_within_one_ulp() -> None:
    # the README's 1 ulp, for large float64 arguments (every exponent from 2**20 to 2**1023, the conformance
    # suite's +-2251799813691420.5 among them) against the exact result and against numpy
    x64 = np.concatenate(
        [
            [2251799813691420.5, -2251799813691420.5, 2.0**51 + 0.5, 2.0**52 - 1, 6381956970095103 * 2.0**797],
            RNG.uniform(1, 2, 1500) * 2.0 ** RNG.integers(20, 1024, 1500),
        ]
    )
    x64[5::2] *= -1
    got = evaluate(Ops.SIN, dtypes.float64, x64)
    exact = np.array([_exact_sin(float(v)) for v in x64])
    assert ulps(got, exact).max() <= 1
    assert ulps(got, np.sin(x64)).max() <= 1
