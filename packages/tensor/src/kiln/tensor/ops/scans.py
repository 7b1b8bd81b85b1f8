"""`ScanMixin`: running products / minima / log-sum-exps, and the reductions beyond reduce.py's (amax, aminmax,
nansum, var_mean, count_nonzero, ...).

The running ops compare every position with every earlier one along the axis (a (n, n) lower-triangle mask and a
reduction), O(n**2) work along the axis like `cummax`, and differentiate through the reduction.
"""

from __future__ import annotations

import math
from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import normalize_axes, normalize_axis, pick_axis
from kiln.tensor.ops.creation import iota
from kiln.uops import DType, dtypes

__all__ = ["ScanMixin"]

Axis = int | tuple[int, ...] | list[int] | None


def _prefix_rows(last: TensorT) -> tuple[TensorT, TensorT]:
    """(window, rows): the (n, n) mask column <= row and the input repeated as (..., n, n) rows, for the last dim."""
    size = last.shape[-1]
    rows_index = iota(type(last), size, last.device).reshape(size, 1)
    columns_index = iota(type(last), size, last.device).reshape(1, size)
    rows = last.unsqueeze(-2)._broadcast_to((*last.shape[:-1], size, size))
    return columns_index <= rows_index, rows


class ScanMixin(TensorCore):
    """Running (cumulative) ops and extra reductions."""

    def _scan_axis(self, axis: int | None, dim: int | None, what: str) -> int:
        return normalize_axis(pick_axis(None, dim, axis), self.shape, f"{what} dim")

    def cumprod(self, axis: int = 0, *, dim: int | None = None, dtype: DType | None = None) -> Self:
        """Running products along `axis` (integers and bools give int64, like PyTorch).

        Example:
            >>> Tensor([1, 2, 3, 4]).cumprod().tolist()
            [1, 2, 6, 24]
        """
        if self.ndim == 0:
            return self.prod(dtype=dtype)
        index = self._scan_axis(axis, dim, "cumprod")
        target = dtype if dtype is not None else self.dtype if dtypes.is_float(self.dtype) else dtypes.int64
        last = self._cast(target).transpose(index, -1)
        if last.shape[-1] == 0:
            return self._cast(target)
        window, rows = _prefix_rows(last)
        return window.where(rows, 1).prod(-1, dtype=target).transpose(index, -1)

    def cummin(self, axis: int = 0, *, dim: int | None = None) -> tuple[Self, Self]:
        """(running minima, their positions as `dtypes.default_int`) along `axis`, like `torch.cummin`: the
        position is the latest one holding the minimum; a NaN stays the minimum once seen.

        Example:
            >>> values, positions = Tensor([3, 1, 2, 1]).cummin(); values.tolist(), positions.tolist()
            ([3, 1, 1, 1], [0, 1, 1, 3])
        """
        values, positions = self._order_reversed().cummax(axis, dim=dim)
        return values._order_reversed(), positions

    def logcumsumexp(self, axis: int = 0, *, dim: int | None = None) -> Self:
        """Running log(sum(exp(x))) along `axis`, without overflow.

        Example:
            >>> [round(v, 4) for v in Tensor([0.0, 0.0]).logcumsumexp().tolist()]
            [0.0, 0.6931]
        """
        if self.ndim == 0:
            return self._floating()
        index = self._scan_axis(axis, dim, "logcumsumexp")
        last = self._floating().transpose(index, -1)
        if last.shape[-1] == 0:
            return self._floating()
        window, rows = _prefix_rows(last)
        return window.where(rows, -math.inf).logsumexp(-1).transpose(index, -1)

    # ------------------------------------------------------------------------------------------------------------
    # reductions
    # ------------------------------------------------------------------------------------------------------------

    def aminmax(self, *, dim: int | None = None, keepdim: bool = False) -> tuple[Self, Self]:
        """(min, max) over `dim` (every dim when None).

        Example:
            >>> low, high = Tensor([3, 1, 2]).aminmax(); low.item(), high.item()
            (1, 3)
        """
        return self.amin(dim, keepdim), self.amax(dim, keepdim)

    def nansum(self, dim: Axis = None, keepdim: bool = False, *, dtype: DType | None = None) -> Self:
        """The sum treating NaN as 0.

        Example:
            >>> Tensor([1.0, math.nan, 2.0]).nansum().item()
            3.0
        """
        values = self.isnan().where(0, self) if dtypes.is_float(self.dtype) else self
        return values.sum(dim, keepdim, dtype=dtype)

    def nanmean(self, dim: Axis = None, keepdim: bool = False, *, dtype: DType | None = None) -> Self:
        """The mean of the values that are not NaN (NaN where all are).

        Example:
            >>> Tensor([1.0, math.nan, 2.0]).nanmean().item()
            1.5
        """
        source = self if dtype is None else self._cast(dtype)
        if not dtypes.is_float(source.dtype):
            raise TypeError(f"nanmean needs a floating-point tensor, got {source.dtype!r}")
        present = ~source.isnan()
        return source.nansum(dim, keepdim) / present._cast(source.dtype).sum(dim, keepdim)

    def count_nonzero(self, dim: Axis = None) -> Self:
        """How many elements are not zero (int64).

        Example:
            >>> Tensor([0, 1, 2, 0]).count_nonzero().item()
            2
        """
        return self.ne(0).sum(dim)

    def var_mean(self, dim: Axis = None, *, correction: float = 1, keepdim: bool = False) -> tuple[Self, Self]:
        """(variance, mean) over `dim`, like `torch.var_mean`.

        Example:
            >>> variance, mean = Tensor([1.0, 3.0]).var_mean(); variance.item(), mean.item()
            (2.0, 2.0)
        """
        axes = normalize_axes(dim, self.shape, "var_mean dim")
        return self.var(axes, keepdim, correction=correction), self.mean(axes, keepdim)

    def std_mean(self, dim: Axis = None, *, correction: float = 1, keepdim: bool = False) -> tuple[Self, Self]:
        """(standard deviation, mean) over `dim`, like `torch.std_mean`.

        Example:
            >>> deviation, mean = Tensor([1.0, 3.0]).std_mean(correction=0); deviation.item(), mean.item()
            (1.0, 2.0)
        """
        axes = normalize_axes(dim, self.shape, "std_mean dim")
        return self.std(axes, keepdim, correction=correction), self.mean(axes, keepdim)
