"""`MultiTensor`: one logical tensor held as one `Tensor` per device, replicated or split along one axis.

`Tensor.shard(devices, axis)` makes one. Each operation runs per device on the shards (one kernel per device, all
realized in one schedule so each device's queue runs its kernels while the others run theirs) and inserts the
collective that keeps the result right: a reduction over the split axis ends in an `allreduce`, a matmul whose
contracted axis is split (row parallel) sums the partial products with an `allreduce`, an operand laid out
differently from the other is re-laid out first (gathered with `allgather`, then sliced). Shards are ordinary
Tensors and the collectives are copies and kernels, so gradients flow through all of it.

Gradients: `backward()` on a replicated result starts from the shard on the first device (every replica is the
same function of all the inputs); `grad` of a split tensor is the shards' gradients, and of a replicated tensor the
sum over the replicas (each replica is a copy of the one logical value), replicated again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln.tensor.core import TensorCore
from kiln.tensor.multi import movement
from kiln.tensor.multi.collectives import allgather, allreduce
from kiln.tensor.multi.layout import check_devices, normalize_axis, slice_along, split_bounds
from kiln.tensor.ops._checks import broadcast_shapes
from kiln.uops import dtypes

__all__ = ["ELEMENTWISE_METHODS", "MultiTensor", "shard_tensor"]

ELEMENTWISE_METHODS = frozenset(
    [
        "abs",
        "acos",
        "asin",
        "atan",
        "ceil",
        "clamp",
        "clip",
        "cos",
        "cosh",
        "contiguous",
        "cast",
        "elu",
        "erf",
        "exp",
        "exp2",
        "expm1",
        "float",
        "floor",
        "gelu",
        "half",
        "hardsigmoid",
        "hardswish",
        "hardtanh",
        "int",
        "isinf",
        "isnan",
        "leaky_relu",
        "log",
        "log1p",
        "log2",
        "logical_not",
        "mish",
        "neg",
        "reciprocal",
        "relu",
        "relu6",
        "round",
        "rsqrt",
        "selu",
        "sigmoid",
        "sign",
        "silu",
        "sin",
        "sinh",
        "softplus",
        "softsign",
        "sqrt",
        "square",
        "swish",
        "tan",
        "tanh",
        "trunc",
        "add",
        "sub",
        "mul",
        "div",
        "maximum",
        "minimum",
        "pow",
        "logical_and",
        "logical_or",
        "logical_xor",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
    ]
)
"""Tensor methods that act elementwise (with broadcasting); a MultiTensor runs them per shard."""


def shard_tensor(tensor: TensorCore, devices: Sequence[str], axis: int | None = None) -> MultiTensor:
    """`tensor` placed on `devices`: a copy on each (axis None) or split in balanced parts along `axis`."""
    names = check_devices(devices)
    if axis is None:
        return MultiTensor([tensor.to(name) for name in names], None)
    axis = normalize_axis(axis, tensor.ndim, "shard axis")
    bounds = split_bounds(tensor.shape[axis], len(names), axis)
    return MultiTensor([slice_along(tensor, axis, bound).to(name) for name, bound in zip(names, bounds)], axis)


class MultiTensor:
    """A tensor sharded over devices: `shards[i]` lives on `devices[i]`; `axis` is the split axis (None: replicated).

    Args:
        shards: one Tensor per distinct device, of one dtype; with `axis` None all of one shape, else equal shapes
            outside `axis`.
        axis: the axis the logical tensor is split along, or None when every shard holds all of it.

    Example:
        >>> x = Tensor.arange(6).reshape(3, 2).shard(["CPU:0", "CPU:1"], axis=0)
        >>> x.shape, [s.shape for s in x.shards], x.sum().item()
        ((3, 2), [(2, 2), (1, 2)], 15)
    """

    def __init__(self, shards: Sequence[TensorCore], axis: int | None) -> None:
        if not shards:
            raise ValueError("a MultiTensor needs at least one shard, got none")
        self.shards = tuple(shards)
        self.devices = check_devices([shard.device for shard in self.shards])
        first = self.shards[0]
        self.axis = None if axis is None else normalize_axis(axis, first.ndim, "MultiTensor axis")
        for index, shard in enumerate(self.shards):
            if shard.dtype != first.dtype:
                raise TypeError(f"shard {index} has dtype {shard.dtype!r}, shard 0 has {first.dtype!r}")
            outside = [size for dim, size in enumerate(shard.shape) if dim != self.axis]
            if shard.ndim != first.ndim or outside != [s for d, s in enumerate(first.shape) if d != self.axis]:
                raise ValueError(f"shard {index} has shape {shard.shape}, which does not fit shard 0's {first.shape}")

    # -- what it is ---------------------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape (the shards joined along `axis`)."""
        shape = list(self.shards[0].shape)
        if self.axis is not None:
            shape[self.axis] = sum(shard.shape[self.axis] for shard in self.shards)
        return tuple(shape)

    @property
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """The (start, end) along `axis` of each shard ((0, size) for every shard when replicated)."""
        if self.axis is None:
            return tuple((0, 0) for _ in self.shards)
        result, start = [], 0
        for shard in self.shards:
            result.append((start, start + shard.shape[self.axis]))
            start += shard.shape[self.axis]
        return tuple(result)

    @property
    def device(self) -> tuple[str, ...]:
        """The devices, in shard order (like tinygrad, a sharded tensor's device is the tuple of its devices)."""
        return self.devices

    @property
    def dtype(self) -> Any:
        return self.shards[0].dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<MultiTensor shape={self.shape} dtype={self.dtype!r} devices={list(self.devices)} axis={self.axis}>"

    def _like(self, shards: Sequence[TensorCore], axis: int | None) -> MultiTensor:
        return MultiTensor(shards, axis)

    # -- data ---------------------------------------------------------------------------------------------------------
    def realize(self) -> MultiTensor:
        """Computes every shard in one schedule (each device's kernels on its own queue); returns self."""
        type(self.shards[0]).realize_all(*self.shards)
        return self

    def numpy(self) -> np.ndarray:
        """The logical tensor's values on the host (the shards joined along `axis`)."""
        self.realize()
        if self.axis is None:
            return self.shards[0].numpy()
        return np.concatenate([shard.numpy() for shard in self.shards], axis=self.axis)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Any:
        values = self.numpy()
        if values.size != 1:
            raise ValueError(f"item() needs a tensor of one element, got shape {self.shape}")
        return values.reshape(()).item()

    # -- placement ----------------------------------------------------------------------------------------------------
    def to(self, device: str | Sequence[str]) -> Any:
        """The logical tensor on one device (a Tensor), or re-sharded over `devices` keeping the split axis."""
        if not isinstance(device, str):
            return shard_tensor(self.gathered(), device, self.axis)
        if self.axis is None:
            on_target = [shard for shard in self.shards if shard.device == device]
            return (on_target or [self.shards[0]])[0].to(device)
        return type(self.shards[0]).cat(*[shard.to(device) for shard in self.shards], dim=self.axis)

    def gathered(self) -> TensorCore:
        """The logical tensor on the first device."""
        return self.to(self.devices[0])  # type: ignore[no-any-return]

    def shard(self, devices: Sequence[str], axis: int | None = None) -> MultiTensor:
        """This tensor laid out again over `devices` (gathered on the first device, then sharded)."""
        return shard_tensor(self.gathered(), devices, axis)

    def replicated(self) -> MultiTensor:
        """The same logical tensor held whole on every device (an allgather of the shards)."""
        if self.axis is None:
            return self
        return MultiTensor(allgather(self.shards, self.axis), None)

    # -- autograd -----------------------------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool | None:
        flags = {shard.requires_grad for shard in self.shards}
        return True if True in flags else (False if False in flags else None)

    def requires_grad_(self, requires_grad: bool = True) -> MultiTensor:
        """Makes every shard a leaf that records gradients (its values computed now, its history dropped)."""
        self.realize()
        self.shards = tuple(shard.detach().requires_grad_(requires_grad) for shard in self.shards)
        type(self.shards[0]).realize_all(*self.shards)
        return self

    def detach(self) -> MultiTensor:
        return self._like([shard.detach() for shard in self.shards], self.axis)

    @property
    def grad(self) -> MultiTensor | None:
        """The gradient, laid out as this tensor (see the module docstring); None when no shard has one."""
        grads = [shard.grad for shard in self.shards]
        if all(grad is None for grad in grads):
            return None
        filled = [grad if grad is not None else shard.zeros_like() for shard, grad in zip(self.shards, grads)]
        if self.axis is None:
            return MultiTensor(allreduce(filled), None)
        return MultiTensor(filled, self.axis)

    def backward(self, gradient: Any = None) -> MultiTensor:
        """Backpropagates from this (replicated) tensor into every leaf it was computed from."""
        if self.axis is not None:
            raise ValueError(
                f"backward() of a tensor split along axis {self.axis}: reduce it first (e.g. .sum()), which makes "
                "it replicated"
            )
        if isinstance(gradient, MultiTensor):
            gradient = gradient.shards[0]
        self.shards[0].backward(gradient)
        return self

    # -- elementwise --------------------------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Callable[..., MultiTensor]:
        if name in ELEMENTWISE_METHODS:
            return lambda *args, **kwargs: elementwise(lambda s, *a: getattr(s, name)(*a, **kwargs), self, *args)
        raise AttributeError(
            f"MultiTensor has no method {name!r}: sharded tensors support elementwise ops, reductions, matmul, "
            "reshape and permute; use .to(device) for the full tensor on one device"
        )

    def __add__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: a + b, self, other)

    def __radd__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: b + a, self, other)

    def __sub__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: a - b, self, other)

    def __rsub__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: b - a, self, other)

    def __mul__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: a * b, self, other)

    def __rmul__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: b * a, self, other)

    def __truediv__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: a / b, self, other)

    def __rtruediv__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: b / a, self, other)

    def __pow__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: a**b, self, other)

    def __rpow__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: b**a, self, other)

    def __neg__(self) -> MultiTensor:
        return elementwise(lambda a: -a, self)

    def __lt__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: a < b, self, other)

    def __le__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: a <= b, self, other)

    def __gt__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: a > b, self, other)

    def __ge__(self, other: Any) -> MultiTensor:
        return elementwise(lambda a, b: a >= b, self, other)

    def __eq__(self, other: object) -> MultiTensor:  # type: ignore[override]
        return elementwise(lambda a, b: a == b, self, other)

    def __ne__(self, other: object) -> MultiTensor:  # type: ignore[override]
        return elementwise(lambda a, b: a != b, self, other)

    __hash__ = object.__hash__

    def where(self, if_true: Any, if_false: Any) -> MultiTensor:
        """`if_true` where this (bool) tensor is True, else `if_false`, per shard."""
        return elementwise(lambda c, a, b: c.where(a, b), self, if_true, if_false)

    # -- reductions ---------------------------------------------------------------------------------------------------
    def _reduce(self, method: str, op: str, axis: Any, keepdim: bool, **options: Any) -> MultiTensor:
        axes = _reduce_axes(axis, self.ndim)
        if self.axis is None or self.axis not in axes:
            shards = [getattr(shard, method)(axes, keepdim=keepdim, **options) for shard in self.shards]
            moved = self.axis if self.axis is None or keepdim else self.axis - sum(dim < self.axis for dim in axes)
            return self._like(shards, moved)
        # the split axis is reduced: every device holds a partial result, combined across devices
        partial = [getattr(shard, method)(axes, keepdim=True, **options) for shard in self.shards]
        reduced = allreduce(partial, op)
        if not keepdim:
            kept = tuple(size for dim, size in enumerate(partial[0].shape) if dim not in axes)
            reduced = [value.reshape(kept) for value in reduced]
        return MultiTensor(reduced, None)

    def sum(self, axis: Any = None, keepdim: bool = False, **options: Any) -> MultiTensor:
        """The sum over `axis` (default all); over the split axis it ends in an allreduce (sum)."""
        return self._reduce("sum", "sum", axis, keepdim, **options)

    def prod(self, axis: Any = None, keepdim: bool = False, **options: Any) -> MultiTensor:
        return self._reduce("prod", "prod", axis, keepdim, **options)

    def max(self, axis: Any = None, keepdim: bool = False) -> MultiTensor:
        """The largest value over `axis` (values only, for one axis or several)."""
        return self._reduce("amax", "max", axis, keepdim)

    def min(self, axis: Any = None, keepdim: bool = False) -> MultiTensor:
        """The smallest value over `axis` (values only, for one axis or several)."""
        return self._reduce("amin", "min", axis, keepdim)

    amax, amin = max, min

    def mean(self, axis: Any = None, keepdim: bool = False) -> MultiTensor:
        """The mean over `axis` (the sum divided by the number of reduced elements)."""
        axes = _reduce_axes(axis, self.ndim)
        count = math.prod(self.shape[dim] for dim in axes)
        total = self.sum(axes, keepdim)
        return total / count if dtypes.is_float(self.dtype) else total.float() / count

    def softmax(self, axis: int = -1) -> MultiTensor:
        """exp(x - max) / sum(exp(x - max)) along `axis` (max and sum allreduced when `axis` is the split one)."""
        shifted = self - self.max(axis, keepdim=True).detach()
        exponentials = shifted.exp()
        return exponentials / exponentials.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1) -> MultiTensor:
        shifted = self - self.max(axis, keepdim=True).detach()
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    # -- movement and matmul (kiln.tensor.multi.movement) -------------------------------------------------------------
    def reshape(self, *shape: Any) -> MultiTensor:
        """The same elements in another shape; the split axis must stay whole per device (else ValueError)."""
        return movement.reshape(self, _shape_argument(shape))

    def permute(self, *order: Any) -> MultiTensor:
        """The axes reordered; the split axis moves with them."""
        return movement.permute(self, _shape_argument(order))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> MultiTensor:
        order = list(range(self.ndim))
        dim0, dim1 = dim0 % self.ndim, dim1 % self.ndim
        order[dim0], order[dim1] = order[dim1], order[dim0]
        return self.permute(order)

    @property
    def T(self) -> MultiTensor:
        return self.permute(list(reversed(range(self.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> MultiTensor:
        start, end = start_dim % max(self.ndim, 1), end_dim % max(self.ndim, 1)
        shape = self.shape
        return self.reshape((*shape[:start], math.prod(shape[start : end + 1]), *shape[end + 1 :]))

    def unsqueeze(self, dim: int) -> MultiTensor:
        dim = dim % (self.ndim + 1)
        return self.reshape((*self.shape[:dim], 1, *self.shape[dim:]))

    def matmul(self, other: MultiTensor) -> MultiTensor:
        """Matrix product; see kiln.tensor.multi.movement.matmul for the sharded cases."""
        return movement.matmul(self, other)

    def __matmul__(self, other: MultiTensor) -> MultiTensor:
        return self.matmul(other)

    dot = matmul


def _shape_argument(values: tuple[Any, ...]) -> tuple[int, ...]:
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        return tuple(values[0])
    return tuple(values)


def _reduce_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    listed = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted({normalize_axis(dim, ndim, "reduce axis") for dim in listed}))


def elementwise(function: Callable[..., TensorCore], *operands: Any) -> MultiTensor:
    """`function` applied per device to the shards of `operands` (MultiTensors and scalars), broadcasting.

    The result is split like the first split operand; other operands are brought to that layout (a replicated
    operand sliced to each device's part unless it broadcasts along the split axis, a differently split operand
    gathered first). A plain Tensor operand is refused: it lives on one device.
    """
    multis = [operand for operand in operands if isinstance(operand, MultiTensor)]
    lead = multis[0]
    tensor_type = type(lead.shards[0])
    for operand in operands:
        if isinstance(operand, tensor_type):
            raise ValueError(
                f"cannot combine a MultiTensor on {list(lead.devices)} with a Tensor on {operand.device!r}: shard the "
                "Tensor first (tensor.shard(devices) replicates it)"
            )
        if isinstance(operand, MultiTensor) and operand.devices != lead.devices:
            raise ValueError(
                f"MultiTensors on different devices: {list(lead.devices)} and {list(operand.devices)}; re-shard one "
                "with .to(devices)"
            )
    out_shape = broadcast_shapes(*(operand.shape for operand in multis))
    split = next((operand for operand in multis if operand.axis is not None), None)
    out_axis = None if split is None or split.axis is None else split.axis + len(out_shape) - split.ndim
    count = len(lead.devices)
    columns: list[list[Any]] = []
    for operand in operands:
        if not isinstance(operand, MultiTensor):
            columns.append([operand] * count)
            continue
        assert split is not None or operand.axis is None
        if split is None or operand is split:
            columns.append(list(operand.shards))
            continue
        offset = len(out_shape) - operand.ndim
        assert out_axis is not None and split.axis is not None
        if operand.axis is not None and operand.axis + offset == out_axis and operand.bounds == split.bounds:
            columns.append(list(operand.shards))
            continue
        whole = operand.replicated()
        own_axis = out_axis - offset
        if own_axis < 0 or whole.shape[own_axis] == 1:  # broadcasts along the split axis: every device takes all
            columns.append(list(whole.shards))
        else:
            columns.append([slice_along(shard, own_axis, bound) for shard, bound in zip(whole.shards, split.bounds)])
    shards = [function(*row) for row in zip(*columns)]
    return MultiTensor(shards, out_axis)
