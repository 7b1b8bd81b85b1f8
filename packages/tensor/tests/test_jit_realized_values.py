"""TinyJit and values realized outside its capture: a capture computes everything its replays need, and what it
realized is not taken later for the same graph (its buffers belong to the replays). numpy is the oracle."""

from __future__ import annotations

import numpy as np

from kiln.tensor import Tensor, nn
from kiln.tensor.jit import TinyJit


def _linear(layer: nn.Linear, x: np.ndarray) -> np.ndarray:
    return x @ layer.weight.numpy().T + layer.bias.numpy()


def _ones(value: float) -> Tensor:
    return Tensor(np.full((2, 4), value, np.float32)).realize()


def test_second_jit_over_a_value_realized_before_captures_its_kernels() -> None:
    layer, x = nn.Linear(4, 3), _ones(1.0)
    first = TinyJit(layer.__call__)
    for _ in range(3):
        first(x)
    second = TinyJit(layer.__call__)  # the same graph over the same buffer: realized before, by `first`
    for _ in range(3):
        second(x)
    assert second.captured is not None and second.captured.kernels == 1
    x.assign(Tensor(np.full((2, 4), 2.0, np.float32))).realize()
    np.testing.assert_allclose(second(x).numpy(), _linear(layer, x.numpy()), rtol=1e-6)
    other = _ones(3.0)
    np.testing.assert_allclose(second(other).numpy(), _linear(layer, other.numpy()), rtol=1e-6)


def test_eager_graph_after_replays_on_other_inputs() -> None:
    layer, x, y = nn.Linear(4, 3), _ones(1.0), _ones(3.0)
    step = TinyJit(layer.__call__)
    for _ in range(3):
        step(x)  # the capture realized layer(x) into the step's output buffer
    step(y)  # ... which this replay overwrites with layer(y)
    np.testing.assert_allclose(layer(x).numpy(), _linear(layer, x.numpy()), rtol=1e-6)


def test_a_value_realized_before_the_capture_is_computed_inside_it() -> None:
    layer, x = nn.Linear(4, 3), _ones(1.0)
    kept = (layer.weight * 2).realize()  # realized outside: the capture below must not keep this buffer as a constant

    def doubled(inp: Tensor) -> Tensor:
        return inp @ (layer.weight * 2).T

    step = TinyJit(doubled)
    for _ in range(3):
        step(x)
    layer.weight.assign(layer.weight * 0 + 0.5).realize()
    np.testing.assert_allclose(step(x).numpy(), x.numpy() @ np.full((4, 3), 1.0, np.float32), rtol=1e-6)
    assert kept.shape == (3, 4)
