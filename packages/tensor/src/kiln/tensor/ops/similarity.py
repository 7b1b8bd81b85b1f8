"""`SimilarityMixin`: cosine_similarity and pairwise_distance between two broadcast tensors, with PyTorch's formulas.

PyTorch divides each operand by its own norm clamped at eps before the dot product, and leaves the clamp out of the
gradient (it clamps without recording); the same holds here, with the clamp's step added as a detached constant.
"""

from __future__ import annotations

import math
from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import broadcast_shapes, check_same_device, normalize_axis
from kiln.uops import dtypes

__all__ = ["SimilarityMixin"]


def _pair(x1: TensorT, x2: TensorT, name: str, expand: bool = True) -> tuple[TensorT, TensorT]:
    """Both operands in one floating dtype, broadcast to one shape (or, without `expand`, only to one ndim)."""
    if not isinstance(x2, TensorCore):
        raise TypeError(f"{name} x2 must be a Tensor, got {type(x2).__name__}")
    check_same_device(name, x1, x2)
    try:
        shape = broadcast_shapes(x1.shape, x2.shape)
    except ValueError:
        raise ValueError(f"{name}: shapes {x1.shape} and {x2.shape} do not broadcast") from None
    dtype = x1.dtype if dtypes.is_float(x1.dtype) else dtypes.default_float
    if dtypes.is_float(x2.dtype) and x2.dtype.itemsize > dtype.itemsize:
        dtype = x2.dtype
    if not expand:
        ndim = len(shape)
        return (
            x1._cast(dtype).reshape(*((1,) * (ndim - x1.ndim)), *x1.shape),
            x2._cast(dtype).reshape(*((1,) * (ndim - x2.ndim)), *x2.shape),
        )
    return x1._cast(dtype)._broadcast_to(shape), x2._cast(dtype)._broadcast_to(shape)


def _check_number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, got {value!r}")
    return float(value)


class SimilarityMixin(TensorCore):
    """Similarities and distances between two tensors."""

    def cosine_similarity(self, x2: Self, dim: int = 1, eps: float = 1e-8) -> Self:
        """The cosine of the angle between `self` and `x2` along `dim` (shapes broadcast), each norm clamped at
        `eps`, like `torch.nn.functional.cosine_similarity`.

        Example:
            >>> Tensor([[1.0, 0.0]]).cosine_similarity(Tensor([[1.0, 1.0]])).tolist()[0] > 0.7071
            True
        """
        # each norm is taken before broadcasting (the same numbers, and fewer of them)
        first, second = _pair(self, x2, "cosine_similarity", expand=False)
        epsilon = _check_number(eps, "cosine_similarity eps")
        axis = normalize_axis(dim, first.shape, "cosine_similarity dim")
        if first.shape[axis] != second.shape[axis]:  # the norms run over the broadcast length
            length = max(first.shape[axis], second.shape[axis])
            first = first._broadcast_to((*first.shape[:axis], length, *first.shape[axis + 1 :]))
            second = second._broadcast_to((*second.shape[:axis], length, *second.shape[axis + 1 :]))

        def unit(x: Self) -> Self:
            norm = (x * x).sum(axis, keepdim=True).sqrt()
            clamped = norm + (norm.maximum(epsilon) - norm).detach()
            return x / clamped

        return (unit(first) * unit(second)).sum(axis)

    def pairwise_distance(self, x2: Self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Self:
        """The p-norm of (self - x2 + eps) over the last dim (shapes broadcast), like
        `torch.nn.functional.pairwise_distance`; p may be math.inf.

        Example:
            >>> round(Tensor([[3.0, 0.0]]).pairwise_distance(Tensor([[0.0, 4.0]]), eps=0.0).item(), 5)
            5.0
        """
        first, second = _pair(self, x2, "pairwise_distance")
        order = _check_number(p, "pairwise_distance p")
        epsilon = _check_number(eps, "pairwise_distance eps")
        if not isinstance(keepdim, bool):
            raise TypeError(f"pairwise_distance keepdim must be a bool, got {keepdim!r}")
        if order < 0:
            raise ValueError(f"pairwise_distance p must be non-negative, got {p!r}")
        if first.ndim == 0:
            raise ValueError("pairwise_distance needs at least one dim")
        difference = (first - second + epsilon).abs()
        if order == math.inf:
            return difference.amax(-1, keepdim=keepdim)
        if order == 0:
            return difference.ne(0)._cast(difference.dtype).sum(-1, keepdim=keepdim)
        if order == 2:
            return (difference * difference).sum(-1, keepdim=keepdim).sqrt()
        if order == 1:
            return difference.sum(-1, keepdim=keepdim)
        return difference.pow(order).sum(-1, keepdim=keepdim).pow(1.0 / order)
