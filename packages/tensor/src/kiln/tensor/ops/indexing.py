"""`IndexingMixin`: `tensor[index]`, `tensor[index] = value`, gather and scatter, with PyTorch's rules.

Basic indices (ints, slices with any step, None, Ellipsis) become movement ops: a view, no copy. Advanced indices
(integer tensors, lists and numpy arrays, bool masks) follow PyTorch: ints are applied first as basic indices; the
integer index tensors broadcast together, and their broadcast dims replace the indexed dims in place when those are
adjacent, else they go first. An advanced index is a one-hot selection over the flattened indexed dims (compare
the row-major position with every position, then sum) in the product form codegen's gather rewrite (pm_gather)
turns into one indexed load per output element: the work is the output's, not the indexed dims'
(kiln.tensor.ops.advanced_index). A write `x[index] = v` finds each position's last write by a max over the writes
and takes its row by the same gather: work positions x writes, the dims not indexed riding along as whole rows.

Known limits: a bool mask Tensor is realized to learn the result's shape (like PyTorch, which syncs too); integer
index *Tensors* are lazy, so they are bounds-checked only with the knob CHECK=1 (IndexError naming the bad index);
without it an out-of-range position selects nothing: it reads 0 and `x[idx] = v` writes nothing there (see
kiln.tensor.ops.data_checks). Ints, lists and numpy arrays are always checked eagerly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Self, cast

import numpy as np

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import broadcast_shapes, check_int, check_size, normalize_axis
from kiln.tensor.ops.advanced_index import flat_index, one_hot_sum, select_rows, unsplit_size, write_rows
from kiln.tensor.ops.creation import iota, sized_iota
from kiln.tensor.ops.data_checks import check_index_values, index_compute_dtype
from kiln.tensor.ops.slice_spec import SYMBOLIC_INDEX, DimIndex, size_text, slice_spec
from kiln.tensor.realize.graph_lock import serialized
from kiln.tensor.symbolic import (
    bound_int,
    format_shape,
    max_int,
    provably_le,
    settle,
)
from kiln.uops import ConstType, Ops, dtypes

__all__ = ["IndexingMixin"]


@dataclass(frozen=True)
class _BasicIndex:
    """The basic part of an index: one `DimIndex` per source dim and where None inserts new dims."""

    dims: tuple[DimIndex, ...]
    new_dims: tuple[int, ...]  # positions of the size-1 dims None inserts, in the result of the basic part

    def kept_sizes(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Sizes of the source dims that remain (ints removed), before None dims are inserted."""
        sizes = []
        for spec, size in zip(self.dims, shape):
            if spec.kind == "slice":
                sizes.append(spec.count)
            elif spec.kind == "full":
                sizes.append(size)
        return tuple(sizes)

    def result_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        sizes = list(self.kept_sizes(shape))
        for position in self.new_dims:
            sizes.insert(position, 1)
        return tuple(sizes)

    def select(self, x: TensorT) -> TensorT:
        """The view of `x` this index selects."""
        flips = tuple(spec.flip for spec in self.dims)
        if any(flips):
            x = x._movement(Ops.FLIP, flips)
        bounds = []
        for spec, size in zip(self.dims, x.shape):
            if spec.kind == "int":
                bounds.append((spec.first, spec.first + 1))
            elif spec.kind == "slice" and spec.end is not None:
                bounds.append((spec.first, spec.end))
            elif spec.kind == "slice":
                span = (spec.count - 1) * spec.stride + 1 if spec.count else 0
                bounds.append((spec.first, spec.first + span))
            else:
                bounds.append((0, size))
        x = x._movement(Ops.SHRINK, tuple(bounds))
        if any(spec.stride > 1 and spec.count for spec in self.dims):
            x = _take_every(x, [spec.stride if spec.count else 1 for spec in self.dims])
        return x._movement(Ops.RESHAPE, self.result_shape(x.shape))

    def place(self, value: TensorT, shape: tuple[int, ...]) -> TensorT:
        """`value` (shaped like `select`'s result) moved to where `select` takes it from in a tensor of `shape`;
        zeros (False) elsewhere."""
        sizes = [
            1 if spec.kind == "int" else spec.count if spec.kind == "slice" else size
            for spec, size in zip(self.dims, shape)
        ]
        x = value._movement(Ops.RESHAPE, tuple(sizes))
        strides = [spec.stride if spec.kind == "slice" and spec.count else 1 for spec in self.dims]
        if any(stride > 1 for stride in strides):
            # spread each strided dim: (count,) -> (count, 1) -> pad to (count, stride) -> (count * stride,) -> cut
            split: list[int] = []
            gaps: list[tuple[int, int]] = []
            for count, stride in zip(sizes, strides):
                split += [count, 1] if stride > 1 else [count]
                gaps += [(0, 0), (0, stride - 1)] if stride > 1 else [(0, 0)]
            x = x._movement(Ops.RESHAPE, tuple(split))._movement(Ops.PAD, tuple(gaps))
            x = x._movement(Ops.RESHAPE, tuple(count * stride for count, stride in zip(sizes, strides)))
            spans = tuple((0, (count - 1) * stride + 1 if count else 0) for count, stride in zip(sizes, strides))
            x = x._movement(Ops.SHRINK, spans)
        padding = []
        for spec, size, current in zip(self.dims, shape, x.shape):
            start = spec.first if spec.kind != "full" else 0
            padding.append((start, size - start - current))
        x = x._movement(Ops.PAD, tuple(padding))
        flips = tuple(spec.flip for spec in self.dims)
        return x._movement(Ops.FLIP, flips) if any(flips) else x


