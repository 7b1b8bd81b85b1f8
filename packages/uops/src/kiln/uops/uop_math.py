"""`UOpMath`: the ALU builders and Python's operators of `UOp`, a base class of it.

Each method builds its node through `alu` (which checks the operands and picks the result's dtype) and turns a
Python number into a constant of the expression's dtype through `const_like`; `UOp` (uop.py) implements both. `==`
and `!=` stay identity (hash-consed nodes are equal when they are the same object): use `.eq` / `.ne`.
"""

from __future__ import annotations

from typing import Self

from kiln.uops.dtype import ConstType, DType, dtypes
from kiln.uops.ops import Ops

__all__ = ["UOpMath"]


class UOpMath:
    """The arithmetic of an IR node: ALU ops by name (`lt`, `maximum`, `sqrt` ...) and by Python operator."""

    __slots__ = ()
    dtype: DType

    def alu(self, op: Ops, *others: Self) -> Self:
        """The ALU op `op` applied to this node and `others` (UOp builds it)."""
        raise NotImplementedError

    def const_like(self, value: ConstType | tuple[ConstType, ...]) -> Self:
        """A constant of this node's dtype (UOp builds it)."""
        raise NotImplementedError

    def _operand(self, value: object) -> Self:
        # a Python constant joins an expression in the expression's dtype
        if isinstance(value, type(self)):
            return value
        if isinstance(value, float) and not dtypes.is_float(self.dtype):
            raise TypeError(f"cannot combine the float constant {value!r} with a {self.dtype!r} UOp; cast first")
        if isinstance(value, (int, float)):
            return self.const_like(value)
        raise TypeError(f"cannot combine {value!r} of type {type(value).__name__} with a UOp")

    def _require_int(self, what: str) -> None:
        if not (dtypes.is_int(self.dtype) or dtypes.is_bool(self.dtype)):
            raise TypeError(f"{what} needs an integer or bool dtype, got {self.dtype!r}")

    def where(self, if_true: Self | ConstType, if_false: Self | ConstType) -> Self:
        """`if_true` where this bool is true, else `if_false` (WHERE)."""
        anchor = if_true if isinstance(if_true, type(self)) else if_false
        if not isinstance(anchor, type(self)):
            raise TypeError("where needs at least one UOp branch to take the dtype from")
        return self.alu(Ops.WHERE, anchor._operand(if_true), anchor._operand(if_false))

    def lt(self, other: Self | ConstType) -> Self:
        """self < other (CMPLT)."""
        return self.alu(Ops.CMPLT, self._operand(other))

    def ne(self, other: Self | ConstType) -> Self:
        """self != other (CMPNE)."""
        return self.alu(Ops.CMPNE, self._operand(other))

    def eq(self, other: Self | ConstType) -> Self:
        """self == other (CMPEQ)."""
        return self.alu(Ops.CMPEQ, self._operand(other))

    def logical_not(self) -> Self:
        """not self, for a bool UOp."""
        return self.ne(True)

    def maximum(self, other: Self | ConstType) -> Self:
        """max(self, other) (MAX)."""
        return self.alu(Ops.MAX, self._operand(other))

    def minimum(self, other: Self | ConstType) -> Self:
        """min(self, other), built as a WHERE over a comparison."""
        other_uop = self._operand(other)
        return self.lt(other_uop).where(self, other_uop)

    def idiv(self, other: Self | ConstType) -> Self:
        """Integer division truncating toward zero (IDIV, C semantics)."""
        self._require_int("idiv")
        return self.alu(Ops.IDIV, self._operand(other))

    def mod(self, other: Self | ConstType) -> Self:
        """Remainder with the dividend's sign (MOD, C semantics)."""
        self._require_int("mod")
        return self.alu(Ops.MOD, self._operand(other))

    def reciprocal(self) -> Self:
        """1 / self (RECIPROCAL)."""
        return self.alu(Ops.RECIPROCAL)

    def exp2(self) -> Self:
        """2 ** self (EXP2)."""
        return self.alu(Ops.EXP2)

    def log2(self) -> Self:
        """log2(self) (LOG2)."""
        return self.alu(Ops.LOG2)

    def sin(self) -> Self:
        """sin(self) (SIN)."""
        return self.alu(Ops.SIN)

    def sqrt(self) -> Self:
        """sqrt(self) (SQRT)."""
        return self.alu(Ops.SQRT)

    def trunc(self) -> Self:
        """self rounded toward zero (TRUNC)."""
        return self.alu(Ops.TRUNC)

    # ----------------------------------------------------------------------------------------------------------
    # Python operators (== and != stay identity: use .eq / .ne)
    # ----------------------------------------------------------------------------------------------------------

    def __add__(self, other: Self | ConstType) -> Self:
        return self.alu(Ops.ADD, self._operand(other))

    def __radd__(self, other: Self | ConstType) -> Self:
        return self._operand(other).alu(Ops.ADD, self)

    def __sub__(self, other: Self | ConstType) -> Self:
        return self.alu(Ops.SUB, self._operand(other))

    def __rsub__(self, other: Self | ConstType) -> Self:
        return self._operand(other).alu(Ops.SUB, self)

    def __mul__(self, other: Self | ConstType) -> Self:
        return self.alu(Ops.MUL, self._operand(other))

    def __rmul__(self, other: Self | ConstType) -> Self:
        return self._operand(other).alu(Ops.MUL, self)

    def __floordiv__(self, other: Self | ConstType) -> Self:
        return self.idiv(other)

    def __rfloordiv__(self, other: Self | ConstType) -> Self:
        return self._operand(other).idiv(self)

    def __mod__(self, other: Self | ConstType) -> Self:
        return self.mod(other)

    def __rmod__(self, other: Self | ConstType) -> Self:
        return self._operand(other).mod(self)

    def __truediv__(self, other: Self | ConstType) -> Self:
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"'/' builds FDIV and needs a float dtype, got {self.dtype!r}; use '//' for ints")
        return self.alu(Ops.FDIV, self._operand(other))

    def __rtruediv__(self, other: Self | ConstType) -> Self:
        return self._operand(other).__truediv__(self)

    def __pow__(self, other: Self | ConstType) -> Self:
        return self.alu(Ops.POW, self._operand(other))

    def __rpow__(self, other: Self | ConstType) -> Self:
        return self._operand(other).alu(Ops.POW, self)

    def __and__(self, other: Self | ConstType) -> Self:
        self._require_int("'&'")
        return self.alu(Ops.AND, self._operand(other))

    def __rand__(self, other: Self | ConstType) -> Self:
        return self._operand(other).__and__(self)

    def __or__(self, other: Self | ConstType) -> Self:
        self._require_int("'|'")
        return self.alu(Ops.OR, self._operand(other))

    def __ror__(self, other: Self | ConstType) -> Self:
        return self._operand(other).__or__(self)

    def __xor__(self, other: Self | ConstType) -> Self:
        self._require_int("'^'")
        return self.alu(Ops.XOR, self._operand(other))

    def __rxor__(self, other: Self | ConstType) -> Self:
        return self._operand(other).__xor__(self)

    def __lshift__(self, other: Self | ConstType) -> Self:
        self._require_int("'<<'")
        return self.alu(Ops.SHL, self._operand(other))

    def __rlshift__(self, other: Self | ConstType) -> Self:
        return self._operand(other).__lshift__(self)

    def __rshift__(self, other: Self | ConstType) -> Self:
        self._require_int("'>>'")
        return self.alu(Ops.SHR, self._operand(other))

    def __rrshift__(self, other: Self | ConstType) -> Self:
        return self._operand(other).__rshift__(self)

    def __neg__(self) -> Self:
        return self.alu(Ops.NEG)

    def __invert__(self) -> Self:
        self._require_int("'~'")
        return self ^ self.const_like(-1)

    def __lt__(self, other: Self | ConstType) -> Self:
        return self.lt(other)

    def __gt__(self, other: Self | ConstType) -> Self:
        return self._operand(other).lt(self)

    def __le__(self, other: Self | ConstType) -> Self:
        return self._operand(other).lt(self).logical_not()

    def __ge__(self, other: Self | ConstType) -> Self:
        return self.lt(other).logical_not()
