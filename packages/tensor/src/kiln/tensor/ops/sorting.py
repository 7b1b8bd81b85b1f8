"""`SortingMixin`: sort, argsort and topk along one dim, composed from comparisons and sums (no sort primitive).

Sorting by counting: the rank of element i is how many elements come before it,

    rank[i] = #{j : x[j] before x[i]} + #{j < i : x[j] ties x[i]},

which is a stable order (ties keep their positions). Output slot r then takes the element whose rank is r:
values[r] = sum_i where(rank[i] == r, x[i], 0). Both steps are broadcast compares + one ADD reduce, so a sort of
length n costs O(n**2) work per row in a few fused reduce kernels, whatever the data; it suits the short rows of
top-k over logits or sorting a few thousand values, not sorting millions. NaN sorts above every number (last when
ascending, first when descending), like PyTorch.
"""

from __future__ import annotations

from typing import Self

from kiln.tensor import return_types
from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int, normalize_axis, pick_axis
from kiln.tensor.ops.creation import iota
from kiln.tensor.symbolic import describe_variables, format_shape, format_size, provably_le
from kiln.uops import Ops, dtypes

__all__ = ["SortingMixin"]


def _comparable(x: TensorT) -> TensorT:
    """`x` in a dtype the comparisons accept (bools compare as uint8)."""
    return x._cast(dtypes.uint8) if x.dtype == dtypes.bool else x


def _ranks(x: TensorT, descending: bool) -> TensorT:
    """The int32 rank of each element of `x` along its last dim in the stable (descending) order."""
    values = _comparable(x)
    size = values.shape[-1]
    full = (*values.shape, size)
    mine = values.unsqueeze(-1)._broadcast_to(full)  # [..., i, j] = x[i]
    other = values.unsqueeze(-2)._broadcast_to(full)  # [..., i, j] = x[j]
    before = other > mine if descending else other < mine
    ties = other == mine
    if dtypes.is_float(values.dtype):
        # NaN is the largest value and ties with NaN
        mine_nan, other_nan = mine.isnan(), other.isnan()
        before = before | ((other_nan & mine_nan.logical_not()) if descending else (mine_nan & other_nan.logical_not()))
        ties = ties | (mine_nan & other_nan)
    positions = iota(type(x), size, x.device)
    earlier = positions.reshape(1, size) < positions.reshape(size, 1)  # [i, j] = j < i
    counted = before | (ties & earlier._broadcast_to(full))
    return counted._cast(dtypes.int32)._reduce(Ops.ADD, (len(full) - 1,)).reshape(values.shape)


def _pick_by_rank(x: TensorT, ranks: TensorT, count: int) -> tuple[TensorT, TensorT]:
    """(values, `dtypes.default_int` positions) of the elements with ranks 0 .. count - 1 along the last dim."""
    size = x.shape[-1]
    full = (*x.shape[:-1], count, size)
    slots = iota(type(x), count, x.device).reshape(count, 1)._broadcast_to(full)
    hits = ranks.unsqueeze(-2)._broadcast_to(full) == slots  # [..., r, i]: element i goes to slot r
    values = _comparable(x)
    zero = values._const(0, full, values.dtype, values.device)
    picked = hits._ternary(Ops.WHERE, values.unsqueeze(-2)._broadcast_to(full), zero)
    chosen = picked._reduce(Ops.ADD, (len(full) - 1,)).reshape(full[:-1])._cast(x.dtype)
    positions = iota(type(x), size, x.device)._cast(dtypes.default_int).reshape(1, size)._broadcast_to(full)
    no_position = positions._const(0, full, dtypes.default_int, positions.device)
    where = hits._ternary(Ops.WHERE, positions, no_position)._reduce(Ops.ADD, (len(full) - 1,)).reshape(full[:-1])
    return chosen, where


def _sorted_last(x: TensorT, descending: bool, count: int) -> tuple[TensorT, TensorT]:
    """The first `count` (values, positions) of x's last dim in (descending) order."""
    if x.shape[-1] == 0 or count == 0:
        shape = (*x.shape[:-1], count)
        return x._const(0, shape, x.dtype, x.device), x._const(0, shape, dtypes.default_int, x.device)
    return _pick_by_rank(x, _ranks(x, descending), count)


class SortingMixin(TensorCore):
    """Sorting along one dim."""

    def sort(
        self, dim: int = -1, descending: bool = False, stable: bool = False, *, axis: int | None = None
    ) -> tuple[Self, Self]:
        """(sorted values, their `dtypes.default_int` positions in the input) along `dim`, like `torch.sort`.

        The order is always stable (equal values keep their input order), so `stable` changes nothing. O(n**2) work
        per row of length n (see the module docstring).

        Example:
            >>> values, positions = Tensor([3, 1, 2]).sort()
            >>> values.tolist(), positions.tolist()
            ([1, 2, 3], [1, 2, 0])
        """
        if not isinstance(descending, bool) or not isinstance(stable, bool):
            raise TypeError(f"sort descending and stable must be bools, got {descending!r} and {stable!r}")
        if self.ndim == 0:
            return return_types.sort(self, self._const(0, (), dtypes.default_int, self.device))
        index = normalize_axis(pick_axis(axis, dim), self.shape, "sort dim")
        last = self.transpose(index, -1)
        values, positions = _sorted_last(last, descending, last.shape[-1])
        return return_types.sort(values.transpose(index, -1), positions.transpose(index, -1))

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Self:
        """The `dtypes.default_int` positions that sort this tensor along `dim` (stable), like `torch.argsort`.

        Example:
            >>> Tensor([3.0, 1.0, 2.0]).argsort(descending=True).tolist()
            [0, 2, 1]
        """
        return self.sort(dim, descending, stable)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Self, Self]:
        """(the k largest (or smallest) values along `dim`, their `dtypes.default_int` positions), like `torch.topk`.

        The values come in order (largest first, or smallest first when `largest=False`); among equal values the
        earlier position comes first. O(n * (n + k)) work per row of length n.

        Example:
            >>> values, positions = Tensor([1.0, 5.0, 3.0, 4.0]).topk(2)
            >>> values.tolist(), positions.tolist()
            ([5.0, 4.0], [1, 3])
        """
        count = check_int(k, "topk k")
        if not isinstance(largest, bool) or not isinstance(sorted, bool):
            raise TypeError(f"topk largest and sorted must be bools, got {largest!r} and {sorted!r}")
        if self.ndim == 0:
            if count not in (0, 1):
                raise ValueError(f"topk k={count} is out of range for a 0-dim tensor (expected 0 or 1)")
            if count == 1:
                return return_types.topk(self, self._const(0, (), dtypes.default_int, self.device))
            empty = self._const(0, (0,), self.dtype, self.device)
            return return_types.topk(empty, self._const(0, (0,), dtypes.default_int, self.device))
        index = normalize_axis(dim, self.shape, "topk dim")
        size = self.shape[index]
        if type(size) is not int:  # a dim of bound-Variable size: k must fit its smallest value
            if count < 0 or not provably_le(count, size):
                raise ValueError(
                    f"topk k={count} is out of range for dim {index} of size {format_size(size)} for some values of "
                    f"its variables ({describe_variables(size)}; shape {format_shape(self.shape)})"
                )
        elif not 0 <= count <= size:
            raise ValueError(f"topk k={count} is out of range for dim {index} of size {size} (shape {self.shape})")
        last = self.transpose(index, -1)
        values, positions = _sorted_last(last, largest, count)
        return return_types.topk(values.transpose(index, -1), positions.transpose(index, -1))
