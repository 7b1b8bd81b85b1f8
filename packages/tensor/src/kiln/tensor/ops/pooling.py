"""`PoolingMixin`: max and average pooling over 1, 2 or 3 trailing spatial dims, with PyTorch's arguments.

Pooling is sliding windows (`kiln.tensor.ops.windows`) reduced over the window dims: MAX for max pooling (the input
padded with the dtype's lowest value) and ADD divided by the window's count for average pooling. `ceil_mode` adds
one more window per dim where a partial window still starts inside the input or its left padding; the extra cells
it reads beyond the padding are padding too, but (like PyTorch) they never count toward an average's divisor.
Padding follows `kiln.tensor.ops.padding`: PyTorch's symmetric amounts, or tinygrad's flat (left, right, top,
bottom, ...) which may be asymmetric; negative amounts crop. `lp_pool` is PyTorch's formula on top of `avg_pool`.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.gradient import set_gradient_shortcut
from kiln.tensor.ops._checks import check_int
from kiln.tensor.ops.creation import iota
from kiln.tensor.ops.dimensioned import dimensioned
from kiln.tensor.ops.linalg import accumulated_sum
from kiln.tensor.ops.padding import spatial_padding
from kiln.tensor.ops.windows import int_tuple, sliding_windows
from kiln.uops import DType, UOp, dtypes

__all__ = ["PoolingMixin"]

Size = int | tuple[int, ...]


class _Geometry:
    """The checked arguments of one pooling call: per spatial dim kernel, stride, (before, after) padding (negative
    amounts crop), dilation and output size, plus the extra padding after the input that ceil_mode's last windows
    read."""

    def __init__(
        self, x: TensorCore, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool, name: str
    ) -> None:
        spatial = int(name[-2])
        self.spatial = spatial
        if x.ndim not in (spatial + 1, spatial + 2):
            raise ValueError(
                f"{name} input must have {spatial + 2} dims (batch, channels, *spatial) or {spatial + 1} without the "
                f"batch dim, got shape {x.shape}"
            )
        if not isinstance(ceil_mode, bool):
            raise TypeError(f"{name} ceil_mode must be a bool, got {ceil_mode!r}")
        self.kernel = int_tuple(kernel_size, spatial, f"{name} kernel_size", minimum=1)
        self.stride = self.kernel if stride is None or stride == () else int_tuple(stride, spatial, f"{name} stride", 1)
        self.padding = spatial_padding(padding, spatial, f"{name} padding")
        self.dilation = int_tuple(dilation, spatial, f"{name} dilation", minimum=1)
        flat = isinstance(padding, (tuple, list)) and len(padding) == 2 * spatial
        for (before, _), taps in zip(self.padding, self.kernel):
            # PyTorch's limit; tinygrad's flat (asymmetric) form has none; negative amounts crop
            if not flat and 2 * before > taps:
                raise ValueError(
                    f"{name} padding {tuple(pair[0] for pair in self.padding)} must be at most half the kernel size "
                    f"{self.kernel} in each dim"
                )
        sizes = tuple(
            size - max(0, -before) - max(0, -after) for size, (before, after) in zip(x.shape[-spatial:], self.padding)
        )
        self.out: list[int] = []
        self.extra: list[int] = []
        for size, taps, step, (before, after), rate in zip(
            sizes, self.kernel, self.stride, self.padding, self.dilation
        ):
            before, after = max(0, before), max(0, after)
            span = rate * (taps - 1) + 1
            room = size + before + after - span
            count = (-(-room // step) if ceil_mode else room // step) + 1
            if ceil_mode and (count - 1) * step >= size + before:
                count -= 1  # the last window must start inside the input or its left padding
            if size < 0 or room < 0 or count < 1:
                raise ValueError(
                    f"{name}: the window (kernel {self.kernel}, dilation {self.dilation}) does not fit the input of "
                    f"shape {x.shape} with padding {self.padding}"
                )
            self.out.append(count)
            self.extra.append(max(0, (count - 1) * step + span - (size + before + after)))

    def pairs(self, ndim: int) -> tuple[tuple[int, int], ...]:
        """The (before, after) padding of every dim of an `ndim`-dim input (the leading dims get none); negative
        amounts crop."""
        spatial = tuple((before, after + more) for (before, after), more in zip(self.padding, self.extra))
        return ((0, 0),) * (ndim - self.spatial) + spatial

    def windows(self, x: TensorT) -> TensorT:
        """The windows (*leading, *out, *kernel) of an input already padded with `pairs`."""
        return sliding_windows(x, self.kernel, self.stride, self.dilation)

    def window_axes(self, ndim: int) -> tuple[int, ...]:
        """The window dims of `windows` for an `ndim`-dim input."""
        return tuple(range(ndim, ndim + self.spatial))


def _lowest(dtype: DType) -> float | int | bool:
    """The value max pooling pads with: -inf for floats, the smallest value otherwise."""
    return -math.inf if dtypes.is_float(dtype) else dtypes.min(dtype)


def _tap(padded: TensorT, geometry: _Geometry, offsets: tuple[int, ...]) -> TensorT:
    """The tap at `offsets` (one per spatial dim) of every window of the padded input: shape (*leading, *out),
    element [..., o] = padded[..., o * stride + offsets]."""
    spatial = geometry.spatial
    leading = padded.ndim - spatial
    bounds = [(0, extent) for extent in padded.shape[:leading]]
    for offset, count, step in zip(offsets, geometry.out, geometry.stride):
        bounds.append((offset, offset + (count - 1) * step + 1))
    strided = sliding_windows(padded.shrink(bounds), (1,) * spatial, geometry.stride, (1,) * spatial)
    return strided.reshape(strided.shape[: leading + spatial])


def _routed_max(padded: TensorT, geometry: _Geometry) -> TensorT:
    """Max pooling in training over windows that tile the input (kernel == stride, no dilation): each window's first
    largest tap (NaN counting as the largest, like PyTorch) is picked by comparing its taps one after another
    elementwise (a chain of WHEREs); the gradient shortcut sends each window's whole gradient to that tap, computed
    over the input in window layout (*leading, out, kernel, ...) where each element compares its own tap number with
    its window's choice (the same comparisons, made again in the backward kernel: nothing is stored for them).
    Forward and backward are then one elementwise kernel each, where an argmax over the window dims took three
    reduce kernels (the window's largest value, its first position and the picked value) besides the routing kernel
    (the small CNN of benchmarks/train_bench.py: 35 -> 30 kernels a step, its poolings' ~1.8 ms of reduce kernels
    -> ~0.7 ms of elementwise ones, kernel times, loaded 2-core box)."""
    taps = [_tap(padded, geometry, offsets) for offsets in itertools.product(*(range(k) for k in geometry.kernel))]
    # the chosen tap's number in a byte (a window of up to 256 taps): a stored choice is a quarter of int32's bytes
    number = dtypes.uint8 if len(taps) <= 256 else dtypes.int32
    result, choice = taps[0], taps[0]._const(0, taps[0].shape, number, padded.device)
    for position, tap in enumerate(taps[1:], 1):
        # not (tap <= result): strictly larger, or a NaN tap (the first of equal taps stays); nothing replaces a NaN
        better = (tap <= result).logical_not() & result.isnan().logical_not()
        result = better.where(tap, result)
        choice = better.where(position, choice)
    spatial, wrap = geometry.spatial, type(padded)._from_uop
    leading = padded.shape[: padded.ndim - spatial]
    # (*leading, out_1, 1, out_2, 1, ...): each window's values beside its taps' dims
    beside = (*leading, *itertools.chain.from_iterable((count, 1) for count in geometry.out))
    numbers = iota(type(padded), len(taps), padded.device)._cast(number).reshape(*geometry.kernel)
    numbers = numbers.reshape(*itertools.chain.from_iterable((1, taps) for taps in geometry.kernel))
    covered = [count * taps for count, taps in zip(geometry.out, geometry.kernel)]

    # the rule keeps graph nodes, not tensors (a tensor kept alive is a value the scheduler would store)
    choice_node, numbers_node = choice.uop, numbers.uop

    def rule(node: UOp, upstream: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        picked = wrap(choice_node).reshape(*beside) == wrap(numbers_node)
        routed = picked.where(wrap(upstream).reshape(*beside), 0)
        grid = routed.reshape(*leading, *covered)
        rest = [(0, 0)] * len(leading) + [(0, size - part) for size, part in zip(padded.shape[len(leading) :], covered)]
        return (grid.pad(rest).uop,)

    if len(taps) == 1:
        return result
    set_gradient_shortcut(result.uop, (padded.uop,), rule)
    # a buffer: the next layer (a convolution) reads each value many times, and would otherwise fuse the comparisons
    return result


def _max_pool_nd(
    x: TensorT,
    spatial: int,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    name, indices = f"max_pool{spatial}d", return_indices
    geometry = _Geometry(x, kernel_size, stride, padding, dilation, ceil_mode, name)
    if not isinstance(indices, bool):
        raise TypeError(f"{name} return_indices must be a bool, got {indices!r}")
    if x.dtype == dtypes.bool:
        raise TypeError(f"{name} is not defined for bool tensors; cast to an integer or float dtype first")
    routed = x.requires_grad is True and not type(x)._grad_disabled
    if routed:
        # training reads the input three times (the first largest tap, its value, the backward's routing): a lazy
        # input (a convolution and its ReLU) is computed once into a buffer rather than inside each of those kernels,
        # where its reduce got no register tile (the small CNN of benchmarks/train_bench.py: three ~1-2 ms kernels
        # each computing the first convolution at ~5 GFLOP/s)
        x = x.contiguous()
    pairs = geometry.pairs(x.ndim)
    padded = x.pad(pairs, value=_lowest(x.dtype))
    if routed and not indices and geometry.kernel == geometry.stride and set(geometry.dilation) == {1}:
        return _routed_max(padded, geometry)
    windows = geometry.windows(padded)
    axes = geometry.window_axes(x.ndim)
    if not indices and not routed:
        return windows.amax(axes)
    # a window's answer is its first largest value (NaN counting as the largest, like PyTorch)
    taps_per_window = math.prod(geometry.kernel)
    flat = windows.reshape(*windows.shape[: x.ndim], taps_per_window)
    first = flat.argmax(-1, keepdim=True)
    taps = iota(type(x), taps_per_window, x.device)._cast(first.dtype)
    picked = taps == first
    if routed:
        # picking the first maximum by position sends its whole gradient there, as PyTorch does (a plain max would
        # split it among tied values)
        values = picked.where(flat, 0)._cast(x.dtype).sum(-1)._cast(x.dtype)
    else:
        values = windows.amax(axes)
    if not indices:
        return values
    # the flat position (over the spatial dims) of each input cell, -1 in the padding
    sizes = x.shape[-geometry.spatial :]
    positions = iota(type(x), math.prod(sizes), x.device)._cast(dtypes.default_int).reshape(*sizes)
    position_windows = geometry.windows(positions.pad(pairs[-geometry.spatial :], value=-1))
    window_positions = position_windows.reshape(*position_windows.shape[: geometry.spatial], taps_per_window)
    chosen = picked.where(window_positions, 0)
    return values, chosen.sum(-1)._cast(dtypes.default_int)


def _avg_pool(
    x: TensorT,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Any,
    name: str,
    dilation: Any = 1,
) -> TensorT:
    geometry = _Geometry(x, kernel_size, stride, padding, dilation, ceil_mode, name)
    if not isinstance(count_include_pad, bool):
        raise TypeError(f"{name} count_include_pad must be a bool, got {count_include_pad!r}")
    if not dtypes.is_float(x.dtype):
        raise TypeError(f"{name} needs a floating-point tensor, got {x.dtype!r}; cast first")
    pairs = geometry.pairs(x.ndim)
    axes = geometry.window_axes(x.ndim)
    totals = accumulated_sum(geometry.windows(x.pad(pairs)), axes)
    totals = totals.reshape(totals.shape[: x.ndim])
    if divisor_override is not None:
        divisor = check_int(divisor_override, f"{name} divisor_override")
        if divisor == 0:
            raise ValueError(f"{name} divisor_override must not be zero")
        return totals / divisor
    # the divisor of each window: its cells inside the input, plus those in the padding when count_include_pad
    sizes = x.shape[-geometry.spatial :]
    ones = x._const(1, sizes, x.dtype, x.device)
    spatial_pairs = pairs[-geometry.spatial :]
    if count_include_pad:
        inside = ones.pad(geometry.padding, value=1)
        counted = inside.pad(tuple((0, more) for more in geometry.extra))
    else:
        counted = ones.pad(spatial_pairs)
    counts = accumulated_sum(geometry.windows(counted), tuple(range(geometry.spatial, 2 * geometry.spatial)))
    return totals / counts.reshape(counts.shape[: geometry.spatial])


def _avg_pool_nd(
    x: TensorT,
    spatial: int,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    dilation: Size = 1,
) -> TensorT:
    return _avg_pool(
        x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, f"avg_pool{spatial}d", dilation
    )


def _lp_pool_nd(
    x: TensorT, dims: int, norm_type: float, kernel_size: Size, stride: Size | None = None, ceil_mode: bool = False
) -> TensorT:
    name = f"lp_pool{dims}d"
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)) or norm_type == 0:
        raise ValueError(f"{name} norm_type must be a non-zero number, got {norm_type!r}")
    kernel = int_tuple(kernel_size, dims, f"{name} kernel_size", minimum=1)
    averages = _avg_pool(x.pow(norm_type), kernel, stride, 0, ceil_mode, True, None, name)
    sums = averages.sign() * averages.abs().relu() * math.prod(kernel)
    return sums.pow(1.0 / norm_type)


class PoolingMixin(TensorCore):
    """Max and average pooling (PyTorch's `torch.nn.functional.*_pool*d` with the input as `self`)."""

    max_pool1d = dimensioned(
        _max_pool_nd,
        1,
        """Max pooling over the last dim; see `max_pool2d`.

        Example:
            >>> Tensor([[[1.0, 3.0, 2.0, 0.0]]]).max_pool1d(2).tolist()
            [[[3.0, 2.0]]]
        """,
    )

    def max_pool2d(
        self,
        kernel_size: Size = 2,
        stride: Size | None = None,
        padding: Size = 0,
        dilation: Size = 1,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Any:
        """The largest value of each window over the last two dims, like `torch.nn.functional.max_pool2d`.

        Args:
            kernel_size: window size, an int or one per spatial dim.
            stride: step between windows (default: kernel_size).
            padding: implicit -inf (the dtype's lowest value) on both sides, at most half the kernel; or tinygrad's
                flat (left, right, top, bottom), which may be asymmetric and negative (cropping).
            dilation: spacing between window taps.
            ceil_mode: round the output size up (a last partial window that starts inside the input counts).
            return_indices: also return the flat position (over the spatial dims, in `dtypes.default_int`) of each
                maximum, as `max_unpool2d` takes it.

        The kernel defaults to 2 (tinygrad's (2, 2)).

        Example:
            >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d(2).tolist()
            [[[[4.0]]]]
        """
        return _max_pool_nd(self, 2, kernel_size, stride, padding, dilation, ceil_mode, return_indices)

    max_pool3d = dimensioned(
        _max_pool_nd,
        3,
        """Max pooling over the last three dims; see `max_pool2d`.

        Example:
            >>> Tensor.arange(8.0).reshape(1, 1, 2, 2, 2).max_pool3d(2).item()
            7.0
        """,
    )

    def avg_pool1d(
        self,
        kernel_size: Size,
        stride: Size | None = None,
        padding: Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        dilation: Size = 1,
    ) -> Self:
        """Average pooling over the last dim; see `avg_pool2d`.

        Example:
            >>> Tensor([[[1.0, 3.0, 2.0, 0.0]]]).avg_pool1d(2).tolist()
            [[[2.0, 1.0]]]
        """
        return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, None, "avg_pool1d", dilation)

    def avg_pool2d(
        self,
        kernel_size: Size = 2,
        stride: Size | None = None,
        padding: Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
        dilation: Size = 1,
    ) -> Self:
        """The mean of each window over the last two dims, like `torch.nn.functional.avg_pool2d`.

        Args:
            kernel_size, stride, padding, ceil_mode: as for `max_pool2d` (padding is zeros).
            count_include_pad: whether the zero padding counts toward each window's divisor.
            divisor_override: divide every window sum by this instead.
            dilation: spacing between window taps (tinygrad's; PyTorch has none for average pooling).

        Example:
            >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).avg_pool2d(2).tolist()
            [[[[2.5]]]]
        """
        return _avg_pool_nd(
            self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, dilation
        )

    avg_pool3d = dimensioned(
        _avg_pool_nd,
        3,
        """Average pooling over the last three dims; see `avg_pool2d`.

        Example:
            >>> Tensor.arange(8.0).reshape(1, 1, 2, 2, 2).avg_pool3d(2).item()
            3.5
        """,
    )

    lp_pool1d = dimensioned(
        _lp_pool_nd,
        1,
        """Power-average pooling over the last dim; see `lp_pool2d`.

        Example:
            >>> Tensor([[[3.0, 4.0]]]).lp_pool1d(2, 2).tolist()
            [[[5.0]]]
        """,
    )
    lp_pool2d = dimensioned(
        _lp_pool_nd,
        2,
        """(sum of x ** p over each window) ** (1 / p) over the last two dims, like `torch.nn.functional.lp_pool2d`
        (computed as PyTorch does: an average pool of x ** p times the kernel size, so a ceil_mode window that
        is cut short is scaled up to the full kernel).

        Example:
            >>> Tensor([[[[1.0, 1.0], [1.0, 1.0]]]]).lp_pool2d(1, 2).tolist()
            [[[[4.0]]]]
        """,
    )
    lp_pool3d = dimensioned(
        _lp_pool_nd,
        3,
        """Power-average pooling over the last three dims; see `lp_pool2d`.

        Example:
            >>> Tensor.ones(1, 1, 2, 2, 2).lp_pool3d(1, 2).item()
            8.0
        """,
    )
