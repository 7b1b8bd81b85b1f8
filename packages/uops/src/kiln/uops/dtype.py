"""Data types of the IR: scalar and vector dtypes, pointers, promotion and value truncation."""

from __future__ import annotations

import builtins
import enum
import functools
import math
import struct
from dataclasses import dataclass
from typing import ClassVar, Final

from kiln.uops.ir_enum import IREnum

ConstType = int | float | bool
"""The Python types a scalar constant of the IR can hold."""


class MemoryScope(IREnum):
    """The address space a pointer of the IR points into (kernel-level memory, not the driver's AddrSpace)."""

    GLOBAL = enum.auto()
    LOCAL = enum.auto()
    REG = enum.auto()


_interned: dict[tuple[object, ...], DType] = {}


@dataclass(frozen=True, eq=False, repr=False)
class DType:
    """A scalar or vector data type.

    `itemsize` is the size in bytes of one scalar lane, `count` the number of vector lanes (1 for a scalar),
    `fmt` the `struct` format character (None where `struct` has none), `priority` orders dtypes for display
    and tie-breaking (promotion itself uses the lattice in `least_upper_dtype`).
    DTypes are interned: equal content is the same object, so equality and hashing are by identity (fast in C).
    """

    name: str
    itemsize: int
    count: int
    fmt: str | None
    priority: int

    def __new__(cls, name: str, itemsize: int, count: int, fmt: str | None, priority: int) -> DType:
        key = (cls, name, itemsize, count, fmt, priority)
        found = _interned.get(key)
        if found is None:
            found = _interned[key] = object.__new__(cls)
        return found

    def __repr__(self) -> str:
        if self.count == 1:
            return f"dtypes.{self.name}"
        return f"dtypes.{self.name}.vec({self.count})"

    def __reduce__(self) -> tuple[object, ...]:
        return (DType, (self.name, self.itemsize, self.count, self.fmt, self.priority))

    @property
    def nbytes(self) -> int:
        """Bytes of the whole (possibly vector) value."""
        return self.itemsize * self.count

    @property
    def min(self) -> ConstType:
        """The smallest value of this dtype's scalar (-inf for floats), like `dtypes.min(dtype)`."""
        return _min_max(self.scalar())[0]

    @property
    def max(self) -> ConstType:
        """The largest value of this dtype's scalar (inf for floats), like `dtypes.max(dtype)`."""
        return _min_max(self.scalar())[1]

    def vec(self, count: int) -> DType:
        """The vector of `count` lanes of this scalar dtype (`count == 1` returns the scalar)."""
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"vector lane count must be a positive int, got {count!r}")
        if self.count != 1:
            raise ValueError(f"cannot make a vector of the vector dtype {self!r}; use .scalar().vec({count})")
        if count == 1 or self.name == "void":
            return self
        return _vector(self, count)

    def scalar(self) -> DType:
        """The scalar dtype of one lane."""
        return self if self.count == 1 else _SCALARS[self.name]

    def ptr(self, size: int = -1, scope: MemoryScope = MemoryScope.GLOBAL) -> PtrDType:
        """A pointer to `size` elements of this dtype (-1: unknown size) in memory `scope`."""
        return PtrDType(self.name, self.itemsize, 1, self.fmt, self.priority, self, scope, size)


@functools.cache
def _vector(scalar: DType, count: int) -> DType:
    return DType(scalar.name, scalar.itemsize, count, scalar.fmt, scalar.priority)


