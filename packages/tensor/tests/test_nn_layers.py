"""kiln.tensor.nn layers: each forward against a numpy reference (tests/nn_reference.py) in float64, and each
backward (input and parameter gradients) against central differences of that reference."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from nn_reference import (
    avg_pool2d,
    batch_norm_train,
    conv,
    conv_transpose,
    group_norm,
    layer_norm,
    max_pool2d,
    multihead_attention,
    numerical_gradient,
    rms_norm,
)

from kiln.runtime import Device
from kiln.tensor import Tensor, nn
from kiln.tensor.nn.module import walk_state
from kiln.uops import dtypes

Array = np.ndarray[Any, Any]
Reference = Callable[[Array, dict[str, Array]], Array]


@pytest.fixture(autouse=True)
def _python_device() -> Iterator[None]:
    # the interpreter device needs no toolchain and supports float64: small layers run fast there
    Device.DEFAULT = "PYTHON"
    Tensor.manual_seed(3)
    yield
    Device.DEFAULT = None


def to_float64(module: object) -> None:
    """Replaces every float tensor of `module` by a float64 copy (parameters keep requiring grad)."""
    for _name, tensor, owner, key in list(walk_state(module)):
        if not dtypes.is_float(tensor.dtype):
            continue
        copy = Tensor(tensor.numpy().astype(np.float64))
        if tensor.requires_grad:
            copy.requires_grad_()
        if isinstance(owner, list):
            owner[int(key)] = copy
        else:
            setattr(owner, key, copy)


def check_layer(
    module: nn.Module, x: Array, reference: Reference, forward_atol: float = 1e-10, atol: float = 1e-7
) -> None:
    """Forward equals the reference; gradients of sum(out * R) equal central differences of the reference."""
    to_float64(module)
    params = {name: tensor.numpy() for name, tensor in module.state_dict().items()}
    x_tensor = Tensor(x, requires_grad=True)
    out = module(x_tensor)
    expected = reference(x, params)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-9, atol=forward_atol)
    weights = np.random.default_rng(5).standard_normal(expected.shape)
    (out * Tensor(weights)).sum().backward()

    def objective() -> float:
        return float((reference(x, params) * weights).sum())

    for name, parameter in module.named_parameters():
        assert parameter.grad is not None, name
        np.testing.assert_allclose(parameter.grad.numpy(), numerical_gradient(objective, params[name]), atol=atol)
    assert x_tensor.grad is not None
    np.testing.assert_allclose(x_tensor.grad.numpy(), numerical_gradient(objective, x), atol=atol)


RNG = np.random.default_rng(11)


def _x(*shape: int) -> Array:
    return RNG.standard_normal(shape)


def _gelu(x: Array) -> Array:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


CASES: list[tuple[str, Callable[[], nn.Module], tuple[int, ...], Reference]] = [
    ("linear", lambda: nn.Linear(3, 4), (2, 3), lambda x, p: x @ p["weight"].T + p["bias"]),
    ("linear_no_bias", lambda: nn.Linear(3, 2, bias=False), (4, 3), lambda x, p: x @ p["weight"].T),
    (
        "conv1d",
        lambda: nn.Conv1d(2, 4, 3, stride=2, padding=1),
        (2, 2, 7),
        lambda x, p: conv(x, p["weight"], p["bias"], (2,), (1,), (1,), 1),
    ),
    (
        "conv2d_dilated",
        lambda: nn.Conv2d(2, 3, (2, 3), padding=1, dilation=(1, 2)),
        (1, 2, 5, 6),
        lambda x, p: conv(x, p["weight"], p["bias"], (1, 1), (1, 1), (1, 2), 1),
    ),
    (
        "conv2d_groups",
        lambda: nn.Conv2d(4, 4, 3, groups=2, bias=False),
        (1, 4, 4, 4),
        lambda x, p: conv(x, p["weight"], None, (1, 1), (0, 0), (1, 1), 2),
    ),
    (
        "conv3d",
        lambda: nn.Conv3d(1, 2, 2),
        (1, 1, 3, 3, 3),
        lambda x, p: conv(x, p["weight"], p["bias"], (1, 1, 1), (0, 0, 0), (1, 1, 1), 1),
    ),
    (
        "conv_transpose1d",
        lambda: nn.ConvTranspose1d(2, 3, 3, stride=2, padding=1, output_padding=1),
        (1, 2, 4),
        lambda x, p: conv_transpose(x, p["weight"], p["bias"], (2,), (1,), (1,)),
    ),
    (
        "conv_transpose2d",
        lambda: nn.ConvTranspose2d(2, 3, 2, stride=2),
        (1, 2, 3, 3),
        lambda x, p: conv_transpose(x, p["weight"], p["bias"], (2, 2), (0, 0), (0, 0)),
    ),
    ("batchnorm1d", lambda: nn.BatchNorm1d(3), (5, 3), lambda x, p: batch_norm_train(x, p["weight"], p["bias"], 1e-5)),
    (
        "batchnorm2d",
        lambda: nn.BatchNorm2d(2),
        (3, 2, 2, 2),
        lambda x, p: batch_norm_train(x, p["weight"], p["bias"], 1e-5),
    ),
    ("layernorm", lambda: nn.LayerNorm(5), (2, 3, 5), lambda x, p: layer_norm(x, p["weight"], p["bias"], 1e-5)),
    ("groupnorm", lambda: nn.GroupNorm(2, 4), (2, 4, 3), lambda x, p: group_norm(x, 2, p["weight"], p["bias"], 1e-5)),
    ("rmsnorm", lambda: nn.RMSNorm(4, eps=1e-6), (3, 4), lambda x, p: rms_norm(x, p["weight"], 1e-6)),
    ("maxpool2d", lambda: nn.MaxPool2d(2), (1, 2, 4, 4), lambda x, p: max_pool2d(x, 2, 2)),
    ("avgpool2d", lambda: nn.AvgPool2d(3, stride=1), (1, 2, 4, 4), lambda x, p: avg_pool2d(x, 3, 1)),
    ("relu", nn.ReLU, (3, 4), lambda x, p: np.maximum(x, 0)),
    ("gelu", nn.GELU, (3, 4), lambda x, p: _gelu(x)),
    ("silu", nn.SiLU, (3, 4), lambda x, p: x / (1 + np.exp(-x))),
    ("tanh", nn.Tanh, (3, 4), lambda x, p: np.tanh(x)),
    ("sigmoid", nn.Sigmoid, (3, 4), lambda x, p: 1 / (1 + np.exp(-x))),
    ("flatten", nn.Flatten, (2, 3, 2), lambda x, p: x.reshape(2, 6)),
    (
        "sequential",
        lambda: nn.Sequential(nn.Conv2d(1, 2, 2), nn.Tanh(), nn.Flatten(), nn.Linear(8, 3)),
        (2, 1, 3, 3),
        lambda x, p: (
            np.tanh(conv(x, p["0.weight"], p["0.bias"], (1, 1), (0, 0), (1, 1), 1)).reshape(2, 8) @ p["3.weight"].T
            + p["3.bias"]
        ),
    ),
]


@pytest.mark.parametrize(("name", "factory", "shape", "reference"), CASES, ids=[case[0] for case in CASES])
def test_layer_forward_and_gradients(
    name: str, factory: Callable[[], nn.Module], shape: tuple[int, ...], reference: Reference
) -> None:
    # kiln's erf (inside GELU) is a float32-accurate approximation even in float64 (about 1e-7 absolute)
    tolerance = 1e-6 if name == "gelu" else 1e-10
    x = np.random.default_rng(zlib.crc32(name.encode())).standard_normal(shape)  # the same input in any test order
    check_layer(factory(), x, reference, forward_atol=tolerance, atol=max(tolerance, 1e-7))


def test_embedding_forward_and_gradient() -> None:
    layer = nn.Embedding(6, 3)
    to_float64(layer)
    table = layer.weight.numpy()
    indices = np.array([[1, 5, 1], [0, 2, 4]])
    out = layer(Tensor(indices))
    np.testing.assert_allclose(out.numpy(), table[indices])
    weights = RNG.standard_normal((2, 3, 3))
    (out * Tensor(weights)).sum().backward()
    expected = np.zeros_like(table)
    np.add.at(expected, indices.reshape(-1), weights.reshape(-1, 3))
    assert layer.weight.grad is not None
    np.testing.assert_allclose(layer.weight.grad.numpy(), expected)


def test_multihead_attention_forward_and_gradients() -> None:
    layer = nn.MultiheadAttention(4, 2)
    to_float64(layer)
    x = _x(3, 2, 4)

    def reference(x: Array, p: dict[str, Array]) -> Array:
        out, _ = multihead_attention(
            x, x, x, p["in_proj_weight"], p["in_proj_bias"], p["out_proj.weight"], p["out_proj.bias"], 2
        )
        return out

    params = {name: tensor.numpy() for name, tensor in layer.state_dict().items()}
    _out, weights = layer(Tensor(x), Tensor(x), Tensor(x))
    expected_weights = multihead_attention(
        x, x, x, params["in_proj_weight"], params["in_proj_bias"], params["out_proj.weight"], params["out_proj.bias"], 2
    )[1]
    assert weights is not None
    np.testing.assert_allclose(weights.numpy(), expected_weights, rtol=1e-9, atol=1e-12)

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = layer

        def forward(self, x: Tensor) -> Tensor:
            return self.attention(x, x, x, need_weights=False)[0]

    wrapper = SelfAttention()
    check_layer(wrapper, x, lambda x, p: reference(x, {k.removeprefix("attention."): v for k, v in p.items()}))


def test_multihead_attention_batch_first_and_key_padding_mask() -> None:
    layer = nn.MultiheadAttention(4, 1, batch_first=True)
    x = _x(2, 3, 4).astype(np.float32)
    mask = np.array([[False, False, True], [False, True, True]])
    out, weights = layer(Tensor(x), Tensor(x), Tensor(x), key_padding_mask=Tensor(mask))
    assert out.shape == (2, 3, 4) and weights is not None
    # masked keys get no weight; rows still sum to one
    np.testing.assert_allclose(weights.numpy()[np.broadcast_to(mask[:, None, :], (2, 3, 3))], 0.0)
    np.testing.assert_allclose(weights.numpy().sum(-1), 1.0, rtol=1e-6)
    params = {name: tensor.numpy().astype(np.float64) for name, tensor in layer.state_dict().items()}
    # batch 1 attends only to key 0: its output is the projection of value 0 for every query
    value0 = x[1, 0] @ params["in_proj_weight"][8:].T + params["in_proj_bias"][8:]
    expected = value0 @ params["out_proj.weight"].T + params["out_proj.bias"]
    np.testing.assert_allclose(out.numpy()[1], np.broadcast_to(expected, (3, 4)), rtol=1e-5, atol=1e-6)


def test_batchnorm_running_statistics_and_eval() -> None:
    layer = nn.BatchNorm2d(2, momentum=0.3)
    x = _x(4, 2, 3, 3).astype(np.float32)
    layer(Tensor(x)).realize()
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3), ddof=1)
    np.testing.assert_allclose(layer.running_mean.numpy(), 0.3 * mean, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(layer.running_var.numpy(), 0.7 + 0.3 * var, rtol=1e-5)
    assert layer.num_batches_tracked.item() == 1
    layer(Tensor(x)).realize()  # a second step compounds
    np.testing.assert_allclose(layer.running_mean.numpy(), 0.3 * mean * (1 + 0.7), rtol=1e-5, atol=1e-7)
    assert layer.num_batches_tracked.item() == 2
    layer.eval()
    running_mean, running_var = layer.running_mean.numpy(), layer.running_var.numpy()
    expected = (x - running_mean.reshape(1, 2, 1, 1)) / np.sqrt(running_var.reshape(1, 2, 1, 1) + 1e-5)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert layer.num_batches_tracked.item() == 2  # eval leaves the statistics alone


def test_batchnorm_cumulative_average_when_momentum_is_none() -> None:
    layer = nn.BatchNorm1d(2, momentum=None)
    batches = [_x(5, 2).astype(np.float32) for _ in range(3)]
    for batch in batches:
        layer(Tensor(batch)).realize()
    expected = np.mean([batch.mean(0) for batch in batches], axis=0)
    np.testing.assert_allclose(layer.running_mean.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_dropout_masks_scales_and_is_identity_in_eval() -> None:
    layer = nn.Dropout(0.25)
    x = np.ones((200, 50), dtype=np.float32)
    out = layer(Tensor(x)).numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02  # 10000 draws: 0.02 is over 4 standard deviations
    Tensor.manual_seed(9)
    first = layer(Tensor(x)).numpy()
    Tensor.manual_seed(9)
    np.testing.assert_array_equal(layer(Tensor(x)).numpy(), first)
    np.testing.assert_array_equal(layer.eval()(Tensor(x)).numpy(), x)


@pytest.mark.parametrize(
    ("factory", "fan_in", "weight_shape"),
    [
        (lambda: nn.Linear(400, 30), 400, (30, 400)),
        (lambda: nn.Conv2d(8, 16, 3), 72, (16, 8, 3, 3)),
        (lambda: nn.Conv2d(8, 16, 3, groups=4), 18, (16, 2, 3, 3)),
        (lambda: nn.ConvTranspose2d(8, 6, 2), 24, (8, 6, 2, 2)),
    ],
)
def test_default_initialisation_is_pytorchs(factory: Callable[[], nn.Module], fan_in: int, weight_shape: Any) -> None:
    layer = factory()
    weight, bias = layer.weight.numpy(), layer.bias.numpy()  # type: ignore[attr-defined]
    assert weight.shape == weight_shape and weight.dtype == np.float32
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform(a=sqrt(5)) and the bias rule give the same bound
    assert np.abs(weight).max() <= bound and np.abs(bias).max() <= bound
    # a uniform(-b, b) sample: standard deviation b / sqrt(3), and it spreads over the whole interval
    assert abs(weight.std() - bound / math.sqrt(3)) < 0.1 * bound
    assert np.abs(weight).max() > 0.9 * bound


def test_layer_errors() -> None:
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="kernel_size"):
        nn.Conv2d(3, 4, (3, 3, 3))
    with pytest.raises(ValueError, match="last dim 3"):
        nn.Linear(3, 2)(Tensor.ones(2, 4))
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError, match="4-d input"):
        nn.BatchNorm2d(3)(Tensor.ones(2, 3))
    with pytest.raises(TypeError, match="integer index"):
        nn.Embedding(4, 2)(Tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")


def test_layers_never_share_memory() -> None:
    # equal initial values (zeros, ones) are one hash-consed graph node: each layer must still get its own buffers
    first, second = nn.BatchNorm1d(2), nn.BatchNorm1d(2)
    first(Tensor(_x(4, 2).astype(np.float32))).realize()
    first(Tensor(_x(4, 2).astype(np.float32))).realize()
    assert second.num_batches_tracked.item() == 0
    np.testing.assert_array_equal(second.running_mean.numpy(), [0.0, 0.0])
    buffers = [tensor.data_buffer() for layer in (first, second) for tensor in layer.state_dict().values()]
    assert len({id(buffer) for buffer in buffers}) == len(buffers)


@pytest.mark.parametrize(
    ("factory", "shape", "reduce"),
    [
        (lambda: nn.MaxPool1d(2), (2, 3, 8), np.max),
        (lambda: nn.AvgPool1d(2), (2, 3, 8), np.mean),
        (lambda: nn.MaxPool3d(2), (1, 2, 4, 4, 4), np.max),
        (lambda: nn.AvgPool3d(2), (1, 2, 4, 4, 4), np.mean),
    ],
)
def test_pooling_modules_over_non_overlapping_windows(
    factory: Callable[[], nn.Module], shape: Any, reduce: Any
) -> None:
    x = _x(*shape)
    spatial = shape[2:]
    # split every spatial dim into (windows, 2) and reduce over the window axes
    split = x.reshape(*shape[:2], *[item for size in spatial for item in (size // 2, 2)])
    expected = reduce(split, axis=tuple(range(3, 2 + 2 * len(spatial), 2)))
    np.testing.assert_allclose(factory()(Tensor(x)).numpy(), expected, rtol=1e-12)


def test_embedding_index_out_of_range_raises_in_checked_mode() -> None:
    # the test suite runs with CHECK=1 (conftest): an index past the table is named, as torch's IndexError does
    layer = nn.Embedding(4, 2)
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        layer(Tensor([[1, 7]])).numpy()
