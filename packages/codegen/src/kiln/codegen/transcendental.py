"""Transcendental ops (EXP2, LOG2, SIN, POW) decomposed into basic ALU ops, for renderers that lack them.

The decompositions use only ADD, SUB, MUL, MAX, CMPLT, CMPNE, CMPEQ, WHERE, AND, OR, XOR, SHL, SHR, CAST and
BITCAST on the float, its same-size signed int and uint64 (and MULACC in the polynomials for a renderer that has
it natively): no FDIV, no TRUNC, no tables in memory. float32 and
float64 are computed directly; float16, bfloat16 and fp8 go through float32 and are rounded back.

Accuracy, measured by tests/test_transcendental.py over sweeps of bit patterns and special values, against the
correctly rounded result (float64 numpy rounded to float32) and against numpy itself (which the tests hold to 2 ulps;
numpy's own float32 exp2 is up to 2 ulps off); errors in ulps of the result, subnormals in the subnormal spacing:
- exp2: <= 1 ulp on every input; inf, nan, overflow to inf and underflow through the subnormals exact.
- log2: <= 1 ulp, subnormal inputs included (an exact double-float evaluation rounded once).
- sin: <= 1 ulp for every finite input, however large: the argument is reduced by Payne-Hanek (the exact product
  of the mantissa with 2/pi's bits in 32-bit limbs), then evaluated as a double-float; sin(+-inf) = nan.
- pow: <= 1 ulp over the finite range (2**(y*log2|x|) with the exponent kept as a double-float), with C99's special
  cases (pow(x, 0) = 1, pow(1, y) = 1, negative bases with integer exponents, zeros and infinities).

The double-float steps need exact IEEE products and sums: a renderer must not contract `a*b+c` into a fused
multiply-add (e.g. C compilers need -ffp-contract=off) where these decompositions run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from fractions import Fraction

from kiln.uops import DType, Ops, PatternMatcher, UOp, UPat, dtypes, truncate

# ---- exact constants -------------------------------------------------------------------------------------------


def _arctan_of_inverse(x: int, one: int) -> int:
    # arctan(1/x) * one by its Taylor series in fixed point
    total = term = one // x
    square, k, sign = x * x, 1, -1
    while term:
        term //= square
        total += sign * (term // (2 * k + 1))
        k, sign = k + 1, -sign
    return total


@functools.cache
def _pi_fixed(bits: int) -> int:
    """floor-ish(pi * 2**bits) from Machin's formula, with guard bits dropped."""
    guard = 64
    one = 1 << (bits + guard)
    pi = 16 * _arctan_of_inverse(5, one) - 4 * _arctan_of_inverse(239, one)
    return pi >> guard


@functools.cache
def _ln2() -> Fraction:
    # ln 2 = 2 atanh(1/3) = 2 * sum 1 / ((2k+1) 3**(2k+1)), to 300 bits
    bits, guard = 300, 64
    one = 1 << (bits + guard)
    total, power, k = 0, one // 3, 0
    while power:
        total += power // (2 * k + 1)
        power //= 9
        k += 1
    return Fraction(2 * total >> guard, 1 << bits)


def _pi() -> Fraction:
    return Fraction(_pi_fixed(300), 1 << 300)