@dataclass(frozen=True, eq=False, repr=False)
class PtrDType(DType):
    """A pointer dtype: `base` is the element dtype (may be a vector), `scope` its memory, `size` elements (-1 unknown).

    `count > 1` makes a vector of pointers.
    """

    base: DType
    scope: MemoryScope
    size: int

    def __new__(
        cls,
        name: str,
        itemsize: int,
        count: int,
        fmt: str | None,
        priority: int,
        base: DType,
        scope: MemoryScope,
        size: int,
    ) -> PtrDType:
        key = (cls, name, itemsize, count, fmt, priority, base, scope, size)
        found = _interned.get(key)
        if found is None:
            found = _interned[key] = object.__new__(cls)
        assert isinstance(found, PtrDType)
        return found

    def __repr__(self) -> str:
        args = []
        if self.size != -1 or self.scope is not MemoryScope.GLOBAL:
            args.append(str(self.size))
        if self.scope is not MemoryScope.GLOBAL:
            args.append(repr(self.scope))
        text = f"{self.base!r}.ptr({', '.join(args)})"
        return text if self.count == 1 else f"{text}.vec({self.count})"

    def __reduce__(self) -> tuple[object, ...]:
        return (
            PtrDType,
            (self.name, self.itemsize, self.count, self.fmt, self.priority, self.base, self.scope, self.size),
        )

    def vec(self, count: int) -> DType:
        """A vector of `count` pointers."""
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"vector lane count must be a positive int, got {count!r}")
        if self.count != 1:
            raise ValueError(f"cannot make a vector of the vector dtype {self!r}")
        if count == 1:
            return self
        return PtrDType(self.name, self.itemsize, count, self.fmt, self.priority, self.base, self.scope, self.size)

    def scalar(self) -> PtrDType:
        """The single pointer of one lane."""
        return self if self.count == 1 else self.base.ptr(self.size, self.scope)

    def ptr(self, size: int = -1, scope: MemoryScope = MemoryScope.GLOBAL) -> PtrDType:
        """Pointers to pointers do not exist in the IR."""
        raise TypeError(f"cannot make a pointer to the pointer dtype {self!r}")


def _scalar(name: str, itemsize: int, fmt: str | None, priority: int) -> DType:
    return DType(name, itemsize, 1, fmt, priority)


