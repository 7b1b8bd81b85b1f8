"""Coverage kernels for the CPU renderers' tests, their inputs, and running a program natively or as a reference.

Each coverage kernel is an elementwise kernel sink with one output per op, so one compile covers many ops: every
ALU op valid on a dtype, every cast from one dtype to all dtypes, every bit cast between dtypes of one size, the
transcendental ops (decomposed by codegen), wide loads and stores of every dtype, gated loads and stores, symbolic
sizes. Inputs mix special values (extremes, zeros of both signs, infinities, NaN, subnormals, shift counts outside
the width, INT_MIN / -1) with random ones.

The reference is codegen's interpreter (`run_program`, numpy semantics) running the same linear program: compiled
code must produce the same bits (any NaN equals any NaN).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kiln.codegen import (
    KernelInfo,
    KernelSignature,
    Opt,
    OptOps,
    Program,
    Renderer,
    get_program,
    linearize,
    run_program,
)
from kiln.codegen.lowering.dtype_emulation import emulate_dtypes
from kiln.codegen.numpy_semantics import EMULATED, compute_dtype, storage_dtype, to_storage
from kiln.renderers import HostCompiler
from kiln.uops import AxisKind, DType, Ops, RangeArg, SpecialArg, UOp, dtypes, exec_alu, truncate

SIZE = 64


def load_corpus() -> Any:
    """codegen's kernel corpus module (packages/codegen/tests/corpus.py), imported by path."""
    if "corpus" in sys.modules:
        return sys.modules["corpus"]
    path = Path(__file__).parents[2] / "codegen" / "tests" / "corpus.py"
    spec = importlib.util.spec_from_file_location("corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus"] = module
    spec.loader.exec_module(module)
    return module


# ---- kernel sinks ----------------------------------------------------------------------------------------------


def buffer(slot: int, dtype: DType, size: int = SIZE) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), slot)


def elementwise(name: str, inputs: list[DType], outputs: list[Callable[[list[UOp]], UOp]]) -> UOp:
    """A sink with one output per function of the loaded inputs; outputs take slots 0..k-1, inputs follow."""
    loop = UOp.range(SIZE, 0, AxisKind.LOOP)
    loaded = [buffer(len(outputs) + k, dtype).index(loop).load() for k, dtype in enumerate(inputs)]
    effects = []
    for slot, make in enumerate(outputs):
        value = make(loaded)
        effects.append(buffer(slot, value.dtype).index(loop).store(value).end(loop))
    return UOp(Ops.SINK, dtypes.void, tuple(effects), KernelInfo(name))


FLOAT_OPS = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.TRUNC, Ops.MULACC)
INT_OPS = (
    Ops.ADD,
    Ops.SUB,
    Ops.MUL,
    Ops.IDIV,
    Ops.MOD,
    Ops.MAX,
    Ops.NEG,
    Ops.AND,
    Ops.OR,
    Ops.XOR,
    Ops.TRUNC,
    Ops.MULACC,
)
BOOL_OPS = (Ops.ADD, Ops.MUL, Ops.MAX, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR)
COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
TRANSCENDENTAL_OPS = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW)


def alu_ops(dtype: DType) -> tuple[Ops, ...]:
    """The ALU ops the coverage kernel of `dtype` computes (besides comparisons and WHERE)."""
    if dtypes.is_float(dtype):
        return FLOAT_OPS
    if dtypes.is_bool(dtype):
        return BOOL_OPS
    return (*INT_OPS, Ops.SHL, Ops.SHR, *((Ops.THREEFRY,) if dtype == dtypes.uint64 else ()))


def _apply(op: Ops, values: list[UOp]) -> UOp:
    a, b, _, count = values  # the condition input is WHERE's
    if op in (Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.TRUNC, Ops.EXP2, Ops.LOG2, Ops.SIN):
        return a.alu(op)
    if op in (Ops.SHL, Ops.SHR):
        return a.alu(op, count)  # shift counts from their own input
    if op is Ops.MULACC:
        return a.alu(op, b, count)
    return a.alu(op, b)


