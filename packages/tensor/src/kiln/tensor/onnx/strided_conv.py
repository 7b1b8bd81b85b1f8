"""A stride-2 convolution run as a stride-1 one over a space-to-depth copy of its input.

A stride-2 convolution's output columns read every other input element, so its kernel gathers each vector of
columns element by element (the strided tile of codegen's conv_tiles.py). Regrouped, the same sum is a stride-1
convolution: input row 2y + i, column 2x + j becomes channel (c, i, j) at row y, column x of a copy (space to depth,
one small kernel), and the k x k weight, zero-padded to an even 2k' x 2k', becomes k' x k' over those 4c channels.
The copy's columns are contiguous, so the convolution gets the register tile of a stride-1 one. The zero taps cost
(2k' / k)^2 the multiply-adds: 1.31x for a 7x7 kernel, 1.78x for a 3x3.

Measured on the 2-core reference machine (process CPU time of the TinyJit replay, medians of 15, loaded): the 7x7
stem of resnet18.onnx (3 -> 8 channels, 64 x 64) 3.6 -> 1.6 ms at batch 16 and 0.71 -> 0.29 ms at batch 1; its 3x3
stride-2 convolutions 0.40 -> 0.30 ms (8 -> 16 channels, 16 x 16) and 0.69 -> 0.36 ms (16 -> 32, 8 x 8), but 0.25 ->
0.40 ms over a 4 x 4 input (2 x 2 outputs); a 3x3 stem over 3 channels and depthwise convolutions gained nothing or
lost (2.5 -> 4.6 ms), so those keep the direct form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.tensor import dtypes
from kiln.tensor.tensor import Tensor

__all__ = ["space_to_depth_convolution"]

_STRIDE = 2
# the regrouped form pays for its zero taps and its copy only with a wide enough output and enough work per tap
_MIN_OUTPUT_WIDTH = 4
_MIN_CHANNELS_FOR_3X3 = 8


def _worth_it(x: Tensor, weight: Tensor, strides: Sequence[int], dilations: Sequence[int], groups: int) -> bool:
    if x.ndim != 4 or groups != 1 or list(strides) != [_STRIDE, _STRIDE] or list(dilations) != [1, 1]:
        return False
    if x.dtype != dtypes.float32 or weight.dtype != dtypes.float32:
        return False
    kernel_height, kernel_width = weight.shape[2], weight.shape[3]
    if kernel_height <= _STRIDE or kernel_width <= _STRIDE:
        return False  # a 1x1 or 2x2 kernel reads no input element twice: nothing to regroup
    output_width = (x.shape[3] - kernel_width) // _STRIDE + 1
    if output_width < _MIN_OUTPUT_WIDTH or (x.shape[3] - kernel_height) // _STRIDE + 1 < _MIN_OUTPUT_WIDTH:
        return False
    return min(kernel_height, kernel_width) >= 5 or x.shape[1] >= _MIN_CHANNELS_FOR_3X3


def _regrouped_weight(weight: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """(O, C, kh, kw) -> (O, 4C, kh', kw'): tap (2a + i, 2b + j) of channel c at channel 4c + 2i + j, tap (a, b)."""
    out_channels, in_channels, height, width = weight.shape
    height2, width2 = -(-height // _STRIDE), -(-width // _STRIDE)
    padded = np.zeros((out_channels, in_channels, height2 * _STRIDE, width2 * _STRIDE), weight.dtype)
    padded[:, :, :height, :width] = weight
    split = padded.reshape(out_channels, in_channels, height2, _STRIDE, width2, _STRIDE)
    regrouped = split.transpose(0, 1, 3, 5, 2, 4).reshape(out_channels, in_channels * _STRIDE**2, height2, width2)
    return np.ascontiguousarray(regrouped)


def _fit(x: Tensor, axis: int, size: int) -> Tensor:
    """`x` cut or zero-padded at the end of `axis` to `size` (the rows past the last output read only zero taps)."""
    current = x.shape[axis]
    if current == size:
        return x
    if current > size:
        return x[tuple(slice(0, size) if index == axis else slice(None) for index in range(x.ndim))]
    return x.pad([(0, size - current) if index == axis else (0, 0) for index in range(x.ndim)])


def space_to_depth_convolution(
    x: Tensor,
    weight: Tensor,
    weight_host: np.ndarray[Any, Any] | None,
    bias: Tensor | None,
    strides: Sequence[int],
    dilations: Sequence[int],
    groups: int,
) -> Tensor | None:
    """The stride-2 convolution of an already padded `x` regrouped as above, or None where the direct form is kept
    (other strides, dilations or groups, a kernel of 2 or less, a narrow output, a weight not known on the host)."""
    if weight_host is None or not _worth_it(x, weight, strides, dilations, groups):
        return None
    batch, channels, height, width = (int(size) for size in x.shape)
    kernel_height, kernel_width = weight.shape[2], weight.shape[3]
    regrouped = _regrouped_weight(np.asarray(weight_host, np.float32))
    # output y reads copy rows y .. y + kh' - 1: (out - 1 + kh') rows of 2 input rows each
    rows = (height - kernel_height) // _STRIDE + regrouped.shape[2]
    columns = (width - kernel_width) // _STRIDE + regrouped.shape[3]
    fitted = _fit(_fit(x, 2, rows * _STRIDE), 3, columns * _STRIDE)
    split = fitted.reshape(batch, channels, rows, _STRIDE, columns, _STRIDE)
    copy = split.permute(0, 1, 3, 5, 2, 4).reshape(batch, channels * _STRIDE**2, rows, columns).contiguous()
    return copy.conv2d(Tensor(regrouped, device=weight.device), bias)
