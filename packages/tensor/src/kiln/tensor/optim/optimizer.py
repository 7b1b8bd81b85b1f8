"""`Optimizer`: the base class (parameter groups, per-parameter state, zero_grad, one-schedule step, state dicts in
torch.optim's layout) and SGD.

`step()` builds every parameter's (and every state tensor's) new value lazily under `no_grad` and writes them all
at once (`write_many`): one schedule per step whatever the number of parameters, and the same kernels every step.
The learning rate (and a cycled momentum) is a one-element buffer the update kernels read (`ParamGroup`), so an LR
schedule changes its value without changing any kernel (nothing recompiles, and a TinyJit replay sees the new rate).

Parameters: as in torch, `params` is an iterable of tensors or of dicts (parameter groups, each with its own
hyperparameters; missing ones come from the constructor's arguments). A tensor whose `requires_grad` is None
("unset", kiln's default for a new tensor) is turned on by the optimizer, as tinygrad's optimizers do; a tensor with
`requires_grad=False` (a frozen weight, a running statistic) stays in its group and is skipped by `step()`; an
integer tensor (a counter a state-dict walk also returns) is never optimized.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from kiln.tensor.grad_mode import no_grad
from kiln.tensor.optim.param_group import ParamGroup
from kiln.tensor.realize.mutation import write_many
from kiln.tensor.tensor import Tensor, numpy_from_dtype
from kiln.uops import dtypes

__all__ = ["SGD", "Optimizer", "OptimizerGroup", "ParamsT"]

ParamsT = Iterable[Tensor] | Iterable[Mapping[str, Any]]
"""What an optimizer's `params` may be (torch.optim's `ParamsT`): tensors, or dicts that are parameter groups."""


def check_number(value: object, what: str, low: float = 0.0, high: float | None = None) -> float:
    """`value` as a float; ValueError unless it is a number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"Invalid {what}: {value!r} (expected a number)")
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"Invalid {what}: {value} (expected {bounds})")
    return float(value)


def check_betas(betas: object) -> tuple[float, float]:
    """`betas` as a pair of floats, each in [0, 1); ValueError otherwise."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"betas must be a tuple of two numbers, got {betas!r}")
    beta1 = check_number(betas[0], "beta parameter at index 0", 0.0, 1.0)
    beta2 = check_number(betas[1], "beta parameter at index 1", 0.0, 1.0)
    if beta1 >= 1.0 or beta2 >= 1.0:
        raise ValueError(f"Invalid beta parameters: {tuple(betas)} (each must be < 1)")
    return beta1, beta2


def decayed(group: ParamGroup, parameter: Tensor, gradient: Tensor) -> tuple[Tensor, Tensor]:
    """(weights, gradient) after maximize and weight decay: L2 (added to the gradient) or, with
    `decoupled_weight_decay`, p *= 1 - lr * weight_decay."""
    weights = parameter.detach()
    if group.get("maximize"):
        gradient = -gradient
    weight_decay = float(group["weight_decay"])
    if weight_decay and group.get("decoupled_weight_decay"):
        weights = weights * (1.0 - group.value("lr") * weight_decay).cast(weights.dtype)
    elif weight_decay:
        gradient = gradient + weights * weight_decay
    return weights, gradient


def decayed_each(
    group: ParamGroup, parameters: list[Tensor], gradients: list[Tensor]
) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """(parameter, weights, gradient) of each of a group's parameters, `decayed`: the loop an update rule runs."""
    for parameter, gradient in zip(parameters, gradients):
        yield parameter, *decayed(group, parameter, gradient)


# torch's names of hyperparameters in its "Invalid ...: x" messages, where they are not "<name> value"
_NUMBER_LABELS = {"eps": "epsilon value", "initial_accumulator_value": "initial_accumulator_value"}


def _as_numpy(value: object, what: str) -> np.ndarray[Any, Any]:
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, (np.ndarray, np.generic, int, float)):
        return np.asarray(value)
    raise TypeError(f"{what} must be a Tensor, a numpy array or a number, got {type(value).__name__}")