def alu_kernel(dtype: DType) -> UOp:
    """Every op of `alu_ops(dtype)`, each comparison, WHERE; inputs a, b (dtype), condition (bool), count (dtype)."""
    outputs: list[Callable[[list[UOp]], UOp]] = [lambda v, op=op: _apply(op, v) for op in alu_ops(dtype)]
    outputs += [lambda v, op=op: v[0].alu(op, v[1]) for op in COMPARISONS]
    outputs.append(lambda v: v[2].where(v[0], v[1]))
    return elementwise(f"alu_{dtype.name}", [dtype, dtype, dtypes.bool, dtype], outputs)


def transcendental_kernel(dtype: DType) -> UOp:
    """EXP2, LOG2, SIN and POW of float `dtype` (decomposed by codegen for the CPU renderers)."""
    outputs: list[Callable[[list[UOp]], UOp]] = [lambda v, op=op: _apply(op, v) for op in TRANSCENDENTAL_OPS]
    return elementwise(f"transcendental_{dtype.name}", [dtype, dtype, dtypes.bool, dtype], outputs)


def cast_kernel(source: DType) -> UOp:
    """`source` cast to every dtype."""
    outputs: list[Callable[[list[UOp]], UOp]] = [lambda v, t=target: v[0].cast(t) for target in dtypes.all]
    return elementwise(f"cast_{source.name}", [source], outputs)


LINEAR_DTYPES = tuple(d for d in dtypes.all if d != dtypes.bfloat16)
"""Dtypes a hand-built linear program may use on the CPU (codegen emulates bfloat16 before renderers see it)."""

BITCAST_DTYPES = tuple(d for d in dtypes.all if d != dtypes.bool)  # a bool holding 2..255 has no meaning


def bitcast_kernel(source: DType) -> UOp:
    """`source` bit cast to every other dtype of its size."""
    targets = [t for t in BITCAST_DTYPES if t.itemsize == source.itemsize and t != source]
    outputs: list[Callable[[list[UOp]], UOp]] = [lambda v, t=target: v[0].bitcast(t) for target in targets]
    return elementwise(f"bitcast_{source.name}", [source], outputs)


def wide_copy_kernel() -> tuple[UOp, list[Opt]]:
    """out_k[i] = in_k[i] + in_k[i] (or xor for bool) for every dtype, upcast by 4: wide loads and stores."""
    outputs: list[Callable[[list[UOp]], UOp]] = []
    for k, dtype in enumerate(dtypes.all):
        outputs.append(lambda v, k=k, d=dtype: (v[k] ^ v[k]) | v[k] if d == dtypes.bool else v[k] + v[k])
    return elementwise("wide_copies", list(dtypes.all), outputs), [Opt(OptOps.UPCAST, 0, 4)]


def gated_kernel() -> UOp:
    """out0[i] = a[i - 3] where 3 <= i < 40 else 0 (a gated load); out1[i] = a[i] + 1 only where i is even."""
    loop = UOp.range(SIZE, 0, AxisKind.LOOP)
    out0, out1, a = buffer(0, dtypes.float32), buffer(1, dtypes.int32), buffer(2, dtypes.float32)
    ints = buffer(3, dtypes.int32)
    inside = (loop >= 3) & loop.lt(40)
    shifted = a.index(loop - 3, gate=inside).load()
    gated_store = out1.index(loop, gate=(loop % 2).eq(0)).store(ints.index(loop).load() + 1)
    return UOp(
        Ops.SINK, dtypes.void, (out0.index(loop).store(shifted).end(loop), gated_store.end(loop)), KernelInfo("gated")
    )


