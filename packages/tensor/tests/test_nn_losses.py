"""Loss functions and one_hot (kiln.tensor.ops.losses) against numpy transcriptions of PyTorch's formulas (class
weights, ignore_index, label smoothing, reductions), hand-computed values, and the errors raised at the call."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(3)


pytestmark = pytest.mark.default_device("PYTHON")


def _log_softmax(x: Array, axis: int) -> Array:
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def _reduce(losses: Array, reduction: str) -> Any:
    return losses.mean() if reduction == "mean" else losses.sum() if reduction == "sum" else losses


def nll_reference(log_p: Array, target: Array, weight: Array | None, ignore_index: int, reduction: str) -> Any:
    """Per-entry gather, PyTorch's weighted mean (divided by the picked weights)."""
    class_axis = 0 if log_p.ndim == 1 else 1
    classes = log_p.shape[class_axis]
    moved = np.moveaxis(log_p, class_axis, -1).reshape(-1, classes)
    flat = target.reshape(-1)
    weights = np.ones(classes) if weight is None else weight.astype(np.float64)
    losses, picked = np.zeros(flat.shape), np.zeros(flat.shape)
    for i, label in enumerate(flat):
        if label != ignore_index:
            picked[i] = weights[label]
            losses[i] = -weights[label] * moved[i, label]
    if reduction == "none":
        return losses.reshape(target.shape)
    return losses.sum() if reduction == "sum" else losses.sum() / picked.sum()


def cross_entropy_reference(
    logits: Array, target: Array, weight: Array | None, ignore_index: int, reduction: str, smoothing: float
) -> Any:
    class_axis = 0 if logits.ndim == 1 else 1
    classes = logits.shape[class_axis]
    log_p = _log_softmax(logits.astype(np.float64), class_axis)
    view = [1] * logits.ndim
    view[class_axis] = classes
    weighted = log_p * (weight.reshape(view) if weight is not None else 1.0)
    if target.dtype.kind == "f":
        probabilities = target * (1 - smoothing) + smoothing / classes
        return _reduce(-(weighted * probabilities).sum(class_axis), reduction)
    loss = nll_reference(log_p, target, weight, ignore_index, reduction)
    if smoothing == 0:
        return loss
    kept = target != ignore_index
    smooth = np.where(kept, -weighted.sum(class_axis), 0.0)
    if reduction == "none":
        smoothed = smooth
    elif reduction == "sum":
        smoothed = smooth.sum()
    else:
        weights = np.ones(classes) if weight is None else weight
        smoothed = smooth.sum() / weights[target[kept]].sum()
    return (1 - smoothing) * loss + smoothing / classes * smoothed


CLASS_CASES = [((6, 4), (6,)), ((2, 3, 4, 2), (2, 4, 2)), ((5,), ())]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(("input_shape", "target_shape"), CLASS_CASES)
@pytest.mark.parametrize(("weighted", "smoothing"), [(False, 0.0), (True, 0.0), (False, 0.2), (True, 0.1)])
def test_cross_entropy_class_indices(
    input_shape: tuple[int, ...], target_shape: tuple[int, ...], reduction: str, weighted: bool, smoothing: float
) -> None:
    classes = input_shape[0 if len(input_shape) == 1 else 1]
    logits = RNG.standard_normal(input_shape)
    target = RNG.integers(0, classes, target_shape)
    ignore = 1
    weight = RNG.uniform(0.5, 2.0, classes) if weighted else None
    # a 0-dim target goes in as a Python int (Tensor(0-dim ndarray) currently comes out with shape (1,))
    target_tensor = Tensor(target) if target.ndim else Tensor(int(target))
    result = Tensor(logits).cross_entropy(
        target_tensor, Tensor(weight) if weight is not None else None, ignore, reduction, smoothing
    )
    expected = cross_entropy_reference(logits, target, weight, ignore, reduction, smoothing)
    if np.ndim(expected) == 0 and np.isnan(expected):  # every target ignored: 0 / 0, like PyTorch
        assert math.isnan(result.item())
        return
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_probabilities(reduction: str, smoothing: float) -> None:
    logits = RNG.standard_normal((3, 5, 2))
    target = np.moveaxis(np.exp(_log_softmax(RNG.standard_normal((3, 5, 2)), 1)), 0, 0)
    weight = RNG.uniform(0.5, 2.0, 5)
    result = Tensor(logits).cross_entropy(
        Tensor(target), Tensor(weight), reduction=reduction, label_smoothing=smoothing
    )
    expected = cross_entropy_reference(logits, target, weight, -100, reduction, smoothing)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_cross_entropy_float32_hand_value() -> None:
    # two equal logits: -log(1 / 2)
    result = Tensor(np.zeros((4, 2), dtype=np.float32)).cross_entropy(Tensor([0, 1, 1, 0]))
    assert result.dtype == dtypes.float32
    assert result.item() == pytest.approx(math.log(2.0), rel=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction: str) -> None:
    log_p = _log_softmax(RNG.standard_normal((7, 3)), 1).astype(np.float32)
    target = RNG.integers(0, 3, (7,))
    weight = RNG.uniform(0.5, 2.0, 3).astype(np.float32)
    result = Tensor(log_p).nll_loss(Tensor(target), Tensor(weight), ignore_index=2, reduction=reduction)
    expected = nll_reference(log_p.astype(np.float64), target, weight, 2, reduction)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_nll_loss_ignores_minus_infinity_of_other_classes() -> None:
    log_p = np.array([[0.0, -np.inf], [-np.inf, -0.5]], dtype=np.float32)
    assert Tensor(log_p).nll_loss(Tensor([0, 1])).item() == pytest.approx(0.25)


