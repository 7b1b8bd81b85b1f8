"""RMSprop (PyTorch's rule, with momentum and the centered variant)."""

from __future__ import annotations

from kiln.tensor.optim.optimizer import Optimizer, ParamsT, decayed_each
from kiln.tensor.optim.param_group import ParamGroup
from kiln.tensor.tensor import Tensor

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop: g = grad (maximize: -grad) + weight_decay * p; v = alpha v + (1 - alpha) g**2; centered:
    a = alpha a + (1 - alpha) g, v~ = v - a**2 (else v~ = v); d = sqrt(v~) + eps; with momentum
    b = momentum b + g / d, p -= lr b; else p -= lr g / d.

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = RMSprop([w], lr=0.01)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.9
    """

    buffered = ("lr", "momentum")
    nonnegative = ("alpha", "eps", "weight_decay", "momentum")

    def __init__(
        self, params: ParamsT, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
        momentum: float = 0.0, centered: bool = False, maximize: bool = False,
    ) -> None:  # fmt: skip
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered)
        super().__init__(params, {**defaults, "maximize": maximize})

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """The running averages, momentum buffers and parameters."""
        alpha, eps, lr = float(group["alpha"]), float(group["eps"]), group.value("lr")
        for parameter, weights, gradient in decayed_each(group, parameters, gradients):
            square = self.state_buffer(parameter, "square_avg")
            new_square = square * alpha + gradient * gradient * (1.0 - alpha)
            self.write(square, new_square)
            variance = new_square
            if group["centered"]:
                average = self.state_buffer(parameter, "grad_avg")
                new_average = average * alpha + gradient * (1.0 - alpha)
                self.write(average, new_average)
                variance = new_square - new_average * new_average
            denominator = variance.sqrt() + eps
            if group["momentum"]:
                buffer = self.state_buffer(parameter, "momentum_buffer")
                new_buffer = buffer * group.value("momentum").cast(buffer.dtype) + gradient / denominator
                self.write(buffer, new_buffer)
                step = new_buffer * lr.cast(new_buffer.dtype)
            else:
                step = gradient / denominator * lr.cast(gradient.dtype)
            self.assign_parameter(parameter, weights - step)
