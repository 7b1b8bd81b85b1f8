"""Tests of kiln.uops.dtype: promotion against a written-out table, truncate against numpy and exact rounding."""

from __future__ import annotations

import bisect
import itertools
import math
import pickle
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.uops import DType, MemoryScope, PtrDType, dtypes, least_upper_dtype, truncate

# ---------------------------------------------------------------------------------------------------------------
# promotion: the whole table, written out by hand
# ---------------------------------------------------------------------------------------------------------------

SHORT = {
    "b": dtypes.bool,
    "i8": dtypes.int8,
    "u8": dtypes.uint8,
    "i16": dtypes.int16,
    "u16": dtypes.uint16,
    "i32": dtypes.int32,
    "u32": dtypes.uint32,
    "i64": dtypes.int64,
    "u64": dtypes.uint64,
    "e4": dtypes.fp8e4m3,
    "e5": dtypes.fp8e5m2,
    "f16": dtypes.float16,
    "bf": dtypes.bfloat16,
    "f32": dtypes.float32,
    "f64": dtypes.float64,
}

# Rows and columns in this order. Where PyTorch defines a rule (bool, int8/uint8/int16/int32/int64, float16,
# bfloat16, float32, float64) the entry is torch.promote_types. Our choices where torch raises:
#   uint16/uint32/uint64 with signed ints: the smallest signed int holding both ranges; uint64 + signed: no rule (X).
#   fp8 with ints/bool: the fp8 type (like torch's int + float); fp8e4m3 + fp8e5m2 and fp8 + float16: float16;
#   fp8 + bfloat16: float32 (fp8 sits below float16 only, which keeps the join associative).
COLUMNS = ["b", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "e4", "e5", "f16", "bf", "f32", "f64"]
PROMOTION_TABLE = """
b   | b   i8  u8  i16 u16 i32 u32 i64 u64 e4  e5  f16 bf  f32 f64
i8  | i8  i8  i16 i16 i32 i32 i64 i64 X   e4  e5  f16 bf  f32 f64
u8  | u8  i16 u8  i16 u16 i32 u32 i64 u64 e4  e5  f16 bf  f32 f64
i16 | i16 i16 i16 i16 i32 i32 i64 i64 X   e4  e5  f16 bf  f32 f64
u16 | u16 i32 u16 i32 u16 i32 u32 i64 u64 e4  e5  f16 bf  f32 f64
i32 | i32 i32 i32 i32 i32 i32 i64 i64 X   e4  e5  f16 bf  f32 f64
u32 | u32 i64 u32 i64 u32 i64 u32 i64 u64 e4  e5  f16 bf  f32 f64
i64 | i64 i64 i64 i64 i64 i64 i64 i64 X   e4  e5  f16 bf  f32 f64
u64 | u64 X   u64 X   u64 X   u64 X   u64 e4  e5  f16 bf  f32 f64
e4  | e4  e4  e4  e4  e4  e4  e4  e4  e4  e4  f16 f16 f32 f32 f64
e5  | e5  e5  e5  e5  e5  e5  e5  e5  e5  f16 e5  f16 f32 f32 f64
f16 | f16 f16 f16 f16 f16 f16 f16 f16 f16 f16 f16 f16 f32 f32 f64
bf  | bf  bf  bf  bf  bf  bf  bf  bf  bf  f32 f32 f32 bf  f32 f64
f32 | f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f64
f64 | f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64
"""


def _table() -> dict[tuple[str, str], str]:
    entries = {}
    for line in PROMOTION_TABLE.strip().splitlines():
        row, cells = line.split("|")
        for column, cell in zip(COLUMNS, cells.split(), strict=True):
            entries[(row.strip(), column)] = cell
    return entries


TABLE = _table()


def test_table_is_complete_and_symmetric() -> None:
    assert len(TABLE) == len(COLUMNS) ** 2
    for a, b in itertools.product(COLUMNS, repeat=2):
        assert TABLE[(a, b)] == TABLE[(b, a)], (a, b)


@pytest.mark.parametrize(("lhs", "rhs"), list(itertools.product(COLUMNS, repeat=2)))
def test_promotion_matches_table(lhs: str, rhs: str) -> None:
    expected = TABLE[(lhs, rhs)]
    if expected == "X":
        with pytest.raises(TypeError, match="no promotion rule"):
            least_upper_dtype(SHORT[lhs], SHORT[rhs])
    else:
        assert least_upper_dtype(SHORT[lhs], SHORT[rhs]) is SHORT[expected]


