"""tinygrad's nn layer names in kiln (`nn.BatchNorm`, `nn.InstanceNorm`, `nn.LayerNorm2d`): tinygrad's argument
order and defaults, checked against normalizations computed in numpy."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor, nn

pytestmark = pytest.mark.default_device("PYTHON")

RNG = np.random.default_rng(38)


def _normalize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 2, 2, 3)])
def test_batchnorm_any_rank_training_and_running_statistics(shape: tuple[int, ...]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = nn.BatchNorm(3, 1e-3, True, True, 0.5)  # tinygrad's order: sz, eps, affine, track_running_stats, momentum
    assert (layer.eps, layer.momentum, layer.affine) == (1e-3, 0.5, True)
    assert list(layer.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    axes = tuple(axis for axis in range(len(shape)) if axis != 1)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), _normalize(x, axes, 1e-3), rtol=1e-4, atol=1e-5)
    count = x.size // 3
    np.testing.assert_allclose(layer.running_mean.numpy(), 0.5 * x.mean(axis=axes), rtol=1e-5, atol=1e-6)
    expected_var = 0.5 + 0.5 * x.var(axis=axes) * count / (count - 1)
    np.testing.assert_allclose(layer.running_var.numpy(), expected_var, rtol=1e-5)
    layer.eval()
    mean, var = layer.running_mean.numpy(), layer.running_var.numpy()
    view = (1, 3) + (1,) * (len(shape) - 2)
    expected = (x - mean.reshape(view)) / np.sqrt(var.reshape(view) + 1e-3)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_batchnorm_without_affine_and_rank_check() -> None:
    layer = nn.BatchNorm(2, 1e-5, False)
    assert layer.weight is None and layer.bias is None
    with pytest.raises(ValueError, match="BatchNorm expects"):
        layer(Tensor(np.ones(2, np.float32)))


def test_instancenorm_is_affine_by_default_and_takes_any_spatial_rank() -> None:
    layer = nn.InstanceNorm(3)
    assert list(layer.state_dict()) == ["weight", "bias"]
    weight = RNG.standard_normal(3).astype(np.float32)
    bias = RNG.standard_normal(3).astype(np.float32)
    layer.load_state_dict({"weight": Tensor(weight), "bias": Tensor(bias)})
    for shape in [(2, 3, 5), (2, 3, 4, 4), (1, 3, 2, 3, 2)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        view = (1, 3) + (1,) * (len(shape) - 2)
        expected = _normalize(x, tuple(range(2, len(shape))), 1e-5) * weight.reshape(view) + bias.reshape(view)
        np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert nn.InstanceNorm(3, affine=False).weight is None
    with pytest.raises(ValueError, match="InstanceNorm expects"):
        layer(Tensor(np.ones((2, 3), np.float32)))


def test_layernorm2d_normalizes_over_channels() -> None:
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    layer = nn.LayerNorm2d(3, eps=1e-6)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), _normalize(x, (1,), 1e-6), rtol=1e-4, atol=1e-5)
    assert list(layer.state_dict()) == ["weight", "bias"]
    with pytest.raises(ValueError, match="LayerNorm2d expects"):
        layer(Tensor(np.ones((3, 4, 5), np.float32)))
