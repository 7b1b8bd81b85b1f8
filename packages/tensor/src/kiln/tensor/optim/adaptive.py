"""Adagrad, Adamax, NAdam and RAdam with torch.optim's formulas, defaults and state names.

Adagrad, Adamax and NAdam compute their step-dependent factors on the device from the group's step count (the same
kernels every step). RAdam's rectification rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t) cancels to a few units
out of ~2000, which float32 cannot hold to torch's precision: its per-step factors are computed on the host in
float64 (as torch does) and written into a small per-group buffer before each step, so RAdam's step must run outside
a function TinyJit captures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from kiln.tensor.optim.adam import MomentsOptimizer, bias_correction
from kiln.tensor.optim.optimizer import Optimizer, ParamsT, check_number, decayed_each
from kiln.tensor.optim.param_group import ParamGroup
from kiln.tensor.realize import engine
from kiln.tensor.tensor import Tensor

__all__ = ["Adagrad", "Adamax", "NAdam", "RAdam"]


class Adagrad(Optimizer):
    """Adagrad (PyTorch's rule): g = grad (maximize: -grad) + weight_decay * p; sum += g**2;
    p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps).

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = Adagrad([w], lr=0.1)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.9
    """

    nonnegative = ("lr_decay", "weight_decay", "initial_accumulator_value", "eps")

    def __init__(
        self, params: ParamsT, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10, *, maximize: bool = False,
    ) -> None:  # fmt: skip
        initial = initial_accumulator_value
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, initial_accumulator_value=initial)
        super().__init__(params, {**defaults, "eps": eps, "maximize": maximize})

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The squared-gradient sums, t and the parameters."""
        t = self.advance(index)
        rate = group.value("lr") / ((t - 1.0) * float(group["lr_decay"]) + 1.0)
        eps, initial = float(group["eps"]), float(group["initial_accumulator_value"])
        for parameter, weights, gradient in decayed_each(group, parameters, gradients):
            total = self.state_buffer(parameter, "sum", initial)
            new_total = total + gradient * gradient
            self.write(total, new_total)
            self.assign_parameter(parameter, weights - rate.cast(gradient.dtype) * gradient / (new_total.sqrt() + eps))


