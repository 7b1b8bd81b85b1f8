"""Regression tests for the bugs of the Tensor API parity issue: each one failed before its fix."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor


def _log_softmax_reference(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    shifted = x - x.max(axis, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(axis, keepdims=True))
    softmax = np.exp(shifted - log_sum)
    # d/dx sum(log_softmax(x)) = 1 - n * softmax(x) along the axis
    return shifted - log_sum, 1.0 - x.shape[axis] * softmax


@pytest.mark.parametrize("shape", [(45, 65), (32, 32), (64, 64), (7, 130)])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_log_softmax_backward_lowers_and_matches_numpy(shape: tuple[int, int], axis: int) -> None:
    # failed in lowering: "RANGE RangeArg(axis=1, kind=AxisKind.REDUCE) is used in different outer loops"
    values = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x = Tensor(values, requires_grad=True)
    y = x.log_softmax(axis)
    y.sum().backward()
    assert x.grad is not None
    expected, expected_grad = _log_softmax_reference(values.astype(np.float64), axis)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), expected_grad, rtol=1e-4, atol=1e-5)


def test_backward_through_comparisons_gives_the_compared_values_nothing() -> None:
    a = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = Tensor([2.0, 2.0, 2.0], requires_grad=True)
    ((a < b).float() * a + (a >= b).float() * 2.0).sum().backward()
    assert a.grad is not None and a.grad.tolist() == [1.0, 0.0, 0.0]  # d/da (a<b)*a = (a<b); the mask has none
    assert b.grad is None  # only compared: no gradient reaches it (torch leaves it None too)
    c = Tensor([1.0, -2.0], requires_grad=True)
    ((c > 0) * c * c).sum().backward()
    assert c.grad is not None and c.grad.tolist() == [2.0, 0.0]


@pytest.mark.parametrize("empty_first", [False, True])
def test_cat_with_an_empty_operand_passes_gradients(empty_first: bool) -> None:
    full = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    empty = Tensor(np.zeros((0, 3), np.float32), requires_grad=True)
    joined = Tensor.cat(empty, full) if empty_first else Tensor.cat(full, empty)
    assert joined.tolist() == np.arange(6, dtype=np.float32).reshape(2, 3).tolist()
    (joined * Tensor([[1.0], [3.0]])).sum().backward()
    assert full.grad is not None and full.grad.tolist() == [[1.0] * 3, [3.0] * 3]
    assert empty.grad is not None and empty.grad.shape == (0, 3)


EXTREMES = [-1e38, -1e10, -1e3, -100.0, 100.0, 1e3, 1e10, 1e38]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_saturating_functions_and_gradients_at_extremes(dtype: str) -> None:
    # known answers: each function is flat (gradient 0, or 1 for gelu on the right) far from 0
    values = np.array(EXTREMES, dtype=dtype)
    positive = values > 0
    for name, value_of, gradient_of in [
        ("sigmoid", lambda x: np.where(x > 0, 1.0, 0.0), lambda x: np.zeros_like(x)),
        ("tanh", lambda x: np.sign(x), lambda x: np.zeros_like(x)),
        ("gelu", lambda x: np.where(x > 0, x, 0.0), lambda x: np.where(x > 0, 1.0, 0.0)),
        ("gelu_tanh", lambda x: np.where(x > 0, x, 0.0), lambda x: np.where(x > 0, 1.0, 0.0)),
    ]:
        x = Tensor(values, requires_grad=True)
        y = x.gelu(approximate="tanh") if name == "gelu_tanh" else getattr(x, name)()
        y.sum().backward()
        assert x.grad is not None
        got, grad = y.numpy(), x.grad.numpy()
        assert not np.isnan(got).any() and not np.isnan(grad).any(), name
        expected = value_of(values)
        tolerance = 1e-30 if name == "sigmoid" else 0.0  # sigmoid(-100) is 3.7e-44, not 0
        np.testing.assert_allclose(got[positive], expected[positive], rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(got[~positive], expected[~positive], atol=tolerance, err_msg=name)
        np.testing.assert_allclose(grad, gradient_of(values), atol=1e-30, err_msg=name)


def test_sigmoid_far_left_keeps_its_tiny_value() -> None:
    # sigmoid(-100) = exp(-100) / (1 + exp(-100)) = 3.72e-44 (a float32 subnormal), as torch gives
    got = Tensor(np.array([-100.0], np.float64)).sigmoid().item()
    assert got == pytest.approx(np.exp(-100.0), rel=1e-12)


@pytest.mark.parametrize("name", ["relu", "abs"])
def test_relu_and_abs_gradient_at_zero_is_zero(name: str) -> None:
    x = Tensor([-2.0, 0.0, -0.0, 3.0], requires_grad=True)
    getattr(x, name)().sum().backward()
    assert x.grad is not None
    expected = [0.0, 0.0, 0.0, 1.0] if name == "relu" else [-1.0, 0.0, 0.0, 1.0]
    assert x.grad.tolist() == expected


def test_abs_and_relu_keep_nan_and_zero_sign() -> None:
    x = Tensor([float("nan"), -0.0, -1.5, 2.0])
    assert np.isnan(x.abs().numpy()[0]) and np.isnan(x.relu().numpy()[0])
    assert x.abs().tolist()[1:] == [0.0, 1.5, 2.0] and not np.signbit(x.abs().numpy()[1])
    assert x.relu().tolist()[1:] == [0.0, 0.0, 2.0]


def test_erf_gradient_at_zero_is_two_over_root_pi() -> None:
    x = Tensor([0.0], requires_grad=True)
    x.erf().sum().backward()
    assert x.grad is not None and x.grad.item() == pytest.approx(2.0 / np.sqrt(np.pi), rel=1e-5)  # A&S 7.1.26
