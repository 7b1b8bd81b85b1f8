"""`TrigonometricMixin`: inverse trigonometric and hyperbolic functions, and the accurate log / exp variants.

Everything is composed from the primitives (EXP2, LOG2, SQRT, RECIPROCAL, WHERE, ...), computed in float32 or wider
(`_math`). Formulas are picked so that neither values nor gradients overflow or lose their precision near 0:
- log1p / expm1 use Kahan's correction (log(u) * x / (u - 1) with u = 1 + x), exact to a few ulps near 0;
- atan reduces |x| > 1 to 1/x and halves the angle twice (|w| <= tan(pi/16)) before a short odd series;
- branches that must not run on some inputs get a safe stand-in input ("double where"), so that the unused branch's
  gradient is 0, never 0 * inf = NaN.
"""

from __future__ import annotations

import math
from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int
from kiln.uops import ConstType, dtypes

__all__ = ["TrigonometricMixin"]

_ATAN_TERMS = 11  # odd series terms up to w**21; |w| <= tan(pi/16) = 0.199 leaves a remainder below 1e-17
_LARGE = 1e8  # beyond this, asinh / acosh use log(2|x|) (x*x would overflow float32 at 1.8e19)


def _atan_series(w: TensorT) -> TensorT:
    """atan(w) for |w| <= 0.2 by its odd series, in Horner form over w**2."""
    square = w * w
    last = _ATAN_TERMS - 1
    total: TensorT = square * 0.0 + (1.0 if last % 2 == 0 else -1.0) / (2 * last + 1)
    for k in range(last - 1, -1, -1):
        total = total * square + (1.0 if k % 2 == 0 else -1.0) / (2 * k + 1)
    return total * w


def _halve_angle(x: TensorT) -> TensorT:
    """tan(a / 2) from t = tan(a): t / (1 + sqrt(1 + t*t)), for |t| <= 1."""
    return x / ((x * x + 1.0).sqrt() + 1.0)