class Optimizer:
    """Holds the parameter groups and per-parameter state; subclasses define `update_group()` (the lazy writes of one
    step for one group) and may define `validate(group)` and `state_names` (their per-parameter state, in torch's
    names).

    Args:
        params: the tensors to optimize (e.g. `model.parameters()`), or parameter groups: dicts with "params" and
            any hyperparameters that differ from `defaults`.
        defaults: the hyperparameters of every group that does not set its own.
    """

    # hyperparameters mirrored into device buffers (see ParamGroup); subclasses add a cycled momentum or betas
    buffered: ClassVar[tuple[str, ...]] = ("lr",)
    # per-parameter state entries that are 0-dim (one number per parameter) rather than of the parameter's shape
    scalar_state: ClassVar[frozenset[str]] = frozenset()
    # whether the state dict holds torch's per-parameter "step" (SGD's and LARS's rules keep no step count)
    saves_step: ClassVar[bool] = True
    # hyperparameters `validate` checks are numbers >= 0, in this order (torch's messages name eps "epsilon value")
    nonnegative: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: ParamsT, defaults: Mapping[str, Any]) -> None:
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or dicts, but got a Tensor"
            )
        self.defaults: dict[str, Any] = dict(defaults)
        self.param_groups: list[ParamGroup] = []
        # torch's `optimizer.state`: parameter -> its state buffers (Tensors hash by identity)
        self.state: dict[Tensor, dict[str, Tensor]] = {}
        self._group_steps: list[int] = []  # the steps each group has taken (torch's per-parameter "step")
        self._step_buffers: dict[int, Tensor] = {}  # group index -> the step count on the device, for step-aware rules
        self._writes: list[tuple[Tensor, Tensor]] = []
        self.steps = 0
        given: list[Any] = list(params)
        if not given:
            raise ValueError("optimizer got an empty parameter list")
        groups: list[Mapping[str, Any]] = (
            given if all(isinstance(item, Mapping) for item in given) else [{"params": given}]
        )
        for group in groups:
            self.add_param_group(group)
        total = sum(len(group["params"]) for group in self.param_groups)
        if not self.params:
            raise ValueError(f"none of the {total} optimizer parameters requires grad")

    # ---------------------------------------------------------------------------------------------------------------
    # parameter groups
    # ---------------------------------------------------------------------------------------------------------------

    def add_param_group(self, param_group: Mapping[str, Any]) -> None:
        """Adds a parameter group (a dict with "params" and optional hyperparameters), as torch's does."""
        if not isinstance(param_group, Mapping):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError(f"a parameter group needs a 'params' entry, got keys {sorted(param_group)}")
        given = param_group["params"]
        if isinstance(given, Tensor):
            given = [given]
        elif isinstance(given, (set, frozenset)):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but the ordering of tensors in "
                "sets will change between runs. Please use a list instead."
            )
        else:
            given = list(given)
        if not given:
            raise ValueError("optimizer got an empty parameter list")
        parameters: list[Tensor] = []
        for index, parameter in enumerate(given):
            if not isinstance(parameter, Tensor):
                raise TypeError(f"optimizer parameter {index} must be a Tensor, got {type(parameter).__name__}")
            if any(parameter is other for other in parameters):
                continue  # a repeat within a group is optimized once
            if any(parameter is other for group in self.param_groups for other in group["params"]):
                raise ValueError("some parameters appear in more than one parameter group")
            parameters.append(parameter)
        for parameter in parameters:
            # tinygrad's rule: an unset requires_grad (None) on a float tensor is turned on by the optimizer
            if parameter.requires_grad is None and dtypes.is_float(parameter.dtype):
                parameter.requires_grad = True
        values = {key: value for key, value in param_group.items() if key != "params"}
        for key, default in self.defaults.items():
            values.setdefault(key, default)
        check_number(values.get("lr"), "learning rate")
        self.validate({"params": parameters, **values})
        group = ParamGroup({"params": parameters, **values}, parameters[0].device, self.buffered)
        self.param_groups.append(group)
        self._group_steps.append(0)

    def validate(self, group: Mapping[str, Any]) -> None:
        """Raises ValueError for a bad hyperparameter of `group`: here those of `nonnegative` (subclasses check the
        others)."""
        for name in self.nonnegative:
            check_number(group[name], _NUMBER_LABELS.get(name, f"{name} value"))

    @property
    def params(self) -> list[Tensor]:
        """The tensors `step()` updates: every group's parameters that require grad, in order."""
        return [p for group in self.param_groups for p in group["params"] if p.requires_grad is True]

    @property
    def device(self) -> str | tuple[str, ...]:
        """The device of the first parameter (the tuple of its devices when it is sharded)."""
        return self.param_groups[0].device

    @property
    def lr(self) -> float:
        """The learning rate of the first group (`optimizer.lr = x` sets every group's)."""
        return float(self.param_groups[0]["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        rate = check_number(value, "learning rate")
        for group in self.param_groups:
            group["lr"] = rate

    @property
    def lr_tensor(self) -> Tensor:
        """The first group's learning-rate buffer (what its update kernels read)."""
        return self.param_groups[0].value("lr")

    # ---------------------------------------------------------------------------------------------------------------
    # state
    # ---------------------------------------------------------------------------------------------------------------

    def state_of(self, parameter: Tensor) -> dict[str, Tensor]:
        """The state buffers of `parameter` (torch's `optimizer.state[p]`; empty before its first step)."""
        return self.state.setdefault(parameter, {})

    def state_buffer(
        self, parameter: Tensor, name: str, value: float = 0.0, shape: tuple[int, ...] | None = None
    ) -> Tensor:
        """`parameter`'s state buffer `name`, created filled with `value` (dtype of the parameter; its shape unless
        `shape` is given, e.g. () for a per-parameter scalar such as NAdam's mu_product)."""
        state = self.state_of(parameter)
        if name not in state:
            size = parameter.shape if shape is None else shape
            array = np.full(size, value, dtype=numpy_from_dtype(parameter.dtype))
            state[name] = Tensor(array, device=parameter.device)
        return state[name]

    def step_count(self, group_index: int) -> Tensor:
        """The group's step count t on the device (0-dim float32, before this step); write t + 1 with `write`."""
        if group_index not in self._step_buffers:
            count = np.array(float(self._group_steps[group_index]), dtype=np.float32)
            self._step_buffers[group_index] = Tensor(count, device=self.param_groups[group_index].device)
        return self._step_buffers[group_index]

    def advance(self, group_index: int) -> Tensor:
        """Records t <- t + 1 for the group; returns the new t (0-dim float32)."""
        count = self.step_count(group_index)
        t = count + 1.0
        self.write(count, t)
        return t

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forgets every parameter's gradient (`.grad = None`; with set_to_none=False, zeros), so the next backward
        starts from zero."""
        for parameter in self.params:
            if set_to_none or parameter.grad is None:
                parameter.grad = None
            else:
                parameter.grad = Tensor.zeros_like(parameter)

    def gradients(self, parameters: list[Tensor] | None = None) -> list[Tensor]:
        """Each parameter's gradient, cast to its dtype (RuntimeError naming a parameter that got none)."""
        found = []
        for index, parameter in enumerate(self.params if parameters is None else parameters):
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

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """Records the writes of one step for one group (`index` in param_groups); subclasses define it."""
        raise NotImplementedError(f"{type(self).__name__} defines no update_group()")

    def prepare_step(self) -> None:
        """Runs before the step's graph is built (a subclass writes host-computed per-step values here)."""

    def step(self) -> None:
        """Applies one update to every parameter (and its state), all in one schedule."""
        with no_grad():
            writes, stepped = self.build_step()
            write_many(writes)
        self.finish_step(stepped)

    def build_step(self) -> tuple[list[tuple[Tensor, Tensor]], list[int]]:
        """The lazy writes of one step (nothing runs) and the indices of the groups that step; call under
        `no_grad`, apply the writes with `write_many`, then call `finish_step(indices)`."""
        self._writes = []
        stepped: list[int] = []
        self.prepare_step()
        for index, group in enumerate(self.param_groups):
            parameters = [p for p in group["params"] if p.requires_grad is True]
            if not parameters:
                continue
            self.update_group(group, index, parameters, self.gradients(parameters))
            stepped.append(index)
        writes, self._writes = self._writes, []
        return writes, stepped

    def finish_step(self, stepped: list[int]) -> None:
        """Counts the step of the groups `build_step` updated (after their writes ran)."""
        for index in stepped:
            self._group_steps[index] += 1
        self.steps += 1

    # ---------------------------------------------------------------------------------------------------------------
    # state dicts
    # ---------------------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state in torch's layout: {"state": {index: {"step": t, name: tensor}}, "param_groups":
        [{hyperparameters..., "params": [indices]}]}, parameters numbered across groups in order. The state tensors
        are the live buffers (as torch's are): save or copy them before the next step."""
        state: dict[int, dict[str, Any]] = {}
        groups: list[dict[str, Any]] = []
        index = 0
        for group_index, group in enumerate(self.param_groups):
            indices = []
            for parameter in group["params"]:
                buffers = self.state.get(parameter)
                if buffers:
                    step = np.array(float(self._group_steps[group_index]), dtype=np.float32)
                    state[index] = {"step": Tensor(step), **buffers} if self.saves_step else dict(buffers)
                indices.append(index)
                index += 1
            groups.append({**{key: value for key, value in group.items() if key != "params"}, "params": indices})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Loads a `state_dict()` (also one whose keys were turned into strings by a flat checkpoint): the groups'
        hyperparameters and every parameter's state. ValueError when the groups do not match this optimizer's."""
        if not isinstance(state_dict, Mapping) or "param_groups" not in state_dict or "state" not in state_dict:
            raise ValueError("an optimizer state dict needs 'state' and 'param_groups' entries")
        saved_groups = list(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"loaded state dict has a different number of parameter groups ({len(saved_groups)}, this optimizer "
                f"has {len(self.param_groups)})"
            )
        owners: dict[int, tuple[int, Tensor]] = {}
        for group_index, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            indices = list(saved["params"])
            if len(indices) != len(group["params"]):
                raise ValueError(
                    f"loaded state dict contains a parameter group that doesn't match the size of optimizer's group "
                    f"(group {group_index}: {len(indices)} parameters saved, {len(group['params'])} here)"
                )
            for saved_index, parameter in zip(indices, group["params"]):
                owners[int(saved_index)] = (group_index, parameter)
        loaded: dict[Tensor, dict[str, Tensor]] = {}
        steps: dict[int, int] = {}
        for key, entries in dict(state_dict["state"]).items():
            if int(key) not in owners:
                raise ValueError(f"loaded state dict has state for parameter {key}, which no parameter group holds")
            group_index, parameter = owners[int(key)]
            buffers: dict[str, Tensor] = {}
            for name, value in dict(entries).items():
                array = _as_numpy(value, f"state {name!r} of parameter {key}")
                if name == "step":
                    steps.setdefault(group_index, round(float(array)))
                    continue
                expected = () if name in self.scalar_state else parameter.shape
                if array.shape != expected:
                    raise ValueError(
                        f"state {name!r} of parameter {key} has shape {array.shape}, expected {expected} (the "
                        f"parameter's shape is {parameter.shape})"
                    )
                buffers[name] = Tensor(array.astype(numpy_from_dtype(parameter.dtype)), device=parameter.device)
            loaded[parameter] = buffers
        for group, saved in zip(self.param_groups, saved_groups):
            for key, value in saved.items():
                if key != "params":
                    group[key] = tuple(value) if isinstance(value, list) else value
        for group in self.param_groups:
            for parameter in group["params"]:
                self.state.pop(parameter, None)
        self.state.update(loaded)
        self._group_steps = [steps.get(index, 0) for index in range(len(self.param_groups))]
        self._step_buffers = {}


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay (PyTorch's rule):
    g = grad (maximize: -grad) + weight_decay * p; b = g on the first step, else momentum * b + (1 - dampening) * g;
    with Nesterov g = g + momentum * b, else g = b; p = p - lr * g. tinygrad's `classic=True` scales g by lr before
    the momentum instead (p = p - b): the same steps while lr is constant, not when a schedule changes it.

    Example:
        >>> w = Tensor([1.0], requires_grad=True); optimizer = SGD([w], lr=0.1)
        >>> _ = (w * w).sum().backward(); optimizer.step(); round(w.item(), 4)
        0.8
    """

    buffered = ("lr", "momentum")
    saves_step = False
    nonnegative = ("momentum", "weight_decay")

    def __init__(
        self, params: ParamsT, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
        weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False, *, classic: bool = False,
    ) -> None:  # fmt: skip
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay)
        defaults.update(nesterov=nesterov, maximize=maximize)
        if classic:  # tinygrad's flag: absent unless set, so the groups keep torch's keys
            defaults["classic"] = True
        super().__init__(params, defaults)

    def validate(self, group: Mapping[str, Any]) -> None:
        """Checks momentum, weight decay and the Nesterov condition."""
        super().validate(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def update_group(self, group: ParamGroup, index: int, parameters: list[Tensor], gradients: list[Tensor]) -> None:
        """p -= lr * (the momentum-filtered gradient), and the momentum buffers."""
        lr, momentum = group.value("lr"), group.value("momentum")
        dampening, classic = float(group["dampening"]), bool(group.get("classic"))
        for parameter, weights, gradient in decayed_each(group, parameters, gradients):
            if classic:  # tinygrad's classic momentum: the rate scales the gradient before the momentum
                gradient = gradient * lr.cast(gradient.dtype)
            if group["momentum"]:
                state = self.state_of(parameter)
                if "momentum_buffer" not in state:
                    velocity = gradient  # torch's first step: the buffer is the gradient itself
                    buffer = self.state_buffer(parameter, "momentum_buffer")
                else:
                    buffer = state["momentum_buffer"]
                    # x * 1.0 is x exactly (also -0.0, inf, nan): no op for the usual dampening 0
                    damped = gradient * (1.0 - dampening) if dampening else gradient
                    velocity = buffer * momentum.cast(buffer.dtype) + damped
                self.write(buffer, velocity)
                gradient = gradient + velocity * momentum.cast(velocity.dtype) if group["nesterov"] else velocity
            step = gradient if classic else gradient * lr.cast(gradient.dtype)
            self.assign_parameter(parameter, weights - step)


class OptimizerGroup:
    """Several optimizers stepped as one (tinygrad's `OptimizerGroup`): e.g. Muon for the matrices and AdamW for
    the rest. `step()` applies every optimizer's update in one schedule; `group[i]` is the i-th optimizer.

    Example:
        >>> w, b = Tensor([[1.0]], requires_grad=True), Tensor([1.0], requires_grad=True)
        >>> both = OptimizerGroup(SGD([w], lr=0.5), SGD([b], lr=0.25))
        >>> _ = ((w * w).sum() + (b * b).sum()).backward(); both.step(); w.item(), b.item()
        (0.0, 0.5)
    """

    def __init__(self, *optimizers: Optimizer) -> None:
        if not optimizers:
            raise ValueError("OptimizerGroup needs at least one optimizer")
        for index, optimizer in enumerate(optimizers):
            if not isinstance(optimizer, Optimizer):
                raise TypeError(f"OptimizerGroup item {index} must be a kiln Optimizer, got {type(optimizer).__name__}")
        self.optimizers = optimizers

    def __getitem__(self, index: int) -> Optimizer:
        return self.optimizers[index]

    @property
    def params(self) -> list[Tensor]:
        """Every optimizer's parameters, in order."""
        return [p for optimizer in self.optimizers for p in optimizer.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Each optimizer's zero_grad."""
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none)

    def step(self) -> None:
        """One update of every optimizer's parameters, all in one schedule."""
        with no_grad():
            built = [optimizer.build_step() for optimizer in self.optimizers]
            write_many([write for writes, _ in built for write in writes])
        for optimizer, (_, stepped) in zip(self.optimizers, built):
            optimizer.finish_step(stepped)
