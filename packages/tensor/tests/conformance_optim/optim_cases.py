"""The optimizer / scheduler cases replayed on torch (`record_optim.py`) and on kiln (`test_optim_conformance.py`).

Every case optimizes the same three parameters (`SHAPES`, initial values drawn by the recorder) on the elementwise
loss sum(c * w + d * w**2 / 2 + w**4 / 4) (c, d fixed per parameter), whose gradient c + d * w + w**3 both
frameworks compute with the same few float32 operations, so the comparison measures the optimizers. A case names the
optimizer class (torch.optim's name, kiln.tensor.optim's the same), its keyword arguments, the parameter groups
(indices into the three parameters and the group's own hyperparameters) and optionally an LR scheduler; the recorder
saves the parameters after each step and, with a scheduler, every group's lr and momentum (or beta1) after each
`scheduler.step()`. This module imports neither torch nor kiln.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CASES", "SHAPES", "STEPS", "Case", "lambda_factor"]

SHAPES = ((3, 4), (5,), (2, 3))
STEPS = 8


def lambda_factor(epoch: int) -> float:
    """The multiplier LambdaLR cases use (a named function both sides can call)."""
    return 0.9**epoch + 0.05 * (epoch % 3)


@dataclass(frozen=True)
class Case:
    """One optimizer run: `optimizer(groups or all parameters, **kwargs)` and optionally `scheduler(opt, **...)`."""

    name: str
    optimizer: str
    kwargs: dict[str, Any]
    groups: tuple[tuple[tuple[int, ...], dict[str, Any]], ...] = ()
    scheduler: str = ""
    scheduler_kwargs: dict[str, Any] = field(default_factory=dict)


TWO_GROUPS = (((0, 2), {}), ((1,), {"lr": 0.01}))

CASES: tuple[Case, ...] = (
    Case("sgd_plain", "SGD", {"lr": 0.05}),
    Case("sgd_momentum_wd", "SGD", {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}),
    Case("sgd_dampening", "SGD", {"lr": 0.03, "momentum": 0.8, "dampening": 0.3}),
    Case("sgd_nesterov_maximize", "SGD", {"lr": 0.01, "momentum": 0.7, "nesterov": True, "maximize": True}),
    Case("sgd_groups", "SGD", {"lr": 0.05, "momentum": 0.9}, (((0,), {}), ((1, 2), {"lr": 0.01, "momentum": 0.5}))),
    Case("adam", "Adam", {"lr": 0.05}),
    Case("adam_groups_l2", "Adam", {"lr": 0.05, "weight_decay": 0.1}, (((0, 1), {}), ((2,), {"betas": (0.8, 0.99)}))),
    Case("adam_amsgrad", "Adam", {"lr": 0.05, "amsgrad": True}),
    Case("adam_decoupled", "Adam", {"lr": 0.05, "weight_decay": 0.2, "decoupled_weight_decay": True}),
    Case("adamw_groups", "AdamW", {"lr": 0.05}, (((0,), {"weight_decay": 0.0}), ((1, 2), {"weight_decay": 0.3}))),
    Case("rmsprop_centered", "RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True, "weight_decay": 0.1}),
    Case("adagrad", "Adagrad", {"lr": 0.1}),
    Case(
        "adagrad_decay", "Adagrad", {"lr": 0.1, "lr_decay": 0.05, "weight_decay": 0.1, "initial_accumulator_value": 0.2}
    ),
    Case("adamax", "Adamax", {}),
    Case("adamax_wd_groups", "Adamax", {"lr": 0.05, "weight_decay": 0.1}, TWO_GROUPS),
    Case("nadam", "NAdam", {"lr": 0.05}),
    Case("nadam_decoupled", "NAdam", {"lr": 0.05, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    Case("nadam_momentum_decay_l2", "NAdam", {"lr": 0.05, "momentum_decay": 0.02, "weight_decay": 0.1}),
    Case("radam", "RAdam", {"lr": 0.05}),
    Case(
        "radam_decoupled_groups", "RAdam", {"lr": 0.05, "weight_decay": 0.1, "decoupled_weight_decay": True}, TWO_GROUPS
    ),
    Case("radam_betas_l2", "RAdam", {"lr": 0.05, "betas": (0.8, 0.9), "weight_decay": 0.1}),
    Case("steplr_sgd", "SGD", {"lr": 0.1, "momentum": 0.9}, TWO_GROUPS, "StepLR", {"step_size": 3, "gamma": 0.5}),
    Case("cosine_adam", "Adam", {"lr": 0.05}, TWO_GROUPS, "CosineAnnealingLR", {"T_max": 5, "eta_min": 0.001}),
    Case("linear_adamw", "AdamW", {"lr": 0.05}, (), "LinearLR", {"start_factor": 0.2, "total_iters": 4}),
    Case("lambda_rmsprop", "RMSprop", {"lr": 0.01}, TWO_GROUPS, "LambdaLR", {}),
    Case(
        "onecycle_sgd",
        "SGD",
        {"lr": 0.1, "momentum": 0.9},
        TWO_GROUPS,
        "OneCycleLR",
        {"max_lr": [0.1, 0.05], "total_steps": 10},
    ),
    Case(
        "onecycle_adam_three_phase",
        "Adam",
        {"lr": 0.05},
        (),
        "OneCycleLR",
        {"max_lr": 0.1, "total_steps": 12, "anneal_strategy": "linear", "three_phase": True, "base_momentum": 0.8},
    ),
    Case("multistep_adam", "Adam", {"lr": 0.05}, TWO_GROUPS, "MultiStepLR", {"milestones": [2, 5], "gamma": 0.3}),
    Case("exponential_sgd", "SGD", {"lr": 0.05, "momentum": 0.5}, (), "ExponentialLR", {"gamma": 0.8}),
    Case("constant_adamax", "Adamax", {"lr": 0.05}, TWO_GROUPS, "ConstantLR", {"factor": 0.25, "total_iters": 3}),
    Case("polynomial_nadam", "NAdam", {"lr": 0.05}, (), "PolynomialLR", {"total_iters": 6, "power": 2.0}),
    Case(
        "onecycle_nadam_no_cycle",
        "NAdam",
        {"lr": 0.05},
        (),
        "OneCycleLR",
        {"max_lr": 0.1, "total_steps": 9, "cycle_momentum": False, "pct_start": 0.4},
    ),
)
