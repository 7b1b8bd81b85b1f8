"""The execution conformance suite: the same kernels on every (device, renderer) pair present, against numpy and
codegen's reference interpreter.

Pairs: CPU with the C renderer (gcc, and clang when installed), CPU with the LLVM IR renderer, CL with the OpenCL
renderer (PoCL in CI), PYTHON with the
Python renderer, and CUDA with its renderers when a GPU opens (otherwise those pairs are skipped with the reason).

Oracles:
- codegen's kernel corpus (packages/codegen/tests/corpus.py, imported by path): each case's numpy reference, exact
  where the case says so;
- coverage kernels (conformance_kernels.py): codegen's interpreter running the same kernel lowered for an "oracle"
  renderer: the Python renderer's GPU shape (so the interpreter runs every element at once) with the pair
  renderer's `native_ops`, `native_dtypes` and `emulated_dtypes` (so codegen decomposes and emulates exactly the
  same ops). Compared
  bit for bit: integers and bools exactly, floats bit-identical (any NaN matches any NaN), except ops a renderer
  computes natively with a library approximation (EXP2/LOG2/SIN/POW in its `native_ops`), allowed NATIVE_ULP
  units in the last place; transcendental sweeps where codegen decomposes the op are also compared with numpy
  within the ulp codegen's README states.
Compiled programs are built once per process (and their binaries come from the renderers' disk cache).
"""

from __future__ import annotations

import functools
import inspect
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from conformance_kernels import (
    SWEEP_OPS,
    TRANSCENDENTAL_OPS,
    CoverageKernel,
    alu_kernel,
    cast_kernel,
    elementwise_kernel,
    fp8_patterns_kernel,
    row_sum_kernel,
    sweep_kernel,
    symbolic_kernel,
)
from corpus import CORPUS, KernelCase, assert_matches, to_storage

from kiln.codegen import Opt, OptOps, Program, Renderer, get_program, run_program
from kiln.codegen.numpy_semantics import EMULATED, from_storage, storage_dtype
from kiln.renderers import PythonRenderer
from kiln.runtime import Buffer, Device, DeviceUnavailable
from kiln.uops import DType, Ops, PtrDType, dtypes

NATIVE_ULP = 4
"""Ulps a natively computed transcendental may differ from the interpreter's numpy result (each side <= 2 ulp)."""

DECOMPOSED_ULP = {(Ops.EXP2, dtypes.float32): 2}
"""codegen's stated accuracy of its decompositions against numpy (README): 1 ulp, float32 EXP2 2 ulp."""


# ---- the (device, renderer) pairs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """A device and one of its renderers (configured: e.g. the C renderer with gcc)."""

    id: str
    device: str
    make_renderer: Callable[[], Renderer]

    def __repr__(self) -> str:
        return self.id


def _discover_pairs() -> list[Any]:
    pairs: list[Any] = []
    for kind in ("CPU", "PYTHON", "CUDA", "CL", "WEBGPU"):
        try:
            device = Device[kind]
        except DeviceUnavailable as error:
            pairs.append(pytest.param(None, id=f"{kind}-unavailable", marks=pytest.mark.skip(reason=str(error))))
            continue
        if not device.renderers:
            reason = f"{kind} opens but kiln.renderers has none of its renderers"
            pairs.append(pytest.param(None, id=f"{kind}-no-renderers", marks=pytest.mark.skip(reason=reason)))
        for renderer_class in device.renderers:
            name = renderer_class.__name__.removesuffix("Renderer")
            if "compiler_choice" in inspect.signature(renderer_class).parameters:  # the C renderer: each compiler
                for compiler in ("gcc", "clang"):
                    if shutil.which(compiler) is None:
                        reason = f"{compiler} is not installed"
                        pairs.append(pytest.param(None, id=f"{kind}-{name}-{compiler}", marks=pytest.mark.skip(reason)))
                        continue
                    make = functools.partial(renderer_class, compiler_choice=compiler)  # type: ignore[call-arg]
                    pairs.append(Pair(f"{kind}-{name}-{compiler}", kind, make))
            else:
                pairs.append(Pair(f"{kind}-{name}", kind, functools.partial(device.create_renderer, renderer_class)))
    return pairs


