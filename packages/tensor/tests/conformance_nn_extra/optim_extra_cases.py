"""The optimizer and scheduler cases of `test_optim_extra.py`, shared with `record_optim_extra.py` (imports neither
torch nor kiln: each builder takes the library's `optim` module and its parameter tensors)."""

from __future__ import annotations

from typing import Any

STEPS = 5
SCHEDULE_STEPS = 12
SHAPES = ((3, 4), (5,))
METRICS = (1.0, 0.9, 0.95, 0.93, 0.96, 0.97, 0.5, 0.6, 0.61, 0.62, 0.63, 0.64)


def optimizers(optim: Any, first: Any, second: Any) -> dict[str, Any]:
    """Case name -> a zero-argument builder of the optimizer over the two parameters."""
    return {
        "adadelta": lambda: optim.Adadelta([first, second]),
        "adadelta_groups": lambda: optim.Adadelta(
            [{"params": [first]}, {"params": [second], "lr": 0.5, "weight_decay": 0.1, "maximize": True}], rho=0.8
        ),
        "rprop": lambda: optim.Rprop([first, second], lr=0.05),
        "rprop_groups": lambda: optim.Rprop(
            [{"params": [first]}, {"params": [second], "etas": (0.3, 1.5), "step_sizes": (1e-3, 0.2)}], maximize=True
        ),
        "asgd": lambda: optim.ASGD([first, second], lr=0.05, lambd=0.01, t0=2, weight_decay=0.01),
        "asgd_groups": lambda: optim.ASGD(
            [{"params": [first]}, {"params": [second], "lr": 0.2, "alpha": 0.5}], lambd=0.05, t0=1
        ),
    }


def schedulers(optim: Any, optimizer: Any) -> dict[str, Any]:
    """Case name -> a builder of the scheduler on `optimizer` (SGD, momentum 0.9, group rates 0.1 and 0.05)."""
    s = optim.lr_scheduler
    return {
        "multiplicative": lambda: s.MultiplicativeLR(optimizer, lambda epoch: 0.9 + 0.01 * epoch),
        "multiplicative_groups": lambda: s.MultiplicativeLR(optimizer, [lambda e: 0.8, lambda e: 1.0 - 0.02 * e]),
        "warm_restarts": lambda: s.CosineAnnealingWarmRestarts(optimizer, T_0=3, T_mult=2, eta_min=0.001),
        "warm_restarts_flat": lambda: s.CosineAnnealingWarmRestarts(optimizer, T_0=4),
        "cyclic_triangular2": lambda: s.CyclicLR(
            optimizer, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=3, step_size_down=2, mode="triangular2"
        ),
        "cyclic_exp_range": lambda: s.CyclicLR(
            optimizer,
            base_lr=[0.02, 0.01],
            max_lr=0.3,
            step_size_up=2,
            mode="exp_range",
            gamma=0.9,
            base_momentum=0.7,
            max_momentum=0.95,
        ),
        "plateau": lambda: s.ReduceLROnPlateau(optimizer, factor=0.5, patience=1, cooldown=1, min_lr=0.02),
        "plateau_max_abs": lambda: s.ReduceLROnPlateau(
            optimizer, mode="max", factor=0.3, patience=0, threshold=0.05, threshold_mode="abs", min_lr=[0.0, 0.01]
        ),
        "sequential": lambda: s.SequentialLR(
            optimizer, [s.LinearLR(optimizer, start_factor=0.5, total_iters=3), s.ExponentialLR(optimizer, 0.8)], [4]
        ),
        "chained": lambda: s.ChainedScheduler(
            [s.ConstantLR(optimizer, factor=0.5, total_iters=2), s.ExponentialLR(optimizer, gamma=0.9)]
        ),
    }