def vector_program(dtype: DType) -> UOp:
    """A hand-built lowered kernel graph over groups of 4: out[group] = a's group with its lanes reversed, except odd
    groups take a gated wide load of the next group (the last group's gate is off: it reads the alternative 1s)."""
    int32, wide = dtypes.int32, dtype.vec(4).ptr(SIZE)
    out, a = UOp(Ops.DEFINE_GLOBAL, dtype.ptr(SIZE), arg=0), UOp(Ops.DEFINE_GLOBAL, dtype.ptr(SIZE), arg=1)
    loop = UOp(Ops.RANGE, int32, (UOp.const(int32, SIZE // 4),), RangeArg(0, AxisKind.LOOP))
    offset = loop * 4
    loaded = UOp(Ops.INDEX, wide, (a, offset)).load()
    lanes = [loaded.gep(lane) for lane in (3, 2, 1, 0)]
    odd = (loop % 2).eq(1)
    gate = (offset + 4).lt(SIZE) & odd
    alternative = UOp.vectorize(*([UOp.const(dtype, truncate(dtype, 1))] * 4))
    gated = UOp(Ops.LOAD, dtype.vec(4), (UOp(Ops.INDEX, wide, (a, offset + 4)), alternative, gate))
    chosen = UOp.vectorize(*(odd.where(gated.gep(lane), lanes[lane]) for lane in range(4)))
    store = UOp(Ops.INDEX, wide, (out, offset)).store(chosen)
    return UOp(Ops.SINK, dtypes.void, (store.end(loop),))


def printable(sink: UOp, renderer: Renderer) -> list[UOp]:
    """A hand-built lowered kernel graph as the linear program `renderer` prints: its dtypes emulated, linearized."""
    return linearize(emulate_dtypes(sink, renderer))


def check_linear_program(sink: UOp, renderer: Renderer, var_vals: dict[str, int] | None = None) -> str:
    """Render, compile and run a hand-built kernel graph natively and in the interpreter; outputs must match."""
    uops = printable(sink, renderer)
    source = renderer.render(uops, "kernel")
    compiler = renderer.compiler
    assert isinstance(compiler, HostCompiler)
    kernel = compiler.load(compiler.compile(source), KernelSignature.of(uops))
    slots = sorted({u.arg: u.dtype.base.scalar() for u in uops if u.op is Ops.DEFINE_GLOBAL}.items())
    rng = np.random.default_rng(3)
    buffers = []
    for _, dtype in slots:
        values = input_values(dtype, rng)
        buffers.append(to_storage(values, dtype) if dtype in EMULATED else values.astype(storage_dtype(dtype)))
    native, reference = [b.copy() for b in buffers], [b.copy() for b in buffers]
    kernel(*(native[slot].ctypes.data for slot, _ in slots), *(var_vals or {}).values())
    run_program(uops, reference, var_vals or {}, (1, 1, 1), (1, 1, 1))
    for slot, dtype in slots:
        same = same_bits(dtype, native[slot], reference[slot])
        assert same.all(), f"slot {slot}: {native[slot][~same]} != {reference[slot][~same]}\n{source}"
    return source


def symbolic_kernel() -> UOp:
    """A sum over rows of symbolic length n, and a second variable m scaling the result."""
    n, m = UOp.variable("n", 1, 16), UOp.variable("m", 0, 100)
    rows = 4
    out, a = buffer(0, dtypes.int64, rows), buffer(1, dtypes.int64, rows * 16)
    i, j = UOp.range(rows, 0, AxisKind.LOOP), UOp.range(n, 1, AxisKind.REDUCE)
    total = a.index(i * n + j).load().reduce(j) * m.cast(dtypes.int64)
    return UOp(Ops.SINK, dtypes.void, (out.index(i).store(total).end(i),), KernelInfo("symbolic"))


def matmul_kernel() -> UOp:
    """An 8 x 8 float32 matmul over k = 8 (every buffer SIZE elements)."""
    out, a, b = (buffer(slot, dtypes.float32) for slot in range(3))
    i, j = UOp.range(8, 0, AxisKind.LOOP), UOp.range(8, 1, AxisKind.LOOP)
    k = UOp.range(8, 2, AxisKind.REDUCE)
    total = (a.index(i * 8 + k).load() * b.index(k * 8 + j).load()).reduce(k)
    return UOp(Ops.SINK, dtypes.void, (out.index(i * 8 + j).store(total).end(i, j),), KernelInfo("matmul"))


def square_matmul_kernel(size: int, name: str = "matmul") -> UOp:
    """A (size, size) float32 matmul, every buffer size * size elements, the reduce an explicit REDUCE node."""
    c, a, b = (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size * size), arg=slot) for slot in range(3))
    i, j = UOp.range(size, 0, AxisKind.LOOP), UOp.range(size, 1, AxisKind.LOOP)
    k = UOp.range(size, 2, AxisKind.REDUCE)
    product = a.index(i * size + k).load() * b.index(k * size + j).load()
    total = UOp(Ops.REDUCE, dtypes.float32, (product, k), Ops.ADD)
    return UOp(Ops.SINK, dtypes.void, (c.index(i * size + j).store(total).end(i, j),), KernelInfo(name))


def threaded_gather_case(rows: int = 64, width: int = 48, table_rows: int = 10) -> tuple[UOp, list[Opt]]:
    """out[i, j] = table[row[i], j] spread over 2 cores: the loaded row may be any int32, so the offsets are int64
    while core_id stays the convention's int32 (issue 36: LLVM rejected `mul i64 %core_id` of an `i32 %core_id`).
    Buffers (out: float32, row: int32, table: float32); rows[i] < table_rows."""
    out = buffer(0, dtypes.float32, rows * width)
    row_of, table = buffer(1, dtypes.int32, rows), buffer(2, dtypes.float32, table_rows * width)
    i, j = UOp.range(rows, 0, AxisKind.LOOP), UOp.range(width, 1, AxisKind.LOOP)
    row = row_of.index(i).load().cast(dtypes.index)
    store = out.index(i * width + j).store(table.index(row * width + j).load())
    return UOp(Ops.SINK, dtypes.void, (store.end(i, j),), KernelInfo("threaded_gather")), [Opt(OptOps.THREAD, 0, 2)]


def check_threaded_gather(renderer: Renderer) -> Program:
    """Compile `threaded_gather_case` for `renderer`, run it natively on every core and compare with numpy."""
    sink, opts = threaded_gather_case()
    program = Program(get_program(sink, renderer, opts))
    (core,) = [u for u in program.uops if u.op is Ops.SPECIAL]
    assert core.arg.name == "core_id" and core.dtype == dtypes.int32
    assert any(u.op is Ops.INDEX and u.src[1].dtype == dtypes.int64 for u in program.uops)
    rng = np.random.default_rng(36)
    row_of = rng.integers(0, 10, 64).astype(np.int32)
    table = rng.standard_normal(10 * 48).astype(np.float32)
    out = np.zeros(64 * 48, np.float32)
    compiler = renderer.compiler
    assert isinstance(compiler, HostCompiler)
    run_native(program, compiler, [out, row_of, table], {})
    np.testing.assert_array_equal(out.reshape(64, 48), table.reshape(10, 48)[row_of])
    return program


def threefry_max_case(rounds: int = 20) -> tuple[UOp, list[Opt]]:
    """max over (16, 64, 3) of Threefry-like rounds (x0 += x1; x1 = rotl(x1) ^ x0) of each position, the size-3 axis
    unrolled: what a fused `Tensor.normal(16, 64, 3).max()` computes, whose NaN-flag accumulator sent LLVM 22's CRC
    recognizer into exponential time (see kiln.renderers.toolchain.LLVM_OPTIONS). Buffers (out: float32 of 1, key:
    uint32 of 1)."""
    out, key = buffer(0, dtypes.float32, 1), buffer(1, dtypes.uint32, 1)
    i, j, k = (UOp.range(size, axis, AxisKind.REDUCE) for axis, size in enumerate((16, 64, 3)))
    word0, word1 = ((i * 64 + j) * 3 + k).cast(dtypes.uint32), key.index(UOp.const(dtypes.index, 0)).load()
    for number in range(rounds):
        bits = (13, 15, 26, 6, 17, 29, 16, 24)[number % 8]
        word0 = word0 + word1
        word1 = ((word1 << bits) | (word1 >> (32 - bits))) ^ word0
    total = (word0 >> 8).cast(dtypes.float32).reduce(i, j, k, op=Ops.MAX)
    store = out.index(UOp.const(dtypes.index, 0)).store(total)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo("threefry_max")), [Opt(OptOps.UNROLL, 2, 0)]


