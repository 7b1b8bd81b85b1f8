"""`OperandMixin`: the operands of a binary or ternary elementwise op, broadcast (numpy rules) and promoted to one
dtype (`kiln.tensor.ops.promotion`) before the primitive node is built, with short paths for the common cases (a
Python number, two tensors of one dtype and device)."""

from __future__ import annotations

import functools
import math
from typing import Self

import numpy as np

from kiln.tensor import graph
from kiln.tensor.core import TensorCore
from kiln.tensor.ops._checks import ShapeError, broadcast_shapes
from kiln.tensor.ops.promotion import (
    DIMENSIONED,
    PYTHON_SCALAR,
    ZERO_DIM,
    promote_kinds,
    result_type,
    scalar_dtype,
    scalar_value,
)
from kiln.tensor.ops.unary import UnaryMixin
from kiln.uops import ConstType, DType, Ops, UOp, dtypes

__all__ = ["OperandMixin"]

# exact Python number types take the scalar fast path in `_operands` (subclasses and numpy scalars go the long way)
_PYTHON_NUMBERS: frozenset[type] = frozenset({bool, int, float})


def _broadcast_node(uop: UOp, shape: tuple[int, ...], target: tuple[int, ...]) -> UOp:
    # graph node `uop` of `shape` broadcast to `target` (numpy rules, known to hold): leading 1s, then an expand
    missing = len(target) - len(shape)
    return graph.expand(graph.reshape(uop, (1,) * missing + shape) if missing else uop, target)


# The promoted dtype and constant node of a Python number met with a tensor of (dtype, shape, placement), by the
# number's type and value: `x + 1` in a loop finds both in one probe. A true cache, so it stays module-level: a pure
# function of immutable keys whose results are a dtype and a hash-consed, immutable node; bounded, thread-safe.
@functools.lru_cache(maxsize=1024)
def _scalar_constant(
    dtype: DType,
    shape: tuple[int, ...],
    placement: graph.Placement,
    kind: str,
    number: ConstType,
    defaults: tuple[DType, DType],
) -> tuple[DType, UOp | None]:
    # (`kind` keeps 1, 1.0 and True apart; the caller never asks for a float zero, whose sign == cannot tell;
    # `defaults`: dtypes.default_int and default_float, which a Python number takes part in promotion as)
    promoted = promote_kinds(((DIMENSIONED if shape else ZERO_DIM, dtype), (PYTHON_SCALAR, scalar_dtype(number))))
    if isinstance(number, float) and not math.isfinite(number) and not dtypes.is_float(promoted):
        return promoted, None  # the caller raises, naming its op
    return promoted, graph.const(number, promoted, placement, shape)