PAIRS = _discover_pairs()


@functools.cache
def renderer_of(pair: Pair) -> Renderer:
    return pair.make_renderer()


def skip_unstored(pair: Pair, buffers: Any) -> None:
    """Skips the test when a buffer's dtype is one the pair's device does not store (WEBGPU: 32-bit scalars only)."""
    stored = Device[pair.device].supported_dtypes
    missing = sorted({dtype.name for dtype, _ in buffers if dtype.scalar() not in stored})
    if missing:
        pytest.skip(f"{pair.device} stores no {', '.join(missing)} (its device table row)")


@functools.cache
def program_of(pair: Pair, key: str, opts: tuple[Opt, ...] | None) -> Program:
    """The program of kernel `key` for `pair` (built once per process)."""
    return Program(get_program(SINKS[key], renderer_of(pair), None if opts is None else list(opts)))


@functools.cache
def oracle_renderer(pair: Pair) -> Renderer:
    """GPU-shaped (the interpreter runs all elements at once) with the pair's native ops and dtypes."""
    target = renderer_of(pair)
    oracle = PythonRenderer()
    oracle.native_ops = target.native_ops
    oracle.native_dtypes = target.native_dtypes
    oracle.emulated_dtypes = target.emulated_dtypes
    oracle.compiler = None  # the interpreter runs Program.uops
    return oracle


@functools.cache
def oracle_program(pair: Pair, key: str) -> Program:
    """Kernel `key` lowered without opts for `oracle_renderer(pair)`."""
    return Program(get_program(SINKS[key], oracle_renderer(pair), []))


SINKS: dict[str, Any] = {case.name: case.sink for case in CORPUS}


# ---- running on a device and comparing -------------------------------------------------------------------------


def launch(
    pair: Pair,
    program: Program,
    buffers: list[tuple[DType, int]],
    inputs: list[np.ndarray],
    outputs: int,
    var_vals: dict[str, int],
) -> list[np.ndarray]:
    """Runs `program` on `pair`'s device: zeroed outputs, `inputs` (storage form) in; the outputs' raw storage out."""
    device_buffers = [Buffer(pair.device, size, dtype) for dtype, size in buffers]
    for buffer, (dtype, size) in zip(device_buffers[:outputs], buffers):
        buffer.copyin(np.zeros(size, storage_dtype(dtype)))
    for buffer, values in zip(device_buffers[outputs:], inputs):
        buffer.copyin(np.ascontiguousarray(values))
    Device[pair.device].runtime(program)(device_buffers, var_vals, wait=True)
    results = []
    for buffer, (dtype, size) in zip(device_buffers[:outputs], buffers):
        raw = np.empty(size, storage_dtype(dtype))
        buffer.copyout(raw)
        results.append(raw)
    return results


def interpret(
    program: Program, buffers: list[tuple[DType, int]], inputs: list[np.ndarray], outputs: int, var_vals: dict[str, int]
) -> list[np.ndarray]:
    """The same program run by codegen's interpreter on the same inputs."""
    arrays = [np.zeros(size, storage_dtype(dtype)) for dtype, size in buffers[:outputs]]
    global_size, local_size = program.launch_dims(var_vals)
    inputs = [np.ascontiguousarray(values).copy() for values in inputs]
    run_program(program, [*arrays, *inputs], var_vals, global_size, local_size)
    return arrays


def is_nan(raw: np.ndarray, dtype: DType) -> np.ndarray:
    emulated = EMULATED.get(dtype)
    if emulated is not None:
        return np.isnan(emulated.decode(raw))
    return np.isnan(raw) if dtypes.is_float(dtype) else np.zeros(raw.shape, bool)


