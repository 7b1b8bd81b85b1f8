"""`Tensor`: a lazy n-dimensional array; operations build a tensor graph (kiln.tensor.graph) that `realize()` runs.

This module holds the core: construction, the private primitive builders the public methods are composed from, the
properties and the graph-level helpers. Realizing and reading the data come from `kiln.tensor.tensor_data`, the public
math / movement / reduce / nn / indexing methods from mixins in `kiln.tensor.ops`, the gradient methods from
`kiln.tensor.autograd_mixin`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kiln.tensor import graph
from kiln.tensor.autograd_mixin import AutogradMixin
from kiln.tensor.device import canonical_device
from kiln.tensor.host_data import dtype_from_numpy, numpy_from_dtype, uop_from_host
from kiln.tensor.inplace import InplaceMixin
from kiln.tensor.multi.layout import check_devices, normalize_axis, split_bounds
from kiln.tensor.ops import (
    ActivationMixin,
    ComparisonMixin,
    CreationMixin,
    DecompositionMixin,
    ElementwiseMixin,
    IndexingMixin,
    LayoutMixin,
    LinearSolveMixin,
    MetadataMixin,
    MovementMixin,
    NNMixin,
    PlacementMixin,
    ReduceMixin,
    SamplingMixin,
    ScanMixin,
    SelectionMixin,
    SpecialMixin,
    StatisticsMixin,
    TrigonometricMixin,
)
from kiln.tensor.ops._checks import check_constant_fits, check_device_dtype
from kiln.tensor.realize import eager_lane, engine
from kiln.tensor.realize.buffers import buffer_of, has_buffer
from kiln.tensor.realize.engine import realize_uops
from kiln.tensor.realize.mutation import track, write
from kiln.tensor.schedule import realized_view
from kiln.tensor.sharding import gathered, lower_sharded
from kiln.tensor.symbolic import BoundVariable, VariableValue, format_shape, max_numel
from kiln.tensor.tensor_data import DataMixin
from kiln.uops import ConstType, DType, GroupOp, Ops, UOp, dtypes

__all__ = ["Tensor", "dtype_from_numpy", "numpy_from_dtype"]

_REPR_VALUES_LIMIT = 16  # repr shows the values of realized tensors with at most this many elements

TensorData = "Tensor | UOp | np.ndarray[Any, Any] | Sequence[Any] | ConstType | np.generic"


_NO_GRAD_IS_READ_ONLY = (
    "Tensor.no_grad is read-only (it reports whether gradient recording is off); turn recording off with "
    "`with kiln.tensor.no_grad():` or the `@no_grad()` decorator, or `kiln.tensor.set_grad_enabled(False)`"
)


class _TensorType(type):
    """Tensor's metaclass: makes the class attribute `Tensor.no_grad` readable but not assignable, and keeps
    `Tensor._grad_disabled` per thread (on the thread's context, `kiln.tensor.realize.engine`)."""

    @property
    def _grad_disabled(cls) -> bool:
        """Whether gradient recording is off on the calling thread (set by kiln.tensor.grad_mode)."""
        return engine.grad_disabled()

    @_grad_disabled.setter
    def _grad_disabled(cls, value: bool) -> None:
        engine.set_grad_disabled(value)

    @property
    def no_grad(cls) -> bool:
        """Whether gradient recording is off (inside `kiln.tensor.no_grad()`); set it through that context."""
        return cls._grad_disabled

    @no_grad.setter
    def no_grad(cls, value: object) -> None:
        raise AttributeError(f"{_NO_GRAD_IS_READ_ONLY}; got an assignment of {value!r}")


class _InstanceNoGrad:
    """`tensor.no_grad` on an instance: the same read-only flag (an assignment would otherwise silently shadow it)."""

    def __get__(self, instance: object, owner: type | None = None) -> bool:
        return Tensor._grad_disabled

    def __set__(self, instance: object, value: object) -> None:
        raise AttributeError(f"{_NO_GRAD_IS_READ_ONLY}; got an assignment of {value!r}")


class Tensor(
    DataMixin,
    CreationMixin,
    ElementwiseMixin,
    MovementMixin,
    ReduceMixin,
    NNMixin,
    IndexingMixin,
    AutogradMixin,
    InplaceMixin,
    TrigonometricMixin,
    ActivationMixin,
    ComparisonMixin,
    ScanMixin,
    LayoutMixin,
    DecompositionMixin,
    SamplingMixin,
    SelectionMixin,
    StatisticsMixin,
    PlacementMixin,
    MetadataMixin,
    SpecialMixin,
    LinearSolveMixin,
    VariableValue,
    metaclass=_TensorType,
):
    """A lazy n-dimensional array on a device.

    Operations record a tensor graph (`self.uop`); `realize()` (or reading the data: `numpy()`, `tolist()`,
    `item()`) schedules it into fused kernels and runs them.

    Args:
        data: a numpy array, a (nested) list / tuple, a Python or numpy scalar, or a Tensor (shares its graph).
        dtype: the element dtype (default: the data's; Python floats -> dtypes.default_float, ints ->
            dtypes.default_int, bools -> dtypes.bool).
        device: the device name (default: `kiln.tensor.device.default_device()`).
        requires_grad: whether gradients are tracked for this tensor (None: not set).

    Example:
        >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).numpy().sum()
        10.0
    """

    # `Tensor._grad_disabled` (the metaclass's, per thread): while True, new tensors record no gradient requirement;
    # read as `Tensor.no_grad`, set by kiln.tensor's `no_grad()` / `enable_grad()` / `set_grad_enabled()`

    no_grad = _InstanceNoGrad()

    # numpy interop: `ndarray op Tensor` and `np.float32(2) * Tensor` defer to the Tensor's reflected operator (a
    # Tensor result, never an object array of 0-dim Tensors); `np.asarray(tensor)` goes through `__array__`
    __array_ufunc__ = None
    __array_priority__: ClassVar[float] = 1000.0

    uop: UOp
    grad: Tensor | None

    if not TYPE_CHECKING:  # (to the type checker, `uop` is a plain attribute and no other name is found here)

        def __getattr__(self, name: str) -> Any:
            # only missing attributes come here: the `uop` of a tensor the eager lane made (built on first use)
            if name == "uop":
                state = self.__dict__
                value = state.get("_lane")
                if value is not None:
                    node = eager_lane.node_of(value)
                    state["uop"] = node
                    state.pop("_lane", None)
                    return node
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _init_from_data(
        self, data: Any, dtype: DType | None, device: str | tuple[str, ...] | None, requires_grad: bool | None
    ) -> None:
        # the rest of `TensorCore.__init__` (which checked the argument types): the graph node of `data`
        self.grad = None
        self.requires_grad = requires_grad
        try:
            self.uop = _initial_uop(data, dtype, device, requires_grad)
            if isinstance(data, BoundVariable):  # also the variable itself where a size is expected (`x[:v]`)
                self._bound_size = data.uop
            track(self)
            check_device_dtype(self.device, self.dtype)
            if requires_grad is True and not dtypes.is_float(self.dtype):
                raise RuntimeError(f"only float tensors can require gradients, this tensor is {self.dtype!r}")
        except Exception:
            self.requires_grad = None  # a tensor that failed to be made must not stay registered for backward
            raise

    # -----------------------------------------------------------------------------------------------------------
    # construction from graph nodes and constants
    # -----------------------------------------------------------------------------------------------------------

    @classmethod
    def _from_uop(cls, uop: UOp, requires_grad: bool | None = None) -> Tensor:
        """A Tensor wrapping tensor-graph node `uop` (no checks: callers build valid nodes)."""
        tensor = cls.__new__(cls)
        tensor.uop = uop
        track(tensor)
        if requires_grad is None:
            # what the requires_grad setter does for None on a new object (nothing is registered under its id)
            tensor.__dict__["_requires_grad"] = None
        else:
            tensor.requires_grad = requires_grad
        tensor.grad = None
        return tensor

    @classmethod
    def _const(
        cls, value: ConstType, shape: Sequence[int], dtype: DType, device: str | tuple[str, ...] | None = None
    ) -> Tensor:
        """The scalar `value` of `dtype` broadcast to `shape` on `device` (no buffer is allocated)."""
        return cls._from_uop(graph.const(value, dtype, canonical_device(device), tuple(shape)))

    def _result(self, uop: UOp, *others: Tensor) -> Tensor:
        # the result is of the operands' most derived class, as in PyTorch (a subclass's ops return the subclass)
        cls = type(self)
        for other in others:
            if type(other) is not cls and issubclass(type(other), cls):
                cls = type(other)
        # a float result needs gradients when any input does (unless gradient recording is off); like PyTorch,
        # integer and bool results (comparisons, argmax) never do
        # the requires_grad property's value, read from the instance dict (this runs for every op built)
        wants_grad = self.__dict__.get("_requires_grad") is True or (
            others and any(o.requires_grad is True for o in others)
        )
        if Tensor._grad_disabled or not wants_grad:
            return cls._from_uop(uop)
        result = cls._from_uop(uop)
        if dtypes.is_float(uop.dtype):
            # an operand that requires grad is alive and its node is in `uop`'s graph: the result is no new leaf,
            # so the setter's leaf checks (graph walks) are not needed
            result._register_requiring_grad()
        return result

    # -----------------------------------------------------------------------------------------------------------
    # primitive builders (operands already broadcast and promoted by the public methods)
    # -----------------------------------------------------------------------------------------------------------

    def _unary(self, op: Ops) -> Tensor:
        """The unary ALU op `op` (EXP2, LOG2, SIN, SQRT, RECIPROCAL, NEG, TRUNC) of this tensor."""
        if op not in GroupOp.Unary:
            raise ValueError(f"{op!r} is not a unary ALU op")
        return self._result(graph.alu(op, self.uop))

    def _binary(self, op: Ops, other: Tensor) -> Tensor:
        """The binary ALU op `op` of this tensor and `other` (same shape, dtype and device)."""
        if op not in GroupOp.Binary:
            raise ValueError(f"{op!r} is not a binary ALU op")
        return self._result(graph.alu(op, self.uop, other.uop), other)

    def _ternary(self, op: Ops, second: Tensor, third: Tensor) -> Tensor:
        """The ternary ALU op `op` (WHERE: this bool tensor selects `second` or `third`; MULACC)."""
        if op not in GroupOp.Ternary:
            raise ValueError(f"{op!r} is not a ternary ALU op")
        return self._result(graph.alu(op, self.uop, second.uop, third.uop), second, third)

    def _cast(self, dtype: DType) -> Tensor:
        """This tensor converted to `dtype` (the same tensor when it already has it)."""
        if dtype == self.dtype:
            return self
        return self._result(graph.cast(self.uop, dtype))

    def _bitcast(self, dtype: DType) -> Tensor:
        """This tensor's bits reinterpreted as `dtype` of the same item size."""
        if dtype == self.dtype:
            return self
        return self._result(graph.bitcast(self.uop, dtype))

    def _movement(self, op: Ops, arg: Any) -> Tensor:
        """The movement op `op` (RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, FLIP) with payload `arg` (see graph.py)."""
        uop = graph.movement(op, self.uop, arg)
        if uop is self.uop:
            return self
        result = self._result(uop)
        # the tensor this one views (PyTorch's `_base`): a lazy result has no storage yet, and hash-consing makes
        # two equal results one node, so its views are told apart by the tensor they were taken of
        _note_view(self, result)
        return result

    def _reduce(self, op: Ops, axes: Sequence[int]) -> Tensor:
        """This tensor reduced with `op` (ADD, MUL, MAX) over `axes`, reduced dims kept as size 1."""
        uop = graph.reduce_axis(self.uop, op, axes)
        if uop is self.uop:
            # only size-1 dims to reduce: still a new value, as in PyTorch, never a view of this tensor
            return self._fresh_copy() if axes and self.numel() else self
        return self._result(uop)

    def _fresh_copy(self) -> Tensor:
        """This tensor's values written into a new buffer when realized (a value that never aliases this one)."""
        count = math.prod(self.shape)
        if self.is_sharded:  # each shard written into memory of its own, on its device
            lowered = lower_sharded(self.uop)
            copies = []
            for shard in lowered.src:
                shape = graph.shape_of(shard)
                memory = graph.buffer_uop(graph.device_of(shard), math.prod(shape), self.dtype)
                copies.append(graph.assign(graph.reshape(memory, shape), shard))
            return self._result(graph.multi(copies, lowered.arg))
        device = graph.device_of(self.uop)
        if isinstance(count, int):
            memory = graph.buffer_uop(device, count, self.dtype)
        else:  # a symbolic shape: memory for its largest value, the bound elements leading
            memory = graph.shrink(graph.buffer_uop(device, max_numel(self.shape), self.dtype), ((0, count),))
        return self._result(graph.assign(graph.reshape(memory, self.shape), self.uop))

    def _assign_uop(self, value: Tensor) -> UOp:
        return graph.assign(self.uop, value.uop)

    # -----------------------------------------------------------------------------------------------------------
    # properties
    # -----------------------------------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dim."""
        return graph.shape_of(self.uop)

    @property
    def dtype(self) -> DType:
        """The element dtype."""
        return self.uop.dtype

    @property
    def device(self) -> str | tuple[str, ...]:
        """The canonical name of the device holding the data; of a sharded tensor, the tuple of its devices."""
        return graph.placement_of(self.uop)

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices holding this tensor, in shard order (one for a tensor on one device)."""
        placement = graph.placement_of(self.uop)
        return placement if isinstance(placement, tuple) else (placement,)

    @property
    def is_sharded(self) -> bool:
        """Whether this tensor lives on several devices (made by `shard`, or computed from such tensors)."""
        return isinstance(graph.placement_of(self.uop), tuple)

    @property
    def shard_axis(self) -> int | None:
        """The axis a sharded tensor is split along over its devices; None when replicated (each device holds all of
        it) or on one device. For a lazy result it is the layout the computation gives (kiln.tensor.sharding)."""
        if not self.is_sharded:
            return None
        axis: int | None = lower_sharded(self.uop).arg
        return axis

    @property
    def shards(self) -> list[Tensor]:
        """The per-device parts of a sharded tensor (lazy, one Tensor per device, in order); `[self]` on one device.

        Example:
            >>> x = Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).shard(["CPU:0", "CPU:1"], axis=0)
            >>> [shard.shape for shard in x.shards]
            [(2, 2), (1, 2)]
        """
        if not self.is_sharded:
            return [self]
        return [Tensor._from_uop(shard) for shard in lower_sharded(self.uop).src]

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return len(self.shape)

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    def element_size(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of all elements."""
        return self.numel() * self.dtype.itemsize

    def __repr__(self) -> str:
        grad = f", requires_grad={self.requires_grad}" if self.requires_grad is not None else ""
        values = self._realized_values()
        shown = f" {values.tolist()}" if values is not None else ""
        shape = format_shape(self.shape)
        return f"<Tensor{shown} shape={shape} dtype={self.dtype!r} device={self.device!r}{grad}>"

    def _realized_values(self) -> np.ndarray[Any, Any] | None:
        """The values of a small tensor that needs no computation to read (data in a buffer, a constant), else None.

        Never runs anything: `repr` of a lazy result stays lazy.
        """
        if self.numel() > _REPR_VALUES_LIMIT or self.dtype.fmt is None:
            return None
        node = realized_view(self.uop) or self.uop
        constant = graph.const_value(node)
        if constant is not None:
            return np.full(self.shape, constant, dtype=numpy_from_dtype(self.dtype))
        while node.op in (Ops.RESHAPE, Ops.DETACH):
            node = node.src[0]
        if node.op is not Ops.BUFFER or not has_buffer(node) or not buffer_of(node).is_allocated:
            return None
        flat = buffer_of(node).numpy()[: self.numel()]
        return np.array(flat.reshape(self.shape), copy=True)

    # -----------------------------------------------------------------------------------------------------------
    # graph-level helpers every layer needs
    # -----------------------------------------------------------------------------------------------------------

    def contiguous(self) -> Tensor:
        """This tensor forced into its own buffer when realized (a fusion boundary)."""
        return self._result(graph.contiguous(self.uop))

    def to(self, device: str | Sequence[str] | None) -> Tensor:
        """This tensor on `device` (the same tensor if it is there already); a list or tuple of devices replicates it
        on each (`shard(devices)`; a sharded tensor keeps its split axis); a sharded tensor sent to one device is
        gathered there."""
        if isinstance(device, (list, tuple)):
            return self.shard(device, self.shard_axis)
        assert device is None or isinstance(device, str)
        target = canonical_device(device)
        if target == self.device:
            return self
        check_device_dtype(target, self.dtype)
        if self.is_sharded:
            return self._result(gathered(self.uop, target))
        return self._result(graph.copy_to(self.uop, target))

    def shard(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """This tensor over several devices: a copy on each (`axis` None) or split in balanced parts along `axis`
        (a size that does not divide evenly gives the first devices one more element; fewer elements than devices
        raise ValueError). The result is a Tensor whose graph holds its placement (a MULTI node); operations on it
        run per device, with the collectives their layout needs (kiln.tensor.sharding).

        Example:
            >>> x = Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).shard(["CPU:0", "CPU:1"], axis=0)
            >>> x.device, x.shard_axis, (x * 2).sum().item()
            (('CPU:0', 'CPU:1'), 0, 42.0)
        """
        names = check_devices(devices)
        source = self.to(names[0]) if self.is_sharded else self
        for name in names:
            check_device_dtype(name, self.dtype)
        if axis is None:
            return source._result(graph.copy_to(source.uop, names))
        axis = normalize_axis(axis, self.ndim, "shard axis")
        shards = []
        for name, bound in zip(names, split_bounds(self.shape[axis], len(names), axis)):
            window = tuple(bound if dim == axis else (0, size) for dim, size in enumerate(self.shape))
            shards.append(graph.copy_to(graph.shrink(source.uop, window), name))
        return source._result(graph.multi(shards, axis))

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """As `AutogradMixin.requires_grad_`; a sharded tensor becomes a leaf over buffers of its own on each device
        (its values computed now)."""
        if requires_grad and self.is_sharded and self.requires_grad is not True:
            self.uop = realize_uops([self.uop])[0]  # a MULTI node over new per-device buffers
            self.requires_grad = True
            return self
        return super().requires_grad_(requires_grad)

    def detach(self) -> Tensor:
        """This tensor's values with no gradient history (requires_grad is False)."""
        result = type(self)._from_uop(graph.detach(self.uop), False)
        _note_view(self, result)
        return result

    def assign(self, value: Tensor | Any) -> Tensor:
        """Writes `value` (same shape and dtype) into this tensor's buffer now; returns self.

        The write happens once, in program order (see "Mutation semantics" in the package README): views of the
        buffer see the new values; results built before it and not realized yet keep reading the old values. A
        tensor with no buffer (a lazy result, a constant) just takes the value. Gradients flow into a value that
        requires grad.

        Example:
            >>> w = Tensor([1.0, 2.0])
            >>> before = w * 10
            >>> w.assign(w + 1).tolist(), before.tolist()
            ([2.0, 3.0], [10.0, 20.0])
        """
        if not isinstance(value, Tensor):
            value = Tensor(value, dtype=self.dtype, device=self.device)
        if value.shape != self.shape:
            raise ValueError(f"assign: value shape {value.shape} must equal this tensor's shape {self.shape}")
        if value.dtype != self.dtype:
            raise TypeError(f"assign: value dtype {value.dtype!r} must equal this tensor's dtype {self.dtype!r}")
        value = value.to(self.device)
        keep_graph = not Tensor.no_grad and value.requires_grad is True
        write(self, value.uop, keep_graph=keep_graph, value_holder=value)
        if keep_graph:
            self.requires_grad = True  # like PyTorch: written from a value that requires grad, it requires grad
        return self


def _note_view(source: Tensor, view: Tensor) -> None:
    # `view` views `source`: a lazy result has no storage yet, and hash-consing makes two equal results one node, so
    # the views of one tensor are told apart by a token they share with it (PyTorch's `_base`, without keeping the
    # base alive: a base nobody holds is no one's to see a write) and a weak reference to the base
    token = source.__dict__.get("_view_token")
    if token is None:
        token = source.__dict__["_view_token"] = object()
        source.__dict__["_view_base"] = weakref.ref(source)
    view.__dict__["_view_token"] = token
    view.__dict__["_view_base"] = source.__dict__["_view_base"]


def _initial_uop(
    data: Any, dtype: DType | None, device: str | tuple[str, ...] | None, requires_grad: bool | None
) -> UOp:
    """The graph of a new Tensor made from `data` (see `Tensor`'s arguments)."""
    if isinstance(data, UOp):
        graph.shape_of(data)  # a tensor-graph node: check it has a shape
        uop = data if dtype is None else graph.cast(data, dtype)
        if device is not None and canonical_device(device) != graph.placement_of(data):
            uop = graph.copy_to(uop, canonical_device(device))
        return uop
    if isinstance(data, Tensor):
        uop = data.uop if dtype is None else graph.cast(data.uop, dtype)
        return uop if device is None else graph.copy_to(uop, canonical_device(device))
    target = canonical_device(device)
    if isinstance(data, BoundVariable):  # its value, as a jitted function receives it
        data = np.array(data.value, dtype=np.int32)
    if isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
        scalar_dtype = dtype if dtype is not None else dtypes.from_py(data)
        check_constant_fits(data, scalar_dtype)
        if requires_grad is not True:
            check_device_dtype(target, scalar_dtype)  # before const() builds anything of that dtype
            return graph.const(data, scalar_dtype, target)
        # a gradient leaf needs an identity of its own: equal constants are one hash-consed node
        data = np.array(data, dtype=numpy_from_dtype(scalar_dtype) if scalar_dtype.fmt is not None else None)
    if isinstance(target, tuple):  # host data for several devices: on the first, copied to each
        return graph.copy_to(uop_from_host(data, dtype, target[0]), target)
    return uop_from_host(data, dtype, target)