class TrigonometricMixin(TensorCore):
    """Inverse trigonometric, hyperbolic and accurate exponential / logarithm functions."""

    # ------------------------------------------------------------------------------------------------------------
    # exp / log variants
    # ------------------------------------------------------------------------------------------------------------

    def log1p(self) -> Self:
        """log(1 + self), accurate near 0.

        Example:
            >>> Tensor([0.0]).log1p().tolist()
            [0.0]
        """

        def body(x: Self) -> Self:
            u = x + 1.0
            exact = u.eq(1.0)  # 1 + x rounds to 1: log1p(x) = x to working precision
            infinite = u.eq(math.inf)
            safe_u = (exact | infinite).where(2.0, u)
            corrected = safe_u.log() * x / (safe_u - 1.0)
            return exact.where(x, infinite.where(math.inf, corrected))

        return self._math(body)

    def expm1(self) -> Self:
        """exp(self) - 1, accurate near 0.

        Example:
            >>> Tensor([0.0]).expm1().tolist()
            [0.0]
        """

        def body(x: Self) -> Self:
            u = x.exp()
            exact = u.eq(1.0)
            special = u.eq(math.inf) | u.eq(0.0)
            safe_u = (exact | special).where(2.0, u)
            corrected = (safe_u - 1.0) * x / safe_u.log()
            return exact.where(x, special.where(u - 1.0, corrected))

        return self._math(body)

    def log10(self) -> Self:
        """The base-10 logarithm.

        Example:
            >>> Tensor([100.0]).log10().tolist()
            [2.0]
        """
        return self._math(lambda x: x.log2() * math.log10(2.0))

    def logaddexp(self, other: Self | ConstType) -> Self:
        """log(exp(self) + exp(other)) without overflow.

        Example:
            >>> round(Tensor([0.0]).logaddexp(Tensor([0.0])).item(), 6)
            0.693147
        """
        return self._log_add(other, math.e)

    def logaddexp2(self, other: Self | ConstType) -> Self:
        """log2(2**self + 2**other) without overflow.

        Example:
            >>> Tensor([1.0]).logaddexp2(Tensor([1.0])).tolist()
            [2.0]
        """
        return self._log_add(other, 2.0)

    def _log_add(self, other: Self | ConstType, base: float) -> Self:
        a, b = self._operands(other, "logaddexp")
        a, b = a._floating(), b._floating()
        compute = dtypes.float32 if a.dtype.itemsize < 4 else a.dtype
        x, y = a._cast(compute), b._cast(compute)
        same = x == y  # also both infinite with one sign: the formula below would give inf - inf
        larger = x.maximum(y)
        gap = same.where(0.0, (x - y)._magnitude())
        if base == 2.0:
            rest = (-gap).exp2().log1p() / math.log(2.0)
            tie = larger + 1.0
        else:
            rest = (-gap).exp().log1p()
            tie = larger + math.log(2.0)
        return same.where(tie, larger + rest)._cast(a.dtype)

    def xlogy(self, other: Self | ConstType) -> Self:
        """self * log(other), 0 where self is 0 (unless other is NaN), like `torch.xlogy`.

        Example:
            >>> Tensor([0.0, 2.0]).xlogy(Tensor([0.0, 1.0])).tolist()
            [0.0, 0.0]
        """
        x, y = self._operands(other, "xlogy")
        x, y = x._floating(), y._floating()
        zero = x.eq(0) & ~y.isnan()
        return zero.where(0.0, x * zero.where(1.0, y).log())

    # ------------------------------------------------------------------------------------------------------------
    # inverse trigonometric
    # ------------------------------------------------------------------------------------------------------------

    def atan(self) -> Self:
        """The arc tangent, in (-pi/2, pi/2).

        Example:
            >>> round(Tensor([1.0]).atan().item(), 6)
            0.785398
        """

        def body(x: Self) -> Self:
            big = x._magnitude() > 1.0
            reduced = big.where(big.where(x, 1.0).reciprocal(), x)  # |reduced| <= 1
            angle = _atan_series(_halve_angle(_halve_angle(reduced))) * 4.0
            toward = (x < 0).where(-math.pi / 2, math.pi / 2)
            return big.where(toward - angle, angle)

        return self._math(body)

    def atan2(self, other: Self | ConstType) -> Self:
        """The angle of the point (other, self) (self is y, other is x), in [-pi, pi], like `torch.atan2`.

        Example:
            >>> round(Tensor([1.0]).atan2(Tensor([-1.0])).item(), 6)
            2.356194
        """
        y, x = self._operands(other, "atan2")
        y, x = y._floating(), x._floating()
        compute = dtypes.float32 if y.dtype.itemsize < 4 else y.dtype
        y, x = y._cast(compute), x._cast(compute)
        both_zero = x.eq(0) & y.eq(0)
        both_infinite = y.isinf() & x.isinf()
        # both infinite: the angle of (sign x, sign y); both zero: 0 or +-pi by the signs (like C's atan2)
        safe_x = both_zero.where(1.0, both_infinite.where(x.sign(), x))
        safe_y = both_infinite.where(y.sign(), y)
        base = (safe_y / safe_x).atan()
        negative_x = (x < 0) | (both_zero & (x.reciprocal() < 0))
        below = (y < 0) | (y.eq(0) & (y.reciprocal() < 0))
        turn = below.where(-math.pi, math.pi)
        angle = negative_x.where(base + turn, base)
        return both_zero.where(negative_x.where(turn, y * 0.0), angle)._cast(self._floating().dtype)

    def arctan2(self, other: Self | ConstType) -> Self:
        """Alias of `atan2`."""
        return self.atan2(other)

    def asin(self) -> Self:
        """The arc sine, in [-pi/2, pi/2] (NaN outside [-1, 1]).

        Example:
            >>> round(Tensor([1.0]).asin().item(), 6)
            1.570796
        """
        return self._math(lambda x: (x / ((1.0 - x) * (1.0 + x)).sqrt()).atan())

    def acos(self) -> Self:
        """The arc cosine, in [0, pi] (NaN outside [-1, 1]).

        Example:
            >>> Tensor([1.0]).acos().tolist()
            [0.0]
        """
        # pi/2 - asin(x) loses digits near x = 1; 2 * atan(sqrt((1 - x) / (1 + x))) does not
        return self._math(lambda x: (((1.0 - x) / (1.0 + x)).sqrt()).atan() * 2.0)

    # ------------------------------------------------------------------------------------------------------------
    # hyperbolic
    # ------------------------------------------------------------------------------------------------------------

    def sinh(self) -> Self:
        """The hyperbolic sine.

        Example:
            >>> Tensor([0.0]).sinh().tolist()
            [0.0]
        """

        def body(x: Self) -> Self:
            grown = x._magnitude().expm1()  # e - 1 for e = exp(|x|): sinh = (e - 1/e) / 2, exact near 0
            magnitude = (grown + grown / (grown + 1.0)) * 0.5
            return (x < 0).where(-magnitude, magnitude)

        return self._math(body)

    def cosh(self) -> Self:
        """The hyperbolic cosine.

        Example:
            >>> Tensor([0.0]).cosh().tolist()
            [1.0]
        """

        def body(x: Self) -> Self:
            grown = x._magnitude().exp()
            return (grown + grown.reciprocal()) * 0.5

        return self._math(body)

    def asinh(self) -> Self:
        """The inverse hyperbolic sine.

        Example:
            >>> Tensor([0.0]).asinh().tolist()
            [0.0]
        """

        def body(x: Self) -> Self:
            m = x._magnitude()
            big = m > _LARGE
            small = big.where(0.0, m)
            # asinh(m) = log1p(m + m*m / (1 + sqrt(1 + m*m))), exact near 0
            near = (small + small * small / ((small * small + 1.0).sqrt() + 1.0)).log1p()
            magnitude = big.where(big.where(m, 1.0).log() + math.log(2.0), near)
            return (x < 0).where(-magnitude, magnitude)

        return self._math(body)

    def acosh(self) -> Self:
        """The inverse hyperbolic cosine (NaN below 1).

        Example:
            >>> Tensor([1.0]).acosh().tolist()
            [0.0]
        """

        def body(x: Self) -> Self:
            big = x > _LARGE
            small = big.where(2.0, x)
            shifted = small - 1.0  # acosh(x) = log1p(t + sqrt(t * (t + 2))), t = x - 1
            near = (shifted + (shifted * (shifted + 2.0)).sqrt()).log1p()
            return big.where(big.where(x, 1.0).log() + math.log(2.0), near)

        return self._math(body)

    def atanh(self) -> Self:
        """The inverse hyperbolic tangent (+-inf at +-1, NaN beyond).

        Example:
            >>> Tensor([0.0]).atanh().tolist()
            [0.0]
        """
        return self._math(lambda x: (x * 2.0 / (1.0 - x)).log1p() * 0.5)

    # ------------------------------------------------------------------------------------------------------------
    # torch / numpy spellings
    # ------------------------------------------------------------------------------------------------------------

    def arcsin(self) -> Self:
        """Alias of `asin`."""
        return self.asin()

    def arccos(self) -> Self:
        """Alias of `acos`."""
        return self.acos()

    def arctan(self) -> Self:
        """Alias of `atan`."""
        return self.atan()

    def arcsinh(self) -> Self:
        """Alias of `asinh`."""
        return self.asinh()

    def arccosh(self) -> Self:
        """Alias of `acosh`."""
        return self.acosh()

    def arctanh(self) -> Self:
        """Alias of `atanh`."""
        return self.atanh()

    def deg2rad(self) -> Self:
        """Degrees to radians.

        Example:
            >>> round(Tensor([180.0]).deg2rad().item(), 6)
            3.141593
        """
        return self._floating() * (math.pi / 180.0)

    def rad2deg(self) -> Self:
        """Radians to degrees.

        Example:
            >>> round(Tensor([math.pi]).rad2deg().item(), 3)
            180.0
        """
        return self._floating() * (180.0 / math.pi)

    def sinc(self) -> Self:
        """sin(pi x) / (pi x), 1 at 0.

        Example:
            >>> Tensor([0.0]).sinc().tolist()
            [1.0]
        """

        def body(x: Self) -> Self:
            zero = x.eq(0)
            scaled = zero.where(1.0, x) * math.pi
            return zero.where(1.0, scaled.sin() / scaled)

        return self._math(body)

    def ldexp(self, other: Self | ConstType) -> Self:
        """self * 2**other.

        Example:
            >>> Tensor([1.5]).ldexp(Tensor([3])).tolist()
            [12.0]
        """
        if isinstance(other, (int, float)):
            return self._floating() * 2.0 ** check_int(other, "ldexp exponent")
        return self._floating() * other._floating().exp2()
