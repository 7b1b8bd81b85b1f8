"""Evaluate one ALU op on Python scalars with the semantics the hardware gives it.

This is the single definition of what an ALU op computes: constant folding uses it, and codegen's interpreter runs
programs with it. Integer results wrap around to the dtype (two's complement); IDIV and MOD truncate toward zero
like C; floats follow IEEE 754 (inf and nan included) and are rounded to the dtype after every op.

Choices where C leaves the result undefined or the hardware differs (documented, tested):
- integer division or modulo by zero raises `ZeroDivisionError` (C: undefined behaviour);
- a shift count outside [0, bits) is clamped like PTX does: SHL gives 0, SHR gives 0 or -1 (the sign);
- float MAX ignores a nan operand like C's `fmax`, CUDA's `fmaxf` and PTX's `max.f32`, and orders -0.0 below
  +0.0 (IEEE 754-2019 maximumNumber), so that it is commutative;
- float MOD is C's `fmod` (sign follows the dividend);
- MULACC on floats is fused (one rounding), like C's `fma` and PTX's `fma.rn`;
- NEG on bool is logical not;
- THREEFRY is Threefry-2x32 with 20 rounds (Salmon et al., SC'11) on uint64 words whose low 32 bits are word 0.
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from kiln.uops.dtype import ConstType, DType, dtypes, truncate
from kiln.uops.ops import GroupOp, Ops


def truncated_div(numerator: int, denominator: int) -> int:
    """Integer division rounding toward zero (C's `/` on integers). Raises ZeroDivisionError for a zero denominator."""
    if denominator == 0:
        raise ZeroDivisionError(f"integer division of {numerator} by zero")
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator < 0) == (denominator < 0) else -quotient


def truncated_mod(numerator: int, denominator: int) -> int:
    """Remainder of `truncated_div` (C's `%`): the numerator's sign, a magnitude below the denominator's."""
    if denominator == 0:
        raise ZeroDivisionError(f"integer modulo of {numerator} by zero")
    return numerator - denominator * truncated_div(numerator, denominator)


# ---- floats --------------------------------------------------------------------------------------------------------


def _float_exp2(x: float) -> float:
    try:
        return math.pow(2.0, x)
    except OverflowError:
        return math.inf


def _float_log2(x: float) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    if x == 0:
        return -math.inf
    return math.log2(x)


def _float_sin(x: float) -> float:
    return math.nan if math.isinf(x) else math.sin(x)


def _float_sqrt(x: float) -> float:
    return math.nan if x < 0 else math.sqrt(x)  # math.sqrt keeps -0.0 and propagates nan


def _float_reciprocal(x: float) -> float:
    return math.copysign(math.inf, x) if x == 0 else 1.0 / x


def _float_trunc(x: float) -> float:
    if math.isinf(x) or math.isnan(x):
        return x
    return math.copysign(float(math.trunc(x)), x)  # copysign keeps -0.0 for trunc(-0.5)


