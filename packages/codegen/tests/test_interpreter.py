"""The reference interpreter on hand-written linear programs, against numpy and the scalar `exec_alu` definition."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from kiln.codegen.interpreter import DataRaceError, Interpreter, InterpreterError, run_program
from kiln.codegen.numpy_semantics import EMULATED, compute_dtype, storage_dtype
from kiln.uops import AxisKind, DType, MemoryScope, Ops, RangeArg, SpecialArg, UOp, VarArg, dtypes, truncate
from kiln.uops.alu import exec_alu

I32 = dtypes.int32
F32 = dtypes.float32
RNG = np.random.default_rng(1234)


def const(value: Any, dtype: DType = I32) -> UOp:
    return UOp.const(dtype, value)


def buffer(slot: int, dtype: DType, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), slot)


def special(name: str, size: int) -> UOp:
    return UOp(Ops.SPECIAL, I32, (const(size),), SpecialArg(name))


def loop(size: UOp | int, axis: int) -> UOp:
    return UOp(Ops.RANGE, I32, (size if isinstance(size, UOp) else const(size),), RangeArg(axis, AxisKind.LOOP))


def end(rng: UOp) -> UOp:
    return UOp(Ops.END, dtypes.void, (rng,))


def after(value: UOp, *order: UOp) -> UOp:
    """A LOAD that must run after `order` (hash-consing would otherwise merge two loads of one address)."""
    return UOp(Ops.LOAD, value.dtype, (*value.src, *order))


def linear(*items: UOp) -> list[UOp]:
    """The items in this order, each preceded by its not-yet-emitted dependencies."""
    emitted: list[UOp] = []
    seen: set[UOp] = set()
    for item in items:
        for node in item.toposort():
            if node not in seen:
                seen.add(node)
                emitted.append(node)
    return emitted


def elementwise(dtype_out: DType, build: Any, *dtypes_in: DType, count: int) -> list[UOp]:
    """out[g] = build(in0[g], in1[g], ...), one thread per element."""
    out = buffer(0, dtype_out, count)
    inputs = [buffer(slot + 1, d, count) for slot, d in enumerate(dtypes_in)]
    g = special("gidx0", count)
    value = build(*(b.index(g).load() for b in inputs))
    return linear(out, *inputs, g, out.index(g).store(value))


def to_buffer(values: list[Any], dtype: DType) -> np.ndarray:
    emulated = EMULATED.get(dtype)
    if emulated is not None:
        return emulated.encode(np.array(values, dtype=np.float64))
    return np.array(values, dtype=compute_dtype(dtype))


def from_buffer(raw: np.ndarray, dtype: DType) -> list[Any]:
    emulated = EMULATED.get(dtype)
    values = emulated.decode(raw) if emulated is not None else raw
    return [v.item() for v in values]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and (a != 0 or math.copysign(1, a) == math.copysign(1, b))
    return bool(a == b)


# ---- sample values per dtype -------------------------------------------------------------------------------------


def samples(dtype: DType, count: int = 64) -> list[Any]:
    if dtype == dtypes.bool:
        return [bool(v) for v in RNG.integers(0, 2, count)]
    if dtypes.is_int(dtype):
        lo, hi = int(dtypes.min(dtype)), int(dtypes.max(dtype))
        edges = [lo, hi, 0, 1, -1 if lo < 0 else 2, lo + 1, hi - 1, 7]
        rest = [int(v) for v in RNG.integers(lo, hi, count - len(edges), dtype=np.int64 if lo < 0 else np.uint64)]
        small = [int(v) for v in RNG.integers(-9 if lo < 0 else 0, 10, 16)]
        return [truncate(dtype, v) for v in edges + rest[: count - len(edges) - 16] + small]
    emulated = EMULATED.get(dtype)
    if emulated is not None:
        codes = RNG.integers(0, 1 << emulated.bits, count)
        return [float(v) for v in emulated.decode(codes)]
    specials = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.5, 3.0]
    tiny = float(np.finfo(compute_dtype(dtype)).smallest_subnormal)
    specials += [tiny, -tiny * 3, float(np.finfo(compute_dtype(dtype)).max)]
    random = (RNG.standard_normal(count - len(specials)) * 10.0 ** RNG.integers(-3, 4, count - len(specials))).tolist()
    return [truncate(dtype, v) for v in specials + random]


ALL = [d for d in dtypes.all]
NATIVE_FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
NUMPY_FLOAT_OPS = {
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
    Ops.MAX: np.fmax,
    Ops.POW: np.power,
    Ops.CMPLT: np.less,
    Ops.CMPNE: np.not_equal,
    Ops.CMPEQ: np.equal,
}


def supported_ops(dtype: DType) -> list[Ops]:
    if dtypes.is_float(dtype):
        return [*NUMPY_FLOAT_OPS, Ops.MULACC, Ops.WHERE]
    if dtype == dtypes.bool:
        return [
            Ops.NEG,
            Ops.ADD,
            Ops.MUL,
            Ops.MAX,
            Ops.AND,
            Ops.OR,
            Ops.XOR,
            Ops.CMPLT,
            Ops.CMPNE,
            Ops.CMPEQ,
            Ops.WHERE,
        ]
    ops = [Ops.NEG, Ops.TRUNC, Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR]
    ops += [Ops.SHL, Ops.SHR, Ops.POW, Ops.MULACC, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE]
    return ops + ([Ops.THREEFRY] if dtype == dtypes.uint64 else [])


def operands_for(op: Ops, dtype: DType) -> list[list[Any]]:
    arity = (
        3
        if op in (Ops.MULACC, Ops.WHERE)
        else 1
        if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC)
        else 2
    )
    values = [samples(dtype) for _ in range(arity)]
    if op is Ops.WHERE:
        values[0] = samples(dtypes.bool)
    if dtypes.is_int(dtype) and op in (Ops.IDIV, Ops.MOD):
        values[1] = [v if v != 0 else 3 for v in values[1]]
    if dtypes.is_int(dtype) and op in (Ops.SHL, Ops.SHR):
        bits = dtype.itemsize * 8
        values[1] = [
            truncate(dtype, int(v)) for v in RNG.integers(-2 if not dtypes.is_unsigned(dtype) else 0, bits + 3, 64)
        ]
    if dtypes.is_int(dtype) and op is Ops.POW:
        bases = RNG.integers(-3 if not dtypes.is_unsigned(dtype) else 0, 4, 64)
        values[0] = [truncate(dtype, int(v) if v != 0 else 2) for v in bases]  # 0 ** negative raises
        values[1] = [truncate(dtype, int(v)) for v in RNG.integers(-2 if not dtypes.is_unsigned(dtype) else 0, 40, 64)]
    return values


def scalar_reference(op: Ops, dtype: DType, operands: tuple[Any, ...]) -> Any:
    try:
        return exec_alu(op, dtype, operands)
    except OverflowError:
        # kiln.uops' fused multiply-add overflows converting a huge exact result (reported): the result is +-inf
        assert op is Ops.MULACC
        exact = Fraction(operands[0]) * Fraction(operands[1]) + Fraction(operands[2])
        return math.inf if exact > 0 else -math.inf


CASES = [(op, dtype) for dtype in ALL for op in supported_ops(dtype)]


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{op.name}-{d.name}" for op, d in CASES])
def test_alu_op_matches_reference(op: Ops, dtype: DType) -> None:
    operands = operands_for(op, dtype)
    operand_dtypes = [dtypes.bool, dtype, dtype] if op is Ops.WHERE else [dtype] * len(operands)
    out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtype
    program = elementwise(out_dtype, lambda *srcs: srcs[0].alu(op, *srcs[1:]), *operand_dtypes, count=64)
    out = np.zeros(64, storage_dtype(out_dtype))
    run_program(program, [out, *(to_buffer(v, d) for v, d in zip(operands, operand_dtypes))])
    if dtype in NATIVE_FLOATS and op in NUMPY_FLOAT_OPS:
        # bit-identical to numpy computing in the same dtype
        with np.errstate(all="ignore"):
            arrays = [np.array(v, dtype=compute_dtype(dtype)) for v in operands]
            expected = NUMPY_FLOAT_OPS[op](*arrays)
        if out_dtype == dtypes.bool:
            np.testing.assert_array_equal(out, expected)
        else:
            np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), expected.view(f"u{out.itemsize}"))
        return
    got = from_buffer(out, out_dtype)
    for lane, value in enumerate(got):
        reference = scalar_reference(op, out_dtype, tuple(v[lane] for v in operands))
        assert same(value, reference), f"{op} on {[v[lane] for v in operands]}: got {value}, expected {reference}"


def truncate_reference(dtype: DType, value: Any) -> Any:
    try:
        return truncate(dtype, value)
    except OverflowError:
        # kiln.uops rounds values near float64's maximum up past it (reported): such values overflow the format
        infinite = EMULATED[dtype].has_infinity
        return math.copysign(math.inf, value) if infinite else math.nan


CAST_CASES = [(source, target) for source in ALL for target in ALL]


@pytest.mark.parametrize(("source", "target"), CAST_CASES, ids=[f"{s.name}-{t.name}" for s, t in CAST_CASES])
def test_cast_matches_truncate(source: DType, target: DType) -> None:
    values = samples(source)
    program = elementwise(target, lambda x: x.cast(target), source, count=64)
    out = np.zeros(64, storage_dtype(target))
    run_program(program, [out, to_buffer(values, source)])
    for value, got in zip(values, from_buffer(out, target)):
        assert same(got, truncate_reference(target, value)), f"cast {value!r} {source} -> {target}: got {got!r}"


def test_bitcast_matches_numpy_views() -> None:
    values = np.array(samples(F32), dtype=np.float32)
    out = np.zeros(64, np.int32)
    run_program(elementwise(I32, lambda x: x.bitcast(I32), F32, count=64), [out, values])
    np.testing.assert_array_equal(out, values.view(np.int32))
    # a vector of four bytes is one little-endian uint32
    raw = RNG.integers(0, 256, 256).astype(np.uint8)
    words = np.zeros(64, np.uint32)
    src = UOp(Ops.DEFINE_GLOBAL, dtypes.uint8.ptr(256), (), 1)
    dst = buffer(0, dtypes.uint32, 64)
    g = special("gidx0", 64)
    vector = UOp(Ops.INDEX, dtypes.uint8.vec(4).ptr(256), (src, g * 4)).load()
    run_program(linear(dst, src, g, dst.index(g).store(vector.bitcast(dtypes.uint32))), [words, raw])
    np.testing.assert_array_equal(words, raw.view(np.uint32))
    # bfloat16 bits through uint16
    bits = RNG.integers(0, 1 << 16, 64).astype(np.uint16)
    back = np.zeros(64, np.uint16)
    program = elementwise(dtypes.uint16, lambda x: (x + x).bitcast(dtypes.uint16), dtypes.bfloat16, count=64)
    run_program(program, [back, bits])
    doubled = EMULATED[dtypes.bfloat16].round(EMULATED[dtypes.bfloat16].decode(bits) * 2)
    np.testing.assert_array_equal(back, EMULATED[dtypes.bfloat16].encode(doubled))


def test_emulated_formats_round_like_truncate() -> None:
    for dtype, emulated in EMULATED.items():
        values = np.concatenate(
            [
                RNG.standard_normal(2000) * 10.0 ** RNG.integers(-12, 12, 2000),
                emulated.decode(np.arange(1 << emulated.bits)) * (1 + 2.0**-12),
            ]
        )
        rounded = emulated.round(values)
        for value, got in zip(values.tolist(), rounded.tolist()):
            assert same(got, truncate_reference(dtype, value)), f"{dtype}: {value!r} -> {got!r}"
    # hand-computed patterns: largest finite values and smallest subnormals
    assert EMULATED[dtypes.fp8e4m3].decode(np.array([0x7E, 0x01, 0x7F])).tolist()[:2] == [448.0, 2.0**-9]
    assert EMULATED[dtypes.fp8e5m2].decode(np.array([0x7B, 0x01, 0x7C])).tolist() == [57344.0, 2.0**-16, math.inf]
    bf16 = np.arange(1 << 16, dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns widen to quiet NaNs
        expected = (bf16 << 16).view(np.float32).astype(np.float64)
    np.testing.assert_array_equal(EMULATED[dtypes.bfloat16].decode(bf16), expected)


# ---- control flow, memory, threads -------------------------------------------------------------------------------


def test_loop_with_register_accumulator_sums_in_order() -> None:
    n = 37
    out, a = buffer(0, F32, 1), buffer(1, F32, n)
    acc = UOp(Ops.DEFINE_REG, F32.ptr(1, MemoryScope.REG), (), 0)
    slot = acc.index(const(0))
    init = slot.store(const(0.0, F32))
    r = loop(n, 0)
    update = slot.store(after(slot.load(), init) + a.index(r).load())
    result = out.index(const(0)).store(after(slot.load(), end(r)))
    program = linear(out, a, acc, init, r, update, end(r), result)
    values = RNG.standard_normal(n).astype(np.float32)
    total = np.zeros(1, np.float32)
    run_program(program, [total, values])
    expected = np.float32(0)
    for v in values:
        expected = np.float32(expected + v)
    assert total[0] == expected


def test_nested_loops_matmul() -> None:
    m, n, k = 3, 4, 5
    out, a, b = buffer(0, F32, m * n), buffer(1, F32, m * k), buffer(2, F32, k * n)
    acc = UOp(Ops.DEFINE_REG, F32.ptr(1, MemoryScope.REG), (), 0)
    slot = acc.index(const(0))
    i, j, r = loop(m, 0), loop(n, 1), loop(k, 2)
    init = slot.store(const(0.0, F32))
    product = a.index(i * k + r).load() * b.index(r * n + j).load()
    update = slot.store(after(slot.load(), init) + product)
    final = out.index(i * n + j).store(after(slot.load(), end(r)))
    program = linear(out, a, b, acc, i, j, init, r, update, end(r), final, end(j), end(i))
    x = RNG.standard_normal((m, k)).astype(np.float32)
    y = RNG.standard_normal((k, n)).astype(np.float32)
    result = np.zeros(m * n, np.float32)
    run_program(program, [result, x, y])
    expected = np.zeros((m, n), np.float32)
    for p in range(k):  # the same summation order as the program
        expected = expected + x[:, p : p + 1] * y[p : p + 1, :]
    np.testing.assert_array_equal(result.reshape(m, n), expected)


def test_gated_load_pads_with_alternative() -> None:
    n = 10
    out, a = buffer(0, F32, n), buffer(1, F32, n)
    g = special("gidx0", n)
    valid = const(0).lt(g)  # g >= 1
    shifted = UOp(Ops.INDEX, a.dtype, (a, g - 1, valid)).load()
    explicit = UOp(Ops.LOAD, F32, (a.index(g), const(-5.0, F32), g.lt(const(5))))
    program = linear(out, a, g, out.index(g).store(shifted + explicit))
    values = np.arange(1, n + 1, dtype=np.float32)
    result = np.zeros(n, np.float32)
    run_program(program, [result, values])
    expected = np.concatenate([[0.0], values[:-1]]) + np.where(np.arange(n) < 5, values, -5.0)
    np.testing.assert_array_equal(result, expected.astype(np.float32))


def _local_reduce_program(barrier: bool, threads: int = 8) -> list[UOp]:
    out, a = buffer(0, F32, 2), buffer(1, F32, 2 * threads)
    shared = UOp(Ops.DEFINE_LOCAL, F32.ptr(threads, MemoryScope.LOCAL), (), 0)
    block, lane = special("gidx0", 2), special("lidx0", threads)
    fill = shared.index(lane).store(a.index(block * threads + lane).load())
    items: list[UOp] = [out, a, shared, block, lane, fill]
    if barrier:
        items.append(UOp(Ops.BARRIER, dtypes.void, (fill,)))
    # a tree reduction: strides threads/2 .. 1, each step followed by a barrier
    stride = threads // 2
    last = fill
    while stride >= 1:
        active = lane.lt(const(stride))
        condition = UOp(Ops.IF, dtypes.void, (active,), stride)
        left = shared.index(lane)
        total = after(left.load(), last) + after(shared.index(lane + stride).load(), last)
        last = left.store(total)
        items += [condition, last, UOp(Ops.ENDIF, dtypes.void, (condition,))]
        if barrier:
            items.append(UOp(Ops.BARRIER, dtypes.void, (last,), stride))
        stride //= 2
    first = UOp(Ops.IF, dtypes.void, (lane.eq(const(0)),), 0)
    items += [
        first,
        out.index(block).store(after(shared.index(const(0)).load(), last)),
        UOp(Ops.ENDIF, dtypes.void, (first,)),
    ]
    return linear(*items)


def test_local_memory_tree_reduction_with_barriers() -> None:
    values = RNG.standard_normal(16).astype(np.float32)
    result = np.zeros(2, np.float32)
    run_program(_local_reduce_program(barrier=True), [result, values], global_size=(2, 1, 1), local_size=(8, 1, 1))
    expected = []
    for block in values.reshape(2, 8):
        level = block
        while level.size > 1:
            half = level.size // 2
            level = (level[:half] + level[half:]).astype(np.float32)
        expected.append(level[0])
    np.testing.assert_array_equal(result, np.array(expected, np.float32))


def test_missing_barrier_is_a_data_race() -> None:
    with pytest.raises(DataRaceError, match="without a barrier"):
        run_program(_local_reduce_program(barrier=False), [np.zeros(2, np.float32), np.ones(16, np.float32)])


def test_barrier_inside_divergent_if_is_rejected() -> None:
    out = buffer(0, F32, 4)
    lane = special("lidx0", 4)
    condition = UOp(Ops.IF, dtypes.void, (lane.lt(const(2)),), 0)
    barrier = UOp(Ops.BARRIER, dtypes.void, ())
    program = linear(
        out, lane, condition, barrier, out.index(lane).store(const(1.0, F32)), UOp(Ops.ENDIF, dtypes.void, (condition,))
    )
    with pytest.raises(InterpreterError, match="part of a block"):
        run_program(program, [np.zeros(4, np.float32)])


def test_two_threads_writing_different_values_race() -> None:
    out = buffer(0, I32, 1)
    g = special("gidx0", 4)
    program = linear(out, g, out.index(const(0)).store(g))
    with pytest.raises(DataRaceError, match="different value"):
        run_program(program, [np.zeros(1, np.int32)])
    # the same value from every thread is benign
    same_value = linear(out, g, out.index(const(0)).store(const(7)))
    result = np.zeros(1, np.int32)
    run_program(same_value, [result])
    assert result[0] == 7


def test_reading_another_threads_global_write_races() -> None:
    out = buffer(0, I32, 4)
    g = special("gidx0", 4)
    write = out.index(g).store(g)
    read = out.index((g + 1) % 4)
    program = linear(out, g, write, read.store(after(read.load(), write) + 1))
    with pytest.raises(DataRaceError):
        run_program(program, [np.zeros(4, np.int32)])


def test_out_of_bounds_and_uninitialized_reads_are_errors() -> None:
    out, a = buffer(0, F32, 8), buffer(1, F32, 8)
    g = special("gidx0", 8)
    program = linear(out, a, g, out.index(g).store(a.index(g + 1).load()))
    with pytest.raises(InterpreterError, match="out-of-bounds"):
        run_program(program, [np.zeros(8, np.float32), np.zeros(8, np.float32)])
    reg = UOp(Ops.DEFINE_REG, F32.ptr(2, MemoryScope.REG), (), 0)
    uninitialized = linear(out, reg, g, out.index(g).store(reg.index(const(1)).load()))
    with pytest.raises(InterpreterError, match="never-written"):
        run_program(uninitialized, [np.zeros(8, np.float32)])


def test_if_masks_threads_and_skips_their_division_by_zero() -> None:
    n = 8
    out, a = buffer(0, I32, n), buffer(1, I32, n)
    g = special("gidx0", n)
    divisor = a.index(g).load()
    condition = UOp(Ops.IF, dtypes.void, (divisor.ne(const(0)),), 0)
    program = linear(
        out,
        a,
        g,
        divisor,
        condition,
        out.index(g).store(const(100).idiv(divisor)),
        UOp(Ops.ENDIF, dtypes.void, (condition,)),
    )
    values = np.array([0, 3, -7, 0, 1, -1, 200, 0], np.int32)
    result = np.full(n, -1, np.int32)
    run_program(program, [result, values])
    expected = [int(100 / v) if v else -1 for v in values]
    np.testing.assert_array_equal(result, expected)
    unguarded = linear(out, a, g, out.index(g).store(const(100).idiv(a.index(g).load())))
    with pytest.raises(ZeroDivisionError):
        run_program(unguarded, [result, values])


def test_symbolic_size_loop_and_variable_bounds() -> None:
    n = UOp(Ops.DEFINE_VAR, I32, (), VarArg("n", 1, 16))
    out, a = buffer(0, F32, 16), buffer(1, F32, 16)
    r = loop(n, 0)
    program = linear(out, a, n, r, out.index(r).store(a.index(r).load() * const(2.0, F32)), end(r))
    values = np.arange(16, dtype=np.float32)
    result = np.zeros(16, np.float32)
    run_program(program, [result, values], {"n": 5})
    np.testing.assert_array_equal(result, np.where(np.arange(16) < 5, values * 2, 0))
    with pytest.raises(ValueError, match="outside its bounds"):
        run_program(program, [result, values], {"n": 17})
    with pytest.raises(ValueError, match="no value for variable"):
        run_program(program, [result, values])


def test_per_thread_trip_counts() -> None:
    # thread g sums a[0..g]: the loop size differs per thread
    n = 6
    out, a = buffer(0, I32, n), buffer(1, I32, n)
    g = special("gidx0", n)
    acc = UOp(Ops.DEFINE_REG, I32.ptr(1, MemoryScope.REG), (), 0)
    slot = acc.index(const(0))
    init = slot.store(const(0))
    r = loop(g + 1, 0)
    update = slot.store(after(slot.load(), init) + a.index(r).load())
    program = linear(out, a, g, acc, init, r, update, end(r), out.index(g).store(after(slot.load(), end(r))))
    values = np.array([1, 2, 3, 4, 5, 6], np.int32)
    result = np.zeros(n, np.int32)
    run_program(program, [result, values])
    np.testing.assert_array_equal(result, np.cumsum(values))


def test_launch_dimensions_and_core_id() -> None:
    out = buffer(0, I32, 2 * 3 * 4 * 2 * 5)
    g0, g1, l0, l1, core = (
        special("gidx0", 2),
        special("gidx1", 3),
        special("lidx0", 4),
        special("lidx1", 2),
        special("core_id", 5),
    )
    flat = (((core * 3 + g1) * 2 + g0) * 2 + l1) * 4 + l0
    code = g0 + g1 * 10 + l0 * 100 + l1 * 1000 + core * 10000
    result = np.full(240, -1, np.int32)
    run_program(linear(out, g0, g1, l0, l1, core, out.index(flat).store(code)), [result])
    index = np.arange(240)
    expected = (
        (index // 8 % 2) + (index // 16 % 3) * 10 + (index % 4) * 100 + (index // 4 % 2) * 1000 + (index // 48) * 10000
    )
    np.testing.assert_array_equal(result, expected)
    # CPU programs launch their core_id threads as the global size
    cores_only = linear(out, core, out.index(core).store(core * 2))
    run_program(cores_only, [result], global_size=(5, 1, 1))
    np.testing.assert_array_equal(result[:5], [0, 2, 4, 6, 8])
    with pytest.raises(ValueError, match="launches as"):
        run_program(cores_only, [result], global_size=(2, 1, 1))
    with pytest.raises(ValueError, match="differs from the program"):
        run_program(linear(out, g0, out.index(g0).store(g0)), [result], global_size=(3, 1, 1))


def test_vectors_load_gep_vectorize_store() -> None:
    out, a = buffer(0, F32, 16), buffer(1, F32, 16)
    g = special("gidx0", 4)
    vector = UOp(Ops.INDEX, F32.vec(4).ptr(16), (a, g * 4)).load()
    reversed_lanes = UOp.vectorize(*(vector.gep(3 - lane) for lane in range(4)))
    doubled = reversed_lanes + UOp.const(F32.vec(4), 1.0)
    program = linear(out, a, g, UOp(Ops.INDEX, F32.vec(4).ptr(16), (out, g * 4)).store(doubled))
    values = RNG.standard_normal(16).astype(np.float32)
    result = np.zeros(16, np.float32)
    run_program(program, [result, values])
    np.testing.assert_array_equal(result, (values.reshape(4, 4)[:, ::-1] + np.float32(1)).reshape(-1))


def test_gather_through_a_vector_of_offsets() -> None:
    out, a = buffer(0, I32, 8), buffer(1, I32, 32)
    g = special("gidx0", 2)
    offsets = UOp.vectorize(*(g * 16 + const(lane * 5) for lane in range(4)))
    gathered = UOp(Ops.INDEX, I32.vec(4).ptr(32), (a, offsets)).load()
    program = linear(out, a, g, UOp(Ops.INDEX, I32.vec(4).ptr(8), (out, g * 4)).store(gathered))
    values = np.arange(100, 132, dtype=np.int32)
    result = np.zeros(8, np.int32)
    run_program(program, [result, values])
    np.testing.assert_array_equal(result, [100 + b * 16 + lane * 5 for b in range(2) for lane in range(4)])


def test_interpreter_accepts_program_views_and_checks_buffers() -> None:
    program = elementwise(F32, lambda x: x * x, F32, count=4)

    class View:
        uops = program

    result = np.zeros(4, np.float32)
    run_program(View(), [result, np.arange(4, dtype=np.float32)])
    np.testing.assert_array_equal(result, [0, 1, 4, 9])
    with pytest.raises(TypeError, match=r"expected dtypes\.float32"):
        run_program(program, [np.zeros(4, np.float64), np.arange(4, dtype=np.float64)])
    with pytest.raises(ValueError, match="holds 2 elements"):
        run_program(program, [np.zeros(2, np.float32), np.arange(4, dtype=np.float32)])
    # raw bytes are viewed as the element dtype; the same Interpreter runs twice
    raw = np.zeros(16, np.uint8)
    runner = Interpreter(program)
    runner.run([raw, np.full(4, 3, np.float32)])
    runner.run([raw, np.full(4, 3, np.float32)])
    np.testing.assert_array_equal(raw.view(np.float32), [9, 9, 9, 9])
    with pytest.raises(ValueError, match="not defined before"):
        Interpreter(program[::-1])


def test_a_loaded_value_keeps_its_value_after_a_store_to_its_address() -> None:
    out, a = buffer(0, F32, 2), buffer(1, F32, 1)
    first = a.index(const(0)).load()
    overwrite = a.index(const(0)).store(const(5.0, F32))
    program = linear(
        out,
        a,
        first,
        overwrite,
        out.index(const(0)).store(first),
        out.index(const(1)).store(after(a.index(const(0)).load(), overwrite)),
    )
    result = np.zeros(2, np.float32)
    run_program(program, [result, np.array([3.0], np.float32)])
    np.testing.assert_array_equal(result, [3.0, 5.0])
