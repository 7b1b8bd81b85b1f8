"""`SelectionMixin`: picking elements by position or mask (narrow, select, unbind, index_select, take,
take_along_dim, masked_select, nonzero), composed from shrink, indexing and gather.

`masked_select` and `nonzero` have a data-dependent length: with `size=` they stay lazy (padded with `fill_value`
or truncated to `size` entries, like `torch.nonzero_static`); without it they read the count first (a sync).
"""

from __future__ import annotations

from typing import Any, Self, cast

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import broadcast_shapes, check_int, check_size, normalize_axis
from kiln.tensor.ops.creation import iota
from kiln.tensor.symbolic import describe_variables, format_shape, format_size, provably_le, settle
from kiln.uops import ConstType, dtypes

__all__ = ["SelectionMixin"]


def _flat_positions(mask: TensorT, size: int) -> TensorT:
    """The flat positions (default_int) of the first `size` True entries of a 1-D bool mask, -1 past the last."""
    count = mask.shape[0]
    if count == 0 or size == 0:
        return mask._const(-1, (size,), dtypes.default_int, mask.device)
    rank = mask._cast(dtypes.default_int).cumsum(0, dtype=dtypes.default_int) - 1  # k-th True has rank k
    slots = iota(type(mask), size, mask.device).reshape(size, 1)
    hits = (rank.reshape(1, count) == slots) & mask.reshape(1, count)
    position = hits.where(iota(type(mask), count, mask.device).reshape(1, count) + 1, 0).amax(1)
    return position._cast(dtypes.default_int) - 1