def wide_core_id_program() -> list[UOp]:
    """A linear program reading an int64 core_id, which the CPU convention (an int32 parameter) cannot pass."""
    size = UOp.const(dtypes.int64, 2)
    out = buffer(0, dtypes.int64, 2)
    core = UOp(Ops.SPECIAL, dtypes.int64, (size,), SpecialArg("core_id"))
    return [out, size, core, out.index(core), out.index(core).store(core)]


# ---- inputs ----------------------------------------------------------------------------------------------------


def special_values(dtype: DType) -> list[float | int | bool]:
    """Edge values of `dtype`: extremes, zeros, infinities, NaN, subnormals, halves, INT_MIN and -1 ..."""
    if dtype == dtypes.bool:
        return [False, True]
    if dtypes.is_int(dtype):
        low, high = int(dtypes.min(dtype)), int(dtypes.max(dtype))
        return [low, high, 0, 1, -1 if low < 0 else 2, low + 1, high - 1, 7, 3, 100, -100 if low < 0 else 200]
    exponent_bits, mantissa_bits = dtypes.finfo(dtype)
    bias = (1 << (exponent_bits - 1)) - 1
    tiny = 2.0 ** (1 - bias - mantissa_bits)
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.75, 7.0, -7.5, tiny, -tiny, 2.0 ** (1 - bias), 1e30, -1e30]
    values += [float("inf"), float("-inf"), float("nan"), 65504.0, 70000.0, 3e9, -5e18, 1.9e19, 2.5e38, 0.1]
    return [float(truncate(dtype, v)) for v in values]


