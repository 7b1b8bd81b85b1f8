"""Learning-rate schedules with torch.optim.lr_scheduler's names and closed forms: `StepLR`, `CosineAnnealingLR`,
`OneCycleLR`, `LinearLR` (linear warmup) and `LambdaLR`.

A scheduler writes the optimizer's learning-rate buffer (no kernel changes, so no recompilation and TinyJit replays
pick the new rate up). As in PyTorch, constructing one sets the rate of step 0, and `step()` (called after
`optimizer.step()`) moves to the next epoch / iteration.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kiln.tensor.optim.optimizer import Optimizer

__all__ = ["CosineAnnealingLR", "LRScheduler", "LambdaLR", "LinearLR", "OneCycleLR", "StepLR"]


class LRScheduler:
    """The base class: `lr_at(epoch)` gives the learning rate of an epoch; `step()` advances and applies it."""

    def __init__(self, optimizer: Optimizer) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs a kiln Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.base_lr = optimizer.lr
        self.last_epoch = 0
        optimizer.lr = self.lr_at(0)

    def lr_at(self, epoch: int) -> float:
        """The learning rate of `epoch` (subclasses define it)."""
        raise NotImplementedError

    def step(self) -> None:
        """Moves to the next epoch and sets its learning rate."""
        self.last_epoch += 1
        self.optimizer.lr = self.lr_at(self.last_epoch)

    def get_last_lr(self) -> list[float]:
        """The learning rate set last (a one-item list, as PyTorch gives one per parameter group)."""
        return [self.optimizer.lr]


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1) -> None:
        if isinstance(step_size, bool) or not isinstance(step_size, int) or step_size < 1:
            raise ValueError(f"StepLR step_size must be a positive int, got {step_size!r}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, epoch: int) -> float:
        """base_lr * gamma ** (epoch // step_size)."""
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (PyTorch's closed form; it keeps
    following the cosine after T_max)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0) -> None:
        if isinstance(T_max, bool) or not isinstance(T_max, int) or T_max < 1:
            raise ValueError(f"CosineAnnealingLR T_max must be a positive int, got {T_max!r}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def lr_at(self, epoch: int) -> float:
        """The cosine between base_lr and eta_min."""
        return self.eta_min + (self.base_lr - self.eta_min) * (1.0 + math.cos(math.pi * epoch / self.T_max)) / 2.0


class LinearLR(LRScheduler):
    """Linear warmup: lr = base_lr * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) /
    total_iters)."""

    def __init__(
        self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5
    ) -> None:
        if not 0.0 < start_factor <= 1.0 or not 0.0 <= end_factor <= 1.0:
            raise ValueError(
                f"LinearLR start_factor must be in (0, 1] and end_factor in [0, 1], got {start_factor}, {end_factor}"
            )
        if isinstance(total_iters, bool) or not isinstance(total_iters, int) or total_iters < 1:
            raise ValueError(f"LinearLR total_iters must be a positive int, got {total_iters!r}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer)

    def lr_at(self, epoch: int) -> float:
        """base_lr times the interpolated factor."""
        fraction = min(epoch, self.total_iters) / self.total_iters
        return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * fraction)


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float]) -> None:
        if not callable(lr_lambda):
            raise TypeError(f"LambdaLR lr_lambda must be callable, got {type(lr_lambda).__name__}")
        self.lr_lambda = lr_lambda
        super().__init__(optimizer)

    def lr_at(self, epoch: int) -> float:
        """base_lr * lr_lambda(epoch)."""
        return self.base_lr * float(self.lr_lambda(epoch))


class OneCycleLR(LRScheduler):
    """The one-cycle policy (Smith & Topin), PyTorch's formulas: from max_lr / div_factor up to max_lr over
    pct_start of `total_steps`, then down to that / final_div_factor (three_phase: back to the initial rate first,
    then down), each phase annealed by cosine or linearly. Momentum is not cycled (PyTorch's cycle_momentum is not
    supported: kiln's optimizers keep momentum fixed).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
    ) -> None:
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR needs total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
            raise ValueError(f"OneCycleLR total_steps must be a positive int, got {total_steps!r}")
        if not 0.0 <= pct_start <= 1.0:
            raise ValueError(f"OneCycleLR pct_start must be in [0, 1], got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        initial = max_lr / div_factor
        minimum = initial / final_div_factor
        up_end = float(pct_start * total_steps) - 1
        if three_phase:
            self.phases = [
                (up_end, initial, max_lr),
                (float(2 * pct_start * total_steps) - 2, max_lr, initial),
                (total_steps - 1.0, initial, minimum),
            ]
        else:
            self.phases = [(up_end, initial, max_lr), (total_steps - 1.0, max_lr, minimum)]
        super().__init__(optimizer)

    def _anneal(self, start: float, end: float, fraction: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * fraction) + 1.0)
        return (end - start) * fraction + start

    def lr_at(self, epoch: int) -> float:
        """The rate of step `epoch` (ValueError past total_steps, like PyTorch)."""
        if epoch > self.total_steps:
            raise ValueError(f"OneCycleLR stepped {epoch} times, more than total_steps = {self.total_steps}")
        start_step = 0.0
        lr = self.phases[0][1]
        for index, (end_step, start_lr, end_lr) in enumerate(self.phases):
            if epoch <= end_step or index == len(self.phases) - 1:
                fraction = (epoch - start_step) / (end_step - start_step) if end_step != start_step else 1.0
                lr = self._anneal(start_lr, end_lr, fraction)
                break
            start_step = end_step
        return lr