class dtypes:
    """The namespace of the IR's dtypes and dtype helpers."""

    void: Final = _scalar("void", 0, None, -2)
    index: Final = _scalar("index", 8, None, -1)
    bool: Final = _scalar("bool", 1, "?", 0)
    int8: Final = _scalar("int8", 1, "b", 1)
    uint8: Final = _scalar("uint8", 1, "B", 2)
    int16: Final = _scalar("int16", 2, "h", 3)
    uint16: Final = _scalar("uint16", 2, "H", 4)
    int32: Final = _scalar("int32", 4, "i", 5)
    uint32: Final = _scalar("uint32", 4, "I", 6)
    int64: Final = _scalar("int64", 8, "q", 7)
    uint64: Final = _scalar("uint64", 8, "Q", 8)
    fp8e4m3: Final = _scalar("fp8e4m3", 1, None, 9)
    fp8e5m2: Final = _scalar("fp8e5m2", 1, None, 10)
    float16: Final = _scalar("float16", 2, "e", 11)
    bfloat16: Final = _scalar("bfloat16", 2, None, 12)
    float32: Final = _scalar("float32", 4, "f", 13)
    float64: Final = _scalar("float64", 8, "d", 14)

    half: Final = float16
    float: Final = float32
    double: Final = float64
    int: Final = int32
    long: Final = int64
    uchar: Final = uint8

    default_float: ClassVar[DType] = float32
    default_int: ClassVar[DType] = int32

    all: Final = (
        bool,
        int8,
        uint8,
        int16,
        uint16,
        int32,
        uint32,
        int64,
        uint64,
        fp8e4m3,
        fp8e5m2,
        float16,
        bfloat16,
        float32,
        float64,
    )
    floats: Final = (fp8e4m3, fp8e5m2, float16, bfloat16, float32, float64)
    signed_ints: Final = (int8, int16, int32, int64)
    unsigned_ints: Final = (uint8, uint16, uint32, uint64)
    ints: Final = (int8, uint8, int16, uint16, int32, uint32, int64, uint64)

    @staticmethod
    def is_float(dtype: DType) -> builtins.bool:
        """True for floating-point dtypes (vectors by their lane dtype)."""
        return dtype.scalar() in _FLOAT_SET

    @staticmethod
    def is_int(dtype: DType) -> builtins.bool:
        """True for integer dtypes including `index` (not bool)."""
        return dtype.scalar() in _INT_SET

    @staticmethod
    def is_unsigned(dtype: DType) -> builtins.bool:
        """True for unsigned integer dtypes."""
        return dtype.scalar() in _UNSIGNED_SET

    @staticmethod
    def is_bool(dtype: DType) -> builtins.bool:
        """True for bool (and vectors of bool)."""
        return dtype.scalar() == _BOOL

    @staticmethod
    def min(dtype: DType) -> ConstType:
        """The smallest value of `dtype` (-inf for floats; `index` uses the int64 range)."""
        return _min_max(dtype)[0]

    @staticmethod
    def max(dtype: DType) -> ConstType:
        """The largest value of `dtype` (inf for floats; `index` uses the int64 range)."""
        return _min_max(dtype)[1]

    @staticmethod
    def finfo(dtype: DType) -> tuple[builtins.int, builtins.int]:
        """(exponent bits, mantissa bits) of a floating-point dtype."""
        scalar = dtype.scalar()
        if scalar not in _FLOAT_FORMATS:
            raise TypeError(f"finfo expects a floating-point dtype, got {dtype!r}")
        spec = _FLOAT_FORMATS[scalar]
        return spec.exponent_bits, spec.mantissa_bits

    @staticmethod
    def from_name(name: str) -> DType:
        """The scalar dtype called `name` (aliases such as 'half' accepted)."""
        found = _BY_NAME.get(name)
        if found is None:
            raise ValueError(f"unknown dtype name {name!r}; expected one of {sorted(_BY_NAME)}")
        return found

    @staticmethod
    def from_py(value: object) -> DType:
        """The dtype a Python value gets: bool, the default int, the default float; tuples/lists by their elements.

        An int outside the default int's range gets int64 (as PyTorch infers); OverflowError beyond int64's range.
        """
        if isinstance(value, bool):
            return _BOOL
        if isinstance(value, int):
            low, high = _min_max(dtypes.default_int)
            if low <= value <= high:
                return dtypes.default_int
            if -(1 << 63) <= value < (1 << 63):
                return dtypes.int64
            raise OverflowError(
                f"Python int {value} does not fit int64 (the widest inferred integer dtype); "
                "pass dtype=dtypes.uint64 for values up to 2**64 - 1"
            )
        if isinstance(value, float):
            return dtypes.default_float
        if isinstance(value, (tuple, list)):
            if len(value) == 0:
                return dtypes.default_float
            return least_upper_dtype(*(dtypes.from_py(item) for item in value))
        raise TypeError(f"cannot infer a dtype from {value!r} of type {type(value).__name__}")


_BOOL: Final = dtypes.bool
_SCALARS: dict[str, DType] = {d.name: d for d in (dtypes.void, dtypes.index, *dtypes.all)}
_BY_NAME: dict[str, DType] = {
    **_SCALARS,
    "half": dtypes.half,
    "float": dtypes.float,
    "double": dtypes.double,
    "int": dtypes.int,
    "long": dtypes.long,
    "uchar": dtypes.uchar,
}
_FLOAT_SET: frozenset[DType] = frozenset(dtypes.floats)
_INT_SET: frozenset[DType] = frozenset((*dtypes.ints, dtypes.index))
_UNSIGNED_SET: frozenset[DType] = frozenset(dtypes.unsigned_ints)


# ---------------------------------------------------------------------------------------------------------------
# promotion
# ---------------------------------------------------------------------------------------------------------------

# The promotion lattice: each dtype lists the dtypes directly above it. It follows PyTorch where PyTorch has a rule
# (bool < ints < floats, int8 + uint8 -> int16, float16 + bfloat16 -> float32, int + float -> that float) and
# extends it where PyTorch raises (uint16/32/64 mixed with signed ints, fp8 mixed with other dtypes):
#   * uintN + intM -> the smallest signed int holding both ranges (uint16 + int8 -> int32);
#     uint64 + any signed int has no such int and no least float above both, so it raises TypeError (as torch does).
#   * fp8e4m3 + fp8e5m2 -> float16 (both embed exactly in float16); fp8 + float16 -> float16;
#     fp8 + bfloat16 -> float32 (the lattice keeps fp8 below float16 only, so the join is associative).
#   * index sits above every int and bool and below every float; it is only chosen if an operand is index.
_PROMOTION_EDGES: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.int16: (dtypes.int32,),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.int32: (dtypes.int64,),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.int64: (dtypes.index,),
    dtypes.uint64: (dtypes.index,),
    dtypes.index: (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.bfloat16),
    dtypes.fp8e4m3: (dtypes.float16,),
    dtypes.fp8e5m2: (dtypes.float16,),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


