"""The gradients of conv1d / conv2d / conv3d (and of conv_transpose, built on the same convolution) against a
float64 brute-force oracle, and the gradient shortcut that computes a convolution's input gradient as a transposed
convolution (kiln.tensor.gradient, kiln.tensor.ops.convolution): one reduce kernel, taken only where it is exact."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor import gradient as gradient_module
from kiln.tensor.counters import GlobalCounters
from kiln.tensor.tensor import Tensor

Array = np.ndarray[Any, Any]
Pairs = tuple[tuple[int, int], ...]


pytestmark = pytest.mark.default_device("PYTHON")


def oracle(
    x: Array, w: Array, g: Array, stride: tuple[int, ...], pairs: Pairs, dilation: tuple[int, ...], groups: int
) -> tuple[Array, Array]:
    """(d/dx, d/dw) of sum(g * conv(x, w)) by visiting every output cell and kernel tap (float64); `pairs` are
    (before, after) paddings per spatial dim, a negative amount crops."""
    spatial = w.ndim - 2
    x, w, g = (a.astype(np.float64) for a in (x, w, g))
    kept = tuple(slice(max(-before, 0), x.shape[2 + i] - max(-after, 0)) for i, (before, after) in enumerate(pairs))
    padded = np.pad(x[(slice(None), slice(None), *kept)], [(0, 0), (0, 0), *[(max(b, 0), max(a, 0)) for b, a in pairs]])
    padded_grad, w_grad = np.zeros_like(padded), np.zeros_like(w)
    out_channels, group_channels = w.shape[:2]
    per_group = out_channels // groups
    for position in np.ndindex(*g.shape[2:]):
        for tap in np.ndindex(*w.shape[2:]):
            cell = tuple(position[i] * stride[i] + tap[i] * dilation[i] for i in range(spatial))
            for group in range(groups):
                ins = slice(group * group_channels, (group + 1) * group_channels)
                outs = slice(group * per_group, (group + 1) * per_group)
                upstream = g[(slice(None), outs, *position)]  # (batch, per_group)
                padded_grad[(slice(None), ins, *cell)] += upstream @ w[(outs, slice(None), *tap)]
                w_grad[(outs, slice(None), *tap)] += upstream.T @ padded[(slice(None), ins, *cell)]
    x_grad = np.zeros_like(x)
    inner = tuple(slice(max(before, 0), padded.shape[2 + i] - max(after, 0)) for i, (before, after) in enumerate(pairs))
    x_grad[(slice(None), slice(None), *kept)] = padded_grad[(slice(None), slice(None), *inner)]
    return x_grad, w_grad


def forward(x: Array, w: Array, stride: tuple[int, ...], pairs: Pairs, groups: int) -> Array:
    """conv(x, w) (dilation 1, paddings >= 0) by visiting every output cell and kernel tap (float64)."""
    spatial = w.ndim - 2
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pairs])
    out_channels, group_channels = w.shape[:2]
    per_group = out_channels // groups
    out = [(padded.shape[2 + i] - w.shape[2 + i]) // stride[i] + 1 for i in range(spatial)]
    result = np.zeros((x.shape[0], out_channels, *out))
    for position in np.ndindex(*out):
        for tap in np.ndindex(*w.shape[2:]):
            cell = tuple(position[i] * stride[i] + tap[i] for i in range(spatial))
            for group in range(groups):
                ins = slice(group * group_channels, (group + 1) * group_channels)
                outs = slice(group * per_group, (group + 1) * per_group)
                result[(slice(None), outs, *position)] += (
                    padded[(slice(None), ins, *cell)] @ w[(outs, slice(None), *tap)].T
                )
    return result


def _conv(x: Tensor, w: Tensor, **options: Any) -> Tensor:
    return {1: x.conv1d, 2: x.conv2d, 3: x.conv3d}[w.ndim - 2](w, **options)


def _random_case(rng: np.random.Generator) -> dict[str, Any]:
    spatial = int(rng.choice([1, 2, 2, 3]))
    groups = int(rng.choice([1, 1, 2, 3]))
    kernel = tuple(int(rng.integers(1, 4)) for _ in range(spatial))
    stride = tuple(int(rng.integers(1, 4)) for _ in range(spatial))
    dilation = tuple(int(rng.integers(1, 3)) for _ in range(spatial))
    padding = tuple(int(rng.integers(0, 4)) for _ in range(spatial))
    size = tuple(
        int(rng.integers(max(1, rate * (taps - 1) + 1 - 2 * pad), 8))
        for taps, rate, pad in zip(kernel, dilation, padding)
    )
    in_channels, out_channels = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    return {
        "x": rng.standard_normal((2, in_channels, *size)),
        "w": rng.standard_normal((out_channels, in_channels // groups, *kernel)),
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "groups": groups,
    }


@pytest.mark.parametrize("seed", range(24))
def test_random_convolutions_match_the_oracle(seed: int) -> None:
    case = _random_case(np.random.default_rng(seed))
    x, w = Tensor(case["x"], requires_grad=True), Tensor(case["w"], requires_grad=True)
    options = {key: case[key] for key in ("stride", "padding", "dilation", "groups")}
    result = _conv(x, w, **options)
    g = np.random.default_rng(1000 + seed).standard_normal(result.shape)
    x_grad, w_grad = result.gradient(x, w, gradient=Tensor(g))
    pairs = tuple((pad, pad) for pad in case["padding"])
    expected_x, expected_w = oracle(case["x"], case["w"], g, case["stride"], pairs, case["dilation"], case["groups"])
    np.testing.assert_allclose(x_grad.numpy(), expected_x, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(w_grad.numpy(), expected_w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("padding", "pairs"),
    [
        ((0, 2, 1, 0), ((1, 0), (0, 2))),  # tinygrad's flat (left, right, top, bottom)
        ((-1, 1, 2, -1), ((2, -1), (-1, 1))),  # negative amounts crop
        ("same", ((0, 1), (1, 1))),  # kernel (2, 3): the odd zero of the even kernel goes after
    ],
)
def test_asymmetric_and_cropping_padding(padding: Any, pairs: Pairs) -> None:
    rng = np.random.default_rng(7)
    x_data, w_data = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((4, 3, 2, 3))
    x, w = Tensor(x_data, requires_grad=True), Tensor(w_data, requires_grad=True)
    result = x.conv2d(w, padding=padding)
    g = rng.standard_normal(result.shape)
    x_grad, w_grad = result.gradient(x, w, gradient=Tensor(g))
    expected_x, expected_w = oracle(x_data, w_data, g, (1, 1), pairs, (1, 1), 1)
    np.testing.assert_allclose(x_grad.numpy(), expected_x, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(w_grad.numpy(), expected_w, rtol=1e-10, atol=1e-10)


def test_unbatched_float32_backward_accumulates_into_grad() -> None:
    rng = np.random.default_rng(3)
    x_data = rng.standard_normal((3, 7, 7)).astype(np.float32)
    w_data = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    x, w = Tensor(x_data, requires_grad=True), Tensor(w_data, requires_grad=True)
    g = rng.standard_normal((2, 4, 4)).astype(np.float32)
    x.conv2d(w, stride=2, padding=1).backward(Tensor(g))
    expected_x, expected_w = oracle(x_data[None], w_data, g[None], (2, 2), ((1, 1), (1, 1)), (1, 1), 1)
    assert x.grad is not None and w.grad is not None
    assert x.grad.dtype == x.dtype and x.grad.shape == x.shape
    np.testing.assert_allclose(x.grad.numpy(), expected_x[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), expected_w, rtol=1e-5, atol=1e-5)


def test_input_gradient_is_one_reduce_kernel() -> None:
    # the primitives' rules would write the gradient of every window, then scatter-add the windows (2+ kernels)
    rng = np.random.default_rng(5)
    x_data, w_data = rng.standard_normal((2, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3))
    x, w = Tensor(x_data, requires_grad=True).realize(), Tensor(w_data).realize()
    for options, pairs, stride in (({"padding": 1}, ((1, 1), (1, 1)), (1, 1)), ({}, ((0, 0), (0, 0)), (1, 1))):
        result = x.conv2d(w, **options)
        g = Tensor(rng.standard_normal(result.shape)).realize()
        (x_grad,) = result.gradient(x, gradient=g)
        GlobalCounters.reset()
        x_grad.realize()
        assert GlobalCounters.kernel_count == 1, options
        expected, _ = oracle(x_data, w_data, g.numpy(), stride, pairs, (1, 1), 1)
        np.testing.assert_allclose(x_grad.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_shortcut_is_taken_and_agrees_with_the_primitives(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    x_data, w_data = rng.standard_normal((2, 4, 7, 6)), rng.standard_normal((6, 2, 3, 2))
    x, w = Tensor(x_data, requires_grad=True), Tensor(w_data, requires_grad=True)
    result = x.conv2d(w, stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    g = Tensor(rng.standard_normal(result.shape))
    taken: list[object] = []
    original = gradient_module._shortcut_for

    def counting(node: Any, targets: set[Any]) -> Any:
        found = original(node, targets)
        if found is not None:
            taken.append(found)
        return found

    monkeypatch.setattr(gradient_module, "_shortcut_for", counting)
    fast = [t.numpy() for t in result.gradient(x, w, gradient=g)]
    assert len(taken) == 1
    plain = gradient_module.compute_gradient(result.uop, g.uop, [x.uop, w.uop], shortcuts=False)
    slow = [Tensor._from_uop(plain[x.uop]).numpy(), Tensor._from_uop(plain[w.uop]).numpy()]
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_a_target_inside_the_convolution_takes_the_primitives_path() -> None:
    # the padded input is a node of the convolution's own graph (hash-consed with the user's pad): its gradient
    # must come from the primitives' rules, the shortcut only knows the inputs
    rng = np.random.default_rng(13)
    x_data, w_data = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    x, w = Tensor(x_data, requires_grad=True), Tensor(w_data)
    padded = x.pad((1, 1, 1, 1))
    result = x.conv2d(w, padding=1)
    g = rng.standard_normal(result.shape)
    padded_grad, x_grad = result.gradient(padded, x, gradient=Tensor(g))
    expected_padded, _ = oracle(padded.numpy(), w_data, g, (1, 1), ((0, 0), (0, 0)), (1, 1), 1)
    np.testing.assert_allclose(padded_grad.numpy(), expected_padded, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(x_grad.numpy(), expected_padded[:, :, 1:-1, 1:-1], rtol=1e-10, atol=1e-10)


def test_the_same_tensor_as_input_and_weight() -> None:
    rng = np.random.default_rng(17)
    data = rng.standard_normal((1, 1, 3, 3))
    x = Tensor(data, requires_grad=True)
    result = x.conv2d(x, padding=1)
    g = rng.standard_normal(result.shape)
    (x_grad,) = result.gradient(x, gradient=Tensor(g))
    as_input, as_weight = oracle(data, data, g, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    np.testing.assert_allclose(x_grad.numpy(), as_input + as_weight, rtol=1e-10, atol=1e-10)


def test_a_weight_computed_from_the_input() -> None:
    # both partial derivatives, and the weight's own path back to the input, each counted once
    rng = np.random.default_rng(19)
    data = rng.standard_normal((1, 2, 5, 5))
    x = Tensor(data, requires_grad=True)
    weight = (x[:, :, :3, :3] * 2.0).reshape(2, 1, 3, 3)
    result = x.conv2d(weight, groups=2, padding=1)
    g = rng.standard_normal(result.shape)
    (x_grad,) = result.gradient(x, gradient=Tensor(g))
    w_data = (data[:, :, :3, :3] * 2.0).reshape(2, 1, 3, 3)
    expected, w_grad = oracle(data, w_data, g, (1, 1), ((1, 1), (1, 1)), (1, 1), 2)
    expected[:, :, :3, :3] += 2.0 * w_grad.reshape(1, 2, 3, 3)
    np.testing.assert_allclose(x_grad.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_second_derivative_through_the_input_gradient() -> None:
    # d/dw of sum(v * dL/dx) with L = sum(g * conv(x, w)): dL/dx is linear in w, so the oracle is the weight
    # gradient of the transposed convolution, i.e. sum over taps of g (x) v pairs
    rng = np.random.default_rng(23)
    x_data, w_data = rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((3, 2, 2, 3))
    x, w = Tensor(x_data, requires_grad=True), Tensor(w_data, requires_grad=True)
    result = x.conv2d(w, stride=(1, 2), padding=1)
    g = rng.standard_normal(result.shape)
    v = rng.standard_normal(x_data.shape)
    (x_grad,) = result.gradient(x, gradient=Tensor(g))
    (second,) = (x_grad * Tensor(v)).sum().gradient(w)
    # sum(v * dL/dx) = sum(g * conv(v, w)): its w-gradient is the weight gradient of conv(v, w) against g
    _, expected = oracle(v, w_data, g, (1, 2), ((1, 1), (1, 1)), (1, 1), 1)
    np.testing.assert_allclose(second.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_float16_input_with_float32_weight() -> None:
    rng = np.random.default_rng(29)
    x_data = rng.standard_normal((1, 2, 6, 6)).astype(np.float16)
    w_data = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    x, w = Tensor(x_data, requires_grad=True), Tensor(w_data, requires_grad=True)
    result = x.conv2d(w, padding=1)
    assert result.dtype == w.dtype
    g = rng.standard_normal(result.shape).astype(np.float32)
    x_grad, w_grad = result.gradient(x, w, gradient=Tensor(g))
    assert x_grad.dtype == x.dtype and w_grad.dtype == w.dtype
    expected_x, expected_w = oracle(x_data, w_data, g, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    np.testing.assert_allclose(x_grad.numpy().astype(np.float64), expected_x, rtol=1e-2, atol=2e-2)
    np.testing.assert_allclose(w_grad.numpy(), expected_w, rtol=1e-4, atol=1e-4)


def test_transposed_convolution_gradients() -> None:
    # conv_transpose2d is itself a convolution: its input gradient (a convolution again) through the shortcut
    rng = np.random.default_rng(31)
    x_data, w_data = rng.standard_normal((2, 4, 3, 4)), rng.standard_normal((4, 3, 3, 2))
    x, w = Tensor(x_data, requires_grad=True), Tensor(w_data)
    result = x.conv_transpose2d(w, stride=2, padding=1, output_padding=1, groups=2)
    g = rng.standard_normal(result.shape)
    (x_grad,) = result.gradient(x, gradient=Tensor(g))
    # <g, conv_transpose(x, w)> = <conv(g, w), x>: the input gradient is the forward convolution of g
    np.testing.assert_allclose(x_grad.numpy(), forward(g, w_data, (2, 2), ((1, 1), (1, 1)), 2), rtol=1e-10, atol=1e-10)
