"""`PlacementMixin`: out-of-place writes of values at positions (index_add, index_fill, index_copy, masked_scatter,
select_scatter, slice_scatter, diagonal_scatter), building diagonal matrices (diag_embed, diagflat), and the
pointwise multiply-adds (addcmul, addcdiv) and the cross product.

Writes are one-hot comparisons of positions (a mask where the new values land, `where(mask, new, old)`), so they stay
lazy and differentiable; the indices are integer tensors, not checked (an out-of-range position writes nothing).
"""

from __future__ import annotations

from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int, normalize_axis
from kiln.tensor.ops.advanced_index import FlatIndex, write_rows
from kiln.tensor.ops.creation import iota
from kiln.tensor.ops.data_checks import index_compute_dtype
from kiln.uops import ConstType, dtypes

__all__ = ["PlacementMixin"]


def _positions_along(x: TensorT, axis: int) -> TensorT:
    """The position along `axis` of every element, shaped to broadcast against x."""
    view = [1] * x.ndim
    view[axis] = x.shape[axis]
    return iota(type(x), x.shape[axis], x.device).reshape(view)


class PlacementMixin(TensorCore):
    """Out-of-place writes at positions, diagonal matrices, multiply-adds and the cross product."""

    def _index_one_hot(self, axis: int, index: Self, what: str) -> Self:
        """(k, size) bool: row i is True at position index[i] along `axis`."""
        if index.ndim > 1 or not dtypes.is_int(index.dtype):
            raise TypeError(f"{what} index must be a 0-D or 1-D integer tensor, got {index.dtype!r} {index.shape}")
        size = self.shape[axis]
        flat = index.reshape(-1)
        return flat.reshape(-1, 1) == iota(type(self), size, self.device).reshape(1, size)

    def index_add(self, dim: int, index: Self, source: Self, *, alpha: ConstType = 1) -> Self:
        """This tensor plus alpha * source's slices added at positions `index` along `dim` (repeats add up).

        Example:
            >>> Tensor.zeros(3).index_add(0, Tensor([0, 2, 0]), Tensor([1.0, 2.0, 3.0])).tolist()
            [4.0, 0.0, 2.0]
        """
        axis = normalize_axis(dim, self.shape, "index_add dim")
        hits = self._index_one_hot(axis, index, "index_add")
        moved = source.movedim(axis, -1).unsqueeze(-1)  # (..., k, 1)
        spread = hits.where(moved, 0).sum(-2, dtype=self.dtype)  # (..., size)
        added = spread.movedim(-1, axis)
        return self + (added if alpha == 1 else added * alpha)

    def index_fill(self, dim: int, index: Self, value: ConstType | Self) -> Self:
        """`value` at positions `index` along `dim`.

        Example:
            >>> Tensor([1, 2, 3]).index_fill(0, Tensor([0, 2]), -1).tolist()
            [-1, 2, -1]
        """
        axis = normalize_axis(dim, self.shape, "index_fill dim")
        chosen = self._index_one_hot(axis, index, "index_fill").any(0)
        view = [1] * self.ndim
        view[axis] = self.shape[axis]
        return chosen.reshape(view).where(value, self)

    def index_copy(self, dim: int, index: Self, source: Self) -> Self:
        """source's slices written at positions `index` along `dim` (positions should be distinct, as in torch).

        Example:
            >>> Tensor.zeros(3).index_copy(0, Tensor([2, 0]), Tensor([5.0, 7.0])).tolist()
            [7.0, 0.0, 5.0]
        """
        axis = normalize_axis(dim, self.shape, "index_copy dim")
        if index.ndim > 1 or not dtypes.is_int(index.dtype):
            raise TypeError(f"index_copy index must be a 0-D or 1-D integer tensor, got {index.dtype!r} {index.shape}")
        positions = index.reshape(-1)
        size = self.shape[axis]
        rows = (*self.shape[:axis], positions.shape[0], *self.shape[axis + 1 :])
        if source.shape != rows and not (source.ndim == 0 and rows == (1,)):
            raise IndexError(f"index_copy source of shape {source.shape} must have shape {rows} (one row per index)")
        # each position takes the row of its last write (a gather of source's rows); out of range writes nothing
        linear = positions._cast(index_compute_dtype(positions, size))
        flat = FlatIndex((axis,), (positions.shape[0],), linear, size)
        return write_rows(self, flat, source._cast(self.dtype).reshape(rows))

    def masked_scatter(self, mask: Self, source: Self) -> Self:
        """source's elements, in order, written where `mask` (broadcast) is True.

        Example:
            >>> Tensor([0, 0, 0]).masked_scatter(Tensor([True, False, True]), Tensor([7, 8])).tolist()
            [7, 0, 8]
        """
        if mask.dtype != dtypes.bool:
            raise TypeError(f"masked_scatter mask must be bool, got {mask.dtype!r}")
        full = mask._broadcast_to(self.shape).reshape(-1)
        rank = full._cast(dtypes.default_int).cumsum(0, dtype=dtypes.default_int) - 1
        flat_source = source.reshape(-1)
        if flat_source.shape[0] == 0:
            return self
        picked = flat_source[rank.clamp(0, flat_source.shape[0] - 1)]
        return full.where(picked._cast(self.dtype), self.reshape(-1)).reshape(self.shape)

    def select_scatter(self, src: Self, dim: int, index: int) -> Self:
        """This tensor with the slice at `index` of `dim` replaced by `src`.

        Example:
            >>> Tensor.zeros(2, 2).select_scatter(Tensor([1.0, 2.0]), 0, 1).tolist()
            [[0.0, 0.0], [1.0, 2.0]]
        """
        axis = normalize_axis(dim, self.shape, "select_scatter dim")
        size = self.shape[axis]
        if not -size <= check_int(index, "select_scatter index") < size:
            raise IndexError(f"select_scatter index {index} is out of range for dim {axis} of size {size}")
        return _positions_along(self, axis).eq(index % size).where(src._cast(self.dtype).unsqueeze(axis), self)

    def slice_scatter(
        self, src: Self, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1
    ) -> Self:
        """This tensor with the slice start:end:step of `dim` replaced by `src`.

        Example:
            >>> Tensor.zeros(4).slice_scatter(Tensor([1.0, 2.0]), 0, 0, None, 2).tolist()
            [1.0, 0.0, 2.0, 0.0]
        """
        axis = normalize_axis(dim, self.shape, "slice_scatter dim")
        positions = list(range(self.shape[axis]))[slice(start, end, step)]
        if len(positions) != (src.shape[axis] if src.ndim == self.ndim else -1):
            raise ValueError(f"slice_scatter src of shape {src.shape} does not fit the {len(positions)} positions")
        if not positions:
            return self
        index = type(self)(positions, dtype=dtypes.default_int, device=self.device)
        return self.index_copy(axis, index, src)

    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Self:
        """Matrices whose `offset` diagonal (in dims dim1, dim2 of the result) is the last dim of this tensor.

        Example:
            >>> Tensor([[1, 2]]).diag_embed().tolist()
            [[[1, 0], [0, 2]]]
        """
        length = self.shape[-1] if self.ndim else 1
        size = length + abs(offset)
        eye = iota(type(self), length, self.device).reshape(length, 1) == iota(type(self), length, self.device).reshape(
            1, length
        )
        square = eye.where(self.unsqueeze(-1), 0)  # (..., n, n): values on the diagonal
        before, after = max(0, -offset), max(0, offset)
        lead = [(0, 0)] * (square.ndim - 2)
        placed = square.pad([*lead, (before, size - length - before), (after, size - length - after)])
        ndim = placed.ndim
        first = normalize_axis(dim1, placed.shape, "diag_embed dim1")
        second = normalize_axis(dim2, placed.shape, "diag_embed dim2")
        if first == second:
            raise ValueError(f"diag_embed dim1 and dim2 must differ, got {dim1} and {dim2}")
        return placed.movedim((ndim - 2, ndim - 1), (first, second))

    def diagflat(self, offset: int = 0) -> Self:
        """The flattened tensor as the `offset` diagonal of a square matrix.

        Example:
            >>> Tensor([[1, 2]]).diagflat().tolist()
            [[1, 0], [0, 2]]
        """
        return self.reshape(-1).diag(offset)

    def diagonal_scatter(self, src: Self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """This tensor with its `offset` diagonal in (dim1, dim2) replaced by `src`.

        Example:
            >>> Tensor.zeros(2, 2).diagonal_scatter(Tensor([1.0, 2.0])).tolist()
            [[1.0, 0.0], [0.0, 2.0]]
        """
        first = normalize_axis(dim1, self.shape, "diagonal_scatter dim1")
        second = normalize_axis(dim2, self.shape, "diagonal_scatter dim2")
        rows, columns = _positions_along(self, first), _positions_along(self, second)
        on_diagonal = (columns - rows).eq(offset)
        moved = self.movedim((first, second), (-2, -1))
        spread = src._cast(self.dtype).diag_embed(offset)
        rows_needed, columns_needed = moved.shape[-2], moved.shape[-1]
        padding = [(0, 0)] * (spread.ndim - 2) + [
            (0, rows_needed - spread.shape[-2]),
            (0, columns_needed - spread.shape[-1]),
        ]
        placed = spread.pad(padding).movedim((-2, -1), (first, second))
        return on_diagonal.where(placed, self)

    def addcmul(self, tensor1: Self, tensor2: Self, *, value: ConstType = 1) -> Self:
        """self + value * tensor1 * tensor2.

        Example:
            >>> Tensor([1.0]).addcmul(Tensor([2.0]), Tensor([3.0]), value=0.5).tolist()
            [4.0]
        """
        return self + tensor1 * tensor2 * value

    def addcdiv(self, tensor1: Self, tensor2: Self, *, value: ConstType = 1) -> Self:
        """self + value * tensor1 / tensor2.

        Example:
            >>> Tensor([1.0]).addcdiv(Tensor([3.0]), Tensor([2.0]), value=2).tolist()
            [4.0]
        """
        return self + tensor1 / tensor2 * value

    def cross(self, other: Self, dim: int | None = None) -> Self:
        """The 3-D cross product along `dim` (the first dim of size 3 when None).

        Example:
            >>> Tensor([1.0, 0.0, 0.0]).cross(Tensor([0.0, 1.0, 0.0])).tolist()
            [0.0, 0.0, 1.0]
        """
        if dim is None:
            sizes = [i for i, size in enumerate(self.shape) if size == 3]
            if not sizes:
                raise ValueError(f"cross needs a dim of size 3, got shape {self.shape}")
            axis = sizes[0]
        else:
            axis = normalize_axis(dim, self.shape, "cross dim")
        if self.shape[axis] != 3 or other.shape[axis] != 3:
            raise ValueError(f"cross needs size 3 along dim {axis}, got shapes {self.shape} and {other.shape}")
        a1, a2 = self.roll(-1, axis), self.roll(-2, axis)
        b1, b2 = other.roll(-1, axis), other.roll(-2, axis)
        return a1 * b2 - a2 * b1