def _take_every(x: TensorT, strides: list[int]) -> TensorT:
    """Every stride-th element along each dim of `x` (starting with the first).

    A dim of bound-Variable size is padded to a multiple of its stride above its largest value (a constant, so the
    rows of the split are ints), and the rows it keeps are cut to its count afterwards."""
    sizes = x.shape
    rows = [-(-max_int(size) // stride) for size, stride in zip(sizes, strides)]
    x = x._movement(Ops.PAD, tuple((0, count * stride - size) for count, stride, size in zip(rows, strides, sizes)))
    x = x._movement(Ops.RESHAPE, tuple(size for count, stride in zip(rows, strides) for size in (count, stride)))
    x = x._movement(Ops.SHRINK, tuple(pair for count in rows for pair in ((0, count), (0, 1))))
    x = x._movement(Ops.RESHAPE, tuple(rows))
    if all(type(size) is int for size in sizes):
        return x
    counts = [
        size if type(size) is int else settle((size + (stride - 1)) // stride) for size, stride in zip(sizes, strides)
    ]
    return x._movement(Ops.SHRINK, tuple((0, count) for count in counts))


@dataclass(frozen=True)
class _ParsedIndex(Generic[TensorT]):
    basic: _BasicIndex
    advanced: tuple[tuple[int, TensorT], ...]  # (source dim, integer index tensor)


def _as_index_array(item: Any) -> np.ndarray[Any, Any]:
    array = np.asarray(item)
    if array.size == 0 and array.dtype.kind == "f":
        array = array.astype(np.int64)  # an empty list is an empty integer index
    if array.dtype.kind not in "biu":
        raise TypeError(f"index arrays must hold integers or bools, got dtype {array.dtype} in {item!r}")
    return array


def _parse(x: TensorT, index: Any) -> _ParsedIndex[TensorT]:
    items = list(index) if isinstance(index, tuple) else [index]
    # host lists / arrays and bool masks become index tensors; each entry consumes this many source dims
    expanded: list[Any] = []
    for item in items:
        if isinstance(item, bool):
            raise TypeError(f"a Python bool is not a valid index (got {item!r}); use a bool tensor mask")
        if isinstance(item, (list, tuple, np.ndarray)):
            array = _as_index_array(item)
            if array.dtype.kind == "b":
                expanded.append(("mask", array))
            else:
                expanded.append(("host", array))
        elif isinstance(item, TensorCore):
            if item.dtype == dtypes.bool:
                expanded.append(("mask", item))
            elif dtypes.is_int(item.dtype):
                expanded.append(("tensor", item))
            else:
                raise IndexDtypeError(f"index tensors must have an integer or bool dtype, got {item.dtype!r}")
        elif item is None or item is Ellipsis or isinstance(item, slice):
            expanded.append(item)
        elif isinstance(item, SYMBOLIC_INDEX):  # a bound Variable picks one position, proven inside the dim by shrink
            expanded.append(("variable", check_size(item, "index")))
        elif hasattr(item, "__index__"):
            expanded.append(check_int(item, "index"))
        else:
            raise TypeError(
                f"invalid index {item!r} of type {type(item).__name__}; expected an int, a bound Variable, slice, "
                "None, Ellipsis, list, numpy array or Tensor"
            )

    def consumed(entry: Any) -> int:
        if entry is None or entry is Ellipsis:
            return 0
        if isinstance(entry, tuple) and entry[0] == "mask":
            return len(entry[1].shape)
        return 1

    ellipses = sum(1 for entry in expanded if entry is Ellipsis)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(consumed(entry) for entry in expanded)
    if used > x.ndim:
        raise IndexError(f"too many indices for a tensor of shape {x.shape}: {used} dims indexed, {x.ndim} exist")
    fill = [slice(None)] * (x.ndim - used)
    if ellipses:
        position = expanded.index(Ellipsis)
        expanded[position : position + 1] = fill
    else:
        expanded += fill

    dims: list[DimIndex] = []
    new_dims: list[int] = []
    advanced: list[tuple[int, TensorT]] = []
    kept = 0  # dims of the basic result so far
    for entry in expanded:
        source = len(dims)
        if entry is None:
            new_dims.append(kept)
            kept += 1
            continue
        if isinstance(entry, int):
            size = x.shape[source]
            if type(size) is not int:  # a dim of bound-Variable size: the position must be inside for every value
                if not provably_le(entry + 1 if entry >= 0 else -entry, size):
                    raise IndexError(
                        f"index {entry} is out of bounds for dim {source} of size {size_text(size)} for some values "
                        f"of its variables (shape {format_shape(x.shape)})"
                    )
                dims.append(DimIndex("int", cast(int, settle(entry + size)) if entry < 0 else entry))
                continue
            if not -size <= entry < size:
                raise IndexError(f"index {entry} is out of bounds for dim {source} of size {size} (shape {x.shape})")
            dims.append(DimIndex("int", entry + size if entry < 0 else entry))
            continue
        if isinstance(entry, slice):
            dims.append(slice_spec(entry, x.shape[source]))
            kept += 1
            continue
        kind, data = entry
        if kind == "variable":
            dims.append(DimIndex("int", data))
            continue
        if kind == "mask":
            mask_shape = tuple(data.shape)
            covered = x.shape[source : source + len(mask_shape)]
            if mask_shape != covered:
                raise IndexError(
                    f"the bool mask of shape {mask_shape} does not match the indexed dims {covered} of the tensor of "
                    f"shape {x.shape} (from dim {source})"
                )
            host = data.numpy() if isinstance(data, TensorCore) else data
            for axis, positions in enumerate(np.nonzero(host)):
                advanced.append((source + axis, type(x)(positions.astype(np.int32), device=x.device)))
                dims.append(DimIndex("full"))
                kept += 1
            continue
        if kind == "host":
            size = x.shape[source]
            if data.size and (data.min() < -size or data.max() >= size):
                bad = data[(data < -size) | (data >= size)].reshape(-1)[0]
                raise IndexError(f"index {int(bad)} is out of bounds for dim {source} of size {size} (shape {x.shape})")
            data = type(x)(data.astype(np.int32) if size < 2**31 else data.astype(np.int64), device=x.device)
        elif data.device != x.device:
            raise ValueError(f"index tensor is on {data.device!r} but the indexed tensor on {x.device!r}")
        advanced.append((source, data))
        dims.append(DimIndex("full"))
        kept += 1
    return _ParsedIndex(_BasicIndex(tuple(dims), tuple(new_dims)), tuple(advanced))


class IndexDtypeError(IndexError, TypeError):
    """An index tensor of a float dtype: PyTorch raises IndexError; a TypeError too (kiln's earlier class)."""


def _advanced_positions(parsed: _ParsedIndex[Any]) -> list[int]:
    """Where each advanced dim sits in the basic result (ints removed, None dims inserted)."""
    kept: list[int] = []  # source dims kept, in order
    for source, spec in enumerate(parsed.basic.dims):
        if spec.kind != "int":
            kept.append(source)
    result_order: list[int | None] = list(kept)
    for position in parsed.basic.new_dims:
        result_order.insert(position, None)
    return [result_order.index(source) for source, _ in parsed.advanced]


class IndexingMixin(TensorCore):
    """Indexing, gather and scatter."""

    def __getitem__(self, index: Any) -> Self:
        """PyTorch / numpy indexing: ints, slices (any step), None, Ellipsis, bool masks, integer tensors / lists.

        Example:
            >>> x = Tensor.arange(12).reshape(3, 4)
            >>> x[1:, ::-2].tolist()
            [[7, 5], [11, 9]]
            >>> x[[0, 2], 1].tolist()
            [1, 9]
        """
        parsed = _parse(self, index)
        selected = parsed.basic.select(self)
        if not parsed.advanced:
            return selected
        positions = _advanced_positions(parsed)
        return select_rows(selected, flat_index(selected, positions, [tensor for _, tensor in parsed.advanced]))

    @serialized  # the selection is a view of the tensor as it is when the write runs (threads: README)
    def __setitem__(self, index: Any, value: Self | ConstType | Any) -> None:
        """Writes `value` (cast to this dtype, broadcast to the selection) into the selected elements.

        The tensor takes the new values by ASSIGN (`Tensor.assign`): a realized tensor's buffer is updated in place
        when it is next realized. With repeated advanced positions the last write wins.

        Example:
            >>> x = Tensor.zeros(2, 3).contiguous().realize()
            >>> x[0, 1:] = 5.0
            >>> x.tolist()
            [[0.0, 5.0, 5.0], [0.0, 0.0, 0.0]]
        """
        parsed = _parse(self, index)
        if not isinstance(value, TensorCore):
            value = (
                type(self)(value, dtype=self.dtype, device=self.device)
                if isinstance(value, (list, np.ndarray))
                else value
            )
        if isinstance(value, TensorCore) and value.device != self.device:
            raise ValueError(f"setitem value is on {value.device!r} but the tensor on {self.device!r}")
        if not parsed.advanced:
            shape = parsed.basic.result_shape(self.shape)
            values = _broadcast_value(self, value, shape)
            kept = parsed.basic.kept_sizes(self.shape)
            values = values._movement(Ops.RESHAPE, kept)
            placed = parsed.basic.place(values, self.shape)
            inside = parsed.basic.place(self._const(True, kept, dtypes.bool, self.device), self.shape)
            self.assign(inside._ternary(Ops.WHERE, placed, self))
            return
        # advanced: the rows of the basic selection the index picks are overwritten, then the selection is placed
        # back; built in a function of its own, so its intermediate tensors are gone before the write (a write
        # realizes the live tensors that depend on its target, each as an output of its own)
        self.assign(_written(self, parsed, value))

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-dim tensor")
        return self.shape[0]

    def __iter__(self) -> Any:
        if self.ndim == 0:
            raise TypeError("iteration over a 0-dim tensor")
        return (self[i] for i in range(self.shape[0]))

    def gather(self, dim: int, index: Self) -> Self:
        """out[i][j] = self[index[i][j]][j] for dim 0 (and likewise for other dims), like `torch.gather`.

        `index` has this tensor's number of dims and sizes no larger than its own outside `dim`.

        Example:
            >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()
            [[1, 1], [4, 3]]
        """
        axis, index = _check_index_argument(self, dim, index, "gather")
        size = self.shape[axis]
        check_index_values(index, bound_int(size), "gather", axis, negative=False, error=RuntimeError)
        window = [(0, index.shape[i]) if i != axis else (0, size) for i in range(self.ndim)]
        source = self._movement(Ops.SHRINK, tuple(window))
        expanded = source._movement(Ops.RESHAPE, (*source.shape, 1))
        order = list(range(self.ndim + 1))
        order[axis], order[-1] = order[-1], order[axis]
        expanded = expanded._movement(Ops.PERMUTE, tuple(order))
        count = unsplit_size(size)  # the padded position past `size` is never chosen: it reads 0
        if count != size:
            expanded = expanded._movement(Ops.PAD, ((0, 0),) * self.ndim + ((0, 1),))
        expanded = expanded._broadcast_to((*index.shape, count))
        picked = one_hot_sum(_one_hot(index, count), expanded, self.ndim)
        return picked._movement(Ops.RESHAPE, index.shape)._cast(self.dtype)

    def scatter(self, dim: int, index: Self, src: Self | ConstType, reduce: str | None = None) -> Self:
        """A copy of this tensor with `src` values written at `index` along `dim`, like `torch.scatter`:
        self[index[i][j]][j] = src[i][j] for dim 0. `reduce` 'add' / 'multiply' combines instead of replacing;
        when positions repeat without `reduce`, the last one (in row-major order along `dim`) wins.

        Example:
            >>> Tensor.zeros(3).scatter(0, Tensor([2, 0]), Tensor([5.0, 7.0])).tolist()
            [7.0, 0.0, 5.0]
        """
        axis, index = _check_index_argument(self, dim, index, "scatter")
        if reduce not in (None, "add", "multiply"):
            raise ValueError(f"scatter reduce must be None, 'add' or 'multiply', got {reduce!r}")
        if isinstance(src, TensorCore):
            if src.ndim != self.ndim or any(i > s for i, s in zip(index.shape, src.shape)):
                raise ValueError(f"scatter src shape {src.shape} must have index's dims {index.shape} or larger")
            if src.device != self.device:
                raise ValueError(f"scatter src is on {src.device!r} but the tensor on {self.device!r}")
            values = src._movement(Ops.SHRINK, tuple((0, size) for size in index.shape))._cast(self.dtype)
        else:
            values = self._const(src, index.shape, self.dtype, self.device)
        size = self.shape[axis]
        check_index_values(index, size, "scatter", axis, negative=False, error=RuntimeError)
        hits = _one_hot(index, size)  # (*index.shape, size): source position -> target position along `axis`
        spread = values._movement(Ops.RESHAPE, (*index.shape, 1))._broadcast_to(hits.shape)
        arithmetic = spread._cast(dtypes.uint8) if spread.dtype == dtypes.bool else spread
        if reduce == "multiply":
            one = arithmetic._const(1, hits.shape, arithmetic.dtype, self.device)
            combined = hits._ternary(Ops.WHERE, arithmetic, one)._reduce(Ops.MUL, (axis,))
        else:
            chosen = hits
            if reduce is None:
                order_shape = [1] * (self.ndim + 1)
                order_shape[axis] = index.shape[axis]
                order = (iota(type(self), index.shape[axis], self.device) + 1)._movement(
                    Ops.RESHAPE, tuple(order_shape)
                )
                order = order._broadcast_to(hits.shape)
                last = hits.where(order, 0)._reduce(Ops.MAX, (axis,))._broadcast_to(hits.shape)
                chosen = hits & (order == last)
            zero = arithmetic._const(0, hits.shape, arithmetic.dtype, self.device)
            combined = chosen._ternary(Ops.WHERE, arithmetic, zero)._reduce(Ops.ADD, (axis,))
        touched = hits._cast(dtypes.uint8)._reduce(Ops.MAX, (axis,))._cast(dtypes.bool)
        # move the target axis (last) into `axis`, then pad the other dims up to this tensor's shape
        order_axes = list(range(self.ndim + 1))
        order_axes[axis], order_axes[-1] = order_axes[-1], order_axes[axis]
        target_shape = tuple(size if i == axis else index.shape[i] for i in range(self.ndim))
        padding = tuple((0, self.shape[i] - target_shape[i]) for i in range(self.ndim))

        def to_target(x: Self) -> Self:
            moved = x._movement(Ops.PERMUTE, tuple(order_axes))._movement(Ops.RESHAPE, target_shape)
            return moved._movement(Ops.PAD, padding)

        combined = to_target(combined._cast(self.dtype))
        touched = to_target(touched)
        if reduce == "add":
            combined = self + combined
        elif reduce == "multiply":
            combined = self * combined
        return touched._ternary(Ops.WHERE, combined._cast(self.dtype), self)

    def scatter_add(self, dim: int, index: Self, src: Self) -> Self:
        """`scatter` with reduce='add': values at repeated positions are summed, like `torch.scatter_add`.

        Example:
            >>> Tensor.zeros(2).scatter_add(0, Tensor([1, 1, 0]), Tensor([1.0, 2.0, 3.0])).tolist()
            [3.0, 3.0]
        """
        return self.scatter(dim, index, src, reduce="add")


def _check_index_argument(x: TensorT, dim: int, index: TensorT, what: str) -> tuple[int, TensorT]:
    axis = normalize_axis(dim, x.shape, f"{what} dim")
    if not isinstance(index, TensorCore):
        raise TypeError(f"{what} index must be an integer Tensor, got {type(index).__name__}")
    if not dtypes.is_int(index.dtype):
        raise TypeError(f"{what} index must have an integer dtype, got {index.dtype!r}")
    if index.device != x.device:
        raise ValueError(f"{what} index is on {index.device!r} but the tensor on {x.device!r}")
    if index.ndim != x.ndim or x.ndim == 0:
        raise ValueError(f"{what} index must have the tensor's {x.ndim} dims (>= 1), got shape {index.shape}")
    for i, (wanted, available) in enumerate(zip(index.shape, x.shape)):
        if i != axis and not provably_le(wanted, available):
            raise ValueError(
                f"{what} index shape {index.shape} exceeds the tensor's shape {x.shape} in dim {i} (outside dim {axis})"
            )
    return axis, index


def _one_hot(index: TensorT, size: int) -> TensorT:
    """(*index.shape, size) bool: True where the last position equals the index value."""
    compute = index_compute_dtype(index, max_int(size))
    choices = sized_iota(type(index), size, index.device)._cast(compute)
    choices = choices._movement(Ops.RESHAPE, (1,) * index.ndim + (size,))
    column = index._cast(compute)._movement(Ops.RESHAPE, (*index.shape, 1))
    shape = (*index.shape, size)
    return column._broadcast_to(shape)._binary(Ops.CMPEQ, choices._broadcast_to(shape))


def _written(x: TensorT, parsed: _ParsedIndex[TensorT], value: TensorT | ConstType) -> TensorT:
    """`x` with `value` written where `parsed` (an index with advanced parts) selects, the last repeat winning."""
    selected = parsed.basic.select(x)
    index = flat_index(selected, _advanced_positions(parsed), [tensor for _, tensor in parsed.advanced])
    shape = (*index.batch, *(selected.shape[axis] for axis in index.rest(selected.ndim)))
    shape = tuple(shape[axis] for axis in index.result_order(len(shape)))
    updated = write_rows(selected, index, _broadcast_value(x, value, shape))
    if all(spec.kind == "full" for spec in parsed.basic.dims) and not parsed.basic.new_dims:
        return updated
    kept = parsed.basic.kept_sizes(x.shape)
    placed = parsed.basic.place(updated._movement(Ops.RESHAPE, kept), x.shape)
    inside = parsed.basic.place(x._const(True, kept, dtypes.bool, x.device), x.shape)
    return inside._ternary(Ops.WHERE, placed, x)


def _broadcast_value(x: TensorT, value: TensorT | ConstType, shape: tuple[int, ...]) -> TensorT:
    """The setitem `value` (a Tensor or scalar) as x's dtype, broadcast to the selection's `shape`."""
    if isinstance(value, TensorCore):
        source = value
        while source.ndim > len(shape) and source.shape[0] == 1:
            source = source._movement(Ops.RESHAPE, source.shape[1:])  # PyTorch drops extra leading size-1 dims
        try:
            if broadcast_shapes(source.shape, shape) != shape:
                raise ValueError("the value would grow the selection")
        except ValueError:
            raise ValueError(
                f"setitem value of shape {value.shape} cannot broadcast to the selection shape {shape}"
            ) from None
        return source._cast(x.dtype)._broadcast_to(shape)
    from kiln.tensor.ops.promotion import scalar_value

    return x._const(scalar_value(value), shape, x.dtype, x.device)