def _float_div(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _float_fmod(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or b == 0:
        return math.nan
    return math.fmod(a, b)


def _float_max(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    if a == b == 0:
        return b if math.copysign(1.0, a) < 0 else a  # -0.0 < +0.0, so MAX stays commutative
    return a if a > b else b


def _is_odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2.0) != 0


def _float_pow(x: float, y: float) -> float:
    """C99 `pow` (Annex F special cases): Python's math.pow raises where C returns inf or nan."""
    try:
        return math.pow(x, y)
    except OverflowError:
        return -math.inf if x < 0 and _is_odd_integer(y) else math.inf
    except ValueError:
        if x == 0:  # pow(+-0, y<0): +-inf for odd integer y, +inf otherwise
            return math.copysign(math.inf, x) if _is_odd_integer(y) else math.inf
        return math.nan  # negative base with a non-integer exponent


def _round_to_odd(value: Fraction) -> float:
    """The float64 nearest `value` toward zero, with its last bit forced to 1 when inexact ("round to odd").

    Rounding this once more to a format at least two bits narrower gives the correctly rounded result, which is how
    a fused multiply-add is evaluated exactly for float32/float16/bfloat16 without a wider float type.
    """
    nearest = float(value)
    if Fraction(nearest) == value:
        return nearest
    toward_zero = nearest if abs(Fraction(nearest)) < abs(value) else math.nextafter(nearest, 0.0)
    away = math.nextafter(toward_zero, math.copysign(math.inf, toward_zero))
    return toward_zero if _float64_bits(toward_zero) & 1 else away


def _float64_bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


def _float_fma(a: float, b: float, c: float, dtype: DType) -> float:
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c  # inf/nan rules need no exact arithmetic
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        # IEEE: an exact zero sum is +0 unless both addends are -0
        product_negative = (math.copysign(1.0, a) * math.copysign(1.0, b)) < 0
        if (a == 0 or b == 0) and c == 0 and product_negative and math.copysign(1.0, c) < 0:
            return -0.0
        return 0.0
    try:
        rounded = float(exact) if dtype.itemsize >= 8 else _round_to_odd(exact)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
    return rounded


# ---- integers ------------------------------------------------------------------------------------------------------


def _bits(dtype: DType) -> int:
    return dtype.itemsize * 8


def _shift_count(count: int, dtype: DType) -> int:
    # the count is read as unsigned and clamped to the width (PTX semantics), which also keeps Python's shifts small
    return count if 0 <= count < _bits(dtype) else _bits(dtype)


def _int_pow(base: int, exponent: int, dtype: DType) -> int:
    if exponent >= 0:
        if dtype.scalar() != dtypes.index:
            return pow(base, exponent, 1 << _bits(dtype))  # modular: the result wraps anyway, and stays small
        if abs(base) > 1 and exponent * base.bit_length() > 1 << 16:
            raise ValueError(f"index power {base}**{exponent} is too large to evaluate")
        return int(base**exponent)
    # a negative exponent gives 1/base**n truncated toward zero
    if base == 0:
        raise ZeroDivisionError(f"integer {base} raised to the negative power {exponent}")
    if base == 1:
        return 1
    if base == -1:
        return -1 if exponent % 2 else 1
    return 0


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32 rotation constants (Random123 threefry.h)
_THREEFRY_PARITY = 0x1BD11BDA  # Skein key-schedule parity constant, 32-bit form
_MASK32 = 0xFFFFFFFF


def threefry2x32(counter: int, key: int) -> int:
    """Threefry-2x32-20 of the 64-bit `counter` under the 64-bit `key`; low 32 bits are word 0 of each."""
    words = [counter & _MASK32, (counter >> 32) & _MASK32]
    key_words = [key & _MASK32, (key >> 32) & _MASK32]
    schedule = [key_words[0], key_words[1], key_words[0] ^ key_words[1] ^ _THREEFRY_PARITY]
    words = [(words[0] + schedule[0]) & _MASK32, (words[1] + schedule[1]) & _MASK32]
    for group in range(5):  # 5 groups of 4 rounds, a key injection after each group
        for rotation in _THREEFRY_ROTATIONS[group % 2]:
            words[0] = (words[0] + words[1]) & _MASK32
            rotated = ((words[1] << rotation) | (words[1] >> (32 - rotation))) & _MASK32
            words[1] = rotated ^ words[0]
        words[0] = (words[0] + schedule[(group + 1) % 3]) & _MASK32
        words[1] = (words[1] + schedule[(group + 2) % 3] + group + 1) & _MASK32
    return (words[1] << 32) | words[0]


# ---- dispatch ------------------------------------------------------------------------------------------------------

_FLOAT_UNARY: dict[Ops, Callable[[float], float]] = {
    Ops.EXP2: _float_exp2,
    Ops.LOG2: _float_log2,
    Ops.SIN: _float_sin,
    Ops.SQRT: _float_sqrt,
    Ops.RECIPROCAL: _float_reciprocal,
    Ops.TRUNC: _float_trunc,
    Ops.NEG: lambda x: -x,
}

# +, - and * of Python's numbers: exact on ints, rounded to float64 on floats (truncate rounds to the dtype)
_ARITHMETIC: dict[Ops, Callable[..., Any]] = {Ops.ADD: operator.add, Ops.SUB: operator.sub, Ops.MUL: operator.mul}

_FLOAT_BINARY: dict[Ops, Callable[[float, float], float]] = {
    **_ARITHMETIC,
    Ops.FDIV: _float_div,
    Ops.MOD: _float_fmod,
    Ops.MAX: _float_max,
    Ops.POW: _float_pow,
}

_INT_BINARY: dict[Ops, Callable[[int, int], int]] = {
    **_ARITHMETIC,
    Ops.IDIV: truncated_div,
    Ops.MOD: truncated_mod,
    Ops.MAX: max,
    Ops.AND: operator.and_,
    Ops.OR: operator.or_,
    Ops.XOR: operator.xor,
}

_COMPARISONS: dict[Ops, Callable[[ConstType, ConstType], bool]] = {
    Ops.CMPLT: operator.lt,
    Ops.CMPNE: operator.ne,
    Ops.CMPEQ: operator.eq,
}


def _exec_scalar(op: Ops, dtype: DType, operands: Sequence[ConstType]) -> ConstType:
    if op in _COMPARISONS:
        return _COMPARISONS[op](operands[0], operands[1])
    if op is Ops.WHERE:
        return truncate(dtype, operands[1] if operands[0] else operands[2])
    if dtypes.is_float(dtype):
        values = [float(v) for v in operands]
        if op in _FLOAT_UNARY:
            return truncate(dtype, _FLOAT_UNARY[op](values[0]))
        if op in _FLOAT_BINARY:
            return truncate(dtype, _FLOAT_BINARY[op](values[0], values[1]))
        if op is Ops.MULACC:
            return truncate(dtype, _float_fma(values[0], values[1], values[2], dtype))
        raise TypeError(f"{op} is not defined on floating-point dtype {dtype}")
    if dtypes.is_bool(dtype):
        flags = [bool(v) for v in operands]
        if op is Ops.NEG:
            return not flags[0]
        if op is Ops.TRUNC:
            return flags[0]
        if op in (Ops.ADD, Ops.OR, Ops.MAX):
            return flags[0] or flags[1]
        if op in (Ops.MUL, Ops.AND):
            return flags[0] and flags[1]
        if op in (Ops.XOR, Ops.CMPNE):
            return flags[0] != flags[1]
        raise TypeError(f"{op} is not defined on dtype {dtype}")
    if not dtypes.is_int(dtype):
        raise TypeError(f"exec_alu needs a numeric or bool dtype, got {dtype} for {op}")
    integers = [int(v) for v in operands]
    if op is Ops.NEG:
        return truncate(dtype, -integers[0])
    if op is Ops.TRUNC:
        return integers[0]
    if op in _INT_BINARY:
        return truncate(dtype, _INT_BINARY[op](integers[0], integers[1]))
    if op is Ops.SHL:
        return truncate(dtype, integers[0] << _shift_count(integers[1], dtype))
    if op is Ops.SHR:
        return truncate(dtype, integers[0] >> _shift_count(integers[1], dtype))
    if op is Ops.POW:
        return truncate(dtype, _int_pow(integers[0], integers[1], dtype))
    if op is Ops.MULACC:
        return truncate(dtype, integers[0] * integers[1] + integers[2])
    if op is Ops.THREEFRY:
        return truncate(dtype, threefry2x32(integers[0] & (2**64 - 1), integers[1] & (2**64 - 1)))
    raise TypeError(f"{op} is not defined on integer dtype {dtype}")


_ARITY: dict[Ops, int] = {
    **dict.fromkeys(GroupOp.Unary, 1),
    **dict.fromkeys(GroupOp.Binary, 2),
    **dict.fromkeys(GroupOp.Ternary, 3),
}


def exec_alu(
    op: Ops, dtype: DType, operands: Sequence[ConstType | tuple[ConstType, ...]]
) -> ConstType | tuple[ConstType, ...]:
    """Evaluate ALU `op` on constant `operands`; `dtype` is the result's dtype (bool for comparisons).

    For a vector dtype every operand is a tuple with one value per lane (or a scalar used for every lane) and the
    result is a tuple. Raises ZeroDivisionError for integer division/modulo by zero, TypeError for an op the dtype
    does not support, ValueError for a wrong operand count or a non-ALU op.

    >>> exec_alu(Ops.IDIV, dtypes.int32, (-7, 2))
    -3
    """
    if op not in _ARITY:
        raise ValueError(f"exec_alu evaluates ALU ops only, got {op}")
    if len(operands) != _ARITY[op]:
        raise ValueError(f"{op} takes {_ARITY[op]} operands, got {len(operands)}: {operands!r}")
    if dtype.count == 1:
        scalars = [v for v in operands if not isinstance(v, tuple)]
        if len(scalars) != len(operands):
            raise ValueError(f"scalar dtype {dtype} got vector operands {operands!r}")
        return _exec_scalar(op, dtype, scalars)
    lanes = dtype.count
    for value in operands:
        if isinstance(value, tuple) and len(value) != lanes:
            raise ValueError(f"{dtype} has {lanes} lanes, got an operand with {len(value)}: {value!r}")
    scalar_dtype = dtype.scalar()
    return tuple(
        _exec_scalar(op, scalar_dtype, [v[lane] if isinstance(v, tuple) else v for v in operands])
        for lane in range(lanes)
    )
