"""`ReduceMixin`: reductions (sum, mean, max, argmax, var, softmax, cumsum, ...) over axes, with PyTorch's dtypes.

Axes are an int, a tuple of ints (negative counts from the end) or None (every dim); `keepdim` keeps the reduced
dims as size 1. The reduced dtype follows PyTorch: `sum` and `prod` of integers and bools give int64; 16-bit floats
accumulate in float32 and round at the end; `mean`, `var` and `std` need floating-point input.
Reductions use the REDUCE_AXIS primitive (ADD, MUL, MAX); min is max of the negation (or of the bitwise complement
for integers, which reverses the order without overflow).
"""

from __future__ import annotations

import math
from typing import Any, Self

from kiln.tensor import return_types
from kiln.tensor.core import Axis, TensorCore, TensorT
from kiln.tensor.ops._checks import check_dtype, normalize_axes, normalize_axis, pick_axis
from kiln.tensor.ops.creation import iota, sized_iota
from kiln.tensor.symbolic import max_int
from kiln.uops import DType, Ops, dtypes

__all__ = ["ReduceMixin"]


class EmptyReductionError(RuntimeError, IndexError, ValueError):
    """A max / min / argmax over a size-0 dim (no identity). PyTorch raises RuntimeError over all elements and
    IndexError over a dim; this is both (and a ValueError, kiln's earlier class)."""


_CUMULATIVE_BLOCK = 256  # cumsum runs blocks of this many elements quadratically, then combines block totals


def _accumulate_dtype(dtype: DType) -> DType:
    """PyTorch's sum / prod dtype: integers and bools widen to int64; 16-bit floats accumulate in float32."""
    if not dtypes.is_float(dtype):
        return dtypes.int64
    return dtypes.float32 if dtype.itemsize < 4 else dtype


def _sum_dtypes(dtype: DType, requested: DType | None) -> tuple[DType, DType]:
    """(result dtype, accumulation dtype) of a sum / prod / cumsum of a `dtype` tensor: `requested` when given, else
    floats keep theirs and integers and bools give int64 (like PyTorch); 16-bit floats accumulate in float32."""
    target = check_dtype(requested) if requested is not None else dtype if dtypes.is_float(dtype) else dtypes.int64
    return target, _accumulate_dtype(target) if dtypes.is_float(target) else target


def _max_or_min(x: ReduceMixin, axis: Axis | ReduceMixin, keepdim: bool, dim: Axis, *, largest: bool) -> Any:
    """`max` (largest) or `min` in its forms: elementwise against a Tensor `axis`, the values over all dims or a
    tuple of dims, or (values, indices) over one dim."""
    if isinstance(axis, TensorCore):
        return x.maximum(axis) if largest else x.minimum(axis)
    chosen = pick_axis(axis, dim)
    extreme = x.amax if largest else x.amin
    if chosen is None or isinstance(chosen, (tuple, list)):
        return extreme(chosen, keepdim)
    if largest:
        return return_types.max(extreme(chosen, keepdim), x.argmax(chosen, keepdim))
    return return_types.min(extreme(chosen, keepdim), x.argmin(chosen, keepdim))


