"""Learning-rate schedules with torch.optim.lr_scheduler's names and closed forms: `StepLR`, `MultiStepLR`,
`ExponentialLR`, `ConstantLR`, `LinearLR` (linear warmup), `PolynomialLR`, `CosineAnnealingLR`, `LambdaLR` and
`OneCycleLR` (which also cycles the momentum or beta1), each per parameter group, with `state_dict()`.

A scheduler writes the optimizer's learning-rate buffer (no kernel changes, so no recompilation and TinyJit replays
pick the new rate up). As in PyTorch, constructing one sets the rate of step 0, and `step()` (called after
`optimizer.step()`) moves to the next epoch / iteration.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from typing import Any

from kiln.tensor.nn.arguments import check_positive_int
from kiln.tensor.optim.optimizer import Optimizer
from kiln.tensor.optim.param_group import ParamGroup

__all__ = [
    "ConstantLR",
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "OneCycleLR",
    "PolynomialLR",
    "StepLR",
]


class LRScheduler:
    """The base class: `lr_at(epoch, base_lr)` gives a group's learning rate of an epoch; `step()` advances and writes
    every group's `"lr"` (its device buffer: no kernel changes).

    As torch does, the scheduler records each group's starting rate as `group["initial_lr"]` and schedules from it,
    and `state_dict()` / `load_state_dict()` save and restore every attribute but the optimizer (and a lambda).
    """

    def __init__(self, optimizer: Optimizer) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs a kiln Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [float(group["initial_lr"]) for group in optimizer.param_groups]
        self.last_epoch = 0
        self._last_lr: list[float] = []
        self._apply(0)

    @property
    def base_lr(self) -> float:
        """The first group's base learning rate."""
        return self.base_lrs[0]

    def lr_at(self, epoch: int, base_lr: float) -> float:
        """The learning rate of `epoch` for a group starting at `base_lr` (subclasses define it)."""
        raise NotImplementedError

    def lrs_at(self, epoch: int) -> list[float]:
        """Every group's learning rate of `epoch`."""
        return [self.lr_at(epoch, base_lr) for base_lr in self.base_lrs]

    def _apply(self, epoch: int) -> None:
        rates = self.lrs_at(epoch)
        for group, rate in zip(self.optimizer.param_groups, rates):
            group["lr"] = rate
        self._last_lr = rates

    def step(self) -> None:
        """Moves to the next epoch and sets its learning rates."""
        self.last_epoch += 1
        self._apply(self.last_epoch)

    def get_last_lr(self) -> list[float]:
        """The learning rates set last, one per parameter group."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer and callables (torch's layout: a plain dict of numbers and lists)."""
        return {
            key: list(value) if isinstance(value, list) else value
            for key, value in self.__dict__.items()
            if key != "optimizer" and not callable(value)
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores a `state_dict()` (the optimizer's rates come back with the optimizer's own state dict)."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"a scheduler state dict must be a dict, got {type(state_dict).__name__}")
        unknown = [key for key in state_dict if key not in self.__dict__ or key == "optimizer"]
        if unknown:
            raise ValueError(f"{type(self).__name__}.load_state_dict: unexpected keys {unknown}")
        for key, value in state_dict.items():
            self.__dict__[key] = list(value) if isinstance(value, list) else value


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1) -> None:
        check_positive_int(step_size, "StepLR step_size")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float) -> float:
        """base_lr * gamma ** (epoch // step_size)."""
        return base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (PyTorch's closed form; it keeps
    following the cosine after T_max)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0) -> None:
        check_positive_int(T_max, "CosineAnnealingLR T_max")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float) -> float:
        """The cosine between base_lr and eta_min."""
        return self.eta_min + (base_lr - self.eta_min) * (1.0 + math.cos(math.pi * epoch / self.T_max)) / 2.0


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
        check_positive_int(total_iters, "LinearLR total_iters")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float) -> float:
        """base_lr times the interpolated factor."""
        fraction = min(epoch, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * fraction)


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float]) -> None:
        if not callable(lr_lambda):
            raise TypeError(f"LambdaLR lr_lambda must be callable, got {type(lr_lambda).__name__}")
        self.lr_lambda = lr_lambda
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float) -> float:
        """base_lr * lr_lambda(epoch)."""
        return base_lr * float(self.lr_lambda(epoch))


