"""`InplaceMixin`: in-place operators (`+=`, `-=`, ...) and PyTorch's in-place methods (`add_`, `zero_`, `copy_`, ...).

Each one computes its result like the out-of-place op and writes it into the tensor with `Tensor.assign`, so it has
assign's semantics (a write that happens once, in program order; see "Mutation semantics" in the package README).
Like PyTorch, the result must keep the tensor's shape, its dtype must cast to the tensor's dtype without changing
kind (no float result into an integer tensor, no integer result into a bool tensor), and a leaf that requires grad
can only be changed in place under `no_grad`.
"""

from __future__ import annotations

from typing import Self

from kiln.tensor.core import TensorCore
from kiln.tensor.schedule import alias_base
from kiln.uops import ConstType, DType, dtypes

__all__ = ["InplaceMixin", "torch_type_name"]

_TORCH_NAMES = {
    dtypes.bool: "Bool",
    dtypes.int8: "Char",
    dtypes.uint8: "Byte",
    dtypes.int16: "Short",
    dtypes.uint16: "UInt16",
    dtypes.int32: "Int",
    dtypes.uint32: "UInt32",
    dtypes.int64: "Long",
    dtypes.uint64: "UInt64",
    dtypes.float16: "Half",
    dtypes.bfloat16: "BFloat16",
    dtypes.float32: "Float",
    dtypes.float64: "Double",
}


def torch_type_name(dtype: DType) -> str:
    """PyTorch's name of the scalar type `dtype` (Float, Long, ...), as its error messages spell it."""
    return _TORCH_NAMES.get(dtype, dtype.name)


def _kind(dtype: DType) -> int:
    # bool < integer < floating point: a result can be written into a tensor of the same or a higher kind
    if dtype == dtypes.bool:
        return 0
    return 2 if dtypes.is_float(dtype) else 1


class InplaceMixin(TensorCore):
    """In-place operators and methods of `Tensor`."""

    def _write_result(self, result: Self) -> Self:
        """Checks `result` fits this tensor (shape, dtype kind, autograd) and writes it in; returns self."""
        if self.requires_grad is True and not type(self)._grad_disabled and alias_base(self.uop) is not None:
            what = "a view of a leaf Variable" if self.__dict__.get("_view_base") is not None else "a leaf Variable"
            raise RuntimeError(
                f"{what} that requires grad is being used in an in-place operation (shape {list(self.shape)})."
            )
        if result.shape != self.shape:
            raise RuntimeError(
                f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(result.shape)}"
            )
        if _kind(result.dtype) > _kind(self.dtype):
            raise RuntimeError(
                f"result type {torch_type_name(result.dtype)} can't be cast to the desired output type "
                f"{torch_type_name(self.dtype)}"
            )
        return self.assign(result._cast(self.dtype))

    def __iadd__(self, other: Self | ConstType) -> Self:
        return self._write_result(self + other)

    def __isub__(self, other: Self | ConstType) -> Self:
        return self._write_result(self - other)

    def __imul__(self, other: Self | ConstType) -> Self:
        return self._write_result(self * other)

    def __itruediv__(self, other: Self | ConstType) -> Self:
        return self._write_result(self / other)

    def __ifloordiv__(self, other: Self | ConstType) -> Self:
        return self._write_result(self // other)

    def __imod__(self, other: Self | ConstType) -> Self:
        return self._write_result(self % other)

    def __ipow__(self, other: Self | ConstType) -> Self:
        return self._write_result(self**other)

    def __iand__(self, other: Self | ConstType) -> Self:
        return self._write_result(self & other)

    def __ior__(self, other: Self | ConstType) -> Self:
        return self._write_result(self | other)

    def __ixor__(self, other: Self | ConstType) -> Self:
        return self._write_result(self ^ other)

    def __ilshift__(self, other: Self | ConstType) -> Self:
        return self._write_result(self << other)

    def __irshift__(self, other: Self | ConstType) -> Self:
        return self._write_result(self >> other)

    def __imatmul__(self, other: Self) -> Self:
        return self._write_result(self @ other)

    def add_(self, other: Self | ConstType, alpha: ConstType | None = None) -> Self:
        """Adds `other` (times `alpha`) to this tensor in place; returns self.

        Example:
            >>> Tensor([1.0, 2.0]).add_(1.0).tolist()
            [2.0, 3.0]
        """
        return self._write_result(self.add(other, alpha))

    def sub_(self, other: Self | ConstType, alpha: ConstType | None = None) -> Self:
        """Subtracts `other` (times `alpha`) from this tensor in place; returns self.

        Example:
            >>> Tensor([1.0, 2.0]).sub_(1.0).tolist()
            [0.0, 1.0]
        """
        return self._write_result(self.sub(other, alpha))

    def mul_(self, other: Self | ConstType) -> Self:
        """Multiplies this tensor by `other` in place; returns self.

        Example:
            >>> Tensor([1.0, 2.0]).mul_(3.0).tolist()
            [3.0, 6.0]
        """
        return self._write_result(self.mul(other))

    def div_(self, other: Self | ConstType, rounding_mode: str | None = None) -> Self:
        """Divides this tensor by `other` in place (`rounding_mode` as in `div`); returns self.

        Example:
            >>> Tensor([3.0, 6.0]).div_(3.0).tolist()
            [1.0, 2.0]
        """
        return self._write_result(self.div(other, rounding_mode))

    def clamp_(self, min: Self | ConstType | None = None, max: Self | ConstType | None = None) -> Self:
        """Clamps this tensor to [min, max] in place; returns self.

        Example:
            >>> Tensor([-1.0, 0.5, 2.0]).clamp_(0.0, 1.0).tolist()
            [0.0, 0.5, 1.0]
        """
        return self._write_result(self.clamp(min, max))

    def fill_(self, value: Self | ConstType) -> Self:
        """Sets every element to `value` (a scalar or a 0-dim tensor, cast to this dtype) in place; returns self.

        Example:
            >>> Tensor([1, 2, 3]).fill_(7).tolist()
            [7, 7, 7]
        """
        if isinstance(value, TensorCore):
            if value.ndim != 0:
                raise RuntimeError(
                    f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions."
                )
            filled = value._cast(self.dtype).to(self.device)._broadcast_to(self.shape)
        elif isinstance(value, (bool, int, float)):
            filled = type(self).full(self.shape, value, dtype=self.dtype, device=self.device)
        else:
            raise TypeError(f"fill_ takes a number or a 0-dim Tensor, got {type(value).__name__}")
        return self._write_result(filled)

    def zero_(self) -> Self:
        """Sets every element to zero in place; returns self.

        Example:
            >>> Tensor([1.0, 2.0]).zero_().tolist()
            [0.0, 0.0]
        """
        return self.fill_(False if self.dtype == dtypes.bool else 0)

    def copy_(self, src: Self) -> Self:
        """Copies the values of `src` (broadcast to this shape, cast to this dtype, moved to this device) into this
        tensor in place; returns self.

        Example:
            >>> Tensor([0.0, 0.0]).copy_(Tensor([1, 2])).tolist()
            [1.0, 2.0]
        """
        if not isinstance(src, TensorCore):
            raise TypeError(f"copy_ takes a Tensor, got {type(src).__name__}")
        try:
            values = src.to(self.device)._cast(self.dtype)._broadcast_to(self.shape)
        except ValueError:
            raise RuntimeError(
                f"copy_: the source of shape {list(src.shape)} cannot broadcast to this tensor's shape "
                f"{list(self.shape)}"
            ) from None
        return self._write_result(values)
