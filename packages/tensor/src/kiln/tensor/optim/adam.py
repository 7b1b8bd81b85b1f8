"""Adam, AdamW and LAMB: first and second moment estimates with bias correction.

Each group's step count lives in a float32 buffer updated by the step itself, and the bias corrections
1 - beta**t = -expm1(t * log1p(-(1 - beta))) are computed on the device from it and from the group's beta buffers
(1 - beta rounded once from float64, so beta2 = 0.999 keeps its digits), so every step runs the same kernels and a
cycled beta1 (OneCycleLR) reaches the update without recompiling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.tensor.optim.optimizer import Optimizer, ParamsT, check_betas, decayed_each
from kiln.tensor.optim.param_group import ParamGroup
from kiln.tensor.tensor import Tensor

__all__ = ["LAMB", "Adam", "AdamW"]


def tinygrad_betas(betas: tuple[float, float], b1: float | None, b2: float | None) -> tuple[float, float]:
    """`betas` with tinygrad's spelling (b1=, b2=) folded in; ValueError when both spellings set a beta."""
    if b1 is None and b2 is None:
        return betas
    if tuple(betas) != (0.9, 0.999):
        raise ValueError(f"give betas={tuple(betas)} (torch's spelling) or b1 / b2 (tinygrad's), not both")
    return (betas[0] if b1 is None else b1, betas[1] if b2 is None else b2)


def bias_correction(group: ParamGroup, index: int, t: Tensor) -> Tensor:
    """1 - betas[index] ** t on the device (t a 0-dim float32 tensor), accurate also for beta2 near 1."""
    return -(t * (-group.complement("betas", index)).log1p()).expm1()


class MomentsOptimizer(Optimizer):
    """The Adam family's shared parts: betas and eps checks, the step count, the two moment estimates."""

    buffered = ("lr", "betas")
    nonnegative = ("eps", "weight_decay")

    def validate(self, group: Mapping[str, Any]) -> None:
        """Checks betas, eps and weight decay."""
        check_betas(group["betas"])
        super().validate(group)

    def moments(self, group: ParamGroup, parameter: Tensor, gradient: Tensor) -> tuple[Tensor, Tensor]:
        """Records and returns the new (exp_avg, exp_avg_sq) of `parameter`."""
        beta1, beta2 = group.value("betas", 0), group.value("betas", 1)
        one_minus1, one_minus2 = group.complement("betas", 0), group.complement("betas", 1)
        m = self.state_buffer(parameter, "exp_avg")
        v = self.state_buffer(parameter, "exp_avg_sq")
        new_m = m * beta1.cast(m.dtype) + gradient * one_minus1.cast(m.dtype)
        new_v = v * beta2.cast(v.dtype) + gradient * gradient * one_minus2.cast(v.dtype)
        self.write(m, new_m)
        self.write(v, new_v)
        return new_m, new_v


class Adam(MomentsOptimizer):
    """Adam (PyTorch's rule): g = grad (maximize: -grad) + weight_decay * p (decoupled_weight_decay: instead
    p *= 1 - lr * weight_decay); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g**2 (amsgrad: v_max = max(v_max, v) is
    used below); p -= lr / (1 - b1**t) * m / (sqrt(v) / sqrt(1 - b2**t) + eps). tinygrad's spelling b1= / b2= of
    betas is accepted (tinygrad's Adam without weight decay is this rule).

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = Adam([w], lr=0.1)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.9
    """

    def __init__(
        self, params: ParamsT, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
        decoupled_weight_decay: bool = False, b1: float | None = None, b2: float | None = None,
    ) -> None:  # fmt: skip
        defaults = dict(lr=lr, betas=tinygrad_betas(betas, b1, b2), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        super().__init__(params, {**defaults, "maximize": maximize, "decoupled_weight_decay": decoupled_weight_decay})

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The moments, t and the parameters."""
        t = self.advance(index)
        correction1, correction2 = bias_correction(group, 0, t), bias_correction(group, 1, t)
        lr, eps = group.value("lr"), float(group["eps"])
        for parameter, weights, gradient in decayed_each(group, parameters, gradients):
            m, v = self.moments(group, parameter, gradient)
            if group["amsgrad"]:
                peak = self.state_buffer(parameter, "max_exp_avg_sq")
                v = peak.maximum(v)
                self.write(peak, v)
            denominator = v.sqrt() / correction2.sqrt().cast(v.dtype) + eps
            step_size = (lr / correction1).cast(m.dtype)
            self.assign_parameter(parameter, weights - step_size * m / denominator)


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's rule): p *= 1 - lr * weight_decay, then Adam's update with the
    plain gradient. Default weight_decay 0.01."""

    def __init__(
        self, params: ParamsT, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False, b1: float | None = None,
        b2: float | None = None,
    ) -> None:  # fmt: skip
        betas = tinygrad_betas(betas, b1, b2)
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, decoupled_weight_decay=True)


class LAMB(MomentsOptimizer):
    """LAMB (You et al., "Large Batch Optimization for Deep Learning", 2019): Adam's bias-corrected direction
    u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p, scaled per parameter by the trust ratio
    ||p|| / ||u|| (1 where either norm is 0): p -= lr * trust * u. `adam=True` drops the trust ratio (trust 1).
    """

    def __init__(
        self, params: ParamsT, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
        weight_decay: float = 0.0, adam: bool = False, *, b1: float | None = None, b2: float | None = None,
    ) -> None:  # fmt: skip
        defaults = {"lr": lr, "betas": tinygrad_betas(betas, b1, b2), "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, {**defaults, "adam": adam})

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The moments, t and the parameters."""
        t = self.advance(index)
        correction1, correction2 = bias_correction(group, 0, t), bias_correction(group, 1, t)
        weight_decay, eps = float(group["weight_decay"]), float(group["eps"])
        for parameter, gradient in zip(parameters, gradients):
            m, v = self.moments(group, parameter, gradient)
            weights = parameter.detach()
            direction = (m / correction1) / ((v / correction2).sqrt() + eps) + weights * weight_decay
            if group["adam"]:
                trust: Tensor | float = 1.0
            else:
                weight_norm = (weights * weights).sum().sqrt()
                direction_norm = (direction * direction).sum().sqrt()
                ratio = weight_norm / direction_norm.maximum(1e-30)
                trust = ((weight_norm > 0) & (direction_norm > 0)).where(ratio, 1.0)
            self.assign_parameter(parameter, weights - group.value("lr") * trust * direction)
