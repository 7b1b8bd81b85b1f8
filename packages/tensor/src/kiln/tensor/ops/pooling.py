# mypy: disable-error-code="misc"
# (misc: mixin methods declare `self: Tensor`, the class they are mixed into, which mypy reports as not a supertype)
"""`PoolingMixin`: max and average pooling over 1, 2 or 3 trailing spatial dims, with PyTorch's arguments.

Pooling is sliding windows (`kiln.tensor.ops.windows`) reduced over the window dims: MAX for max pooling (the input
padded with the dtype's lowest value) and ADD divided by the window's count for average pooling. `ceil_mode` adds
one more window per dim where a partial window still starts inside the input or its left padding; the extra cells
it reads beyond the padding are padding too, but (like PyTorch) they never count toward an average's divisor.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kiln.tensor.ops._checks import check_int
from kiln.tensor.ops.creation import iota
from kiln.tensor.ops.linalg import accumulated_sum
from kiln.tensor.ops.windows import int_tuple, sliding_windows
from kiln.uops import DType, dtypes

if TYPE_CHECKING:
    from kiln.tensor.tensor import Tensor

__all__ = ["PoolingMixin"]

Size = int | tuple[int, ...]


class _Geometry:
    """The checked arguments of one pooling call: per spatial dim kernel, stride, padding, dilation and output size,
    plus the extra padding after the input that ceil_mode's last windows read."""

    def __init__(
        self, x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool, name: str
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
        self.padding = int_tuple(padding, spatial, f"{name} padding")
        self.dilation = int_tuple(dilation, spatial, f"{name} dilation", minimum=1)
        for pad, taps in zip(self.padding, self.kernel):
            if 2 * pad > taps:
                raise ValueError(
                    f"{name} padding {self.padding} must be at most half the kernel size {self.kernel} in each dim"
                )
        sizes = x.shape[-spatial:]
        self.out: list[int] = []
        self.extra: list[int] = []
        for size, taps, step, pad, rate in zip(sizes, self.kernel, self.stride, self.padding, self.dilation):
            span = rate * (taps - 1) + 1
            room = size + 2 * pad - span
            count = (-(-room // step) if ceil_mode else room // step) + 1
            if ceil_mode and (count - 1) * step >= size + pad:
                count -= 1  # the last window must start inside the input or its left padding
            if room < 0 or count < 1:
                raise ValueError(
                    f"{name}: the window (kernel {self.kernel}, dilation {self.dilation}) does not fit the input of "
                    f"shape {x.shape} with padding {self.padding}"
                )
            self.out.append(count)
            self.extra.append(max(0, (count - 1) * step + span - (size + 2 * pad)))

    def pairs(self, ndim: int) -> tuple[tuple[int, int], ...]:
        """The (before, after) padding of every dim of an `ndim`-dim input (the leading dims get none)."""
        spatial = tuple((pad, pad + more) for pad, more in zip(self.padding, self.extra))
        return ((0, 0),) * (ndim - self.spatial) + spatial

    def windows(self, x: Tensor) -> Tensor:
        """The windows (*leading, *out, *kernel) of an input already padded with `pairs`."""
        return sliding_windows(x, self.kernel, self.stride, self.dilation)

    def window_axes(self, ndim: int) -> tuple[int, ...]:
        """The window dims of `windows` for an `ndim`-dim input."""
        return tuple(range(ndim, ndim + self.spatial))


def _lowest(dtype: DType) -> float | int | bool:
    """The value max pooling pads with: -inf for floats, the smallest value otherwise."""
    return -math.inf if dtypes.is_float(dtype) else dtypes.min(dtype)


def _max_pool(
    x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool, indices: bool, name: str
) -> Tensor | tuple[Tensor, Tensor]:
    geometry = _Geometry(x, kernel_size, stride, padding, dilation, ceil_mode, name)
    if not isinstance(indices, bool):
        raise TypeError(f"{name} return_indices must be a bool, got {indices!r}")
    if x.dtype == dtypes.bool:
        raise TypeError(f"{name} is not defined for bool tensors; cast to an integer or float dtype first")
    pairs = geometry.pairs(x.ndim)
    windows = geometry.windows(x.pad(pairs, value=_lowest(x.dtype)))
    axes = geometry.window_axes(x.ndim)
    values = windows.amax(axes)
    if not indices:
        return values
    # the flat position (over the spatial dims) of each input cell, -1 in the padding; a window's answer is the
    # position of its first largest value (NaN counting as the largest, like PyTorch)
    sizes = x.shape[-geometry.spatial :]
    positions = iota(math.prod(sizes), x.device)._cast(dtypes.int64).reshape(*sizes)
    position_windows = geometry.windows(positions.pad(pairs[-geometry.spatial :], value=-1))
    flat = windows.reshape(*windows.shape[: x.ndim], -1)
    first = flat.argmax(-1, keepdim=True)
    taps = iota(flat.shape[-1], x.device)._cast(dtypes.int64)
    chosen = (taps == first).where(position_windows.reshape(*position_windows.shape[: geometry.spatial], -1), 0)
    return values, chosen.sum(-1)


def _avg_pool(
    x: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Any,
    name: str,
) -> Tensor:
    geometry = _Geometry(x, kernel_size, stride, padding, 1, ceil_mode, name)
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
        inside = ones.pad(tuple((pad, pad) for pad in geometry.padding), value=1)
        counted = inside.pad(tuple((0, more) for more in geometry.extra))
    else:
        counted = ones.pad(spatial_pairs)
    counts = accumulated_sum(geometry.windows(counted), tuple(range(geometry.spatial, 2 * geometry.spatial)))
    return totals / counts.reshape(counts.shape[: geometry.spatial])


class PoolingMixin:
    """Max and average pooling (PyTorch's `torch.nn.functional.*_pool*d` with the input as `self`)."""

    def max_pool1d(
        self: Tensor,
        kernel_size: Size,
        stride: Size | None = None,
        padding: Size = 0,
        dilation: Size = 1,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Any:
        """Max pooling over the last dim; see `max_pool2d`.

        Example:
            >>> Tensor([[[1.0, 3.0, 2.0, 0.0]]]).max_pool1d(2).tolist()
            [[[3.0, 2.0]]]
        """
        return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool1d")

    def max_pool2d(
        self: Tensor,
        kernel_size: Size,
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
            padding: implicit -inf (the dtype's lowest value) on both sides; at most half the kernel.
            dilation: spacing between window taps.
            ceil_mode: round the output size up (a last partial window that starts inside the input counts).
            return_indices: also return the flat position (over the spatial dims, int64) of each maximum.

        Example:
            >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d(2).tolist()
            [[[[4.0]]]]
        """
        return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool2d")

    def max_pool3d(
        self: Tensor,
        kernel_size: Size,
        stride: Size | None = None,
        padding: Size = 0,
        dilation: Size = 1,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Any:
        """Max pooling over the last three dims; see `max_pool2d`.

        Example:
            >>> Tensor.arange(8.0).reshape(1, 1, 2, 2, 2).max_pool3d(2).item()
            7.0
        """
        return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool3d")

    def avg_pool1d(
        self: Tensor,
        kernel_size: Size,
        stride: Size | None = None,
        padding: Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        """Average pooling over the last dim; see `avg_pool2d`.

        Example:
            >>> Tensor([[[1.0, 3.0, 2.0, 0.0]]]).avg_pool1d(2).tolist()
            [[[2.0, 1.0]]]
        """
        return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, None, "avg_pool1d")

    def avg_pool2d(
        self: Tensor,
        kernel_size: Size,
        stride: Size | None = None,
        padding: Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> Tensor:
        """The mean of each window over the last two dims, like `torch.nn.functional.avg_pool2d`.

        Args:
            kernel_size, stride, padding, ceil_mode: as for `max_pool2d` (padding is zeros).
            count_include_pad: whether the zero padding counts toward each window's divisor.
            divisor_override: divide every window sum by this instead.

        Example:
            >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).avg_pool2d(2).tolist()
            [[[[2.5]]]]
        """
        return _avg_pool(
            self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, "avg_pool2d"
        )

    def avg_pool3d(
        self: Tensor,
        kernel_size: Size,
        stride: Size | None = None,
        padding: Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> Tensor:
        """Average pooling over the last three dims; see `avg_pool2d`.

        Example:
            >>> Tensor.arange(8.0).reshape(1, 1, 2, 2, 2).avg_pool3d(2).item()
            3.5
        """
        return _avg_pool(
            self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, "avg_pool3d"
        )
