"""RMSprop (PyTorch's rule, with momentum and the centered variant)."""

from __future__ import annotations

from collections.abc import Iterable

from kiln.tensor.optim.optimizer import Optimizer, check_number
from kiln.tensor.tensor import Tensor

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop: g = grad + weight_decay * p; v = alpha v + (1 - alpha) g**2; centered: a = alpha a + (1 - alpha) g,
    v~ = v - a**2 (else v~ = v); d = sqrt(v~) + eps; with momentum b = momentum b + g / d, p -= lr b; else
    p -= lr g / d.

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = RMSprop([w], lr=0.01)
        >>> (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.9
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
    ) -> None:
        super().__init__(params, lr)
        self.alpha = check_number(alpha, "alpha value")
        self.eps = check_number(eps, "epsilon value")
        self.weight_decay = check_number(weight_decay, "weight_decay value")
        self.momentum = check_number(momentum, "momentum value")
        self.centered = centered
        self.square_avgs = [self.state_buffer(p) for p in self.params]
        self.grad_avgs = [self.state_buffer(p) for p in self.params] if centered else []
        self.momentum_buffers = [self.state_buffer(p) for p in self.params] if self.momentum else []

    def updates(self) -> list[Tensor]:
        """The running averages, momentum buffers and parameters."""
        targets = []
        for index, (parameter, gradient) in enumerate(zip(self.params, self.gradients())):
            if self.weight_decay:
                gradient = gradient + parameter.detach() * self.weight_decay
            square = self.square_avgs[index]
            new_square = square * self.alpha + gradient * gradient * (1.0 - self.alpha)
            targets.append(self.write(square, new_square))
            variance = new_square
            if self.centered:
                average = self.grad_avgs[index]
                new_average = average * self.alpha + gradient * (1.0 - self.alpha)
                targets.append(self.write(average, new_average))
                variance = new_square - new_average * new_average
            denominator = variance.sqrt() + self.eps
            if self.momentum:
                buffer = self.momentum_buffers[index]
                new_buffer = buffer * self.momentum + gradient / denominator
                targets.append(self.write(buffer, new_buffer))
                step = new_buffer * self.lr_tensor
            else:
                step = gradient / denominator * self.lr_tensor
            targets.append(self.assign_parameter(parameter, parameter.detach() - step))
        return targets