def ordered_bits(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """Float bit patterns mapped to integers that are consecutive for consecutive floats (for ulp distances)."""
    width = 8 * dtype.itemsize
    bits = raw.view(np.dtype(f"u{dtype.itemsize}")).astype(np.int64) if width < 64 else raw.view(np.int64)
    if width < 64:
        sign = bits >> (width - 1)
        magnitude = bits & ((1 << (width - 1)) - 1)
        return np.where(sign == 1, -magnitude, magnitude)
    return np.where(bits < 0, np.int64(-(2**63)) - bits, bits)


def ulp_distance(got: np.ndarray, expected: np.ndarray, dtype: DType) -> np.ndarray:
    a, b = ordered_bits(got, dtype), ordered_bits(expected, dtype)
    # Exact in uint64: the wrapped difference of two int64s is the true distance modulo 2**64 (a float64 difference
    # would round distances between large bit patterns to multiples of 512).
    high, low = np.maximum(a, b).view(np.uint64), np.minimum(a, b).view(np.uint64)
    return high - low


def mismatches(got: np.ndarray, expected: np.ndarray, dtype: DType, ulp: int) -> np.ndarray:
    """Where raw outputs differ: exact for ints/bools; floats bit-identical (NaN == NaN) or within `ulp`."""
    if not dtypes.is_float(dtype):
        return np.asarray(got != expected)
    nan_got, nan_expected = is_nan(got, dtype), is_nan(expected, dtype)
    both_numbers = ~nan_got & ~nan_expected
    unsigned = np.dtype(f"u{dtype.itemsize}")
    differ = ulp_distance(got, expected, dtype) > ulp if ulp else got.view(unsigned) != expected.view(unsigned)
    return np.asarray((nan_got != nan_expected) | (both_numbers & differ))


def assert_conforms(
    got: np.ndarray,
    expected: np.ndarray,
    dtype: DType,
    ulp: int,
    what: str,
    inputs: np.ndarray | None = None,
    exclude: np.ndarray | None = None,
) -> None:
    """Raises AssertionError naming the first differing element (elements in `exclude` are not compared)."""
    mismatch = mismatches(got, expected, dtype, ulp)
    if exclude is not None:
        mismatch &= ~exclude
    if mismatch.any():
        where = np.flatnonzero(mismatch)
        first = int(where[0])
        detail = f", input {inputs[first]!r}" if inputs is not None and len(inputs) > first else ""
        raise AssertionError(
            f"{what}: {len(where)} of {got.size} elements differ (allowed {ulp} ulp); first at {first}: "
            f"got {got[first]!r}, expected {expected[first]!r}{detail}"
        )


def check_coverage(
    pair: Pair, kernel: CoverageKernel, program: Program, var_vals: dict[str, int] | None = None
) -> None:
    """Runs `kernel` on the pair and compares every output with the interpreter's run of the oracle program."""
    values = kernel.var_vals if var_vals is None else var_vals
    inputs = list(kernel.inputs)
    got = launch(pair, program, list(kernel.buffers), inputs, kernel.outputs, values)
    expected = interpret(oracle_program(pair, kernel.name), list(kernel.buffers), inputs, kernel.outputs, values)
    defined = definition_of(kernel)
    native = renderer_of(pair).native_ops
    deviations = []
    for slot, (raw, reference, op) in enumerate(zip(got, expected, kernel.output_ops)):
        dtype = kernel.buffers[slot][0]
        if defined is not None and defined[slot] is not None:
            reference, source = defined[slot], "the IR's scalar definition"
        else:
            source = "the interpreter"
        ulp = NATIVE_ULP if op in TRANSCENDENTAL_OPS and op in native else 0
        what = f"{pair.id} {kernel.name} output {slot} ({op}) vs {source}"
        known = known_deviation(pair, kernel, slot)
        exclude = None if known is None else known[1]
        assert_conforms(raw, reference, dtype, ulp, what, inputs[0], exclude)
        if known is not None and (mismatches(raw, reference, dtype, ulp) & known[1]).any():
            deviations.append(known[0])
    report_known_deviations(pair, deviations)


def report_known_deviations(pair: Pair, deviations: list[str]) -> None:
    """Everything else conformed: mark the test xfailed for the known deviations it saw (it passes once fixed)."""
    if deviations:
        pytest.xfail(f"{pair.id}: known deviation(s): " + "; ".join(sorted(set(deviations))))


def known_deviation(pair: Pair, kernel: CoverageKernel, slot: int) -> tuple[str, np.ndarray] | None:
    """(description, elements) of a deviation from the IR found by this suite and reported to its owner, if
    output `slot` of `kernel` may show it. The elements are excluded from the comparison; when they still differ
    the test is reported as xfailed with the description, and it passes once the owner fixes the deviation."""
    op, dtype = kernel.output_ops[slot], kernel.buffers[slot][0]
    source = kernel.buffers[kernel.outputs][0]
    if pair.device == "CUDA" and kernel.name.startswith("alu_") and op is Ops.MAX and dtypes.is_float(dtype):
        # IR (kiln.uops.alu): MAX orders -0.0 below +0.0. The CPU renderers (C, LLVM IR) and the interpreter keep
        # it; the CUDA renderers have not been run against it yet.
        a, b = kernel.inputs[0], kernel.inputs[1]
        zero_a, zero_b = from_storage(a, dtype) == 0, from_storage(b, dtype) == 0
        unsigned = np.dtype(f"u{dtype.itemsize}")
        different_signs = (a.view(unsigned) >> (8 * dtype.itemsize - 1)) != (
            b.view(unsigned) >> (8 * dtype.itemsize - 1)
        )
        return "MAX of zeros of opposite signs is not +0.0", np.asarray(zero_a & zero_b & different_signs)
    if pair.device == "WEBGPU" and op is Ops.EXP2 and kernel.name.startswith("sweep_"):
        # the adapter's exp2 (lavapipe's) flushes subnormal results to zero: inputs in (-150, -126) reach them
        values = from_storage(kernel.inputs[0], source)
        with np.errstate(invalid="ignore"):
            return "exp2 flushes subnormal results to zero", np.asarray((values > -150) & (values < -126))
    if pair.device == "WEBGPU" and op is Ops.LOG2:
        # ... its log2 reads subnormal inputs as 2**-127 and, for x in (0.5, 2), keeps WGSL's absolute error bound
        # (2**-21) rather than a relative one
        values = from_storage(kernel.inputs[0], source)
        with np.errstate(invalid="ignore"):
            elements = ((values > 0) & (values < 2.0**-126)) | ((values > 0.5) & (values < 2.0))
        return "log2 of subnormals and near 1", np.asarray(elements)
    if pair.device == "WEBGPU" and op is Ops.SIN:
        # ... and its sin reduces large arguments inexactly (WGSL bounds sin's error only on [-pi, pi])
        values = from_storage(kernel.inputs[0], source)
        with np.errstate(invalid="ignore"):
            return "sin of large arguments", np.asarray(np.abs(values) > 2.0**16)
    if pair.device == "WEBGPU" and op is Ops.POW:
        # ... and its pow (exp2(y * log2(x))) flushes subnormal bases and results
        values = np.abs(from_storage(kernel.inputs[0], source)).astype(np.float64)
        exponents = from_storage(kernel.inputs[1], source).astype(np.float64)
        with np.errstate(all="ignore"):
            results = np.abs(np.power(values, exponents))
            subnormal = ((values > 0) & (values < 2.0**-126)) | ((results > 0) & (results < 2.0**-126))
        return "pow of subnormal bases and results", np.asarray(subnormal)
    return None


_definitions: dict[str, list[np.ndarray | None]] = {}


def definition_of(kernel: CoverageKernel) -> list[np.ndarray | None] | None:
    """The kernel's outputs by the IR's scalar definition (computed once per process), if it has one."""
    if kernel.definition is None:
        return None
    if kernel.name not in _definitions:
        _definitions[kernel.name] = kernel.definition()
    return _definitions[kernel.name]


# ---- codegen's corpus ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("optimize", [False, True], ids=["noopt", "heuristic"])
@pytest.mark.parametrize("case", CORPUS, ids=lambda case: case.name)
@pytest.mark.parametrize("pair", PAIRS, ids=repr)
def test_corpus_matches_numpy(pair: Pair, case: KernelCase, optimize: bool) -> None:
    skip_unstored(pair, case.buffers)
    program = program_of(pair, case.name, None if optimize else ())
    inputs = case.inputs(np.random.default_rng(3))
    stored = [to_storage(values, dtype) for values, (dtype, _) in zip(inputs, case.buffers[case.outputs :])]
    raw = launch(pair, program, list(case.buffers), stored, case.outputs, case.var_vals)
    got = [from_storage(values, dtype) for values, (dtype, _) in zip(raw, case.buffers)]
    assert_matches(case, got, case.reference(inputs, case.var_vals), exact=case.exact)


# ---- coverage kernels ----------------------------------------------------------------------------------------------


@functools.cache
def coverage(name: str) -> CoverageKernel:
    kind, _, argument = name.partition(":")
    builders: dict[str, Callable[[str], CoverageKernel]] = {
        "alu": lambda dtype: alu_kernel(dtypes.from_name(dtype)),
        "cast": lambda dtype: cast_kernel(dtypes.from_name(dtype)),
        "sweep": lambda dtype: sweep_kernel(dtypes.from_name(dtype)),
    }
    kernel = builders[kind](argument)
    SINKS[kernel.name] = kernel.sink
    return kernel


def run_coverage(pair: Pair, name: str) -> tuple[CoverageKernel, Program]:
    kernel = coverage(name)
    skip_unstored(pair, kernel.buffers)
    return kernel, program_of(pair, kernel.name, kernel.opts)


@pytest.mark.parametrize("dtype", dtypes.all, ids=lambda dtype: dtype.name)
@pytest.mark.parametrize("pair", PAIRS, ids=repr)
def test_every_alu_op_of_every_dtype(pair: Pair, dtype: DType) -> None:
    kernel, program = run_coverage(pair, f"alu:{dtype.name}")
    check_coverage(pair, kernel, program)


@pytest.mark.parametrize("dtype", dtypes.all, ids=lambda dtype: dtype.name)
@pytest.mark.parametrize("pair", PAIRS, ids=repr)
def test_casts_and_bitcasts_from_every_dtype(pair: Pair, dtype: DType) -> None:
    kernel, program = run_coverage(pair, f"cast:{dtype.name}")
    check_coverage(pair, kernel, program)


@pytest.mark.parametrize("source", [dtypes.fp8e4m3, dtypes.fp8e5m2], ids=lambda dtype: dtype.name)
@pytest.mark.parametrize("pair", PAIRS, ids=repr)
def test_fp8_bit_patterns_survive_bitcasts_and_copies(pair: Pair, source: DType) -> None:
    # every NaN (both signs, every payload), infinity, subnormal and zero pattern: BITCAST and copies move raw bits,
    # so the oracle is the input bytes themselves (selected by the gate), not any float conversion
    other = dtypes.fp8e5m2 if source == dtypes.fp8e4m3 else dtypes.fp8e4m3
    sink, layout = fp8_patterns_kernel(source, other)
    SINKS[sink.arg.name] = sink
    skip_unstored(pair, layout)
    program = program_of(pair, sink.arg.name, None)
    codes = np.arange(256, dtype=np.uint8)
    gate = np.random.default_rng(8).integers(0, 2, 256).astype(np.bool_)
    a, b = codes, codes[::-1].copy()
    got = launch(pair, program, layout, [a, b, gate], 5, {})
    selected = np.where(gate, a, b)
    for slot, expected in enumerate([a, a, selected, selected, selected]):
        raw = got[slot].view(np.uint8)
        wrong = np.flatnonzero(raw != expected)
        assert not len(wrong), (
            f"{pair.id} {source.name} output {slot}: {len(wrong)} patterns changed, first "
            f"{int(expected[wrong[0]]):#04x} -> {int(raw[wrong[0]]):#04x}"
        )


FLOATS = [dtype for dtype in dtypes.all if dtypes.is_float(dtype)]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda dtype: dtype.name)
@pytest.mark.parametrize("pair", PAIRS, ids=repr)
def test_transcendental_sweeps_over_special_values(pair: Pair, dtype: DType) -> None:
    kernel, program = run_coverage(pair, f"sweep:{dtype.name}")
    check_coverage(pair, kernel, program)
    if dtype not in (dtypes.float16, dtypes.float32, dtypes.float64):
        return  # numpy has no bfloat16/fp8 math to compare with
    (values,) = kernel.inputs
    got = launch(pair, program, list(kernel.buffers), [values], kernel.outputs, {})
    numpy_functions = {
        Ops.EXP2: np.exp2,
        Ops.LOG2: np.log2,
        Ops.SIN: np.sin,
        Ops.SQRT: np.sqrt,
        Ops.RECIPROCAL: np.reciprocal,
    }
    native = renderer_of(pair).native_ops
    deviations = []
    for raw, op in zip(got, SWEEP_OPS):
        if op in native and op in TRANSCENDENTAL_OPS:
            continue  # a library's approximation: compared with the interpreter above
        with np.errstate(all="ignore"):
            reference = numpy_functions[op](values)
        ulp = DECOMPOSED_ULP.get((op, dtype), 1) if op in TRANSCENDENTAL_OPS else 0
        assert_conforms(raw, reference, dtype, ulp, f"{pair.id} {op} on {dtype.name} vs numpy", values, None)
    report_known_deviations(pair, deviations)


