"""`UnaryMixin`: elementwise functions of one tensor (math, rounding, activations), composed from the primitives.

The primitives are EXP2, LOG2, SIN, SQRT, RECIPROCAL, NEG, TRUNC plus the binary and ternary ALU ops; everything else
is built here. Like PyTorch, floating-point functions of integer or bool tensors compute in
`dtypes.default_float`, and composite functions of 16-bit (and 8-bit) floats compute in float32 and round once at
the end ("opmath"), so their results are as accurate as the storage dtype allows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Self

from kiln.tensor.core import TensorCore
from kiln.uops import ConstType, Ops, dtypes

__all__ = ["UnaryMixin"]

_LOG2_E = 1.0 / math.log(2.0)
_LN_2 = math.log(2.0)
# Abramowitz & Stegun, Handbook of Mathematical Functions, formula 7.1.26: |error| <= 1.5e-7 for erf(x), x >= 0
_ERF_P = 0.3275911
_ERF_COEFFICIENTS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


class UnaryMixin(TensorCore):
    """Elementwise functions of one tensor."""

    # ------------------------------------------------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------------------------------------------------

    def _floating(self) -> Self:
        """This tensor, cast to `dtypes.default_float` unless it is floating point already."""
        return self if dtypes.is_float(self.dtype) else self._cast(dtypes.default_float)

    def _math(self, body: Callable[[Self], Self]) -> Self:
        """`body` applied in float32 or wider (PyTorch's opmath), the result in this tensor's float dtype."""
        floating = self._floating()
        compute = dtypes.float32 if floating.dtype.itemsize < 4 else floating.dtype
        return body(floating._cast(compute))._cast(floating.dtype)

    def _scalar_like(self, value: ConstType) -> Self:
        return self._const(value, self.shape, self.dtype, self.device)

    def _magnitude(self) -> Self:
        """|self| with derivative 1 at 0 (for compositions f(|x|) that are smooth at 0; `abs` itself gives 0)."""
        return self._binary(Ops.CMPLT, self._scalar_like(0))._ternary(Ops.WHERE, self._unary(Ops.NEG), self)

    def _require_numeric(self, what: str) -> None:
        if self.dtype == dtypes.bool:
            raise TypeError(f"{what} is not supported for bool tensors; cast to an integer or float dtype first")

    # ------------------------------------------------------------------------------------------------------------
    # basic math
    # ------------------------------------------------------------------------------------------------------------

    def neg(self) -> Self:
        """-self (not defined for bool tensors, like PyTorch; use logical_not).

        Example:
            >>> Tensor([1, -2]).neg().tolist()
            [-1, 2]
        """
        if self.dtype == dtypes.bool:
            raise TypeError("negating a bool tensor is not supported; use logical_not or ~ instead")
        return self._unary(Ops.NEG)

    def reciprocal(self) -> Self:
        """1 / self (integers compute in default_float).

        Example:
            >>> Tensor([2.0, 4.0]).reciprocal().tolist()
            [0.5, 0.25]
        """
        return self._floating()._unary(Ops.RECIPROCAL)

    def sqrt(self) -> Self:
        """The square root (NaN for negative values).

        Example:
            >>> Tensor([4.0, 9.0]).sqrt().tolist()
            [2.0, 3.0]
        """
        return self._floating()._unary(Ops.SQRT)

    def rsqrt(self) -> Self:
        """1 / sqrt(self).

        Example:
            >>> Tensor([4.0]).rsqrt().tolist()
            [0.5]
        """
        return self.sqrt()._unary(Ops.RECIPROCAL)

    def square(self) -> Self:
        """self * self.

        Example:
            >>> Tensor([-3, 2]).square().tolist()
            [9, 4]
        """
        return self * self

    def exp2(self) -> Self:
        """2 ** self.

        Example:
            >>> Tensor([3.0]).exp2().tolist()
            [8.0]
        """
        return self._floating()._unary(Ops.EXP2)

    def exp(self) -> Self:
        """e ** self.

        Example:
            >>> round(Tensor([1.0]).exp().item(), 5)
            2.71828
        """
        return self._math(lambda x: (x * _LOG2_E)._unary(Ops.EXP2))

    def log2(self) -> Self:
        """The base-2 logarithm (-inf at 0, NaN below).

        Example:
            >>> Tensor([8.0]).log2().tolist()
            [3.0]
        """
        return self._floating()._unary(Ops.LOG2)

    def log(self) -> Self:
        """The natural logarithm (-inf at 0, NaN below).

        Example:
            >>> round(Tensor([math.e]).log().item(), 5)
            1.0
        """
        return self._math(lambda x: x._unary(Ops.LOG2) * _LN_2)

    def sin(self) -> Self:
        """The sine (radians).

        Example:
            >>> round(Tensor([math.pi / 2]).sin().item(), 5)
            1.0
        """
        return self._floating()._unary(Ops.SIN)

    def cos(self) -> Self:
        """The cosine (radians), as sin(pi/2 - x).

        Example:
            >>> round(Tensor([0.0]).cos().item(), 5)
            1.0
        """
        return self._math(lambda x: (math.pi / 2 - x)._unary(Ops.SIN))

    def tan(self) -> Self:
        """The tangent (radians).

        Example:
            >>> round(Tensor([math.pi / 4]).tan().item(), 5)
            1.0
        """
        return self._math(lambda x: x.sin() / x.cos())

    # ------------------------------------------------------------------------------------------------------------
    # rounding and sign
    # ------------------------------------------------------------------------------------------------------------

    def trunc(self) -> Self:
        """Rounded toward zero (integers are unchanged).

        Example:
            >>> Tensor([-1.5, 1.5]).trunc().tolist()
            [-1.0, 1.0]
        """
        return self._unary(Ops.TRUNC) if dtypes.is_float(self.dtype) else self

    def floor(self) -> Self:
        """Rounded toward -inf (integers are unchanged).

        Example:
            >>> Tensor([-1.5, 1.5]).floor().tolist()
            [-2.0, 1.0]
        """
        return self._rounded_away_from_truncation(downward=True)

    def ceil(self) -> Self:
        """Rounded toward +inf (integers are unchanged).

        Example:
            >>> Tensor([-1.5, 1.5]).ceil().tolist()
            [-1.0, 2.0]
        """
        return self._rounded_away_from_truncation(downward=False)

    def _rounded_away_from_truncation(self, downward: bool) -> Self:
        # floor / ceil: the truncation, moved one step down (up) where it lies above (below) the value
        if not dtypes.is_float(self.dtype):
            return self
        truncated = self._unary(Ops.TRUNC)
        moved = truncated._binary(Ops.SUB if downward else Ops.ADD, self._scalar_like(1))
        beyond = self._binary(Ops.CMPLT, truncated) if downward else truncated._binary(Ops.CMPLT, self)
        return beyond._ternary(Ops.WHERE, moved, truncated)

    def round(self) -> Self:
        """Rounded to the nearest integer, halves to even (like PyTorch and numpy; integers are unchanged).

        Example:
            >>> Tensor([0.5, 1.5, 2.5, -0.5]).round().tolist()
            [0.0, 2.0, 2.0, -0.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        truncated = self._unary(Ops.TRUNC)
        fraction = (self._binary(Ops.SUB, truncated)).abs()  # exact: x - trunc(x) is representable
        negative = self._binary(Ops.CMPLT, self._scalar_like(0))
        away = truncated._binary(Ops.ADD, negative._ternary(Ops.WHERE, self._scalar_like(-1), self._scalar_like(1)))
        half = self._scalar_like(0.5)
        halved = truncated._binary(Ops.MUL, half)
        odd = halved._binary(Ops.CMPNE, halved._unary(Ops.TRUNC))
        tie_to_odd = fraction._binary(Ops.CMPEQ, half)._binary(Ops.AND, odd)
        round_away = half._binary(Ops.CMPLT, fraction)._binary(Ops.OR, tie_to_odd)
        return round_away._ternary(Ops.WHERE, away, truncated)

    def abs(self) -> Self:
        """The absolute value (its gradient is sign(x): 0 at 0, like PyTorch).

        Example:
            >>> Tensor([-2, 3]).abs().tolist()
            [2, 3]
        """
        if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype):
            return self
        zero = self._scalar_like(0)
        # zeros (and NaN) take x - x: the value 0 (NaN stays NaN) with gradient 1 - 1 = 0
        rest = zero._binary(Ops.CMPLT, self)._ternary(Ops.WHERE, self, self._binary(Ops.SUB, self))
        return self._binary(Ops.CMPLT, zero)._ternary(Ops.WHERE, self._unary(Ops.NEG), rest)

    def sign(self) -> Self:
        """-1, 0 or 1 by the sign (NaN stays NaN; bools are unchanged).

        Example:
            >>> Tensor([-2.0, 0.0, 3.0]).sign().tolist()
            [-1.0, 0.0, 1.0]
        """
        if self.dtype == dtypes.bool:
            return self
        zero = self._scalar_like(0)
        positive = zero._binary(Ops.CMPLT, self)._ternary(Ops.WHERE, self._scalar_like(1), zero)
        if dtypes.is_unsigned(self.dtype):
            return positive
        # for floats the fallback x * 0 keeps NaN and the sign of zero
        rest = self._binary(Ops.MUL, zero) if dtypes.is_float(self.dtype) else zero
        positive = zero._binary(Ops.CMPLT, self)._ternary(Ops.WHERE, self._scalar_like(1), rest)
        return self._binary(Ops.CMPLT, zero)._ternary(Ops.WHERE, self._scalar_like(-1), positive)

    def isnan(self) -> Self:
        """Where the value is NaN (bool).

        Example:
            >>> Tensor([1.0, math.nan]).isnan().tolist()
            [False, True]
        """
        if not dtypes.is_float(self.dtype):
            return self._const(False, self.shape, dtypes.bool, self.device)
        return self._binary(Ops.CMPNE, self)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Self:
        """Where the value is +inf (if `detect_positive`) or -inf (if `detect_negative`) (bool).

        Example:
            >>> Tensor([1.0, -math.inf]).isinf().tolist()
            [False, True]
        """
        if not dtypes.is_float(self.dtype) or not (detect_positive or detect_negative):
            return self._const(False, self.shape, dtypes.bool, self.device)
        positive = self._binary(Ops.CMPEQ, self._scalar_like(math.inf))
        negative = self._binary(Ops.CMPEQ, self._scalar_like(-math.inf))
        if not detect_negative:
            return positive
        return positive._binary(Ops.OR, negative) if detect_positive else negative

    def isfinite(self) -> Self:
        """Where the value is neither infinite nor NaN (bool).

        Example:
            >>> Tensor([1.0, math.inf, math.nan]).isfinite().tolist()
            [True, False, False]
        """
        if not dtypes.is_float(self.dtype):
            return self._const(True, self.shape, dtypes.bool, self.device)
        return self._binary(Ops.SUB, self)._binary(Ops.CMPEQ, self._scalar_like(0))

    # ------------------------------------------------------------------------------------------------------------
    # special functions and activations
    # ------------------------------------------------------------------------------------------------------------

    def erf(self) -> Self:
        """The error function (Abramowitz & Stegun 7.1.26: absolute error below 1.5e-7, also for float64).

        Example:
            >>> round(Tensor([1.0]).erf().item(), 5)
            0.8427
        """

        def body(x: Self) -> Self:
            magnitude = x._magnitude()
            t = (magnitude * _ERF_P + 1.0).reciprocal()
            polynomial = t * 0.0
            for coefficient in reversed(_ERF_COEFFICIENTS):
                polynomial = (polynomial + coefficient) * t
            # exp(-m*m) with m capped: the gradient of an overflowing square would be 0 * inf = NaN; the square is a
            # product, not a power (a power is log2, exp2 and its special cases per element)
            capped = magnitude.minimum(1e4)
            result = 1.0 - polynomial * (-(capped * capped)).exp()
            return (x < 0).where(-result, result)

        return self._math(body)

    def sigmoid(self) -> Self:
        """1 / (1 + exp(-self)), computed from e = exp(-|x|) <= 1 so that neither it nor its gradient overflows.

        Example:
            >>> Tensor([0.0]).sigmoid().tolist()
            [0.5]
        """

        def body(x: Self) -> Self:
            small = (-x._magnitude()).exp()
            positive = (small + 1.0).reciprocal()
            return (x < 0).where(small * positive, positive)

        return self._math(body)

    def tanh(self) -> Self:
        """The hyperbolic tangent, as sign(x) * (1 - e) / (1 + e) with e = exp(-2|x|) <= 1 (no overflow).

        Example:
            >>> Tensor([0.0]).tanh().tolist()
            [0.0]
        """

        def body(x: Self) -> Self:
            small = (x._magnitude() * -2.0).exp()
            magnitude = (1.0 - small) / (small + 1.0)
            return (x < 0).where(-magnitude, magnitude)

        return self._math(body)

    def relu(self) -> Self:
        """max(self, 0) (NaN stays NaN; the gradient at 0 is 0, like PyTorch).

        Example:
            >>> Tensor([-1.0, 2.0]).relu().tolist()
            [0.0, 2.0]
        """
        self._require_numeric("relu")
        zero = self._scalar_like(0)
        not_positive = self._binary(Ops.CMPLT, zero)._binary(Ops.OR, self._binary(Ops.CMPEQ, zero))
        return not_positive._ternary(Ops.WHERE, zero, self)

    def relu6(self) -> Self:
        """min(max(self, 0), 6).

        Example:
            >>> Tensor([-1.0, 3.0, 9.0]).relu6().tolist()
            [0.0, 3.0, 6.0]
        """
        return self.relu().minimum(6)

    def hardsigmoid(self) -> Self:
        """relu6(x + 3) / 6.

        Example:
            >>> Tensor([0.0]).hardsigmoid().tolist()
            [0.5]
        """
        return (self._floating() + 3.0).relu6() / 6.0

    def hardswish(self) -> Self:
        """x * relu6(x + 3) / 6.

        Example:
            >>> Tensor([3.0]).hardswish().tolist()
            [3.0]
        """
        return self._floating() * self.hardsigmoid()

    def leaky_relu(self, negative_slope: float = 0.01) -> Self:
        """self where positive, else self * negative_slope.

        Example:
            >>> Tensor([-10.0, 2.0]).leaky_relu(0.1).tolist()
            [-1.0, 2.0]
        """
        x = self._floating()
        return (x > 0).where(x, x * negative_slope)

    def elu(self, alpha: float = 1.0) -> Self:
        """self where positive, else alpha * (exp(self) - 1).

        Example:
            >>> Tensor([1.0, 0.0]).elu().tolist()
            [1.0, 0.0]
        """
        return self._math(lambda x: (x > 0).where(x, (x.exp() - 1.0) * alpha))

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Self:
        """Values limited to [min_val, max_val].

        Example:
            >>> Tensor([-3.0, 0.5, 3.0]).hardtanh().tolist()
            [-1.0, 0.5, 1.0]
        """
        if min_val > max_val:
            raise ValueError(f"hardtanh needs min_val <= max_val, got {min_val} > {max_val}")
        return self.clamp(min_val, max_val)

    def gelu(self, approximate: str = "none") -> Self:
        """Gaussian error linear unit: x * Phi(x) with the exact erf form ('none') or the tanh form ('tanh').

        Example:
            >>> Tensor([0.0]).gelu().tolist()
            [0.0]
        """
        if approximate == "none":
            return self._math(lambda x: x * 0.5 * ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0))
        if approximate == "tanh":
            scale = math.sqrt(2.0 / math.pi)

            def body(x: Self) -> Self:
                # tanh saturates to exactly 1 beyond |x| = 10; clamping keeps x**3 (and its gradient) finite
                inner = x.clamp(-10.0, 10.0)
                return x * 0.5 * (((inner + inner * inner * inner * 0.044715) * scale).tanh() + 1.0)

            return self._math(body)
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")

    def silu(self) -> Self:
        """x * sigmoid(x) (also called swish).

        Example:
            >>> Tensor([0.0]).silu().tolist()
            [0.0]
        """
        return self._math(lambda x: x * x.sigmoid())

    def swish(self) -> Self:
        """Alias of `silu`."""
        return self.silu()

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Self:
        """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (like PyTorch).

        Example:
            >>> round(Tensor([0.0]).softplus().item(), 5)
            0.69315
        """
        if beta == 0:
            raise ValueError("softplus beta must not be zero")

        def body(x: Self) -> Self:
            scaled = x * beta
            # max(z, 0) + log(1 + exp(-|z|)) never overflows
            stable = (scaled.relu() + ((-scaled.abs()).exp() + 1.0).log()) / beta
            return (scaled > threshold).where(x, stable)

        return self._math(body)

    def mish(self) -> Self:
        """x * tanh(softplus(x)).

        Example:
            >>> Tensor([0.0]).mish().tolist()
            [0.0]
        """
        return self._math(lambda x: x * x.softplus().tanh())