def _bce(p: Array, t: Array) -> Array:
    with np.errstate(divide="ignore"):  # log(0) = -inf, clamped to -100 like PyTorch
        return -(t * np.maximum(np.log(p), -100) + (1 - t) * np.maximum(np.log(1 - p), -100))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(reduction: str) -> None:
    p = RNG.uniform(0.01, 0.99, (4, 3))
    p[0, 0], p[1, 1] = 0.0, 1.0  # log(0) clamps at -100
    t = RNG.uniform(0, 1, (4, 3))
    weight = RNG.uniform(0.5, 2.0, (3,))
    result = Tensor(p).binary_cross_entropy(Tensor(t), Tensor(weight), reduction)
    np.testing.assert_allclose(result.numpy(), _reduce(_bce(p, t) * weight, reduction), rtol=1e-10)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_cross_entropy_with_logits(reduction: str, dtype: Any) -> None:
    x = (RNG.standard_normal((5, 3)) * 4).astype(dtype)
    x[0, 0], x[0, 1] = 60.0, -60.0  # far from zero: no overflow
    t = RNG.uniform(0, 1, (5, 3)).astype(dtype)
    pos_weight = RNG.uniform(0.5, 3.0, (3,)).astype(dtype)
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    log_sigmoid = -np.logaddexp(0, -x64)
    log_one_minus = -np.logaddexp(0, x64)
    expected = -(pos_weight * t64 * log_sigmoid + (1 - t64) * log_one_minus)
    result = Tensor(x).binary_cross_entropy_with_logits(Tensor(t), reduction=reduction, pos_weight=Tensor(pos_weight))
    tolerance = 1e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(result.numpy(), _reduce(expected, reduction), rtol=tolerance, atol=tolerance)
    plain = Tensor(x).binary_cross_entropy_with_logits(Tensor(t), reduction=reduction)
    unweighted = -(t64 * log_sigmoid + (1 - t64) * log_one_minus)
    np.testing.assert_allclose(plain.numpy(), _reduce(unweighted, reduction), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(reduction: str) -> None:
    prediction = RNG.standard_normal((4, 5)).astype(np.float32) * 2
    target = RNG.standard_normal((5,)).astype(np.float32)  # broadcasts along the rows
    d = (prediction - target).astype(np.float64)
    distance = np.abs(d)
    expected = {
        "mse": d * d,
        "l1": distance,
        "smooth_l1": np.where(distance < 0.7, 0.5 * d * d / 0.7, distance - 0.35),
        "huber": np.where(distance <= 1.5, 0.5 * d * d, 1.5 * (distance - 0.75)),
    }
    x, y = Tensor(prediction), Tensor(target)
    results = {
        "mse": x.mse_loss(y, reduction),
        "l1": x.l1_loss(y, reduction),
        "smooth_l1": x.smooth_l1_loss(y, reduction, beta=0.7),
        "huber": x.huber_loss(y, reduction, delta=1.5),
    }
    for name, result in results.items():
        np.testing.assert_allclose(
            result.numpy(), _reduce(expected[name], reduction), rtol=1e-5, atol=1e-6, err_msg=name
        )


def test_smooth_l1_with_zero_beta_is_l1_and_integer_inputs_become_float() -> None:
    x, y = Tensor([1, -2, 3]), Tensor([0, 0, 0])
    result = x.smooth_l1_loss(y, beta=0.0)
    assert result.dtype == dtypes.default_float
    assert result.item() == pytest.approx(2.0)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction: str, log_target: bool) -> None:
    log_q = _log_softmax(RNG.standard_normal((3, 4)), 1)
    p = np.exp(_log_softmax(RNG.standard_normal((3, 4)), 1))
    if not log_target:
        p[0, 1] = 0.0  # 0 * log 0 counts as 0
    target = np.log(p) if log_target else p
    pointwise = np.where(p == 0, 0.0, p * (np.log(np.where(p == 0, 1.0, p)) - log_q))
    expected = pointwise.sum() / 3 if reduction == "batchmean" else _reduce(pointwise, reduction)
    result = Tensor(log_q).kl_div(Tensor(target), reduction, log_target)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_one_hot() -> None:
    labels = np.array([[0, 3], [2, 1]])
    result = Tensor(labels).one_hot(5)
    assert result.dtype == dtypes.int64
    np.testing.assert_array_equal(result.numpy(), np.eye(5, dtype=np.int64)[labels])
    np.testing.assert_array_equal(Tensor(labels).one_hot().numpy(), np.eye(4, dtype=np.int64)[labels])


