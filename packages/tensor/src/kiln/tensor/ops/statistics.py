"""`StatisticsMixin`: order statistics (median, kthvalue, quantile, msort), differences, covariance and histograms,
composed from `sort` (O(n**2) per row, see sorting.py), reductions and one-hot comparisons.

`median` and `kthvalue` return torch's lower median / k-th smallest with its position (`dtypes.default_int`);
`bincount` reads the largest value first (a sync, like torch) to size its result.
"""

from __future__ import annotations

import math
from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int, check_size, normalize_axis
from kiln.tensor.ops.creation import iota
from kiln.tensor.symbolic import describe_variables, format_size, provably_le
from kiln.uops import Ops, dtypes

__all__ = ["StatisticsMixin"]

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


class StatisticsMixin(TensorCore):
    """Order statistics, differences, covariance and histograms."""

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Self, Self]:
        """(the k-th smallest value along `dim` (k from 1), its position), like `torch.kthvalue`.

        Example:
            >>> values, positions = Tensor([3.0, 1.0, 2.0]).kthvalue(2); values.item(), positions.item()
            (2.0, 2)
        """
        axis = normalize_axis(dim, self.shape, "kthvalue dim")
        length = self.shape[axis] if self.ndim else 1
        if type(length) is not int or not isinstance(k, int):  # a bound Variable in k or the dim's size
            k = check_size(k, "kthvalue k")
            if not (provably_le(1, k) and provably_le(k, length)):
                raise IndexError(
                    f"kthvalue k = {format_size(k)} is out of range for a dim of {format_size(length)} for some values "
                    f"of their variables ({describe_variables(k, length)}; expected 1 <= k <= the dim)"
                )
            values, positions = self.sort(axis)
            bounds: list[tuple[int, int] | None] = [None] * self.ndim
            bounds[axis] = (k - 1, k)
            picked_values, picked_positions = values.shrink(bounds), positions.shrink(bounds)
            if keepdim:
                return picked_values, picked_positions
            return picked_values.squeeze(axis), picked_positions.squeeze(axis)
        if not 1 <= check_int(k, "kthvalue k") <= length:
            raise IndexError(f"kthvalue k = {k} is out of range for a dim of {length} (expected 1..{length})")
        values, positions = self.sort(axis) if self.ndim else (self, self._const(0, (), dtypes.default_int))
        if not self.ndim:
            return values, positions
        picked_values = values.narrow(axis, k - 1, 1)
        picked_positions = positions.narrow(axis, k - 1, 1)
        if keepdim:
            return picked_values, picked_positions
        return picked_values.squeeze(axis), picked_positions.squeeze(axis)

    def median(self, dim: int | None = None, keepdim: bool = False) -> Self | tuple[Self, Self]:
        """The lower median (the ((n - 1) // 2)-th smallest): of every element when `dim` is None, else (values,
        positions) along `dim`, like `torch.median`.

        Example:
            >>> Tensor([4.0, 1.0, 3.0, 2.0]).median().item()
            2.0
        """
        if dim is None:
            flat = self.reshape(-1)
            if type(flat.shape[0]) is not int:
                return flat._symbolic_median(0, False)[0]
            if flat.shape[0] == 0:
                raise ValueError("median of an empty tensor")
            return flat.kthvalue((flat.shape[0] - 1) // 2 + 1, 0)[0]
        axis = normalize_axis(dim, self.shape, "median dim")
        length = self.shape[axis] if self.ndim else 1
        if type(length) is not int:
            return self._symbolic_median(axis, keepdim)
        return self.kthvalue((length - 1) // 2 + 1, axis, keepdim)

    def _symbolic_median(self, axis: int, keepdim: bool) -> tuple[Self, Self]:
        """`median` along a dim of bound-Variable size n: the sorted position (n - 1) // 2 is picked by comparing the
        positions with that rank computed on the device (n counted there), so one kernel serves every n."""
        values, positions = self.sort(axis)
        count = self._const(1, self.shape, dtypes.int32, self.device)._reduce(Ops.ADD, (axis,))
        view = [1] * self.ndim
        view[axis] = self.shape[axis]
        hits = iota(type(self), self.shape[axis], self.device).reshape(view) == (count - 1) // 2
        picked = []
        for chosen in (values, positions):
            summed = chosen._cast(dtypes.uint8) if chosen.dtype == dtypes.bool else chosen
            total = hits.where(summed, 0)._reduce(Ops.ADD, (axis,))._cast(chosen.dtype)
            picked.append(total if keepdim else total.squeeze(axis))
        return picked[0], picked[1]

    def msort(self) -> Self:
        """The values sorted along dim 0.

        Example:
            >>> Tensor([[2, 1], [1, 3]]).msort().tolist()
            [[1, 1], [2, 3]]
        """
        return self.sort(0)[0]

    def quantile(
        self, q: float | Self, dim: int | None = None, keepdim: bool = False, *, interpolation: str = "linear"
    ) -> Self:
        """The q-th quantiles (q in [0, 1], a float or a 1-D tensor: then a leading dim) along `dim` (of every
        element when None), interpolated 'linear', 'lower', 'higher', 'midpoint' or 'nearest', like torch.

        Example:
            >>> Tensor([1.0, 2.0, 3.0, 4.0]).quantile(0.5).item()
            2.5
        """
        if interpolation not in _INTERPOLATIONS:
            raise ValueError(f"quantile interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}")
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"quantile needs a floating-point tensor, got {self.dtype!r}")
        source = self.reshape(-1) if dim is None else self
        axis = 0 if dim is None else normalize_axis(dim, self.shape, "quantile dim")
        length = source.shape[axis]
        if type(length) is not int:
            raise ValueError(
                f"quantile along dim {axis} of size {format_size(length)} ({describe_variables(length)}): the "
                "interpolated positions would change with the variable; median() takes a symbolic dim"
            )
        levels = [float(q)] if isinstance(q, (int, float)) else [float(v) for v in q.tolist()]
        if any(not 0.0 <= level <= 1.0 for level in levels):
            raise ValueError(f"quantile q must be in [0, 1], got {levels}")
        ordered = source.sort(axis)[0]
        results = []
        for level in levels:
            position = level * (length - 1)
            low, high = math.floor(position), math.ceil(position)
            if interpolation == "nearest":
                low = high = round(position)  # halves go to even, like torch
            elif interpolation == "lower":
                high = low
            elif interpolation == "higher":
                low = high
            below, above = ordered.narrow(axis, low, 1), ordered.narrow(axis, high, 1)
            if interpolation == "midpoint":
                value = (below + above) * 0.5
            else:
                value = below + (above - below) * (position - low) if high != low else below
            if dim is None:
                value = value.reshape((1,) * self.ndim if keepdim else ())
            elif not keepdim:
                value = value.squeeze(axis)
            results.append(value)
        if isinstance(q, (int, float)):
            return results[0]
        return results[0].stack(*results[1:], dim=0)

    def diff(self, n: int = 1, dim: int = -1, prepend: Self | None = None, append: Self | None = None) -> Self:
        """The n-th forward difference along `dim` (XOR for bools), after joining `prepend` / `append`.

        Example:
            >>> Tensor([1, 4, 9, 16]).diff().tolist()
            [3, 5, 7]
        """
        axis = normalize_axis(dim, self.shape, "diff dim")
        result = self
        if prepend is not None:
            result = prepend.cat(result, dim=axis)
        if append is not None:
            result = result.cat(append, dim=axis)
        for _ in range(check_int(n, "diff n")):
            length = result.shape[axis]
            if length == 0:
                break
            later, earlier = result.narrow(axis, 1, length - 1), result.narrow(axis, 0, length - 1)
            result = later ^ earlier if result.dtype == dtypes.bool else later - earlier
        return result

    def cov(self, *, correction: int = 1) -> Self:
        """The covariance matrix of the variables in rows (observations in columns), like `torch.cov`.

        Example:
            >>> Tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]).cov().tolist()
            [[1.0, 2.0], [2.0, 4.0]]
        """
        if self.ndim > 2:
            raise ValueError(f"cov needs a 1-D or 2-D tensor, got shape {self.shape}")
        x = self._floating().reshape(1, -1) if self.ndim < 2 else self._floating()
        observations = x.shape[1]
        centered = x - x.mean(1, keepdim=True)
        if type(observations) is not int:  # a bound Variable: the observations counted on the device
            count = x._const(1, (1, observations), x.dtype, x.device)._reduce(Ops.ADD, (1,))
            product = centered.matmul(centered.mT) / (count - correction).maximum(0)
            return product.reshape(()) if self.ndim < 2 else product
        product = centered.matmul(centered.mT) / max(0, observations - correction)
        return product.reshape(()) if self.ndim < 2 else product

    def corrcoef(self) -> Self:
        """Pearson correlation coefficients of the variables in rows, clipped to [-1, 1].

        Example:
            >>> Tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]).corrcoef().tolist()
            [[1.0, -1.0], [-1.0, 1.0]]
        """
        covariance = self.cov()
        if covariance.ndim == 0:
            return covariance / covariance
        deviation = covariance.diagonal().sqrt()
        return (covariance / deviation.reshape(-1, 1) / deviation.reshape(1, -1)).clamp(-1.0, 1.0)

    def histc(self, bins: int = 100, min: float = 0.0, max: float = 0.0) -> Self:
        """Counts in `bins` equal bins over [min, max] (the data's range when both are 0); values outside are
        ignored, the maximum falls in the last bin. Float, like `torch.histc`.

        Example:
            >>> Tensor([1.0, 2.0, 1.0]).histc(bins=4, min=0.0, max=3.0).tolist()
            [0.0, 2.0, 1.0, 0.0]
        """
        count = check_int(bins, "histc bins")
        if count <= 0:
            raise ValueError(f"histc bins must be positive, got {count}")
        if min > max:
            raise ValueError(f"histc needs min <= max, got min={min}, max={max}")
        values = self._floating().reshape(-1)
        if min == max:
            low, high = values.amin(), values.amax()
            same = low == high
            low, high = same.where(low - 1.0, low), same.where(high + 1.0, high)
        else:
            low, high = values._const(min, (), values.dtype), values._const(max, (), values.dtype)
        inside = (values >= low) & (values <= high)
        slot = ((values - low) / (high - low) * count).floor().clamp(0, count - 1)._cast(dtypes.default_int)
        hits = (slot.reshape(-1, 1) == iota(type(self), count, self.device).reshape(1, count)) & inside.reshape(-1, 1)
        return hits._cast(values.dtype).sum(0)

    def bincount(self, weights: Self | None = None, minlength: int = 0) -> Self:
        """How often each value 0 .. max occurs in this 1-D non-negative integer tensor (or the sum of `weights`
        there); at least `minlength` bins. Reads the maximum first (a sync), like torch.

        Example:
            >>> Tensor([1, 1, 3]).bincount().tolist()
            [0, 2, 0, 1]
        """
        if self.ndim != 1 or not dtypes.is_int(self.dtype):
            raise TypeError(f"bincount needs a 1-D integer tensor, got {self.dtype!r} of shape {self.shape}")
        if self.shape[0] and int(self.min().item()) < 0:
            raise ValueError("bincount needs non-negative values")
        length = max(check_int(minlength, "bincount minlength"), int(self.max().item()) + 1 if self.shape[0] else 0)
        hits = self.reshape(-1, 1) == iota(type(self), length, self.device).reshape(1, length)
        if weights is None:
            return hits._cast(dtypes.int64).sum(0)
        return (hits._cast(weights._floating().dtype) * weights._floating().reshape(-1, 1)).sum(0)

    def unique(
        self,
        sorted: bool = True,
        return_inverse: bool = False,
        return_counts: bool = False,
        dim: int | None = None,
    ) -> Self | tuple[Self, ...]:
        """The distinct values of the flattened tensor, ascending (and the position of each input element's value
        among them, `dtypes.default_int`, shaped like the input; and each value's count). Reads the number of
        distinct values first (a sync), like torch.

        Example:
            >>> values, inverse, counts = Tensor([3, 1, 3, 2]).unique(return_inverse=True, return_counts=True)
            >>> values.tolist(), inverse.tolist(), counts.tolist()
            ([1, 2, 3], [2, 0, 2, 1], [1, 1, 2])
        """
        if dim is not None:
            raise NotImplementedError("unique(dim=...) is not supported; unique works on the flattened tensor")
        flat = self.reshape(-1)
        ordered, order = flat.sort(0)
        return _distinct_runs(self, ordered, order, return_inverse, return_counts)

    def unique_consecutive(
        self, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
    ) -> Self | tuple[Self, ...]:
        """The flattened tensor with each run of equal neighbours collapsed to one value (and the run of each input
        element, and the run lengths), like `torch.unique_consecutive`. Reads the number of runs first (a sync).

        Example:
            >>> Tensor([1, 1, 2, 2, 1]).unique_consecutive().tolist()
            [1, 2, 1]
        """
        if dim is not None:
            raise NotImplementedError("unique_consecutive(dim=...) is not supported; it works on the flattened tensor")
        flat = self.reshape(-1)
        return _distinct_runs(self, flat, None, return_inverse, return_counts)


def _distinct_runs(
    x: TensorT, values: TensorT, order: TensorT | None, return_inverse: bool, return_counts: bool
) -> TensorT | tuple[TensorT, ...]:
    """The first value of each run of equal neighbours in `values` (1-D), the run of each element of x (through
    `order`, the positions `values` came from, when sorted) and the run lengths."""
    length = values.shape[0]
    if length == 0:
        empty = values
        extras = [x._const(0, x.shape, dtypes.default_int, x.device)] if return_inverse else []
        extras += [x._const(0, (0,), dtypes.int64, x.device)] if return_counts else []
        return (empty, *extras) if extras else empty
    starts = values[:1] == values[:1]
    if length > 1:
        starts = starts.cat(values[1:] != values[:-1])
    runs = int(starts.sum().item())
    distinct = values.masked_select(starts, size=runs)
    run = starts._cast(dtypes.default_int).cumsum(0, dtype=dtypes.default_int) - 1
    results: list[TensorT] = [distinct]
    if return_inverse:
        inverse = run if order is None else run.zeros_like().scatter(0, order, run)
        results.append(inverse.reshape(x.shape))
    if return_counts:
        results.append((run.reshape(-1, 1) == iota(type(x), runs, x.device).reshape(1, runs)).sum(0))
    return tuple(results) if len(results) > 1 else results[0]
