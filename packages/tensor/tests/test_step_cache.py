"""Re-scheduling a training step without the JIT (issue 16): a graph with the structure of one already scheduled
reuses the plan and the kernels, runs on the new call's buffers, and computes what numpy computes.

The step is the quickstart's: an MLP 2-16-16-2 (tanh), cross-entropy, backward, the gradients' joint norm clipped,
SGD with momentum. A numpy implementation of the same step checks every parameter after every step.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor, optim
from kiln.tensor.realize import Engine, use_engine
from kiln.tensor.schedule import normalize
from kiln.tensor.schedule.normalize import realized_view
from kiln.uops import Context

DEVICE = "CPU"
LR, MOMENTUM, MAX_NORM = 0.3, 0.9, 0.5


def _data(seed: int, sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(40, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], 40)
    weights = [rng.uniform(-0.5, 0.5, shape).astype(np.float32) for shape in itertools.pairwise(sizes)]
    biases = [rng.uniform(-0.1, 0.1, size).astype(np.float32) for size in sizes[1:]]
    return x, y, weights, biases


class _NumpyStep:
    """The same training step in float64 numpy (PyTorch's SGD rule: the first step's velocity is the gradient)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, weights: list[np.ndarray], biases: list[np.ndarray]) -> None:
        self.x, self.y = x.astype(np.float64), y
        self.params = [p.astype(np.float64) for p in (*weights, *biases)]
        self.velocity: list[np.ndarray] | None = None

    def step(self) -> float:
        layers = len(self.params) // 2
        weights, biases = self.params[:layers], self.params[layers:]
        activations = [self.x]
        h = self.x
        for index, (w, b) in enumerate(zip(weights, biases, strict=True)):
            h = h @ w + b
            if index < layers - 1:
                h = np.tanh(h)
                activations.append(h)
        shifted = h - h.max(1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
        rows = np.arange(len(self.y))
        loss = -log_probs[rows, self.y].mean()
        grad = np.exp(log_probs)
        grad[rows, self.y] -= 1
        grad /= len(self.y)
        weight_grads, bias_grads = [None] * layers, [None] * layers
        for index in reversed(range(layers)):
            weight_grads[index] = activations[index].T @ grad
            bias_grads[index] = grad.sum(0)
            if index:
                grad = (grad @ weights[index].T) * (1 - activations[index] ** 2)
        grads = [*weight_grads, *bias_grads]
        total = np.sqrt(sum((g**2).sum() for g in grads))
        scale = min(1.0, MAX_NORM / (total + 1e-6))
        grads = [g * scale for g in grads]
        self.velocity = grads if self.velocity is None else [MOMENTUM * v + g for v, g in zip(self.velocity, grads)]
        self.params = [p - LR * v for p, v in zip(self.params, self.velocity, strict=True)]
        return float(loss)


class _KilnStep:
    def __init__(self, x: np.ndarray, y: np.ndarray, weights: list[np.ndarray], biases: list[np.ndarray]) -> None:
        self.x, self.y = Tensor(x, device=DEVICE), Tensor(y, device=DEVICE)
        self.weights = [Tensor(w, device=DEVICE, requires_grad=True) for w in weights]
        self.biases = [Tensor(b, device=DEVICE, requires_grad=True) for b in biases]
        self.params = [*self.weights, *self.biases]
        self.optimizer = optim.SGD(self.params, lr=LR, momentum=MOMENTUM)

    def step(self) -> float:
        self.optimizer.zero_grad()
        h = self.x
        for index, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if index < len(self.weights) - 1:
                h = h.tanh()
        loss = -h.log_softmax(-1).gather(1, self.y.reshape(-1, 1)).mean()
        loss.backward()
        optim.clip_grad_norm_(self.params, MAX_NORM)
        self.optimizer.step()
        return float(loss.item())


def _check(kiln: _KilnStep, reference: _NumpyStep) -> None:
    for got, expected in zip(kiln.params, reference.params, strict=True):
        np.testing.assert_allclose(got.numpy(), expected, rtol=2e-4, atol=2e-5)


def test_a_training_step_reuses_its_plans_and_kernels_and_matches_numpy() -> None:
    sizes = (2, 16, 16, 2)
    with use_engine(Engine()) as engine:
        kiln, reference = _KilnStep(*_data(0, sizes)), _NumpyStep(*_data(0, sizes))
        for _ in range(3):  # the first step (velocity = gradient) and the second (momentum) have their own plans
            assert abs(kiln.step() - reference.step()) < 1e-4
            _check(kiln, reference)
        misses, programs, hits = engine.schedule.misses, engine.programs_built, engine.schedule.hits
        for _ in range(3):
            assert abs(kiln.step() - reference.step()) < 1e-4
            _check(kiln, reference)
        assert engine.schedule.misses == misses and engine.programs_built == programs  # nothing planned or built
        assert engine.schedule.hits > hits
        # the same structure over other buffers (a second model): the same plans and kernels, its own values
        other, other_reference = _KilnStep(*_data(1, sizes)), _NumpyStep(*_data(1, sizes))
        for _ in range(4):
            assert abs(other.step() - other_reference.step()) < 1e-4
            _check(other, other_reference)
        assert engine.schedule.misses == misses and engine.programs_built == programs
        _check(kiln, reference)  # the first model's parameters were not touched by the second one's steps
        # another structure (wider hidden layers) is planned anew, and is right too
        wide, wide_reference = _KilnStep(*_data(2, (2, 24, 24, 2))), _NumpyStep(*_data(2, (2, 24, 24, 2)))
        assert abs(wide.step() - wide_reference.step()) < 1e-4
        _check(wide, wide_reference)
        assert engine.schedule.misses > misses


def test_normalizing_merges_movement_chains_so_a_chain_and_its_merged_form_share_a_plan() -> None:
    with use_engine(Engine()) as engine:
        a = Tensor(np.arange(24, dtype=np.float32), device=DEVICE)
        chained = (a.reshape(2, 12).reshape(4, 6).permute(1, 0).permute(1, 0) + 1).realize()
        direct = (Tensor(np.arange(24, dtype=np.float32) * 2, device=DEVICE).reshape(4, 6) + 1).realize()
        assert engine.schedule.misses == 1 and engine.schedule.hits == 1  # one structure once the chains merge
        np.testing.assert_array_equal(chained.numpy(), np.arange(24, dtype=np.float32).reshape(4, 6) + 1)
        np.testing.assert_array_equal(direct.numpy(), np.arange(24, dtype=np.float32).reshape(4, 6) * 2 + 1)
        b = Tensor(np.ones(24, np.float32), device=DEVICE)
        chain = b.reshape(2, 12).reshape(4, 6).reshape(24)
        assert normalize([chain.uop]).roots == normalize([b.uop]).roots  # a chain back to the shape is the buffer


def test_a_constant_graph_with_a_chain_gives_each_tensor_its_own_memory() -> None:
    with use_engine(Engine()):

        def build() -> Tensor:
            return (Tensor.full((6,), 2.0, device=DEVICE) * 3).reshape(2, 3).reshape(3, 2)

        first, second = build().realize(), build().realize()
        first += 1  # a write into one is never seen by the other (PyTorch: two results, two tensors)
        np.testing.assert_array_equal(first.numpy(), np.full((3, 2), 7.0, np.float32))
        np.testing.assert_array_equal(second.numpy(), np.full((3, 2), 6.0, np.float32))
        assert realized_view(build().uop) is None  # nothing remembers a buffer for a graph of constants


def test_a_step_reading_a_written_parameter_through_a_chain_sees_the_old_values() -> None:
    # a lazy value built through a movement chain before a write reads the old contents (write-after-read), also
    # when its plan comes from the cache
    with use_engine(Engine()):
        for _ in range(3):
            w = Tensor(np.arange(6, dtype=np.float32), device=DEVICE)
            before = w.reshape(2, 3).reshape(3, 2) * 2
            w += 10
            after = w.reshape(2, 3).reshape(3, 2) * 2
            np.testing.assert_array_equal(before.numpy(), np.arange(6, dtype=np.float32).reshape(3, 2) * 2)
            np.testing.assert_array_equal(after.numpy(), (np.arange(6, dtype=np.float32) + 10).reshape(3, 2) * 2)


def test_the_kernels_of_a_plan_submitted_as_one_list_count_and_compute_like_one_by_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # independent reductions, a kernel reading their results, and small and large kernels mixed (inline-sized and
    # queued ones): the values and the counters match the one-by-one launches DEBUG=2 makes
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(64, 300)).astype(np.float32), rng.normal(size=(300,)).astype(np.float32)

    def run() -> tuple[np.ndarray, int]:
        left, right = Tensor(a, device=DEVICE), Tensor(b, device=DEVICE)
        centred = left - left.mean(0)
        before = GlobalCounters.kernel_count
        result = ((centred * right).sum(1) / (centred.abs().amax(1) + 1) + right[:64]).realize()
        return result.numpy(), GlobalCounters.kernel_count - before

    expected = ((a - a.mean(0)) * b).sum(1) / (np.abs(a - a.mean(0)).max(1) + 1) + b[:64]
    with use_engine(Engine()) as engine:
        batched, kernels = run()
        np.testing.assert_allclose(batched, expected, rtol=1e-4, atol=1e-5)
        with Context(DEBUG=2):
            one_by_one, kernels_one_by_one = run()
        assert kernels == kernels_one_by_one >= 2
        np.testing.assert_array_equal(batched, one_by_one)
        assert engine.schedule.hits >= 1
    assert capsys.readouterr().out.count("***") >= kernels  # DEBUG=2 printed each kernel
