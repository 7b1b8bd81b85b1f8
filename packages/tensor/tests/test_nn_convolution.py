"""conv1d / conv2d / conv3d and the transposed convolutions (kiln.tensor.ops.convolution) against direct-loop numpy
references, the one-kernel fusion of conv2d, and the errors raised at the call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor.counters import GlobalCounters
from kiln.tensor.tensor import Tensor

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(99)


pytestmark = pytest.mark.default_device("PYTHON")


def _per_dim(value: Any, count: int) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * count


def convolution_reference(
    x: Array, weight: Array, bias: Array | None, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """Cross-correlation by direct loops over every output cell; padding is (before, after) pairs or an int."""
    spatial = weight.ndim - 2
    steps, rates = _per_dim(stride, spatial), _per_dim(dilation, spatial)
    pairs = [(padding, padding)] * spatial if isinstance(padding, int) else list(padding)
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pairs])
    batch = x.shape[0]
    out_channels, group_channels = weight.shape[:2]
    kernel = weight.shape[2:]
    out = [(padded.shape[2 + i] - rates[i] * (kernel[i] - 1) - 1) // steps[i] + 1 for i in range(spatial)]
    result = np.zeros((batch, out_channels, *out))
    per_group = out_channels // groups
    for n in range(batch):
        for o in range(out_channels):
            first_channel = (o // per_group) * group_channels
            for position in np.ndindex(*out):
                total = 0.0
                for c in range(group_channels):
                    for tap in np.ndindex(*kernel):
                        cell = tuple(position[i] * steps[i] + tap[i] * rates[i] for i in range(spatial))
                        total += padded[(n, first_channel + c, *cell)] * weight[(o, c, *tap)]
                result[(n, o, *position)] = total
    if bias is not None:
        result += bias.reshape(1, -1, *([1] * spatial))
    return result


def transposed_reference(
    x: Array,
    weight: Array,
    bias: Array | None,
    stride: Any,
    padding: Any,
    output_padding: Any,
    groups: int,
    dilation: Any,
) -> Array:
    """Transposed convolution by its scatter definition: each input cell adds value * kernel into the output."""
    spatial = weight.ndim - 2
    steps, pads = _per_dim(stride, spatial), _per_dim(padding, spatial)
    extra, rates = _per_dim(output_padding, spatial), _per_dim(dilation, spatial)
    batch, channels = x.shape[:2]
    per_group = weight.shape[1]
    kernel = weight.shape[2:]
    group_channels = channels // groups
    out = [
        (x.shape[2 + i] - 1) * steps[i] - 2 * pads[i] + rates[i] * (kernel[i] - 1) + extra[i] + 1
        for i in range(spatial)
    ]
    full = [out[i] + 2 * pads[i] + rates[i] * (kernel[i] - 1) + steps[i] for i in range(spatial)]
    result = np.zeros((batch, per_group * groups, *full))
    for n in range(batch):
        for c in range(channels):
            group = c // group_channels
            for position in np.ndindex(*x.shape[2:]):
                for o in range(per_group):
                    for tap in np.ndindex(*kernel):
                        cell = tuple(position[i] * steps[i] + tap[i] * rates[i] for i in range(spatial))
                        result[(n, group * per_group + o, *cell)] += x[(n, c, *position)] * weight[(c, o, *tap)]
    window = tuple(slice(pads[i], pads[i] + out[i]) for i in range(spatial))
    result = result[(slice(None), slice(None), *window)]
    if bias is not None:
        result = result + bias.reshape(1, -1, *([1] * spatial))
    return result


def _same_pairs(kernel: tuple[int, ...], dilation: Any) -> list[tuple[int, int]]:
    rates = _per_dim(dilation, len(kernel))
    totals = [rate * (size - 1) for size, rate in zip(kernel, rates)]
    return [(total // 2, total - total // 2) for total in totals]


CONV2D_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((2, 3, 6, 5), (4, 3, 3, 2), {}),
    ((1, 4, 7, 7), (6, 2, 3, 3), {"groups": 2, "stride": 2, "padding": 1}),
    ((1, 2, 8, 6), (2, 2, 2, 3), {"dilation": (2, 1), "padding": (1, 2)}),
    ((1, 2, 5, 5), (3, 2, 4, 4), {"padding": "same"}),
    ((1, 2, 5, 6), (3, 2, 3, 2), {"padding": "same", "dilation": 2}),
    ((2, 3, 5, 5), (3, 1, 3, 3), {"groups": 3, "padding": "valid", "stride": (1, 2)}),  # depthwise
    ((1, 1, 4, 4), (2, 1, 1, 1), {"stride": 3}),  # stride larger than the kernel
    ((0, 2, 4, 4), (3, 2, 2, 2), {}),  # empty batch
]


@pytest.mark.parametrize(("x_shape", "w_shape", "options"), CONV2D_CASES)
def test_conv2d_matches_direct_loops(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], options: dict[str, Any]
) -> None:
    x, weight = RNG.standard_normal(x_shape).astype(np.float32), RNG.standard_normal(w_shape).astype(np.float32)
    bias = RNG.standard_normal(w_shape[0]).astype(np.float32)
    result = Tensor(x).conv2d(Tensor(weight), Tensor(bias), **options)
    reference = dict(options)
    padding = reference.pop("padding", 0)
    if padding == "same":
        padding = _same_pairs(w_shape[2:], reference.get("dilation", 1))
    elif padding == "valid":
        padding = 0
    elif isinstance(padding, tuple):
        padding = [(amount, amount) for amount in padding]
    expected = convolution_reference(
        x, weight, bias, reference.get("stride", 1), padding, reference.get("dilation", 1), reference.get("groups", 1)
    )
    assert result.shape == expected.shape
    if expected.size:  # an empty result is all shape
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_conv2d_float64_unbatched_without_bias() -> None:
    x, weight = RNG.standard_normal((3, 5, 4)), RNG.standard_normal((2, 3, 2, 2))
    result = Tensor(x).conv2d(Tensor(weight), stride=(2, 1), padding=1)
    expected = convolution_reference(x[None], weight, None, (2, 1), 1, 1, 1)[0]
    assert result.shape == expected.shape
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_conv2d_integers_are_exact() -> None:
    x = RNG.integers(-5, 5, (1, 2, 4, 4)).astype(np.int32)
    weight = RNG.integers(-3, 3, (2, 2, 2, 2)).astype(np.int32)
    result = Tensor(x).conv2d(Tensor(weight))
    np.testing.assert_array_equal(result.numpy(), convolution_reference(x, weight, None, 1, 0, 1, 1).astype(np.int32))


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "options"),
    [
        ((2, 3, 9), (4, 3, 3), {"stride": 2, "padding": 2, "dilation": 2}),
        ((1, 4, 6), (4, 2, 2), {"groups": 2, "padding": "same"}),
    ],
)
def test_conv1d(x_shape: tuple[int, ...], w_shape: tuple[int, ...], options: dict[str, Any]) -> None:
    x, weight = RNG.standard_normal(x_shape), RNG.standard_normal(w_shape)
    bias = RNG.standard_normal(w_shape[0])
    result = Tensor(x).conv1d(Tensor(weight), Tensor(bias), **options)
    padding = _same_pairs(w_shape[2:], 1) if options.get("padding") == "same" else options.get("padding", 0)
    expected = convolution_reference(
        x, weight, bias, options.get("stride", 1), padding, options.get("dilation", 1), options.get("groups", 1)
    )
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_conv3d() -> None:
    x, weight = RNG.standard_normal((1, 2, 4, 5, 3)), RNG.standard_normal((3, 2, 2, 3, 2))
    bias = RNG.standard_normal(3)
    result = Tensor(x).conv3d(Tensor(weight), Tensor(bias), stride=(1, 2, 1), padding=(1, 0, 1))
    expected = convolution_reference(x, weight, bias, (1, 2, 1), [(1, 1), (0, 0), (1, 1)], 1, 1)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_conv2d_with_bias_and_relu_is_one_reduce_kernel() -> None:
    x_data = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    weight_data = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias_data = RNG.standard_normal(4).astype(np.float32)
    x, weight, bias = Tensor(x_data).realize(), Tensor(weight_data).realize(), Tensor(bias_data).realize()
    cases: list[tuple[dict[str, Any], Any]] = [
        ({}, 0),
        ({"stride": 2, "padding": 1}, 1),
        ({"dilation": 2, "padding": "same"}, [(2, 2), (2, 2)]),
        ({"padding": (0, 2)}, [(0, 0), (2, 2)]),
    ]
    for options, padding in cases:
        GlobalCounters.reset()
        result = x.conv2d(weight, bias, **options).relu().realize()
        assert GlobalCounters.kernel_count == 1, options
        expected = convolution_reference(
            x_data, weight_data, bias_data, options.get("stride", 1), padding, options.get("dilation", 1), 1
        )
        np.testing.assert_allclose(result.numpy(), np.maximum(expected, 0), rtol=1e-4, atol=1e-5)


def test_conv_transpose2d_is_one_reduce_kernel() -> None:
    x_data = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    weight_data = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    x, weight = Tensor(x_data).realize(), Tensor(weight_data).realize()
    GlobalCounters.reset()
    result = x.conv_transpose2d(weight, stride=2, padding=1).realize()
    assert GlobalCounters.kernel_count == 1
    expected = transposed_reference(x_data, weight_data, None, 2, 1, 0, 1, 1)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-5)


TRANSPOSED_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((2, 3, 4, 3), (3, 2, 3, 2), {}),
    ((1, 4, 3, 3), (4, 3, 3, 3), {"groups": 2, "stride": 2, "padding": 1, "output_padding": 1}),
    ((1, 2, 3, 4), (2, 2, 2, 3), {"dilation": (2, 1), "padding": (1, 2), "stride": (1, 3)}),
    ((1, 2, 3, 3), (2, 1, 2, 2), {"stride": 3, "output_padding": (2, 0)}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"padding": 2}),  # padding crops more than the kernel adds
]


@pytest.mark.parametrize(("x_shape", "w_shape", "options"), TRANSPOSED_CASES)
def test_conv_transpose2d_matches_scatter_definition(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], options: dict[str, Any]
) -> None:
    x, weight = RNG.standard_normal(x_shape), RNG.standard_normal(w_shape)
    bias = RNG.standard_normal(w_shape[1] * options.get("groups", 1))
    result = Tensor(x).conv_transpose2d(Tensor(weight), Tensor(bias), **options)
    expected = transposed_reference(
        x,
        weight,
        bias,
        options.get("stride", 1),
        options.get("padding", 0),
        options.get("output_padding", 0),
        options.get("groups", 1),
        options.get("dilation", 1),
    )
    assert result.shape == expected.shape
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_conv_transpose2d_float32_unbatched() -> None:
    x, weight = RNG.standard_normal((2, 3, 3)).astype(np.float32), RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)
    result = Tensor(x).conv_transpose2d(Tensor(weight), stride=2)
    expected = transposed_reference(x[None], weight, None, 2, 0, 0, 1, 1)[0]
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_conv_transpose1d_and_3d() -> None:
    x, weight = RNG.standard_normal((2, 2, 5)), RNG.standard_normal((2, 3, 3))
    result = Tensor(x).conv_transpose1d(Tensor(weight), stride=2, padding=1, dilation=2)
    np.testing.assert_allclose(
        result.numpy(), transposed_reference(x, weight, None, 2, 1, 0, 1, 2), rtol=1e-12, atol=1e-12
    )
    x3, weight3 = RNG.standard_normal((1, 1, 2, 2, 3)), RNG.standard_normal((1, 2, 2, 1, 2))
    result3 = Tensor(x3).conv_transpose3d(Tensor(weight3), stride=(2, 1, 1))
    np.testing.assert_allclose(
        result3.numpy(), transposed_reference(x3, weight3, None, (2, 1, 1), 0, 0, 1, 1), rtol=1e-12
    )


# ---------------------------------------------------------------------------------------------------------------
# errors at the call
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "options", "message"),
    [
        (
            (1, 3, 5, 5),
            (4, 2, 3, 3),
            {},
            r"input of shape \(1, 3, 5, 5\) has 3 channels, but weight of shape \(4, 2, 3, 3\) with groups=1 "
            r"expects 2 \* 1 = 2",
        ),
        ((1, 4, 5, 5), (3, 2, 3, 3), {"groups": 2}, r"out_channels \(3\) divisible by groups"),
        (
            (1, 3, 5, 5),
            (4, 3, 3),
            {},
            r"conv2d weight must have 4 dims \(out_channels, in_channels / groups, \*kernel\), got shape \(4, 3, 3\)",
        ),
        ((3, 5), (4, 3, 3, 3), {}, r"conv2d input must have 4 dims .* or 3 without the batch dim, got shape \(3, 5\)"),
        (
            (1, 3, 4, 4),
            (2, 3, 5, 3),
            {},
            r"kernel \(size \(5, 3\), dilation \(1, 1\): spans \(5, 3\)\) is larger than the padded input \(4, 4\)",
        ),
        ((1, 3, 4, 4), (2, 3, 3, 3), {"dilation": 2}, r"spans \(5, 5\)\) is larger than the padded input \(4, 4\)"),
        ((1, 3, 5, 5), (2, 3, 3, 3), {"stride": 0}, r"conv2d stride must be >= 1, got \(0, 0\)"),
        ((1, 3, 5, 5), (2, 3, 3, 3), {"stride": (1, 1, 1)}, r"conv2d stride needs 1 or 2 values .* got \(1, 1, 1\)"),
        # negative padding crops (tinygrad's convention), but not more than the input holds
        ((1, 3, 5, 5), (2, 3, 3, 3), {"padding": -3}, r"larger than the padded input \(-1, -1\)"),
        (
            (1, 3, 5, 5),
            (2, 3, 3, 3),
            {"padding": "full"},
            r"padding must be an int, a tuple of ints, 'same' or 'valid', got 'full'",
        ),
        (
            (1, 3, 5, 5),
            (2, 3, 3, 3),
            {"padding": "same", "stride": 2},
            r"padding='same' needs stride 1, got stride \(2, 2\)",
        ),
        ((1, 3, 5, 5), (2, 3, 3, 3), {"groups": 0}, r"conv2d groups must be >= 1, got 0"),
        ((1, 3, 5, 5), (2, 3, 0, 3), {}, r"kernel sizes must be >= 1, got weight shape \(2, 3, 0, 3\)"),
    ],
)
def test_conv2d_errors(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Tensor.zeros(*x_shape).conv2d(Tensor.zeros(*w_shape), **options)


def test_conv_argument_types_and_bias() -> None:
    with pytest.raises(TypeError, match="conv2d weight must be a Tensor, got ndarray"):
        Tensor.zeros(1, 1, 3, 3).conv2d(np.zeros((1, 1, 2, 2)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"conv1d stride must be an int, got 1.5"):
        Tensor.zeros(1, 1, 3).conv1d(Tensor.zeros(1, 1, 2), stride=1.5)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"conv2d bias must have shape \(2,\) \(one value per output channel\), got \(3,\)"
    ):
        Tensor.zeros(1, 1, 3, 3).conv2d(Tensor.zeros(2, 1, 2, 2), Tensor.zeros(3))
    with pytest.raises(TypeError, match="conv2d is not defined for bool tensors"):
        Tensor([[[[True]]]]).conv2d(Tensor([[[[True]]]]))


def test_conv_transpose_errors() -> None:
    with pytest.raises(ValueError, match=r"output_padding \(2, 2\) must be smaller than max\(stride, dilation\)"):
        Tensor.zeros(1, 1, 3, 3).conv_transpose2d(Tensor.zeros(1, 1, 2, 2), stride=2, output_padding=2)
    with pytest.raises(
        ValueError, match=r"input of shape \(1, 3, 3, 3\) has 3 channels, but weight of shape \(2, 1, 2, 2\)"
    ):
        Tensor.zeros(1, 3, 3, 3).conv_transpose2d(Tensor.zeros(2, 1, 2, 2))
    with pytest.raises(ValueError, match=r"output size \(0, 0\) is not positive"):
        Tensor.zeros(1, 1, 2, 2).conv_transpose2d(Tensor.zeros(1, 1, 3, 3), padding=2)
    with pytest.raises(
        ValueError, match=r"conv_transpose2d weight must have 4 dims \(in_channels, out_channels / groups"
    ):
        Tensor.zeros(1, 1, 2, 2).conv_transpose2d(Tensor.zeros(1, 1, 3))


def test_a_large_padded_input_is_padded_into_a_buffer_first() -> None:
    # from PADDED_INPUT_BUFFER_MINIMUM elements the padding is one copy kernel, then the guard-free reduce kernel
    x_data = RNG.standard_normal((4, 8, 30, 30)).astype(np.float32)  # padded: 4 * 8 * 32 * 32 = 32768 elements
    weight_data = RNG.standard_normal((8, 8, 3, 3)).astype(np.float32)
    weight = Tensor(weight_data).realize()
    for batch, kernels in ((4, 1), (8, 2)):
        images = Tensor(np.concatenate([x_data] * (batch // 4))).realize()
        GlobalCounters.reset()
        result = images.conv2d(weight, padding=1).realize()
        assert GlobalCounters.kernel_count == kernels, batch
        expected = convolution_reference(np.concatenate([x_data] * (batch // 4)), weight_data, None, 1, 1, 1, 1)
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-4)
    # the buffer is an ordinary intermediate for autograd: d(sum of conv)/dx matches the one-kernel form
    big = Tensor(np.concatenate([x_data] * 2), requires_grad=True)
    (gradient,) = big.conv2d(weight, padding=1).sum().gradient(big)
    ones = np.ones((8, 8, 30, 30), np.float32)
    per_tap = weight_data.sum(axis=0)  # each input pixel meets every in-bounds tap of every output channel
    padded = np.pad(ones, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected_gradient = np.zeros_like(ones)
    for dy in range(3):
        for dx in range(3):
            # output (oy, ox) reads input (oy + dy - 1, ox + dx - 1): a pixel gets the tap when that output exists
            expected_gradient += per_tap[None, :, dy, dx, None, None] * padded[:, :, 2 - dy : 32 - dy, 2 - dx : 32 - dx]
    np.testing.assert_allclose(gradient.numpy(), expected_gradient, rtol=1e-4, atol=1e-4)