def input_values(dtype: DType, rng: np.random.Generator, role: str = "value") -> np.ndarray:
    """SIZE values of `dtype` (compute form): specials then random; `role` "count" gives shift counts."""
    if role == "count" and dtypes.is_int(dtype):
        bits = dtype.itemsize * 8
        low = -2 if not dtypes.is_unsigned(dtype) else 0
        return np.array(rng.integers(low, bits + 3, SIZE), dtype=compute_dtype(dtype))
    specials = special_values(dtype)
    if dtype == dtypes.bool:
        return np.array(rng.integers(0, 2, SIZE), dtype=bool)
    if dtypes.is_int(dtype):
        info = np.iinfo(compute_dtype(dtype))
        drawn = rng.integers(info.min, info.max, SIZE, dtype=compute_dtype(dtype), endpoint=True)
        small = rng.integers(-50 if info.min < 0 else 0, 50, SIZE)
        drawn = np.where(rng.random(SIZE) < 0.5, small, drawn).astype(compute_dtype(dtype))
    else:
        drawn = np.array([truncate(dtype, float(x)) for x in rng.standard_normal(SIZE) * 8.0], dtype=np.float64)
    values = np.array(drawn, dtype=compute_dtype(dtype))
    order = rng.permutation(len(specials))
    values[: len(specials)] = np.array([specials[k] for k in order], dtype=compute_dtype(dtype))
    return values


def divisors(values: np.ndarray) -> np.ndarray:
    """`values` with zeros replaced (the interpreter raises on an integer division by zero)."""
    return np.where(values == 0, np.ones_like(values), values)


