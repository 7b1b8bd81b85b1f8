"""The weight gradient of a convolution with few channel pairs (out x in / groups < 32), summed in two batch parts by
one kernel and then added (kiln.tensor.ops.convolution._split_weight_gradient), against a float64 numpy oracle: plain,
grouped, strided, dilated, padded, 1-d and 3-d, float16, and a batch that does not split (the plain path)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.ops import convolution
from kiln.tensor.ops.windows import sliding_windows

Array = np.ndarray[Any, Any]


def _weight_gradient(
    x: Array, g: Array, kernel: tuple[int, ...], stride: int, padding: int, dilation: int, groups: int
) -> Array:
    """d/dw of sum(g * conv(x, w)) in float64: each tap's window of the padded input times g, summed."""
    spatial = len(kernel)
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(padding, padding)] * spatial)
    batch, channels = x.shape[:2]
    out_channels, out = g.shape[1], g.shape[2:]
    per_group, group_channels = out_channels // groups, channels // groups
    result = np.zeros((out_channels, group_channels, *kernel))
    for tap in np.ndindex(*kernel):
        cells = tuple(
            slice(t * dilation, t * dilation + (count - 1) * stride + 1, stride) for t, count in zip(tap, out)
        )
        window = padded[(slice(None), slice(None), *cells)]  # (batch, channels, *out)
        for group in range(groups):
            ins = window[:, group * group_channels : (group + 1) * group_channels].reshape(batch, group_channels, -1)
            ups = g[:, group * per_group : (group + 1) * per_group].astype(np.float64).reshape(batch, per_group, -1)
            result[(slice(group * per_group, (group + 1) * per_group), slice(None), *tap)] = np.einsum(
                "nop,ncp->oc", ups, ins
            )
    return result


CASES = [
    # (name, input shape, weight shape, stride, padding, dilation, groups)
    ("small CNN's first conv", (8, 1, 12, 12), (8, 1, 3, 3), 1, 0, 1, 1),
    ("grouped", (6, 4, 9, 7), (6, 2, 3, 2), 1, 1, 1, 2),
    ("strided and dilated", (4, 3, 11, 10), (5, 3, 3, 3), 2, 2, 2, 1),
    ("1-d", (10, 2, 15), (3, 2, 4), 1, 1, 1, 1),
    ("3-d", (4, 2, 5, 4, 6), (3, 2, 2, 3, 2), 1, 0, 1, 1),
    ("odd batch (not split)", (5, 2, 8, 8), (4, 2, 3, 3), 1, 1, 1, 1),
]


@pytest.mark.parametrize(
    ("shape", "weight_shape", "stride", "padding", "dilation", "groups"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_small_weight_gradients_match_the_oracle(
    shape: tuple[int, ...], weight_shape: tuple[int, ...], stride: int, padding: int, dilation: int, groups: int
) -> None:
    assert weight_shape[0] * weight_shape[1] < convolution.WEIGHT_GRADIENT_SPLIT_CHANNELS
    rng = np.random.default_rng(sum(shape))
    x_data = rng.standard_normal(shape).astype(np.float32)
    w_data = rng.standard_normal(weight_shape).astype(np.float32)
    x, w = Tensor(x_data), Tensor(w_data, requires_grad=True)
    conv = {3: x.conv1d, 4: x.conv2d, 5: x.conv3d}[len(shape)]
    result = conv(w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    g = rng.standard_normal(result.shape).astype(np.float32)
    (w_grad,) = result.gradient(w, gradient=Tensor(g))
    expected = _weight_gradient(x_data, g, weight_shape[2:], stride, padding, dilation, groups)
    assert w_grad.shape == w.shape and w_grad.dtype == w.dtype
    np.testing.assert_allclose(w_grad.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_the_split_is_taken_for_an_even_batch_and_few_channel_pairs_only() -> None:
    w = Tensor.ones(8, 1, 3, 3)
    windows = sliding_windows(Tensor.ones(4, 1, 6, 6), (3, 3), (1, 1), (1, 1))  # (4, 1, 4, 4, 3, 3)
    split = convolution._split_weight_gradient(Tensor.ones(4, 8, 4, 4), windows, w, 1)
    assert split is not None and split.shape == w.shape
    np.testing.assert_allclose(split.numpy(), np.full((8, 1, 3, 3), 4 * 16.0))
    odd = sliding_windows(Tensor.ones(3, 1, 6, 6), (3, 3), (1, 1), (1, 1))
    assert convolution._split_weight_gradient(Tensor.ones(3, 8, 4, 4), odd, w, 1) is None
    wide = Tensor.ones(8, 4, 3, 3)  # 32 channel pairs: the plain weight gradient
    many = sliding_windows(Tensor.ones(4, 4, 6, 6), (3, 3), (1, 1), (1, 1))
    assert convolution._split_weight_gradient(Tensor.ones(4, 8, 4, 4), many, wide, 1) is None


def test_float16_weight_gradient_sums_in_float32() -> None:
    rng = np.random.default_rng(2)
    x_data = rng.standard_normal((16, 1, 10, 10)).astype(np.float16)
    w_data = rng.standard_normal((4, 1, 3, 3)).astype(np.float16)
    x, w = Tensor(x_data), Tensor(w_data, requires_grad=True)
    result = x.conv2d(w)
    g = rng.standard_normal(result.shape).astype(np.float16)
    (w_grad,) = result.gradient(w, gradient=Tensor(g))
    assert w_grad.dtype == w.dtype
    expected = _weight_gradient(x_data, g, (3, 3), 1, 0, 1, 1)
    np.testing.assert_allclose(w_grad.numpy().astype(np.float64), expected, rtol=2e-2, atol=5e-2)