# ---- shapes: wide accesses, symbolic sizes, local memory, cores --------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "width"), [(dtypes.float32, 4), (dtypes.float32, 8), (dtypes.int8, 8), (dtypes.float16, 2)], ids=str
)
@pytest.mark.parametrize("pair", PAIRS, ids=repr)
def test_wide_loads_and_stores(pair: Pair, dtype: DType, width: int) -> None:
    name = f"wide_{dtype.name}_{width}"
    kernel = elementwise_kernel(dtype, 256, (Opt(OptOps.UPCAST, 0, width),), name)
    skip_unstored(pair, kernel.buffers)
    SINKS[name] = kernel.sink
    program = program_of(pair, name, kernel.opts)
    widths = {u.dtype.base.count for u in program.uops if u.op is Ops.INDEX and isinstance(u.dtype, PtrDType)}
    if width in renderer_of(pair).vector_widths:
        assert width in widths, f"{pair.id} renders {width}-wide accesses, the program has widths {widths}"
    check_coverage(pair, kernel, program)


@pytest.mark.parametrize("pair", PAIRS, ids=repr)
def test_one_program_serves_every_value_of_a_symbolic_size(pair: Pair) -> None:
    kernel = symbolic_kernel(48)
    SINKS[kernel.name] = kernel.sink
    program = program_of(pair, "symbolic_rows", None)
    for n in (1, 5, 17, 48):
        check_coverage(pair, kernel, program, {"n": n})


