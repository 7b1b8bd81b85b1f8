"""kiln.tensor.optim against torch.optim: each case of `optim_cases.py` (optimizers with parameter groups, weight
decay and momentum variants, schedulers with momentum cycling) replayed on kiln and compared with the parameters,
learning rates and momenta torch recorded (`optim_torch.npz`, written by `record_optim.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conformance_optim.optim_cases import CASES, SHAPES, STEPS, Case, lambda_factor

from kiln.tensor import Tensor, optim
from kiln.tensor.optim import lr_scheduler

RECORDED = np.load(Path(__file__).with_name("optim_torch.npz"))

pytestmark = pytest.mark.default_device("PYTHON")


def _momentum(group: dict[str, Any]) -> float:
    return float(group["betas"][0]) if "betas" in group else float(group.get("momentum", 0.0))


Replay = tuple[dict[str, np.ndarray[Any, Any]], list[list[float]], list[list[float]], optim.Optimizer]


def replay(case: Case) -> Replay:
    """kiln's parameters after each step, every group's lr and momentum before each step, and the optimizer."""
    params = [Tensor(RECORDED[f"start{i}"].copy(), requires_grad=True) for i in range(len(SHAPES))]
    linear = [Tensor(RECORDED[f"linear{i}"]) for i in range(len(SHAPES))]
    curvature = [Tensor(RECORDED[f"curvature{i}"]) for i in range(len(SHAPES))]
    groups: list[Any] = [{"params": [params[i] for i in indices], **extra} for indices, extra in case.groups]
    optimizer = getattr(optim, case.optimizer)(groups or params, **case.kwargs)
    scheduler: lr_scheduler.LRScheduler | None = None
    if case.scheduler == "LambdaLR":
        scheduler = lr_scheduler.LambdaLR(optimizer, lambda_factor)
    elif case.scheduler:
        scheduler = getattr(lr_scheduler, case.scheduler)(optimizer, **case.scheduler_kwargs)
    got: dict[str, np.ndarray[Any, Any]] = {}
    rates, momenta = [], []
    for step in range(STEPS):
        rates.append([float(g["lr"]) for g in optimizer.param_groups])
        momenta.append([_momentum(g) for g in optimizer.param_groups])
        optimizer.zero_grad()
        loss = Tensor(0.0)
        for p, c, d in zip(params, linear, curvature):
            loss = loss + (p * c + p * p * d / 2 + p * p * p * p / 4).sum()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        for index, p in enumerate(params):
            got[f"{case.name}/step{step}/p{index}"] = p.numpy()
    return got, rates, momenta, optimizer


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_trajectory_matches_torch(case: Case) -> None:
    got, rates, momenta, optimizer = replay(case)
    np.testing.assert_allclose(rates, RECORDED[f"{case.name}/lr"], rtol=1e-12, err_msg=f"{case.name} lr")
    np.testing.assert_allclose(momenta, RECORDED[f"{case.name}/momentum"], rtol=1e-12, err_msg=f"{case.name} momentum")
    for key, value in got.items():
        # float32 parameters after up to 8 steps: 1e-6 of the parameter's scale
        scale = float(np.abs(RECORDED[key]).max())
        np.testing.assert_allclose(value, RECORDED[key], rtol=1e-6, atol=1e-6 * scale, err_msg=key)
    # the state dict: torch's state names per parameter, torch's values, and group keys torch also has
    saved = optimizer.state_dict()
    prefix = f"{case.name}/state/"
    expected_names = {key.removeprefix(prefix) for key in RECORDED.files if key.startswith(prefix)}
    got_names = {f"{index}/{name}" for index, entries in saved["state"].items() for name in entries}
    assert got_names == expected_names
    for index, entries in saved["state"].items():
        for name, value in entries.items():
            expected = RECORDED[f"{prefix}{index}/{name}"]
            scale = max(float(np.abs(expected).max()), 1e-30)
            np.testing.assert_allclose(value.numpy(), expected, rtol=2e-6, atol=2e-6 * scale, err_msg=f"{index}/{name}")
    group_keys = {key for group in saved["param_groups"] for key in group}
    assert group_keys <= set(RECORDED[f"{case.name}/group_keys"].tolist())
