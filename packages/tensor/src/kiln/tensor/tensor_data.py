"""`DataMixin`: realizing a tensor (`realize`, `realize_all`: the eager lane, the eager fast path, one schedule for
several tensors) and reading its data to the host (`numpy`, `tolist`, `item`, the scalar conversions, the buffer).
`kiln.tensor.tensor.Tensor` takes these methods from here; the rest of the realize machinery is `kiln.tensor.realize`.
"""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from kiln.runtime import Buffer
from kiln.tensor import graph
from kiln.tensor.core import TensorCore
from kiln.tensor.host_data import numpy_from_dtype
from kiln.tensor.realize import eager_lane, engine
from kiln.tensor.realize.buffers import buffer_of
from kiln.tensor.realize.engine import realize_uops
from kiln.tensor.realize.mutation import share_root_before_realize
from kiln.tensor.schedule import alias_base, record_realized
from kiln.tensor.sharding import gathered
from kiln.tensor.symbolic import bound_shape
from kiln.uops import ConstType, Ops, UOp, dtypes

__all__ = ["DataMixin"]


class DataMixin(TensorCore):
    """Realizing a tensor and reading its values (see the module doc)."""

    def realize(self, *others: Self) -> Self:
        """Computes this tensor (and `others`, in one schedule) into buffers; returns self."""
        if not others and (value := self.__dict__.get("_lane")) is not None and eager_lane.run(value):
            return self  # the eager lane launched its kernel (or it was realized already)
        self.realize_all(self, *others)
        return self

    @staticmethod
    def realize_all(*tensors: TensorCore) -> list[UOp]:
        """Computes `tensors` together (one schedule, shared work computed once); returns their buffer views."""
        # graphs keep every movement op the user built (gradients may target any of them); normalizing merges the
        # chains for the scheduler
        if len(tensors) == 1 and (tensor := tensors[0]).__dict__.get("_view_token") is None:
            # the eager fast path: a small op over buffers met before runs its remembered kernel (an ALU result is
            # never a view of a buffer, so only a tensor that requires grad keeps its graph, as below)
            view = engine.default_engine().realize_fast(tensor.uop)
            if view is not None:
                if tensor.__dict__.get("_requires_grad") is not True:
                    tensor.uop = view
                return [view]
        shared: set[int] = set()  # tensors sharing a lazy result with live views: they keep their graphs
        for each in tensors:
            # (a sharded tensor's views realize on their own: a sharded lazy root gets no shared storage)
            sharded = isinstance(graph.placement_of(each.uop), tuple)
            if each.__dict__.get("_view_token") is not None and not sharded and share_root_before_realize(each):
                shared.add(id(each))
        if len(tensors) == 1:  # the usual call (`realize()` of one tensor): no duplicate to look for; rule below
            views = realize_uops([(tensor := tensors[0]).uop])
            if shared:
                record_realized(tensor.uop, views[0])
            elif alias_base(tensor.uop) is None and tensor.__dict__.get("_requires_grad") is not True:
                tensor.uop = views[0]
            return views
        nodes = [tensor.uop for tensor in tensors]
        seen: dict[UOp, TensorCore] = {}
        for index, tensor in enumerate(tensors):
            node = graph.fold_movement_chains(tensor.uop)  # compared with chains merged: two may be one value
            first = seen.setdefault(node, tensor)
            if first is not tensor and alias_base(node) is None and math.prod(tensor.shape) > 0:
                # two tensors of one (hash-consed) graph: the second gets a copy, so each owns its memory
                memory = graph.buffer_uop(graph.device_of(node), math.prod(tensor.shape), node.dtype)
                nodes[index] = graph.assign(graph.reshape(memory, tensor.shape), tensor.uop)
        views = realize_uops(nodes)
        for tensor, node, view in zip(tensors, nodes, views):
            if alias_base(tensor.uop) is not None:
                continue  # a view of a buffer stays one (it sees later writes into the buffer, like a PyTorch view)
            if node is not tensor.uop or id(tensor) in shared:
                record_realized(tensor.uop, view)  # the node as built remembers its buffer too
            # Tensors in an autograd graph keep their graph (the node remembers its buffer); others drop it
            if tensor.requires_grad is not True and id(tensor) not in shared:
                tensor.uop = view
        return views

    def _buffer_view(self) -> tuple[Buffer, tuple[int, ...]]:
        # the realized data: the base buffer and this tensor's shape (realized views are contiguous)
        if self.is_sharded:
            raise ValueError(f"a tensor sharded over {list(self.devices)} has one buffer per device: use .shards")
        base = self.realize_all(self)[0]
        while base.op not in (Ops.BUFFER, Ops.CONST):
            base = base.src[0]
        if base.op is Ops.CONST:  # a broadcast constant has no buffer: make one
            return self.contiguous()._buffer_view()
        return buffer_of(base), self.shape

    def numpy(self) -> np.ndarray[Any, Any]:
        """A new numpy array with this tensor's values (bfloat16 / fp8 are returned as float32)."""
        if (recording := engine.default_engine().recording) is not None:
            recording.record_host_read(f"reading a tensor of shape {self.shape} to the host")
        if self.dtype.fmt is None:
            return self._cast(dtypes.float32).numpy()
        if self.numel() == 0:
            return np.zeros(self.shape, dtype=numpy_from_dtype(self.dtype))
        if self.is_sharded:  # the shards gathered on the first device
            self.realize()
            return self._from_uop(gathered(self.uop, self.devices[0])).numpy()
        constant = graph.const_value(self.uop)
        if constant is not None:
            return np.full(bound_shape(self.shape), constant, dtype=numpy_from_dtype(self.dtype))
        buffer, shape = self._buffer_view()
        if not isinstance(count := math.prod(shape), int):  # bound variables in the shape: read the bound shape
            shape = bound_shape(shape)
            count = math.prod(shape)
        return np.array(buffer.numpy()[:count].reshape(shape), copy=True)

    def tolist(self) -> Any:
        """The values as (nested) Python lists; a Python scalar for a 0-dim tensor."""
        return self.numpy().tolist()

    def item(self) -> ConstType:
        """The single value of a one-element tensor as a Python scalar (RuntimeError otherwise, like PyTorch)."""
        if self.numel() != 1:
            raise RuntimeError(
                f"item() needs a tensor with one element; this one has {self.numel()} elements (shape {self.shape})"
            )
        value: ConstType = self.numpy().reshape(()).item()
        return value

    def _scalar_for(self, what: str) -> ConstType:
        # float(t) / int(t) / complex(t): PyTorch raises ValueError for anything but one element
        if self.numel() != 1:
            raise ValueError(
                f"{what}(): only one-element tensors can be converted to Python scalars; this one has "
                f"{self.numel()} elements (shape {self.shape})"
            )
        return self.item()

    def __float__(self) -> float:
        return float(self._scalar_for("float"))

    def __int__(self) -> int:
        return int(self._scalar_for("int"))  # a float truncates toward zero; NaN / inf raise as int() does

    def __index__(self) -> int:
        # a one-element integer tensor can index a list or a range (`items[t]`), like PyTorch
        if self.numel() != 1 or not dtypes.is_int(self.dtype):
            raise TypeError(
                "only integer tensors of a single element can be converted to an index; got "
                f"dtype {self.dtype!r} with shape {self.shape}"
            )
        return int(self.item())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        """`np.asarray(tensor)` / `np.array(tensor)`: the values (realized), as `numpy()`."""
        values = self.numpy()
        return values if dtype is None else values.astype(dtype, copy=False)

    def data_buffer(self) -> Buffer:
        """The runtime Buffer holding this tensor's realized values (row-major, `numel()` elements)."""
        return self._buffer_view()[0]
