"""Backward through symbolic shapes (issue 37): gradients of graphs over a dim of bound-Variable size, and a small
Linear training loop whose last batch is partial (the batch size is a Variable), plain and under TinyJit. Gradients
and trained weights are checked against numpy; a new value of the variable compiles nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from kiln.tensor import Tensor, TinyJit, Variable, nn, optim
from kiln.tensor.realize.engine import Engine

EachValue = Callable[[Callable[[int], None], Sequence[int]], None]
N = Variable("n", 1, 10)
VALUES = (3, 7, 10, 1)
RNG = np.random.default_rng(37)
DATA = RNG.standard_normal((10, 4)).astype(np.float32)
WEIGHT = RNG.standard_normal((4,)).astype(np.float32)
MATRIX = RNG.standard_normal((4, 3)).astype(np.float32)


def test_backward_through_a_variable_slice(engine: Engine, each_value: EachValue) -> None:
    def run(value: int) -> None:
        x, w = Tensor(DATA, requires_grad=True), Tensor(WEIGHT, requires_grad=True)
        (x[: N.bind(value)] * w).sum().backward()
        expected = np.zeros_like(DATA)
        expected[:value] = WEIGHT
        assert x.grad is not None and w.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), expected)
        np.testing.assert_allclose(w.grad.numpy(), DATA[:value].sum(0), rtol=1e-6, atol=1e-6)

    each_value(run, VALUES)


def test_backward_of_matmul_mean_and_softmax_over_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    def run(value: int) -> None:
        x, m = Tensor(DATA, requires_grad=True), Tensor(MATRIX, requires_grad=True)
        rows = x[: N.bind(value)]
        loss = (rows @ m).softmax(-1).mean() + (rows * rows).mean()
        loss.backward()
        # numpy: d mean(softmax(r @ m)) is 0 (each softmax row sums to 1); d mean(r * r) = 2 r / (n * 4)
        expected = np.zeros_like(DATA)
        expected[:value] = 2 * DATA[:value] / (value * 4)
        assert x.grad is not None and m.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m.grad.numpy(), np.zeros_like(MATRIX), atol=1e-6)

    each_value(run, VALUES)


INPUTS = RNG.standard_normal((10, 3)).astype(np.float32)
TARGETS = RNG.standard_normal((10, 2)).astype(np.float32)
W0 = RNG.standard_normal((2, 3)).astype(np.float32)
B0 = RNG.standard_normal((2,)).astype(np.float32)
BATCH = Variable("batch", 1, 4)
BATCHES = ((0, 4), (4, 4), (8, 2))  # ten rows in batches of four: the last one is partial
EPOCHS, LEARNING_RATE = 3, 0.1


def _numpy_training() -> tuple[np.ndarray, np.ndarray, list[float]]:
    """SGD on the mean squared error of x @ W.T + b, the gradients written out by hand."""
    weight, bias = W0.astype(np.float64), B0.astype(np.float64)
    losses = []
    for _ in range(EPOCHS):
        for start, size in BATCHES:
            x, y = INPUTS[start : start + size], TARGETS[start : start + size]
            difference = x @ weight.T + bias - y
            losses.append(float((difference**2).mean()))
            gradient = 2 * difference / difference.size
            weight = weight - LEARNING_RATE * gradient.T @ x
            bias = bias - LEARNING_RATE * gradient.sum(0)
    return weight, bias, losses


@pytest.mark.parametrize("jit", [False, True], ids=["plain", "tinyjit"])
def test_linear_training_with_a_partial_last_batch(engine: Engine, jit: bool) -> None:
    model = nn.Linear(3, 2)
    model.weight.assign(Tensor(W0)).realize()
    assert model.bias is not None
    model.bias.assign(Tensor(B0)).realize()
    optimizer = optim.SGD(model.parameters(), lr=LEARNING_RATE)

    def step(inputs: Tensor, targets: Tensor, size: Tensor) -> Tensor:
        # a loader's batch buffers hold four rows; the step reads the first `size` of them
        optimizer.zero_grad()
        loss = ((model(inputs[:size]) - targets[:size]) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss.realize()

    run = TinyJit(step) if jit else step
    losses: list[float] = []
    built = []
    for _ in range(EPOCHS):
        for start, size in BATCHES:
            inputs, targets = np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32)
            inputs[:size], targets[:size] = INPUTS[start : start + size], TARGETS[start : start + size]
            losses.append(run(Tensor(inputs), Tensor(targets), BATCH.bind(size)).item())  # type: ignore[arg-type]
            built.append(engine.programs_built)
    weight, bias, expected_losses = _numpy_training()
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.weight.numpy(), weight, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.bias.numpy(), bias, rtol=1e-5, atol=1e-6)
    # the first step compiles every kernel; the later ones, partial batches included, compile nothing
    assert built[0] == built[-1], f"a new batch size compiled kernels: programs built after each step {built}"
    if jit:
        assert isinstance(run, TinyJit) and run.captured is not None


SCALE = np.arange(60, dtype=np.float64).reshape(10, 6) / 10


def _numeric_gradient(function: Callable[[np.ndarray], np.ndarray], value: int) -> np.ndarray:
    """d sum(function(DATA6[:value])) / d DATA6 by central differences in float64 (zero past the first rows)."""
    gradient = np.zeros((10, 6))
    for row in range(value):
        for column in range(6):
            up, down = DATA6[:value].astype(np.float64), DATA6[:value].astype(np.float64)
            up[row, column] += 1e-4
            down[row, column] -= 1e-4
            gradient[row, column] = (function(up).sum() - function(down).sum()) / 2e-4
    return gradient


DATA6 = RNG.standard_normal((10, 6)).astype(np.float32)
AT_LEAST_THREE = Variable("m", 3, 10)
GRADIENT_CASES: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray], Variable]] = {
    "cumsum": (
        lambda t: t.cumsum(0) * Tensor(SCALE.astype(np.float32))[: t.shape[0]],
        lambda a: np.cumsum(a, 0) * SCALE[: len(a)],
        N,
    ),
    "every second row": (lambda t: t[::2] * 3, lambda a: a[::2] * 3, N),
    "rows reversed": (
        lambda t: t[::-1] * Tensor(SCALE.astype(np.float32))[: t.shape[0]],
        lambda a: a[::-1] * SCALE[: len(a)],
        N,
    ),
    "reflect pad": (
        lambda t: t.pad(((1, 2), (0, 0)), mode="reflect") ** 2,
        lambda a: np.pad(a, ((1, 2), (0, 0)), mode="reflect") ** 2,
        AT_LEAST_THREE,
    ),
    "softmax": (
        lambda t: t.softmax(0) * Tensor(SCALE.astype(np.float32))[: t.shape[0]],
        lambda a: np.exp(a) / np.exp(a).sum(0) * SCALE[: len(a)],
        N,
    ),
    "max": (lambda t: t.max(0)[0], lambda a: a.max(0), N),
    "sort": (
        lambda t: t.sort(0)[0] * Tensor(SCALE.astype(np.float32))[: t.shape[0]],
        lambda a: np.sort(a, 0) * SCALE[: len(a)],
        N,
    ),
}


@pytest.mark.parametrize("case", sorted(GRADIENT_CASES))
def test_gradients_of_ops_along_a_variable_dim(engine: Engine, case: str, each_value: EachValue) -> None:
    build, reference, variable = GRADIENT_CASES[case]

    def run(value: int) -> None:
        x = Tensor(DATA6, requires_grad=True)
        build(x[: variable.bind(value)]).sum().backward()
        assert x.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), _numeric_gradient(reference, value), rtol=1e-2, atol=2e-2)

    each_value(run, (3, 7, 10, 4))
