"""`SamplingMixin`: random index sampling (multinomial, randperm) from the global generator, and `scatter_reduce`.

All stay lazy: multinomial with replacement inverts the CDF (one uniform draw per sample), without replacement it
takes the top-k of Gumbel-perturbed log-probabilities; randperm sorts uniform keys. Sampled indices are
`dtypes.default_int` (torch gives int64).
"""

from __future__ import annotations

import math
from typing import Self

from kiln.tensor.core import TensorCore
from kiln.tensor.ops._checks import check_int, normalize_axis
from kiln.tensor.ops.creation import iota
from kiln.uops import DType, dtypes

__all__ = ["SamplingMixin"]

_SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


class SamplingMixin(TensorCore):
    """Random index sampling and scatter reductions."""

    def multinomial(self, num_samples: int, replacement: bool = False) -> Self:
        """`num_samples` category indices per row drawn with probability proportional to the (non-negative)
        weights of the last dim; without `replacement` each index is drawn at most once.

        Example:
            >>> Tensor([0.0, 1.0, 0.0]).multinomial(2, replacement=True).tolist()
            [1, 1]
        """
        if self.ndim not in (1, 2):
            raise ValueError(f"multinomial needs 1-D or 2-D weights, got shape {self.shape}")
        count = check_int(num_samples, "multinomial num_samples")
        categories = self.shape[-1]
        if count <= 0:
            raise ValueError(f"multinomial num_samples must be positive, got {count}")
        if not replacement and count > categories:
            raise ValueError(f"multinomial cannot draw {count} samples without replacement from {categories}")
        weights = self._floating() if self.ndim == 2 else self._floating().reshape(1, categories)
        rows = weights.shape[0]
        if replacement:
            cdf = weights.cumsum(1) / weights.sum(1, keepdim=True)
            draws = self.rand(rows, count, 1, device=self.device)
            below = (
                (cdf.reshape(rows, 1, categories) <= draws)._cast(dtypes.default_int).sum(2, dtype=dtypes.default_int)
            )
            picks = below.minimum(categories - 1)
        else:
            uniform = self.rand(rows, categories, device=self.device).clamp(1e-12, 1.0 - 1e-7)
            keys = (weights > 0).where(weights.log() - (-uniform.log()).log(), -math.inf)
            picks = keys.topk(count, dim=1)[1]._cast(dtypes.default_int)
        return picks if self.ndim == 2 else picks.reshape(count)

    @classmethod
    def randperm(cls, n: int, *, device: str | tuple[str, ...] | None = None, dtype: DType | None = None) -> Self:
        """A random permutation of 0 .. n-1 (`dtypes.default_int` unless `dtype` is given).

        Example:
            >>> sorted(Tensor.randperm(4).tolist())
            [0, 1, 2, 3]
        """
        size = check_int(n, "randperm n")
        if size < 0:
            raise ValueError(f"randperm n must be >= 0, got {size}")
        order = cls.rand(size, device=device).argsort()
        return order if dtype is None else order.cast(dtype)

    def scatter_reduce(self, dim: int, index: Self, src: Self, reduce: str, *, include_self: bool = True) -> Self:
        """A copy of this tensor where the `src` values sent to each position by `index` along `dim` are reduced
        with 'sum', 'prod', 'mean', 'amax' or 'amin' (together with the old value if `include_self`), like
        `torch.Tensor.scatter_reduce`.

        Example:
            >>> Tensor([1.0, 1.0]).scatter_reduce(0, Tensor([0, 0, 1]), Tensor([2.0, 3.0, 4.0]), "amax").tolist()
            [3.0, 4.0]
        """
        if reduce not in _SCATTER_REDUCTIONS:
            raise ValueError(f"scatter_reduce reduce must be one of {_SCATTER_REDUCTIONS}, got {reduce!r}")
        axis = normalize_axis(dim, self.shape, "scatter_reduce dim")
        if not dtypes.is_int(index.dtype) or index.ndim != self.ndim or src.ndim != self.ndim:
            raise TypeError(f"scatter_reduce index must be an integer tensor with {self.ndim} dims like src")
        values = src[tuple(slice(0, size) for size in index.shape)]._cast(self.dtype)
        size = self.shape[axis]
        # (*index.shape, size): which target position along `axis` each source element goes to
        hits = index.unsqueeze(-1) == iota(type(self), size, self.device).reshape(*([1] * index.ndim), size)
        spread = values.unsqueeze(-1)._broadcast_to(hits.shape)
        if reduce in ("sum", "mean"):
            combined = hits.where(spread, 0).sum(axis, dtype=self.dtype)
        elif reduce == "prod":
            combined = hits.where(spread, 1).prod(axis, dtype=self.dtype)
        elif reduce == "amax":
            combined = hits.where(spread, dtypes.min(self.dtype)).amax(axis)
        else:
            combined = hits.where(spread, dtypes.max(self.dtype)).amin(axis)
        counts = hits._cast(self.dtype).sum(axis, dtype=self.dtype)
        # (..., size) with the target axis last -> the target layout, padded to this tensor's other sizes
        combined, counts = combined.movedim(-1, axis), counts.movedim(-1, axis)
        padding = [(0, 0 if i == axis else self.shape[i] - combined.shape[i]) for i in range(self.ndim)]
        combined, counts = combined.pad(padding), counts.pad(padding)
        touched = counts > 0
        if include_self:
            if reduce in ("sum", "mean"):
                combined = combined + self
                counts = counts + 1
            elif reduce == "prod":
                combined = combined * self
            elif reduce == "amax":
                combined = combined.maximum(self)
            else:
                combined = combined.minimum(self)
        if reduce == "mean":
            divisor = touched.where(counts, 1)
            combined = (
                combined / divisor if dtypes.is_float(self.dtype) else combined.div(divisor, rounding_mode="floor")
            )
        return touched.where(combined._cast(self.dtype), self)