class Adamax(MomentsOptimizer):
    """Adamax (PyTorch's rule): g = grad (maximize: -grad) + weight_decay * p; m = b1 m + (1 - b1) g;
    u = max(b2 u, |g| + eps); p -= lr / (1 - b1**t) * m / u. Default lr 2e-3.

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = Adamax([w], lr=0.1)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.9
    """

    def __init__(
        self, params: ParamsT, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0, *, maximize: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The first moment, the infinity norm, t and the parameters."""
        t = self.advance(index)
        rate = group.value("lr") / bias_correction(group, 0, t)
        eps = float(group["eps"])
        for parameter, weights, gradient in decayed_each(group, parameters, gradients):
            m = self.state_buffer(parameter, "exp_avg")
            new_m = m * group.value("betas", 0).cast(m.dtype) + gradient * group.complement("betas", 0).cast(m.dtype)
            self.write(m, new_m)
            norm = self.state_buffer(parameter, "exp_inf")
            new_norm = (norm * group.value("betas", 1).cast(norm.dtype)).maximum(gradient.abs() + eps)
            self.write(norm, new_norm)
            self.assign_parameter(parameter, weights - rate.cast(m.dtype) * new_m / new_norm)


class NAdam(MomentsOptimizer):
    """NAdam (PyTorch's rule): Adam's moments with Nesterov momentum and momentum decay:
    mu_t = b1 (1 - 0.5 * 0.96 ** (t * momentum_decay)), mu_product *= mu_t;
    p -= lr (1 - mu_t) / (1 - mu_product) * g / d + lr mu_{t+1} / (1 - mu_product mu_{t+1}) * m / d with
    d = sqrt(v / (1 - b2**t)) + eps. Weight decay L2, or decoupled (p *= 1 - lr wd) with decoupled_weight_decay.

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = NAdam([w], lr=0.1)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.8944
    """

    scalar_state = frozenset({"mu_product"})

    def __init__(
        self, params: ParamsT, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0, momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *,
        maximize: bool = False,
    ) -> None:  # fmt: skip
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay)
        super().__init__(params, {**defaults, "decoupled_weight_decay": decoupled_weight_decay, "maximize": maximize})

    def validate(self, group: Mapping[str, Any]) -> None:
        """Checks betas, eps, weight decay and momentum_decay."""
        super().validate(group)
        check_number(group["momentum_decay"], "momentum_decay value")

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The moments, mu_product, t and the parameters."""
        t = self.advance(index)
        correction2 = bias_correction(group, 1, t)
        decay_rate = float(group["momentum_decay"]) * math.log(0.96)  # 0.96 ** (t psi) = exp(t psi ln 0.96)
        beta1, lr, eps = group.value("betas", 0), group.value("lr"), float(group["eps"])
        mu = beta1 * (1.0 - 0.5 * (t * decay_rate).exp())
        mu_next = beta1 * (1.0 - 0.5 * ((t + 1.0) * decay_rate).exp())
        for parameter, weights, gradient in decayed_each(group, parameters, gradients):
            product = self.state_buffer(parameter, "mu_product", 1.0, ())
            new_product = product * mu.cast(product.dtype)
            self.write(product, new_product)
            m, v = self.moments(group, parameter, gradient)
            denominator = (v / correction2.cast(v.dtype)).sqrt() + eps
            gradient_factor = lr * (1.0 - mu) / (1.0 - new_product)
            moment_factor = lr * mu_next / (1.0 - new_product * mu_next)
            step = (
                gradient_factor.cast(m.dtype) * gradient / denominator + moment_factor.cast(m.dtype) * m / denominator
            )
            self.assign_parameter(parameter, weights - step)


class RAdam(MomentsOptimizer):
    """RAdam (PyTorch's rule): Adam's moments; with rho_inf = 2 / (1 - b2) - 1 and
    rho_t = rho_inf - 2 t b2**t / (1 - b2**t): where rho_t > 5, p -= lr m_hat r_t sqrt(1 - b2**t) / (sqrt(v) + eps)
    with r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)); else p -= lr m_hat
    (m_hat = m / (1 - b1**t)). Weight decay L2, or decoupled with decoupled_weight_decay.

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = RAdam([w], lr=0.1)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.8
    """

    def __init__(
        self, params: ParamsT, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *, maximize: bool = False,
    ) -> None:  # fmt: skip
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        defaults.update(decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
        self._factors: dict[int, Tensor] = {}  # group index -> [adaptive factor, plain factor] of this step
        super().__init__(params, defaults)

    @staticmethod
    def factors(lr: float, betas: tuple[float, float], t: int) -> tuple[float, float]:
        """(adaptive, plain) for step t, in float64 as torch computes them: the update is
        m * (adaptive / (sqrt(v) + eps) + plain)."""
        beta1, beta2 = betas
        correction1, correction2 = 1.0 - beta1**t, 1.0 - beta2**t
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        rho_t = rho_inf - 2.0 * t * beta2**t / correction2
        if rho_t > 5.0:
            rectification = math.sqrt(
                (rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t)
            )
            return lr * rectification * math.sqrt(correction2) / correction1, 0.0
        return 0.0, lr / correction1

    def prepare_step(self) -> None:
        """Writes each group's factors of the coming step (host float64, like torch)."""
        if engine.default_engine().recording is not None:
            raise RuntimeError(
                "RAdam computes its per-step rectification on the host: call its step() outside TinyJit (or use "
                "Adam, NAdam or Adamax, whose steps replay)"
            )
        for index, group in enumerate(self.param_groups):
            betas = (float(group["betas"][0]), float(group["betas"][1]))
            values = np.array(self.factors(float(group["lr"]), betas, self._group_steps[index] + 1), np.float32)
            if index not in self._factors:
                self._factors[index] = Tensor(values, device=group.device)
            else:
                self._factors[index].data_buffer().copyin(values.view(np.uint8))

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The moments and the parameters."""
        factors, eps = self._factors[index], float(group["eps"])
        for parameter, weights, gradient in decayed_each(group, parameters, gradients):
            m, v = self.moments(group, parameter, gradient)
            scale = factors[0].cast(m.dtype) / (v.sqrt() + eps) + factors[1].cast(m.dtype)
            self.assign_parameter(parameter, weights - m * scale)