# ---------------------------------------------------------------------------------------------------------------
# errors at the call
# ---------------------------------------------------------------------------------------------------------------


def test_class_loss_errors() -> None:
    logits = Tensor.zeros(4, 3)
    with pytest.raises(ValueError, match=r"class-index target shape \(3,\) must be \(4,\) for input shape \(4, 3\)"):
        logits.cross_entropy(Tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"probability target shape \(4, 2\) must equal the input shape \(4, 3\)"):
        logits.cross_entropy(Tensor.zeros(4, 2))
    with pytest.raises(
        ValueError, match=r"cross_entropy reduction must be one of \('none', 'mean', 'sum'\), got 'avg'"
    ):
        logits.cross_entropy(Tensor([0, 1, 2, 0]), reduction="avg")
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\], got 1.5"):
        logits.cross_entropy(Tensor([0, 1, 2, 0]), label_smoothing=1.5)
    with pytest.raises(
        ValueError, match=r"cross_entropy weight must have shape \(3,\) \(one value per class\), got \(2,\)"
    ):
        logits.cross_entropy(Tensor([0, 1, 2, 0]), weight=Tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="cross_entropy target must be a Tensor, got list"):
        logits.cross_entropy([0, 1, 2, 0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"nll_loss target must hold integer class indices, got dtypes.float32"):
        logits.nll_loss(Tensor.zeros(4))
    with pytest.raises(ValueError, match=r"nll_loss: input must have a class dim, got a 0-dim tensor"):
        Tensor(1.0).nll_loss(Tensor(0))


def test_pointwise_loss_errors() -> None:
    with pytest.raises(
        ValueError, match=r"binary_cross_entropy: target shape \(3,\) must equal the input shape \(2, 3\)"
    ):
        Tensor.zeros(2, 3).binary_cross_entropy(Tensor.zeros(3))
    with pytest.raises(ValueError, match=r"mse_loss: target shape \(4,\) does not broadcast with input shape \(2, 3\)"):
        Tensor.zeros(2, 3).mse_loss(Tensor.zeros(4))
    with pytest.raises(ValueError, match=r"kl_div reduction must be one of .*'batchmean'\), got 'max'"):
        Tensor.zeros(2).kl_div(Tensor.zeros(2), reduction="max")
    with pytest.raises(ValueError, match="huber_loss delta must be a positive number, got 0"):
        Tensor.zeros(2).huber_loss(Tensor.zeros(2), delta=0)
    with pytest.raises(ValueError, match="smooth_l1_loss beta must be a non-negative number, got -1"):
        Tensor.zeros(2).smooth_l1_loss(Tensor.zeros(2), beta=-1)


def test_one_hot_errors() -> None:
    with pytest.raises(TypeError, match=r"one_hot needs an integer tensor of class indices, got dtypes.float32"):
        Tensor([1.0]).one_hot(3)
    with pytest.raises(ValueError, match=r"one_hot num_classes must be -1 \(infer\) or >= 0, got -2"):
        Tensor([1]).one_hot(-2)
    with pytest.raises(ValueError, match="one_hot class values must be non-negative, got -1"):
        Tensor([-1, 2]).one_hot()
