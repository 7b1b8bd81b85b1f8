"""`ElementwiseMixin`: binary and ternary elementwise math with PyTorch's broadcasting and type promotion.

Operands are broadcast (numpy rules) and promoted (`kiln.tensor.ops.operands`) before the primitive node is built,
so the tensor graph only ever sees operands of one shape and dtype. Division follows PyTorch: `/` is true division
(integers give `dtypes.default_float`), `//` floors and `%` takes the divisor's sign (Python's rules), both built on
the C-semantics IDIV / MOD primitives.
"""

from __future__ import annotations

from typing import Self

import numpy as np

from kiln.tensor import graph
from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import ShapeError, broadcast_shapes
from kiln.tensor.ops.arithmetic import float_floor_divide, integer_power, sign_mismatch, truncated_remainder
from kiln.tensor.ops.data_checks import IntegerDivisionByZero, guarded_integer_division
from kiln.tensor.ops.operands import _PYTHON_NUMBERS, OperandMixin
from kiln.tensor.ops.promotion import (
    result_type,
    scalar_value,
    true_divide_dtype,
)
from kiln.tensor.realize import eager_lane
from kiln.tensor.symbolic import VariableValue, combined_size
from kiln.uops import ConstType, DType, Ops, dtypes

__all__ = ["ElementwiseMixin", "IntegerDivisionByZero"]


def _check_divisor(dtype: DType, other: object, reverse: bool, what: str) -> None:
    # only a Python-number divisor is known when the op is built; a tensor's zeros are data
    if not reverse and not dtypes.is_float(dtype) and isinstance(other, (int, float)) and other == 0:
        raise IntegerDivisionByZero(f"{what}: integer division by zero (divisor {other!r}, dtype {dtype!r})")