class ReduceMixin(TensorCore):
    """Reductions over axes."""

    # ------------------------------------------------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------------------------------------------------

    def _reduce_axes(self, op: Ops, axes: tuple[int, ...], keepdim: bool) -> Self:
        """REDUCE_AXIS with `op` over normalized `axes`, dropping the reduced dims unless `keepdim`."""
        reduced = self._reduce(op, axes)
        if keepdim:
            return reduced
        return reduced._movement(Ops.RESHAPE, tuple(size for i, size in enumerate(self.shape) if i not in axes))

    def _axes(self, axis: Axis, dim: Axis, what: str) -> tuple[int, ...]:
        return normalize_axes(pick_axis(axis, dim), self.shape, f"{what} axis")

    def _require_elements(self, axes: tuple[int, ...], what: str) -> None:
        if any(self.shape[axis] == 0 for axis in axes):
            raise EmptyReductionError(
                f"{what} of an empty range: axes {axes} of shape {self.shape} include a size-0 dim "
                "(the reduction has no identity)"
            )

    def _raw_max(self, axes: tuple[int, ...], keepdim: bool) -> Self:
        """The MAX reduction as is (ignores NaN like C's fmax); bools reduce as uint8."""
        if self.dtype == dtypes.bool:
            return self._cast(dtypes.uint8)._reduce_axes(Ops.MAX, axes, keepdim)._cast(dtypes.bool)
        return self._reduce_axes(Ops.MAX, axes, keepdim)

    def _order_reversed(self) -> Self:
        """A bijection of the values that reverses their order: -x for floats, ~x for integers, not x for bools."""
        if dtypes.is_float(self.dtype):
            return self._unary(Ops.NEG)
        return self.bitwise_not()

    # ------------------------------------------------------------------------------------------------------------
    # sums and products
    # ------------------------------------------------------------------------------------------------------------

    def sum(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None, dtype: DType | None = None) -> Self:
        """The sum over `axis` (default: all). Integers and bools sum to int64 (like PyTorch); `dtype` overrides.

        Example:
            >>> Tensor([[1, 2], [3, 4]]).sum(axis=0).tolist()
            [4, 6]
        """
        return self._accumulated(Ops.ADD, self._axes(axis, dim, "sum"), keepdim, dtype)

    def prod(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None, dtype: DType | None = None) -> Self:
        """The product over `axis` (default: all). Integers and bools multiply to int64 (like PyTorch).

        Example:
            >>> Tensor([[1, 2], [3, 4]]).prod(axis=1).tolist()
            [2, 12]
        """
        return self._accumulated(Ops.MUL, self._axes(axis, dim, "prod"), keepdim, dtype)

    def _accumulated(self, op: Ops, axes: tuple[int, ...], keepdim: bool, dtype: DType | None) -> Self:
        # sum / prod: integers and bools accumulate in int64, `dtype` overrides
        target, accumulate = _sum_dtypes(self.dtype, dtype)
        return self._cast(accumulate)._reduce_axes(op, axes, keepdim)._cast(target)

    def mean(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None, dtype: DType | None = None) -> Self:
        """The mean over `axis` (default: all); floating point only, like PyTorch (NaN over an empty range).

        Example:
            >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).mean(axis=1).tolist()
            [1.5, 3.5]
        """
        source = self if dtype is None else self._cast(check_dtype(dtype))
        if not dtypes.is_float(source.dtype):
            raise TypeError(
                f"mean needs a floating-point tensor, got {source.dtype!r}; cast first or pass dtype=dtypes.float32"
            )
        axes = source._axes(axis, dim, "mean")
        count = math.prod(source.shape[axis] for axis in axes)
        accumulate = _accumulate_dtype(source.dtype)
        total = source._cast(accumulate)._reduce_axes(Ops.ADD, axes, keepdim)
        if not isinstance(count, int):  # a bound Variable among the reduced sizes: count the elements on the device
            ones = source._const(1, source.shape, accumulate, source.device)._reduce_axes(Ops.ADD, axes, keepdim)
            return (total / ones)._cast(source.dtype)
        return (total / count)._cast(source.dtype) if count else (total * math.nan)._cast(source.dtype)

    def var(self, axis: Axis = None, keepdim: bool = False, *, correction: int | float = 1, dim: Axis = None) -> Self:
        """The variance over `axis`: sum((x - mean)**2) / (N - correction) (Bessel's correction by default).

        Example:
            >>> Tensor([1.0, 2.0, 3.0, 4.0]).var().item()
            1.6666666269302368
        """
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"var needs a floating-point tensor, got {self.dtype!r}; cast first")
        axes = self._axes(axis, dim, "var")
        count = math.prod(self.shape[axis] for axis in axes)
        compute = self._cast(_accumulate_dtype(self.dtype))
        centered = compute - compute.mean(axes, keepdim=True)
        squares = (centered * centered)._reduce_axes(Ops.ADD, axes, keepdim)
        if not isinstance(count, int):  # a bound Variable among the reduced sizes: count the elements on the device
            ones = compute._const(1, compute.shape, compute.dtype, compute.device)._reduce_axes(Ops.ADD, axes, keepdim)
            return (squares / (ones - correction).maximum(0))._cast(self.dtype)
        return (squares / max(0, count - correction))._cast(self.dtype)

    def std(self, axis: Axis = None, keepdim: bool = False, *, correction: int | float = 1, dim: Axis = None) -> Self:
        """The standard deviation over `axis`: sqrt(var).

        Example:
            >>> Tensor([2.0, 4.0]).std(correction=0).item()
            1.0
        """
        return self.var(axis, keepdim, correction=correction, dim=dim).sqrt()

    # ------------------------------------------------------------------------------------------------------------
    # extremes
    # ------------------------------------------------------------------------------------------------------------

    def max(self, axis: Axis | Self = None, keepdim: bool = False, *, dim: Axis = None) -> Any:
        """The largest value, like `torch.max`; NaN wins.

        - `max()`: the largest value of all elements (a 0-dim Tensor);
        - `max(dim)` with one int dim: a `(values, indices)` named tuple (kiln.tensor.return_types.max), the
          indices (`dtypes.default_int`) of the first largest value, like PyTorch (which gives int64);
        - `max(dims)` with a tuple of dims (which torch's max does not take): the values only, as `amax(dims)`;
        - `max(other)` with a Tensor: the elementwise `maximum`.

        Example:
            >>> values, indices = Tensor([[1, 5], [7, 2]]).max(dim=1)
            >>> values.tolist(), indices.tolist()
            ([5, 7], [1, 0])
        """
        return _max_or_min(self, axis, keepdim, dim, largest=True)

    def min(self, axis: Axis | Self = None, keepdim: bool = False, *, dim: Axis = None) -> Any:
        """The smallest value, like `torch.min` (see `max` for the forms: `min(dim)` gives `(values, indices)`).

        Example:
            >>> values, indices = Tensor([[1, 5], [7, 2]]).min(dim=0)
            >>> values.tolist(), indices.tolist()
            ([1, 2], [0, 1])
        """
        return _max_or_min(self, axis, keepdim, dim, largest=False)

    def amax(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
        """The largest values over `axis` (default: all; an int or a tuple of dims); NaN wins, like `torch.amax`.

        Example:
            >>> Tensor([[1, 5], [7, 2]]).amax(axis=1).tolist()
            [5, 7]
        """
        axes = self._axes(axis, dim, "max")
        self._require_elements(axes, "max")
        largest = self._raw_max(axes, keepdim)
        if not dtypes.is_float(self.dtype):
            return largest
        has_nan = self.isnan()._raw_max(axes, keepdim)
        return has_nan._ternary(Ops.WHERE, largest._const(math.nan, largest.shape, self.dtype, self.device), largest)

    def amin(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
        """The smallest values over `axis` (default: all; an int or a tuple of dims); NaN wins, like `torch.amin`.

        Example:
            >>> Tensor([[1, 5], [7, 2]]).amin(axis=0).tolist()
            [1, 2]
        """
        return self._order_reversed().amax(axis, keepdim, dim=dim)._order_reversed()

    def argmax(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Self:
        """The position (`dtypes.default_int`, int32; torch gives int64) of the largest value along `axis` (None: of
        the flattened tensor); the first one on ties, NaN counting as the largest, like PyTorch.

        Example:
            >>> Tensor([[1, 5], [7, 2]]).argmax(axis=1).tolist()
            [1, 0]
        """
        chosen = pick_axis(axis, dim)
        if chosen is None:
            return self.reshape(-1).argmax(0)
        index = normalize_axis(chosen, self.shape, "argmax axis")
        if self.ndim == 0:
            return self._const(0, (), dtypes.default_int, self.device)
        self._require_elements((index,), "argmax")
        size = self.shape[index]
        largest = self.amax(index, keepdim=True)
        hits = self == largest
        if dtypes.is_float(self.dtype):
            hits = hits | self.isnan()
        # the first hit has the largest (top - position); a dim of bound-Variable size counts down from its
        # largest value, a constant, so one kernel serves every value
        top = max_int(size)
        position = sized_iota(type(self), size, self.device)
        view = [1] * self.ndim
        view[index] = size
        countdown = (top - position).reshape(view)
        first = hits.where(countdown, 0)._raw_max((index,), keepdim)
        return (top - first)._cast(dtypes.default_int)

    def argmin(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Self:
        """The position (`dtypes.default_int`) of the smallest value along `axis` (None: of the flattened tensor);
        first on ties.

        Example:
            >>> Tensor([[1, 5], [7, 2]]).argmin(axis=1).tolist()
            [0, 1]
        """
        return self._order_reversed().argmax(axis, keepdim, dim=dim)

    def any(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
        """Whether any value over `axis` is nonzero (bool; False over an empty range).

        Example:
            >>> Tensor([[0, 1], [0, 0]]).any(axis=1).tolist()
            [True, False]
        """
        axes = self._axes(axis, dim, "any")
        truth = self._cast(dtypes.bool)._cast(dtypes.int32)
        return truth._reduce_axes(Ops.ADD, axes, keepdim)._cast(dtypes.bool)

    def all(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
        """Whether every value over `axis` is nonzero (bool; True over an empty range).

        Example:
            >>> Tensor([[1, 1], [0, 1]]).all(axis=1).tolist()
            [True, False]
        """
        return self._cast(dtypes.bool).logical_not().any(axis, keepdim, dim=dim).logical_not()

    # ------------------------------------------------------------------------------------------------------------
    # softmax family
    # ------------------------------------------------------------------------------------------------------------

    def logsumexp(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
        """log(sum(exp(x))) over `axis`, computed stably (the max is subtracted first).

        Example:
            >>> round(Tensor([0.0, 0.0]).logsumexp().item(), 5)
            0.69315
        """
        x = self._floating()
        axes = x._axes(axis, dim, "logsumexp")
        peak = x._raw_max(axes, keepdim=True).detach()
        # an all -inf (or inf) slice would give inf - inf: shift by 0 there
        peak = peak.isinf().where(0.0, peak)
        total = (x - peak).exp()._reduce_axes(Ops.ADD, axes, keepdim=True).log() + peak
        if keepdim:
            return total
        return total._movement(Ops.RESHAPE, tuple(size for i, size in enumerate(x.shape) if i not in axes))

    def softmax(self, axis: int = -1, *, dim: int | None = None, dtype: DType | None = None) -> Self:
        """exp(x) / sum(exp(x)) along `axis` (default: the last), stably.

        Example:
            >>> Tensor([0.0, 0.0]).softmax().tolist()
            [0.5, 0.5]
        """
        x = (self if dtype is None else self._cast(check_dtype(dtype)))._floating()
        index = normalize_axis(pick_axis(None, dim, axis), x.shape, "softmax axis")
        axes = (index,) if x.ndim else ()

        def body(values: Self) -> Self:
            shifted = (values - values._raw_max(axes, keepdim=True).detach()).exp()
            # one reciprocal per row and a multiply per element (as torch's CPU kernel does): a division per element
            # costs several multiplies' time; the two differ by at most an ulp
            return shifted * shifted._reduce_axes(Ops.ADD, axes, keepdim=True).reciprocal()

        return x._math(body)

    def log_softmax(self, axis: int = -1, *, dim: int | None = None, dtype: DType | None = None) -> Self:
        """log(softmax(x)) along `axis`, computed as x - logsumexp(x).

        Example:
            >>> round(Tensor([0.0, 0.0]).log_softmax().tolist()[0], 5)
            -0.69315
        """
        x = (self if dtype is None else self._cast(check_dtype(dtype)))._floating()
        index = normalize_axis(pick_axis(None, dim, axis), x.shape, "log_softmax axis")
        axes = (index,) if x.ndim else ()

        def body(values: Self) -> Self:
            shifted = values - values._raw_max(axes, keepdim=True).detach()
            return shifted - shifted.exp()._reduce_axes(Ops.ADD, axes, keepdim=True).log()

        return x._math(body)

    # ------------------------------------------------------------------------------------------------------------
    # cumulative
    # ------------------------------------------------------------------------------------------------------------

    def cumsum(self, axis: int = 0, *, dim: int | None = None, dtype: DType | None = None) -> Self:
        """Running sums along `axis` (integers and bools give int64, like PyTorch).

        Example:
            >>> Tensor([1, 2, 3]).cumsum().tolist()
            [1, 3, 6]
        """
        if self.ndim == 0:
            return self.sum(dtype=dtype)
        index = normalize_axis(pick_axis(None, dim, axis), self.shape, "cumsum axis")
        target, compute = _sum_dtypes(self.dtype, dtype)
        last = self._cast(compute).transpose(index, -1)
        return _blocked_cumsum(last).transpose(index, -1)._cast(target)

    def cummax(self, axis: int = 0, *, dim: int | None = None) -> tuple[Self, Self]:
        """(running maxima, their positions as `dtypes.default_int`) along `axis`, like `torch.cummax`: the position
        is the latest one holding the maximum, and a NaN stays the maximum once seen. Costs O(n**2) work along the
        axis.

        Example:
            >>> values, positions = Tensor([1, 3, 2, 3]).cummax(); values.tolist(), positions.tolist()
            ([1, 3, 3, 3], [0, 1, 1, 3])
        """
        if self.ndim == 0:
            return return_types.cummax(self, self._const(0, (), dtypes.default_int, self.device))
        index = normalize_axis(pick_axis(None, dim, axis), self.shape, "cummax axis")
        last = self.transpose(index, -1)
        size = last.shape[-1]
        if size == 0:
            return return_types.cummax(self, self._const(0, self.shape, dtypes.default_int, self.device))
        window = _lower_triangle(type(last), size, last.device)  # (size, size): column j <= row i
        rows = last.unsqueeze(-2)._broadcast_to((*last.shape[:-1], size, size))
        lowest = dtypes.min(last.dtype)
        masked = window.where(rows, lowest)
        values = masked.amax(-1)
        hits = (rows == values.unsqueeze(-1)) & window
        if dtypes.is_float(last.dtype):
            hits = hits | (rows.isnan() & values.unsqueeze(-1).isnan() & window)
        positions = hits.where(iota(type(last), size, last.device) + 1, 0)._raw_max((last.ndim,), keepdim=False) - 1
        positions = positions._cast(dtypes.default_int)
        # read the values back at the positions: the gradient then goes to that one element, like torch's
        values = last.gather(last.ndim - 1, positions)
        return return_types.cummax(values.transpose(index, -1), positions.transpose(index, -1))


def _lower_triangle(kind: type[TensorT], size: int, device: str | tuple[str, ...]) -> TensorT:
    """The (size, size) bool `kind` mask of column <= row."""
    rows = iota(kind, size, device).reshape(size, 1)
    columns = iota(kind, size, device).reshape(1, size)
    return columns <= rows


def _blocked_cumsum(x: TensorT) -> TensorT:
    """Running sums along the last dim: quadratic within blocks, block totals recursively (O(n * block) work)."""
    size = x.shape[-1]
    if type(size) is not int and max_int(size) > _CUMULATIVE_BLOCK:
        # a bound-Variable length past one block: the running sums of the zero-padded largest length, cut back (a
        # prefix does not see what follows it), so one set of kernels serves every value
        padding = ((0, 0),) * (x.ndim - 1) + ((0, max_int(size) - size),)
        return _blocked_cumsum(x._movement(Ops.PAD, padding))[..., :size]
    if max_int(size) <= _CUMULATIVE_BLOCK:
        if size == 0:
            return x
        window = _lower_triangle(type(x), size, x.device)
        rows = x.unsqueeze(-2)._broadcast_to((*x.shape[:-1], size, size))
        return window.where(rows, 0)._reduce_axes(Ops.ADD, (x.ndim,), keepdim=False)
    blocks = -(-size // _CUMULATIVE_BLOCK)
    padding = ((0, 0),) * (x.ndim - 1) + ((0, blocks * _CUMULATIVE_BLOCK - size),)
    tiled = x._movement(Ops.PAD, padding).reshape(*x.shape[:-1], blocks, _CUMULATIVE_BLOCK)
    inside = _blocked_cumsum(tiled)
    totals = inside[..., -1]
    before = _blocked_cumsum(totals) - totals  # the sum of all earlier blocks
    combined = inside + before.unsqueeze(-1)
    return combined.reshape(*x.shape[:-1], blocks * _CUMULATIVE_BLOCK)[..., :size]
