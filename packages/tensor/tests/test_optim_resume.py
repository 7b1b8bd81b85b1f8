"""Resuming training from a checkpoint: a model, its optimizer (with parameter groups) and its LR scheduler trained
3 steps, saved with `optim.save_training_checkpoint` (safetensors for the tensors, its metadata for the optimizer's
hyperparameters and the scheduler's state), loaded into freshly built objects and trained 3 more steps end bit for
bit where 6 uninterrupted steps end (np.array_equal on every parameter)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, nn, optim
from kiln.tensor.optim import lr_scheduler
from kiln.tensor.state import safe_save

pytestmark = pytest.mark.default_device("PYTHON")

RNG = np.random.default_rng(5)
X = RNG.standard_normal((16, 4)).astype(np.float32)
Y = RNG.standard_normal((16, 3)).astype(np.float32)

Make = Callable[[nn.Module], tuple[optim.Optimizer, lr_scheduler.LRScheduler]]


def _groups(model: nn.Module) -> list[dict[str, Any]]:
    weights = [p for name, p in model.state_dict().items() if name.endswith("weight")]
    biases = [p for name, p in model.state_dict().items() if name.endswith("bias")]
    return [{"params": weights}, {"params": biases, "lr": 0.02, "weight_decay": 0.0}]


SETUPS: dict[str, Make] = {
    "adamw_onecycle": lambda m: _with(
        optim.AdamW(_groups(m), lr=0.05), lambda o: lr_scheduler.OneCycleLR(o, max_lr=[0.05, 0.02], total_steps=8)
    ),
    "sgd_momentum_steplr": lambda m: _with(
        optim.SGD(_groups(m), lr=0.05, momentum=0.9, weight_decay=0.01),
        lambda o: lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
    ),
    "nadam_cosine": lambda m: _with(
        optim.NAdam(_groups(m), lr=0.05), lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=6)
    ),
    "radam_linear": lambda m: _with(optim.RAdam(_groups(m), lr=0.05), lambda o: lr_scheduler.LinearLR(o)),
    "adagrad_steplr": lambda m: _with(
        optim.Adagrad(_groups(m), lr=0.1, lr_decay=0.01), lambda o: lr_scheduler.StepLR(o, step_size=1, gamma=0.9)
    ),
    "muon_onecycle": lambda m: _with(
        optim.Muon(_groups(m)), lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.01, total_steps=8)
    ),
}


def _with(
    optimizer: optim.Optimizer, make: Callable[[optim.Optimizer], lr_scheduler.LRScheduler]
) -> tuple[optim.Optimizer, lr_scheduler.LRScheduler]:
    return optimizer, make(optimizer)


def _model(seed: int) -> nn.Module:
    Tensor.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _train(model: nn.Module, optimizer: optim.Optimizer, scheduler: lr_scheduler.LRScheduler, steps: int) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        ((model(Tensor(X)) - Tensor(Y)) ** 2).mean().backward()
        optimizer.step()
        scheduler.step()


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_resumed_training_continues_bit_for_bit(setup: str, tmp_path: Path) -> None:
    make = SETUPS[setup]
    model = _model(1)
    optimizer, scheduler = make(model)
    _train(model, optimizer, scheduler, 6)
    uninterrupted = {name: tensor.numpy() for name, tensor in model.state_dict().items()}

    model = _model(1)
    optimizer, scheduler = make(model)
    _train(model, optimizer, scheduler, 3)
    optim.save_training_checkpoint(tmp_path / "checkpoint.safetensors", model, optimizer, scheduler)
    fresh = _model(2)  # other initial values: everything must come from the checkpoint
    fresh_optimizer, fresh_scheduler = make(fresh)
    optim.load_training_checkpoint(tmp_path / "checkpoint.safetensors", fresh, fresh_optimizer, fresh_scheduler)
    assert fresh_scheduler.get_last_lr() == scheduler.get_last_lr()
    assert [dict(g, params=None) for g in fresh_optimizer.param_groups] == [
        dict(g, params=None) for g in optimizer.param_groups
    ]
    _train(fresh, fresh_optimizer, fresh_scheduler, 3)
    for name, tensor in fresh.state_dict().items():
        assert np.array_equal(tensor.numpy(), uninterrupted[name]), name


def test_checkpoint_errors(tmp_path: Path) -> None:
    model = _model(1)
    optimizer, scheduler = SETUPS["sgd_momentum_steplr"](model)
    plain = tmp_path / "plain.safetensors"
    safe_save(model.state_dict(), plain)
    with pytest.raises(ValueError, match="no training checkpoint"):
        optim.load_training_checkpoint(plain, model, optimizer)
    without_scheduler = tmp_path / "no_scheduler.safetensors"
    optim.save_training_checkpoint(without_scheduler, model, optimizer)
    with pytest.raises(ValueError, match="holds no scheduler state"):
        optim.load_training_checkpoint(without_scheduler, model, optimizer, scheduler)
    other_model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 5))
    other_optimizer = optim.SGD(_groups(other_model), lr=0.05, momentum=0.9)
    with pytest.raises(RuntimeError, match="size mismatch"):
        optim.load_training_checkpoint(without_scheduler, other_model, other_optimizer)
