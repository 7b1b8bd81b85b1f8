"""MULACC for renderers without fma: an exact decomposition (one rounding), checked against exact fractions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from renderers_for_tests import GPULikeRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import Program, get_program, run_program
from kiln.codegen.numpy_semantics import EMULATED, from_storage, storage_dtype, to_storage
from kiln.uops import DType, GroupOp, Ops, UOp, dtypes

# (significand bits including the implicit one, smallest normal exponent, largest finite) of each format
FORMATS: dict[DType, tuple[int, int, float]] = {
    dtypes.float16: (11, -14, 65504.0),
    dtypes.bfloat16: (8, -126, float(np.ldexp(2.0 - 2.0**-7, 127))),
    dtypes.float32: (24, -126, float(np.finfo(np.float32).max)),
    dtypes.float64: (53, -1022, float(np.finfo(np.float64).max)),
}


def round_exact(value: Fraction, dtype: DType) -> float:
    """`value` rounded to nearest even in `dtype` (overflow to inf): the correctly rounded fused result."""
    precision, min_exponent, largest = FORMATS[dtype]
    if value == 0:
        return 0.0
    magnitude = abs(value)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1
    quantum = Fraction(2) ** (max(exponent, min_exponent) - precision + 1)
    steps = magnitude / quantum
    whole = math.floor(steps)
    remainder = steps - whole
    if remainder > Fraction(1, 2) or (remainder == Fraction(1, 2) and whole % 2 == 1):
        whole += 1
    rounded = whole * quantum
    result = math.inf if rounded > Fraction(largest) else float(rounded)  # exact: rounded fits float64
    return result if value > 0 else -result


class NoFmaRenderer(GPULikeRenderer):
    device = "TESTNOFMA"
    native_ops = GroupOp.ALU - {Ops.MULACC}


class NoFmaNoBfloat16Renderer(NoFmaRenderer):
    device = "TESTNOFMABF16"
    native_dtypes = frozenset(dtypes.all) - {dtypes.bfloat16}
    emulated_dtypes = frozenset({dtypes.bfloat16})


class FmaBfloat16EmulatedRenderer(GPULikeRenderer):
    device = "TESTFMABF16"
    native_ops = GroupOp.ALU
    native_dtypes = frozenset(dtypes.all) - {dtypes.bfloat16}
    emulated_dtypes = frozenset({dtypes.bfloat16})


def run_multiply_add(
    dtype: DType, renderer: GPULikeRenderer, a: np.ndarray, b: np.ndarray, c: np.ndarray
) -> tuple[Program, np.ndarray]:
    """out[i] = MULACC(a[i], b[i], c[i]) lowered for `renderer`, run by the interpreter: (program, out)."""
    count = a.size
    i = UOp.range(count, 0)
    x, y, z = (buffer(slot, count, dtype).index(i).load() for slot in (1, 2, 3))
    sink = kernel(buffer(0, count, dtype).index(i).store(x.alu(Ops.MULACC, y, z)).end(i))
    program = Program(get_program(sink, renderer))
    out = np.zeros(count, storage_dtype(dtype))
    stored = [to_storage(values, dtype) for values in (a, b, c)]
    global_size, local_size = program.launch_dims({})
    run_program(program, [out, *stored], {}, global_size, local_size)
    return program, from_storage(out, dtype)


def operands(dtype: DType, count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cases where rounding twice differs: c cancels the rounded product (the fused result is the product's
    rounding error), c near half an ulp of the product, random values, and special values."""
    rng = np.random.default_rng(seed)
    precision, _, _ = FORMATS[dtype]
    limit = {dtypes.float16: 8.0, dtypes.bfloat16: 2.0**20, dtypes.float32: 2.0**40, dtypes.float64: 2.0**300}[dtype]

    def values(n: int) -> np.ndarray:
        raw = rng.uniform(-1, 1, n) * np.exp2(rng.uniform(-np.log2(limit), np.log2(limit), n))
        return np.array([round_exact(Fraction(float(v)), dtype) for v in raw])

    a, b = values(count), values(count)
    product = np.array([round_exact(Fraction(float(x)) * Fraction(float(y)), dtype) for x, y in zip(a, b)])
    quarter = count // 4
    c = values(count)
    c[:quarter] = -product[:quarter]  # exact cancellation of the rounded product
    half_ulp = np.array([math.ulp(float(p)) * 2.0 ** (52 - precision) / 2 if p else 0.0 for p in product])
    near_half = np.array([round_exact(Fraction(float(h)), dtype) for h in half_ulp * 1.0000001])
    c[quarter : 2 * quarter] = near_half[quarter : 2 * quarter]
    special = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan]
    triples = [(x, y, z) for x in special for y in special for z in special]
    a[: len(triples)] = [t[0] for t in triples]
    b[: len(triples)] = [t[1] for t in triples]
    c[: len(triples)] = [t[2] for t in triples]
    return a, b, c


