"""Learning-rate schedules against their closed forms and against rates recorded from torch.optim.lr_scheduler
(fixtures/lr_schedules.json, written by fixtures/make_lr_schedules.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kiln.tensor import Tensor, optim
from kiln.tensor.optim import lr_scheduler

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "lr_schedules.json").read_text())


pytestmark = pytest.mark.default_device("PYTHON")


def _optimizer(lr: float = 0.2) -> optim.SGD:
    return optim.SGD([Tensor(np.zeros(1, np.float32), requires_grad=True)], lr=lr)


def _rates(scheduler: lr_scheduler.LRScheduler, steps: int) -> list[float]:
    rates = [scheduler.optimizer.lr]
    for _ in range(steps - 1):
        scheduler.step()
        rates.append(scheduler.get_last_lr()[0])
    return rates


SCHEDULES: dict[str, tuple[Callable[[optim.Optimizer], lr_scheduler.LRScheduler], Callable[[int], float]]] = {
    "step": (lambda o: lr_scheduler.StepLR(o, step_size=3, gamma=0.5), lambda e: 0.2 * 0.5 ** (e // 3)),
    "cosine": (
        lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=7, eta_min=0.01),
        lambda e: 0.01 + (0.2 - 0.01) * (1 + math.cos(math.pi * e / 7)) / 2,
    ),
    "linear": (
        lambda o: lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=4),
        lambda e: 0.2 * (0.1 + 0.9 * min(e, 4) / 4),
    ),
    "onecycle_cos": (lambda o: lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=20), lambda e: math.nan),
    "onecycle_linear_three_phase": (
        lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=15, anneal_strategy="linear", three_phase=True),
        lambda e: math.nan,
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_matches_closed_form_and_torch(name: str) -> None:
    make, closed_form = SCHEDULES[name]
    recorded = RECORDED[name]
    rates = _rates(make(_optimizer()), len(recorded))
    np.testing.assert_allclose(rates, recorded, rtol=1e-12, atol=1e-15)
    expected = [closed_form(epoch) for epoch in range(len(recorded))]
    if not math.isnan(expected[0]):
        np.testing.assert_allclose(rates, expected, rtol=1e-12)


def test_onecycle_endpoints() -> None:
    # starts at max_lr / div_factor, peaks at max_lr after pct_start, ends at that / final_div_factor
    rates = _rates(lr_scheduler.OneCycleLR(_optimizer(), max_lr=2.0, total_steps=10, pct_start=0.5), 10)
    assert rates[0] == pytest.approx(2.0 / 25)
    assert max(rates) == pytest.approx(2.0) and rates.index(max(rates)) == 4
    assert rates[-1] == pytest.approx(2.0 / 25 / 1e4)


def test_scheduler_rate_reaches_the_update() -> None:
    w = Tensor(np.ones(1, np.float32), requires_grad=True)
    optimizer = optim.SGD([w], lr=1.0)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    expected = 1.0
    for step in range(3):
        w.sum().backward()  # gradient 1
        optimizer.step()
        optimizer.zero_grad()
        expected -= 0.5**step
        scheduler.step()
        np.testing.assert_allclose(w.numpy(), [expected], rtol=1e-6)


def test_scheduler_errors() -> None:
    with pytest.raises(ValueError, match="step_size"):
        lr_scheduler.StepLR(_optimizer(), step_size=0)
    with pytest.raises(ValueError, match="total_steps"):
        lr_scheduler.OneCycleLR(_optimizer(), max_lr=1.0)
    scheduler = lr_scheduler.OneCycleLR(_optimizer(), max_lr=1.0, total_steps=2)
    scheduler.step()
    scheduler.step()
    with pytest.raises(ValueError, match="more than total_steps"):
        scheduler.step()
    with pytest.raises(TypeError, match="kiln Optimizer"):
        lr_scheduler.StepLR(object(), step_size=1)  # type: ignore[arg-type]
