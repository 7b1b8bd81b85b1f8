"""Small float formats a renderer cannot compute in (fp8, float16), emulated: values in float32, memory in raw bits.

Used by the dtype emulation pass (`dtype_emulation.py`) for the formats in `Renderer.emulated_dtypes`. Every value
of an emulated dtype is carried as the float32 of the same value; memory keeps the
format's bit pattern (uint8 / uint16): a load decodes the bits, a store encodes the value (round to nearest even),
and every ALU result is rounded back to the format, so the program computes what a native ALU of that format would
(one rounding per op). Computing an op in float32 and rounding once more is exact for add, sub, mul, div and sqrt
because float32 carries more than twice the format's precision plus two bits; a float64 value is encoded straight
from float64 (no double rounding).

The semantics are those of `kiln.codegen.numpy_semantics` (the interpreter): overflow gives inf (fp8e5m2, float16)
or NaN (fp8e4m3, which has no infinity); a NaN computed or converted to fp8 becomes the format's NaN pattern, to
float16 keeps its sign and the top of its payload (numpy's conversion). Decoding uses float32 subnormals, so
flush-to-zero modes must be off (no fast-math).

BITCAST and copies keep every bit. A BITCAST of a loaded value reads the loaded bits (no float round trip); any
other fp8 NaN keeps its pattern through float32 as the interpreter keeps it through float64: decoding puts the
whole fp8 code in the low byte of a quiet float32 NaN tagged with the format (`FloatFormat.nan_carrier`), and a
store or BITCAST gives that code back (float16 NaNs keep their payload the way numpy converts them, which
round-trips). Arithmetic and casts give the format's NaN pattern.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass

from kiln.uops import DType, GroupOp, Ops, PtrDType, UOp, dtypes, truncate


@dataclass(frozen=True)
class FloatFormat:
    """A small binary float format: field widths, whether it has infinities, how a NaN is stored."""

    dtype: DType
    storage: DType
    exponent_bits: int
    mantissa_bits: int
    has_infinity: bool
    nan_bits: int
    keeps_nan_payload: bool
    """float16: a NaN keeps its sign and payload top bits (numpy); fp8: every NaN becomes `nan_bits`."""

    @property
    def bits(self) -> int:
        return self.storage.itemsize * 8

    @property
    def bias(self) -> int:
        return (1 << (self.exponent_bits - 1)) - 1

    @property
    def exponent_mask(self) -> int:
        return ((1 << self.exponent_bits) - 1) << self.mantissa_bits

    @property
    def max_finite_code(self) -> int:
        """The bit pattern of the largest finite value."""
        if self.has_infinity:
            return self.exponent_mask - 1
        return self.exponent_mask | ((1 << self.mantissa_bits) - 2)  # the all-ones pattern is NaN

    @property
    def nan_carrier(self) -> int:
        """The float32 NaN (bits, sign excluded) that carries this fp8 format's NaN pattern p as `nan_carrier | p`.

        Quiet, with a marker and the format's field widths in bits 8..20, so a NaN of another format or one
        computed by float32 arithmetic (x86's default NaN 0xFFC00000) is not read as a pattern."""
        return 0x7FC00000 | _NAN_MARKER << 16 | ((self.exponent_bits << 4) | self.mantissa_bits) << 8

    def is_nan_code(self, magnitude: UOp) -> UOp:
        """Whether the code with magnitude bits `magnitude` (sign cleared, uint32) is a NaN of this format."""
        if self.has_infinity:
            return UOp.const(magnitude.dtype, self.exponent_mask).lt(magnitude)
        return magnitude.eq(UOp.const(magnitude.dtype, (1 << (self.bits - 1)) - 1))

    @functools.cached_property
    def _codes_by_value(self) -> dict[float, int]:
        return {value: code for code in range(1 << self.bits) if (value := decode_python(self, code)) == value}

    def encode_constant(self, value: float) -> int:
        """The bit pattern of `value` rounded to this format (constants of a program)."""
        value = float(truncate(self.dtype, value))
        if value != value:
            return self.nan_bits
        if value == 0:  # 0.0 == -0.0 as a dict key: the sign decides
            return (1 << (self.bits - 1)) if struct.pack(">d", value)[0] & 0x80 else 0
        return self._codes_by_value[value]


_NAN_MARKER = 0b10101
"""Bits 16..20 of a float32 NaN carrying an fp8 pattern (`FloatFormat.nan_carrier`)."""

FLOAT_FORMATS: dict[DType, FloatFormat] = {
    # fp8e4m3 is the OCP "fn" variant kiln.uops defines: no infinity, 0x7f/0xff are NaN
    dtypes.fp8e4m3: FloatFormat(dtypes.fp8e4m3, dtypes.uint8, 4, 3, False, 0x7F, False),
    dtypes.fp8e5m2: FloatFormat(dtypes.fp8e5m2, dtypes.uint8, 5, 2, True, 0x7E, False),
    dtypes.float16: FloatFormat(dtypes.float16, dtypes.uint16, 5, 10, True, 0x7E00, True),
}
"""The formats `emulate_float_formats` knows (bfloat16 has its own formulas in `dtype_emulation`)."""


def decode_python(fmt: FloatFormat, code: int) -> float:
    """The value of bit pattern `code` (used for constants and by tests)."""
    sign = -1.0 if code >> (fmt.bits - 1) else 1.0
    exponent = (code >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    mantissa = code & ((1 << fmt.mantissa_bits) - 1)
    if fmt.has_infinity and exponent == (1 << fmt.exponent_bits) - 1:
        return sign * float("inf") if mantissa == 0 else float("nan")
    if not fmt.has_infinity and (code & ((1 << (fmt.bits - 1)) - 1)) == (1 << (fmt.bits - 1)) - 1:
        return float("nan")
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - fmt.bias - fmt.mantissa_bits)
    return sign * (1 + mantissa / (1 << fmt.mantissa_bits)) * 2.0 ** (exponent - fmt.bias)


# ---- the conversions as uop graphs --------------------------------------------------------------------------------


def decode(fmt: FloatFormat, bits: UOp) -> UOp:
    """The float32 value of the scalar bit pattern `bits` (dtype `fmt.storage`)."""
    u32 = dtypes.uint32
    magnitude = bits.cast(u32) & ((1 << (fmt.bits - 1)) - 1)
    shift = 23 - fmt.mantissa_bits
    # exponent and mantissa fields placed where float32 keeps them read as float32 with bias 127, then rescaled:
    # exact for normal and subnormal values (a float32 subnormal times a power of two)
    scaled = (magnitude << shift).bitcast(dtypes.float32) * UOp.const(dtypes.float32, 2.0 ** (127 - fmt.bias))
    if fmt.keeps_nan_payload:
        special = (magnitude & fmt.exponent_mask).eq(UOp.const(u32, fmt.exponent_mask))
        unsigned = special.where((magnitude << shift) | 0x7F800000, scaled.bitcast(u32))  # inf, or NaN's payload
    else:
        unsigned = scaled.bitcast(u32)
        if fmt.has_infinity:
            infinite = magnitude.eq(UOp.const(u32, fmt.exponent_mask))
            unsigned = infinite.where(UOp.const(u32, 0x7F800000), unsigned)
        # a NaN carries its whole code (sign included) in a tagged float32 NaN, so encoding can give it back
        unsigned = fmt.is_nan_code(magnitude).where(bits.cast(u32) | fmt.nan_carrier, unsigned)
    sign = (bits.cast(u32) >> (fmt.bits - 1)) << 31
    return (unsigned | sign).bitcast(dtypes.float32)


def _normal_code(fmt: FloatFormat, magnitude: int, source_mantissa: int, source_bias: int) -> int:
    # the integer form of the normal-range rounding `encode` builds as uops
    shift = source_mantissa - fmt.mantissa_bits
    rounded = magnitude + (1 << (shift - 1)) - 1 + ((magnitude >> shift) & 1)
    return (rounded >> shift) - ((source_bias - fmt.bias) << fmt.mantissa_bits)


@functools.cache
def _overflow_threshold(fmt: FloatFormat, source_mantissa: int, source_bias: int) -> int:
    """The smallest source magnitude (bits) that rounds beyond the largest finite value of `fmt`."""
    low, high = 0, ((2 * source_bias + 1) << source_mantissa) + 1  # high: just above the source's infinity
    while low < high:
        middle = (low + high) // 2
        if _normal_code(fmt, middle, source_mantissa, source_bias) > fmt.max_finite_code:
            high = middle
        else:
            low = middle + 1
    return low


def encode(fmt: FloatFormat, value: UOp, keep_nan_pattern: bool = False) -> UOp:
    """The bit pattern (dtype `fmt.storage`) nearest to the scalar float32 or float64 `value`, ties to even.

    A NaN becomes `fmt.nan_bits`, or with `keep_nan_pattern` (stores and BITCASTs: data movement) the fp8 pattern
    a decoded NaN carries; float16 NaNs keep their payload either way."""
    source = value.dtype
    assert source in (dtypes.float32, dtypes.float64), f"encode takes a float32 or float64 scalar, got {source}"
    word, source_mantissa, source_bias = (
        (dtypes.uint64, 52, 1023) if source == dtypes.float64 else (dtypes.uint32, 23, 127)
    )
    source_bits = word.itemsize * 8
    bits = value.bitcast(word)
    magnitude = bits & ((1 << (source_bits - 1)) - 1)
    sign = (bits >> (source_bits - fmt.bits)) & (1 << (fmt.bits - 1))
    infinity = (2 * source_bias + 1) << source_mantissa
    is_nan = UOp.const(word, infinity).lt(magnitude)
    overflow = UOp.const(word, _overflow_threshold(fmt, source_mantissa, source_bias) - 1).lt(magnitude)
    # normal results: round the magnitude's bits to nearest even at the format's last mantissa bit and rebias;
    # a carry out of the mantissa moves into the exponent, as it should
    shift = source_mantissa - fmt.mantissa_bits
    rounded = magnitude + ((1 << (shift - 1)) - 1) + ((magnitude >> shift) & 1)
    normal = (rounded >> shift) - ((source_bias - fmt.bias) << fmt.mantissa_bits)
    # subnormal results: scale so one subnormal step is 1 and round to an integer (adding 2**mantissa rounds to
    # nearest even); the result may be the smallest normal pattern, which is right
    smallest_normal = (source_bias + 1 - fmt.bias) << source_mantissa
    scale = UOp.const(source, 2.0 ** (fmt.bias - 1 + fmt.mantissa_bits))
    magic = UOp.const(source, 2.0**source_mantissa)
    subnormal = ((magnitude.bitcast(source) * scale + magic) - magic).cast(word)
    code = magnitude.lt(UOp.const(word, smallest_normal)).where(subnormal, normal)
    if fmt.has_infinity:
        code = overflow.where(UOp.const(word, fmt.exponent_mask), code) | sign
    else:  # no infinity: too large becomes NaN (without a sign, like the interpreter's encoding)
        code = overflow.where(UOp.const(word, fmt.nan_bits), code | sign)
    if fmt.keeps_nan_payload:
        payload = (magnitude & ((1 << source_mantissa) - 1)) >> shift
        payload = payload.eq(UOp.const(word, 0)).where(UOp.const(word, 1), payload)
        nan = sign | fmt.exponent_mask | payload
    elif keep_nan_pattern and source == dtypes.float32:
        # the value is this format's, decoded: its NaNs carry their pattern (`nan_carrier`), others get the format's
        carries = (bits & 0x7FFFFF00).eq(UOp.const(word, fmt.nan_carrier))
        nan = carries.where(bits & 0xFF, UOp.const(word, fmt.nan_bits))
    else:  # arithmetic and conversions give the format's NaN (a float64 NaN carries no fp8 pattern anyway)
        nan = UOp.const(word, fmt.nan_bits)
    return is_nan.where(nan, code).cast(fmt.storage)


# ---- the rewrite of a kernel graph ---------------------------------------------------------------------------------

_EXACT_OPS = frozenset({Ops.MAX, Ops.NEG, Ops.TRUNC, Ops.WHERE})
"""ALU ops whose float32 result is already a value of the operands' format (no rounding needed)."""


class _Emulation:
    def __init__(self, formats: dict[DType, FloatFormat]) -> None:
        self.formats = formats
        self.loaded_bits: dict[UOp, UOp] = {}
        """The raw LOAD (storage bits) of each emulated LOAD of the kernel: a BITCAST of the value reads them."""

    def format_of(self, dtype: DType) -> FloatFormat | None:
        base = dtype.base if isinstance(dtype, PtrDType) else dtype
        return self.formats.get(base.scalar())

    def storage_dtype(self, dtype: DType) -> DType:
        if isinstance(dtype, PtrDType):
            fmt = self.format_of(dtype)
            if fmt is None:
                return dtype
            pointer = fmt.storage.vec(dtype.base.count).ptr(dtype.size, dtype.scope)
            return pointer.vec(dtype.count) if dtype.count > 1 else pointer
        return dtypes.float32.vec(dtype.count) if self.format_of(dtype) is not None else dtype

    def lanes(self, value: UOp, function: Callable[[UOp], UOp]) -> UOp:
        if value.dtype.count == 1:
            return function(value)
        return UOp.vectorize(*(function(value.gep(lane)) for lane in range(value.dtype.count)))

    def round(self, fmt: FloatFormat, value: UOp) -> UOp:
        return decode(fmt, encode(fmt, value))

    def rewrite(self, uop: UOp, src: tuple[UOp, ...]) -> UOp:
        fmt = None if uop.op in (Ops.STORE, Ops.BITCAST, Ops.CAST) else self.format_of(uop.dtype)
        if uop.op is Ops.CONST and fmt is not None:
            return UOp.const(dtypes.float32, float(uop.arg))
        if uop.op is Ops.LOAD and fmt is not None:
            return self._load(fmt, uop, src)
        if uop.op is Ops.STORE and (value_format := self.format_of(uop.src[1].dtype)) is not None:
            encoded = self.lanes(src[1], functools.partial(encode, value_format, keep_nan_pattern=True))
            return UOp(Ops.STORE, uop.dtype, (src[0], encoded, *src[2:]), uop.arg)
        if uop.op is Ops.CAST:
            return self._cast(uop, src[0])
        if uop.op is Ops.BITCAST:
            return self._bitcast(uop, src[0])
        if uop.op in GroupOp.ALU and fmt is not None:
            result = UOp(uop.op, self.storage_dtype(uop.dtype), src, uop.arg)
            return result if uop.op in _EXACT_OPS else self.lanes(result, functools.partial(self.round, fmt))
        return UOp(uop.op, self.storage_dtype(uop.dtype), src, uop.arg, uop.tag)

    def _load(self, fmt: FloatFormat, uop: UOp, src: tuple[UOp, ...]) -> UOp:
        raw_dtype = fmt.storage.vec(uop.dtype.count)
        if len(src) == 3:
            alternative = uop.src[1]
            if alternative.op is Ops.CONST:
                alternative_bits = UOp.const(raw_dtype, fmt.encode_constant(alternative.arg))
            else:
                alternative_bits = self.lanes(src[1], functools.partial(encode, fmt))
            raw = UOp(Ops.LOAD, raw_dtype, (src[0], alternative_bits, src[2]), uop.arg)
        else:
            raw = UOp(Ops.LOAD, raw_dtype, src, uop.arg)
        self.loaded_bits[uop] = raw
        return self.lanes(raw, functools.partial(decode, fmt))

    def _cast(self, uop: UOp, value: UOp) -> UOp:
        source_format, target_format = self.format_of(uop.src[0].dtype), self.format_of(uop.dtype)
        count = uop.dtype.count
        if target_format is None:
            return value.cast(uop.dtype)  # from float32 (emulated source) or anything else
        if source_format is not None or value.dtype.scalar() != dtypes.float64:
            value = value.cast(dtypes.float32.vec(count))  # exact from smaller formats; ints beyond 2**24 overflow
        return self.lanes(value, functools.partial(self.round, target_format))

    def _bitcast(self, uop: UOp, value: UOp) -> UOp:
        source_format, target_format = self.format_of(uop.src[0].dtype), self.format_of(uop.dtype)
        if source_format is not None:
            loaded = self.loaded_bits.get(uop.src[0])
            keep = functools.partial(encode, source_format, keep_nan_pattern=True)
            value = loaded if loaded is not None else self.lanes(value, keep)
        if target_format is None:
            return value.bitcast(uop.dtype)
        raw = value.bitcast(target_format.storage.vec(uop.dtype.count))
        return self.lanes(raw, functools.partial(decode, target_format))


def emulate_float_formats(sink: UOp, emulated: Collection[DType]) -> UOp:
    """The kernel graph `sink` with every value of a dtype in `emulated` (keys of FLOAT_FORMATS) computed in
    float32 and stored as raw bits."""
    unknown = sorted(d.name for d in emulated if d not in FLOAT_FORMATS)
    if unknown:
        raise ValueError(f"cannot emulate {unknown}; kiln emulates {sorted(d.name for d in FLOAT_FORMATS)}")
    emulation = _Emulation({d: FLOAT_FORMATS[d] for d in emulated})
    nodes = sink.toposort()
    if not any(emulation.format_of(u.dtype) is not None for u in nodes):
        return sink
    rebuilt: dict[UOp, UOp] = {}
    for node in nodes:
        src = tuple(rebuilt[s] for s in node.src)
        if src == node.src and emulation.format_of(node.dtype) is None:
            rebuilt[node] = node
        else:
            rebuilt[node] = emulation.rewrite(node, src)
    return rebuilt[sink]