# ---- the float formats computed directly -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Format:
    dtype: DType
    signed: DType  # the signed int of the same size (exponent arithmetic)
    mantissa_bits: int
    bias: int
    exponent_mask: int
    exp2_clamp: float  # |x| beyond this over/underflows exp2 for sure; keeps the scale factors normal
    exp2_terms: int  # Taylor terms of 2**s on |s| <= 1/2 (float32: 8, truncation error < 5.3e-9 relative, 0.1 ulp)
    log2_terms: int  # terms of the atanh series in u = t*t (the first is 1)
    sin_terms: int  # Taylor terms of sin (r, r**3, ...) and cos (1, r**2, ...) on |r| <= pi/4
    newton_steps: int  # reciprocal refinements from a linear first guess (error squares each step)
    pow_clamp: float  # |y| beyond this over/underflows pow (x != 1) for sure; keeps the splitting exact
    reduction_bits: int  # fraction bits L of the Payne-Hanek product
    two_over_pi_bits: int  # B: 2/pi is held as floor(2/pi * 2**B)

    @property
    def split(self) -> float:
        # Veltkamp's splitter 2**ceil(p/2) + 1 cuts a p-bit significand into two halves with exact products
        return float((1 << ((self.mantissa_bits + 2) // 2)) + 1)

    def constant(self, value: Fraction | float) -> float:
        return float(truncate(self.dtype, float(value)))

    def pair(self, value: Fraction) -> tuple[float, float]:
        """`value` as an unevaluated sum hi + lo of two floats of this format."""
        high = self.constant(value)
        return high, self.constant(value - Fraction(high))


_FLOAT32 = _Format(dtypes.float32, dtypes.int32, 23, 127, 0xFF, 160.0, 8, 8, 6, 3, 2.0**30, 96, 256)
_FLOAT64 = _Format(dtypes.float64, dtypes.int64, 52, 1023, 0x7FF, 1100.0, 14, 12, 10, 4, 2.0**64, 192, 1184)
_FORMATS = {dtypes.float32: _FLOAT32, dtypes.float64: _FLOAT64}


class _Builder:
    """Builds the decomposition for values shaped like `like` (scalar or vector) in format `fmt`; `fused`: the
    polynomials' Horner steps are MULACC (one rounding each)."""

    def __init__(self, like: UOp, fmt: _Format, fused: bool = False) -> None:
        self.fmt = fmt
        self.fused = fused
        self.lanes = like.dtype.count
        self.float = fmt.dtype.vec(self.lanes)
        self.int = fmt.signed.vec(self.lanes)
        self.uint64 = dtypes.uint64.vec(self.lanes)
        self.bool = dtypes.bool.vec(self.lanes)

    def f(self, value: Fraction | float) -> UOp:
        return UOp.const(self.float, self.fmt.constant(value))

    def i(self, value: int) -> UOp:
        return UOp.const(self.int, value)

    def u(self, value: int) -> UOp:
        return UOp.const(self.uint64, value)

    # ---- double-float arithmetic (Dekker / Knuth): a value is an unevaluated pair hi + lo -------------------

    def two_sum(self, a: UOp, b: UOp) -> tuple[UOp, UOp]:
        total = a + b
        virtual = total - a
        return total, (a - (total - virtual)) + (b - virtual)

    def fast_two_sum(self, a: UOp, b: UOp) -> tuple[UOp, UOp]:
        # needs |a| >= |b| (or a == 0)
        total = a + b
        return total, b - (total - a)

    def halves(self, a: UOp) -> tuple[UOp, UOp]:
        scaled = a * self.f(self.fmt.split)
        high = scaled - (scaled - a)
        return high, a - high

    def two_product(self, a: UOp, b: UOp) -> tuple[UOp, UOp]:
        product = a * b
        a_high, a_low = self.halves(a)
        b_high, b_low = self.halves(b)
        error = ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low
        return product, error

    def multiply(self, a: tuple[UOp, UOp], b: tuple[UOp, UOp]) -> tuple[UOp, UOp]:
        product, error = self.two_product(a[0], b[0])
        return self.fast_two_sum(product, error + (a[0] * b[1] + a[1] * b[0]))

    def constant_pair(self, value: Fraction) -> tuple[UOp, UOp]:
        high, low = self.fmt.pair(value)
        return self.f(high), self.f(low)

    # ---- bits ------------------------------------------------------------------------------------------------

    def power_of_two(self, exponent: UOp) -> UOp:
        """2**exponent for an int `exponent` within the normal range, built from its bits."""
        return ((exponent + self.i(self.fmt.bias)) << self.i(self.fmt.mantissa_bits)).bitcast(self.float)

    def round_small(self, x: UOp) -> tuple[UOp, UOp]:
        """x rounded to the nearest integer (ties to even) as (int, float), for |x| < 2**(mantissa_bits - 1).

        Adding 1.5 * 2**mantissa_bits rounds x in the float unit (that sum's ulp is 1) and leaves the integer in
        the low bits. Only ADD/SUB/BITCAST: no float-to-int conversion, whose range-checked form in some renderers
        branches and keeps the CPU compilers from vectorizing the whole expression."""
        magic = 1.5 * 2.0**self.fmt.mantissa_bits
        shifted = x + self.f(magic)
        magic_bits = UOp.const(self.float, magic).bitcast(self.int)
        return shifted.bitcast(self.int) - magic_bits, shifted - self.f(magic)

    def reciprocal(self, d: UOp, low: float, high: float) -> UOp:
        """1/d for d in [low, high] by Newton's iteration from the chord through (low, 1/low), (high, 1/high)."""
        guess = self.f(1.0 / low + 1.0 / high) - d * self.f(1.0 / (low * high))
        for _ in range(self.fmt.newton_steps):
            guess = guess * (self.f(2.0) - d * guess)
        return guess

    def polynomial(self, x: UOp, coefficients: list[float]) -> UOp:
        """sum coefficients[k] * x**k by Horner's rule. When `fused`, every step but the last is one MULACC; the last
        (the constant term) stays a rounded product and sum: all fused, exp2 kept within 1 ulp of the exact result
        but sat 3 ulps from numpy's (2 ulps off itself, at 126.549) on the test sweep; with the last step plain,
        every bound of tests/test_transcendental.py holds for both forms."""
        result = self.f(coefficients[-1])
        steps = list(reversed(coefficients[:-1]))
        for number, coefficient in enumerate(steps):
            if self.fused and number < len(steps) - 1:
                result = UOp(Ops.MULACC, self.float, (result, x, self.f(coefficient)))
            else:
                result = result * x + self.f(coefficient)
        return result


# ---- exp2 ------------------------------------------------------------------------------------------------------


def _exp2_pair(b: _Builder, high: UOp, low: UOp | None) -> UOp:
    """2**(high + low) for `high` not nan, or nan when `high` is (|low| << 1; None: 0); overflows to inf and
    underflows through the subnormals."""
    fmt = b.fmt
    # compare-and-select clamps like MAX without MAX's signed-zero rules; both compares are false for a nan, which
    # therefore passes through: its fraction is nan, so is the result (the scale factors are some finite or
    # infinite float: integer math on its bits wraps)
    lower = high.lt(b.f(-fmt.exp2_clamp)).where(b.f(-fmt.exp2_clamp), high)
    clamped = b.f(fmt.exp2_clamp).lt(lower).where(b.f(fmt.exp2_clamp), lower)
    whole, whole_float = b.round_small(clamped)
    fraction = clamped - whole_float  # exact
    if low is not None:
        low = clamped.ne(high).where(b.f(0.0), low)  # a clamped exponent over/underflows whatever its low part
        fraction = fraction + low
    ln2 = _ln2()
    coefficients = [b.fmt.constant(ln2**k / _factorial(k)) for k in range(fmt.exp2_terms)]
    value = b.polynomial(fraction, coefficients)
    # two scale factors keep every factor normal; only the last product rounds (into the subnormals or to inf)
    first = whole >> b.i(1)
    return (value * b.power_of_two(first)) * b.power_of_two(whole - first)


def _factorial(n: int) -> int:
    result = 1
    for k in range(2, n + 1):
        result *= k
    return result


def _exp2(b: _Builder, x: UOp) -> UOp:
    return _exp2_pair(b, x, None)  # a nan passes through (no compare-and-select around it)


# ---- log2 ------------------------------------------------------------------------------------------------------


def _log2_pair(b: _Builder, x: UOp) -> tuple[UOp, UOp]:
    """log2(x) as a double-float for finite x > 0 (subnormals included)."""
    fmt = b.fmt
    subnormal = x.lt(b.f(2.0 ** (1 - fmt.bias)))
    a = subnormal.where(x * b.f(2.0**64), x)
    bits = a.bitcast(b.int)
    exponent = ((bits >> b.i(fmt.mantissa_bits)) & b.i(fmt.exponent_mask)) - b.i(fmt.bias)
    mantissa_mask = (1 << fmt.mantissa_bits) - 1
    m = ((bits & b.i(mantissa_mask)) | b.i(fmt.bias << fmt.mantissa_bits)).bitcast(b.float)  # in [1, 2)
    large = b.f(1.5).lt(m)
    m = large.where(m * b.f(0.5), m)  # in [0.75, 1.5]
    exponent = large.where(exponent + b.i(1), exponent)
    exponent = subnormal.where(exponent - b.i(64), exponent)
    # t = (m - 1) / (m + 1) as a double-float, without a division: a Newton reciprocal plus one correction
    numerator = m - b.f(1.0)  # exact
    denominator = b.two_sum(m, b.f(1.0))
    inverse = b.reciprocal(denominator[0], 1.75, 2.5)
    t_high = numerator * inverse
    product, error = b.two_product(t_high, denominator[0])
    residual = ((numerator - product) - error) - t_high * denominator[1]
    t = b.fast_two_sum(t_high, residual * inverse)
    # log2(m) = 2/ln2 * t * (1 + u/3 + u**2/5 + ...) with u = t*t; the leading terms as double-floats
    u_high, u_error = b.two_product(t[0], t[0])
    u = (u_high, u_error + b.f(2.0) * t[0] * t[1])
    tail = u[0] * u[0] * b.polynomial(u[0], [fmt.constant(Fraction(1, 2 * k + 5)) for k in range(fmt.log2_terms - 2)])
    third = b.multiply(u, b.constant_pair(Fraction(1, 3)))
    series_high, series_low = b.two_sum(b.f(1.0), third[0])
    series = b.fast_two_sum(series_high, series_low + third[1] + tail)
    log_m = b.multiply(b.multiply(b.constant_pair(2 / _ln2()), t), series)
    total, low = b.two_sum(exponent.cast(b.float), log_m[0])
    return total, low + log_m[1]


def _log2(b: _Builder, x: UOp) -> UOp:
    zero, infinity = b.f(0.0), b.f(float("inf"))
    usable = zero.lt(x) & x.lt(infinity)
    high, low = _log2_pair(b, usable.where(x, b.f(1.0)))
    result = high + low
    result = x.eq(infinity).where(infinity, result)
    result = x.eq(zero).where(b.f(float("-inf")), result)
    return (x.lt(zero) | x.ne(x)).where(b.f(float("nan")), result)


# ---- sin -------------------------------------------------------------------------------------------------------


@functools.cache
def _two_over_pi_words(bits: int) -> tuple[int, ...]:
    """floor(2/pi * 2**bits) in 32-bit words, least significant first."""
    value = (1 << (2 * bits + 65)) // _pi_fixed(bits + 64)  # 2**(bits+1) / pi with pi to bits+64 fraction bits
    # words above the top are zero; the reduction reads up to a few of them for tiny arguments
    return tuple((value >> (32 * k)) & 0xFFFFFFFF for k in range(bits // 32 + 10))


def _payne_hanek(b: _Builder, magnitude: UOp) -> tuple[UOp, tuple[UOp, UOp], UOp]:
    """For finite |x| >= pi/4: (quadrant q mod 4 as uint64, |r| as a double-float, r < 0) with x = (q + r/(pi/2))*pi/2.

    x = M * 2**E with an integer significand M; x * 2/pi mod 4 needs only the bits of 2/pi from 2**(-E+1) down to
    2**(-E-L): those bits (in 32-bit limbs chosen by E) times M give the quadrant and L fraction bits exactly.
    """
    fmt = b.fmt
    words = _two_over_pi_words(fmt.two_over_pi_bits)
    mask32 = b.u(0xFFFFFFFF)
    bits = magnitude.bitcast(b.int).cast(b.uint64)
    field = (bits >> b.u(fmt.mantissa_bits)) & b.u(fmt.exponent_mask)
    significand = (bits & b.u((1 << fmt.mantissa_bits) - 1)) | b.u(1 << fmt.mantissa_bits)
    # K = B - E - L with E = field - bias - mantissa_bits: the bit of 2/pi that lands at 2**-L
    offset = fmt.two_over_pi_bits - fmt.reduction_bits + fmt.bias + fmt.mantissa_bits
    shift = b.u(offset) - field
    word_index, bit = shift >> b.u(5), shift & b.u(31)
    lowest_field = fmt.bias - 1  # pi/4 <= |x|
    highest_field = fmt.exponent_mask - 1
    candidates = range((offset - highest_field) >> 5, ((offset - lowest_field) >> 5) + 1)
    limb_count = fmt.reduction_bits // 32 + 1

    def word(position: int) -> UOp:
        chosen = b.u(words[candidates[0] + position])
        for candidate in candidates[1:]:
            chosen = word_index.eq(b.u(candidate)).where(b.u(words[candidate + position]), chosen)
        return chosen

    selected = [word(position) for position in range(limb_count + 1)]
    limbs = [((selected[k] | (selected[k + 1] << b.u(32))) >> bit) & mask32 for k in range(limb_count)]
    significand_limbs = [significand & mask32, significand >> b.u(32)] if fmt.mantissa_bits > 32 else [significand]
    # schoolbook product, kept modulo 2**(32 * limb_count)
    product: list[UOp] = []
    carry = b.u(0)
    pending: list[UOp] = []  # high halves of the previous column's partial products
    for column in range(limb_count):
        total = carry
        for high in pending:
            total = total + high
        pending = []
        for a_index, a_limb in enumerate(significand_limbs):
            w_index = column - a_index
            if 0 <= w_index < limb_count:
                partial = a_limb * limbs[w_index]
                total = total + (partial & mask32)
                pending.append(partial >> b.u(32))
        product.append(total & mask32)
        carry = total >> b.u(32)
    quadrant = product[-1] & b.u(3)
    fraction = product[:-1]  # L bits, most significant limb last
    upper_half = (fraction[-1] >> b.u(31)).ne(b.u(0))
    # round to the nearest quadrant: a fraction f >= 1/2 becomes q+1 with -(1 - f)
    negated: list[UOp] = []
    carry = b.u(1)
    for limb in fraction:
        total = (limb ^ mask32) + carry
        negated.append(total & mask32)
        carry = total >> b.u(32)
    fraction = [upper_half.where(n, f) for n, f in zip(negated, fraction)]
    quadrant = (quadrant + upper_half.cast(b.uint64)) & b.u(3)
    # the fraction as a double-float: 16-bit pieces convert exactly to float32 (32-bit ones to float64)
    piece_bits = 16 if fmt.mantissa_bits < 32 else 32
    pieces: list[tuple[UOp, int]] = []
    for k, limb in enumerate(fraction):
        if piece_bits == 16:
            pieces += [(limb & b.u(0xFFFF), 32 * k), (limb >> b.u(16), 32 * k + 16)]
        else:
            pieces.append((limb, 32 * k))
    high, low = b.f(0.0), b.f(0.0)
    for piece, position in reversed(pieces):
        value = piece.cast(b.float) * b.f(2.0 ** (position - fmt.reduction_bits))
        high, error = b.two_sum(high, value)
        low = low + error
    reduced = b.multiply(b.fast_two_sum(high, low), b.constant_pair(_pi() / 2))
    return quadrant, reduced, upper_half


def _sin_cos(b: _Builder, r: tuple[UOp, UOp]) -> tuple[UOp, UOp]:
    """(sin, cos) of the double-float r, |r| <= pi/4."""
    terms = b.fmt.sin_terms
    square = r[0] * r[0]
    sin_tail = b.polynomial(
        square, [b.fmt.constant(Fraction((-1) ** (k + 1), _factorial(2 * k + 3))) for k in range(terms - 1)]
    )
    sine = r[0] + (r[0] * square * sin_tail + r[1])
    cos_tail = b.polynomial(
        square, [b.fmt.constant(Fraction((-1) ** k, _factorial(2 * k + 4))) for k in range(terms - 1)]
    )
    half_square = square * b.f(0.5)
    cosine = b.f(1.0) - (half_square - (square * square * cos_tail - r[0] * r[1]))
    return sine, cosine


def _sin(b: _Builder, x: UOp) -> UOp:
    minus_one = b.f(-1.0)
    bits = x.bitcast(b.int)
    negative = bits.lt(b.i(0))  # the sign bit, so that sin(-0) = -0
    magnitude = (bits & b.i((1 << (8 * b.fmt.dtype.itemsize - 1)) - 1)).bitcast(b.float)
    finite = magnitude.lt(b.f(float("inf")))  # false for inf and nan
    small = magnitude.lt(b.f(_pi() / 4))
    reducible = finite & small.logical_not()
    quadrant, reduced, flipped = _payne_hanek(b, reducible.where(magnitude, b.f(1.0)))
    r = (small.where(magnitude, reduced[0]), small.where(b.f(0.0), reduced[1]))
    quadrant = small.where(b.u(0), quadrant)
    flipped = small.where(UOp.const(b.bool, False), flipped)
    sine, cosine = _sin_cos(b, r)
    sine = flipped.where(sine * minus_one, sine)
    odd = (quadrant & b.u(1)).ne(b.u(0))
    value = odd.where(cosine, sine)
    value = (quadrant & b.u(2)).ne(b.u(0)).where(value * minus_one, value)
    value = negative.where(value * minus_one, value)
    return finite.where(value, b.f(float("nan")))


# ---- pow -------------------------------------------------------------------------------------------------------


def _pow(b: _Builder, x: UOp, y: UOp) -> UOp:
    fmt = b.fmt
    zero, one, infinity, nan = b.f(0.0), b.f(1.0), b.f(float("inf")), b.f(float("nan"))
    minus_one = b.f(-1.0)
    x_negative = x.lt(zero)
    magnitude = x_negative.where(x * minus_one, x)
    y_magnitude = y.lt(zero).where(y * minus_one, y)
    # y is an integer when it has no fraction bits; huge values are even integers
    integral_limit = b.f(2.0 ** (fmt.mantissa_bits + 1))
    y_big = y_magnitude.lt(integral_limit).logical_not() & y_magnitude.lt(infinity)
    y_small = y_big.where(zero, y)
    y_whole = y_small.cast(b.int)
    y_integer = y_big | y_whole.cast(b.float).eq(y_small)
    y_odd = y_big.logical_not() & y_integer & (y_whole & b.i(1)).ne(b.i(0))
    # |x| ** y for finite nonzero |x| and finite y
    usable = zero.lt(magnitude) & magnitude.lt(infinity)
    log = _log2_pair(b, usable.where(magnitude, one))
    limit = b.f(fmt.pow_clamp)
    y_clamped = y.lt(limit).where(y, limit)
    y_clamped = y_clamped.lt(b.f(-fmt.pow_clamp)).where(b.f(-fmt.pow_clamp), y_clamped)
    y_clamped = y.ne(y).where(zero, y_clamped)
    product, error = b.two_product(y_clamped, log[0])
    value = _exp2_pair(b, product, error + y_clamped * log[1])
    result = (x_negative & y_odd).where(value * minus_one, value)
    # C99 Annex F special cases, least binding first
    y_positive = zero.lt(y)

    def odd_sign(v: UOp) -> UOp:
        return (x_negative & y_odd).where(v * minus_one, v)

    result = magnitude.eq(infinity).where(y_positive.where(odd_sign(infinity), odd_sign(zero)), result)
    signed_infinity = x.bitcast(b.int).lt(b.i(0)).where(infinity * minus_one, infinity)  # copysign(inf, +-0)
    zero_base = y_positive.where(y_odd.where(x, zero), y_odd.where(signed_infinity, infinity))
    result = magnitude.eq(zero).where(zero_base, result)
    y_infinite = y_magnitude.eq(infinity)
    below_one = magnitude.lt(one)
    result = y_infinite.where((below_one.ne(y_positive)).where(infinity, zero), result)
    result = (y_infinite & magnitude.eq(one)).where(one, result)
    result = (x_negative & magnitude.lt(infinity) & y_integer.logical_not() & y_magnitude.lt(infinity)).where(
        nan, result
    )
    result = (x.ne(x) | y.ne(y)).where(nan, result)
    result = x.eq(one).where(one, result)
    return y.eq(zero).where(one, result)


# ---- pattern tables --------------------------------------------------------------------------------------------

_DECOMPOSITIONS: dict[Ops, Callable[..., UOp]] = {Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin, Ops.POW: _pow}
DECOMPOSABLE_OPS: frozenset[Ops] = frozenset(_DECOMPOSITIONS)
"""The ops `transcendental_rewrites` can decompose."""


def decompose(op: Ops, *operands: UOp, fused: bool = False) -> UOp:
    """The basic-ALU graph computing `op` (EXP2, LOG2, SIN or POW) on float `operands`.

    float32/float64 are computed directly; other float dtypes (float16, bfloat16, fp8) through float32. `fused`:
    polynomials are evaluated with MULACC (a renderer with a native fused multiply-add; one rounding per step).
    With MULACC, no zero low part and no nan guard, float32 exp2 is 30 vector ops instead of 45 on the LLVM
    renderer: the softmax's exp-sum kernel over (4096, 1024) went from ~2.2 to ~1.3 ms (DEBUG=2, the loaded
    2-core development box).
    """
    if op not in _DECOMPOSITIONS:
        raise ValueError(f"no decomposition for {op!r}; expected one of {sorted(o.name for o in _DECOMPOSITIONS)}")
    dtype = operands[0].dtype
    if not dtypes.is_float(dtype):
        raise TypeError(f"{op!r} decomposes only floats, got {dtype!r}")
    scalar = dtype.scalar()
    if scalar in _FORMATS:
        return _DECOMPOSITIONS[op](_Builder(operands[0], _FORMATS[scalar], fused), *operands)
    wide = dtypes.float32.vec(dtype.count)
    return decompose(op, *(operand.cast(wide) for operand in operands), fused=fused).cast(dtype)


def transcendental_rewrites(native_ops: Collection[Ops]) -> PatternMatcher:
    """Rules decomposing every op of `DECOMPOSABLE_OPS` that is not in `native_ops` (a renderer's capability set);
    with MULACC native, the polynomials use it."""
    float_dtypes = tuple(dtypes.floats)
    fused = Ops.MULACC in native_ops
    rules = []
    for op in sorted(DECOMPOSABLE_OPS - frozenset(native_ops), key=lambda o: o.value):
        arity = 2 if op is Ops.POW else 1
        pattern = UPat(op, dtype=float_dtypes, src=tuple(UPat.var(f"x{k}") for k in range(arity)), name="root")
        rules.append((pattern, functools.partial(_rewrite, op, fused)))
    return PatternMatcher(rules)


def _rewrite(op: Ops, fused: bool, root: UOp, **operands: UOp) -> UOp:
    return decompose(op, *(operands[f"x{k}"] for k in range(len(operands))), fused=fused)


pm_transcendental = transcendental_rewrites(())
"""Decompose EXP2, LOG2, SIN and POW on floats into basic ALU ops (for a renderer with none of them)."""
