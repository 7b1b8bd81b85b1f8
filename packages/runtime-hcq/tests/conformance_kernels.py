"""Coverage kernels of the execution conformance suite: every ALU op per dtype, casts and bitcasts between dtypes,
transcendental sweeps, wide loads/stores, local memory and multi-core kernels.

Each `CoverageKernel` is a kernel sink plus input values in storage form (raw bits for bfloat16/fp8). Inputs mix the
values where implementations disagree (signed zeros, infinities, NaN, denormals, extreme integers, out-of-range
shift counts, INT_MIN / -1) with random ones; divisors are never zero (the IR leaves the result of a division by
zero to the target: the interpreter raises, compiled code gives 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.codegen import KernelInfo, Opt
from kiln.codegen.numpy_semantics import EMULATED, compute_dtype, from_storage, storage_dtype, to_storage
from kiln.uops import AxisKind, DType, Ops, UOp, dtypes, truncate
from kiln.uops.alu import exec_alu

TRANSCENDENTAL_OPS = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW)
"""Ops a renderer may compute with a library approximation instead of codegen's exact decomposition."""


@dataclass(frozen=True)
class CoverageKernel:
    """A kernel sink and its inputs; `output_ops[k]` is the op output k tests (for its ulp allowance).

    `definition`, when given, computes the expected raw outputs from the IR's scalar definition (`exec_alu`,
    `truncate`), one element at a time; None in its list marks outputs it does not define exactly (transcendental
    ops, whose result is codegen's decomposition), which are compared with the interpreter instead.
    """

    name: str
    sink: UOp
    buffers: tuple[tuple[DType, int], ...]
    outputs: int
    inputs: tuple[np.ndarray, ...]
    output_ops: tuple[Ops | None, ...]
    opts: tuple[Opt, ...] | None = None
    var_vals: dict[str, int] = field(default_factory=dict)
    definition: Callable[[], list[np.ndarray | None]] | None = None


def python_values(raw: np.ndarray, dtype: DType) -> list[Any]:
    """Storage -> Python scalars (bool, int, float) as the scalar definition takes them."""
    return [value.item() if hasattr(value, "item") else value for value in from_storage(raw, dtype)]


def raw_values(values: list[Any], dtype: DType) -> np.ndarray:
    """Python scalars (already exact in `dtype`) -> storage."""
    return to_storage(np.array(values, dtype=compute_dtype(dtype)), dtype)


def buffer(slot: int, dtype: DType, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), slot)


def kernel(name: str, stores: list[UOp]) -> UOp:
    return UOp(Ops.SINK, dtypes.void, tuple(stores), KernelInfo(name))


# ---- input values ------------------------------------------------------------------------------------------------


def _bits_to_storage(bits: np.ndarray, dtype: DType) -> np.ndarray:
    return bits.astype(np.dtype(f"u{dtype.itemsize}")).view(storage_dtype(dtype))


def float_specials(dtype: DType) -> np.ndarray:
    """Raw bits of the special values of float `dtype`: zeros, ones, infinities, NaN, denormal and normal limits."""
    width = 8 * dtype.itemsize
    exponent, mantissa = dtypes.finfo(dtype)
    sign = 1 << (width - 1)
    one = ((1 << (exponent - 1)) - 1) << mantissa
    infinity = ((1 << exponent) - 1) << mantissa
    patterns = [
        0,
        1,  # smallest denormal
        (1 << mantissa) - 1,  # largest denormal
        1 << mantissa,  # smallest normal
        one,
        one + 1,
        one + (1 << mantissa),  # 2.0
        infinity - 1,  # largest finite (for formats with infinities)
        infinity,
        infinity | (1 << (mantissa - 1)),  # a quiet NaN (fp8e4m3, which has no infinity: a finite value)
        infinity | ((1 << mantissa) - 1),  # all ones: a NaN in every format
    ]
    patterns += [pattern | sign for pattern in patterns]
    return np.array(sorted(set(patterns)), dtype=np.uint64)


def int_specials(dtype: DType) -> np.ndarray:
    """Extreme and small values of integer `dtype`."""
    low, high = int(dtypes.min(dtype)), int(dtypes.max(dtype))
    values = {0, 1, 2, 3, 7, high, high - 1, low, low + 1, (high >> 1) + 1, 31, 32, 33, 63, 64}
    if low < 0:
        values |= {-1, -2, -3, -7, -31, -32, -64}
    return np.array(sorted(v for v in values if low <= v <= high), dtype=storage_dtype(dtype))