def test_promotion_of_many_is_the_fold_of_pairs() -> None:
    # the join over a set must equal folding the table left to right (associativity), wherever the fold is defined
    for a, b, c in itertools.product(COLUMNS, repeat=3):
        ab = TABLE[(a, b)]
        folded = "X" if ab == "X" else TABLE[(ab, c)]
        bc = TABLE[(b, c)]
        other = "X" if bc == "X" else TABLE[(a, bc)]
        if folded != "X" and other != "X":
            assert folded == other, (a, b, c)
            assert least_upper_dtype(SHORT[a], SHORT[b], SHORT[c]) is SHORT[folded]


def test_promotion_index_and_vectors() -> None:
    assert least_upper_dtype(dtypes.index, dtypes.int32) is dtypes.index
    assert least_upper_dtype(dtypes.index, dtypes.uint64) is dtypes.index
    assert least_upper_dtype(dtypes.index, dtypes.float16) is dtypes.float16
    assert least_upper_dtype(dtypes.int8.vec(4), dtypes.uint8.vec(4)) is dtypes.int16.vec(4)
    with pytest.raises(ValueError, match="lane counts"):
        least_upper_dtype(dtypes.float32.vec(2), dtypes.float32)
    with pytest.raises(TypeError):
        least_upper_dtype(dtypes.void, dtypes.int32)


# ---------------------------------------------------------------------------------------------------------------
# dtype objects and helpers
# ---------------------------------------------------------------------------------------------------------------


def test_dtype_objects_are_interned_and_vectors_round_trip() -> None:
    vector = dtypes.float32.vec(4)
    assert vector is dtypes.float32.vec(4)
    assert DType("float32", 4, 4, "f", 13) is vector
    assert vector.scalar() is dtypes.float32
    assert (vector.itemsize, vector.count, vector.nbytes) == (4, 4, 16)
    assert dtypes.float32.vec(1) is dtypes.float32
    assert repr(vector) == "dtypes.float32.vec(4)"
    assert pickle.loads(pickle.dumps(vector)) is vector
    with pytest.raises(ValueError):
        vector.vec(2)
    with pytest.raises(ValueError):
        dtypes.int32.vec(0)


def test_pointer_dtypes() -> None:
    pointer = dtypes.float16.ptr(16, MemoryScope.LOCAL)
    assert isinstance(pointer, PtrDType)
    assert (pointer.base, pointer.size, pointer.scope) == (dtypes.float16, 16, MemoryScope.LOCAL)
    assert pointer is dtypes.float16.ptr(16, MemoryScope.LOCAL)
    assert pointer != dtypes.float16.ptr(16)
    assert pointer != dtypes.float16
    assert repr(pointer) == "dtypes.float16.ptr(16, MemoryScope.LOCAL)"
    assert repr(dtypes.float32.vec(4).ptr()) == "dtypes.float32.vec(4).ptr()"
    assert pickle.loads(pickle.dumps(pointer)) is pointer
    assert pointer.vec(2).scalar() is pointer


def test_predicates_and_ranges() -> None:
    assert [d.name for d in dtypes.all if dtypes.is_float(d)] == [
        "fp8e4m3",
        "fp8e5m2",
        "float16",
        "bfloat16",
        "float32",
        "float64",
    ]
    assert dtypes.is_int(dtypes.index) and not dtypes.is_int(dtypes.bool)
    assert dtypes.is_unsigned(dtypes.uint16.vec(2)) and not dtypes.is_unsigned(dtypes.int16)
    assert dtypes.is_bool(dtypes.bool.vec(4))
    integer_types: list[tuple[DType, type[np.integer[Any]]]] = [
        (dtypes.int8, np.int8),
        (dtypes.uint8, np.uint8),
        (dtypes.int16, np.int16),
        (dtypes.uint16, np.uint16),
        (dtypes.int32, np.int32),
        (dtypes.uint32, np.uint32),
        (dtypes.int64, np.int64),
        (dtypes.uint64, np.uint64),
    ]
    for dtype, np_type in integer_types:
        info = np.iinfo(np_type)
        assert (dtypes.min(dtype), dtypes.max(dtype)) == (int(info.min), int(info.max))
        assert dtype.itemsize == np.dtype(np_type).itemsize
    assert (dtypes.min(dtypes.float16), dtypes.max(dtypes.float16)) == (-math.inf, math.inf)
    assert (dtypes.min(dtypes.bool), dtypes.max(dtypes.bool)) == (False, True)
    assert dtypes.finfo(dtypes.float16) == (5, 10)
    assert dtypes.finfo(dtypes.bfloat16) == (8, 7)
    assert dtypes.finfo(dtypes.fp8e4m3) == (4, 3)
    assert dtypes.finfo(dtypes.fp8e5m2) == (5, 2)
    with pytest.raises(TypeError):
        dtypes.finfo(dtypes.int32)


