"""Adadelta, Rprop and ASGD with torch.optim's arguments, defaults, update rules and state names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from kiln.tensor.optim.optimizer import Optimizer, ParamsT, check_number, decayed_each
from kiln.tensor.optim.param_group import ParamGroup
from kiln.tensor.tensor import Tensor

__all__ = ["ASGD", "Adadelta", "Rprop"]


class Adadelta(Optimizer):
    """Adadelta (Zeiler 2012), PyTorch's rule: g = grad (maximize: -grad) + weight_decay * p;
    v = rho v + (1 - rho) g**2; d = sqrt(u + eps) / sqrt(v + eps) * g; u = rho u + (1 - rho) d**2; p -= lr d.
    State: square_avg (v) and acc_delta (u).

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = Adadelta([w])
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 5)
        0.99684
    """

    nonnegative = ("eps", "weight_decay")

    def __init__(
        self, params: ParamsT, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0,
        maximize: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def validate(self, group: Mapping[str, Any]) -> None:
        """Checks rho in [0, 1], eps and weight decay."""
        check_number(group["rho"], "rho value", 0.0, 1.0)
        super().validate(group)

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The two running averages and the parameters."""
        rho, eps, lr = float(group["rho"]), float(group["eps"]), group.value("lr")
        self.advance(index)
        for parameter, weights, gradient in decayed_each(group, parameters, gradients):
            square, accumulated = self.state_buffer(parameter, "square_avg"), self.state_buffer(parameter, "acc_delta")
            new_square = square * rho + gradient * gradient * (1.0 - rho)
            delta = (accumulated + eps).sqrt() / (new_square + eps).sqrt() * gradient
            self.write(square, new_square)
            self.write(accumulated, accumulated * rho + delta * delta * (1.0 - rho))
            self.assign_parameter(parameter, weights - delta * lr.cast(delta.dtype))


class Rprop(Optimizer):
    """Resilient backpropagation, PyTorch's rule: per element, the step size grows by etas[1] while the gradient
    keeps its sign and shrinks by etas[0] when it flips (clamped to step_sizes); p -= sign(g) * step, and where the
    sign flipped the gradient counts as 0 (no move, and no sign to compare next time). The step sizes start at the
    group's lr. State: prev (the last gradient used) and step_size.

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = Rprop([w], lr=0.1)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.9
    """

    def __init__(
        self, params: ParamsT, lr: float = 1e-2, etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50.0), maximize: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(params, {"lr": lr, "etas": etas, "step_sizes": step_sizes, "maximize": maximize})

    def validate(self, group: Mapping[str, Any]) -> None:
        """Checks 0 < etas[0] < 1 < etas[1] and the step-size bounds."""
        etas, sizes = group["etas"], group["step_sizes"]
        if not isinstance(etas, (tuple, list)) or len(etas) != 2:
            raise ValueError(f"Rprop etas must be a pair of numbers, got {etas!r}")
        minus, plus = check_number(etas[0], "eta value at index 0"), check_number(etas[1], "eta value at index 1")
        if not 0.0 < minus < 1.0 < plus:
            raise ValueError(f"Invalid eta values: {minus}, {plus} (expected 0 < etaminus < 1 < etaplus)")
        if not isinstance(sizes, (tuple, list)) or len(sizes) != 2:
            raise ValueError(f"Rprop step_sizes must be a pair of numbers, got {sizes!r}")
        check_number(sizes[0], "minimal step size")
        check_number(sizes[1], "maximal step size")

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The step sizes, the remembered gradients and the parameters."""
        minus, plus = (float(value) for value in group["etas"])
        low, high = (float(value) for value in group["step_sizes"])
        self.advance(index)
        for parameter, gradient in zip(parameters, gradients):
            if group["maximize"]:
                gradient = -gradient
            previous = self.state_buffer(parameter, "prev")
            sizes = self.state_buffer(parameter, "step_size", float(group["lr"]))
            product = gradient * previous
            factor = (product > 0).where(plus, (product < 0).where(minus, 1.0)).cast(sizes.dtype)
            new_sizes = (sizes * factor).clamp(low, high)
            kept = (product < 0).where(0.0, gradient).cast(gradient.dtype)
            self.write(sizes, new_sizes)
            self.write(previous, kept)
            self.assign_parameter(parameter, parameter.detach() - kept.sign() * new_sizes)


class ASGD(Optimizer):
    """Averaged SGD (Polyak and Juditsky), PyTorch's rule: g = grad (maximize: -grad) + weight_decay * p;
    p = p (1 - lambd eta) - eta g; the average ax follows p (ax = p while mu is 1, else ax += mu (p - ax)); then
    eta = lr / (1 + lambd lr t) ** alpha and mu = 1 / max(1, t - t0) for step t. State: eta, mu (one number per
    parameter) and ax.

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = ASGD([w], lr=0.1)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 5)
        0.79999
    """

    scalar_state: ClassVar[frozenset[str]] = frozenset({"eta", "mu"})
    nonnegative = ("weight_decay",)

    def __init__(
        self, params: ParamsT, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
        weight_decay: float = 0.0, maximize: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(
            params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, maximize=maximize)
        )

    def validate(self, group: Mapping[str, Any]) -> None:
        """Checks weight decay, lambd, alpha and t0 are numbers (weight decay >= 0)."""
        super().validate(group)
        for name in ("lambd", "alpha", "t0"):
            check_number(group[name], f"{name} value", low=float("-inf"))

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The parameters, their averages and the next eta and mu."""
        lambd, alpha, t0 = float(group["lambd"]), float(group["alpha"]), float(group["t0"])
        lr = group.value("lr")
        t = self.advance(index)
        for parameter, weights, gradient in decayed_each(group, parameters, gradients):
            eta = self.state_buffer(parameter, "eta", float(group["lr"]), ())
            mu = self.state_buffer(parameter, "mu", 1.0, ())
            average = self.state_buffer(parameter, "ax")
            rate = eta.cast(gradient.dtype)
            moved = weights * (1.0 - rate * lambd) - gradient * rate
            self.write(average, (mu == 1.0).where(moved, average + (moved - average) * mu.cast(moved.dtype)))
            rate_now = lr.cast(eta.dtype)
            self.write(eta, rate_now / (rate_now * (lambd * t.cast(eta.dtype)) + 1.0) ** alpha)
            self.write(mu, 1.0 / (t.cast(mu.dtype) - t0).maximum(1.0))
            self.assign_parameter(parameter, moved)
