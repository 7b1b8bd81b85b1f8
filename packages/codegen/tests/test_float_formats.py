"""Tests of float_formats: fp8 / float16 computed in float32 with memory in raw bits, against numpy.

The emulated conversions (kernel graphs through `emulate_float_formats`, then linearized) run in codegen's
interpreter; numpy (its float16 and the interpreter's bit-exact fp8 formats, `numpy_semantics.EMULATED`) is the
oracle. Decoding is checked on every bit pattern, encoding
on specials, every representable value, the midpoints between neighbours and their float neighbours.
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln.codegen import linearize, run_program, verify_linear
from kiln.codegen.lowering.float_formats import FLOAT_FORMATS, decode_python, emulate_float_formats
from kiln.codegen.numpy_semantics import EMULATED
from kiln.uops import DType, Ops, SpecialArg, UOp, dtypes

FORMATS = [dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.float16]
WIDE = [dtypes.float32, dtypes.float64]


def _cast_program(source: DType, target: DType, size: int) -> list[UOp]:
    # one thread per element (SPECIAL gidx0): the interpreter runs threads vectorized, loops one step at a time
    out, a = UOp(Ops.DEFINE_GLOBAL, target.ptr(size), arg=0), UOp(Ops.DEFINE_GLOBAL, source.ptr(size), arg=1)
    count = UOp.const(dtypes.int32, size)
    thread = UOp(Ops.SPECIAL, dtypes.int32, (count,), SpecialArg("gidx0"))
    value = a.index(thread).load()
    store = out.index(thread).store(value.cast(target))
    return [out, a, count, thread, a.index(thread), value, out.index(thread), value.cast(target), store]


def emulate_floats(program: list[UOp], emulated: list[DType]) -> list[UOp]:
    """The linear `program` (stores at top level) as a kernel graph, emulated, linearized again."""
    stores = [u for u in program if u.op is Ops.STORE]
    return linearize(emulate_float_formats(UOp.sink(*stores), emulated))


def _codes(dtype: DType) -> np.ndarray:
    storage = np.uint8 if dtype.itemsize == 1 else np.uint16
    return np.arange(1 << (8 * dtype.itemsize)).astype(storage)


def _values_of(dtype: DType, codes: np.ndarray) -> np.ndarray:
    return codes.view(np.float16).astype(np.float64) if dtype == dtypes.float16 else EMULATED[dtype].decode(codes)


def _run(uops: list[UOp], output: np.ndarray, source: np.ndarray) -> np.ndarray:
    run_program(uops, [output, source], {}, (len(output), 1, 1), (1, 1, 1))
    return output


def assert_scoped(uops: list[UOp]) -> None:
    """Every source is defined in a loop/IF that encloses its use (the rule C scopes and SSA dominance impose)."""
    scope_of: dict[UOp, tuple[UOp, ...]] = {}
    open_blocks: list[UOp] = []
    for uop in uops:
        if uop.op in (Ops.END, Ops.ENDIF):
            open_blocks.pop()
        here = tuple(open_blocks)
        for source in uop.src:
            assert here[: len(scope_of[source])] == scope_of[source], f"{uop.op} uses {source.op} out of its scope"
        scope_of[uop] = here
        if uop.op in (Ops.RANGE, Ops.IF):
            open_blocks.append(uop)


@pytest.mark.parametrize("wide", WIDE, ids=repr)
@pytest.mark.parametrize("dtype", FORMATS, ids=repr)
def test_decode_every_bit_pattern(dtype: DType, wide: DType) -> None:
    codes = _codes(dtype)
    uops = emulate_floats(_cast_program(dtype, wide, len(codes)), [dtype])
    verify_linear(uops)
    assert_scoped(uops)
    assert not any(u.dtype == dtype for u in uops)
    numpy_wide = np.float32 if wide == dtypes.float32 else np.float64
    got = _run(uops, np.zeros(len(codes), numpy_wide), codes.copy())
    with np.errstate(invalid="ignore"):
        expected = _values_of(dtype, codes).astype(numpy_wide)
    same = (got.view(np.uint8) == expected.view(np.uint8)).reshape(len(codes), -1).all(axis=1)
    assert (same | (np.isnan(got) & np.isnan(expected))).all()
    # bits are kept exactly (signed zeros, subnormals, infinities), and a NaN pattern decodes to a NaN
    assert np.array_equal(np.isnan(got), np.isnan(expected))


def _encode_inputs(dtype: DType, numpy_wide: type[np.floating]) -> np.ndarray:
    values = _values_of(dtype, _codes(dtype))
    finite = np.unique(values[np.isfinite(values)])
    midpoints = (finite[1:] + finite[:-1]) / 2
    largest = finite[-1]
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, largest * 1.0625, largest * 2, 1e-45, 1e300, -1e300]
    rng = np.random.default_rng(4)
    random = [rng.standard_normal(4000) * scale for scale in (1e-6, 1e-3, 1.0, 50.0, 1e4)]
    candidates = np.concatenate([values, midpoints, np.array(specials), *random])
    with np.errstate(over="ignore", invalid="ignore"):
        candidates = candidates.astype(numpy_wide)
        return np.concatenate([candidates, np.nextafter(candidates, np.inf), np.nextafter(candidates, -np.inf)])


@pytest.mark.parametrize("wide", WIDE, ids=repr)
@pytest.mark.parametrize("dtype", FORMATS, ids=repr)
def test_encode_rounds_to_nearest_even_like_numpy(dtype: DType, wide: DType) -> None:
    numpy_wide = np.float32 if wide == dtypes.float32 else np.float64
    values = _encode_inputs(dtype, numpy_wide)
    uops = emulate_floats(_cast_program(wide, dtype, len(values)), [dtype])
    verify_linear(uops)
    storage = np.uint8 if dtype.itemsize == 1 else np.uint16
    got = _run(uops, np.zeros(len(values), storage), values.copy())
    with np.errstate(all="ignore"):
        if dtype == dtypes.float16:
            expected = values.astype(np.float16).view(np.uint16)  # numpy rounds float64 -> float16 directly
        else:
            emulated = EMULATED[dtype]
            expected = emulated.encode(emulated.round(values.astype(np.float64)))
    # NaN payloads are not part of the IR's meaning for arithmetic and casts (only bitcasts and data movement keep
    # them): a NaN must encode to some NaN pattern, every other value bit for bit.
    both_nan = (
        np.isnan(EMULATED[dtype].decode(got)) & np.isnan(EMULATED[dtype].decode(expected))
        if dtype in EMULATED
        else False
    )
    wrong = np.nonzero((got != expected) & ~both_nan)[0]
    assert len(wrong) == 0, [(values[k], hex(got[k]), hex(expected[k])) for k in wrong[:5]]


@pytest.mark.parametrize("dtype", FORMATS, ids=repr)
def test_constants_encode_to_their_bit_patterns(dtype: DType) -> None:
    fmt = FLOAT_FORMATS[dtype]
    codes = _codes(dtype)
    expected = _values_of(dtype, codes)
    for code, value in zip(codes.tolist(), expected.tolist()):
        decoded = decode_python(fmt, code)
        assert decoded == value or (np.isnan(decoded) and np.isnan(value))
        if not np.isnan(value):
            assert fmt.encode_constant(value) == code
    assert fmt.encode_constant(float("nan")) == fmt.nan_bits


def test_arithmetic_rounds_once_per_op() -> None:
    # a * b in fp8e4m3 must round the exact product (computed in float32) once, like the interpreter's fp8
    codes = _codes(dtypes.fp8e4m3)
    a, b = np.repeat(codes, 4)[:1024], np.tile(codes, 4)[:1024]
    size = len(a)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.fp8e4m3.ptr(size), arg=0)
    x, y = (UOp(Ops.DEFINE_GLOBAL, dtypes.fp8e4m3.ptr(size), arg=slot) for slot in (1, 2))
    count = UOp.const(dtypes.int32, size)
    thread = UOp(Ops.SPECIAL, dtypes.int32, (count,), SpecialArg("gidx0"))
    left, right = x.index(thread).load(), y.index(thread).load()
    product = left * right
    store = out.index(thread).store(product)
    program = [out, x, y, count, thread, x.index(thread), left, y.index(thread), right, product, out.index(thread)]
    program.append(store)
    launch = ((size, 1, 1), (1, 1, 1))
    native = np.zeros(size, np.uint8)
    run_program(emulate_floats(program, [dtypes.fp8e4m3]), [native, a.copy(), b.copy()], {}, *launch)
    reference = np.zeros(size, np.uint8)
    run_program(program, [reference, a.copy(), b.copy()], {}, *launch)  # the interpreter's own fp8
    np.testing.assert_array_equal(native, reference)


FP8 = [dtypes.fp8e4m3, dtypes.fp8e5m2]


def _is_nan_code(dtype: DType, codes: np.ndarray) -> np.ndarray:
    # the OCP FP8 spec's NaNs, by bit arithmetic: e4m3 (fn) S.1111.111; e5m2 S.11111.mm with mm != 0
    magnitude = codes.astype(np.int64) & 0x7F
    return magnitude == 0x7F if dtype == dtypes.fp8e4m3 else magnitude > 0x7C


@pytest.mark.parametrize("dtype", FP8, ids=repr)
def test_fp8_bit_patterns_survive_copies_selects_and_bitcasts(dtype: DType) -> None:
    # every pattern (NaNs of both signs and every payload, inf, subnormals, zeros) through a select, then a copy, a
    # BITCAST to uint8 and a BITCAST to the other fp8 format: the raw input bits come out (no pattern canonicalized)
    other = FP8[1 - FP8.index(dtype)]
    size = 256
    thread = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, size),), SpecialArg("gidx0"))
    a, b = (UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), arg=slot).index(thread).load() for slot in (3, 4))
    selected = UOp(Ops.DEFINE_GLOBAL, dtypes.bool.ptr(size), arg=5).index(thread).load().where(a, b)
    results = [selected, selected.bitcast(dtypes.uint8), selected.bitcast(other)]
    stores = [
        UOp(Ops.DEFINE_GLOBAL, value.dtype.ptr(size), arg=slot).index(thread).store(value)
        for slot, value in enumerate(results)
    ]
    uops = linearize(emulate_float_formats(UOp.sink(*stores), FP8))
    verify_linear(uops)
    codes = _codes(dtype)
    gate = np.random.default_rng(5).integers(0, 2, size).astype(np.bool_)
    outputs = [np.zeros(size, np.uint8) for _ in results]
    run_program(uops, [*outputs, codes.copy(), codes[::-1].copy(), gate], {}, (size, 1, 1), (1, 1, 1))
    expected = np.where(gate, codes, codes[::-1])
    assert _is_nan_code(dtype, expected).sum() == (2 if dtype == dtypes.fp8e4m3 else 6)
    for slot, got in enumerate(outputs):
        wrong = np.flatnonzero(got != expected)
        assert not len(wrong), (slot, [(hex(expected[k]), hex(got[k])) for k in wrong[:4]])


@pytest.mark.parametrize("dtype", FP8, ids=repr)
def test_casts_and_arithmetic_give_the_formats_nan(dtype: DType) -> None:
    # only data movement keeps a NaN pattern: a float32 NaN cast to fp8 gives the format's NaN whatever its payload
    # (x86's default NaN, signalling ones, payloads that look like a decoded fp8 pattern around a finite code)
    carriers = [FLOAT_FORMATS[f].nan_carrier for f in FP8]
    bits = np.array([0x7FC00000, 0x7F800001, 0x7FFFFFFF, *(c | low for c in carriers for low in range(256))], np.uint32)
    values = np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)
    uops = emulate_floats(_cast_program(dtypes.float32, dtype, len(values)), [dtype])
    got = _run(uops, np.zeros(len(values), np.uint8), values.copy())
    np.testing.assert_array_equal(got, 0x7F if dtype == dtypes.fp8e4m3 else 0x7E)  # OCP FP8: S.1111.111, S.11111.10


def test_programs_without_emulated_dtypes_are_unchanged() -> None:
    sink = UOp.sink(_cast_program(dtypes.float32, dtypes.int32, 8)[-1])
    assert emulate_float_formats(sink, FORMATS) is sink


def test_unknown_formats_are_refused() -> None:
    with pytest.raises(ValueError, match="bfloat16"):
        emulate_float_formats(UOp(Ops.SINK, dtypes.void), [dtypes.bfloat16])
