"""GridSample (nearest / linear / cubic over 1 to 3 spatial dims, zeros / border / reflection padding) and
AffineGrid: sampling at positions that are data, so taps are gathered from the flattened spatial dims."""

from __future__ import annotations

import itertools
import math

from kiln.tensor import dtypes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import all_checks, one_of, operator
from kiln.tensor.tensor import Tensor

__all__: list[str] = []

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}


def _reflect(x: Tensor, low: float, high: float) -> Tensor:
    """x folded back into [low, high] by mirroring at the ends, as often as it takes."""
    span = high - low
    below, above = low - x, x - high
    distance = (x < low).where(below, above)
    count = (distance / span).trunc()
    remainder = distance - count * span
    even = count.fmod(2) == 0
    from_low, from_high = low + remainder, high - remainder
    folded = (x < low).where(even.where(from_low, from_high), even.where(from_high, from_low))
    return ((x < low) | (x > high)).where(folded, x)


def _cubic_weights(t: Tensor) -> list[Tensor]:
    a = -0.75
    return [
        ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
        ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a,
    ]


@operator(
    "GridSample",
    attributes=["align_corners", "mode", "padding_mode"],
    since=16,
    check=all_checks(
        one_of("mode", list(_MODES), "linear"), one_of("padding_mode", ["zeros", "border", "reflection"], "zeros")
    ),
)
def _grid_sample(call: NodeCall) -> Tensor:
    x, grid = call.tensor(0), call.tensor(1).cast(dtypes.float32)
    mode = _MODES[call.attributes.string("mode", "bilinear" if call.opset < 20 else "linear")]
    padding = call.attributes.string("padding_mode", "zeros")
    align = bool(call.attributes.int("align_corners", 0))
    batch, channels, *dims = x.shape
    spatial = len(dims)
    out_shape = grid.shape[1:-1]
    taps_per_dim: list[list[tuple[Tensor, Tensor]]] = []
    for axis, size in enumerate(dims):
        # the grid's last dim lists coordinates innermost dim first (x, y, z)
        normalized = grid[..., spatial - 1 - axis]
        position = (normalized + 1) / 2 * (size - 1) if align else ((normalized + 1) * size - 1) / 2
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            position = position.round()
        if padding == "border":
            position = ((position < low) | (position > high)).where(position.clip(0, size - 1), position)
        elif padding == "reflection":
            position = _reflect(position, low, high)
        if mode == "nearest":
            taps = [(position, position.ones_like())]
        else:
            base = position.floor()
            fraction = position - base
            offsets = [0, 1] if mode == "linear" else [-1, 0, 1, 2]
            weights = [1 - fraction, fraction] if mode == "linear" else _cubic_weights(fraction)
            taps = [(base + offset, weight) for offset, weight in zip(offsets, weights)]
        resolved = []
        for index, weight in taps:
            if padding == "border":
                index = index.clip(0, size - 1)
            elif padding == "reflection":
                index = _reflect(index, low, high).trunc().clip(0, size - 1)
            resolved.append((index, weight))
        taps_per_dim.append(resolved)
    flat = x.reshape(batch, channels, math.prod(dims))
    strides = [math.prod(dims[axis + 1 :]) for axis in range(spatial)]
    points = math.prod(out_shape)
    result: Tensor | None = None
    for combination in itertools.product(*taps_per_dim):
        offset = grid.zeros_like()[..., 0]
        weight = offset.ones_like()
        valid = offset.ones_like().cast(dtypes.bool)
        for (index, tap_weight), stride, size in zip(combination, strides, dims):
            valid = valid & (index >= 0) & (index <= size - 1)
            offset = offset + index.clip(0, size - 1) * stride
            weight = weight * tap_weight
        positions = offset.cast(dtypes.int64).reshape(batch, 1, points).expand(batch, channels, points)
        picked = flat.gather(2, positions).cast(dtypes.float32)
        contribution = picked * valid.where(weight, 0.0).reshape(batch, 1, points)
        result = contribution if result is None else result + contribution
    assert result is not None
    return result.reshape(batch, channels, *out_shape).cast(x.dtype)