def expected_fused(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: DType) -> np.ndarray:
    results = []
    for x, y, z in zip(a.tolist(), b.tolist(), c.tolist()):
        if not all(math.isfinite(v) for v in (x, y, z)):
            with np.errstate(all="ignore"):
                results.append(float(np.float64(x) * np.float64(y) + np.float64(z)))  # inf/nan rules, no rounding
            continue
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        if exact == 0:  # IEEE: -0 only when both addends are -0
            product_negative = math.copysign(1.0, x) * math.copysign(1.0, y) < 0
            results.append(-0.0 if x * y == 0 and product_negative and math.copysign(1.0, z) < 0 else 0.0)
            continue
        results.append(round_exact(exact, dtype))
    return np.array(results)


def assert_same(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    got = np.asarray(got, np.float64)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan), what
    differ = ~nan & ((got != expected) | (np.signbit(got) != np.signbit(expected)))
    where = np.flatnonzero(differ)
    assert where.size == 0, f"{what}: {where.size} differ, first {got[where[0]]!r} != {expected[where[0]]!r}"


CASES = [
    (dtypes.float32, NoFmaRenderer()),
    (dtypes.float16, NoFmaRenderer()),
    (dtypes.float64, NoFmaRenderer()),
    (dtypes.bfloat16, NoFmaRenderer()),  # native bfloat16 without fma: the decomposition
    (dtypes.bfloat16, NoFmaNoBfloat16Renderer()),  # emulated bfloat16: the emulation's own fused path
    (dtypes.bfloat16, FmaBfloat16EmulatedRenderer()),
]


@pytest.mark.parametrize(("dtype", "renderer"), CASES, ids=lambda x: getattr(x, "name", None) or x.device)
def test_multiply_add_rounds_once_without_native_fma(dtype: DType, renderer: GPULikeRenderer) -> None:
    a, b, c = operands(dtype, 1024, seed=dtype.itemsize)
    program, got = run_multiply_add(dtype, renderer, a, b, c)
    if Ops.MULACC not in renderer.native_ops:
        assert Ops.MULACC not in {u.op for u in program.uops}
    expected = expected_fused(a, b, c, dtype)
    twice = np.array(
        [
            round_exact(Fraction(round_exact(Fraction(x) * Fraction(y), dtype)) + Fraction(z), dtype)
            if all(math.isfinite(v) for v in (x, y, z))
            else e
            for x, y, z, e in zip(a.tolist(), b.tolist(), c.tolist(), expected.tolist())
        ]
    )
    assert (twice != expected).sum() > 50  # the inputs do tell one rounding from two
    assert_same(got, expected, f"{dtype.name} on {renderer.device}")


def test_codegen_never_creates_multiply_add_itself() -> None:
    class FmaRenderer(GPULikeRenderer):
        device = "TESTFMA"
        native_ops = GroupOp.ALU

    i = UOp.range(64, 0)
    x, y, z = (buffer(slot, 64).index(i).load() for slot in (1, 2, 3))
    sink = kernel(buffer(0, 64).index(i).store(x * y + z).end(i))
    for renderer in (FmaRenderer(), NoFmaRenderer()):
        program = Program(get_program(sink, renderer))
        assert Ops.MULACC not in {u.op for u in program.uops}, renderer


def test_round_exact_oracle_on_known_values() -> None:
    assert round_exact(Fraction(1) + Fraction(1, 2**24), dtypes.float32) == 1.0  # a tie goes to even
    assert round_exact(Fraction(1) + Fraction(3, 2**24), dtypes.float32) == 1.0 + 2.0**-22
    assert round_exact(Fraction(1, 2**150) * 3, dtypes.float32) == 2.0**-148  # subnormal spacing 2**-149
    assert round_exact(Fraction(70000), dtypes.float16) == math.inf
    assert EMULATED[dtypes.bfloat16].round(np.array([1 + 2.0**-8 + 2.0**-20]))[0] == round_exact(
        Fraction(1) + Fraction(1, 2**8) + Fraction(1, 2**20), dtypes.bfloat16
    )
