"""Range analysis (vmin/vmax) against brute-force enumeration of every value an op can take."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.uops import DType, Ops, UOp, dtypes
from kiln.uops.range_analysis import bounds, dtype_bounds


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def wrap(dtype: DType, value: int) -> int:
    if dtype == dtypes.index:
        return value
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    if not dtypes.is_unsigned(dtype) and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


# an independent model of each integer op on Python ints (C semantics); None where C is undefined
MODEL = {
    Ops.ADD: lambda a, b: a + b,
    Ops.SUB: lambda a, b: a - b,
    Ops.MUL: lambda a, b: a * b,
    Ops.IDIV: lambda a, b: None if b == 0 else c_div(a, b),
    Ops.MOD: lambda a, b: None if b == 0 else a - b * c_div(a, b),
    Ops.MAX: max,
    Ops.AND: lambda a, b: a & b,
    Ops.OR: lambda a, b: a | b,
    Ops.XOR: lambda a, b: a ^ b,
    Ops.SHL: lambda a, b: a << b,
    Ops.SHR: lambda a, b: a >> b,
    Ops.CMPLT: lambda a, b: a < b,
    Ops.CMPNE: lambda a, b: a != b,
    Ops.CMPEQ: lambda a, b: a == b,
}
# ops whose bounds are the exact hull of their values for independent operands
TIGHT = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.IDIV, Ops.CMPLT}


def enumerate_values(op: Ops, dtype: DType, a: UOp, b: UOp) -> list[int]:
    values = []
    for x, y in itertools.product(range(a.arg.lo, a.arg.hi + 1), range(b.arg.lo, b.arg.hi + 1)):
        value = MODEL[op](x, y)
        if value is not None:
            values.append(value if isinstance(value, bool) else wrap(dtype, value))
    return values


interval = st.tuples(st.integers(-40, 40), st.integers(0, 12)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(MODEL, key=lambda o: o.value)), interval, interval)
def test_binary_integer_bounds_contain_every_value(op: Ops, first: tuple[int, int], second: tuple[int, int]) -> None:
    if op in (Ops.SHL, Ops.SHR):
        second = (abs(second[0]) % 8, abs(second[0]) % 8 + min(second[1] - second[0], 7))
    a = UOp.variable("a", *first)
    b = UOp.variable("b", *second)
    node = a.alu(op, b)
    values = enumerate_values(op, dtypes.index, a, b)
    if not values:
        return  # the divisor is always zero
    assert node.vmin <= min(values) and max(values) <= node.vmax, (op, first, second, node.vmin, node.vmax)
    if op in TIGHT:
        assert (node.vmin, node.vmax) == (min(values), max(values)), (op, first, second)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX]),
    st.sampled_from([dtypes.int8, dtypes.uint8]),
    st.integers(0, 255),
    st.integers(0, 40),
    st.integers(0, 255),
    st.integers(0, 40),
)
def test_fixed_width_bounds_cover_wrapped_values(
    op: Ops, dtype: DType, low_a: int, width_a: int, low_b: int, width_b: int
) -> None:
    lowest, highest = int(dtypes.min(dtype)), int(dtypes.max(dtype))
    start_a = min(lowest + low_a, highest - width_a)  # an interval inside the dtype
    start_b = min(lowest + low_b, highest - width_b)
    a = UOp.variable("a", start_a, start_a + width_a, dtype)
    b = UOp.variable("b", start_b, start_b + width_b, dtype)
    node = a.alu(op, b)
    values = enumerate_values(op, dtype, a, b)
    if values:
        assert node.vmin <= min(values) and max(values) <= node.vmax, (op, dtype, a.arg, b.arg)


def test_overflow_gives_the_whole_dtype_range() -> None:
    a = UOp.variable("a", 100, 120, dtypes.int8)
    assert ((a + a).vmin, (a + a).vmax) == (-128, 127)
    assert ((a * 2).vmin, (a * 2).vmax) == (-128, 127)
    small = UOp.variable("s", 10, 20, dtypes.int8)
    assert ((small + small).vmin, (small + small).vmax) == (20, 40)
    unsigned = UOp.variable("u", 0, 5, dtypes.uint32)
    assert ((unsigned - 1).vmin, (unsigned - 1).vmax) == (0, 2**32 - 1)  # 0 - 1 wraps
    index = UOp.variable("i", 0, 2**62)
    assert ((index * 8).vmin, (index * 8).vmax) == (0, 2**65)  # index is exact: no wrap


def test_leaves() -> None:
    assert (UOp.const(dtypes.int32, 7).vmin, UOp.const(dtypes.int32, 7).vmax) == (7, 7)
    assert bounds(UOp.const(dtypes.int32, (3, -2, 9))) == (-2, 9)
    assert bounds(UOp.variable("n", -3, 17)) == (-3, 17)
    assert bounds(UOp.range(16, 0)) == (0, 15)
    assert bounds(UOp.special(32, "gidx0")) == (0, 31)
    n = UOp.variable("n", 1, 64)
    assert bounds(UOp.range(n, 1)) == (0, 63)  # a symbolic loop size
    assert bounds(UOp.range(n * 4, 1)) == (0, 255)
    assert bounds(n.bind(5)) == (1, 64)
    lanes = UOp.vectorize(n, n * 2 + 200)
    assert bounds(lanes) == (1, 328)
    assert bounds(lanes.gep(1)) == (1, 328)  # a lane is bounded by the whole vector


def test_unknown_values_get_the_dtype_range() -> None:
    buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.int16.ptr(), (), 0)
    loaded = buffer.index(UOp.const(dtypes.index, 0)).load()
    assert bounds(loaded) == (-32768, 32767)
    floats = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 1).index(UOp.const(dtypes.index, 0)).load()
    assert bounds(floats) == (-math.inf, math.inf)
    assert bounds(floats.exp2()) == (-math.inf, math.inf)
    assert bounds(buffer) == (-math.inf, math.inf)  # a pointer is not a number
    assert dtype_bounds(dtypes.bool) == (False, True)
    assert dtype_bounds(dtypes.uint16) == (0, 65535)


def test_unary_where_cast_and_comparisons() -> None:
    a = UOp.variable("a", -3, 10)
    b = UOp.variable("b", 20, 30)
    assert bounds(-a) == (-10, 3)
    assert bounds(a.lt(b)) == (True, True)
    assert bounds(b.lt(a)) == (False, False)
    assert bounds(a.lt(5)) == (False, True)
    assert bounds(a.ne(b)) == (True, True)
    assert bounds(a.eq(b)) == (False, False)
    assert bounds(UOp.const(dtypes.index, 4).eq(UOp.const(dtypes.index, 4))) == (True, True)
    assert bounds(a.lt(5).where(a, b)) == (-3, 30)
    assert bounds(a.lt(b).where(a, b)) == (-3, 10)  # the condition is decided
    assert bounds(a.minimum(b)) == (-3, 10)
    assert bounds(a.cast(dtypes.int8)) == (-3, 10)
    assert bounds(b.cast(dtypes.bool)) == (True, True)
    assert bounds(a.cast(dtypes.bool)) == (False, True)
    assert bounds(a.cast(dtypes.float32)) == (-3.0, 10.0)
    assert bounds(UOp.variable("w", 0, 300).cast(dtypes.uint8)) == (0, 255)  # may wrap
    assert bounds(a.lt(5) & b.lt(25)) == (False, True)
    assert bounds(a.lt(20) & b.lt(40)) == (True, True)
    assert bounds(a.lt(-5) | b.lt(10)) == (False, False)


def test_modulo_and_division_details() -> None:
    a = UOp.variable("a", 0, 100)
    assert bounds(a % 7) == (0, 6)
    assert bounds(UOp.variable("x", 8, 11) % 4) == (0, 3)
    assert bounds(UOp.variable("x", 9, 10) % 4) == (1, 2)  # inside one period
    assert bounds(UOp.variable("x", -10, -9) % 4) == (-2, -1)
    assert bounds(UOp.variable("x", -5, 5) % 4) == (-3, 3)
    assert bounds(a // UOp.variable("d", 0, 4)) == (0, 100)  # a zero divisor is undefined, so it is left out
    assert bounds(a // UOp.variable("d", -4, -1)) == (-100, 0)


def test_deep_graphs_do_not_recurse() -> None:
    x = UOp.variable("x", 0, 1)
    total = x
    for _ in range(20000):
        total = total + 1
    assert bounds(total) == (20000, 20001)


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.index])
def test_bitwise_bounds_for_negative_values(dtype: DType) -> None:
    a = UOp.variable("a", -8, 5, dtype)
    b = UOp.variable("b", -3, 9, dtype)
    for op in (Ops.AND, Ops.OR, Ops.XOR):
        values = enumerate_values(op, dtype, a, b)
        node = a.alu(op, b)
        assert node.vmin <= min(values) and max(values) <= node.vmax, op