def case_inputs(sink: UOp, rng: np.random.Generator) -> list[np.ndarray]:
    """Storage arrays for every input buffer of a coverage sink (slots after the outputs), by its name."""
    name = sink.arg.name
    slots = sorted({u.arg: u.dtype.base for u in sink.toposort() if u.op is Ops.DEFINE_GLOBAL}.items())
    stored = {u.src[0].src[0].arg for u in sink.toposort() if u.op is Ops.STORE}
    arrays = []
    for slot, dtype in slots:
        if slot in stored:
            arrays.append(np.zeros(SIZE, storage_dtype(dtype)))
            continue
        role = "count" if name.startswith("alu_") and slot == max(s for s, _ in slots) else "value"
        values = input_values(dtype, rng, role)
        if name.startswith("alu_") and dtypes.is_int(dtype) and role == "value" and slot == len(stored) + 1:
            values = divisors(values)  # b is the divisor of IDIV / MOD
        if name.startswith("alu_") and role == "count" and dtypes.is_int(dtype):
            values = values.astype(compute_dtype(dtype))
        arrays.append(to_storage(values, dtype) if dtype in EMULATED else values.astype(storage_dtype(dtype)))
    if name.startswith("alu_") and dtypes.is_int(slots[-1][1]) and not dtypes.is_unsigned(slots[-1][1]):
        a, b = arrays[len(stored)], arrays[len(stored) + 1]
        a[0], b[0] = np.iinfo(a.dtype).min, -1  # INT_MIN / -1 and INT_MIN % -1 wrap
    return arrays


# ---- running ---------------------------------------------------------------------------------------------------


def _value_of(dtype: DType, raw: np.ndarray) -> np.ndarray:
    emulated = EMULATED.get(dtype)
    return emulated.decode(raw) if emulated is not None else raw


def run_native(program: Program, compiler: HostCompiler, buffers: list[np.ndarray], var_vals: dict[str, int]) -> None:
    """Run `program`'s binary in this process on numpy `buffers` (all its cores, one after another)."""
    assert program.binary is not None
    kernel = compiler.load(program.binary, program.signature)
    arguments = [buffers[slot].ctypes.data for slot in program.globals]
    arguments += [var_vals[v.arg.name] for v in program.variables]
    if any(p.kind == "core_id" for p in kernel.parameters):
        cores = program.launch_dims(var_vals)[0][0]
        for core in range(cores):
            kernel(*arguments, core)
    else:
        kernel(*arguments)


def run_reference(program: Program, buffers: list[np.ndarray], var_vals: dict[str, int]) -> None:
    """Run `program`'s linear uops in codegen's interpreter."""
    global_size, local_size = program.launch_dims(var_vals)
    run_program(program, buffers, var_vals, global_size, local_size)


