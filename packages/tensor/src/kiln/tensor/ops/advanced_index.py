"""Advanced (integer-tensor) indexing of some dims of a tensor: reading `y[..., ia, ib, ...]` and writing to it.

The indexed dims are flattened into one dim of `total` positions; the index tensors, broadcast together to the
`batch` shape, become one row-major position per batch element (`flat_index`). A read is a one-hot sum over those
positions in the product form codegen's gather rewrite (pm_gather) turns into one indexed load per output element
(`one_hot_sum`), so it costs the output's work, not the indexed dims'. A write finds, for each position, the last
batch element writing it (a max over the batch elements: positions x batch elements of work, one kernel), then
takes that element's values by the same gather. The dims that are not indexed ride along as whole rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic

from kiln.tensor.core import TensorT
from kiln.tensor.ops._checks import broadcast_shapes
from kiln.tensor.ops.creation import sized_iota
from kiln.tensor.ops.data_checks import check_index_values, index_compute_dtype
from kiln.tensor.schedule.split_reduce import SPLIT_THRESHOLD
from kiln.tensor.symbolic import bound_int, max_int
from kiln.uops import Ops, dtypes

__all__ = ["FlatIndex", "flat_index", "one_hot_sum", "select_rows", "unsplit_size", "write_rows"]


@dataclass(frozen=True)
class FlatIndex(Generic[TensorT]):
    """Integer index tensors of some dims of a tensor, as one row-major position per element of their broadcast."""

    positions: tuple[int, ...]  # the indexed dims, in the order of the index tensors
    batch: tuple[int, ...]  # the broadcast shape of the index tensors
    linear: TensorT  # (batch) the row-major position in the indexed dims; -1 where an index is outside its dim
    total: int  # the number of positions in the indexed dims

    def rest(self, ndim: int) -> list[int]:
        """The dims of an `ndim`-dim tensor that are not indexed, in order."""
        return [axis for axis in range(ndim) if axis not in self.positions]

    def adjacent(self) -> bool:
        """Whether the indexed dims are consecutive: then the batch dims take their place (else they go first)."""
        return list(self.positions) == list(range(self.positions[0], self.positions[0] + len(self.positions)))

    def rows(self, y: TensorT) -> TensorT:
        """`y` with the indexed dims first, flattened: (total, *rest)."""
        rest = self.rest(y.ndim)
        moved = y._movement(Ops.PERMUTE, (*self.positions, *rest))
        return moved._movement(Ops.RESHAPE, (self.total, *(y.shape[axis] for axis in rest)))

    def result_order(self, ndim: int) -> tuple[int, ...]:
        """The permutation from (*batch, *rest) to the result's dim order (PyTorch's placement of the batch dims)."""
        count, rest = len(self.batch), ndim - len(self.batch)
        if not self.adjacent():
            return tuple(range(ndim))
        start = self.positions[0]
        return (*range(count, count + start), *range(count), *range(count + start, count + rest))


def flat_index(y: TensorT, positions: Sequence[int], indices: Sequence[TensorT]) -> FlatIndex[TensorT]:
    """The `FlatIndex` of `y` indexed at dims `positions` by the integer tensors `indices` (broadcast together).

    Negative indices wrap once; with CHECK on an index outside [-size, size) raises IndexError naming it."""
    try:
        batch = broadcast_shapes(*(index.shape for index in indices))
    except ValueError:
        shapes = ", ".join(str(index.shape) for index in indices)
        raise IndexError(f"index tensors could not be broadcast together: shapes {shapes}") from None
    sizes = [y.shape[position] for position in positions]
    total = math.prod(sizes)
    if total == 0 and math.prod(batch) > 0:
        raise IndexError(f"cannot index into size-0 dims {sizes} with indices of shape {batch}")
    symbolic = not isinstance(total, int)
    if symbolic and len(sizes) > 1:
        raise ValueError(
            f"index tensors for several dims {sizes} where one holds a bound Variable: index one at a time"
        )
    # -1 (selects nothing) where any index is outside its dim: an index past the end of one dim must not alias into
    # the next row of the flattened dims
    linear: TensorT | None = None
    inside: TensorT | None = None
    for dim, (index, size) in enumerate(zip(indices, sizes)):
        if symbolic:  # a dim of bound-Variable size: indices in [0, bound size), checked at the bound value
            check_index_values(index, bound_int(size), "indexing", positions[dim], negative=False)
            linear = index._cast(index_compute_dtype(index, max_int(total)))
            continue
        check_index_values(index, size, "indexing", positions[dim])
        wrapped = index._cast(index_compute_dtype(index, total))
        wrapped = (wrapped < 0).where(wrapped + size, wrapped)
        if len(sizes) > 1:
            fits = (wrapped >= 0) & (wrapped < size)
            inside = fits if inside is None else inside & fits
        linear = wrapped if linear is None else linear * size + wrapped
    assert linear is not None
    if inside is not None:
        linear = inside.where(linear, -1)
    return FlatIndex(tuple(positions), batch, linear._broadcast_to(batch), total)


def select_rows(y: TensorT, index: FlatIndex[TensorT]) -> TensorT:
    """`y` read at `index`: the batch dims in place of the indexed dims when those are adjacent, else first."""
    rows = index.rows(y)
    rest_shape = rows.shape[1:]
    batch, ones = index.batch, (1,) * len(rest_shape)
    choices_count = unsplit_size(index.total)  # the padded position past `total` is never chosen: it reads 0
    flat = rows._movement(Ops.RESHAPE, (*(1,) * len(batch), index.total, *rest_shape))
    if choices_count != index.total:
        flat = flat._movement(Ops.PAD, ((0, 0),) * len(batch) + ((0, 1),) + ((0, 0),) * len(rest_shape))
    flat = flat._broadcast_to((*batch, choices_count, *rest_shape))
    # compared at the full shape: a compare broadcast along the other dims would be stored as a buffer of its own
    choices = sized_iota(type(y), choices_count, y.device)._cast(index.linear.dtype)
    choices = choices._movement(Ops.RESHAPE, (*(1,) * len(batch), choices_count, *ones))._broadcast_to(flat.shape)
    column = index.linear._movement(Ops.RESHAPE, (*batch, 1, *ones))._broadcast_to(flat.shape)
    picked = one_hot_sum(column._binary(Ops.CMPEQ, choices), flat, len(batch))
    result = picked._movement(Ops.RESHAPE, (*batch, *rest_shape))._cast(y.dtype)
    order = index.result_order(result.ndim)
    return result._movement(Ops.PERMUTE, order) if order != tuple(range(result.ndim)) else result


def write_rows(y: TensorT, index: FlatIndex[TensorT], values: TensorT) -> TensorT:
    """`y` with `values` (shaped like `select_rows`'s result, y's dtype) written where `index` selects; where a
    position repeats, the last batch element (row-major) wins; a position of -1 writes nothing."""
    count = math.prod(index.batch)
    if count == 0:
        return y  # nothing selected (an all-False mask, an empty index): nothing written
    rows = index.rows(y)
    rest_shape, total = rows.shape[1:], index.total
    order = index.result_order(values.ndim)
    inverse = tuple(order.index(axis) for axis in range(values.ndim))
    values = values._movement(Ops.PERMUTE, inverse)._movement(Ops.RESHAPE, (count, *rest_shape))
    # the number of the last write to each position
    grid = (count, total)
    numbers = (sized_iota(type(y), count, y.device) + 1)._movement(Ops.RESHAPE, (count, 1))._broadcast_to(grid)
    linear = index.linear._movement(Ops.RESHAPE, (count, 1))._broadcast_to(grid)
    everywhere = sized_iota(type(y), total, y.device)._cast(linear.dtype)
    hits = linear._binary(Ops.CMPEQ, everywhere._movement(Ops.RESHAPE, (1, total))._broadcast_to(grid))
    last = hits.where(numbers, 0)._reduce(Ops.MAX, (0,))._movement(Ops.RESHAPE, (total,)) - 1  # 0-based; -1: none
    # that write's row, by a gather over the writes
    ones = (1,) * len(rest_shape)
    spread = (count, total, *rest_shape)
    wanted = last._movement(Ops.RESHAPE, (1, total, *ones))._broadcast_to(spread)
    writes = sized_iota(type(y), count, y.device)._cast(wanted.dtype)
    chosen = wanted._binary(Ops.CMPEQ, writes._movement(Ops.RESHAPE, (count, 1, *ones))._broadcast_to(spread))
    column = values._movement(Ops.RESHAPE, (count, 1, *rest_shape))._broadcast_to(spread)
    written = one_hot_sum(chosen, column, 0)._movement(Ops.RESHAPE, rows.shape)._cast(y.dtype)
    touched = last._binary(Ops.CMPNE, last._const(-1, last.shape, last.dtype, y.device))
    touched = touched._movement(Ops.RESHAPE, (total, *ones))._broadcast_to(rows.shape)
    updated = touched._ternary(Ops.WHERE, written, rows)
    # back to y's layout: unflatten the indexed dims, then undo the permutation that put them first
    rest = index.rest(y.ndim)
    moved = updated._movement(Ops.RESHAPE, (*(y.shape[axis] for axis in index.positions), *rest_shape))
    permutation = (*index.positions, *rest)
    return moved._movement(Ops.PERMUTE, tuple(permutation.index(axis) for axis in range(y.ndim)))


def one_hot_sum(hits: TensorT, values: TensorT, axis: int) -> TensorT:
    """The sum over `axis` of `values` where the bool `hits` (same shape, at most one True along `axis`) holds.

    Built as `sum(WHERE(hit, 1, 0) * WHERE(hit, value, 0))`: the one-hot product form codegen's gather rewrite
    (pm_gather) turns into one indexed load per output, so the work is the output's, not the indexed dims'. The
    second WHERE keeps the value exact where the rewrite does not apply: a non-selected inf or nan is never
    multiplied by 0. A bool `values` is summed as uint8 (the caller casts back)."""
    summable = values._cast(dtypes.uint8) if values.dtype == dtypes.bool else values
    zero = summable._const(0, summable.shape, summable.dtype, summable.device)
    one = summable._const(1, summable.shape, summable.dtype, summable.device)
    selected = hits._ternary(Ops.WHERE, summable, zero)
    return hits._ternary(Ops.WHERE, one, zero)._binary(Ops.MUL, selected)._reduce(Ops.ADD, (axis,))


def unsplit_size(total: int) -> int:
    """`total`, or `total + 1` when the scheduler would split a reduce over `total` elements in two stages.

    The scheduler splits a long reduce by an even number of partials (schedule/split_reduce.py) when it divides the
    length; a split one-hot reduce is no longer one loop over the selected dim, so codegen cannot make it a gather.
    An odd length has no such divisor. A symbolic `total` is never split."""
    if not isinstance(total, int) or total % 2 or total < SPLIT_THRESHOLD:
        return total
    return total + 1