@operator("AffineGrid", attributes=["align_corners"], since=20)
def _affine_grid(call: NodeCall) -> Tensor:
    theta = call.tensor(0)
    size = call.ints(1)
    batch, dims = size[0], size[2:]
    align = bool(call.attributes.int("align_corners", 0))
    axes = []
    for length in dims:
        steps = Tensor.arange(length, dtype=dtypes.float32)
        if align:
            coordinate = steps * (2.0 / (length - 1)) - 1 if length > 1 else steps * 0
        else:
            coordinate = (steps * 2 + 1) / length - 1
        axes.append(coordinate)
    # base grid: one row (x, y[, z], 1) per output position, x varying fastest
    grids = Tensor.meshgrid(*axes, indexing="ij")
    columns = [grids[axis].reshape(-1) for axis in reversed(range(len(dims)))]
    base = Tensor.stack(*columns, columns[0].ones_like(), dim=-1)
    grid = base.unsqueeze(0).matmul(theta.cast(dtypes.float32).transpose(-1, -2))
    return grid.reshape(batch, *dims, len(dims)).cast(theta.dtype)


def _bilinear_gather(flat: Tensor, height: int, width: int, rows: Tensor, columns: Tensor) -> Tensor:
    """flat (batch, channels, height * width) sampled at pixel positions rows / columns (batch, channels, points):
    bilinear, corners outside the image count as zero."""
    row_low, column_low = rows.floor(), columns.floor()
    result: Tensor | None = None
    for row_step in (0, 1):
        for column_step in (0, 1):
            row, column = row_low + row_step, column_low + column_step
            weight = (1 - (rows - row).abs()) * (1 - (columns - column).abs())
            inside = (row >= 0) & (row <= height - 1) & (column >= 0) & (column <= width - 1)
            index = (row.clip(0, height - 1) * width + column.clip(0, width - 1)).cast(dtypes.int64)
            value = flat.gather(2, index) * inside.where(weight, 0.0)
            result = value if result is None else result + value
    assert result is not None
    return result


@operator("DeformConv", attributes=["dilations", "group", "kernel_shape", "offset_group", "pads", "strides"], since=19)
def _deform_conv(call: NodeCall) -> Tensor:
    x, weight, offset, bias, mask = call.tensor(0), call.tensor(1), call.tensor(2), call.optional(3), call.optional(4)
    if x.ndim != 4:
        raise NotImplementedError(f"DeformConv over {x.ndim - 2} spatial dims (kiln samples 2)")
    batch, channels, height, width = x.shape
    out_channels, _, kernel_h, kernel_w = weight.shape
    groups, offset_groups = call.attributes.int("group", 1), call.attributes.int("offset_group", 1)
    stride_h, stride_w = call.attributes.ints("strides") or [1, 1]
    dilation_h, dilation_w = call.attributes.ints("dilations") or [1, 1]
    pad_top, pad_left = (call.attributes.ints("pads") or [0, 0, 0, 0])[:2]
    out_h, out_w = offset.shape[2], offset.shape[3]
    taps = kernel_h * kernel_w
    # where each tap of each output position reads, before the learned offsets
    base_rows = (
        Tensor.arange(kernel_h, dtype=dtypes.float32).reshape(kernel_h, 1, 1, 1) * dilation_h
        + Tensor.arange(out_h, dtype=dtypes.float32).reshape(1, 1, out_h, 1) * stride_h
        - pad_top
    )
    base_columns = (
        Tensor.arange(kernel_w, dtype=dtypes.float32).reshape(1, kernel_w, 1, 1) * dilation_w
        + Tensor.arange(out_w, dtype=dtypes.float32).reshape(1, 1, 1, out_w) * stride_w
        - pad_left
    )
    shifts = offset.cast(dtypes.float32).reshape(batch, offset_groups, kernel_h, kernel_w, 2, out_h, out_w)
    rows = (shifts[:, :, :, :, 0] + base_rows).repeat_interleave(channels // offset_groups, 1)
    columns = (shifts[:, :, :, :, 1] + base_columns).repeat_interleave(channels // offset_groups, 1)
    points = taps * out_h * out_w
    flat = x.cast(dtypes.float32).reshape(batch, channels, height * width)
    sampled = _bilinear_gather(
        flat, height, width, rows.reshape(batch, channels, points), columns.reshape(batch, channels, points)
    )
    if mask is not None:
        scale = mask.cast(dtypes.float32).reshape(batch, offset_groups, taps * out_h * out_w)
        sampled = sampled * scale.repeat_interleave(channels // offset_groups, 1)
    # a grouped convolution of the sampled taps: per group, (out, in * taps) @ (in * taps, positions)
    columns_in = sampled.reshape(batch, groups, (channels // groups) * taps, out_h * out_w)
    kernels = weight.cast(dtypes.float32).reshape(1, groups, out_channels // groups, (channels // groups) * taps)
    result = kernels.matmul(columns_in).reshape(batch, out_channels, out_h, out_w)
    if bias is not None:
        result = result + bias.cast(dtypes.float32).reshape(1, -1, 1, 1)
    return result.cast(x.dtype)