def random_values(dtype: DType, count: int, rng: np.random.Generator) -> np.ndarray:
    """Random storage values of `dtype`: full-range integers, or floats half random bits and half moderate numbers."""
    if dtype == dtypes.bool:
        return rng.integers(0, 2, count).astype(bool)
    if dtypes.is_int(dtype):
        info = np.iinfo(storage_dtype(dtype))
        return rng.integers(info.min, info.max, count, dtype=storage_dtype(dtype), endpoint=True)
    bits = rng.integers(0, 1 << (8 * dtype.itemsize), count // 2, dtype=np.uint64)
    moderate = rng.standard_normal(count - count // 2) * 8
    emulated = EMULATED.get(dtype)
    moderate_storage = emulated.encode(moderate) if emulated is not None else moderate.astype(storage_dtype(dtype))
    return np.concatenate([_bits_to_storage(bits, dtype), moderate_storage])


def specials(dtype: DType) -> np.ndarray:
    """Special values of `dtype` in storage form."""
    if dtype == dtypes.bool:
        return np.array([False, True])
    if dtypes.is_int(dtype):
        return int_specials(dtype)
    return _bits_to_storage(float_specials(dtype), dtype)


def operand_pairs(dtype: DType, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of `count` values: every pair of special values, then random values."""
    special = specials(dtype)
    a = np.repeat(special, len(special))
    b = np.tile(special, len(special))
    rng = np.random.default_rng(seed)
    a = np.concatenate([a, random_values(dtype, count, rng)])[:count]
    b = np.concatenate([b, random_values(dtype, count, rng)])[:count]
    if len(a) < count:
        a = np.resize(a, count)
        b = np.resize(b, count)
    return a, b


# ---- every ALU op of one dtype -------------------------------------------------------------------------------------

Builder = Callable[[UOp, UOp, UOp, UOp], UOp]


def alu_builders(dtype: DType) -> list[tuple[str, Ops, Builder]]:
    """(name, op, build(x, y, z, condition)) of every ALU op the IR defines on `dtype`."""
    common: list[tuple[str, Ops, Builder]] = [
        ("add", Ops.ADD, lambda x, y, z, c: x.alu(Ops.ADD, y)),
        ("mul", Ops.MUL, lambda x, y, z, c: x.alu(Ops.MUL, y)),
        ("max", Ops.MAX, lambda x, y, z, c: x.alu(Ops.MAX, y)),
        ("cmplt", Ops.CMPLT, lambda x, y, z, c: x.lt(y)),
        ("cmpne", Ops.CMPNE, lambda x, y, z, c: x.ne(y)),
        ("cmpeq", Ops.CMPEQ, lambda x, y, z, c: x.eq(y)),
        ("neg", Ops.NEG, lambda x, y, z, c: x.alu(Ops.NEG)),
        ("where", Ops.WHERE, lambda x, y, z, c: c.alu(Ops.WHERE, x, y)),
    ]
    if dtype == dtypes.bool:
        return [
            *common,
            ("and", Ops.AND, lambda x, y, z, c: x.alu(Ops.AND, y)),
            ("or", Ops.OR, lambda x, y, z, c: x.alu(Ops.OR, y)),
            ("xor", Ops.XOR, lambda x, y, z, c: x.alu(Ops.XOR, y)),
        ]
    arithmetic: list[tuple[str, Ops, Builder]] = [
        *common,
        ("sub", Ops.SUB, lambda x, y, z, c: x.alu(Ops.SUB, y)),
        ("mulacc", Ops.MULACC, lambda x, y, z, c: x.alu(Ops.MULACC, y, z)),
    ]
    if dtypes.is_int(dtype):
        mask = UOp.const(dtype, 8 * dtype.itemsize - 1)
        builders: list[tuple[str, Ops, Builder]] = [
            *arithmetic,
            ("idiv", Ops.IDIV, lambda x, y, z, c: x.alu(Ops.IDIV, y)),
            ("mod", Ops.MOD, lambda x, y, z, c: x.alu(Ops.MOD, y)),
            ("and", Ops.AND, lambda x, y, z, c: x.alu(Ops.AND, y)),
            ("or", Ops.OR, lambda x, y, z, c: x.alu(Ops.OR, y)),
            ("xor", Ops.XOR, lambda x, y, z, c: x.alu(Ops.XOR, y)),
            ("shl", Ops.SHL, lambda x, y, z, c: x.alu(Ops.SHL, y)),  # counts outside [0, bits) too
            ("shr", Ops.SHR, lambda x, y, z, c: x.alu(Ops.SHR, y)),
            ("shl_in_range", Ops.SHL, lambda x, y, z, c: x.alu(Ops.SHL, y.alu(Ops.AND, mask))),
            ("shr_in_range", Ops.SHR, lambda x, y, z, c: x.alu(Ops.SHR, y.alu(Ops.AND, mask))),
            ("trunc", Ops.TRUNC, lambda x, y, z, c: x.alu(Ops.TRUNC)),
        ]
        if dtype == dtypes.uint64:
            builders.append(("threefry", Ops.THREEFRY, lambda x, y, z, c: x.alu(Ops.THREEFRY, y)))
        return builders
    return [
        *arithmetic,
        ("fdiv", Ops.FDIV, lambda x, y, z, c: x.alu(Ops.FDIV, y)),
        ("trunc", Ops.TRUNC, lambda x, y, z, c: x.alu(Ops.TRUNC)),
        ("sqrt", Ops.SQRT, lambda x, y, z, c: x.alu(Ops.SQRT)),
        ("reciprocal", Ops.RECIPROCAL, lambda x, y, z, c: x.alu(Ops.RECIPROCAL)),
        ("exp2", Ops.EXP2, lambda x, y, z, c: x.alu(Ops.EXP2)),
        ("log2", Ops.LOG2, lambda x, y, z, c: x.alu(Ops.LOG2)),
        ("sin", Ops.SIN, lambda x, y, z, c: x.alu(Ops.SIN)),
        ("pow", Ops.POW, lambda x, y, z, c: x.alu(Ops.POW, y)),
    ]


ALU_COUNT = 512


def alu_kernel(dtype: DType) -> CoverageKernel:
    """One output per ALU op of `dtype`: out_k[i] = op_k(a[i], b[i][, c[i]]) (WHERE selects by a bool input)."""
    builders = alu_builders(dtype)
    count = ALU_COUNT
    outputs = len(builders)
    a_slot, b_slot, c_slot, condition_slot = outputs, outputs + 1, outputs + 2, outputs + 3
    i = UOp.range(count, 0)
    x = buffer(a_slot, dtype, count).index(i).load()
    y = buffer(b_slot, dtype, count).index(i).load()
    z = buffer(c_slot, dtype, count).index(i).load()
    condition = buffer(condition_slot, dtypes.bool, count).index(i).load()
    stores, output_buffers = [], []
    for slot, (_, _, build) in enumerate(builders):
        value = build(x, y, z, condition)
        stores.append(buffer(slot, value.dtype, count).index(i).store(value).end(i))
        output_buffers.append((value.dtype, count))
    a, b = operand_pairs(dtype, count, seed=dtype.itemsize * 31 + len(dtype.name))
    if dtypes.is_int(dtype):
        b = np.where(b == 0, np.ones_like(b), b)  # no division by zero (undefined by the target)
    rng = np.random.default_rng(5)
    c = random_values(dtype, count, rng)
    condition_values = rng.integers(0, 2, count).astype(bool)
    values = (a, b, c, condition_values)

    def definition() -> list[np.ndarray | None]:
        x, y, z = (python_values(raw, dtype) for raw in values[:3])
        flags = condition_values.tolist()
        expected: list[np.ndarray | None] = []
        for (_, op, build), (out_dtype, _) in zip(builders, output_buffers):
            sample = build(*(UOp.const(dtype, 0),) * 3, UOp.const(dtypes.bool, False))
            if op in TRANSCENDENTAL_OPS or sample.op is not op or any(s.op is not Ops.CONST for s in sample.src):
                expected.append(None)  # a decomposition, or an op of derived operands: checked by the interpreter
                continue
            results = []
            for k in range(count):
                operands = {
                    1: (x[k],),
                    2: (x[k], y[k]),
                    3: (flags[k], x[k], y[k]) if op is Ops.WHERE else (x[k], y[k], z[k]),
                }
                results.append(exec_alu(op, out_dtype, operands[len(sample.src)]))
            expected.append(raw_values(results, out_dtype))
        return expected

    return CoverageKernel(
        f"alu_{dtype.name}",
        kernel(f"alu_{dtype.name}", stores),
        (*output_buffers, (dtype, count), (dtype, count), (dtype, count), (dtypes.bool, count)),
        outputs,
        values,
        tuple(op for _, op, _ in builders),
        definition=definition,
    )


def rounding_twice_differs(kernel: CoverageKernel) -> np.ndarray:
    """Where MULACC(a, b, c) rounded once (the IR's fused definition) differs from a * b + c rounded twice."""
    dtype = kernel.buffers[kernel.outputs][0]
    x, y, z = (python_values(raw, dtype) for raw in kernel.inputs[:3])
    fused = [exec_alu(Ops.MULACC, dtype, (a, b, c)) for a, b, c in zip(x, y, z)]
    twice = [exec_alu(Ops.ADD, dtype, (exec_alu(Ops.MUL, dtype, (a, b)), c)) for a, b, c in zip(x, y, z)]
    return ~np.array([f == t or (f != f and t != t) for f, t in zip(fused, twice)])


# ---- casts and bitcasts from one dtype ---------------------------------------------------------------------------


def cast_kernel(source: DType) -> CoverageKernel:
    """out_k[i] = cast(a[i], target_k) for every other dtype, then bitcasts to every dtype of the same size."""
    count = ALU_COUNT
    targets = [target for target in dtypes.all if target != source]
    bit_targets = [t for t in targets if t.itemsize == source.itemsize and source != dtypes.bool and t != dtypes.bool]
    outputs = len(targets) + len(bit_targets)
    i = UOp.range(count, 0)
    x = buffer(outputs, source, count).index(i).load()
    stores = []
    for slot, target in enumerate(targets):
        stores.append(buffer(slot, target, count).index(i).store(x.cast(target)).end(i))
    for offset, target in enumerate(bit_targets):
        slot = len(targets) + offset
        stores.append(buffer(slot, target, count).index(i).store(x.bitcast(target)).end(i))
    values, _ = operand_pairs(source, count * 2, seed=source.itemsize * 7 + len(source.name))
    values = np.concatenate([specials(source), values])[:count]

    def definition() -> list[np.ndarray | None]:
        scalars = python_values(values, source)
        expected: list[np.ndarray | None] = [raw_values([truncate(t, v) for v in scalars], t) for t in targets]
        unsigned = np.dtype(f"u{source.itemsize}")
        expected += [values.view(unsigned).view(storage_dtype(t)) for t in bit_targets]  # the same bits
        return expected

    return CoverageKernel(
        f"cast_{source.name}",
        kernel(f"cast_{source.name}", stores),
        (*((target, count) for target in targets), *((target, count) for target in bit_targets), (source, count)),
        outputs,
        (values,),
        (Ops.CAST,) * len(targets) + (Ops.BITCAST,) * len(bit_targets),
        definition=definition,
    )


def fp8_patterns_kernel(source: DType, other: DType) -> tuple[UOp, list[tuple[DType, int]]]:
    """Every bit pattern of fp8 `source` moved by BITCASTs and copies, of loaded and of selected values.

    Buffers: outputs 0..4, then inputs a, b (`source`, 256 each) and a bool gate; with v = gate ? a : b:
    out0 = bitcast(a, uint8), out1 = a, out2 = bitcast(v, uint8), out3 = bitcast(v, `other`), out4 = v, each
    holding the bits of a (out0, out1) or of v (the others) exactly."""
    count = 256
    i = UOp.range(count, 0)
    a = buffer(5, source, count).index(i).load()
    b = buffer(6, source, count).index(i).load()
    selected = buffer(7, dtypes.bool, count).index(i).load().where(a, b)
    results = [a.bitcast(dtypes.uint8), a, selected.bitcast(dtypes.uint8), selected.bitcast(other), selected]
    stores = [buffer(slot, value.dtype, count).index(i).store(value).end(i) for slot, value in enumerate(results)]
    layout = [(value.dtype, count) for value in results] + [(source, count), (source, count), (dtypes.bool, count)]
    return kernel(f"fp8_patterns_{source.name}", stores), layout


# ---- transcendental sweeps -----------------------------------------------------------------------------------------

SWEEP_OPS = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL)


def sweep_inputs(dtype: DType) -> np.ndarray:
    """Every bit pattern of an 8/16-bit format; 2**16 (float32) or 2**14 (float64) evenly spaced ones plus specials."""
    width = 8 * dtype.itemsize
    if width <= 16:
        bits = np.arange(1 << width, dtype=np.uint64)
    else:
        samples = 1 << (16 if width == 32 else 14)
        bits = np.arange(samples, dtype=np.uint64) * np.uint64((1 << width) // samples) + np.uint64(12345)
        bits = np.concatenate([float_specials(dtype), bits])
    return _bits_to_storage(bits, dtype)


def sweep_kernel(dtype: DType) -> CoverageKernel:
    """out_k[i] = op_k(a[i]) for EXP2, LOG2, SIN, SQRT, RECIPROCAL over a sweep of bit patterns of float `dtype`."""
    values = sweep_inputs(dtype)
    count = len(values)
    i = UOp.range(count, 0)
    x = buffer(len(SWEEP_OPS), dtype, count).index(i).load()
    stores = [buffer(slot, dtype, count).index(i).store(x.alu(op)).end(i) for slot, op in enumerate(SWEEP_OPS)]
    return CoverageKernel(
        f"sweep_{dtype.name}",
        kernel(f"sweep_{dtype.name}", stores),
        ((dtype, count),) * (len(SWEEP_OPS) + 1),
        len(SWEEP_OPS),
        (values,),
        SWEEP_OPS,
    )


# ---- shapes: wide accesses, local memory, cores ------------------------------------------------------------------


def elementwise_kernel(dtype: DType, count: int, opts: tuple[Opt, ...], name: str) -> CoverageKernel:
    """out[i] = a[i] * b[i] + a[i] (with `opts`, e.g. UPCAST for wide loads and stores)."""
    i = UOp.range(count, 0)
    x = buffer(1, dtype, count).index(i).load()
    y = buffer(2, dtype, count).index(i).load()
    sink = kernel(name, [buffer(0, dtype, count).index(i).store(x * y + x).end(i)])
    rng = np.random.default_rng(count)
    return CoverageKernel(
        name,
        sink,
        ((dtype, count),) * 3,
        1,
        (random_values(dtype, count, rng), random_values(dtype, count, rng)),
        (Ops.ADD,),
        opts,
    )


def row_sum_kernel(rows: int, columns: int, opts: tuple[Opt, ...], name: str) -> CoverageKernel:
    """out[r] = sum_c a[r * columns + c] over small float32 integers (exact in any order), with `opts`."""
    row, column = UOp.range(rows, 0), UOp.range(columns, 1, AxisKind.REDUCE)
    a = buffer(1, dtypes.float32, rows * columns)
    total = a.index(row * columns + column).load().reduce(column, op=Ops.ADD)
    sink = kernel(name, [buffer(0, dtypes.float32, rows).index(row).store(total).end(row)])
    values = np.random.default_rng(rows * columns).integers(-9, 10, rows * columns).astype(np.float32)
    return CoverageKernel(
        name, sink, ((dtypes.float32, rows), (dtypes.float32, rows * columns)), 1, (values,), (Ops.ADD,), opts
    )


def symbolic_kernel(limit: int) -> CoverageKernel:
    """out[r, i] = a[i] * r - i for i < n and r < 3: a symbolic loop bound read at each launch (int32)."""
    n = UOp.variable("n", 1, limit)
    i, r = UOp.range(n, 0), UOp.range(3, 1)
    a = buffer(1, dtypes.int32, limit)
    value = a.index(i).load() * r.cast(dtypes.int32) - i.cast(dtypes.int32)
    sink = kernel("symbolic_rows", [buffer(0, dtypes.int32, 3 * limit).index(r * limit + i).store(value).end(i, r)])
    values = np.random.default_rng(limit).integers(-1000, 1000, limit).astype(np.int32)
    return CoverageKernel(
        "symbolic_rows", sink, ((dtypes.int32, 3 * limit), (dtypes.int32, limit)), 1, (values,), (Ops.ADD,)
    )
