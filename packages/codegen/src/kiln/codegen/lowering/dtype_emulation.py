"""The dtype emulation pass: the dtypes in `Renderer.emulated_dtypes` computed through float32, others checked.

One pass for every emulated format, run after the decompositions (so ops they create are checked too): bfloat16
with the formulas below, float16 and the fp8 formats with `float_formats.py`'s. A dtype the kernel uses that is
neither emulated nor in `Renderer.native_dtypes` raises a ValueError naming it.

bfloat16: every bfloat16 value of the kernel is carried as the float32 of the same value. Memory keeps the
16-bit pattern: a load widens it (bits << 16), a store narrows it (round to nearest even, NaN stays NaN). Each
bfloat16 ALU result is rounded back to bfloat16 precision, so the program computes exactly what a native bfloat16
ALU would (one rounding per op, as numpy's ml_dtypes and torch do; MULACC rounds once, through float64, which the
renderer must have). BITCAST and copies keep every bit, NaN payloads included.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.codegen.lowering.float_formats import FLOAT_FORMATS, emulate_float_formats
from kiln.codegen.lowering.fused_multiply_add import fused_multiply_add_to_odd_float32
from kiln.codegen.lowering.vector_folding import lane_of
from kiln.codegen.renderer import Renderer
from kiln.uops import DType, GroupOp, Ops, PtrDType, UOp, dtypes

_EMULATED = dtypes.bfloat16
_STORAGE = dtypes.uint16
_COMPUTE = dtypes.float32


def bfloat16_bits(value: UOp) -> UOp:
    """The bfloat16 bit pattern (uint16) nearest to float32 `value` (ties to even; NaN stays NaN).

    A NaN whose low 16 bits are zero (every bfloat16 NaN, widened) keeps its bits, so BITCAST and plain copies move
    bfloat16 NaN patterns untouched; other NaNs get the quiet bit so that dropping their low bits leaves a NaN."""
    bits = value.bitcast(dtypes.uint32)
    rounding = bits + UOp.const(dtypes.uint32, 0x7FFF) + ((bits >> 16) & 1)
    low_bits = (bits & 0xFFFF).ne(UOp.const(dtypes.uint32, 0))
    nan_bits = (bits >> 16) | low_bits.where(UOp.const(dtypes.uint32, 0x40), UOp.const(dtypes.uint32, 0))
    return value.ne(value).where(nan_bits, rounding >> 16).cast(_STORAGE)


def bfloat16_value(bits: UOp) -> UOp:
    """The float32 holding the bfloat16 with bit pattern `bits` (uint16)."""
    return (bits.cast(dtypes.uint32) << 16).bitcast(_COMPUTE)


def _round(value: UOp) -> UOp:
    return bfloat16_value(bfloat16_bits(value))


def _map_lanes(value: UOp, function: Callable[[UOp], UOp]) -> UOp:
    if value.dtype.count == 1:
        return function(value)
    return UOp.vectorize(*(function(lane_of(value, lane)) for lane in range(value.dtype.count)))


def _map_lanes_3(values: tuple[UOp, ...], function: Callable[[UOp, UOp, UOp], UOp]) -> UOp:
    if values[0].dtype.count == 1:
        return function(*values)
    lanes = [function(*(lane_of(value, lane) for value in values)) for lane in range(values[0].dtype.count)]
    return UOp.vectorize(*lanes)


def _storage_dtype(dtype: DType) -> DType:
    if isinstance(dtype, PtrDType):
        if dtype.base.scalar() != _EMULATED:
            return dtype
        base = _STORAGE.vec(dtype.base.count)
        pointer = base.ptr(dtype.size, dtype.scope)
        return pointer.vec(dtype.count) if dtype.count > 1 else pointer
    return _COMPUTE.vec(dtype.count) if dtype.scalar() == _EMULATED else dtype


def _emulate(node: UOp, src: tuple[UOp, ...]) -> UOp:
    emulated = not isinstance(node.dtype, PtrDType) and node.dtype.scalar() == _EMULATED
    if node.op is Ops.LOAD and emulated:
        raw = UOp(Ops.LOAD, _STORAGE.vec(node.dtype.count), (src[0],))
        return _map_lanes(raw, bfloat16_value)
    if node.op is Ops.STORE and node.src[1].dtype.scalar() == _EMULATED:
        return node.replace(src=(src[0], _map_lanes(src[1], bfloat16_bits), *src[2:]))
    if node.op is Ops.CONST and emulated:
        return UOp.const(_COMPUTE, float(node.arg))
    if node.op is Ops.CAST:
        value = src[0]
        if emulated:
            return _map_lanes(value.cast(_COMPUTE.vec(value.dtype.count)), _round)
        return value.cast(node.dtype)
    if node.op is Ops.BITCAST:
        if emulated:
            return _map_lanes(src[0].bitcast(_STORAGE.vec(node.dtype.count)), bfloat16_value)
        if node.src[0].dtype.scalar() == _EMULATED:
            return _map_lanes(src[0], bfloat16_bits).bitcast(node.dtype)
    if node.op is Ops.MULACC and emulated:
        # one rounding: a*b+c rounded to odd into float32 (exact via float64), then to nearest bfloat16
        return _map_lanes_3(src, lambda a, b, c: _round(fused_multiply_add_to_odd_float32(a, b, c)))
    if node.op in GroupOp.ALU and emulated and node.op is not Ops.WHERE:
        return _map_lanes(UOp(node.op, _COMPUTE.vec(node.dtype.count), src, node.arg), _round)
    return UOp(node.op, _storage_dtype(node.dtype), src, node.arg, node.tag)


EMULATABLE: frozenset[DType] = frozenset({_EMULATED, *FLOAT_FORMATS})
"""The dtypes the dtype emulation pass can emulate (what `Renderer.emulated_dtypes` may hold)."""


def _scalar(dtype: DType) -> DType:
    return (dtype.base if isinstance(dtype, PtrDType) else dtype).scalar()


def emulate_dtypes(sink: UOp, renderer: Renderer) -> UOp:
    """`sink` with every dtype of `renderer.emulated_dtypes` it uses emulated; a ValueError naming any other dtype
    outside `renderer.native_dtypes`."""
    if renderer.native_dtypes is None and not renderer.emulated_dtypes:
        return sink  # computes every dtype: nothing to emulate or refuse
    nodes = sink.toposort()
    used = {_scalar(n.dtype) for n in nodes} - {dtypes.void, dtypes.index}
    # read emulated_dtypes only when it can matter: a renderer may find it out lazily (the C compiler's float16)
    emulated = frozenset(used & renderer.emulated_dtypes) if used & EMULATABLE else frozenset()
    if emulated - EMULATABLE:
        names = sorted(d.name for d in emulated - EMULATABLE)
        raise ValueError(f"{renderer!r} asks to emulate {names}; kiln emulates {sorted(d.name for d in EMULATABLE)}")
    native = renderer.native_dtypes
    helpers = {FLOAT_FORMATS[d].storage if d in FLOAT_FORMATS else _STORAGE for d in emulated}
    unsupported = (used - emulated) | ({_COMPUTE, dtypes.uint32, *helpers} if emulated else set())
    missing = set() if native is None else unsupported - native
    if missing:
        names = sorted(d.name for d in missing)
        raise ValueError(
            f"{renderer!r} cannot compute in {names}: not in its native_dtypes"
            f" (emulated_dtypes may hold {sorted(d.name for d in EMULATABLE)}, computed through float32)"
        )
    if _EMULATED in emulated:
        sink = _emulate_bfloat16(sink, nodes)
    if emulated - {_EMULATED}:
        sink = emulate_float_formats(sink, emulated - {_EMULATED})
    return sink


def _emulate_bfloat16(sink: UOp, nodes: list[UOp]) -> UOp:
    rebuilt: dict[UOp, UOp] = {}
    for node in nodes:
        src = tuple(rebuilt[s] for s in node.src)
        touches = node.dtype != _storage_dtype(node.dtype) or any(s.dtype != o.dtype for s, o in zip(src, node.src))
        if touches or node.op in (Ops.CAST, Ops.BITCAST):
            rebuilt[node] = _emulate(node, src)
        else:
            rebuilt[node] = node.replace(src=src) if src != node.src else node
    return rebuilt[sink]
