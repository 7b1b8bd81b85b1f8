"""`Optimizer`: the base class (parameters, a learning rate held in a Tensor, zero_grad, one-schedule step) and SGD.

`step()` builds every parameter's (and every state tensor's) new value lazily under `no_grad` and writes them all
at once (`write_many`): one schedule per step whatever the number of parameters, and the same kernels every step.
The learning rate is a one-element buffer the update kernels read, so an LR schedule changes its value without
changing any kernel (nothing recompiles, and a TinyJit replay sees the new rate).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kiln.tensor.grad_mode import no_grad
from kiln.tensor.realize import engine
from kiln.tensor.realize.mutation import write_many
from kiln.tensor.tensor import Tensor, numpy_from_dtype

__all__ = ["SGD", "Optimizer"]


def check_number(value: object, what: str, low: float = 0.0, high: float | None = None) -> float:
    """`value` as a float; ValueError unless it is a number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"Invalid {what}: {value!r} (expected a number)")
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"Invalid {what}: {value} (expected {bounds})")
    return float(value)


class Optimizer:
    """Holds the parameters and the learning rate; subclasses define `updates()` (the lazy ASSIGNs of one step).

    Args:
        params: the tensors to optimize, e.g. `model.parameters()`; tensors that do not require grad are skipped.
        lr: the learning rate (kept in a one-element float32 buffer; `optimizer.lr = x` writes it).
    """

    def __init__(self, params: Iterable[Tensor], lr: float) -> None:
        given = list(params)
        if not given:
            raise ValueError("optimizer got an empty parameter list")
        for index, parameter in enumerate(given):
            if not isinstance(parameter, Tensor):
                raise TypeError(f"optimizer parameter {index} must be a Tensor, got {type(parameter).__name__}")
        # tensors that do not require grad (running statistics, counters: what get_parameters(model) also returns)
        # are left alone, as tinygrad's optimizers do; each tensor is optimized once
        parameters: list[Tensor] = []
        for parameter in given:
            if parameter.requires_grad is True and all(parameter is not other for other in parameters):
                parameters.append(parameter)
        if not parameters:
            raise ValueError(f"none of the {len(given)} optimizer parameters requires grad")
        self.params = parameters
        self.device = parameters[0].device
        self._lr_value = check_number(lr, "learning rate")
        self.lr_tensor = Tensor(np.array(self._lr_value, dtype=np.float32), device=self.device)
        self.steps = 0
        self._writes: list[tuple[Tensor, Tensor]] = []

    @property
    def lr(self) -> float:
        """The learning rate (a float; the update kernels read it from `lr_tensor`)."""
        return self._lr_value

    @lr.setter
    def lr(self, value: float) -> None:
        if engine.default_engine().recording is not None:
            raise RuntimeError(
                "the learning rate was set inside a function TinyJit is capturing; a replay would not set it. Step "
                "the LR schedule outside the jitted function (replays read the rate from its buffer)"
            )
        self._lr_value = check_number(value, "learning rate")
        self.lr_tensor.data_buffer().copyin(np.array([value], dtype=np.float32).view(np.uint8))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forgets every parameter's gradient (`.grad = None`; with set_to_none=False, zeros), so the next backward
        starts from zero."""
        for parameter in self.params:
            parameter.grad = None if set_to_none else Tensor.zeros_like(parameter)

    def state_buffer(self, parameter: Tensor, value: float = 0.0) -> Tensor:
        """A new buffer of `parameter`'s shape and dtype filled with `value` (for per-parameter state)."""
        array = np.full(parameter.shape, value, dtype=numpy_from_dtype(parameter.dtype))
        return Tensor(array, device=parameter.device)

    def gradients(self) -> list[Tensor]:
        """Each parameter's gradient (RuntimeError naming a parameter that got none)."""
        found = []
        for index, parameter in enumerate(self.params):
            if parameter.grad is None:
                raise RuntimeError(
                    f"parameter {index} (shape {parameter.shape}) has no gradient: call backward() first, or leave "
                    f"parameters the loss does not use out of the optimizer"
                )
            found.append(parameter.grad.cast(parameter.dtype))
        return found

    def assign_parameter(self, parameter: Tensor, value: Tensor) -> Tensor:
        """Records the write of `value` (cast to the parameter's dtype) into `parameter` for this step."""
        return self.write(parameter, value.cast(parameter.dtype))

    def write(self, target: Tensor, value: Tensor) -> Tensor:
        """Records the write of `value` into `target` (a parameter or a state buffer) for this step; returns target.

        Nothing runs yet: `step()` applies every recorded write at once, in one schedule, each value computed from
        the contents before the step (see `kiln.tensor.realize.mutation.write_many`).
        """
        self._writes.append((target, value))
        return target

    def updates(self) -> list[Tensor]:
        """Records the writes of one step (parameters and state) with `write`; subclasses define it."""
        raise NotImplementedError(f"{type(self).__name__} defines no updates()")

    def step(self) -> None:
        """Applies one update to every parameter (and its state), all in one schedule."""
        self._writes = []
        with no_grad():
            self.updates()
            write_many(self._writes)
        self._writes = []
        self.steps += 1


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay (PyTorch's rule):
    g = grad + weight_decay * p; b = g on the first step, else momentum * b + (1 - dampening) * g; with Nesterov
    g = g + momentum * b, else g = b; p = p - lr * g (maximize: p + lr * g).

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = SGD([w], lr=0.1)
        >>> (w * w).sum().backward(); optimizer.step(); w.tolist()
        [0.8]
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr)
        self.momentum = check_number(momentum, "momentum value")
        self.dampening = float(dampening)
        self.weight_decay = check_number(weight_decay, "weight_decay value")
        if nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self.nesterov, self.maximize = nesterov, maximize
        self.buffers = [self.state_buffer(p) for p in self.params] if self.momentum else []

    def updates(self) -> list[Tensor]:
        """p -= lr * (the momentum-filtered gradient), and the momentum buffers."""
        targets = []
        lr = self.lr_tensor
        for index, (parameter, gradient) in enumerate(zip(self.params, self.gradients())):
            if self.weight_decay:
                gradient = gradient + parameter.detach() * self.weight_decay
            if self.momentum:
                buffer = self.buffers[index]
                if self.steps == 0:
                    velocity = gradient
                else:
                    # x * 1.0 is x exactly (also -0.0, inf, nan): no op for the usual dampening 0
                    damped = gradient * (1.0 - self.dampening) if self.dampening else gradient
                    velocity = buffer * self.momentum + damped
                targets.append(self.write(buffer, velocity))
                gradient = gradient + velocity * self.momentum if self.nesterov else velocity
            step = gradient * lr.cast(gradient.dtype)
            updated = parameter.detach() + step if self.maximize else parameter.detach() - step
            targets.append(self.assign_parameter(parameter, updated))
        return targets