class MultiStepLR(LRScheduler):
    """lr = base_lr * gamma ** (the number of milestones <= epoch)."""

    def __init__(self, optimizer: Optimizer, milestones: list[int], gamma: float = 0.1) -> None:
        if any(isinstance(m, bool) or not isinstance(m, int) for m in milestones):
            raise ValueError(f"MultiStepLR milestones must be ints, got {milestones!r}")
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float) -> float:
        """base_lr * gamma ** bisect_right(milestones, epoch)."""
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    """lr = base_lr * gamma ** epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float) -> None:
        self.gamma = gamma
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float) -> float:
        """base_lr * gamma ** epoch."""
        return base_lr * self.gamma**epoch


class ConstantLR(LRScheduler):
    """lr = base_lr * factor until total_iters, then base_lr."""

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5) -> None:
        if not 0.0 <= factor <= 1.0:
            raise ValueError(f"ConstantLR factor must be in [0, 1], got {factor!r}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float) -> float:
        """base_lr * factor before total_iters, else base_lr."""
        return base_lr * (self.factor if epoch < self.total_iters else 1.0)


class PolynomialLR(LRScheduler):
    """lr = base_lr * (1 - min(epoch, total_iters) / total_iters) ** power."""

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0) -> None:
        check_positive_int(total_iters, "PolynomialLR total_iters")
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float) -> float:
        """The polynomial decay to 0 at total_iters."""
        return base_lr * float((1.0 - min(epoch, self.total_iters) / self.total_iters) ** self.power)


class OneCycleLR(LRScheduler):
    """The one-cycle policy (Smith & Topin), PyTorch's formulas: from max_lr / div_factor up to max_lr over
    pct_start of `total_steps`, then down to that / final_div_factor (three_phase: back to the initial rate first,
    then down), each phase annealed by cosine or linearly. With `cycle_momentum` (the default, as in torch) the
    momentum (or beta1, for the Adam family) moves the other way, from max_momentum down to base_momentum while the
    rate rises and back. `max_lr`, `base_momentum` and `max_momentum` may be one value per parameter group.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | list[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | list[float] = 0.85,
        max_momentum: float | list[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs a kiln Optimizer, got {type(optimizer).__name__}")
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR needs total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        check_positive_int(total_steps, "OneCycleLR total_steps")
        if not 0.0 <= pct_start <= 1.0:
            raise ValueError(f"OneCycleLR pct_start must be in [0, 1], got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        groups = optimizer.param_groups
        up_end = float(pct_start * total_steps) - 1
        if three_phase:
            self.phases = [
                (up_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                (total_steps - 1.0, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self.phases = [
                (up_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (total_steps - 1.0, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        for group, peak in zip(groups, _per_group(max_lr, len(groups), "max_lr")):
            group["initial_lr"] = peak / div_factor
            group["max_lr"] = peak
            group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        self.use_beta1 = "betas" in optimizer.defaults
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and not self.use_beta1:
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
            lows = _per_group(base_momentum, len(groups), "base_momentum")
            highs = _per_group(max_momentum, len(groups), "max_momentum")
            for group, low, high in zip(groups, lows, highs):
                self._set_momentum(group, high)
                group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer)

    def _set_momentum(self, group: ParamGroup, value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, fraction: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * fraction) + 1.0)
        return (end - start) * fraction + start

    def lrs_at(self, epoch: int) -> list[float]:
        """Every group's rate of step `epoch` (cycling its momentum on the way; ValueError past total_steps, like
        PyTorch)."""
        if epoch > self.total_steps:
            raise ValueError(f"OneCycleLR stepped {epoch} times, more than total_steps = {self.total_steps}")
        rates = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for index, (end_step, start_lr, end_lr, start_momentum, end_momentum) in enumerate(self.phases):
                if epoch <= end_step or index == len(self.phases) - 1:
                    fraction = (epoch - start_step) / (end_step - start_step) if end_step != start_step else 1.0
                    rates.append(self._anneal(group[start_lr], group[end_lr], fraction))
                    if self.cycle_momentum:
                        momentum = self._anneal(group[start_momentum], group[end_momentum], fraction)
                        self._set_momentum(group, momentum)
                    break
                start_step = end_step
        return rates


def _per_group(value: float | list[float] | tuple[float, ...], count: int, name: str) -> list[float]:
    """`value` for each of `count` groups (a number for all, or a list of one per group)."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"expected {count} values for {name}, got {len(value)}")
        return [float(item) for item in value]
    return [float(value)] * count
