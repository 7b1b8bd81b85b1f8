"""LARS and Muon with tinygrad's names, defaults and update rules (`tinygrad.nn.optim`).

LARS (You et al., "Large Batch Training of Convolutional Networks", 2017) scales each parameter's step by the trust
ratio r = tcoef * ||p|| / (||g|| + weight_decay * ||p||) (1 where either norm is 0, and with tcoef = 0). Muon
(Keller Jordan's optimizer) is LARS without the trust ratio whose momentum-filtered update is orthogonalized by
`ns_steps` Newton-Schulz iterations on the update viewed as a matrix (shape[0], -1), with the weight decay applied
to the parameter after the momentum (p *= 1 - lr * weight_decay) rather than added to the gradient.

tinygrad since February 2026 computes that decayed parameter and then updates the undecayed one (its Muon's
weight_decay has no effect); kiln applies it, as tinygrad's Muon did when it was introduced and as its docstring
("post momentum weight decay") says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.tensor.optim.optimizer import Optimizer, ParamsT, check_number
from kiln.tensor.optim.param_group import ParamGroup
from kiln.tensor.tensor import Tensor

__all__ = ["LARS", "Muon"]


class LARS(Optimizer):
    """LARS (tinygrad's rule): r = the trust ratio (above); pre_wd: g = grad + weight_decay * p; classic:
    g = g * r * lr; with momentum b = momentum * b + g (b starts at zero), g = g + momentum * b (nesterov) or b;
    with `ns_coefficients`, g = newton_schulz(g as (shape[0], -1), ns_steps); not pre_wd: p = p * (1 - lr *
    weight_decay); not classic: g = g * r * lr; p = p - g.

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = LARS([w], lr=0.1, momentum=0.0, tcoef=0.0)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.8
    """

    buffered = ("lr", "momentum")
    saves_step = False
    nonnegative = ("momentum", "weight_decay", "tcoef")

    def __init__(
        self, params: ParamsT, lr: float = 1e-3, momentum: float = 0.9, weight_decay: float = 1e-4, ns_steps: int = 0,
        ns_coefficients: tuple[float, ...] | None = None, nesterov: bool = False, classic: bool = True,
        pre_wd: bool = True, tcoef: float = 1e-3,
    ) -> None:  # fmt: skip
        defaults: dict[str, Any] = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, ns_steps=ns_steps)
        defaults.update(ns_coefficients=ns_coefficients, nesterov=nesterov, classic=classic, pre_wd=pre_wd, tcoef=tcoef)
        super().__init__(params, defaults)

    def validate(self, group: Mapping[str, Any]) -> None:
        """Checks momentum, weight decay, tcoef and the Newton-Schulz settings."""
        super().validate(group)
        steps = group["ns_steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"Invalid ns_steps: {steps!r} (expected an int >= 0)")
        coefficients = group["ns_coefficients"]
        if coefficients:
            if not isinstance(coefficients, (tuple, list)):
                raise ValueError(f"ns_coefficients must be a tuple of numbers or None, got {coefficients!r}")
            for coefficient in coefficients:
                check_number(coefficient, "ns_coefficients item", low=-float("inf"))
            for parameter in group["params"]:
                if len(parameter.shape) == 0:
                    raise ValueError("Newton-Schulz orthogonalization (ns_coefficients) needs parameters with a dim")

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The momentum buffers and the parameters."""
        lr = group.value("lr")
        weight_decay, tcoef = float(group["weight_decay"]), float(group["tcoef"])
        coefficients = group["ns_coefficients"]
        for parameter, gradient in zip(parameters, gradients):
            weights = parameter.detach()
            ratio: Tensor | float = 1.0
            if tcoef != 0:
                weight_norm = weights.square().sum().sqrt()
                gradient_norm = gradient.square().sum().sqrt()
                trust = tcoef * weight_norm / (gradient_norm + weight_norm * weight_decay)
                ratio = (weight_norm > 0).where((gradient_norm > 0).where(trust, 1.0), 1.0)
            if group["pre_wd"] and weight_decay > 0:
                gradient = gradient + weights * weight_decay
            if group["classic"]:
                gradient = gradient * ratio * lr.cast(gradient.dtype)
            if group["momentum"]:
                buffer = self.state_buffer(parameter, "momentum_buffer")
                momentum = group.value("momentum").cast(buffer.dtype)
                velocity = buffer * momentum + gradient
                self.write(buffer, velocity)
                gradient = gradient + velocity * momentum if group["nesterov"] else velocity
            if coefficients:
                matrix = gradient.reshape(gradient.shape[0], -1)
                orthogonal = matrix.newton_schulz(int(group["ns_steps"]), tuple(float(c) for c in coefficients))
                gradient = orthogonal.reshape(gradient.shape)
            if not group["pre_wd"] and weight_decay > 0:
                weights = weights * (1.0 - lr * weight_decay).cast(weights.dtype)
            if not group["classic"]:
                gradient = gradient * ratio * lr.cast(gradient.dtype)
            self.assign_parameter(parameter, weights - gradient)


class Muon(LARS):
    """Muon (tinygrad's rule and defaults): Nesterov momentum 0.95, no trust ratio, the momentum-filtered update
    orthogonalized by `ns_steps` Newton-Schulz iterations with `ns_coefficients` (each parameter viewed as a matrix
    (shape[0], -1); meant for 2-D weights), weight decay after the momentum: p = p * (1 - lr * weight_decay) -
    lr * update.

    Example:
        >>> w = Tensor([[3.0, 0.0], [0.0, 1.0]], requires_grad=True); optimizer = Muon([w], lr=0.1)
        >>> _ = (w * w).sum().backward(); optimizer.step(); [round(x, 2) for x in w.flatten().tolist()]
        [2.89, 0.0, 0.0, 0.88]
    """

    def __init__(
        self, params: ParamsT, lr: float = 1e-3, momentum: float = 0.95, weight_decay: float = 0.1, ns_steps: int = 5,
        ns_coefficients: tuple[float, ...] = (3.4445, -4.775, 2.0315), nesterov: bool = True,
    ) -> None:  # fmt: skip
        super().__init__(
            params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, classic=False, pre_wd=False,
            tcoef=0.0,
        )  # fmt: skip
