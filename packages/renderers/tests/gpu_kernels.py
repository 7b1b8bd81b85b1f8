"""Kernels the GPU renderer tests render and compile: codegen's corpus plus coverage sinks and a hand-built WMMA.

The coverage sinks are elementwise kernels with one output per op (so one compile covers many ops): every ALU op
valid for a dtype (the IR spec's rules), every cast and bit cast from one dtype, vector accesses, gated loads,
symbolic sizes and a group reduce through shared memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
from corpus import CORPUS, from_storage, representable, to_storage

from kiln.codegen import KernelInfo, Opt, OptOps, Program, Renderer, TensorCore, get_program, linearize, run_program
from kiln.codegen.lowering.dtype_emulation import emulate_dtypes
from kiln.codegen.numpy_semantics import EMULATED, storage_dtype
from kiln.uops import AxisKind, DType, Ops, UOp, VarArg, dtypes
from kiln.uops.args import SpecialArg

SIZE = 16

UNARY_FLOAT = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC)
BINARY_FLOAT = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.POW)
BINARY_INT = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR)
BINARY_BOOL = (Ops.ADD, Ops.MUL, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR)
COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)


def _buffer(slot: int, dtype: DType, size: int = SIZE) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), slot)


def _kernel(name: str, outputs: list[tuple[DType, UOp]], loop: UOp) -> UOp:
    """outputs[k] = (dtype, value at `loop`) -> a sink writing output k to slot k."""
    effects = [_buffer(slot, dtype).index(loop).store(value).end(loop) for slot, (dtype, value) in enumerate(outputs)]
    return UOp(Ops.SINK, dtypes.void, tuple(effects), KernelInfo(name))


def alu_kernel(dtype: DType) -> UOp:
    """Every ALU op valid on `dtype`, each to its own output (inputs a, b and a bool condition)."""
    loop = UOp.range(SIZE, 0, AxisKind.LOOP)
    values: list[tuple[DType, UOp]] = []

    def ops_for() -> Iterator[tuple[DType, Ops, int]]:
        if dtypes.is_float(dtype):
            yield from ((dtype, op, 1) for op in UNARY_FLOAT)
            yield from ((dtype, op, 2) for op in BINARY_FLOAT)
        elif dtypes.is_bool(dtype):
            yield from ((dtype, op, 2) for op in BINARY_BOOL)
            yield (dtype, Ops.NEG, 1)
        else:
            yield from ((dtype, op, 2) for op in BINARY_INT)
            yield from ((dtype, op, 1) for op in (Ops.NEG, Ops.TRUNC))
            if dtype == dtypes.uint64:
                yield (dtype, Ops.THREEFRY, 2)
        yield from ((dtypes.bool, op, 2) for op in COMPARISONS)
        yield (dtype, Ops.WHERE, 3)

    planned = list(ops_for())
    first_input = len(planned)
    a = _buffer(first_input, dtype).index(loop).load()
    b = _buffer(first_input + 1, dtype).index(loop).load()
    condition = _buffer(first_input + 2, dtypes.bool).index(loop).load()
    for out_dtype, op, arity in planned:
        sources = {1: (a,), 2: (a, b), 3: (condition, a, b)}[arity]
        values.append((out_dtype, UOp(op, out_dtype, sources)))
    return _kernel(f"alu_{dtype.name}", values, loop)


def cast_targets(source: DType) -> list[tuple[DType, bool]]:
    """The outputs of `cast_kernel(source)` in slot order: (target dtype, is a bitcast)."""
    targets = [(t, False) for t in dtypes.all if t != source]
    if source != dtypes.bool:
        targets += [(t, True) for t in dtypes.all if t.itemsize == source.itemsize and t != source and t != dtypes.bool]
    return targets


def undefined_cast_lanes(source: DType, slot: int, source_values: np.ndarray) -> np.ndarray | bool:
    """Lanes of output `slot` of `cast_kernel(source)` left out of the comparison: a NaN cast to an integer (the IR
    leaves it open), and an fp8 or bfloat16 NaN bitcast to another type — a known deviation: the emulation
    canonicalizes NaN patterns before a BITCAST (also pinned by an xfail in kiln.runtime's conformance suite)."""
    targets = cast_targets(source)
    if slot >= len(targets) or not dtypes.is_float(source):
        return False
    target, bitcast = targets[slot]
    fp8_bitcast = bitcast and source in (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.bfloat16)
    if not fp8_bitcast and (bitcast or dtypes.is_float(target)):
        return False
    return np.isnan(from_storage(source_values, source))


def cast_kernel(source: DType) -> UOp:
    """`source` cast to every dtype and bit cast to every dtype of its size."""
    loop = UOp.range(SIZE, 0, AxisKind.LOOP)
    targets = cast_targets(source)
    value = _buffer(len(targets), source).index(loop).load()
    outputs = [(t, value.bitcast(t) if bits else value.cast(t)) for t, bits in targets]
    return _kernel(f"casts_{source.name}", outputs, loop)


def vector_kernel() -> tuple[UOp, list[Opt]]:
    """out[i] = a[i] * b[i] + 1 over 64 float32 lanes, upcast by 4: wide loads and stores."""
    loop = UOp.range(64, 0, AxisKind.LOOP)
    a, b = _buffer(1, dtypes.float32, 64).index(loop).load(), _buffer(2, dtypes.float32, 64).index(loop).load()
    store = _buffer(0, dtypes.float32, 64).index(loop).store(a * b + 1.0).end(loop)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo("vectors")), [Opt(OptOps.UPCAST, 0, 4)]