def test_names_aliases_and_python_values() -> None:
    assert dtypes.from_name("half") is dtypes.float16
    assert dtypes.from_name("bfloat16") is dtypes.bfloat16
    assert (dtypes.half, dtypes.float, dtypes.double) == (dtypes.float16, dtypes.float32, dtypes.float64)
    assert (dtypes.int, dtypes.long, dtypes.uchar) == (dtypes.int32, dtypes.int64, dtypes.uint8)
    with pytest.raises(ValueError, match="quarter"):
        dtypes.from_name("quarter")
    assert dtypes.from_py(True) is dtypes.bool
    assert dtypes.from_py(3) is dtypes.default_int
    assert dtypes.from_py(3.0) is dtypes.default_float
    assert dtypes.from_py([1, 2.5]) is dtypes.float32
    assert dtypes.void not in dtypes.all and dtypes.index not in dtypes.all
    for dtype in dtypes.all:
        if dtype.fmt is not None:
            assert np.dtype(dtype.fmt).itemsize == dtype.itemsize


# ---------------------------------------------------------------------------------------------------------------
# truncate: integers against numpy's C casts
# ---------------------------------------------------------------------------------------------------------------

NUMPY_INTS = [
    (dtypes.int8, np.int8),
    (dtypes.uint8, np.uint8),
    (dtypes.int16, np.int16),
    (dtypes.uint16, np.uint16),
    (dtypes.int32, np.int32),
    (dtypes.uint32, np.uint32),
    (dtypes.int64, np.int64),
    (dtypes.uint64, np.uint64),
]


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**64 - 1))
def test_integer_wraparound_matches_numpy(value: int) -> None:
    source = np.array(value, dtype=np.int64 if value < 2**63 else np.uint64)
    for dtype, np_type in NUMPY_INTS:
        assert truncate(dtype, value) == int(source.astype(np_type))


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-(2.0**31) + 1, max_value=2.0**31 - 1))
def test_float_to_int_truncates_toward_zero_like_numpy(value: float) -> None:
    assert truncate(dtypes.int32, value) == int(np.float64(value).astype(np.int32))
    assert truncate(dtypes.int64, value) == int(np.float64(value).astype(np.int64))


def test_integer_special_cases() -> None:
    assert truncate(dtypes.index, 2**80) == 2**80
    assert truncate(dtypes.int32, math.nan) == -(2**31)
    assert truncate(dtypes.bool, 2) is True and truncate(dtypes.bool, 0.0) is False
    assert truncate(dtypes.uint8, True) == 1
    with pytest.raises(TypeError):
        truncate(dtypes.void, 1)


# ---------------------------------------------------------------------------------------------------------------
# truncate: floats against numpy (float16/32/64) and an exhaustive exact model (every format)
# ---------------------------------------------------------------------------------------------------------------