class ElementwiseMixin(OperandMixin):
    """Binary and ternary elementwise Tensor methods and operators."""

    def _arithmetic(self, op: Ops, other: Self | ConstType, what: str, reverse: bool = False) -> Self:
        if isinstance(other, (int, float)) and type(other) in _PYTHON_NUMBERS:  # `_operands`'s result, no Tensor
            left, constant = self._scalar_operand_nodes(other, what)
            return left._result(graph.binary_alu(op, *((constant, left.uop) if reverse else (left.uop, constant))))
        left, right = self._operands(other, what, reverse)
        return left._binary(op, right)

    # ------------------------------------------------------------------------------------------------------------
    # arithmetic
    # ------------------------------------------------------------------------------------------------------------

    def add(self, other: Self | ConstType, alpha: ConstType | None = None) -> Self:
        """self + alpha * other (bools: logical or).

        Example:
            >>> Tensor([1, 2]).add(Tensor([10, 20])).tolist()
            [11, 22]
        """
        return self._arithmetic(Ops.ADD, other if alpha is None else other * alpha, "add")

    def sub(self, other: Self | ConstType, alpha: ConstType | None = None) -> Self:
        """self - alpha * other (not defined for two bool operands, like PyTorch).

        Example:
            >>> Tensor([5, 5]).sub(Tensor([1, 2])).tolist()
            [4, 3]
        """
        return self._subtract(other if alpha is None else other * alpha, reverse=False)

    def _subtract(self, other: Self | ConstType, reverse: bool) -> Self:
        left, right = self._operands(other, "sub", reverse)
        if left.dtype == dtypes.bool:
            raise TypeError("subtracting bool tensors is not supported; use logical_xor or ~ instead")
        return left._binary(Ops.SUB, right)

    def mul(self, other: Self | ConstType) -> Self:
        """self * other (bools: logical and).

        Example:
            >>> Tensor([1.5, 2.0]).mul(2).tolist()
            [3.0, 4.0]
        """
        return self._arithmetic(Ops.MUL, other, "mul")

    def div(self, other: Self | ConstType, rounding_mode: str | None = None, reverse: bool = False) -> Self:
        """self / other: true division (integers give `default_float`), or rounded with `rounding_mode`
        'trunc' (toward zero, C's integer division) or 'floor' (toward -inf, Python's `//`).

        Example:
            >>> Tensor([7, -7]).div(2).tolist()
            [3.5, -3.5]
            >>> Tensor([7, -7]).div(2, rounding_mode="floor").tolist()
            [3, -4]
        """
        if isinstance(other, np.ndarray):
            other = type(self)(other, device=self.device)
        if rounding_mode == "floor":
            return self._floor_divide(other, reverse)
        if rounding_mode == "trunc":
            left, right = self._operands(other, "div", reverse)
            if dtypes.is_float(left.dtype):
                return left._binary(Ops.FDIV, right).trunc()
            if left.dtype == dtypes.bool:
                raise TypeError("integer division of bool tensors is not supported")
            _check_divisor(left.dtype, other, reverse, "div")
            return guarded_integer_division(left, right, Ops.IDIV, "div")
        if rounding_mode is not None:
            raise ValueError(f"div rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        target = true_divide_dtype(result_type(self, other))
        left, right = self._operands(other, "div", reverse, dtype=target)
        return left._binary(Ops.FDIV, right)

    def _floor_divide(self, other: Self | ConstType, reverse: bool) -> Self:
        left, right = self._operands(other, "floor_divide", reverse)
        if left.dtype == dtypes.bool:
            raise TypeError("floor division of bool tensors is not supported")
        _check_divisor(left.dtype, other, reverse, "floor_divide")
        if dtypes.is_float(left.dtype):
            return float_floor_divide(left, right)
        quotient = guarded_integer_division(left, right, Ops.IDIV, "floor_divide")
        if dtypes.is_unsigned(left.dtype):
            return quotient
        # C truncates toward zero: step down by one where the remainder is nonzero and the signs differ
        return quotient - sign_mismatch(truncated_remainder(left, right), right).cast(left.dtype)

    def floor_divide(self, other: Self | ConstType) -> Self:
        """self // other, rounded toward -inf (Python's and PyTorch's rule).

        Example:
            >>> Tensor([7, -7]).floor_divide(2).tolist()
            [3, -4]
        """
        return self._floor_divide(other, reverse=False)

    def remainder(self, other: Self | ConstType) -> Self:
        """self % other with the sign of the divisor (Python's and PyTorch's rule).

        Example:
            >>> Tensor([7, -7]).remainder(3).tolist()
            [1, 2]
        """
        return self._remainder(other, reverse=False)

    def _remainder(self, other: Self | ConstType, reverse: bool) -> Self:
        left, right = self._operands(other, "remainder", reverse)
        if left.dtype == dtypes.bool:
            raise TypeError("remainder of bool tensors is not supported")
        _check_divisor(left.dtype, other, reverse, "remainder")
        truncated = truncated_remainder(left, right)  # C's remainder: the dividend's sign
        if dtypes.is_unsigned(left.dtype):
            return truncated
        return sign_mismatch(truncated, right)._ternary(Ops.WHERE, truncated._binary(Ops.ADD, right), truncated)

    def fmod(self, other: Self | ConstType) -> Self:
        """C's remainder (sign of the dividend), like `torch.fmod`.

        Example:
            >>> Tensor([7, -7]).fmod(3).tolist()
            [1, -1]
        """
        left, right = self._operands(other, "fmod")
        if left.dtype == dtypes.bool:
            raise TypeError("fmod of bool tensors is not supported")
        _check_divisor(left.dtype, other, False, "fmod")
        return truncated_remainder(left, right)

    def pow(self, exponent: Self | ConstType, reverse: bool = False) -> Self:
        """self ** exponent (integers to negative integer powers are an error, like PyTorch).

        Example:
            >>> Tensor([2.0, 3.0]).pow(2).tolist()
            [4.0, 9.0]
        """
        left, right = self._operands(exponent, "pow", reverse)
        if left.dtype == dtypes.bool:
            raise TypeError("pow of bool tensors is not supported; cast to an integer or float dtype first")
        integer_exponent = not isinstance(exponent, TensorCore) and not dtypes.is_float(left.dtype) and not reverse
        if integer_exponent and scalar_value(exponent) < 0:
            raise RuntimeError(f"integers to negative integer powers are not allowed, got exponent {exponent!r}")
        if dtypes.is_float(left.dtype):
            return left._binary(Ops.POW, right)
        return integer_power(left, right)

    def maximum(self, other: Self | ConstType) -> Self:
        """The elementwise larger value; NaN wins (like PyTorch).

        Example:
            >>> Tensor([1, 5]).maximum(Tensor([3, 2])).tolist()
            [3, 5]
        """
        left, right = self._operands(other, "maximum")
        return _nan_propagating_max(left, right)

    def minimum(self, other: Self | ConstType) -> Self:
        """The elementwise smaller value; NaN wins (like PyTorch).

        Example:
            >>> Tensor([1, 5]).minimum(Tensor([3, 2])).tolist()
            [1, 2]
        """
        left, right = self._operands(other, "minimum")
        if dtypes.is_float(left.dtype):
            return -_nan_propagating_max(-left, -right)
        return right._binary(Ops.CMPLT, left)._ternary(Ops.WHERE, right, left)

    def clamp(self, min: Self | ConstType | None = None, max: Self | ConstType | None = None) -> Self:
        """Values limited to [min, max] (either may be None; min > max gives max everywhere, like PyTorch).

        Example:
            >>> Tensor([-2.0, 0.5, 3.0]).clamp(-1, 1).tolist()
            [-1.0, 0.5, 1.0]
        """
        if min is None and max is None:
            raise ValueError("clamp needs at least one of min and max")
        target = result_type(self, *(bound for bound in (min, max) if bound is not None))
        result = self._cast(target)
        if min is not None:
            result = result.maximum(min)
        if max is not None:
            result = result.minimum(max)
        return result

    def clip(self, min: Self | ConstType | None = None, max: Self | ConstType | None = None) -> Self:
        """Alias of `clamp`."""
        return self.clamp(min, max)

    def lerp(self, end: Self | ConstType, weight: Self | ConstType) -> Self:
        """self + weight * (end - self), exact at weight 1 (PyTorch's two-sided formula).

        Example:
            >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.25).tolist()
            [2.5, 12.5]
        """
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"lerp needs a floating-point tensor, got {self.dtype!r}")
        start, stop = self._operands(end, "lerp")
        difference = stop - start
        low = start + weight * difference
        high = stop - difference * (1 - weight)
        small_weight = (weight < 0.5) if isinstance(weight, TensorCore) else abs(scalar_value(weight)) < 0.5
        if isinstance(small_weight, bool):
            return low if small_weight else high
        return small_weight.where(low, high)

    # ------------------------------------------------------------------------------------------------------------
    # comparisons (bool results)
    # ------------------------------------------------------------------------------------------------------------

    def _compare(self, op: Ops, other: Self | ConstType, what: str, reverse: bool = False) -> Self:
        left, right = self._operands(other, what, reverse)
        return left._binary(op, right)

    def eq(self, other: Self | ConstType) -> Self:
        """self == other, elementwise (a bool tensor)."""
        return self._compare(Ops.CMPEQ, other, "eq")

    def ne(self, other: Self | ConstType) -> Self:
        """self != other, elementwise (a bool tensor)."""
        return self._compare(Ops.CMPNE, other, "ne")

    def lt(self, other: Self | ConstType) -> Self:
        """self < other, elementwise (a bool tensor)."""
        return self._compare(Ops.CMPLT, other, "lt")

    def gt(self, other: Self | ConstType) -> Self:
        """self > other, elementwise (a bool tensor)."""
        return self._compare(Ops.CMPLT, other, "gt", reverse=True)

    def le(self, other: Self | ConstType) -> Self:
        """self <= other, elementwise (a bool tensor; False where either is NaN)."""
        left, right = self._operands(other, "le")
        return left._binary(Ops.CMPLT, right)._binary(Ops.OR, left._binary(Ops.CMPEQ, right))

    def ge(self, other: Self | ConstType) -> Self:
        """self >= other, elementwise (a bool tensor; False where either is NaN)."""
        left, right = self._operands(other, "ge")
        return right._binary(Ops.CMPLT, left)._binary(Ops.OR, left._binary(Ops.CMPEQ, right))

    def __eq__(self, other: object) -> Self:  # type: ignore[override]
        return self.eq(other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> Self:  # type: ignore[override]
        return self.ne(other)  # type: ignore[arg-type]

    __hash__ = object.__hash__  # `==` builds a tensor, so hashing stays by identity (like PyTorch)

    # the operators are the methods themselves (one call less per comparison)
    __lt__, __le__, __gt__, __ge__ = lt, le, gt, ge

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError(
                f"the truth value of a tensor with {self.numel()} elements (shape {self.shape}) is ambiguous; "
                "use .any() or .all()"
            )
        return bool(self.item())

    # ------------------------------------------------------------------------------------------------------------
    # logic and bits
    # ------------------------------------------------------------------------------------------------------------

    def _logical(self, op: Ops, other: Self | ConstType, what: str) -> Self:
        left, right = self._operands(other, what, dtype=dtypes.bool)
        return left._binary(op, right)

    def logical_and(self, other: Self | ConstType) -> Self:
        """Elementwise `and` of the truth values (nonzero is True)."""
        return self._logical(Ops.AND, other, "logical_and")

    def logical_or(self, other: Self | ConstType) -> Self:
        """Elementwise `or` of the truth values (nonzero is True)."""
        return self._logical(Ops.OR, other, "logical_or")

    def logical_xor(self, other: Self | ConstType) -> Self:
        """Elementwise `xor` of the truth values (nonzero is True)."""
        return self._logical(Ops.XOR, other, "logical_xor")

    def logical_not(self) -> Self:
        """Elementwise `not` of the truth values (nonzero is True)."""
        truth = self._cast(dtypes.bool)
        return truth._binary(Ops.CMPNE, self._const(True, self.shape, dtypes.bool, self.device))

    def _bitwise(self, op: Ops, other: Self | ConstType, what: str, reverse: bool = False) -> Self:
        left, right = self._operands(other, what, reverse)
        if dtypes.is_float(left.dtype):
            raise TypeError(f"{what} needs integer or bool operands, got {left.dtype!r}")
        if op in (Ops.SHL, Ops.SHR) and left.dtype == dtypes.bool:
            raise TypeError(f"{what} needs integer operands, got {left.dtype!r}")
        return left._binary(op, right)

    def bitwise_and(self, other: Self | ConstType) -> Self:
        """Elementwise bitwise and (integers and bools)."""
        return self._bitwise(Ops.AND, other, "bitwise_and")

    def bitwise_or(self, other: Self | ConstType) -> Self:
        """Elementwise bitwise or (integers and bools)."""
        return self._bitwise(Ops.OR, other, "bitwise_or")

    def bitwise_xor(self, other: Self | ConstType) -> Self:
        """Elementwise bitwise xor (integers and bools)."""
        return self._bitwise(Ops.XOR, other, "bitwise_xor")

    def bitwise_not(self) -> Self:
        """Elementwise bitwise not (integers; bools: logical not)."""
        if dtypes.is_float(self.dtype):
            raise TypeError(f"bitwise_not needs an integer or bool tensor, got {self.dtype!r}")
        ones = self._const(True if self.dtype == dtypes.bool else -1, self.shape, self.dtype, self.device)
        return self._binary(Ops.XOR, ones)

    def lshift(self, other: Self | ConstType) -> Self:
        """self << other (integers)."""
        return self._bitwise(Ops.SHL, other, "lshift")

    def rshift(self, other: Self | ConstType) -> Self:
        """self >> other (integers; arithmetic shift for signed dtypes)."""
        return self._bitwise(Ops.SHR, other, "rshift")

    # ------------------------------------------------------------------------------------------------------------
    # selection
    # ------------------------------------------------------------------------------------------------------------

    def where(self, if_true: Self | ConstType, if_false: Self | ConstType) -> Self:
        """Select elementwise between two values by a condition; all three broadcast. Two spellings are accepted:

        - `condition.where(x, y)` (tinygrad's): `x` where this condition is nonzero, else `y`. Also
          `Tensor.where(condition, x, y)` and `kiln.tensor.where(condition, x, y)`, like `torch.where`.
        - `x.where(condition, y)` (torch's method form): keeps `x` where the bool tensor `condition` is True, else
          `y`. It is recognized by its dtypes: this tensor is not bool and the first argument is a bool Tensor.
          (A bool tensor the method is called on is always the condition; cast `x` to pick torch's form.)

        Example:
            >>> x = Tensor([-1.0, 2.0]); (x > 0).where(x, 0.0).tolist()
            [0.0, 2.0]
            >>> x.where(x > 0, 0.0).tolist()
            [0.0, 2.0]
        """
        if_true, if_false = (
            type(self)(value, device=self.device) if isinstance(value, np.ndarray) else value
            for value in (if_true, if_false)
        )
        if self.dtype != dtypes.bool and isinstance(if_true, TensorCore) and if_true.dtype == dtypes.bool:
            return if_true.where(self, if_false)  # torch's `x.where(condition, y)`
        target = result_type(if_true, if_false)
        shapes = [self.shape] + [value.shape for value in (if_true, if_false) if isinstance(value, TensorCore)]
        try:
            shape = broadcast_shapes(*shapes)
        except ValueError as error:
            raise ShapeError(f"where: {error}") from None
        condition = self._cast(dtypes.bool)._broadcast_to(shape)
        chosen = self._operand(if_true, target, shape, "where")
        otherwise = self._operand(if_false, target, shape, "where")
        return condition._ternary(Ops.WHERE, chosen, otherwise)

    def masked_fill(self, mask: Self, value: Self | ConstType) -> Self:
        """This tensor with `value` (cast to this dtype) where the bool `mask` (broadcast) is True.

        Example:
            >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
            [0, 2, 0]
        """
        if not isinstance(mask, TensorCore):
            raise TypeError(f"masked_fill mask must be a bool Tensor, got {type(mask).__name__}")
        if mask.dtype != dtypes.bool:
            raise TypeError(f"masked_fill mask must be a bool tensor, got {mask.dtype!r}")
        if isinstance(value, TensorCore) and value.ndim != 0:
            raise ValueError(f"masked_fill value must be a scalar or a 0-dim tensor, got shape {value.shape}")
        try:
            shape = broadcast_shapes(self.shape, mask.shape)
        except ValueError as error:
            raise ShapeError(f"masked_fill: {error}") from None
        if shape != self.shape:
            raise ValueError(
                f"masked_fill: mask of shape {mask.shape} must broadcast to the tensor's shape {self.shape}"
            )
        fill = self._operand(value, self.dtype, shape, "masked_fill")
        return mask._broadcast_to(shape)._ternary(Ops.WHERE, fill, self)

    # ------------------------------------------------------------------------------------------------------------
    # Python operators
    # ------------------------------------------------------------------------------------------------------------

    # `tensor <op> number` first asks the eager lane (`kiln.tensor.realize.eager_lane`): met before on a buffer of the
    # same layout, the op makes no graph node; otherwise the normal path builds one, and the lane learns the op from it

    def __add__(self, other: Self | ConstType) -> Self:
        if (result := eager_lane.pending(self, "add", other)) is not None:
            return result
        return self._learned("add", other, self._sized(self._arithmetic(Ops.ADD, other, "add"), "+", other, False))

    def __radd__(self, other: ConstType) -> Self:
        if (result := eager_lane.pending(self, "radd", other)) is not None:
            return result
        result = self._arithmetic(Ops.ADD, other, "add", reverse=True)
        return self._learned("radd", other, self._sized(result, "+", other, True))

    def __sub__(self, other: Self | ConstType) -> Self:
        if (result := eager_lane.pending(self, "sub", other)) is not None:
            return result
        return self._learned("sub", other, self._sized(self._subtract(other, reverse=False), "-", other, False))

    def __rsub__(self, other: ConstType) -> Self:
        if (result := eager_lane.pending(self, "rsub", other)) is not None:
            return result
        return self._learned("rsub", other, self._sized(self._subtract(other, reverse=True), "-", other, True))

    def __mul__(self, other: Self | ConstType) -> Self:
        if (result := eager_lane.pending(self, "mul", other)) is not None:
            return result
        return self._learned("mul", other, self._sized(self._arithmetic(Ops.MUL, other, "mul"), "*", other, False))

    def __rmul__(self, other: ConstType) -> Self:
        if (result := eager_lane.pending(self, "rmul", other)) is not None:
            return result
        result = self._arithmetic(Ops.MUL, other, "mul", reverse=True)
        return self._learned("rmul", other, self._sized(result, "*", other, True))

    def _learned(self, method: str, other: object, result: Self) -> Self:
        # the normal path's `result` of `self <method> other`: the eager lane learns it when it can launch it
        if type(other) is int or type(other) is float:
            eager_lane.learn(self, method, other, result)
        return result

    def _sized(self, result: Self, op: str, other: object, reverse: bool) -> Self:
        """`result` of `self <op> other`; when this tensor stands for a bound Variable's size (a jitted function's
        Variable argument) and `other` is an int or another such tensor, the result stands for that expression too
        (`x[: v + 1]`)."""
        if isinstance(self, VariableValue) and self._bound_size is not None and isinstance(result, VariableValue):
            result._bound_size = combined_size(op, self, other, reverse)
        return result

    def __truediv__(self, other: Self | ConstType) -> Self:
        if (result := eager_lane.pending(self, "truediv", other)) is not None:
            return result
        return self._learned("truediv", other, self.div(other))

    def __rtruediv__(self, other: ConstType) -> Self:
        if (result := eager_lane.pending(self, "rtruediv", other)) is not None:
            return result
        return self._learned("rtruediv", other, self.div(other, reverse=True))

    def __floordiv__(self, other: Self | ConstType) -> Self:
        return self._floor_divide(other, reverse=False)

    def __rfloordiv__(self, other: ConstType) -> Self:
        return self._floor_divide(other, reverse=True)

    def __mod__(self, other: Self | ConstType) -> Self:
        return self._remainder(other, reverse=False)

    def __rmod__(self, other: ConstType) -> Self:
        return self._remainder(other, reverse=True)

    def __pow__(self, exponent: Self | ConstType) -> Self:
        return self.pow(exponent)

    def __rpow__(self, base: ConstType) -> Self:
        return self.pow(base, reverse=True)

    def __and__(self, other: Self | ConstType) -> Self:
        return self._bitwise(Ops.AND, other, "bitwise_and")

    def __rand__(self, other: ConstType) -> Self:
        return self._bitwise(Ops.AND, other, "bitwise_and", reverse=True)

    def __or__(self, other: Self | ConstType) -> Self:
        return self._bitwise(Ops.OR, other, "bitwise_or")

    def __ror__(self, other: ConstType) -> Self:
        return self._bitwise(Ops.OR, other, "bitwise_or", reverse=True)

    def __xor__(self, other: Self | ConstType) -> Self:
        return self._bitwise(Ops.XOR, other, "bitwise_xor")

    def __rxor__(self, other: ConstType) -> Self:
        return self._bitwise(Ops.XOR, other, "bitwise_xor", reverse=True)

    def __lshift__(self, other: Self | ConstType) -> Self:
        return self._bitwise(Ops.SHL, other, "lshift")

    def __rlshift__(self, other: ConstType) -> Self:
        return self._bitwise(Ops.SHL, other, "lshift", reverse=True)

    def __rshift__(self, other: Self | ConstType) -> Self:
        return self._bitwise(Ops.SHR, other, "rshift")

    def __rrshift__(self, other: ConstType) -> Self:
        return self._bitwise(Ops.SHR, other, "rshift", reverse=True)

    def __invert__(self) -> Self:
        return self.bitwise_not()

    def __neg__(self) -> Self:
        return self.neg()

    def __pos__(self) -> Self:
        return self

    def __abs__(self) -> Self:
        return self.abs()


def _nan_propagating_max(left: TensorT, right: TensorT) -> TensorT:
    """max(left, right) where a NaN operand gives NaN (the MAX primitive ignores NaN, like C's fmax)."""
    largest = left._binary(Ops.MAX, right)
    if not dtypes.is_float(left.dtype):
        return largest
    with_right_nan = right._binary(Ops.CMPNE, right)._ternary(Ops.WHERE, right, largest)
    return left._binary(Ops.CMPNE, left)._ternary(Ops.WHERE, left, with_right_nan)