def gated_kernel() -> UOp:
    """out[i] = a[i - 2] where 2 <= i < 18, else 0 (a gated load) over 20 int32 outputs."""
    loop = UOp.range(20, 0, AxisKind.LOOP)
    gate = (loop >= 2) & (loop < 18)
    value = _buffer(1, dtypes.int32, 16).index(loop - 2, gate=gate).load()
    store = _buffer(0, dtypes.int32, 20).index(loop).store(value).end(loop)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo("gated"))


def symbolic_kernel() -> UOp:
    """out[i] = a[i] * 2 over a symbolic size n in [1, 1024]."""
    n = UOp(Ops.DEFINE_VAR, dtypes.index, (), VarArg("n", 1, 1024))
    loop = UOp.range(n, 0, AxisKind.LOOP)
    value = _buffer(1, dtypes.float32, 1024).index(loop).load() * 2.0
    store = _buffer(0, dtypes.float32, 1024).index(loop).store(value).end(loop)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo("symbolic"))


def group_reduce_kernel() -> tuple[UOp, list[Opt]]:
    """out[i] = max_j a[i*256 + j], the reduce split over 16 threads of a block (shared memory + barrier)."""
    row, column = UOp.range(8, 0, AxisKind.LOOP), UOp.range(256, 1, AxisKind.REDUCE)
    value = _buffer(1, dtypes.float32, 8 * 256).index(row * 256 + column).load().reduce(column, op=Ops.MAX)
    store = _buffer(0, dtypes.float32, 8).index(row).store(value).end(row)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo("group_max")), [Opt(OptOps.GROUP, 1, 16)]


def wmma_program(core: TensorCore, renderer: Renderer) -> list[UOp]:
    """A hand-built program: one warp loads its A, B, C fragments, runs one WMMA and stores D (linearized for
    `renderer`, float16 emulated as it emulates it)."""
    a_lanes, b_lanes, c_lanes = core.elements_per_thread
    a_buffer = _buffer(1, core.dtype_in, 32 * a_lanes)
    b_buffer = _buffer(2, core.dtype_in, 32 * b_lanes)
    c_buffer = _buffer(3, core.dtype_out, 32 * c_lanes)
    out = _buffer(0, core.dtype_out, 32 * c_lanes)
    lane = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, 32),), SpecialArg("lidx0"))

    def fragment(buffer: UOp, lanes: int) -> UOp:
        offset = UOp(Ops.MUL, dtypes.int32, (lane, UOp.const(dtypes.int32, lanes)))
        index = UOp(Ops.INDEX, buffer.dtype.base.vec(lanes).ptr(32 * lanes), (buffer, offset))  # type: ignore[attr-defined]
        load = UOp(Ops.LOAD, buffer.dtype.base.vec(lanes), (index,))  # type: ignore[attr-defined]
        return load

    a, b, c = fragment(a_buffer, a_lanes), fragment(b_buffer, b_lanes), fragment(c_buffer, c_lanes)
    result = UOp(Ops.WMMA, c.dtype, (a, b, c), core.wmma_arg())
    offset = UOp(Ops.MUL, dtypes.int32, (lane, UOp.const(dtypes.int32, c_lanes)))
    index = UOp(Ops.INDEX, core.dtype_out.vec(c_lanes).ptr(32 * c_lanes), (out, offset))
    store = UOp(Ops.STORE, dtypes.void, (index, result))
    return linearize(emulate_dtypes(UOp(Ops.SINK, dtypes.void, (store,)), renderer))


