"""BatchNorm's running statistics are one simultaneous write per training forward (issue 42).

The running mean, running variance and batch count of a layer are written together (`write_many`, one schedule)
instead of by three `assign`s (three schedules). The values must stay PyTorch's: each forward applies
running = (1 - momentum) * running + momentum * batch statistic (unbiased variance; momentum None: the cumulative
average 1 / batches seen), in order, checked here against that formula computed in numpy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, TinyJit, nn
from kiln.tensor.realize import engine

pytestmark = pytest.mark.default_device("CPU")

Array = np.ndarray[Any, Any]


def _batches(count: int, shape: tuple[int, ...] = (4, 3, 5, 5)) -> list[Array]:
    rng = np.random.default_rng(7)
    return [(rng.standard_normal(shape) * (index + 1) + index).astype(np.float32) for index in range(count)]


def _expected(batches: list[Array], momentum: float | None) -> tuple[Array, Array, int]:
    """The running statistics after `batches`, from the running-average formula in float64."""
    channels = batches[0].shape[1]
    mean, var = np.zeros(channels), np.ones(channels)
    for seen, batch in enumerate(batches, start=1):
        factor = 1.0 / seen if momentum is None else momentum
        axes = (0, *range(2, batch.ndim))
        mean = (1 - factor) * mean + factor * batch.astype(np.float64).mean(axes)
        var = (1 - factor) * var + factor * batch.astype(np.float64).var(axes, ddof=1)
    return mean, var, len(batches)


def _check(layer: nn.BatchNorm2d, batches: list[Array], momentum: float | None) -> None:
    mean, var, count = _expected(batches, momentum)
    np.testing.assert_allclose(layer.running_mean.numpy(), mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.running_var.numpy(), var, rtol=1e-5, atol=1e-5)
    assert int(layer.num_batches_tracked.item()) == count


@pytest.fixture
def schedules(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the engine's `realize` calls (one schedule each)."""
    calls = [0]
    kind = type(engine.default_engine())
    original = kind.realize

    def counting(self: Any, uops: Any) -> Any:
        calls[0] += 1
        return original(self, uops)

    monkeypatch.setattr(kind, "realize", counting)
    yield calls


@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
def test_forwards_without_realize_apply_every_update_in_order(momentum: float | None) -> None:
    layer = nn.BatchNorm2d(3, momentum=momentum)
    batches = _batches(3)
    outputs = [layer(Tensor(batch)) for batch in batches]  # nothing realized in between
    _check(layer, batches, momentum)
    for batch, output in zip(batches, outputs):  # each output normalized by its own batch's statistics
        axes = (0, 2, 3)
        mean = batch.mean(axes, keepdims=True)
        std = np.sqrt(batch.var(axes, keepdims=True) + 1e-5)
        np.testing.assert_allclose(output.numpy(), (batch - mean) / std, rtol=1e-4, atol=1e-4)


def test_reading_between_forwards_sees_each_update() -> None:
    layer = nn.BatchNorm2d(3)
    batches = _batches(3)
    for seen in range(1, 4):
        layer(Tensor(batches[seen - 1]))
        _check(layer, batches[:seen], 0.1)
        state = layer.state_dict()
        mean, _, _ = _expected(batches[:seen], 0.1)
        np.testing.assert_allclose(state["running_mean"].numpy(), mean, rtol=1e-5, atol=1e-5)


def test_a_lazy_read_built_before_a_forward_keeps_the_old_statistics() -> None:
    layer = nn.BatchNorm2d(3)
    batches = _batches(2)
    layer(Tensor(batches[0]))
    before = layer.running_mean * 2  # lazy: reads the statistics of one batch
    layer(Tensor(batches[1]))
    mean, _, _ = _expected(batches[:1], 0.1)
    np.testing.assert_allclose(before.numpy(), mean * 2, rtol=1e-5, atol=1e-5)
    _check(layer, batches, 0.1)


def test_one_schedule_writes_the_three_statistics(schedules: list[int]) -> None:
    layer = nn.BatchNorm2d(3)
    x = Tensor(_batches(1)[0]).realize()
    layer.running_mean.realize(), layer.running_var.realize(), layer.num_batches_tracked.realize()
    schedules[0] = 0
    output = layer(x)
    assert schedules[0] == 1  # mean, variance and count in one write (three assigns made three)
    output.realize()
    assert schedules[0] == 2


def test_functional_batch_norm_writes_both_buffers() -> None:
    batches = _batches(2, (6, 4))
    mean, var = Tensor.zeros(4).contiguous().realize(), Tensor.ones(4).contiguous().realize()
    for batch in batches:
        Tensor(batch).batch_norm(mean, var, training=True, momentum=0.25)
    expected_mean, expected_var, _ = _expected(batches, 0.25)
    np.testing.assert_allclose(mean.numpy(), expected_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(var.numpy(), expected_var, rtol=1e-5, atol=1e-5)


def test_half_input_keeps_float32_statistics() -> None:
    layer = nn.BatchNorm2d(3)
    batch = _batches(1)[0]
    layer(Tensor(batch).half())
    assert layer.running_mean.dtype == layer.running_var.dtype == Tensor.zeros(1).dtype
    mean, var, _ = _expected([batch.astype(np.float16).astype(np.float32)], 0.1)
    np.testing.assert_allclose(layer.running_mean.numpy(), mean, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(layer.running_var.numpy(), var, rtol=1e-3, atol=1e-3)


def test_tinyjit_replays_update_the_statistics() -> None:
    layer = nn.BatchNorm2d(3)
    batches = _batches(5)
    x = Tensor(batches[0]).contiguous().realize()

    @TinyJit
    def forward(inputs: Tensor) -> Tensor:
        output: Tensor = layer(inputs)
        return output.sum().realize()

    for batch in batches:
        x.assign(Tensor(batch))
        forward(x)
    _check(layer, batches, 0.1)