@functools.cache
def _upper_set(dtype: DType) -> frozenset[DType]:
    above = {dtype}
    for parent in _PROMOTION_EDGES[dtype]:
        above |= _upper_set(parent)
    return frozenset(above)


def least_upper_dtype(*dtype_list: DType) -> DType:
    """The dtype that values of all `dtype_list` promote to (PyTorch's type promotion, extended; see module notes).

    Vector dtypes promote lane-wise and must have equal lane counts.
    """
    if not dtype_list:
        raise ValueError("least_upper_dtype needs at least one dtype")
    counts = {d.count for d in dtype_list}
    if len(counts) != 1:
        raise ValueError(f"cannot promote vectors of different lane counts: {dtype_list!r}")
    scalars = {d.scalar() for d in dtype_list}
    for scalar in scalars:
        if scalar not in _PROMOTION_EDGES or isinstance(scalar, PtrDType):
            raise TypeError(f"cannot promote {scalar!r}; expected scalar dtypes from dtypes.all or dtypes.index")
    result = _least_upper_scalar(frozenset(scalars))
    return result.vec(counts.pop())


@functools.cache
def _least_upper_scalar(scalars: frozenset[DType]) -> DType:
    common = frozenset.intersection(*(_upper_set(s) for s in scalars))
    if dtypes.index not in scalars:
        # index is the abstract integer of shapes; a join of concrete dtypes never invents it
        common = common - {dtypes.index}
    minimal = [c for c in common if all(c == other or c not in _upper_set(other) for other in common)]
    if len(minimal) != 1:
        names = ", ".join(sorted(repr(s) for s in scalars))
        raise TypeError(f"no promotion rule for {names}: cast one operand explicitly (PyTorch has no rule either)")
    return minimal[0]


# ---------------------------------------------------------------------------------------------------------------
# min / max and truncation
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FloatFormat:
    exponent_bits: int
    mantissa_bits: int
    has_infinity: bool
    max_finite: float

    @property
    def min_exponent(self) -> int:
        # exponent of the smallest normal number, 2**min_exponent
        return 2 - (1 << (self.exponent_bits - 1))


def _ieee_max(exponent_bits: int, mantissa_bits: int) -> float:
    bias = (1 << (exponent_bits - 1)) - 1
    return math.ldexp(2.0 - math.ldexp(1.0, -mantissa_bits), bias)


_FLOAT_FORMATS: dict[DType, _FloatFormat] = {
    # fp8e4m3 is the "fn" variant (OCP FP8 spec): no infinity, 0x7f/0xff are NaN, so the largest value is 1.75 * 2**8
    dtypes.fp8e4m3: _FloatFormat(4, 3, False, 448.0),
    dtypes.fp8e5m2: _FloatFormat(5, 2, True, _ieee_max(5, 2)),
    dtypes.float16: _FloatFormat(5, 10, True, _ieee_max(5, 10)),
    dtypes.bfloat16: _FloatFormat(8, 7, True, _ieee_max(8, 7)),
    dtypes.float32: _FloatFormat(8, 23, True, _ieee_max(8, 23)),
    dtypes.float64: _FloatFormat(11, 52, True, _ieee_max(11, 52)),
}


def _min_max(dtype: DType) -> tuple[ConstType, ConstType]:
    scalar = dtype.scalar()
    if scalar == _BOOL:
        return False, True
    if scalar in _FLOAT_SET:
        return -math.inf, math.inf
    if scalar == dtypes.index:
        return -(1 << 63), (1 << 63) - 1
    if scalar in _UNSIGNED_SET:
        return 0, (1 << (8 * scalar.itemsize)) - 1
    if scalar in _INT_SET:
        bits = 8 * scalar.itemsize
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    raise TypeError(f"{dtype!r} has no value range")


