"""kiln.tensor.optim: each optimizer's parameter sequence over several steps against a numpy re-implementation of
PyTorch's documented update rule (float64), clipping against numpy, one schedule per step, and the errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln.tensor.realize.mutation as mutation_module
from kiln.tensor import GlobalCounters, Tensor, optim
from kiln.tensor.realize import method_cache_size

Array = np.ndarray[Any, Any]
STEPS = 6
RNG = np.random.default_rng(17)
START = [RNG.standard_normal((3, 4)), RNG.standard_normal(5)]
LINEAR = [RNG.standard_normal((3, 4)), RNG.standard_normal(5)]
CURVATURE = [RNG.uniform(0.5, 2.0, (3, 4)), RNG.uniform(0.5, 2.0, 5)]


pytestmark = pytest.mark.default_device("PYTHON")


def gradient_of(index: int, w: Array) -> Array:
    """The gradient of the test loss sum(c * w) + sum(d * w**2) / 2 + sum(w**4) / 4 (it depends on w)."""
    return LINEAR[index] + CURVATURE[index] * w + w**3


def kiln_run(make: Callable[[list[Tensor]], optim.Optimizer], steps: int = STEPS) -> list[list[Array]]:
    """The parameters after each step of the optimizer `make` builds, on the test loss."""
    params = [Tensor(start.astype(np.float32), requires_grad=True) for start in START]
    optimizer = make(params)
    history = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = Tensor(0.0)
        for p, c, d in zip(params, LINEAR, CURVATURE):
            loss = loss + (p * Tensor(c.astype(np.float32))).sum() + (p * p * Tensor(d.astype(np.float32))).sum() / 2
            loss = loss + (p * p * p * p).sum() / 4
        loss.backward()
        optimizer.step()
        history.append([p.numpy().astype(np.float64) for p in params])
    return history


Rule = Callable[[list[Array], list[Array], dict[str, Any], int], None]


def numpy_run(rule: Rule, steps: int = STEPS) -> list[list[Array]]:
    """The parameters after each step of `rule(params, grads, state, t)` (updates params in place, t from 1)."""
    params = [start.astype(np.float32).astype(np.float64) for start in START]
    state: dict[str, Any] = {}
    history = []
    for t in range(1, steps + 1):
        grads = [gradient_of(index, w) for index, w in enumerate(params)]
        rule(params, grads, state, t)
        history.append([p.copy() for p in params])
    return history


def sgd_rule(
    lr: float,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    maximize: bool = False,
) -> Rule:
    def rule(params: list[Array], grads: list[Array], state: dict[str, Any], t: int) -> None:
        for i, (p, g) in enumerate(zip(params, grads)):
            g = -g if maximize else g
            g = g + weight_decay * p
            if momentum:
                b = g.copy() if t == 1 else momentum * state[i] + (1 - dampening) * g
                state[i] = b
                g = g + momentum * b if nesterov else b
            p -= lr * g

    return rule


def adam_rule(
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = False,
) -> Rule:
    def rule(params: list[Array], grads: list[Array], state: dict[str, Any], t: int) -> None:
        b1, b2 = betas
        for i, (p, g) in enumerate(zip(params, grads)):
            if decoupled:
                p *= 1 - lr * weight_decay
            else:
                g = g + weight_decay * p
            m, v = state.get(("m", i), 0.0), state.get(("v", i), 0.0)
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            state[("m", i)], state[("v", i)] = m, v
            p -= lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)

    return rule


def rmsprop_rule(
    lr: float,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    centered: bool = False,
) -> Rule:
    def rule(params: list[Array], grads: list[Array], state: dict[str, Any], t: int) -> None:
        for i, (p, g) in enumerate(zip(params, grads)):
            g = g + weight_decay * p
            v = alpha * state.get(("v", i), 0.0) + (1 - alpha) * g * g
            state[("v", i)] = v
            if centered:
                a = alpha * state.get(("a", i), 0.0) + (1 - alpha) * g
                state[("a", i)] = a
                v = v - a * a
            denominator = np.sqrt(v) + eps
            if momentum:
                b = momentum * state.get(("b", i), 0.0) + g / denominator
                state[("b", i)] = b
                p -= lr * b
            else:
                p -= lr * g / denominator

    return rule


def lamb_rule(
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    adam: bool = False,
) -> Rule:
    def rule(params: list[Array], grads: list[Array], state: dict[str, Any], t: int) -> None:
        b1, b2 = betas
        for i, (p, g) in enumerate(zip(params, grads)):
            m = b1 * state.get(("m", i), 0.0) + (1 - b1) * g
            v = b2 * state.get(("v", i), 0.0) + (1 - b2) * g * g
            state[("m", i)], state[("v", i)] = m, v
            update = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + weight_decay * p
            weight_norm, update_norm = np.linalg.norm(p), np.linalg.norm(update)
            trust = 1.0 if adam or weight_norm == 0 or update_norm == 0 else weight_norm / update_norm
            p -= lr * trust * update

    return rule


CASES: list[tuple[str, Callable[[list[Tensor]], optim.Optimizer], Rule]] = [
    ("sgd", lambda p: optim.SGD(p, lr=0.05), sgd_rule(0.05)),
    ("sgd_momentum", lambda p: optim.SGD(p, lr=0.05, momentum=0.9), sgd_rule(0.05, 0.9)),
    (
        "sgd_dampening_decay",
        lambda p: optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1),
        sgd_rule(0.05, 0.8, 0.3, 0.1),
    ),
    ("sgd_nesterov", lambda p: optim.SGD(p, lr=0.03, momentum=0.9, nesterov=True), sgd_rule(0.03, 0.9, nesterov=True)),
    ("sgd_maximize", lambda p: optim.SGD(p, lr=0.01, maximize=True), sgd_rule(0.01, maximize=True)),
    ("adam", lambda p: optim.Adam(p, lr=0.1), adam_rule(0.1)),
    (
        "adam_decay_betas",
        lambda p: optim.Adam(p, lr=0.05, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.2),
        adam_rule(0.05, (0.8, 0.9), 1e-6, 0.2),
    ),
    ("adamw", lambda p: optim.AdamW(p, lr=0.1), adam_rule(0.1, weight_decay=0.01, decoupled=True)),
    (
        "adamw_decay",
        lambda p: optim.AdamW(p, lr=0.05, weight_decay=0.5),
        adam_rule(0.05, weight_decay=0.5, decoupled=True),
    ),
    ("rmsprop", lambda p: optim.RMSprop(p, lr=0.01), rmsprop_rule(0.01)),
    (
        "rmsprop_centered_momentum",
        lambda p: optim.RMSprop(p, lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.1),
        rmsprop_rule(0.01, 0.9, weight_decay=0.1, momentum=0.5, centered=True),
    ),
    ("lamb", lambda p: optim.LAMB(p, lr=0.05, weight_decay=0.1), lamb_rule(0.05, weight_decay=0.1)),
    ("lamb_adam", lambda p: optim.LAMB(p, lr=0.05, adam=True), lamb_rule(0.05, adam=True)),
]


@pytest.mark.parametrize(("name", "make", "rule"), CASES, ids=[case[0] for case in CASES])
def test_update_sequence_matches_pytorchs_rule(
    name: str, make: Callable[[list[Tensor]], optim.Optimizer], rule: Rule
) -> None:
    for step, (got, expected) in enumerate(zip(kiln_run(make), numpy_run(rule))):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6, err_msg=f"{name} step {step + 1}")


def test_one_schedule_per_step_whatever_the_parameter_count(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = mutation_module.realize_uops

    def counting(uops: Any) -> Any:
        calls.append(len(uops))
        return original(uops)

    params = [Tensor(np.ones(3, np.float32), requires_grad=True) for _ in range(7)]
    optimizer = optim.Adam(params, lr=0.1)
    loss = Tensor(0.0)
    for p in params:
        loss = loss + (p * p).sum()
    loss.backward()  # computes the loss too: the step needs no snapshot of the old parameters for it
    monkeypatch.setattr(mutation_module, "realize_uops", counting)
    optimizer.step()
    # one schedule: the writes of t and (m, v, p) per parameter (backward computed the gradients)
    assert calls == [1 + 7 * 3]


def test_changing_the_learning_rate_compiles_nothing() -> None:
    params = [Tensor(np.ones(4, np.float32), requires_grad=True)]
    optimizer = optim.SGD(params, lr=0.5)
    values = []
    for step in range(3):
        (params[0] * params[0]).sum().backward()  # gradient 2 w
        optimizer.step()
        optimizer.zero_grad()
        values.append(params[0].numpy()[0])
        if step == 0:
            compiled = method_cache_size()
        optimizer.lr = 0.25 * (step + 1)
    assert method_cache_size() == compiled
    np.testing.assert_allclose(values, [0.0, 0.0, 0.0], atol=1e-7)  # w = 1 - 0.5 * 2 = 0, then stays 0
    params = [Tensor(np.ones(2, np.float32), requires_grad=True)]
    optimizer = optim.SGD(params, lr=0.1)
    expected = 1.0
    for lr in (0.1, 0.2, 0.05):
        optimizer.lr = lr
        (params[0] * params[0]).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        expected -= lr * 2 * expected
        np.testing.assert_allclose(params[0].numpy(), [expected, expected], rtol=1e-6)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm(norm_type: float, max_norm: float) -> None:
    values = [RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal(4).astype(np.float32)]
    params = [Tensor(value, requires_grad=True) for value in values]
    loss = (params[0] * params[0] * 1.5).sum() + (params[1] * params[1] * params[1]).sum()
    loss.backward()
    grads = [3.0 * values[0].astype(np.float64), 3.0 * values[1].astype(np.float64) ** 2]
    flat = np.concatenate([g.reshape(-1) for g in grads])
    total = np.abs(flat).max() if math.isinf(norm_type) else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    got = optim.clip_grad_norm_(params, max_norm, norm_type)
    np.testing.assert_allclose(got.item(), total, rtol=1e-5)
    scale = min(1.0, max_norm / (total + 1e-6))
    for p, g in zip(params, grads):
        assert p.grad is not None
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-5, atol=1e-7)


def test_clip_grad_value_and_nonfinite_norm() -> None:
    w = Tensor(np.array([3.0, -4.0, 0.5], np.float32), requires_grad=True)
    (w * w).sum().backward()
    optim.clip_grad_value_([w], 2.0)
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, -2.0, 1.0])
    v = Tensor(np.array([1.0], np.float32), requires_grad=True)
    (v * float("inf")).sum().backward()
    with pytest.raises(RuntimeError, match="non-finite"):
        optim.clip_grad_norm_([v], 1.0, error_if_nonfinite=True)


def test_optimizer_errors() -> None:
    plain = Tensor(np.ones(2, np.float32), requires_grad=False)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="none of the 1 optimizer parameters requires grad"):
        optim.SGD([plain], lr=0.1)
    w = Tensor(np.ones(2, np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="learning rate"):
        optim.Adam([w], lr=-1.0)
    with pytest.raises(ValueError, match="beta parameter at index 1"):
        optim.Adam([w], betas=(0.9, 1.5))
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(TypeError, match="must be a Tensor"):
        optim.SGD([w, 3.0], lr=0.1)  # type: ignore[list-item]
    # frozen and integer tensors (what a state-dict walk also returns) are skipped, repeats optimized once
    counter = Tensor(np.zeros((), np.int64))
    assert optim.SGD([w, plain, counter, w], lr=0.1).params == [w]
    assert counter.requires_grad is None and plain.requires_grad is False
    with pytest.raises(RuntimeError, match="no gradient"):
        optim.SGD([w], lr=0.1).step()


def test_coupled_parameters_update_from_the_old_values() -> None:
    # each layer's gradient reads the other layer's weights: every update must read the values before the step
    x, y = RNG.standard_normal((8, 3)), RNG.standard_normal((8, 2))
    w1, w2 = RNG.standard_normal((3, 4)) * 0.5, RNG.standard_normal((4, 2)) * 0.5
    params = [Tensor(w.astype(np.float32), requires_grad=True) for w in (w1, w2)]
    optimizer = optim.SGD(params, lr=0.1, momentum=0.9)
    w1, w2 = w1.astype(np.float32).astype(np.float64), w2.astype(np.float32).astype(np.float64)
    buffers: list[Array] = []
    for step in range(3):
        optimizer.zero_grad()
        hidden = (Tensor(x.astype(np.float32)) @ params[0]).tanh()
        ((hidden @ params[1] - Tensor(y.astype(np.float32))) ** 2).mean().backward()
        optimizer.step()
        h = np.tanh(x.astype(np.float32) @ w1)
        d_out = 2 * (h @ w2 - y.astype(np.float32)) / y.size
        g2 = h.T @ d_out
        g1 = x.astype(np.float32).T @ ((d_out @ w2.T) * (1 - h * h))
        buffers = [g1, g2] if step == 0 else [0.9 * b + g for b, g in zip(buffers, (g1, g2))]
        w1, w2 = w1 - 0.1 * buffers[0], w2 - 0.1 * buffers[1]
        np.testing.assert_allclose(params[0].numpy(), w1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(params[1].numpy(), w2, rtol=1e-5, atol=1e-6)


def test_zero_grad_to_none_or_zeros() -> None:
    w = Tensor(np.ones(3, np.float32), requires_grad=True)
    optimizer = optim.SGD([w], lr=0.5)
    (w * 2).sum().backward()
    optimizer.zero_grad(set_to_none=False)
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0, 0.0])
    (w * 2).sum().backward()  # accumulates onto the zeros
    optimizer.step()
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0, 0.0])
    optimizer.zero_grad()
    assert w.grad is None


def test_a_loss_read_after_the_step_is_the_loss_before_it_and_costs_no_kernel() -> None:
    # torch's order: loss.backward(); optimizer.step(); loss.item() gives the loss of the old parameters. The lazy
    # loss is computed in the step's schedule, so reading it afterwards launches nothing
    w = Tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)
    x = Tensor(np.array([[0.5, 1.0], [2.0, -1.0]], np.float32))
    optimizer = optim.SGD([w], lr=0.1)
    loss = ((x @ w) ** 2).sum()
    loss.backward()
    optimizer.step()
    before = GlobalCounters.kernel_count
    expected = float(((np.array([[0.5, 1.0], [2.0, -1.0]]) @ np.array([1.0, -2.0])) ** 2).sum())
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert GlobalCounters.kernel_count == before
    gradient = 2 * np.array([[0.5, 1.0], [2.0, -1.0]]).T @ (np.array([[0.5, 1.0], [2.0, -1.0]]) @ [1.0, -2.0])
    np.testing.assert_allclose(w.numpy(), np.array([1.0, -2.0]) - 0.1 * gradient, rtol=1e-6)
