"""Adam, AdamW and LAMB: first and second moment estimates with bias correction.

The step count lives in a float32 buffer updated by the step itself, and the bias corrections 1 - beta**t are
computed on the device from it, so every step runs the same kernels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from kiln.tensor.optim.optimizer import Optimizer, check_number
from kiln.tensor.tensor import Tensor

__all__ = ["LAMB", "Adam", "AdamW"]


class _Moments(Optimizer):
    """Shared state of the Adam family: m, v per parameter and the step count t."""

    def __init__(
        self, params: Iterable[Tensor], lr: float, betas: tuple[float, float], eps: float, weight_decay: float
    ) -> None:
        super().__init__(params, lr)
        if not isinstance(betas, tuple) or len(betas) != 2:
            raise ValueError(f"betas must be a tuple of two numbers, got {betas!r}")
        self.beta1 = check_number(betas[0], "beta parameter at index 0", 0.0, 1.0)
        self.beta2 = check_number(betas[1], "beta parameter at index 1", 0.0, 1.0)
        if self.beta1 >= 1.0 or self.beta2 >= 1.0:
            raise ValueError(f"Invalid beta parameters: {betas} (each must be < 1)")
        self.eps = check_number(eps, "epsilon value")
        self.weight_decay = check_number(weight_decay, "weight_decay value")
        self.exp_avgs = [self.state_buffer(p) for p in self.params]
        self.exp_avg_sqs = [self.state_buffer(p) for p in self.params]
        self.step_count = Tensor(np.array(0.0, dtype=np.float32), device=self.device)

    def _moments(self, targets: list[Tensor]) -> tuple[Tensor, Tensor, list[tuple[Tensor, Tensor, Tensor]]]:
        """Advances t; returns the bias corrections (1 - beta1**t, 1 - beta2**t) and per parameter (p, m, v) with
        m, v the new moments (their ASSIGNs appended to `targets`). The gradient already includes L2 decay."""
        t = self.step_count + 1.0
        targets.append(self.write(self.step_count, t))
        correction1 = 1.0 - (t * math.log(self.beta1)).exp() if self.beta1 > 0 else t * 0.0 + 1.0
        correction2 = 1.0 - (t * math.log(self.beta2)).exp() if self.beta2 > 0 else t * 0.0 + 1.0
        result = []
        for parameter, gradient, m, v in zip(self.params, self._decayed_gradients(), self.exp_avgs, self.exp_avg_sqs):
            new_m = m * self.beta1 + gradient * (1.0 - self.beta1)
            new_v = v * self.beta2 + gradient * gradient * (1.0 - self.beta2)
            targets.append(self.write(m, new_m))
            targets.append(self.write(v, new_v))
            result.append((parameter, new_m, new_v))
        return correction1, correction2, result

    def _decayed_gradients(self) -> list[Tensor]:
        return self.gradients()


class Adam(_Moments):
    """Adam (PyTorch's rule): g = grad + weight_decay * p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g**2;
    p -= lr * (m / (1 - b1**t)) / (sqrt(v / (1 - b2**t)) + eps).

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = Adam([w], lr=0.1)
        >>> (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.9
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)

    def _decayed_gradients(self) -> list[Tensor]:
        gradients = self.gradients()
        if not self.weight_decay:
            return gradients
        return [g + p.detach() * self.weight_decay for g, p in zip(gradients, self.params)]

    def _decayed_parameter(self, parameter: Tensor) -> Tensor:
        return parameter.detach()

    def updates(self) -> list[Tensor]:
        """The moments, t and the parameters."""
        targets: list[Tensor] = []
        correction1, correction2, moments = self._moments(targets)
        lr = self.lr_tensor
        for parameter, m, v in moments:
            denominator = (v / correction2).sqrt() + self.eps
            updated = self._decayed_parameter(parameter) - lr * (m / correction1) / denominator
            targets.append(self.assign_parameter(parameter, updated))
        return targets


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's rule): p *= 1 - lr * weight_decay, then Adam's update with the
    plain gradient. Default weight_decay 0.01."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)

    def _decayed_gradients(self) -> list[Tensor]:
        return self.gradients()

    def _decayed_parameter(self, parameter: Tensor) -> Tensor:
        return parameter.detach() * (1.0 - self.lr_tensor * self.weight_decay)


class LAMB(_Moments):
    """LAMB (You et al., "Large Batch Optimization for Deep Learning", 2019): Adam's bias-corrected direction
    u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p, scaled per parameter by the trust ratio
    ||p|| / ||u|| (1 where either norm is 0): p -= lr * trust * u. `adam=True` drops the trust ratio (trust 1).
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)
        self.adam = adam

    def updates(self) -> list[Tensor]:
        """The moments, t and the parameters."""
        targets: list[Tensor] = []
        correction1, correction2, moments = self._moments(targets)
        for parameter, m, v in moments:
            weights = parameter.detach()
            direction = (m / correction1) / ((v / correction2).sqrt() + self.eps) + weights * self.weight_decay
            if self.adam:
                trust: Tensor | float = 1.0
            else:
                weight_norm = (weights * weights).sum().sqrt()
                direction_norm = (direction * direction).sum().sqrt()
                ratio = weight_norm / direction_norm.maximum(1e-30)
                trust = ((weight_norm > 0) & (direction_norm > 0)).where(ratio, 1.0)
            updated = weights - self.lr_tensor * trust * direction
            targets.append(self.assign_parameter(parameter, updated))
        return targets
