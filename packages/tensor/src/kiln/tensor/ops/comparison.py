"""`ComparisonMixin`: closeness tests, sign manipulation, NaN-aware extrema and the torch / numpy aliases of the
arithmetic and comparison methods (greater, multiply, ...)."""

from __future__ import annotations

import math
from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.uops import ConstType, dtypes

__all__ = ["ComparisonMixin"]

_SIGNED_INTEGER_OF_SIZE = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def _ignoring_nan(a: TensorT, b: TensorT, *, largest: bool) -> TensorT:
    """The elementwise maximum (largest) or minimum of a and b, taking the other operand where one is NaN."""
    extreme = a.maximum(b) if largest else a.minimum(b)
    if not dtypes.is_float(a.dtype):
        return extreme
    return a.isnan().where(b, b.isnan().where(a, extreme))


class ComparisonMixin(TensorCore):
    """Closeness, signs and aliases."""

    # ------------------------------------------------------------------------------------------------------------
    # closeness
    # ------------------------------------------------------------------------------------------------------------

    def isclose(
        self, other: Self | ConstType, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> Self:
        """|self - other| <= atol + rtol * |other| elementwise (bool); infinities are close only to themselves.

        Example:
            >>> Tensor([1.0, 2.0]).isclose(Tensor([1.0 + 1e-9, 2.1])).tolist()
            [True, False]
        """
        if rtol < 0 or atol < 0:
            raise ValueError(f"isclose needs rtol >= 0 and atol >= 0, got rtol={rtol}, atol={atol}")
        a, b = self._operands(other, "isclose")
        equal = a == b
        if not dtypes.is_float(a.dtype):
            return equal if rtol == 0 and atol == 0 else equal | ((a - b).abs() <= atol + rtol * b.abs())
        finite = a.isfinite() & b.isfinite()
        close = equal | (finite & ((a - b).abs() <= b.abs() * rtol + atol))
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    def allclose(
        self, other: Self | ConstType, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> bool:
        """Whether every element is `isclose` (a Python bool: realizes the comparison).

        Example:
            >>> Tensor([1.0]).allclose(Tensor([1.0]))
            True
        """
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    def equal(self, other: Self) -> bool:
        """Whether both have the same shape and the same values (a Python bool).

        Example:
            >>> Tensor([1, 2]).equal(Tensor([1, 2]))
            True
        """
        if self.shape != other.shape:
            return False
        return bool((self == other).all().item())

    # ------------------------------------------------------------------------------------------------------------
    # signs
    # ------------------------------------------------------------------------------------------------------------

    def signbit(self) -> Self:
        """Whether the sign bit is set (True for -0.0 and negative NaN too).

        Example:
            >>> Tensor([-0.0, 0.0, -2.0]).signbit().tolist()
            [True, False, True]
        """
        if dtypes.is_float(self.dtype):
            return self.bitcast(_SIGNED_INTEGER_OF_SIZE[self.dtype.itemsize]) < 0
        if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool:
            return self._const(False, self.shape, dtypes.bool, self.device)
        return self < 0

    def copysign(self, other: Self | ConstType) -> Self:
        """|self| with the sign of `other` (its sign bit: -0.0 counts as negative).

        Example:
            >>> Tensor([2.0, -3.0]).copysign(Tensor([-0.0, 1.0])).tolist()
            [-2.0, 3.0]
        """
        a, b = self._operands(other, "copysign")
        a, b = a._floating(), b._floating()
        magnitude = a._magnitude()
        return b.signbit().where(-magnitude, magnitude)

    def sgn(self) -> Self:
        """Alias of `sign` (torch's name for complex-aware sign)."""
        return self.sign()

    def heaviside(self, values: Self | ConstType) -> Self:
        """0 below 0, 1 above 0 and `values` at 0.

        Example:
            >>> Tensor([-1.0, 0.0, 2.0]).heaviside(Tensor([0.5])).tolist()
            [0.0, 0.5, 1.0]
        """
        x, v = self._operands(values, "heaviside")
        return x.eq(0).where(v, (x > 0)._cast(x.dtype))

    def hypot(self, other: Self | ConstType) -> Self:
        """sqrt(self**2 + other**2).

        Example:
            >>> Tensor([3.0]).hypot(Tensor([4.0])).tolist()
            [5.0]
        """
        a, b = self._operands(other, "hypot")
        return (a * a + b * b).sqrt()

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Self:
        """NaN, +inf and -inf replaced (by default with 0 and the dtype's largest and smallest finite values).

        Example:
            >>> Tensor([math.nan, 1.0, -math.inf]).nan_to_num().tolist()
            [0.0, 1.0, -3.4028234663852886e+38]
        """
        if not dtypes.is_float(self.dtype):
            return self
        exponent_bits, mantissa_bits = dtypes.finfo(self.dtype)
        largest = (2.0 - 2.0**-mantissa_bits) * 2.0 ** (2 ** (exponent_bits - 1) - 1)  # torch.finfo(dtype).max
        high = largest if posinf is None else posinf
        low = -largest if neginf is None else neginf
        return self.isnan().where(nan, self.eq(math.inf).where(high, self.eq(-math.inf).where(low, self)))

    def frac(self) -> Self:
        """self - trunc(self): the fractional part, with the sign of self.

        Example:
            >>> Tensor([2.5, -1.25]).frac().tolist()
            [0.5, -0.25]
        """
        return self - self.trunc()

    def fix(self) -> Self:
        """Alias of `trunc`."""
        return self.trunc()

    def positive(self) -> Self:
        """self (TypeError for bool, like torch).

        Example:
            >>> Tensor([1, -2]).positive().tolist()
            [1, -2]
        """
        if self.dtype == dtypes.bool:
            raise TypeError("positive is not supported for bool tensors")
        return self

    def negative(self) -> Self:
        """Alias of `neg`."""
        return self.neg()

    def absolute(self) -> Self:
        """Alias of `abs`."""
        return self.abs()

    def erfc(self) -> Self:
        """1 - erf(self).

        Example:
            >>> Tensor([0.0]).erfc().tolist()
            [1.0]
        """
        return 1.0 - self.erf()

    def logit(self, eps: float | None = None) -> Self:
        """log(p / (1 - p)), with p clamped to [eps, 1 - eps] when eps is given.

        Example:
            >>> Tensor([0.5]).logit().tolist()
            [0.0]
        """
        p = self._floating() if eps is None else self._floating().clamp(eps, 1.0 - eps)
        return (p / (1.0 - p)).log()

    def float_power(self, exponent: Self | ConstType) -> Self:
        """self ** exponent computed in float64.

        Example:
            >>> Tensor([2]).float_power(3).tolist()
            [8.0]
        """
        other = exponent._cast(dtypes.float64) if not isinstance(exponent, (bool, int, float)) else float(exponent)
        return self._cast(dtypes.float64).pow(other)

    # ------------------------------------------------------------------------------------------------------------
    # NaN-aware extrema and one-sided clamps
    # ------------------------------------------------------------------------------------------------------------

    def fmax(self, other: Self | ConstType) -> Self:
        """The elementwise maximum ignoring NaN (NaN only where both are NaN).

        Example:
            >>> Tensor([math.nan, 1.0]).fmax(Tensor([2.0, 3.0])).tolist()
            [2.0, 3.0]
        """
        return _ignoring_nan(*self._operands(other, "fmax"), largest=True)

    def fmin(self, other: Self | ConstType) -> Self:
        """The elementwise minimum ignoring NaN (NaN only where both are NaN).

        Example:
            >>> Tensor([math.nan, 1.0]).fmin(Tensor([2.0, 3.0])).tolist()
            [2.0, 1.0]
        """
        return _ignoring_nan(*self._operands(other, "fmin"), largest=False)

    def clamp_min(self, min: Self | ConstType) -> Self:
        """clamp(min=min).

        Example:
            >>> Tensor([-1.0, 2.0]).clamp_min(0.0).tolist()
            [0.0, 2.0]
        """
        return self.clamp(min=min)

    def clamp_max(self, max: Self | ConstType) -> Self:
        """clamp(max=max).

        Example:
            >>> Tensor([-1.0, 2.0]).clamp_max(0.0).tolist()
            [-1.0, 0.0]
        """
        return self.clamp(max=max)

    def isposinf(self) -> Self:
        """Where the value is +inf (bool)."""
        return self.isinf(detect_negative=False)

    def isneginf(self) -> Self:
        """Where the value is -inf (bool)."""
        return self.isinf(detect_positive=False)

    def isreal(self) -> Self:
        """True everywhere (kiln has no complex dtypes)."""
        return self._const(True, self.shape, dtypes.bool, self.device)

    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating-point one.

        Example:
            >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
            (True, False)
        """
        return dtypes.is_float(self.dtype)

    def is_signed(self) -> bool:
        """Whether the dtype can hold negative values (floats and signed integers)."""
        return dtypes.is_float(self.dtype) or (dtypes.is_int(self.dtype) and not dtypes.is_unsigned(self.dtype))

    def is_complex(self) -> bool:
        """False: kiln has no complex dtypes."""
        return False

    # ------------------------------------------------------------------------------------------------------------
    # torch / numpy / tinygrad spellings of existing methods
    # ------------------------------------------------------------------------------------------------------------

    def mod(self, other: Self | ConstType) -> Self:
        """Python-style remainder (the sign of the divisor): tinygrad's name for `remainder`.

        Example:
            >>> Tensor([-3, 3]).mod(2).tolist()
            [1, 1]
        """
        return self.remainder(other)

    def greater(self, other: Self | ConstType) -> Self:
        """Alias of `gt`."""
        return self.gt(other)

    def greater_equal(self, other: Self | ConstType) -> Self:
        """Alias of `ge`."""
        return self.ge(other)

    def less(self, other: Self | ConstType) -> Self:
        """Alias of `lt`."""
        return self.lt(other)

    def less_equal(self, other: Self | ConstType) -> Self:
        """Alias of `le`."""
        return self.le(other)

    def not_equal(self, other: Self | ConstType) -> Self:
        """Alias of `ne`."""
        return self.ne(other)

    def multiply(self, other: Self | ConstType) -> Self:
        """Alias of `mul`."""
        return self.mul(other)

    def subtract(self, other: Self | ConstType, alpha: ConstType | None = None) -> Self:
        """Alias of `sub`."""
        return self.sub(other, alpha=alpha)

    def divide(self, other: Self | ConstType, rounding_mode: str | None = None) -> Self:
        """Alias of `div`."""
        return self.div(other, rounding_mode=rounding_mode)

    def true_divide(self, other: Self | ConstType) -> Self:
        """Alias of `div` (true division)."""
        return self.div(other)

    def bitwise_left_shift(self, other: Self | ConstType) -> Self:
        """Alias of `lshift`."""
        return self.lshift(other)

    def bitwise_right_shift(self, other: Self | ConstType) -> Self:
        """Alias of `rshift`."""
        return self.rshift(other)