def _round_float(value: float, spec: _FloatFormat) -> float:
    """Round a finite float to the nearest value of `spec`, ties to even, overflowing to inf (or NaN without inf)."""
    if value == 0.0:
        return value
    mantissa, exponent = math.frexp(abs(value))  # abs(value) = mantissa * 2**exponent, 0.5 <= mantissa < 1
    digits = int(math.ldexp(mantissa, 53))  # exact: a double has 53 significant bits
    low_exponent = exponent - 53  # abs(value) = digits * 2**low_exponent
    # the spacing of representable values around abs(value): 2**(E - mantissa_bits), E clamped to the normal range
    quantum = max(exponent - 1, spec.min_exponent) - spec.mantissa_bits
    shift = quantum - low_exponent
    if shift > 0:
        if shift > 54:
            rounded = 0
        else:
            rounded, remainder = digits >> shift, digits & ((1 << shift) - 1)
            half = 1 << (shift - 1)
            if remainder > half or (remainder == half and rounded & 1):
                rounded += 1
        try:
            magnitude = math.ldexp(rounded, quantum)
        except OverflowError:
            magnitude = math.inf  # beyond float64, hence beyond every smaller format
    else:
        magnitude = abs(value)
    if magnitude > spec.max_finite:
        magnitude = math.inf if spec.has_infinity else math.nan
    return math.copysign(magnitude, value)


def _to_float64(value: ConstType) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _exact_int_to_float(value: int, spec: _FloatFormat) -> float:
    # ints beyond 2**53 would be rounded twice (to float64, then to the target): round the integer exactly first
    magnitude = abs(value)
    keep = spec.mantissa_bits + 1
    extra = magnitude.bit_length() - keep
    if extra > 0:
        rounded, remainder = magnitude >> extra, magnitude & ((1 << extra) - 1)
        half = 1 << (extra - 1)
        if remainder > half or (remainder == half and rounded & 1):
            rounded += 1
        magnitude = rounded << extra
    result = _to_float64(magnitude)
    if result > spec.max_finite:
        result = math.inf if spec.has_infinity else math.nan
    return result if value >= 0 else -result


def truncate(dtype: DType, value: ConstType) -> ConstType:
    """The value a store of `value` into `dtype` keeps.

    Integers wrap around (two's complement); floats to ints truncate toward zero (NaN/inf give the dtype's minimum,
    as x86 does); floats round to nearest, ties to even, overflowing to inf (NaN for fp8e4m3, which has no inf);
    `index` is an exact integer; bool is `value != 0`.
    """
    scalar = dtype.scalar()
    if scalar == _BOOL:
        return bool(value)
    spec = _FLOAT_FORMATS.get(scalar)
    if spec is not None:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > (1 << 53):
            return _exact_int_to_float(value, spec)
        number = _to_float64(value)
        if scalar == dtypes.float64 or not math.isfinite(number):
            if math.isinf(number) and not spec.has_infinity:
                return math.nan
            return number
        if scalar.fmt is not None:
            try:
                return struct.unpack(scalar.fmt, struct.pack(scalar.fmt, number))[0]  # type: ignore[no-any-return]
            except OverflowError:
                return math.copysign(math.inf, number)
        return _round_float(number, spec)
    if scalar in _INT_SET:
        if isinstance(value, float):
            if not math.isfinite(value):
                return _min_max(scalar)[0] if scalar != dtypes.index else 0
            value = int(value)  # C conversion truncates toward zero
        value = int(value)
        if scalar == dtypes.index:
            return value
        bits = 8 * scalar.itemsize
        value &= (1 << bits) - 1
        if scalar not in _UNSIGNED_SET and value >> (bits - 1):
            value -= 1 << bits
        return value
    raise TypeError(f"cannot truncate a value to {dtype!r}; expected a bool, int or float dtype")
