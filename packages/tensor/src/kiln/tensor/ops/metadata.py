"""`MetadataMixin`: torch's conveniences about shape, type and device (size, dim, stride, new_zeros, type_as,
meshgrid, ...), and small tinygrad helpers (sequential, usum, const_like), composed from existing methods."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any, Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int, normalize_axis
from kiln.uops import ConstType, DType, dtypes

__all__ = ["MetadataMixin"]


def _chained(
    first: TensorT, others: Sequence[Any], logical: Callable[[Any, Any], Any], arithmetic: Callable[[Any, Any], Any]
) -> TensorT:
    """first combined with each of `others` in turn: by `logical` while the running result is bool, else by
    `arithmetic`."""
    result = first
    for other in others:
        result = logical(result, other) if result.dtype == dtypes.bool else arithmetic(result, other)
    return result


class MetadataMixin(TensorCore):
    """Shape, type and device conveniences."""

    def size(self, dim: int | None = None) -> Any:
        """The shape (a tuple), or the length of `dim`.

        Example:
            >>> Tensor.zeros(2, 3).size(), Tensor.zeros(2, 3).size(-1)
            ((2, 3), 3)
        """
        if dim is None:
            return self.shape
        return self.shape[normalize_axis(dim, self.shape, "size dim")] if self.ndim else 1

    def dim(self) -> int:
        """The number of dims.

        Example:
            >>> Tensor.zeros(2, 3).dim()
            2
        """
        return self.ndim

    def ndimension(self) -> int:
        """Alias of `dim()`."""
        return self.ndim

    def nelement(self) -> int:
        """Alias of `numel()`."""
        return self.numel()

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    def is_contiguous(self) -> bool:
        """True: kiln tensors have no user-visible strides (every tensor reads as contiguous)."""
        return True

    def cpu(self) -> Self:
        """This tensor on the CPU device.

        Example:
            >>> Tensor([1]).cpu().device
            'CPU'
        """
        return self.to("CPU")

    def clone(self) -> Self:
        """A copy of this tensor with its own buffer (gradients flow through, like torch.clone).

        Example:
            >>> Tensor([1, 2]).clone().tolist()
            [1, 2]
        """
        if self.numel() == 0:
            return self.contiguous()
        # a lazy write of the values into memory of its own: `contiguous()` of a whole buffer is that buffer (an
        # alias, as in PyTorch), a clone never is
        return self._fresh_copy()

    def contiguous_backward(self) -> Self:
        """This tensor (tinygrad's hint to make the gradient contiguous; kiln's scheduler decides itself)."""
        return self

    def sequential(self, functions: Sequence[Callable[[Self], Self]]) -> Self:
        """The result of applying `functions` in order.

        Example:
            >>> Tensor([1, 2]).sequential([lambda x: x * 2, lambda x: x + 1]).tolist()
            [3, 5]
        """
        result = self
        for function in functions:
            result = function(result)
        return result

    def usum(self, *others: Self | ConstType) -> Self:
        """self + each of `others` (OR for bools), tinygrad's elementwise sum of many.

        Example:
            >>> Tensor([1]).usum(Tensor([2]), 3).tolist()
            [6]
        """
        return _chained(self, others, operator.or_, operator.add)

    def uprod(self, *others: Self | ConstType) -> Self:
        """self * each of `others` (AND for bools), tinygrad's elementwise product of many.

        Example:
            >>> Tensor([2]).uprod(Tensor([3]), 4).tolist()
            [24]
        """
        return _chained(self, others, operator.and_, operator.mul)

    def const_like(self, value: ConstType, dtype: DType | None = None) -> Self:
        """`value` in this tensor's shape (and dtype unless given).

        Example:
            >>> Tensor([1, 2]).const_like(7).tolist()
            [7, 7]
        """
        return self._const(value, self.shape, self.dtype if dtype is None else dtype, self.device)

    def new_full(self, size: Sequence[int], fill_value: ConstType, *, dtype: DType | None = None) -> Self:
        """A tensor of `size` filled with `fill_value`, with this tensor's dtype (unless given) and device.

        Example:
            >>> Tensor([1.0]).new_full((2,), 3).tolist()
            [3.0, 3.0]
        """
        return self.full(tuple(size), fill_value, dtype=self.dtype if dtype is None else dtype, device=self.device)

    def new_zeros(self, *size: int | Sequence[int], dtype: DType | None = None) -> Self:
        """Zeros of `size` with this tensor's dtype (unless given) and device."""
        return self.zeros(*size, dtype=self.dtype if dtype is None else dtype, device=self.device)

    def new_ones(self, *size: int | Sequence[int], dtype: DType | None = None) -> Self:
        """Ones of `size` with this tensor's dtype (unless given) and device."""
        return self.ones(*size, dtype=self.dtype if dtype is None else dtype, device=self.device)

    def new_empty(self, *size: int | Sequence[int], dtype: DType | None = None) -> Self:
        """An uninitialized tensor of `size` with this tensor's dtype (unless given) and device."""
        return self.empty(*size, dtype=self.dtype if dtype is None else dtype, device=self.device)

    def new_tensor(self, data: Any, *, dtype: DType | None = None) -> Self:
        """A tensor of `data` with this tensor's dtype (unless given) and device.

        Example:
            >>> Tensor([1.0]).new_tensor([2, 3]).tolist()
            [2.0, 3.0]
        """
        return type(self)(data, dtype=self.dtype if dtype is None else dtype, device=self.device)

    def type_as(self, other: Self) -> Self:
        """This tensor cast to `other`'s dtype."""
        return self.cast(other.dtype)

    def view_as(self, other: Self) -> Self:
        """This tensor reshaped to `other`'s shape."""
        return self.reshape(other.shape)

    def reshape_as(self, other: Self) -> Self:
        """This tensor reshaped to `other`'s shape."""
        return self.reshape(other.shape)

    def expand_as(self, other: Self) -> Self:
        """This tensor expanded to `other`'s shape."""
        return self.expand(other.shape)

    def ravel(self) -> Self:
        """The flattened tensor."""
        return self.reshape(-1)

    @property
    def data(self) -> Self:
        """This tensor detached from the gradient graph (torch's `.data`)."""
        return self.detach()

    @staticmethod
    def meshgrid(*tensors: TensorT | Sequence[TensorT], indexing: str = "ij") -> tuple[TensorT, ...]:
        """Coordinate grids from 1-D tensors: 'ij' (matrix) or 'xy' (Cartesian: the first two dims swapped).

        Example:
            >>> [g.tolist() for g in Tensor.meshgrid(Tensor([1, 2]), Tensor([3]))]
            [[[1], [2]], [[3], [3]]]
        """
        items = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
        if indexing not in ("ij", "xy"):
            raise ValueError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
        if any(t.ndim > 1 for t in items):  # type: ignore[union-attr]
            raise ValueError("meshgrid takes 0-D or 1-D tensors")
        flat = [t.reshape(-1) for t in items]  # type: ignore[union-attr]
        shape = [t.shape[0] for t in flat]
        if indexing == "xy" and len(flat) >= 2:
            shape[0], shape[1] = shape[1], shape[0]
        grids = []
        for position, t in enumerate(flat):
            axis = position
            if indexing == "xy" and position < 2 and len(flat) >= 2:
                axis = 1 - position
            view = [1] * len(flat)
            view[axis] = t.shape[0]
            grids.append(t.reshape(view).expand(shape))
        return tuple(grids)

    def stride(self, dim: int | None = None) -> Any:
        """The row-major strides in elements (kiln tensors read as contiguous), or the stride of `dim`.

        Example:
            >>> Tensor.zeros(2, 3).stride()
            (3, 1)
        """
        strides = tuple(math.prod(self.shape[i + 1 :]) for i in range(self.ndim))
        return strides if dim is None else strides[normalize_axis(dim, self.shape, "stride dim")]

    def storage_offset(self) -> int:
        """0: a kiln tensor's elements start at its own data."""
        return 0

    def get_device(self) -> int:
        """The device ordinal: -1 on the CPU (like torch), else the number after ':' in the device name (0 if none).

        Example:
            >>> Tensor([1]).cpu().get_device()
            -1
        """
        device = self.device if isinstance(self.device, str) else self.device[0]  # sharded: its first device
        if device.split(":")[0] in ("CPU", "PYTHON", "C", "LLVM"):
            return -1
        _, _, number = device.partition(":")
        return int(number) if number.isdigit() else 0

    @property
    def is_cpu(self) -> bool:
        """Whether the tensor lives on a host device (CPU, PYTHON)."""
        return self.get_device() == -1

    @property
    def is_cuda(self) -> bool:
        """Whether the tensor lives on an NVIDIA device."""
        devices = self.device if isinstance(self.device, tuple) else (self.device,)
        return all(device.split(":")[0] in ("CUDA", "NV") for device in devices)

    def is_same_size(self, other: Self) -> bool:
        """Whether both have one shape."""
        return self.shape == other.shape

    def is_nonzero(self) -> bool:
        """The truth of a one-element tensor (RuntimeError otherwise, like torch; reads the value).

        Example:
            >>> Tensor([0.5]).is_nonzero()
            True
        """
        if self.numel() != 1:
            raise RuntimeError(f"is_nonzero needs a tensor of one element, got shape {self.shape}")
        return bool(self.reshape(()).item() != 0)

    def sum_to_size(self, *size: int | Sequence[int]) -> Self:
        """Summed down to `size`, which this shape must broadcast from (the reverse of `expand`).

        Example:
            >>> Tensor.ones(2, 3).sum_to_size(1, 3).tolist()
            [[2.0, 2.0, 2.0]]
        """
        given = list(size[0]) if len(size) == 1 and isinstance(size[0], (list, tuple)) else list(size)
        target = tuple(check_int(entry, "sum_to_size size") for entry in given)
        lead = self.ndim - len(target)
        if lead < 0 or any(t not in (1, s) for t, s in zip(target, self.shape[lead:])):
            raise ValueError(f"sum_to_size: shape {self.shape} does not reduce to {target}")
        axes = tuple(range(lead)) + tuple(
            lead + i for i, t in enumerate(target) if t == 1 and self.shape[lead + i] != 1
        )
        return (self.sum(axes, keepdim=True) if axes else self).reshape(target)