def matmul_sink(m: int, n: int, k: int, dtype_out: DType) -> UOp:
    """out[i, j] = sum_r a[i, r] * b[r, j] with float16 a (m x k), b (k x n), summed in `dtype_out` (slot 0, m x n):
    the shape the TC opt maps onto a tensor core (axes i=0, j=1, r=2)."""
    out, a, b = _buffer(0, dtype_out, m * n), _buffer(1, dtypes.float16, m * k), _buffer(2, dtypes.float16, k * n)
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisKind.REDUCE)
    left, right = a.index(i * k + r).load(), b.index(r * n + j).load()
    if dtype_out != dtypes.float16:
        left, right = left.cast(dtype_out), right.cast(dtype_out)
    store = out.index(i * n + j).store((left * right).reduce(r)).end(i, j)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo(f"matmul_{m}x{n}x{k}_{dtype_out.name}"))


def check_tensor_core_matmul(renderer: Renderer, core_number: int, shape: tuple[int, int, int], seed: int) -> None:
    """The TC opt with `renderer`'s unit `core_number` on an m x n x k float16 matmul: one WMMA in the program, whose
    result (run by codegen's interpreter, the WMMA through the fragment layouts) is numpy's product."""
    m, n, k = shape
    dtype_out = renderer.tensor_cores[core_number].dtype_out
    program = Program(get_program(matmul_sink(m, n, k, dtype_out), renderer, [Opt(OptOps.TC, 2, core_number)]))
    assert sum(u.op is Ops.WMMA for u in program.uops) == 1
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal(size).astype(np.float16) for size in ((m, k), (k, n)))
    out = np.zeros(m * n, np.float32 if dtype_out == dtypes.float32 else np.float16)
    run_program(program, [out, a.ravel(), b.ravel()], {}, *program.launch_dims({}))
    expected = a.astype(np.float64) @ b.astype(np.float64)
    tolerance = 1e-5 if dtype_out == dtypes.float32 else 2e-2
    np.testing.assert_allclose(out.reshape(m, n).astype(np.float64), expected, rtol=tolerance, atol=tolerance * k)


def coverage_sinks() -> list[tuple[str, UOp, list[Opt] | None]]:
    """(name, sink, opts) of every coverage kernel, codegen's corpus first."""
    cases: list[tuple[str, UOp, list[Opt] | None]] = [(case.name, case.sink, None) for case in CORPUS]
    cases += [(f"alu_{d.name}", alu_kernel(d), []) for d in dtypes.all]
    cases += [(f"casts_{d.name}", cast_kernel(d), []) for d in dtypes.all]
    vector_sink, vector_opts = vector_kernel()
    group_sink, group_opts = group_reduce_kernel()
    cases += [
        ("vectors", vector_sink, vector_opts),
        ("gated", gated_kernel(), []),
        ("symbolic", symbolic_kernel(), None),
    ]
    cases.append(("group_max", group_sink, group_opts))
    return cases


