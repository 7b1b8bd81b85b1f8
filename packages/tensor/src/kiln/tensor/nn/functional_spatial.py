"""The spatial functions of `kiln.tensor.nn.functional`: convolutions, pooling, padding, resampling, pixel shuffles
and `unfold` / `fold` (im2col and its adjoint), with `torch.nn.functional`'s signatures and defaults.

They call the Tensor methods of the same names; `unfold` and `fold` are a convolution and a transposed convolution
with a one-hot weight that copies each (channel, kernel row, kernel column) into a channel of its own. Import them
from `kiln.tensor.nn.functional`.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, cast

from kiln.tensor.ops.pooling import Size
from kiln.tensor.tensor import Tensor

__all__ = [
    "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices",
    "adaptive_max_pool3d_with_indices",
    "lp_pool1d",
    "lp_pool2d",
    "lp_pool3d",
    "max_pool1d_with_indices",
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "fold",
    "interpolate",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_unpool1d",
    "max_unpool2d",
    "max_unpool3d",
    "pad",
    "pixel_shuffle",
    "pixel_unshuffle",
    "unfold",
    "upsample",
    "upsample_bilinear",
    "upsample_nearest",
]

Pair = int | tuple[int, int]
OutputSize = int | None | tuple[int | None, ...]


def conv1d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
    groups: int = 1,
) -> Tensor:  # fmt: skip
    """1-d cross-correlation of (N, C_in, L) with weight (C_out, C_in / groups, k), like `torch.nn.functional.conv1d`
    (`padding` an int, a tuple, 'valid' or 'same')."""
    return input.conv1d(weight, bias, stride, padding, dilation, groups)


def conv2d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
    groups: int = 1,
) -> Tensor:  # fmt: skip
    """2-d cross-correlation of (N, C_in, H, W) with weight (C_out, C_in / groups, kh, kw), like
    `torch.nn.functional.conv2d`."""
    return input.conv2d(weight, bias, stride, padding, dilation, groups)


def conv3d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
    groups: int = 1,
) -> Tensor:  # fmt: skip
    """3-d cross-correlation of (N, C_in, D, H, W), like `torch.nn.functional.conv3d`."""
    return input.conv3d(weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
    output_padding: Any = 0, groups: int = 1, dilation: Any = 1,
) -> Tensor:  # fmt: skip
    """The transposed 1-d convolution, weight (C_in, C_out / groups, k), like
    `torch.nn.functional.conv_transpose1d`."""
    return input.conv_transpose1d(weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
    output_padding: Any = 0, groups: int = 1, dilation: Any = 1,
) -> Tensor:  # fmt: skip
    """The transposed 2-d convolution, weight (C_in, C_out / groups, kh, kw), like
    `torch.nn.functional.conv_transpose2d`."""
    return input.conv_transpose2d(weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
    output_padding: Any = 0, groups: int = 1, dilation: Any = 1,
) -> Tensor:  # fmt: skip
    """The transposed 3-d convolution, like `torch.nn.functional.conv_transpose3d`."""
    return input.conv_transpose3d(weight, bias, stride, padding, output_padding, groups, dilation)


def avg_pool1d(
    input: Tensor, kernel_size: Size, stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:  # fmt: skip
    """Mean over sliding windows of (N, C, L), like `torch.nn.functional.avg_pool1d`."""
    return input.avg_pool1d(kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool2d(
    input: Tensor, kernel_size: Size, stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
    count_include_pad: bool = True, divisor_override: int | None = None,
) -> Tensor:  # fmt: skip
    """Mean over sliding windows of (N, C, H, W), like `torch.nn.functional.avg_pool2d`."""
    return input.avg_pool2d(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(
    input: Tensor, kernel_size: Size, stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
    count_include_pad: bool = True, divisor_override: int | None = None,
) -> Tensor:  # fmt: skip
    """Mean over sliding windows of (N, C, D, H, W), like `torch.nn.functional.avg_pool3d`."""
    return input.avg_pool3d(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def max_pool1d(
    input: Tensor, kernel_size: Size, stride: Size | None = None, padding: Size = 0, dilation: Size = 1,
    ceil_mode: bool = False, return_indices: bool = False,
) -> Any:  # fmt: skip
    """Maximum over sliding windows of (N, C, L) (and the flat indices with `return_indices`), like
    `torch.nn.functional.max_pool1d`."""
    return input.max_pool1d(kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(
    input: Tensor, kernel_size: Size, stride: Size | None = None, padding: Size = 0, dilation: Size = 1,
    ceil_mode: bool = False, return_indices: bool = False,
) -> Any:  # fmt: skip
    """Maximum over sliding windows of (N, C, H, W), like `torch.nn.functional.max_pool2d`."""
    return input.max_pool2d(kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(
    input: Tensor, kernel_size: Size, stride: Size | None = None, padding: Size = 0, dilation: Size = 1,
    ceil_mode: bool = False, return_indices: bool = False,
) -> Any:  # fmt: skip
    """Maximum over sliding windows of (N, C, D, H, W), like `torch.nn.functional.max_pool3d`."""
    return input.max_pool3d(kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_unpool1d(
    input: Tensor, indices: Tensor, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
    output_size: tuple[int, ...] | None = None,
) -> Tensor:  # fmt: skip
    """Scatters pooled maxima back to the positions `max_pool1d(return_indices=True)` found, zeros elsewhere, like
    `torch.nn.functional.max_unpool1d`."""
    return input.max_unpool1d(indices, kernel_size, stride, padding, output_size)


def max_unpool2d(
    input: Tensor, indices: Tensor, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
    output_size: tuple[int, ...] | None = None,
) -> Tensor:  # fmt: skip
    """The inverse of `max_pool2d` with indices, like `torch.nn.functional.max_unpool2d`."""
    return input.max_unpool2d(indices, kernel_size, stride, padding, output_size)


def max_unpool3d(
    input: Tensor, indices: Tensor, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
    output_size: tuple[int, ...] | None = None,
) -> Tensor:  # fmt: skip
    """The inverse of `max_pool3d` with indices, like `torch.nn.functional.max_unpool3d`."""
    return input.max_unpool3d(indices, kernel_size, stride, padding, output_size)


def adaptive_avg_pool1d(input: Tensor, output_size: OutputSize) -> Tensor:
    """Mean pooling to `output_size` positions, like `torch.nn.functional.adaptive_avg_pool1d`."""
    return input.adaptive_avg_pool1d(output_size)


def adaptive_avg_pool2d(input: Tensor, output_size: OutputSize) -> Tensor:
    """Mean pooling to an (H, W) grid (None keeps a size), like `torch.nn.functional.adaptive_avg_pool2d`."""
    return input.adaptive_avg_pool2d(output_size)


def adaptive_avg_pool3d(input: Tensor, output_size: OutputSize) -> Tensor:
    """Mean pooling to a (D, H, W) grid, like `torch.nn.functional.adaptive_avg_pool3d`."""
    return input.adaptive_avg_pool3d(output_size)


def adaptive_max_pool1d(input: Tensor, output_size: OutputSize, return_indices: bool = False) -> Any:
    """Max pooling to `output_size` positions, like `torch.nn.functional.adaptive_max_pool1d`."""
    return input.adaptive_max_pool1d(output_size, return_indices)


def adaptive_max_pool2d(input: Tensor, output_size: OutputSize, return_indices: bool = False) -> Any:
    """Max pooling to an (H, W) grid, like `torch.nn.functional.adaptive_max_pool2d`."""
    return input.adaptive_max_pool2d(output_size, return_indices)


def adaptive_max_pool3d(input: Tensor, output_size: OutputSize, return_indices: bool = False) -> Any:
    """Max pooling to a (D, H, W) grid, like `torch.nn.functional.adaptive_max_pool3d`."""
    return input.adaptive_max_pool3d(output_size, return_indices)


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pads the last len(pad) / 2 dims, `pad` listing (before, after) from the last dim backwards; modes 'constant',
    'reflect', 'replicate', 'circular', like `torch.nn.functional.pad`.

    Example:
        >>> pad(Tensor([[1.0, 2.0]]), (1, 0), value=9.0).tolist()
        [[9.0, 1.0, 2.0]]
    """
    return input.pad(pad, mode, 0.0 if value is None else value)


