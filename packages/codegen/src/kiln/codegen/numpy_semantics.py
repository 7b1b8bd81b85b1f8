"""The IR's value semantics on numpy arrays: ALU ops, casts, bitcasts and the emulated float formats.

This is the vectorized twin of `kiln.uops.alu.exec_alu` (the scalar definition used by constant folding); the
interpreter evaluates every op of a program through it. Values are numpy arrays of a *compute dtype*:
- bool, ints, float16/32/64 compute in their own numpy dtype, so float results are bit-identical to numpy working
  in that dtype (numpy's float16 math rounds through float32; transcendental ops are numpy's own);
- bfloat16, fp8e4m3 and fp8e5m2 (which numpy lacks) hold their exact values in float64 arrays; every op computes
  in float64 and rounds once to the format (round to nearest even), as `kiln.uops.truncate` does;
- `index` computes as int64.

Memory holds *storage* arrays: the numpy dtype itself, or the raw bits (uint16 for bfloat16, uint8 for fp8).
Choices where C leaves a result undefined follow `exec_alu`: integer division or modulo by zero raises
ZeroDivisionError (only for lanes that execute), shift counts outside [0, bits) give 0 (SHR: the sign), float MAX
ignores a NaN operand (fmax), float MOD is fmod, float MULACC is fused (one rounding), float -> int conversion
truncates and wraps around (NaN/inf give the dtype's minimum), NEG on bool is logical not.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from kiln.uops import DType, Ops, dtypes

Array = npt.NDArray[Any]

_NATIVE: dict[DType, type[np.generic]] = {
    dtypes.bool: np.bool_,
    dtypes.int8: np.int8,
    dtypes.uint8: np.uint8,
    dtypes.int16: np.int16,
    dtypes.uint16: np.uint16,
    dtypes.int32: np.int32,
    dtypes.uint32: np.uint32,
    dtypes.int64: np.int64,
    dtypes.uint64: np.uint64,
    dtypes.index: np.int64,
    dtypes.float16: np.float16,
    dtypes.float32: np.float32,
    dtypes.float64: np.float64,
}


@dataclass(frozen=True)
class EmulatedFloat:
    """A float format numpy lacks: values live in float64 arrays, memory holds the raw bit patterns."""

    exponent_bits: int
    mantissa_bits: int
    has_infinity: bool
    max_finite: float
    storage: type[np.generic]
    nan_bits: int

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @functools.cached_property
    def decode_table(self) -> Array:
        """The float64 value of every bit pattern, indexed by the pattern."""
        codes = np.arange(1 << self.bits, dtype=np.int64)
        mantissa_mask = (1 << self.mantissa_bits) - 1
        exponent_max = (1 << self.exponent_bits) - 1
        bias = (1 << (self.exponent_bits - 1)) - 1
        exponent = (codes >> self.mantissa_bits) & exponent_max
        mantissa = (codes & mantissa_mask).astype(np.float64)
        subnormal = np.ldexp(mantissa, 1 - bias - self.mantissa_bits)
        normal = np.ldexp(1.0 + mantissa / (1 << self.mantissa_bits), exponent - bias)
        values = np.where(exponent == 0, subnormal, normal)
        if self.has_infinity:
            top = exponent == exponent_max
            values = np.where(top, np.where(mantissa == 0, np.inf, np.nan), values)
        else:  # the "fn" formats spend only the all-ones pattern on NaN
            values = np.where((exponent == exponent_max) & (mantissa == mantissa_mask), np.nan, values)
        negative = (codes >> (self.bits - 1)) & 1
        values = np.where(negative == 1, -values, values)
        # a NaN carries its own bit pattern in the float64 NaN's payload, so that BITCAST and copies keep it
        tagged = (np.int64(self.nan_prefix) | codes).view(np.float64)
        return np.where(np.isnan(values), tagged, values)

    @property
    def nan_prefix(self) -> int:
        """The float64 NaN standing for this format's NaN pattern p is `nan_prefix | p` (p in the low 16 bits).

        The marker and the format's tag sit in bits 16..28, which a conversion to float32 or float16 (that drops
        the low 29 bits) clears, so a NaN that went through another format is not mistaken for a pattern."""
        return _QUIET_NAN | _NAN_MARKER << 24 | ((self.exponent_bits << 4) | self.mantissa_bits) << 16

    @functools.cached_property
    def _magnitudes(self) -> Array:
        # non-negative values in code order; they grow with the code, so encoding is a binary search
        half = 1 << (self.bits - 1)
        table = self.decode_table[:half]
        finite = table[~np.isnan(table)]
        return np.asarray(finite, dtype=np.float64)

    def round(self, values: Array) -> Array:
        """Round float64 `values` to this format (ties to even), overflowing to inf (NaN without inf)."""
        values = np.asarray(values, dtype=np.float64)
        with np.errstate(all="ignore"):
            _, exponent = np.frexp(values)
            min_exponent = 2 - (1 << (self.exponent_bits - 1))
            quantum = np.maximum(exponent - 1, min_exponent) - self.mantissa_bits
            rounded = np.ldexp(np.rint(np.ldexp(values, -quantum)), quantum)
            overflow_value = np.inf if self.has_infinity else np.nan
            rounded = np.where(np.abs(rounded) > self.max_finite, np.copysign(overflow_value, values), rounded)
            finite = np.isfinite(values)
            if not self.has_infinity:
                return np.where(finite, rounded, np.nan)
            return np.where(finite, rounded, values)

    def encode(self, values: Array) -> Array:
        """Bit patterns of float64 `values` already representable in this format."""
        values = np.asarray(values, dtype=np.float64)
        codes = np.searchsorted(self._magnitudes, np.abs(values)).astype(np.int64)
        codes = np.where(np.signbit(values), codes | (1 << (self.bits - 1)), codes)
        payload = values.view(np.int64)
        own = (payload & np.int64(_PREFIX_MASK)) == np.int64(self.nan_prefix)
        nan_codes = np.where(own, payload & np.int64(0xFFFF), self.nan_bits)
        codes = np.where(np.isnan(values), nan_codes, codes)
        return codes.astype(self.storage)

    def decode(self, bits: Array) -> Array:
        """float64 values of the bit patterns `bits`."""
        return np.asarray(self.decode_table[np.asarray(bits).astype(np.int64)], dtype=np.float64)


_QUIET_NAN = 0x7FF8_0000_0000_0000
_NAN_MARKER = 0b10101  # bits 24..28 of an emulated format's NaN stand-in
_PREFIX_MASK = 0x7FFF_FFFF_FFFF_0000

EMULATED: dict[DType, EmulatedFloat] = {
    dtypes.bfloat16: EmulatedFloat(8, 7, True, float(np.ldexp(2.0 - 2.0**-7, 127)), np.uint16, 0x7FC0),
    # fp8e4m3 is the OCP "fn" variant: no infinity, largest value 448 (kiln.uops.dtype documents the same choice)
    dtypes.fp8e4m3: EmulatedFloat(4, 3, False, 448.0, np.uint8, 0x7F),
    dtypes.fp8e5m2: EmulatedFloat(5, 2, True, 57344.0, np.uint8, 0x7E),
}


def compute_dtype(dtype: DType) -> np.dtype[Any]:
    """The numpy dtype values of the (scalar of) `dtype` are held in while a program runs."""
    scalar = dtype.scalar()
    if scalar in EMULATED:
        return np.dtype(np.float64)
    if scalar not in _NATIVE:
        raise TypeError(f"the interpreter has no value representation for {dtype!r}")
    return np.dtype(_NATIVE[scalar])


def storage_dtype(dtype: DType) -> np.dtype[Any]:
    """The numpy dtype memory of element `dtype` is stored as (raw bits for emulated formats)."""
    scalar = dtype.scalar()
    emulated = EMULATED.get(scalar)
    if emulated is not None:
        return np.dtype(emulated.storage)
    return compute_dtype(scalar)


def to_storage(values: Array, dtype: DType) -> Array:
    """Values of `dtype` in their memory representation."""
    emulated = EMULATED.get(dtype.scalar())
    if emulated is not None:
        return emulated.encode(values)
    return np.asarray(values, dtype=compute_dtype(dtype))


def from_storage(raw: Array, dtype: DType) -> Array:
    """Memory contents of element `dtype` as values."""
    emulated = EMULATED.get(dtype.scalar())
    if emulated is not None:
        return emulated.decode(raw)
    return raw


def constant_array(dtype: DType, value: Any) -> Array:
    """A uniform value (shape (1,) or (1, lanes)) of `dtype` holding the (already truncated) constant `value`."""
    lanes = value if isinstance(value, tuple) else (value,) * dtype.count
    array = np.array(lanes, dtype=compute_dtype(dtype))
    return array.reshape(1, dtype.count) if dtype.count > 1 else array


# ---- casts ---------------------------------------------------------------------------------------------------------


def _float_to_int(values: Array, target: DType) -> Array:
    # C truncation toward zero, then two's-complement wrap-around like kiln.uops.truncate; NaN/inf give the minimum
    wide = np.asarray(values, dtype=np.float64)
    invalid = ~np.isfinite(wide)
    whole = np.fmod(np.trunc(np.where(invalid, 0.0, wide)), 2.0**64)
    whole = np.where(whole >= 2.0**63, whole - 2.0**64, whole)
    whole = np.where(whole < -(2.0**63), whole + 2.0**64, whole)
    result = whole.astype(np.int64).astype(compute_dtype(target))
    minimum = 0 if target.scalar() == dtypes.index else dtypes.min(target)
    return np.where(invalid, np.array(minimum, dtype=result.dtype), result)


def cast(values: Array, source: DType, target: DType) -> Array:
    """Convert `values` of `source` to `target` (CAST)."""
    with np.errstate(all="ignore"):
        if dtypes.is_bool(target):
            return np.asarray(values != 0)
        if dtypes.is_float(source) and dtypes.is_int(target):
            return _float_to_int(values, target)
        emulated = EMULATED.get(target.scalar())
        if emulated is not None:
            return emulated.round(np.asarray(values, dtype=np.float64))
        return np.asarray(values).astype(compute_dtype(target))


def bitcast(values: Array, source: DType, target: DType) -> Array:
    """Reinterpret the bits of `values` (BITCAST); lanes regroup when the scalar sizes differ."""
    if source.nbytes != target.nbytes:
        raise TypeError(f"BITCAST needs equal sizes, got {source!r} -> {target!r}")
    raw = np.ascontiguousarray(to_storage(values, source))
    if source.count == 1:
        raw = raw[..., None]
    reinterpreted = raw.view(storage_dtype(target))
    if target.count == 1:
        reinterpreted = reinterpreted[..., 0]
    return from_storage(reinterpreted, target)


# ---- ALU -----------------------------------------------------------------------------------------------------------


def _check_divisor(divisor: Array, active: Array | None, op: Ops) -> Array:
    zero = divisor == 0
    if active is not None:
        zero = zero & active.reshape(active.shape + (1,) * (zero.ndim - active.ndim))
    if np.any(zero):
        raise ZeroDivisionError(f"integer {op.name} by zero in a running thread")
    return np.where(divisor == 0, np.ones_like(divisor), divisor)


def _int_idiv(a: Array, b: Array, active: Array | None, dtype: DType) -> Array:
    b = _check_divisor(b, active, Ops.IDIV)
    if dtypes.is_unsigned(dtype):
        return np.asarray(a // b)
    remainder = np.fmod(a, b)
    return np.asarray((a - remainder) // b)  # exact: a - remainder is a multiple of b


def _int_mod(a: Array, b: Array, active: Array | None, dtype: DType) -> Array:
    return np.asarray(np.fmod(a, _check_divisor(b, active, Ops.MOD)))


def _int_pow(a: Array, b: Array, active: Array | None, dtype: DType) -> Array:
    negative = b < 0
    result = np.power(a, np.where(negative, np.zeros_like(b), b))
    if not np.any(negative):
        return np.asarray(result)
    _check_divisor(np.where(negative, a, np.ones_like(a)), active, Ops.POW)
    # a negative exponent gives 1 / a**n truncated toward zero: 1 for a == 1, +-1 for a == -1, else 0
    odd = (b & 1) == 1
    inverse = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(result.dtype)
    return np.where(negative, inverse, result)


def _shift(a: Array, b: Array, dtype: DType, left: bool) -> Array:
    bits = dtype.itemsize * 8
    count = b.astype(np.int64)
    outside = (count < 0) | (count >= bits)
    count = np.where(outside, 0, count).astype(a.dtype)
    if left:
        return np.where(outside, np.zeros_like(a), np.left_shift(a, count))
    sign = np.right_shift(a, np.array(bits - 1, dtype=a.dtype))  # 0 or -1 for signed, 0 or 1 for unsigned
    overflow = sign if not dtypes.is_unsigned(dtype) else np.zeros_like(a)
    return np.where(outside, overflow, np.right_shift(a, count))


_MASK32 = np.uint64(0xFFFFFFFF)
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32 (Random123 threefry.h), as exec_alu


def _threefry(counter: Array, key: Array) -> Array:
    counter = counter.astype(np.uint64)
    key = key.astype(np.uint64)
    schedule = [key & _MASK32, key >> np.uint64(32)]
    schedule.append(schedule[0] ^ schedule[1] ^ np.uint64(0x1BD11BDA))
    word0 = ((counter & _MASK32) + schedule[0]) & _MASK32
    word1 = ((counter >> np.uint64(32)) + schedule[1]) & _MASK32
    for group in range(5):
        for rotation in _THREEFRY_ROTATIONS[group % 2]:
            word0 = (word0 + word1) & _MASK32
            rotated = ((word1 << np.uint64(rotation)) | (word1 >> np.uint64(32 - rotation))) & _MASK32
            word1 = rotated ^ word0
        word0 = (word0 + schedule[(group + 1) % 3]) & _MASK32
        word1 = (word1 + schedule[(group + 2) % 3] + np.uint64(group + 1)) & _MASK32
    return np.asarray((word1 << np.uint64(32)) | word0)


def _fused_multiply_add(a: Array, b: Array, c: Array, dtype: DType) -> Array:
    if dtype.scalar() == dtypes.float64:
        # no exact wider type: evaluate lane by lane with exact rational arithmetic
        return np.asarray(np.frompyfunc(_fma_float64, 3, 1)(a, b, c), dtype=np.float64)
    # the product of two <= 24-bit significands is exact in float64; the sum is rounded to odd in float64, which
    # a final rounding to a format at least two bits narrower turns into the correctly rounded fused result
    x, y, z = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    product = x * y
    total = product + z
    virtual = total - product
    error = (product - (total - virtual)) + (z - virtual)
    inexact = (error != 0) & np.isfinite(total)
    toward_zero = np.where(inexact & (np.sign(error) != np.sign(total)), np.nextafter(total, 0.0), total)
    even = (toward_zero.view(np.int64) & 1) == 0
    odd = np.where(inexact & even, np.nextafter(toward_zero, np.copysign(np.inf, toward_zero)), toward_zero)
    return cast(odd, dtypes.float64, dtype)


def _fma_float64(a: float, b: float, c: float) -> float:
    a, b, c = float(a), float(b), float(c)
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return a * b + c  # the IEEE sign of an exact zero sum; a*b cannot be inexact-but-cancelling here
    try:
        return float(exact)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


Kernel = Callable[..., Array]


def _bool_alu(op: Ops) -> Kernel | None:
    table: dict[Ops, Kernel] = {
        Ops.NEG: np.logical_not,
        Ops.TRUNC: lambda a: a,
        Ops.ADD: np.logical_or,
        Ops.OR: np.logical_or,
        Ops.MAX: np.logical_or,
        Ops.MUL: np.logical_and,
        Ops.AND: np.logical_and,
        Ops.XOR: np.logical_xor,
    }
    return table.get(op)


def alu_kernel(op: Ops, dtype: DType, operand: DType) -> Callable[[tuple[Array, ...], Array | None], Array]:
    """A function evaluating ALU `op` (result `dtype`, first value operand `operand`) on numpy arrays.

    The function takes the operand arrays and the mask of running threads (None: all run; used to raise
    ZeroDivisionError only for lanes that execute) and returns the result array.
    """
    kind = operand.scalar()
    comparisons: dict[Ops, Kernel] = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}
    if op in comparisons:
        compare = comparisons[op]
        return lambda values, active: np.asarray(compare(values[0], values[1]))
    if op is Ops.WHERE:
        return lambda values, active: _where(values[0], values[1], values[2])
    emulated = EMULATED.get(kind)
    if dtypes.is_float(kind):
        kernel = _float_kernel(op, dtype)
        if emulated is None:
            return lambda values, active: kernel(*values)
        return lambda values, active: emulated.round(kernel(*values))
    if dtypes.is_bool(kind):
        bool_kernel = _bool_alu(op)
        if bool_kernel is None:
            raise TypeError(f"{op!r} is not defined on bool")
        return lambda values, active: np.asarray(bool_kernel(*values))
    if not dtypes.is_int(kind):
        raise TypeError(f"{op!r} is not defined on {operand!r}")
    return _int_kernel(op, kind)


def _where(condition: Array, if_true: Array, if_false: Array) -> Array:
    if condition.ndim < max(if_true.ndim, if_false.ndim):
        condition = condition[..., None]  # a scalar condition selects whole vectors
    return np.where(condition, if_true, if_false)


def _float_maximum(a: Array, b: Array) -> Array:
    # exec_alu: a NaN operand is ignored (fmax) and -0.0 orders below +0.0; np.fmax returns either zero
    result = np.fmax(a, b)
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a), b, a), result)


def _float_kernel(op: Ops, dtype: DType) -> Kernel:
    table: dict[Ops, Kernel] = {
        Ops.EXP2: np.exp2,
        Ops.LOG2: np.log2,
        Ops.SIN: np.sin,
        Ops.SQRT: np.sqrt,
        Ops.RECIPROCAL: np.reciprocal,
        Ops.NEG: np.negative,
        Ops.TRUNC: np.trunc,
        Ops.ADD: np.add,
        Ops.SUB: np.subtract,
        Ops.MUL: np.multiply,
        Ops.FDIV: np.divide,
        Ops.MOD: np.fmod,
        Ops.MAX: _float_maximum,
        Ops.POW: np.power,
        Ops.MULACC: lambda a, b, c: _fused_multiply_add(a, b, c, dtype),
    }
    if op not in table:
        raise TypeError(f"{op!r} is not defined on floating-point dtype {dtype!r}")
    return table[op]


def _int_kernel(op: Ops, dtype: DType) -> Callable[[tuple[Array, ...], Array | None], Array]:
    checked: dict[Ops, Callable[[Array, Array, Array | None, DType], Array]] = {
        Ops.IDIV: _int_idiv,
        Ops.MOD: _int_mod,
        Ops.POW: _int_pow,
    }
    if op in checked:
        function = checked[op]
        return lambda values, active: function(values[0], values[1], active, dtype)
    plain: dict[Ops, Kernel] = {
        Ops.NEG: np.negative,
        Ops.TRUNC: lambda a: a,
        Ops.ADD: np.add,
        Ops.SUB: np.subtract,
        Ops.MUL: np.multiply,
        Ops.MAX: np.maximum,
        Ops.AND: np.bitwise_and,
        Ops.OR: np.bitwise_or,
        Ops.XOR: np.bitwise_xor,
        Ops.SHL: lambda a, b: _shift(a, b, dtype, left=True),
        Ops.SHR: lambda a, b: _shift(a, b, dtype, left=False),
        Ops.MULACC: lambda a, b, c: a * b + c,
        Ops.THREEFRY: lambda a, b: _threefry(a, b).astype(compute_dtype(dtype)),
    }
    if op not in plain:
        raise TypeError(f"{op!r} is not defined on integer dtype {dtype!r}")
    kernel = plain[op]
    return lambda values, active: np.asarray(kernel(*values))
