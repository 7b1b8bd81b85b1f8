"""`ActivationMixin`: the activation functions beyond unary.py's (softsign, selu, celu, logsigmoid, quick_gelu,
softmin, hardshrink, ...), and `normalize`, composed from existing Tensor methods."""

from __future__ import annotations

import math
from typing import Self

from kiln.tensor.core import TensorCore
from kiln.tensor.ops._checks import normalize_axis
from kiln.uops import DType

__all__ = ["ActivationMixin"]

# Klambauer et al., "Self-Normalizing Neural Networks" (2017): the constants torch.nn.SELU uses
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


class ActivationMixin(TensorCore):
    """Activation functions."""

    def softsign(self) -> Self:
        """self / (1 + |self|).

        Example:
            >>> Tensor([1.0, -3.0]).softsign().tolist()
            [0.5, -0.75]
        """
        return self._math(lambda x: x / (x.abs() + 1.0))

    def celu(self, alpha: float = 1.0) -> Self:
        """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)); ValueError for alpha = 0.

        Example:
            >>> Tensor([1.0, 0.0]).celu().tolist()
            [1.0, 0.0]
        """
        if alpha == 0:
            raise ValueError("celu alpha must not be 0 (it divides by alpha)")
        return self._math(lambda x: (x > 0).where(x, (x.minimum(0.0) / alpha).expm1() * alpha))

    def selu(self) -> Self:
        """scale * (max(0, x) + min(0, alpha * (exp(x) - 1))) with the self-normalizing constants.

        Example:
            >>> round(Tensor([1.0]).selu().item(), 6)
            1.050701
        """
        return self._math(lambda x: (x > 0).where(x, x.minimum(0.0).expm1() * _SELU_ALPHA) * _SELU_SCALE)

    def logsigmoid(self) -> Self:
        """log(sigmoid(self)) = min(x, 0) - log1p(exp(-|x|)), without overflow.

        Example:
            >>> round(Tensor([0.0]).logsigmoid().item(), 6)
            -0.693147
        """
        # where(x < 0, x, 0) rather than minimum(x, 0): at 0 the gradient is torch's 1/2, not a tie's split
        return self._math(lambda x: (x < 0).where(x, 0.0) - (-x._magnitude()).exp().log1p())

    def quick_gelu(self) -> Self:
        """x * sigmoid(1.702 x), the fast GELU approximation of GPT-2 / CLIP.

        Example:
            >>> Tensor([0.0]).quick_gelu().tolist()
            [0.0]
        """
        return self._math(lambda x: x * (x * 1.702).sigmoid())

    def hardshrink(self, lambd: float = 0.5) -> Self:
        """x where |x| > lambd, else 0.

        Example:
            >>> Tensor([0.3, -1.0]).hardshrink().tolist()
            [0.0, -1.0]
        """
        return (self.abs() > lambd).where(self, 0.0)

    def softshrink(self, lambd: float = 0.5) -> Self:
        """x - lambd above lambd, x + lambd below -lambd, 0 between.

        Example:
            >>> Tensor([1.0, -1.0, 0.2]).softshrink().tolist()
            [0.5, -0.5, 0.0]
        """
        if lambd < 0:
            raise ValueError(f"softshrink lambd must be >= 0, got {lambd}")
        return (self > lambd).where(self - lambd, (self < -lambd).where(self + lambd, 0.0))

    def tanhshrink(self) -> Self:
        """x - tanh(x).

        Example:
            >>> Tensor([0.0]).tanhshrink().tolist()
            [0.0]
        """
        return self - self.tanh()

    def prelu(self, weight: Self) -> Self:
        """max(0, x) + weight * min(0, x), the weight per channel (dim 1) or one for all.

        Example:
            >>> Tensor([[-2.0, 3.0]]).prelu(Tensor([0.5])).tolist()
            [[-1.0, 3.0]]
        """
        if weight.ndim != 1:
            raise ValueError(f"prelu weight must be 1-D, got shape {weight.shape}")
        if weight.shape[0] != 1:
            if self.ndim < 2 or self.shape[1] != weight.shape[0]:
                raise ValueError(f"prelu weight has {weight.shape[0]} values; input {self.shape} needs 1 or dim 1")
            weight = weight.reshape(weight.shape[0], *([1] * (self.ndim - 2)))
        return (self > 0).where(self, self * weight)

    def softmin(self, dim: int = -1, *, dtype: DType | None = None) -> Self:
        """softmax(-self) along `dim`.

        Example:
            >>> Tensor([0.0, 0.0]).softmin().tolist()
            [0.5, 0.5]
        """
        return (-self._floating()).softmax(dim, dtype=dtype)

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Self:
        """self / max(||self||_p along `dim`, eps), like `torch.nn.functional.normalize`.

        Example:
            >>> [round(v, 6) for v in Tensor([[3.0, 4.0]]).normalize().reshape(-1).tolist()]
            [0.6, 0.8]
        """
        index = normalize_axis(dim, self.shape, "normalize dim")
        return self / self.norm(p, dim=index, keepdim=True).maximum(eps)

    def norm(self, p: float | str = 2.0, dim: int | tuple[int, ...] | None = None, keepdim: bool = False) -> Self:
        """The p-norm over `dim` (every dim when None): p = 2 (or 'fro'), 1, inf, -inf, 0 or any other number.

        Example:
            >>> Tensor([3.0, 4.0]).norm().tolist()
            5.0
        """
        if p == "fro":
            p = 2.0
        if isinstance(p, str):
            raise ValueError(f"norm p must be a number or 'fro', got {p!r}")
        x = self._floating().abs()
        if p == math.inf:
            return x.amax(dim, keepdim)
        if p == -math.inf:
            return x.amin(dim, keepdim)
        if p == 0:
            return x.ne(0)._cast(x.dtype).sum(dim, keepdim)
        if p == 1:
            return x.sum(dim, keepdim)
        if p == 2:
            return (x * x).sum(dim, keepdim).sqrt()
        return (x**p).sum(dim, keepdim) ** (1.0 / p)

    def dist(self, other: Self, p: float = 2.0) -> Self:
        """The p-norm of self - other (broadcast).

        Example:
            >>> Tensor([0.0, 0.0]).dist(Tensor([3.0, 4.0])).tolist()
            5.0
        """
        return (self - other).norm(p)

    # ------------------------------------------------------------------------------------------------------------
    # tinygrad's normalization spellings (no running statistics; the statistics are arguments)
    # ------------------------------------------------------------------------------------------------------------

    def layernorm(self, axis: int | tuple[int, ...] = -1, eps: float = 1e-5) -> Self:
        """(x - mean) / sqrt(var + eps) over `axis` (biased variance, no affine parameters), tinygrad's layernorm.

        Example:
            >>> [round(v, 3) for v in Tensor([1.0, 3.0]).layernorm().tolist()]
            [-1.0, 1.0]
        """
        centered = self - self.mean(axis, keepdim=True)
        return centered * ((centered * centered).mean(axis, keepdim=True) + eps).rsqrt()

    def batchnorm(
        self,
        weight: Self | None,
        bias: Self | None,
        mean: Self,
        invstd: Self,
        axis: int | tuple[int, ...] = 1,
    ) -> Self:
        """(x - mean) * weight * invstd + bias with the statistics given per `axis` (tinygrad's batchnorm; torch's
        is `batch_norm`).

        Example:
            >>> Tensor([[1.0, 4.0]]).batchnorm(None, None, Tensor([1.0, 2.0]), Tensor([1.0, 0.5])).tolist()
            [[0.0, 1.0]]
        """
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        kept = [normalize_axis(a, self.shape, "batchnorm axis") for a in axes]
        shape = tuple(size if position in kept else 1 for position, size in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        x = x * (invstd.reshape(shape) if invstd.ndim == len(kept) else invstd)
        return x + bias.reshape(shape) if bias is not None else x