def _values(dtype: DType, rng: np.random.Generator, size: int, nonzero: bool) -> np.ndarray:
    """Input values in storage form: random bits for integers, normal values plus ones beyond int64, inf, NaN."""
    if dtype == dtypes.bool:
        return rng.integers(0, 2, size).astype(np.bool_)
    if dtypes.is_float(dtype):
        if dtype in EMULATED or dtype == dtypes.float16:
            values = representable(dtype)(rng, size)
        else:
            values = rng.standard_normal(size) * 4
            values[:4] = [3.0e9, -7.0e19, 2.5, -0.0]  # beyond int32 and int64: float -> int wraps
        if not nonzero:
            values[4:7] = [math.inf, -math.inf, math.nan]
        return to_storage(values, dtype)
    info = np.iinfo(storage_dtype(dtype))
    values = rng.integers(info.min, info.max, size, dtype=storage_dtype(dtype), endpoint=True)
    if nonzero:
        values[values == 0] = 3
        values[:2] = [1, 2]  # small divisors and shift counts
    return values


def input_arrays(program: Program, rng: np.random.Generator, divisor_nonzero: bool) -> list[np.ndarray]:
    """Buffers for an ALU or cast coverage kernel, by slot: zeroed outputs, random inputs (the second-to-last input,
    the divisor `b` of `alu_kernel`, without zeros when `divisor_nonzero`)."""
    arrays = []
    slots = program.globals
    for slot in slots:
        pointer = program.buffer_dtypes[slot]
        if slot in program.outs:
            arrays.append(np.zeros(pointer.size, storage_dtype(pointer.base)))
        else:
            nonzero = divisor_nonzero and slot == slots[-2]
            arrays.append(_values(pointer.base, rng, pointer.size, nonzero))
    return arrays


__all__ = ["CORPUS", "input_arrays", "coverage_sinks", "from_storage", "representable", "to_storage", "wmma_program"]


def _exact_fma(a: float, b: float, c: float, dtype: DType) -> float:
    """a*b+c rounded once to `dtype` (float32 / float64), from exact rational arithmetic."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return 0.0 if math.copysign(1.0, a * b) > 0 or math.copysign(1.0, c) > 0 else -0.0
    try:
        wide = float(exact)  # rounded to nearest float64
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
    if dtype == dtypes.float64:
        return wide
    with np.errstate(over="ignore"):
        near = np.float32(wide)  # may be off by one step (double rounding): the closest neighbour wins
    if not np.isfinite(near):
        return float(near)  # beyond float32's range (no row sits at the overflow threshold)
    steps = (near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf)))
    return float(min(steps, key=lambda v: (abs(Fraction(float(v)) - exact), int(v.view(np.uint32)) & 1)))


def mulacc_extremes_case(dtype: DType) -> tuple[UOp, list[np.ndarray], np.ndarray]:
    """out[i] = MULACC(a[i], b[i], c[i]) over operands at the edges of `dtype`'s range (float32 / float64):
    (sink, [out, a, b, c] buffers, the exactly rounded fused results)."""
    info = np.finfo(storage_dtype(dtype))
    big, tiny = float(info.max), float(info.smallest_normal)
    rows = [
        (0.0, big, tiny * 3.5),  # 0 * max + c: c (an emulation splitting `big` overflows to NaN)
        (big, 0.5, -big / 4),
        (big / 3, 3.0, -big / 2),
        (2.0**60, 2.0**60 + 1, -(2.0**120)),  # the product's low bits survive only when fused
        (1.0 + 2.0**-23, 1.0 - 2.0**-23, -1.0),
        (tiny, tiny, tiny),
        (-big, big, big),  # overflow: -inf
        (3.0, float("inf"), -1.0),
        (0.0, float("inf"), 1.0),  # NaN
        (-1.5, 2.0, 3.0),
    ]
    numpy_type = storage_dtype(dtype)
    a, b, c = (np.array([row[k] for row in rows], numpy_type) for k in range(3))
    expected = np.array([_exact_fma(float(x), float(y), float(z), dtype) for x, y, z in zip(a, b, c)], numpy_type)
    loop = UOp.range(len(rows), 0, AxisKind.LOOP)
    loads = [_buffer(slot, dtype, len(rows)).index(loop).load() for slot in (1, 2, 3)]
    value = UOp(Ops.MULACC, dtype, tuple(loads))
    sink = _kernel(f"mulacc_extremes_{dtype.name}", [(dtype, value)], loop)
    return sink, [np.full(len(rows), np.nan, numpy_type), a, b, c], expected