class SelectionMixin(TensorCore):
    """Selecting elements by position or mask."""

    # ------------------------------------------------------------------------------------------------------------

    def narrow(self, dim: int, start: int, length: int) -> Self:
        """`length` elements from `start` along `dim`.

        Example:
            >>> Tensor([1, 2, 3, 4]).narrow(0, 1, 2).tolist()
            [2, 3]
        """
        index = normalize_axis(dim, self.shape, "narrow dim")
        size = self.shape[index]
        if type(size) is not int or type(start) is not int or type(length) is not int:
            return self._symbolic_narrow(index, start, length)
        begin = check_int(start, "narrow start") + (size if start < 0 else 0)
        if not 0 <= begin <= size or not 0 <= check_int(length, "narrow length") <= size - begin:
            raise IndexError(f"narrow: start {start} and length {length} are out of range for a dim of {size}")
        bounds: list[tuple[int, int] | None] = [None] * self.ndim
        bounds[index] = (begin, begin + length)
        return self.shrink(bounds)

    def _symbolic_narrow(self, index: int, start: object, length: object) -> Self:
        """`narrow` where the dim's size, the start or the length holds a bound Variable: a negative int start
        counts from the end; the window must lie inside the dim for every value (IndexError naming the range)."""
        size = self.shape[index]
        begin, count = check_size(start, "narrow start"), check_size(length, "narrow length")
        if type(begin) is int and begin < 0:
            begin = cast(int, settle(size + begin))
        end = cast(int, settle(begin + count))
        if not (provably_le(0, begin) and provably_le(0, count) and provably_le(end, size)):
            raise IndexError(
                f"narrow: start {format_size(begin)} and length {format_size(count)} are out of range for a dim of "
                f"{format_size(size)} for some values of their variables ({describe_variables(begin, count, size)})"
            )
        bounds: list[tuple[int, int] | None] = [None] * self.ndim
        bounds[index] = (begin, end)
        return self.shrink(bounds)

    def select(self, dim: int, index: int) -> Self:
        """The slice at `index` of `dim` (the dim removed).

        Example:
            >>> Tensor([[1, 2], [3, 4]]).select(1, 0).tolist()
            [1, 3]
        """
        axis = normalize_axis(dim, self.shape, "select dim")
        size = self.shape[axis]
        if not -size <= check_int(index, "select index") < size:
            raise IndexError(f"select index {index} is out of range for dim {axis} of size {size}")
        return self.narrow(axis, index % size, 1).squeeze(axis)

    def unbind(self, dim: int = 0) -> tuple[Self, ...]:
        """Every slice along `dim`, each without that dim.

        Example:
            >>> [t.tolist() for t in Tensor([[1, 2], [3, 4]]).unbind()]
            [[1, 2], [3, 4]]
        """
        axis = normalize_axis(dim, self.shape, "unbind dim")
        return tuple(self.select(axis, i) for i in range(self.shape[axis]))

    def index_select(self, dim: int, index: Self) -> Self:
        """The slices at positions `index` (a 1-D integer tensor) along `dim`.

        Example:
            >>> Tensor([[1, 2], [3, 4]]).index_select(1, Tensor([1, 1])).tolist()
            [[2, 2], [4, 4]]
        """
        axis = normalize_axis(dim, self.shape, "index_select dim")
        if index.ndim > 1 or dtypes.is_float(index.dtype) or index.dtype == dtypes.bool:
            raise TypeError(
                f"index_select index must be a 0-D or 1-D integer tensor, got {index.dtype!r} {index.shape}"
            )
        return self[(slice(None),) * axis + (index.reshape(-1),)]

    def take(self, index: Self) -> Self:
        """The elements of the flattened tensor at `index` (result shaped like `index`).

        Example:
            >>> Tensor([[1, 2], [3, 4]]).take(Tensor([0, 3])).tolist()
            [1, 4]
        """
        return self.reshape(-1)[index.reshape(-1)].reshape(index.shape)

    def take_along_dim(self, indices: Self, dim: int | None = None) -> Self:
        """gather along `dim` with `indices` broadcast against this tensor (flattened when dim is None).

        Example:
            >>> Tensor([[10, 30, 20]]).take_along_dim(Tensor([[1]]), 1).tolist()
            [[30]]
        """
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        axis = normalize_axis(dim, self.shape, "take_along_dim dim")
        if indices.ndim != self.ndim:
            raise ValueError(f"take_along_dim indices need {self.ndim} dims, got shape {indices.shape}")
        shape = [max(a, b) if i != axis else a for i, (a, b) in enumerate(zip(self.shape, indices.shape))]
        index_shape = [max(a, b) if i != axis else b for i, (a, b) in enumerate(zip(self.shape, indices.shape))]
        return self.expand(shape).gather(axis, indices.expand(index_shape))

    def masked_select(self, mask: Self, *, size: int | None = None, fill_value: ConstType = 0) -> Self:
        """The elements where `mask` (broadcast) is True, as a 1-D tensor. With `size` the result has exactly
        `size` entries (padded with `fill_value`, or truncated) and stays lazy; without it the count is read first.

        Example:
            >>> Tensor([1, 2, 3]).masked_select(Tensor([True, False, True])).tolist()
            [1, 3]
        """
        if mask.dtype != dtypes.bool:
            raise TypeError(f"masked_select mask must be bool, got {mask.dtype!r}")
        shape = broadcast_shapes(self.shape, mask.shape)
        flat_mask = mask._broadcast_to(shape).reshape(-1)
        values = self._broadcast_to(shape).reshape(-1)
        count = int(flat_mask.sum().item()) if size is None else check_int(size, "masked_select size")
        positions = _flat_positions(flat_mask, count)
        found = positions >= 0
        if values.shape[0] == 0:
            return self._const(fill_value, (count,), self.dtype, self.device)
        return found.where(values[positions.maximum(0)], fill_value)

    def nonzero(self, *, as_tuple: bool = False, size: int | None = None, fill_value: int = -1) -> Any:
        """The indices (`dtypes.default_int`) of the non-zero elements, one row each ((count, ndim)), or one 1-D
        tensor per dim with `as_tuple`. With `size` the result has exactly `size` rows (padded with `fill_value`)
        and stays lazy; without it the count is read first.

        Example:
            >>> Tensor([[0, 1], [2, 0]]).nonzero().tolist()
            [[0, 1], [1, 0]]
        """
        flat_mask = (self != 0).reshape(-1)
        count = int(flat_mask.sum().item()) if size is None else check_int(size, "nonzero size")
        positions = _flat_positions(flat_mask, count)
        found = positions >= 0
        if any(type(length) is not int for length in self.shape[1:]):
            raise ValueError(
                f"nonzero of a tensor of shape {format_shape(self.shape)}: only its first dim may hold a bound "
                "Variable (the coordinates of the others are computed with their sizes)"
            )
        columns = []
        stride = 1
        for axis in reversed(range(self.ndim)):
            coordinate = positions // stride
            # a first dim of bound-Variable size needs no wrap: its coordinate is below its size already
            length = self.shape[axis]
            columns.append(found.where(coordinate if type(length) is not int else coordinate % length, fill_value))
            stride *= self.shape[axis]
        columns.reverse()
        if as_tuple:
            return tuple(columns) if columns else (found.where(positions * 0, fill_value),)
        if not columns:
            return self._const(0, (count, 0), dtypes.default_int, self.device)
        return columns[0].stack(*columns[1:], dim=1)

    def nonzero_static(self, *, size: int, fill_value: int = -1) -> Self:
        """`nonzero(size=size, fill_value=fill_value)`: exactly `size` rows, lazy."""
        result: Self = self.nonzero(size=size, fill_value=fill_value)
        return result

    def argwhere(self) -> Self:
        """Alias of `nonzero()`."""
        result: Self = self.nonzero()
        return result