def same_bits(dtype: DType, native: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Elementwise: identical storage bits, or both NaN (NaN payloads are not part of the IR's semantics)."""
    native, reference = np.asarray(native), np.asarray(reference)
    equal = native.view(np.uint8).reshape(len(native), -1) == reference.view(np.uint8).reshape(len(reference), -1)
    same = equal.all(axis=1)
    if dtypes.is_float(dtype):
        emulated = EMULATED.get(dtype)
        decode: Callable[[np.ndarray], np.ndarray] = emulated.decode if emulated is not None else np.asarray
        same |= np.isnan(decode(native).astype(np.float64)) & np.isnan(decode(reference).astype(np.float64))
    return np.asarray(same)


def check_against_reference(
    sink: UOp, renderer: Renderer, opts: list[Opt] | None = None, var_vals: dict[str, int] | None = None, seed: int = 0
) -> Program:
    """Compile `sink` for `renderer`, run it natively and in the interpreter on the same inputs, compare all outputs."""
    values = var_vals or {}
    program = Program(get_program(sink, renderer, opts))
    compiler = renderer.compiler
    assert isinstance(compiler, HostCompiler)
    buffers = case_inputs(sink, np.random.default_rng(seed))
    native = [array.copy() for array in buffers]
    reference = [array.copy() for array in buffers]
    run_native(program, compiler, native, values)
    run_reference(program, reference, values)
    # numpy's fmax (the interpreter's MAX) picks either zero of a (+0, -0) tie, depending on the array's layout
    max_slots = {e.src[0].src[0].src[0].arg for e in sink.src if e.src[0].src[1].op is Ops.MAX}
    slot_dtypes = {u.arg: u.dtype.base.scalar() for u in sink.toposort() if u.op is Ops.DEFINE_GLOBAL}
    for slot, dtype in sorted(slot_dtypes.items()):
        same = same_bits(dtype, native[slot], reference[slot])
        if slot in max_slots:
            same |= (_value_of(dtype, native[slot]) == 0) & (_value_of(dtype, reference[slot]) == 0)
        if not same.all():
            bad = np.nonzero(~same)[0][:6]
            inputs = [buffers[s][bad].tolist() for s in range(len(buffers)) if s not in program.outs]
            raise AssertionError(
                f"{sink.arg.name} slot {slot} ({dtype}): native {native[slot][bad].tolist()} != reference "
                f"{reference[slot][bad].tolist()} at {bad.tolist()} (inputs {inputs})\n{program.source}"
            )
    return program


# ---- what the tests iterate --------------------------------------------------------------------------------------


def coverage_cases() -> list[tuple[str, UOp, list[Opt] | None, dict[str, int]]]:
    """(name, sink, opts, variable values) of every coverage kernel; opts [] keeps the big ones scalar (fast)."""
    cases: list[tuple[str, UOp, list[Opt] | None, dict[str, int]]] = []
    cases += [(f"alu_{d.name}", alu_kernel(d), [], {}) for d in dtypes.all]
    cases += [(f"cast_{d.name}", cast_kernel(d), [], {}) for d in dtypes.all]
    cases += [(f"bitcast_{d.name}", bitcast_kernel(d), [], {}) for d in BITCAST_DTYPES]
    cases += [(f"transcendental_{d.name}", transcendental_kernel(d), [], {}) for d in dtypes.floats]
    wide, wide_opts = wide_copy_kernel()
    cases.append(("wide_copies", wide, wide_opts, {}))
    cases.append(("gated", gated_kernel(), None, {}))
    cases.append(("symbolic", symbolic_kernel(), None, {"n": 11, "m": 7}))
    cases.append(("symbolic_upcast", symbolic_kernel(), [Opt(OptOps.UPCAST, 0, 4)], {"n": 5, "m": 3}))
    # a register-tiled matmul whose columns loop is moved outside its rows loop (SWAP of two LOOP axes)
    swapped = [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.SWAP, 0, 1)]
    cases.append(("matmul_swapped_loops", matmul_kernel(), swapped, {}))
    return cases


def run_corpus_case(case: Any, renderer: Renderer, rng: np.random.Generator) -> Program:
    """Compile a corpus case for `renderer`, run it natively, compare with the case's numpy reference."""
    corpus = load_corpus()
    program = Program(get_program(case.sink, renderer))
    compiler = renderer.compiler
    assert isinstance(compiler, HostCompiler)
    inputs = case.inputs(rng)
    outputs = case.output_buffers()
    stored = [corpus.to_storage(values, dtype) for values, (dtype, _) in zip(inputs, case.buffers[case.outputs :])]
    run_native(program, compiler, [*outputs, *stored], case.var_vals)
    got = [corpus.from_storage(raw, dtype) for raw, (dtype, _) in zip(outputs, case.buffers)]
    corpus.assert_matches(case, got, case.reference(inputs, case.var_vals), case.exact)
    return program


# ---- float MAX on special values -----------------------------------------------------------------------------------

MAX_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64)


def max_pairs_case(dtype: DType) -> tuple[UOp, list[np.ndarray], np.ndarray]:
    """out = MAX(a, b) over every ordered pair of `special_values(dtype)` (zeros of both signs, infinities, NaN,
    subnormals): the sink, its buffers (output zeroed, then a, b in storage form) and `exec_alu`'s results."""
    values = special_values(dtype)
    pairs = [(x, y) for x in values for y in values]
    size = len(pairs)
    loop = UOp.range(size, 0, AxisKind.LOOP)
    a, b = (buffer(slot, dtype, size).index(loop).load() for slot in (1, 2))
    store = buffer(0, dtype, size).index(loop).store(a.alu(Ops.MAX, b)).end(loop)
    sink = UOp(Ops.SINK, dtypes.void, (store,), KernelInfo(f"max_pairs_{dtype.name}"))
    storage = storage_dtype(dtype)
    inputs = [np.array([pair[k] for pair in pairs], dtype=storage) for k in (0, 1)]
    expected = np.array([exec_alu(Ops.MAX, dtype, pair) for pair in pairs], dtype=storage)
    return sink, [np.zeros(size, dtype=storage), *inputs], expected


