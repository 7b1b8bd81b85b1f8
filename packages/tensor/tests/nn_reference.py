"""numpy reference implementations of the kiln.tensor.nn layers (float64, direct transcriptions of PyTorch's
documented definitions) and a central-difference gradient for the gradient checks."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def conv(
    x: Array,
    weight: Array,
    bias: Array | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> Array:
    """N-d cross-correlation by direct loops over output positions and kernel taps."""
    dims = weight.ndim - 2
    x = np.pad(x, [(0, 0), (0, 0), *[(p, p) for p in padding]])
    batch, channels = x.shape[:2]
    out_channels = weight.shape[0]
    kernel = weight.shape[2:]
    out_shape = [(x.shape[2 + d] - dilation[d] * (kernel[d] - 1) - 1) // stride[d] + 1 for d in range(dims)]
    result = np.zeros((batch, out_channels, *out_shape))
    per_group_in, per_group_out = channels // groups, out_channels // groups
    for position in itertools.product(*[range(size) for size in out_shape]):
        for tap in itertools.product(*[range(size) for size in kernel]):
            index = tuple(position[d] * stride[d] + tap[d] * dilation[d] for d in range(dims))
            for group in range(groups):
                inputs = x[(slice(None), slice(group * per_group_in, (group + 1) * per_group_in), *index)]
                taps = weight[(slice(group * per_group_out, (group + 1) * per_group_out), slice(None), *tap)]
                result[(slice(None), slice(group * per_group_out, (group + 1) * per_group_out), *position)] += (
                    inputs @ taps.T
                )
    if bias is not None:
        result += bias.reshape(1, -1, *([1] * dims))
    return result


def conv_transpose(
    x: Array,
    weight: Array,
    bias: Array | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    output_padding: tuple[int, ...],
) -> Array:
    """N-d transposed convolution (groups 1, dilation 1) by scattering every input element times the kernel."""
    dims = weight.ndim - 2
    batch, _ = x.shape[:2]
    out_channels, kernel = weight.shape[1], weight.shape[2:]
    full = [(x.shape[2 + d] - 1) * stride[d] + kernel[d] + output_padding[d] for d in range(dims)]
    result = np.zeros((batch, out_channels, *full))
    for position in itertools.product(*[range(size) for size in x.shape[2:]]):
        values = x[(slice(None), slice(None), *position)]  # (batch, in)
        for tap in itertools.product(*[range(size) for size in kernel]):
            target = tuple(position[d] * stride[d] + tap[d] for d in range(dims))
            result[(slice(None), slice(None), *target)] += values @ weight[(slice(None), slice(None), *tap)]
    crop = tuple(slice(padding[d], full[d] - padding[d]) for d in range(dims))
    result = result[(slice(None), slice(None), *crop)]
    if bias is not None:
        result += bias.reshape(1, -1, *([1] * dims))
    return result


def max_pool2d(x: Array, kernel: int, stride: int) -> Array:
    """2-d max pooling without padding."""
    height = (x.shape[2] - kernel) // stride + 1
    width = (x.shape[3] - kernel) // stride + 1
    result = np.empty((*x.shape[:2], height, width))
    for i, j in itertools.product(range(height), range(width)):
        window = x[:, :, i * stride : i * stride + kernel, j * stride : j * stride + kernel]
        result[:, :, i, j] = window.max(axis=(2, 3))
    return result


def avg_pool2d(x: Array, kernel: int, stride: int) -> Array:
    """2-d average pooling without padding."""
    height = (x.shape[2] - kernel) // stride + 1
    width = (x.shape[3] - kernel) // stride + 1
    result = np.empty((*x.shape[:2], height, width))
    for i, j in itertools.product(range(height), range(width)):
        window = x[:, :, i * stride : i * stride + kernel, j * stride : j * stride + kernel]
        result[:, :, i, j] = window.mean(axis=(2, 3))
    return result


def batch_norm_train(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    """Normalization by the batch statistics over every dim but 1 (biased variance)."""
    axes = (0, *range(2, x.ndim))
    view = (1, -1, *([1] * (x.ndim - 2)))
    mean = x.mean(axes, keepdims=True)
    variance = x.var(axes, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight.reshape(view) + bias.reshape(view)


def group_norm(x: Array, groups: int, weight: Array, bias: Array, eps: float) -> Array:
    """Normalization over each group of channels and the spatial dims."""
    grouped = x.reshape(x.shape[0], groups, -1)
    mean = grouped.mean(-1, keepdims=True)
    variance = grouped.var(-1, keepdims=True)
    normalized = ((grouped - mean) / np.sqrt(variance + eps)).reshape(x.shape)
    view = (1, -1, *([1] * (x.ndim - 2)))
    return normalized * weight.reshape(view) + bias.reshape(view)


def layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    """Normalization over the last dim."""
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps) * weight + bias


def rms_norm(x: Array, weight: Array, eps: float) -> Array:
    """x / sqrt(mean(x**2) + eps) * weight over the last dim."""
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def softmax(x: Array) -> Array:
    """Softmax over the last dim."""
    shifted = np.exp(x - x.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def multihead_attention(
    query: Array,
    key: Array,
    value: Array,
    in_weight: Array,
    in_bias: Array,
    out_weight: Array,
    out_bias: Array,
    heads: int,
) -> tuple[Array, Array]:
    """torch.nn.MultiheadAttention's forward for (L, N, E) inputs: (output, weights averaged over heads)."""
    embed = query.shape[-1]
    head_dim = embed // heads
    wq, wk, wv = np.split(in_weight, 3)
    bq, bk, bv = np.split(in_bias, 3)
    q, k, v = query @ wq.T + bq, key @ wk.T + bk, value @ wv.T + bv

    def split(t: Array) -> Array:  # (L, N, E) -> (N, heads, L, head_dim)
        return t.reshape(t.shape[0], t.shape[1], heads, head_dim).transpose(1, 2, 0, 3)

    q, k, v = split(q), split(k), split(v)
    weights = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_dim))
    attended = (weights @ v).transpose(2, 0, 1, 3).reshape(query.shape[0], query.shape[1], embed)
    return attended @ out_weight.T + out_bias, weights.mean(1)


def numerical_gradient(function: Callable[[], float], array: Array, step: float = 1e-6) -> Array:
    """d function() / d array by central differences, perturbing `array` in place."""
    gradient = np.zeros_like(array)
    flat, flat_gradient = array.reshape(-1), gradient.reshape(-1)
    for index in range(flat.size):
        original = flat[index]
        flat[index] = original + step
        plus = function()
        flat[index] = original - step
        minus = function()
        flat[index] = original
        flat_gradient[index] = (plus - minus) / (2 * step)
    return gradient