GROUP_OPTS = [(Opt(OptOps.GROUP, 1, 16),), (Opt(OptOps.GROUPTOP, 1, 8), Opt(OptOps.LOCAL, 0, 2))]


@pytest.mark.parametrize("opts", GROUP_OPTS, ids=["group", "grouptop-local"])
@pytest.mark.parametrize("pair", PAIRS, ids=repr)
def test_local_memory_reductions(pair: Pair, opts: tuple[Opt, ...]) -> None:
    if not renderer_of(pair).has_shared:
        pytest.skip(f"{pair.id} has no shared memory")
    name = f"group_{len(opts)}"
    kernel = row_sum_kernel(8, 64, opts, name)
    SINKS[name] = kernel.sink
    program = program_of(pair, name, opts)
    assert {Ops.DEFINE_LOCAL, Ops.BARRIER} <= {u.op for u in program.uops}
    check_coverage(pair, kernel, program)
    (values,) = kernel.inputs
    got = launch(pair, program, list(kernel.buffers), [values], 1, {})[0]
    np.testing.assert_array_equal(got, values.reshape(8, 64).sum(axis=1))


@pytest.mark.parametrize("pair", PAIRS, ids=repr)
def test_multi_core_kernels(pair: Pair) -> None:
    renderer = renderer_of(pair)
    if not renderer.has_threads:
        pytest.skip(f"{pair.id} runs no THREAD axes")
    cores = min(renderer.thread_max, 2)
    opts = (Opt(OptOps.THREAD, 0, cores),)
    kernel = row_sum_kernel(16, 32, opts, "threaded_row_sum")
    SINKS["threaded_row_sum"] = kernel.sink
    program = program_of(pair, "threaded_row_sum", opts)
    assert program.global_size == (cores, 1, 1)
    check_coverage(pair, kernel, program)