class OperandMixin(UnaryMixin):
    """Broadcasting and promotion of elementwise operands (the methods the elementwise ops build on)."""

    def _operand(self, value: Self | ConstType, dtype: DType, shape: tuple[int, ...], what: str) -> Self:
        """`value` (a Tensor on this tensor's device, or a Python scalar) as `dtype`, broadcast to `shape`."""
        if isinstance(value, TensorCore):
            tensor = value
            if tensor.device != self.device:
                raise ValueError(
                    f"{what}: operands are on different devices, {self.device!r} and {tensor.device!r}; "
                    "move one with .to(device)"
                )
            return tensor._cast(dtype)._broadcast_to(shape)
        number = scalar_value(value)
        if isinstance(number, float) and not math.isfinite(number) and not dtypes.is_float(dtype):
            raise ValueError(f"{what}: cannot use {number!r} with a {dtype!r} operand")
        return self._const(number, shape, dtype, self.device)

    def _operands(
        self, other: Self | ConstType, what: str, reverse: bool = False, dtype: DType | None = None
    ) -> tuple[Self, Self]:
        """(self, other) promoted to one dtype (`dtype` if given) and broadcast to one shape; swapped if `reverse`.

        A numpy array `other` takes part as a Tensor on this tensor's device (as `torch.from_numpy` would).
        """
        if isinstance(other, (int, float)) and type(other) in _PYTHON_NUMBERS:
            return self._scalar_operands(other, what, reverse, dtype)
        if type(other) is type(self):
            alike = self._alike_operands(other, what, dtype)
            if alike is not None:
                return (alike[1], alike[0]) if reverse else alike
        if isinstance(other, np.ndarray):
            other = type(self)(other, device=self.device)
        target = result_type(self, other) if dtype is None else dtype
        other_shape = other.shape if isinstance(other, TensorCore) else ()
        try:
            shape = broadcast_shapes(self.shape, other_shape)
        except ValueError as error:
            raise ShapeError(f"{what}: {error}") from None
        left = self._cast(target)._broadcast_to(shape)
        right = self._operand(other, target, shape, what)
        return (right, left) if reverse else (left, right)

    def _alike_operands(self, other: Self, what: str, dtype: DType | None) -> tuple[Self, Self] | None:
        """`_operands` of two tensors of one class, dtype and device (and `dtype`, if given, theirs): nothing to
        promote, and a broadcast operand gets one graph node per view and one Tensor; None for any other pair."""
        mine, theirs = self.uop, other.uop
        if mine.dtype is not theirs.dtype or (dtype is not None and dtype is not mine.dtype):
            return None
        if graph.placement_of(mine) != graph.placement_of(theirs):
            return None
        my_shape, their_shape = graph.shape_of(mine), graph.shape_of(theirs)
        if my_shape == their_shape:
            return self, other
        try:
            shape = broadcast_shapes(my_shape, their_shape)
        except ValueError as error:
            raise ShapeError(f"{what}: {error}") from None
        left = self if my_shape == shape else self._result(_broadcast_node(mine, my_shape, shape))
        right = other if their_shape == shape else other._result(_broadcast_node(theirs, their_shape, shape))
        return left, right

    def _scalar_operands(self, number: ConstType, what: str, reverse: bool, dtype: DType | None) -> tuple[Self, Self]:
        left, constant = self._scalar_operand_nodes(number, what, dtype)  # for a plain Python bool / int / float
        return (self._from_uop(constant), left) if reverse else (left, self._from_uop(constant))

    def _scalar_operand_nodes(self, number: ConstType, what: str, dtype: DType | None = None) -> tuple[Self, UOp]:
        # this tensor cast to the promoted dtype (`dtype` if given) and `number`'s constant node over its shape and
        # (canonical, checked) device: no broadcast of self, promotion is one memoized lookup
        uop = self.uop
        shape = graph.shape_of(uop)
        if dtype is None and (number or type(number) is not float):
            defaults = (dtypes.default_int, dtypes.default_float)
            placement, kind = graph.placement_of(uop), type(number).__name__  # (a name: mypy sees no hashable type)
            promoted, constant = _scalar_constant(uop.dtype, shape, placement, kind, number, defaults)
            if constant is None:
                raise ValueError(f"{what}: cannot use {number!r} with a {promoted!r} operand")
            return (self if promoted is uop.dtype else self._cast(promoted)), constant
        if dtype is None:
            kinds = ((DIMENSIONED if shape else ZERO_DIM, uop.dtype), (PYTHON_SCALAR, scalar_dtype(number)))
            dtype = promote_kinds(kinds)
        if isinstance(number, float) and not math.isfinite(number) and not dtypes.is_float(dtype):
            raise ValueError(f"{what}: cannot use {number!r} with a {dtype!r} operand")
        left = self if dtype is uop.dtype else self._cast(dtype)  # dtypes are interned: `is` is `_cast`'s test
        return left, graph.const(number, dtype, graph.placement_of(uop), shape)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Self:
        """This tensor broadcast to `shape` (numpy rules; leading dims are added)."""
        if self.shape == shape:
            return self
        missing = len(shape) - self.ndim
        if missing < 0:
            raise ValueError(f"cannot broadcast shape {self.shape} to the smaller shape {shape}")
        aligned = self._movement(Ops.RESHAPE, (1,) * missing + self.shape)
        try:
            return aligned._movement(Ops.EXPAND, shape)
        except ValueError:
            raise ValueError(f"cannot broadcast shape {self.shape} to {shape}") from None
