"""More learning-rate schedules with torch.optim.lr_scheduler's names: `MultiplicativeLR`,
`CosineAnnealingWarmRestarts`, `CyclicLR`, `ReduceLROnPlateau`, `SequentialLR` and `ChainedScheduler`, on
`LRScheduler` of `lr_scheduler.py` (each writes the optimizer's learning-rate buffer; `state_dict()` holds every
attribute but the optimizer, callables and the schedulers a SequentialLR / ChainedScheduler drives, whose states
are saved under "_schedulers" as torch does).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kiln.tensor.optim.lr_scheduler import LRScheduler, _per_group
from kiln.tensor.optim.optimizer import Optimizer

__all__ = [
    "ChainedScheduler", "CosineAnnealingWarmRestarts", "CyclicLR", "MultiplicativeLR", "ReduceLROnPlateau",
    "SequentialLR",
]  # fmt: skip


def _lambdas(value: Callable[[int], float] | Sequence[Callable[[int], float]], count: int, who: str) -> list[Any]:
    if callable(value):
        return [value] * count
    items = list(value)
    if len(items) != count:
        raise ValueError(f"Expected {count} lr_lambdas, but got {len(items)}")
    for item in items:
        if not callable(item):
            raise TypeError(f"{who} lr_lambda must be callable, got {type(item).__name__}")
    return items


class MultiplicativeLR(LRScheduler):
    """lr of epoch e = lr of epoch e - 1 times lr_lambda(e) (one lambda, or one per group), like torch's."""

    def __init__(
        self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]]
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs a kiln Optimizer, got {type(optimizer).__name__}")
        self._lr_lambdas = _lambdas(lr_lambda, len(optimizer.param_groups), "MultiplicativeLR")
        self.factors = [1.0] * len(optimizer.param_groups)
        super().__init__(optimizer)

    def lrs_at(self, epoch: int) -> list[float]:
        """The group's base rate times the product of lr_lambda(1..epoch)."""
        return [base * factor for base, factor in zip(self.base_lrs, self.factors)]

    def step(self) -> None:
        """Multiplies each group's rate by its lr_lambda of the next epoch."""
        self.last_epoch += 1
        self.factors = [
            factor * float(function(self.last_epoch)) for factor, function in zip(self.factors, self._lr_lambdas)
        ]
        self._apply(self.last_epoch)

    def state_dict(self) -> dict[str, Any]:
        """The base state without the lambdas (torch keeps only callable objects' __dict__; kiln keeps none)."""
        return {key: value for key, value in super().state_dict().items() if key != "_lr_lambdas"}


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from base_lr to eta_min over T_i epochs, restarting at base_lr; T_0 first, each later
    period T_mult times longer (SGDR), like torch's. `step(epoch)` may jump to a (fractional) epoch."""

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0) -> None:
        if isinstance(T_0, bool) or not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if isinstance(T_mult, bool) or not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if isinstance(eta_min, bool) or not isinstance(eta_min, (int, float)):
            raise TypeError(f"Expected float or int eta_min, but got {eta_min} of type {type(eta_min)}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, float(eta_min)
        self.T_cur: float = 0
        super().__init__(optimizer)

    def lrs_at(self, epoch: int) -> list[float]:
        """The cosine at T_cur / T_i."""
        cosine = (1.0 + math.cos(math.pi * self.T_cur / self.T_i)) / 2.0
        return [self.eta_min + (base - self.eta_min) * cosine for base in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:
        """The next epoch, or `epoch` itself (T_cur and T_i follow from it as in torch)."""
        if epoch is None:
            self.last_epoch += 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"Expected non-negative epoch, but got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult**n
            else:
                self.T_i, self.T_cur = self.T_0, epoch
            self.last_epoch = math.floor(epoch)
        self._apply(self.last_epoch)


_CYCLIC_MODES = ("triangular", "triangular2", "exp_range")


class CyclicLR(LRScheduler):
    """The cyclical learning rate policy (Smith 2017), torch's formulas: the rate goes from base_lr up to max_lr
    over step_size_up steps and back over step_size_down (default: the same), the amplitude scaled per cycle
    ('triangular': 1, 'triangular2': halved each cycle) or per step ('exp_range': gamma ** step) or by `scale_fn`;
    with `cycle_momentum` the momentum (or beta1) moves the other way between max_momentum and base_momentum.
    Step it after every batch."""

    def __init__(
        self,
        optimizer: Optimizer,
        base_lr: float | list[float],
        max_lr: float | list[float],
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn: Callable[[float], float] | None = None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum: float | list[float] = 0.8,
        max_momentum: float | list[float] = 0.9,
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs a kiln Optimizer, got {type(optimizer).__name__}")
        groups = optimizer.param_groups
        cyclic_base = _per_group(base_lr, len(groups), "base_lr")
        for group, rate in zip(groups, cyclic_base):
            group["lr"] = rate
        self.max_lrs = _per_group(max_lr, len(groups), "max_lr")
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        if up <= 0 or down <= 0:
            raise ValueError(f"CyclicLR step sizes must be positive, got {step_size_up}, {step_size_down}")
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in _CYCLIC_MODES and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        if scale_mode not in ("cycle", "iterations"):
            raise ValueError(f"scale_mode must be 'cycle' or 'iterations', got {scale_mode!r}")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else ("iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = _per_group(base_momentum, len(groups), "base_momentum")
            self.max_momentums = _per_group(max_momentum, len(groups), "max_momentum")
            for group, high, low in zip(groups, self.max_momentums, self.base_momentums):
                self._set_momentum(group, high)
                group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer)
        self.base_lrs = cyclic_base
        self._apply(0)

    def _set_momentum(self, group: Any, value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def scale_fn(self, x: float) -> float:
        """The amplitude's scale at x (the cycle number or the step, per scale_mode)."""
        if self._scale_fn_custom is not None:
            return float(self._scale_fn_custom(x))
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1.0 / math.pow(2.0, x - 1)
        return math.pow(self.gamma, x)

    def lrs_at(self, epoch: int) -> list[float]:
        """Every group's rate of step `epoch` (and its momentum, when cycled)."""
        cycle = math.floor(1 + epoch / self.total_size)
        x = 1.0 + epoch / self.total_size - cycle
        fraction = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else epoch)
        rates = [base + (peak - base) * fraction * scale for base, peak in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, low, high in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                self._set_momentum(group, high - (high - low) * fraction * scale)
        return rates

    def state_dict(self) -> dict[str, Any]:
        """The base state without a custom scale_fn (torch drops a function too)."""
        return {key: value for key, value in super().state_dict().items() if key != "_scale_fn_custom"}


class ReduceLROnPlateau(LRScheduler):
    """Divides the rate by 1 / factor when `metrics` passed to `step(metrics)` stopped improving for `patience`
    epochs (then waits `cooldown` epochs), never below min_lr, like torch's. Unlike the other schedules it sets no
    rate at construction."""

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float | list[float] = 0.0,
        eps: float = 1e-8,
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs a kiln Optimizer, got {type(optimizer).__name__}")
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode} is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold mode {threshold_mode} is unknown!")
        self.optimizer = optimizer
        self.factor, self.patience, self.cooldown, self.eps = factor, patience, cooldown, eps
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.min_lrs = _per_group(min_lr, len(optimizer.param_groups), "min_lr")
        self.default_min_lr = None if isinstance(min_lr, (list, tuple)) else float(min_lr)
        self.base_lrs = [float(group["lr"]) for group in optimizer.param_groups]
        self.last_epoch = 0
        self._last_lr = list(self.base_lrs)
        self.best = math.inf if mode == "min" else -math.inf
        self.mode_worse = self.best
        self.num_bad_epochs = 0
        self.cooldown_counter = 0

    @property
    def in_cooldown(self) -> bool:
        """Whether the scheduler waits out a cooldown."""
        return self.cooldown_counter > 0

    def is_better(self, current: float, best: float) -> bool:
        """Whether `current` improves on `best` by more than the threshold."""
        if self.mode == "min":
            bound = best * (1.0 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold
            return current < bound
        bound = best * (self.threshold + 1.0) if self.threshold_mode == "rel" else best + self.threshold
        return current > bound

    def step(self, metrics: float | Any = None) -> None:
        """Records `metrics` of the epoch just done and lowers the rates after `patience` epochs without progress."""
        if metrics is None:
            raise TypeError("ReduceLROnPlateau.step() needs the metrics of the epoch (e.g. the validation loss)")
        current = float(metrics.item() if hasattr(metrics, "item") else metrics)
        self.last_epoch += 1
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [float(group["lr"]) for group in self.optimizer.param_groups]


class SequentialLR(LRScheduler):
    """Runs `schedulers` one after the other, switching at each of `milestones` (the next one restarts from its
    epoch 0), like torch's."""

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int]) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs a kiln Optimizer, got {type(optimizer).__name__}")
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler, but got no scheduler.")
        self._check_schedulers(schedulers, optimizer)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                "Sequential Schedulers expects number of schedulers provided to be one more than the number of "
                f"milestone points, but got number of schedulers {len(schedulers)} and the number of milestones to "
                f"be equal to {len(milestones)}"
            )
        self.optimizer = optimizer
        self._schedulers = schedulers
        self._milestones = list(milestones)
        self.last_epoch = 0
        self.base_lrs = [float(group["initial_lr"]) for group in optimizer.param_groups]
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for scheduler in schedulers:  # undo each one's first step: the first starts over, the others wait
            scheduler.last_epoch -= 1
        schedulers[0].step()
        self._last_lr = schedulers[0].get_last_lr()

    def _check_schedulers(self, schedulers: list[LRScheduler], optimizer: Optimizer) -> None:
        """ValueError for an item that is not a scheduler (or is a ReduceLROnPlateau) or drives another optimizer."""
        for index, scheduler in enumerate(schedulers):
            if not isinstance(scheduler, LRScheduler) or isinstance(scheduler, ReduceLROnPlateau):
                raise ValueError(
                    f"{type(self).__name__} does not support `ReduceLROnPlateau` or non-schedulers, got "
                    f"{type(scheduler).__name__} at index {index}"
                )
            if scheduler.optimizer is not optimizer:
                raise ValueError(
                    f"{type(self).__name__} expects all schedulers to belong to the same optimizer, but got "
                    f"scheduler {type(scheduler).__name__} at index {index} with another optimizer"
                )

    def step(self) -> None:
        """Steps the scheduler of the next epoch (from its epoch 0 at a milestone)."""
        self.last_epoch += 1
        index = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler.last_epoch = 0
            scheduler._apply(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """The own attributes and each driven scheduler's state dict under "_schedulers"."""
        state = {key: value for key, value in super().state_dict().items() if key != "_schedulers"}
        state["_schedulers"] = [scheduler.state_dict() for scheduler in self._schedulers]
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores `state_dict()`, each driven scheduler from its entry."""
        own = dict(state_dict)
        saved = own.pop("_schedulers", None)
        if saved is None or len(saved) != len(self._schedulers):
            raise ValueError(f"{type(self).__name__}.load_state_dict needs one '_schedulers' entry per scheduler")
        super().load_state_dict(own)
        for scheduler, entry in zip(self._schedulers, saved):
            scheduler.load_state_dict(entry)


class ChainedScheduler(SequentialLR):
    """Steps every one of `schedulers` at each step, their effects multiplied: each group's rate is its base rate
    times the product over the schedulers of (their rate / their base rate), which is torch's chained result for
    the multiplicative schedules (StepLR, MultiStepLR, ExponentialLR, ConstantLR, LinearLR, PolynomialLR, LambdaLR,
    MultiplicativeLR)."""

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Optimizer | None = None) -> None:
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError("ChainedScheduler expects at least one scheduler to be chained, but got no scheduler.")
        optimizer = optimizer if optimizer is not None else schedulers[0].optimizer
        self._check_schedulers(schedulers, optimizer)
        self.optimizer = optimizer
        self._schedulers = schedulers
        self.base_lrs = [float(group["initial_lr"]) for group in optimizer.param_groups]
        self._compose()

    def _compose(self) -> None:
        rates = list(self.base_lrs)
        for scheduler in self._schedulers:
            for index, (rate, base) in enumerate(zip(scheduler.get_last_lr(), scheduler.base_lrs)):
                rates[index] *= rate / base if base else 0.0
        for group, rate in zip(self.optimizer.param_groups, rates):
            group["lr"] = rate
        self._last_lr = rates

    def step(self) -> None:
        """Steps every scheduler and sets the product of their factors."""
        for scheduler in self._schedulers:
            scheduler.step()
        self._compose()