def check_max_pairs(got: np.ndarray, expected: np.ndarray, dtype: DType, inputs: list[np.ndarray], what: str) -> None:
    """Bit-exact comparison (any NaN equals any NaN) naming the operand pairs that differ."""
    same = same_bits(dtype, got, expected)
    wrong = [(a, b, g, e) for a, b, g, e, ok in zip(inputs[1], inputs[2], got, expected, same) if not ok]
    assert same.all(), f"{what}: MAX(a, b) -> got, exec_alu: {wrong}"


# ---- negative literals -----------------------------------------------------------------------------------------

NEGATIVE_CONSTANT_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int8, dtypes.int32, dtypes.int64)


def negative_constants_case(dtype: DType) -> tuple[UOp, list[np.ndarray], list[np.ndarray]]:
    """Each op of a[i] and a negative constant c, with c as the right operand (where `x-c` printed bare reads as the
    decrement `x--c`): SUB, ADD, MUL, MAX, and NEG of a value that is c. Floats also use -0.0, -inf and the most
    negative finite value, ints their minimum. Returns the sink, its buffers (outputs zeroed, then a) and the
    results: numpy's in `dtype` (wrapping like C's -fwrapv for ints), `exec_alu`'s for MAX (which orders -0 < +0)."""
    if dtypes.is_float(dtype):
        constants: list[float | int] = [-1.25, -0.0, float("-inf"), float(dtypes.min(dtype))]
        if dtype == dtypes.float16:
            constants[3] = -65504.0
    else:
        constants = [-3, int(dtypes.min(dtype))]
    size = 8
    numpy_dtype = storage_dtype(dtype)
    a = np.array([3, -2, 0, 1, 7, -7, 5, 2], dtype=numpy_dtype)
    loop = UOp.range(size, 0, AxisKind.LOOP)
    value = buffer(len(constants) * 5, dtype, size).index(loop).load()
    stores, expected = [], []
    with np.errstate(all="ignore"):
        for k, constant in enumerate(constants):
            c = UOp.const(dtype, constant)
            # a value equal to c that is not a CONST (so no rewrite folds the NEG): c + 0 * a
            c_from_data = c + value * UOp.const(dtype, 0)
            c_array = np.array(constant, dtype=numpy_dtype)
            results = [
                (value - c, a - c_array),
                (value + c, a + c_array),
                (value * c, a * c_array),
                (value.alu(Ops.MAX, c), [exec_alu(Ops.MAX, dtype, (x, constant)) for x in a.tolist()]),  # -0 < +0
                (c_from_data.alu(Ops.NEG), -(c_array + a * np.array(0, dtype=numpy_dtype))),
            ]
            for slot, (uop, reference) in enumerate(results, start=5 * k):
                stores.append(buffer(slot, dtype, size).index(loop).store(uop).end(loop))
                expected.append(np.asarray(reference, dtype=numpy_dtype))
    sink = UOp(Ops.SINK, dtypes.void, tuple(stores), KernelInfo(f"negative_constants_{dtype.name}"))
    buffers = [np.zeros(size, dtype=numpy_dtype) for _ in expected] + [a]
    return sink, buffers, expected


def check_negative_constants(buffers: list[np.ndarray], expected: list[np.ndarray], dtype: DType, what: str) -> None:
    """Every output slot equals numpy's result bit for bit (signed zeros included)."""
    for slot, want in enumerate(expected):
        same = same_bits(dtype, buffers[slot], want)
        assert same.all(), f"{what}: output {slot} got {buffers[slot]}, want {want}"
