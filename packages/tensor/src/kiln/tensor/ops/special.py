"""`SpecialMixin`: the log-gamma family (lgamma, digamma, polygamma of order 0, mvlgamma), composed in float32 or
wider.

- lgamma: Lanczos' approximation (g = 7, 9 terms) for x >= 0.5 and the reflection formula
  lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x) below; the gradient is differentiated through it.
- digamma: the recurrence psi(x) = psi(x + 6) - sum 1/(x + k) lifts x above 6, where the asymptotic series (to the
  x**-10 term) is exact to ~1e-11; below 0.5, the reflection psi(x) = psi(1 - x) - pi / tan(pi x).
Both branches of each reflection get safe inputs ("double where"), so the unused one never yields NaN gradients.
"""

from __future__ import annotations

import math
from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int

__all__ = ["SpecialMixin"]

_LANCZOS_G = 7.0
_LANCZOS = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)
# Bernoulli-number terms of psi's asymptotic series: psi(y) ~ ln y - 1/(2y) - sum c_n / y**(2n)
_DIGAMMA_SERIES = (1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132)
_DIGAMMA_SHIFT = 6


def _lanczos_lgamma(z: TensorT) -> TensorT:
    """lgamma(z) for z >= 0.5."""
    shifted = z - 1.0
    total = shifted * 0.0 + _LANCZOS[0]
    for i, coefficient in enumerate(_LANCZOS[1:], start=1):
        total = total + coefficient / (shifted + float(i))
    t = shifted + _LANCZOS_G + 0.5
    return 0.5 * math.log(2 * math.pi) + (shifted + 0.5) * t.log() - t + total.log()


def _asymptotic_digamma(z: TensorT) -> TensorT:
    """psi(z) for z > 0 (shifted up by _DIGAMMA_SHIFT first)."""
    correction = z * 0.0
    for k in range(_DIGAMMA_SHIFT):
        correction = correction + (z + float(k)).reciprocal()
    y = z + float(_DIGAMMA_SHIFT)
    inverse_square = (y * y).reciprocal()
    series = inverse_square * 0.0
    for coefficient in reversed(_DIGAMMA_SERIES):
        series = (series + coefficient) * inverse_square
    return y.log() - 0.5 / y - series - correction


class SpecialMixin(TensorCore):
    """The log-gamma family."""

    def lgamma(self) -> Self:
        """log|Gamma(self)| (inf at the non-positive integers).

        Example:
            >>> round(Tensor([5.0]).lgamma().item(), 4)  # log(24)
            3.1781
        """

        def body(x: Self) -> Self:
            reflect = x < 0.5
            z = reflect.where(1.0 - x, x)
            direct = _lanczos_lgamma(z)
            sine = (reflect.where(x, 0.5) * math.pi).sin().abs()
            return reflect.where(math.log(math.pi) - sine.log() - direct, direct)

        return self._math(body)

    def digamma(self) -> Self:
        """psi(self) = d/dx lgamma(x).

        Example:
            >>> round(Tensor([1.0]).digamma().item(), 6)  # -Euler's constant
            -0.577216
        """

        def body(x: Self) -> Self:
            reflect = x < 0.5
            z = reflect.where(1.0 - x, x)
            direct = _asymptotic_digamma(z)
            angle = reflect.where(x, 0.25) * math.pi
            return reflect.where(direct - math.pi * angle.cos() / angle.sin(), direct)

        return self._math(body)

    def polygamma(self, n: int) -> Self:
        """The n-th derivative of digamma; n = 0 (digamma) only, ValueError otherwise.

        Example:
            >>> round(Tensor([1.0]).polygamma(0).item(), 6)
            -0.577216
        """
        if check_int(n, "polygamma n") != 0:
            raise ValueError(f"polygamma supports n = 0 (digamma) only, got n = {n}")
        return self.digamma()

    def mvlgamma(self, p: int) -> Self:
        """The multivariate log-gamma of dimension p: p(p-1)/4 log(pi) + sum_i lgamma(x - i/2), i < p.

        Example:
            >>> round(Tensor([2.5]).mvlgamma(1).item(), 6) == round(Tensor([2.5]).lgamma().item(), 6)
            True
        """
        dimension = check_int(p, "mvlgamma p")
        if dimension < 1:
            raise ValueError(f"mvlgamma p must be >= 1, got {dimension}")
        x = self._floating()
        total = x.lgamma()
        for i in range(1, dimension):
            total = total + (x - i / 2).lgamma()
        return total + dimension * (dimension - 1) / 4 * math.log(math.pi)
