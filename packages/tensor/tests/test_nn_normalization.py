"""layer_norm / batch_norm / group_norm / rms_norm (kiln.tensor.ops.normalization) against numpy transcriptions of
PyTorch's definitions, the running-statistics update of batch_norm, and the errors raised at the call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(21)


pytestmark = pytest.mark.default_device("PYTHON")


def _normalize(x: Array, axes: tuple[int, ...], eps: float) -> Array:
    mean = x.mean(axes, keepdims=True)
    variance = ((x - mean) ** 2).mean(axes, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "normalized"), [((4, 6), (6,)), ((2, 3, 4, 5), (4, 5)), ((7,), 7)])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(shape: tuple[int, ...], normalized: Any, dtype: Any, affine: bool) -> None:
    x = (RNG.standard_normal(shape) * 3 + 1).astype(dtype)
    dims = normalized if isinstance(normalized, tuple) else (normalized,)
    weight = RNG.standard_normal(dims).astype(dtype) if affine else None
    bias = RNG.standard_normal(dims).astype(dtype) if affine else None
    result = Tensor(x).layer_norm(
        normalized, Tensor(weight) if weight is not None else None, Tensor(bias) if bias is not None else None, eps=1e-3
    )
    axes = tuple(range(x.ndim - len(dims), x.ndim))
    expected = _normalize(x.astype(np.float64), axes, 1e-3)
    if affine:
        expected = expected * weight + bias
    assert result.dtype == (dtypes.float32 if dtype == np.float32 else dtypes.float64)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(result.numpy(), expected, rtol=tolerance, atol=tolerance)


def test_layer_norm_float16_computes_in_float32() -> None:
    x = (RNG.standard_normal((3, 8)) * 100).astype(np.float16)
    result = Tensor(x).layer_norm(8)
    assert result.dtype == dtypes.float16
    np.testing.assert_allclose(
        result.numpy().astype(np.float64), _normalize(x.astype(np.float64), (1,), 1e-5), atol=2e-3
    )


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 2, 4)])
def test_batch_norm_training_updates_running_statistics(shape: tuple[int, ...]) -> None:
    x = RNG.standard_normal(shape) * 2 + 0.5
    weight, bias = RNG.standard_normal(3), RNG.standard_normal(3)
    start_mean, start_var = RNG.standard_normal(3), RNG.uniform(0.5, 2.0, 3)
    running_mean, running_var = Tensor(start_mean).realize(), Tensor(start_var).realize()
    result = Tensor(x).batch_norm(running_mean, running_var, Tensor(weight), Tensor(bias), training=True, momentum=0.2)
    axes = (0, *range(2, x.ndim))
    view = (1, 3, *([1] * (x.ndim - 2)))
    expected = _normalize(x, axes, 1e-5) * weight.reshape(view) + bias.reshape(view)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)
    count = x.size // 3
    np.testing.assert_allclose(running_mean.numpy(), 0.8 * start_mean + 0.2 * x.mean(axes), rtol=1e-12)
    unbiased = x.var(axes) * count / (count - 1)
    np.testing.assert_allclose(running_var.numpy(), 0.8 * start_var + 0.2 * unbiased, rtol=1e-12)


def test_batch_norm_inference_uses_running_statistics() -> None:
    x = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    mean, var = RNG.standard_normal(3).astype(np.float32), RNG.uniform(0.5, 2.0, 3).astype(np.float32)
    weight = RNG.standard_normal(3).astype(np.float32)
    result = Tensor(x).batch_norm(Tensor(mean), Tensor(var), Tensor(weight), eps=1e-3)
    expected = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-3) * weight[:, None]
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("shape", "groups"), [((2, 6, 5), 3), ((1, 4, 2, 3), 1), ((2, 4), 4)])
def test_group_norm(shape: tuple[int, ...], groups: int) -> None:
    x = RNG.standard_normal(shape) * 2
    channels = shape[1]
    weight, bias = RNG.standard_normal(channels), RNG.standard_normal(channels)
    result = Tensor(x).group_norm(groups, Tensor(weight), Tensor(bias), eps=1e-4)
    grouped = x.reshape(shape[0], groups, -1)
    view = (1, channels, *([1] * (x.ndim - 2)))
    expected = _normalize(grouped, (2,), 1e-4).reshape(shape) * weight.reshape(view) + bias.reshape(view)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rms_norm(dtype: Any) -> None:
    x = RNG.standard_normal((3, 4, 5)).astype(dtype)
    weight = RNG.standard_normal((4, 5)).astype(dtype)
    result = Tensor(x).rms_norm((4, 5), Tensor(weight))
    eps = np.finfo(dtype).eps  # PyTorch's default
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64**2).mean((1, 2), keepdims=True) + eps) * weight
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(result.numpy(), expected, rtol=tolerance, atol=tolerance)


# ---------------------------------------------------------------------------------------------------------------
# errors at the call
# ---------------------------------------------------------------------------------------------------------------


def test_normalization_errors() -> None:
    x = Tensor.zeros(2, 3, 4)
    with pytest.raises(
        ValueError,
        match=r"layer_norm normalized_shape \(3,\) must be non-empty and match the last dims of the input \(2, 3, 4\)",
    ):
        x.layer_norm(3)
    with pytest.raises(ValueError, match=r"layer_norm weight must have shape \(4,\), got \(3,\)"):
        x.layer_norm(4, Tensor.zeros(3))
    with pytest.raises(TypeError, match=r"layer_norm needs a floating-point tensor, got dtypes.int32"):
        Tensor.zeros(2, 4, dtype=dtypes.int32).layer_norm(4)
    with pytest.raises(ValueError, match=r"batch_norm running_mean must have shape \(3,\), got \(4,\)"):
        x.batch_norm(Tensor.zeros(4), Tensor.ones(3))
    with pytest.raises(ValueError, match="batch_norm with training=False needs running_mean and running_var"):
        x.batch_norm(None, None)
    with pytest.raises(
        ValueError, match=r"batch_norm training needs more than 1 value per channel, got input shape \(1, 3\)"
    ):
        Tensor.zeros(1, 3).batch_norm(None, None, training=True)
    with pytest.raises(
        ValueError, match=r"batch_norm needs a \(batch, channels, \*\) input with at least 2 dims, got \(3,\)"
    ):
        Tensor.zeros(3).batch_norm(None, None, training=True)
    with pytest.raises(ValueError, match="group_norm num_groups 2 must be >= 1 and divide the 3 channels"):
        x.group_norm(2)
    with pytest.raises(ValueError, match="layer_norm eps must be a non-negative number, got -1"):
        x.layer_norm(4, eps=-1)
    with pytest.raises(TypeError, match="batch_norm weight must be a Tensor or None, got list"):
        x.batch_norm(None, None, [1.0, 1.0, 1.0], training=True)  # type: ignore[arg-type]