def interpolate(
    input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest", align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None, antialias: bool = False,
) -> Tensor:  # fmt: skip
    """Resamples the spatial dims of (N, C, *) to `size` or by `scale_factor` ('nearest', 'nearest-exact', 'linear',
    'bilinear', 'bicubic', 'trilinear', 'area'), like `torch.nn.functional.interpolate`. kiln has no antialiasing
    filter: `antialias=True` raises NotImplementedError."""
    if antialias:
        raise NotImplementedError(f"interpolate(antialias=True) is not supported by kiln (mode {mode!r})")
    return input.interpolate(size, scale_factor, mode, align_corners, recompute_scale_factor)


def upsample(
    input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest", align_corners: bool | None = None
) -> Tensor:
    """`interpolate` under its deprecated name, like `torch.nn.functional.upsample`."""
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return input.interpolate(size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """Nearest-neighbour `interpolate`, like `torch.nn.functional.upsample_nearest` (deprecated there)."""
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return input.interpolate(size, scale_factor, "nearest")


def upsample_bilinear(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """Bilinear `interpolate` with align_corners=True, like `torch.nn.functional.upsample_bilinear`."""
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return input.interpolate(size, scale_factor, "bilinear", True)


def _check_factor(factor: object, name: str, what: str) -> int:
    if isinstance(factor, bool) or not isinstance(factor, int) or factor <= 0:
        raise RuntimeError(f"{name} expects a positive {what}, but got {factor!r}")
    return factor


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C r**2, H, W) -> (*, C, H r, W r), channel c r**2 + i r + j becoming offset (i, j) of each r x r block,
    like `torch.nn.functional.pixel_shuffle`."""
    factor = _check_factor(upscale_factor, "pixel_shuffle", "upscale_factor")
    if input.ndim < 3:
        raise RuntimeError(
            f"pixel_shuffle expects input to have at least 3 dimensions, but got input with {input.ndim} dimension(s)"
        )
    *batch, channels, height, width = input.shape
    if channels % (factor * factor) != 0:
        raise RuntimeError(
            "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of upscale_factor, "
            f"but input.size(-3)={channels} is not divisible by {factor * factor}"
        )
    lead = len(batch)
    blocks = input.reshape(*batch, channels // (factor * factor), factor, factor, height, width)
    moved = blocks.permute(*range(lead), lead, lead + 3, lead + 1, lead + 4, lead + 2)
    return moved.reshape(*batch, channels // (factor * factor), height * factor, width * factor)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H r, W r) -> (*, C r**2, H, W), the inverse of `pixel_shuffle`, like
    `torch.nn.functional.pixel_unshuffle`."""
    factor = _check_factor(downscale_factor, "pixel_unshuffle", "downscale_factor")
    if input.ndim < 3:
        raise RuntimeError(
            f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with {input.ndim} dimension(s)"
        )
    *batch, channels, height, width = input.shape
    for name, position, size in (("height", -2, height), ("width", -1, width)):
        if size % factor != 0:
            raise RuntimeError(
                f"pixel_unshuffle expects {name} to be divisible by downscale_factor, but "
                f"input.size({position})={size} is not divisible by {factor}"
            )
    lead = len(batch)
    blocks = input.reshape(*batch, channels, height // factor, factor, width // factor, factor)
    moved = blocks.permute(*range(lead), lead, lead + 2, lead + 4, lead + 1, lead + 3)
    return moved.reshape(*batch, channels * factor * factor, height // factor, width // factor)


def _pair(value: Pair, name: str, minimum: int) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in pair):
        raise RuntimeError(f"{name} must be an int or a pair of ints >= {minimum}, got {value!r}")
    return pair[0], pair[1]


def _im2col_weight(channels: int, kernel: tuple[int, int], like: Tensor) -> Tensor:
    # output channel c * kh * kw + i * kw + j copies input channel c at kernel offset (i, j): torch's column order
    count = channels * kernel[0] * kernel[1]
    return Tensor.eye(count, dtype=like.dtype, device=like.device).reshape(count, channels, *kernel)


def unfold(input: Tensor, kernel_size: Pair, dilation: Pair = 1, padding: Pair = 0, stride: Pair = 1) -> Tensor:
    """Sliding (C, kh, kw) blocks of (N, C, H, W) or (C, H, W) as columns: (N, C kh kw, L), like
    `torch.nn.functional.unfold` (im2col). Not `Tensor.unfold`, which windows one dim.

    Example:
        >>> unfold(Tensor.arange(4.0).reshape(1, 1, 2, 2), 1).tolist()
        [[[0.0, 1.0, 2.0, 3.0]]]
    """
    if input.ndim not in (3, 4):
        raise RuntimeError(
            "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for "
            f"input, but got: {list(input.shape)}"
        )
    batched = input if input.ndim == 4 else input.unsqueeze(0)
    kernel = _pair(kernel_size, "unfold kernel_size", 1)
    weight = _im2col_weight(batched.shape[1], kernel, batched)
    columns = batched.conv2d(
        weight, None, _pair(stride, "unfold stride", 1), _pair(padding, "unfold padding", 0),
        _pair(dilation, "unfold dilation", 1),
    )  # fmt: skip
    flat = columns.reshape(columns.shape[0], columns.shape[1], -1)
    return flat if input.ndim == 4 else flat.squeeze(0)


def fold(
    input: Tensor, output_size: Pair, kernel_size: Pair, dilation: Pair = 1, padding: Pair = 0, stride: Pair = 1
) -> Tensor:
    """Sums columns (N, C kh kw, L) back into an (N, C, *output_size) image (overlaps add up), the adjoint of
    `unfold`, like `torch.nn.functional.fold` (col2im)."""
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported (got {input.ndim}D)"
        )
    batched = input if input.ndim == 3 else input.unsqueeze(0)
    size = _pair(output_size, "fold output_size", 1)
    kernel = _pair(kernel_size, "fold kernel_size", 1)
    steps, pads, dilations = (
        _pair(stride, "fold stride", 1),
        _pair(padding, "fold padding", 0),
        _pair(dilation, "fold dilation", 1),
    )
    block = kernel[0] * kernel[1]
    if batched.shape[1] % block != 0:
        raise RuntimeError(
            f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got "
            f"input.size(1)={batched.shape[1]} and kernel_size={kernel}"
        )
    blocks = [
        (size[axis] + 2 * pads[axis] - dilations[axis] * (kernel[axis] - 1) - 1) // steps[axis] + 1 for axis in (0, 1)
    ]
    if blocks[0] * blocks[1] != batched.shape[2]:
        raise RuntimeError(
            f"Given output_size={size}, kernel_size={kernel}, dilation={dilations}, padding={pads}, stride={steps}, "
            f"expected size of input's dimension 2 to match the calculated number of sliding blocks "
            f"{blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]}, but got input.size(2)={batched.shape[2]}."
        )
    channels = batched.shape[1] // block
    grid = batched.reshape(batched.shape[0], batched.shape[1], blocks[0], blocks[1])
    reached = [(blocks[a] - 1) * steps[a] - 2 * pads[a] + dilations[a] * (kernel[a] - 1) + 1 for a in (0, 1)]
    extra = (size[0] - reached[0], size[1] - reached[1])
    image = grid.conv_transpose2d(_im2col_weight(channels, kernel, batched), None, steps, pads, extra, 1, dilations)
    return image if input.ndim == 3 else image.squeeze(0)


P = ParamSpec("P")


def _with_indices(pool: Callable[P, Any]) -> Callable[P, Any]:
    """torch's `<pool>_with_indices`: `pool` (a max pool with `return_indices`), with its arguments, always returning
    (values, flat indices)."""
    signature, name = inspect.signature(pool), f"{pool.__name__}_with_indices"

    @functools.wraps(pool)
    def with_indices(*args: P.args, **kwargs: P.kwargs) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.arguments["return_indices"] = True
        return cast(Callable[..., Any], pool)(*bound.args, **bound.kwargs)

    with_indices.__name__ = with_indices.__qualname__ = name
    with_indices.__doc__ = f"(values, indices) of `{pool.__name__}`, like `torch.nn.functional.{name}`."
    return with_indices


max_pool1d_with_indices = _with_indices(max_pool1d)
max_pool2d_with_indices = _with_indices(max_pool2d)
max_pool3d_with_indices = _with_indices(max_pool3d)
adaptive_max_pool1d_with_indices = _with_indices(adaptive_max_pool1d)
adaptive_max_pool2d_with_indices = _with_indices(adaptive_max_pool2d)
adaptive_max_pool3d_with_indices = _with_indices(adaptive_max_pool3d)


def lp_pool1d(
    input: Tensor, norm_type: float, kernel_size: Size, stride: Size | None = None, ceil_mode: bool = False
) -> Tensor:
    """(sum of x**p over each window)**(1/p), like `torch.nn.functional.lp_pool1d`."""
    return input.lp_pool1d(norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(
    input: Tensor, norm_type: float, kernel_size: Size, stride: Size | None = None, ceil_mode: bool = False
) -> Tensor:
    """(sum of x**p over each window)**(1/p) over (N, C, H, W), like `torch.nn.functional.lp_pool2d`."""
    return input.lp_pool2d(norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(
    input: Tensor, norm_type: float, kernel_size: Size, stride: Size | None = None, ceil_mode: bool = False
) -> Tensor:
    """(sum of x**p over each window)**(1/p) over (N, C, D, H, W), like `torch.nn.functional.lp_pool3d`."""
    return input.lp_pool3d(norm_type, kernel_size, stride, ceil_mode)
