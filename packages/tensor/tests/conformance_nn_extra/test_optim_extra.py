"""Adadelta, Rprop, ASGD and the schedules of `lr_scheduler_extra.py` against torch's recorded trajectories
(`optim_extra.npz`, written by `record_optim_extra.py`), and their state-dict round trips."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conformance_nn_extra.optim_extra_cases import METRICS, SCHEDULE_STEPS, STEPS, optimizers, schedulers

from kiln.tensor import Tensor, optim

DATA = np.load(Path(__file__).resolve().parent / "optim_extra.npz")
OPTIMIZER_CASES = list(optimizers(optim, None, None))
SCHEDULER_CASES = list(schedulers(optim, None))


def _build(case: str) -> tuple[list[Tensor], Any]:
    params = [Tensor(DATA[f"{case}/start{index}"], requires_grad=True) for index in range(2)]
    return params, optimizers(optim, *params)[case]()


def _step(case: str, step: int, params: list[Tensor], optimizer: Any) -> None:
    for index, param in enumerate(params):
        param.grad = Tensor(DATA[f"{case}/grad{step}/{index}"])
    optimizer.step()


@pytest.mark.parametrize("case", OPTIMIZER_CASES)
def test_optimizer_follows_torchs_trajectory_and_state(case: str) -> None:
    params, optimizer = _build(case)
    for step in range(STEPS):
        _step(case, step, params, optimizer)
        for index, param in enumerate(params):
            np.testing.assert_allclose(param.numpy(), DATA[f"{case}/param{step}/{index}"], rtol=1e-5, atol=1e-6)
    state = optimizer.state_dict()["state"]
    expected = {key for key in DATA.files if key.startswith(f"{case}/state/")}
    assert {f"{case}/state/{i}/{name}" for i, entries in state.items() for name in entries} == expected
    for index, entries in state.items():
        for name, value in entries.items():
            got = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            np.testing.assert_allclose(got, DATA[f"{case}/state/{index}/{name}"], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", OPTIMIZER_CASES)
def test_optimizer_resumed_from_its_state_dict_continues_exactly(case: str) -> None:
    params, optimizer = _build(case)
    for step in range(2):
        _step(case, step, params, optimizer)
    saved = optimizer.state_dict()
    saved = {
        "state": {
            i: {k: np.array(v.numpy() if isinstance(v, Tensor) else v) for k, v in e.items()}
            for i, e in saved["state"].items()
        },
        "param_groups": saved["param_groups"],
    }
    resumed_params = [Tensor(param.numpy(), requires_grad=True) for param in params]
    resumed = optimizers(optim, *resumed_params)[case]()
    resumed.load_state_dict(saved)
    for step in range(2, STEPS):
        _step(case, step, params, optimizer)
        _step(case, step, resumed_params, resumed)
    for param, other in zip(params, resumed_params):
        np.testing.assert_array_equal(param.numpy(), other.numpy())


def test_optimizers_refuse_bad_hyperparameters() -> None:
    w = Tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="rho"):
        optim.Adadelta([w], rho=1.5)
    with pytest.raises(ValueError, match="eta"):
        optim.Rprop([w], etas=(1.2, 0.5))
    with pytest.raises(ValueError, match="weight_decay"):
        optim.ASGD([w], weight_decay=-1.0)


def _sgd() -> Any:
    weights = [Tensor.zeros(2, requires_grad=True), Tensor.zeros(3, requires_grad=True)]
    return optim.SGD([{"params": [weights[0]]}, {"params": [weights[1]], "lr": 0.05}], lr=0.1, momentum=0.9)


def _advance(case: str, scheduler: Any, step: int) -> None:
    if "plateau" in case:
        scheduler.step(METRICS[step])
    else:
        scheduler.step()


@pytest.mark.parametrize("case", SCHEDULER_CASES)
def test_scheduler_sets_torchs_rates_and_momenta(case: str) -> None:
    optimizer = _sgd()
    scheduler = schedulers(optim, optimizer)[case]()
    rates, momenta = [], []
    for step in range(SCHEDULE_STEPS + 1):
        rates.append([group["lr"] for group in optimizer.param_groups])
        momenta.append([group["momentum"] for group in optimizer.param_groups])
        if step < SCHEDULE_STEPS:
            _advance(case, scheduler, step)
    np.testing.assert_allclose(np.array(rates), DATA[f"{case}/lr"], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.array(momenta), DATA[f"{case}/momentum"], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(optimizer.lr_tensor.numpy(), np.float32(DATA[f"{case}/lr"][-1][0]), rtol=1e-6)
    assert scheduler.get_last_lr() == pytest.approx(list(DATA[f"{case}/lr"][-1]), rel=1e-12)


@pytest.mark.parametrize("case", SCHEDULER_CASES)
def test_scheduler_resumed_from_its_state_dict_continues_like_torch(case: str) -> None:
    optimizer = _sgd()
    scheduler = schedulers(optim, optimizer)[case]()
    for step in range(5):
        _advance(case, scheduler, step)
    saved_optimizer, saved = optimizer.state_dict(), scheduler.state_dict()
    resumed_optimizer = _sgd()
    resumed = schedulers(optim, resumed_optimizer)[case]()
    resumed_optimizer.load_state_dict(saved_optimizer)
    resumed.load_state_dict(saved)
    for step in range(5, SCHEDULE_STEPS):
        _advance(case, resumed, step)
    rates = [group["lr"] for group in resumed_optimizer.param_groups]
    np.testing.assert_allclose(rates, DATA[f"{case}/lr"][-1], rtol=1e-12, atol=1e-15)


def test_schedules_are_reachable_as_torch_spells_them() -> None:
    for name in (
        "ChainedScheduler", "CosineAnnealingWarmRestarts", "CyclicLR", "MultiplicativeLR", "ReduceLROnPlateau",
        "SequentialLR",
    ):  # fmt: skip
        assert getattr(optim.lr_scheduler, name) is getattr(optim, name)


def test_schedules_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match="Factor"):
        optim.lr_scheduler.ReduceLROnPlateau(_sgd(), factor=1.5)
    with pytest.raises(ValueError, match="T_0"):
        optim.lr_scheduler.CosineAnnealingWarmRestarts(_sgd(), T_0=0)
    optimizer = _sgd()
    with pytest.raises(ValueError, match="milestone"):
        optim.lr_scheduler.SequentialLR(optimizer, [optim.lr_scheduler.StepLR(optimizer, 2)], [3])
    with pytest.raises(TypeError, match="metrics"):
        optim.lr_scheduler.ReduceLROnPlateau(_sgd()).step()