def _same_float(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float16_float32_float64_match_numpy(value: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns on overflow to inf
        assert _same_float(truncate(dtypes.float16, value), float(np.float16(value)))
        assert _same_float(truncate(dtypes.float32, value), float(np.float32(value)))
        assert _same_float(truncate(dtypes.float64, value), float(np.float64(value)))


def test_huge_ints_round_once() -> None:
    # 2**60 + 2**36 + 1 lies just above the float32 halfway point 2**60 + 2**36; rounding it to float64 first
    # would land exactly on the halfway point and round to even (down); rounding once goes up
    value = 2**60 + 2**36 + 1
    assert truncate(dtypes.float32, value) == float(2**60 + 2**37)
    assert truncate(dtypes.float32, 10**400) == math.inf
    assert truncate(dtypes.float64, -(10**400)) == -math.inf


class ExactFormat:
    """Every finite value of a small float format, decoded from its bits, for exact nearest-even rounding."""

    def __init__(self, exponent_bits: int, mantissa_bits: int, ieee_specials: bool) -> None:
        bias = 2 ** (exponent_bits - 1) - 1
        values: dict[Fraction, int] = {}  # value -> parity of the significand
        for exponent_field in range(2**exponent_bits):
            for mantissa_field in range(2**mantissa_bits):
                if ieee_specials and exponent_field == 2**exponent_bits - 1:
                    continue  # inf / NaN
                if (
                    not ieee_specials
                    and exponent_field == 2**exponent_bits - 1
                    and mantissa_field == 2**mantissa_bits - 1
                ):
                    continue  # the single NaN of the fn formats
                if exponent_field == 0:
                    value = Fraction(mantissa_field) * Fraction(2) ** (1 - bias - mantissa_bits)
                else:
                    significand = 2**mantissa_bits + mantissa_field
                    value = Fraction(significand) * Fraction(2) ** (exponent_field - bias - mantissa_bits)
                values[value] = mantissa_field & 1
        self.largest = max(values)
        # one step past the largest finite value: where rounding with an unbounded exponent would go
        step = self.largest - max(v for v in values if v < self.largest)
        self.overflow_value = self.largest + step
        self.overflow_parity = 1 - values[self.largest]
        self.has_infinity = ieee_specials
        self.values = sorted(values)
        self.parity = values

    def round(self, x: float) -> float:
        if math.isnan(x):
            return math.nan
        if math.isinf(x):
            return x if self.has_infinity else math.nan
        magnitude = abs(Fraction(x))
        candidates = [(v, self.parity[v]) for v in self._neighbours(magnitude)]
        if magnitude > self.largest:
            candidates.append((self.overflow_value, self.overflow_parity))
        best = min(candidates, key=lambda c: (abs(c[0] - magnitude), c[1]))
        if best[0] == self.overflow_value:
            result = math.inf if self.has_infinity else math.nan
        else:
            result = float(best[0])
        return math.copysign(result, x)

    def _neighbours(self, magnitude: Fraction) -> list[Fraction]:
        position = bisect.bisect_left(self.values, magnitude)
        return self.values[max(position - 1, 0) : position + 1]


FORMATS = {
    dtypes.float16: ExactFormat(5, 10, True),
    dtypes.bfloat16: ExactFormat(8, 7, True),
    dtypes.fp8e5m2: ExactFormat(5, 2, True),
    dtypes.fp8e4m3: ExactFormat(4, 3, False),
}


def test_exact_model_agrees_with_numpy_float16() -> None:
    # validates the model itself on the format numpy implements
    model = FORMATS[dtypes.float16]
    for x in [1.0 + 2**-11, 1.0 + 3 * 2**-11, 65504.0, 65519.99, 65520.0, 2**-25, 2**-25 * 1.5, 3e-8, -7.3]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _same_float(model.round(x), float(np.float16(x))), x


def test_fp8_known_values() -> None:
    # OCP FP8 spec: e4m3fn max 448 (no inf), e5m2 max 57344 (IEEE-like)
    assert truncate(dtypes.fp8e4m3, 448.0) == 448.0
    assert truncate(dtypes.fp8e4m3, 464.0) == 448.0  # halfway to the NaN encoding: ties to even 448
    assert math.isnan(truncate(dtypes.fp8e4m3, 465.0))
    assert math.isnan(truncate(dtypes.fp8e4m3, math.inf))
    assert truncate(dtypes.fp8e5m2, 57344.0) == 57344.0
    assert truncate(dtypes.fp8e5m2, 61440.0) == math.inf
    assert truncate(dtypes.fp8e4m3, 2.0**-9) == 2.0**-9  # the smallest subnormal
    assert truncate(dtypes.fp8e4m3, 2.0**-10) == 0.0  # halfway to it: ties to even zero
    assert truncate(dtypes.bfloat16, 1.0 + 2**-8) == 1.0
    assert truncate(dtypes.bfloat16, 1.0 + 3 * 2**-8) == 1.0 + 2**-6


@pytest.mark.parametrize("dtype", list(FORMATS), ids=repr)
def test_small_float_formats_round_like_the_exact_model(dtype: DType) -> None:
    model = FORMATS[dtype]
    # every representable value, every midpoint and points just around them, beyond the largest, and specials
    probes: list[float] = [0.0, -0.0, math.inf, -math.inf, math.nan]
    values = [float(v) for v in model.values] + [float(model.overflow_value)]
    for low, high in itertools.pairwise(values):
        middle = (low + high) / 2
        probes += [low, middle, math.nextafter(middle, 0.0), math.nextafter(middle, math.inf)]
    probes += [float(model.largest) * 4, 1e300]
    if dtype in (dtypes.float16, dtypes.bfloat16):
        # 16-bit formats have ~65k values: a strided sample keeps the test fast (numpy and hypothesis cover more)
        probes = probes[::13]
    for probe in probes:
        for x in (probe, -probe):
            assert _same_float(truncate(dtype, x), model.round(x)), (dtype, x)


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_bfloat16_random_values_round_like_the_exact_model(value: float) -> None:
    assert _same_float(truncate(dtypes.bfloat16, value), FORMATS[dtypes.bfloat16].round(value))
