"""The CUDA renderer and its NVRTC compiler.

Without a GPU the tests check three things: NVRTC compiles every kernel (codegen's corpus and coverage kernels for
every op, dtype, cast, vector access, gate, variable, shared memory and tensor cores) into a cubin for sm_90 and
into PTX for sm_80 (the emulated-float op kernels for sm_90 only: they are slow to compile); the same CUDA C
compiled for the host (g++, grid run thread by thread) computes what numpy and codegen's reference interpreter
compute; and the errors name what is wrong.
"""

from __future__ import annotations

import math
from pathlib import Path

import cpu_kernels
import numpy as np
import pytest
from cuda_on_host import compile_on_host, host_compiler, temporary_directory
from gpu_kernels import (
    CORPUS,
    alu_kernel,
    cast_kernel,
    check_tensor_core_matmul,
    coverage_sinks,
    from_storage,
    input_arrays,
    matmul_sink,
    mulacc_extremes_case,
    to_storage,
    undefined_cast_lanes,
    wmma_program,
)

from kiln.codegen import Opt, OptOps, Program, get_program, run_program
from kiln.codegen.numpy_semantics import EMULATED
from kiln.renderers.cuda import CUDACompiler, CUDARenderer
from kiln.renderers.nvrtc import NvrtcCompileError, NvrtcNotFoundError, load_nvrtc, nvrtc_available
from kiln.renderers.ptx import PTXAssemblerError, PTXCompiler, find_ptxas
from kiln.renderers.target import architecture_number
from kiln.renderers.tensor_cores import TENSOR_CORES_SM80
from kiln.uops import DType, Ops, dtypes
from kiln.uops.knobs import Context

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC missing: pip install 'kiln-renderers[cuda]'")
needs_host_compiler = pytest.mark.skipif(host_compiler() is None, reason="no g++/clang++ to run CUDA C on the host")
ARCHITECTURES = ("sm_80", "sm_90")


class HostCUDARenderer(CUDARenderer):
    """The CUDA renderer without a compiler: get_program stops at the source (compiled for the host instead)."""

    compiler = None  # type: ignore[assignment]


@needs_nvrtc
def test_nvrtc_version_and_architectures() -> None:
    nvrtc = load_nvrtc()
    assert nvrtc.version >= (12, 0)
    assert {75, 80, 90} <= set(nvrtc.supported_architectures)
    with Context(NVRTC_PATH=nvrtc.path):  # the knob names the file to load
        assert load_nvrtc().path == nvrtc.path


def test_missing_nvrtc_names_the_extra() -> None:
    renderer = CUDARenderer("sm_80")  # creating a renderer loads nothing
    with Context(NVRTC_PATH="/nonexistent/libnvrtc.so.13"):
        with pytest.raises(NvrtcNotFoundError, match=r"kiln-renderers\[cuda\]"):
            load_nvrtc()
        with pytest.raises(NvrtcNotFoundError, match="NVRTC_PATH"):
            CUDACompiler("sm_80").compile("")
    assert renderer.compiler.arch == "sm_80"


def test_architecture_names() -> None:
    assert architecture_number("sm_86") == 86 and architecture_number("sm_90a") == 90
    assert architecture_number("90") == 90
    for bad in ("sm_70", "sm_61", "gfx90a"):
        with pytest.raises(ValueError, match=repr(bad)):
            CUDARenderer(bad)
    with pytest.raises(ValueError, match="'elf'"):
        CUDACompiler("sm_80", output="elf")
    assert CUDARenderer("sm_75").tensor_cores == () and CUDARenderer("sm_80").tensor_cores == TENSOR_CORES_SM80


@needs_nvrtc
def test_cache_key_has_version_arch_and_options() -> None:
    keys = {CUDACompiler(arch, output).cache_key("src") for arch in ARCHITECTURES for output in ("ptx", "cubin")}
    assert len(keys) == 4
    major, minor = load_nvrtc().version
    assert all(f"nvrtc {major}.{minor}" in key and "--fmad=false" in key for key in keys)


@needs_nvrtc
def test_compile_error_carries_the_log() -> None:
    with pytest.raises(NvrtcCompileError, match="undefined_thing"):
        CUDACompiler("sm_80").compile('extern "C" __global__ void k() { undefined_thing(); }')


CHUNKS = 3
TARGETS = (("sm_90", "cubin", True), ("sm_80", "ptx", False))
"""(arch, output, with the emulated-float op kernels): a cubin is fully assembled (NVRTC runs its own ptxas) but
costs more; the op and cast kernels of float16/bfloat16/fp8 (about 1 s each) are compiled for one architecture."""
EMULATED_NAMES = tuple(f"{kind}_{d.name}" for kind in ("alu", "casts") for d in (*EMULATED, dtypes.float16))


@needs_nvrtc
@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize(("arch", "output", "emulated"), TARGETS)
def test_every_kernel_compiles(arch: str, output: str, emulated: bool, chunk: int) -> None:
    renderer = CUDARenderer(arch, output=output)
    kernels = [k for k in coverage_sinks() if emulated or k[0] not in EMULATED_NAMES]
    for name, sink, opts in kernels[chunk::CHUNKS]:
        program = Program(get_program(sink, renderer, opts))
        threads = math.prod(program.launch_dims({v.arg.name: v.arg.hi for v in program.variables})[1])
        assert f"__launch_bounds__({threads}) kiln_kernel(" in program.source, name
        binary = program.binary
        assert binary is not None and b"kiln_kernel" in binary, name
        if output == "cubin":
            assert binary[:4] == b"\x7fELF", name
        else:
            ptx = binary.decode()
            assert f"\n.target {arch}\n" in ptx and ".entry kiln_kernel(" in ptx and f".maxntid {threads}, 1, 1" in ptx
        assert ("__shared__" in program.source) == any(u.op is Ops.DEFINE_LOCAL for u in program.uops), name
        assert ("__syncthreads();" in program.source) == any(u.op is Ops.BARRIER for u in program.uops), name


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tensor_cores_render_mma_and_compile(arch: str) -> None:
    renderer = CUDARenderer(arch, output="ptx")
    for core in renderer.tensor_cores:
        source = renderer.render(wmma_program(core, renderer), "wmma")
        accumulate = MMA_TYPES[(core.dtype_in, core.dtype_out)]
        assert f"mma.sync.aligned.m16n8k16.row.col.{accumulate}" in source
        ptx = renderer.compiler.compile(source).decode()
        assert renderer.compiler.disassemble(ptx.encode()) == ptx
        assert f".target {arch}" in ptx and f"mma.sync.aligned.m16n8k16.row.col.{accumulate}" in ptx
        ptxas = find_ptxas()
        if ptxas is not None:  # the toolkit's ptxas takes NVRTC's PTX only if it knows that PTX ISA version
            try:
                PTXCompiler(arch).assemble(ptx, ptxas)
            except PTXAssemblerError as error:
                if "Unsupported .version" not in str(error):
                    raise
    with pytest.raises(ValueError, match="no tensor core"):
        CUDARenderer("sm_75").render(wmma_program(TENSOR_CORES_SM80[0], CUDARenderer("sm_80")), "wmma")


def test_sm80_layouts_are_the_ptx_fragment_formulas() -> None:
    # PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type", register by register
    for core in TENSOR_CORES_SM80:
        assert core.dims == (8, 16, 16) and core.layouts is not None
        a, b, c = core.layouts
        for lane in range(32):
            group, thread_in_group = lane >> 2, lane % 4
            for i in range(8):
                expected = (group + 8 * (i in (2, 3, 6, 7)), 2 * thread_in_group + (i & 1) + 8 * (i >= 4))
                assert a.coordinate(lane, i) == expected
            for i in range(4):
                assert b.coordinate(lane, i) == (2 * thread_in_group + (i & 1) + 8 * (i >= 2), group)
                assert c.coordinate(lane, i) == (group + 8 * (i >= 2), 2 * thread_in_group + (i & 1))


@pytest.mark.parametrize("core_number", [0, 1], ids=["f32_accumulator", "f16_accumulator"])
def test_tensor_core_opt_on_a_matmul_computes_the_matmul(core_number: int) -> None:
    # the program codegen builds for the CUDA renderer's units, run by the interpreter (WMMA through the layouts)
    check_tensor_core_matmul(HostCUDARenderer("sm_80"), core_number, (32, 16, 48), seed=11)


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tensor_core_opt_renders_mma_and_compiles(arch: str) -> None:
    # compile-only: the host path runs threads one at a time and cannot run a warp's mma.sync
    for core_number, core in enumerate(TENSOR_CORES_SM80):
        if core.dtype_in != dtypes.float16:
            continue  # matmul_sink reads float16; the bfloat16 unit's matmuls: test_nvidia_tensor_cores.py
        renderer = CUDARenderer(arch, output="ptx")
        sink = matmul_sink(32, 16, 32, core.dtype_out)
        program = Program(get_program(sink, renderer, [tc_opt(core_number)]))
        accumulate = "f32.f16.f16.f32" if core.dtype_out == dtypes.float32 else "f16.f16.f16.f16"
        assert f"mma.sync.aligned.m16n8k16.row.col.{accumulate}" in program.source
        assert program.binary is not None
        ptx = program.binary.decode()
        assert f".target {arch}" in ptx and f"mma.sync.aligned.m16n8k16.row.col.{accumulate}" in ptx
        assert program.launch_dims({})[1] == (32, 1, 1)  # one warp per block: the lanes are the hardware lanes
    cubin = CUDARenderer("sm_90", output="cubin")
    binary = Program(get_program(matmul_sink(16, 8, 16, dtypes.float32), cubin, [tc_opt(0)])).binary
    assert binary is not None and binary[:4] == b"\x7fELF"


MMA_TYPES = {
    (dtypes.float16, dtypes.float32): "f32.f16.f16.f32",
    (dtypes.float16, dtypes.float16): "f16.f16.f16.f16",
    (dtypes.bfloat16, dtypes.float32): "f32.bf16.bf16.f32",
}
"""The .dtype.atype.btype.ctype of each unit's mma.sync (PTX ISA "Warp-level matrix multiply-accumulate")."""


def tc_opt(core_number: int) -> Opt:
    """The TC opt over the matmul's reduce axis (axis 2) with unit `core_number` of TENSOR_CORES_SM80."""
    return Opt(OptOps.TC, 2, core_number)


# ---- running the CUDA C on the host -----------------------------------------------------------------------------


def _run_on_host(programs: list[Program], buffers: list[list[np.ndarray]], var_vals: list[dict[str, int]]) -> None:
    with temporary_directory() as directory:
        launches = compile_on_host([p.source for p in programs], Path(directory))
        for launch, program, arrays, values in zip(launches, programs, buffers, var_vals):
            global_size, local_size = program.launch_dims(values)
            pointers = [array.ctypes.data for array in arrays]
            launch(global_size, local_size, *pointers, *(values[v.arg.name] for v in program.variables))


@needs_host_compiler
def test_float_max_of_special_values_on_the_host_is_exec_alus() -> None:
    renderer = HostCUDARenderer("sm_80")
    cases = [(dtype, *cpu_kernels.max_pairs_case(dtype)) for dtype in cpu_kernels.MAX_DTYPES]
    programs = [Program(get_program(sink, renderer, [])) for _, sink, _, _ in cases]
    _run_on_host(programs, [buffers for _, _, buffers, _ in cases], [{} for _ in cases])
    for dtype, _, buffers, expected in cases:
        cpu_kernels.check_max_pairs(buffers[0], expected, dtype, buffers, f"CUDA C on the host, {dtype.name}")


@needs_host_compiler
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_mulacc_is_fused_at_the_edges_of_the_range_on_the_host(dtype: DType) -> None:
    # MULACC is CUDA's fma: one rounding, and no overflow inside (codegen's fma emulation gave NaN for 0 * max + c)
    sink, buffers, expected = mulacc_extremes_case(dtype)
    program = Program(get_program(sink, HostCUDARenderer("sm_80"), []))
    assert ("fmaf(" if dtype == dtypes.float32 else "fma(") in program.source
    _run_on_host([program], [buffers], [{}])
    np.testing.assert_array_equal(buffers[0], expected)


@needs_host_compiler
def test_negative_constants_on_the_host_compute_like_numpy() -> None:
    # the CUDA C of `x - c`, `-c`, MAX(x, c) with c < 0 (parenthesized: a bare `x--1.25f` is a decrement)
    renderer = HostCUDARenderer("sm_80")
    cases = [(dtype, *cpu_kernels.negative_constants_case(dtype)) for dtype in cpu_kernels.NEGATIVE_CONSTANT_DTYPES]
    programs = [Program(get_program(sink, renderer, [])) for _, sink, _, _ in cases]
    assert not any("--" in program.source for program in programs)
    _run_on_host(programs, [buffers for _, _, buffers, _ in cases], [{} for _ in cases])
    for dtype, _, buffers, expected in cases:
        cpu_kernels.check_negative_constants(buffers, expected, dtype, f"CUDA C on the host, {dtype.name}")


@needs_nvrtc
def test_negative_constants_compile_with_nvrtc() -> None:
    renderer = CUDARenderer("sm_90")
    for dtype in cpu_kernels.NEGATIVE_CONSTANT_DTYPES:
        sink, _, _ = cpu_kernels.negative_constants_case(dtype)
        program = Program(get_program(sink, renderer, []))
        assert program.binary, dtype


@needs_host_compiler
def test_corpus_on_the_host_matches_numpy() -> None:
    renderer = HostCUDARenderer("sm_80")
    runs = []
    for case in CORPUS:
        for opts in ([], None):
            program = Program(get_program(case.sink, renderer, opts))
            if any(u.op is Ops.BARRIER for u in program.uops):
                continue  # threads run one after another on the host: no barriers
            inputs = case.inputs(np.random.default_rng(3))
            stored = [to_storage(values, dtype) for values, (dtype, _) in zip(inputs, case.buffers[case.outputs :])]
            runs.append((case, program, [*case.output_buffers(), *stored], inputs))
    assert len(runs) > len(CORPUS)
    _run_on_host([r[1] for r in runs], [r[2] for r in runs], [r[0].var_vals for r in runs])
    for case, _, arrays, inputs in runs:
        got = [from_storage(raw, dtype) for raw, (dtype, _) in zip(arrays, case.buffers)]
        expected = case.reference(inputs, case.var_vals)
        for slot, (values, reference) in enumerate(zip(got, expected)):
            reference = np.asarray(reference).reshape(values.shape)
            if case.exact or not dtypes.is_float(case.buffers[slot][0]):
                np.testing.assert_array_equal(values, reference.astype(values.dtype), err_msg=case.name)
            else:
                np.testing.assert_allclose(values, reference, rtol=2e-6, atol=1e-6, err_msg=case.name)


@needs_host_compiler
@pytest.mark.parametrize("kind", ["alu", "casts"])
def test_ops_and_casts_on_the_host_match_the_interpreter(kind: str) -> None:
    renderer = HostCUDARenderer("sm_80")
    programs, host_buffers, interpreted = [], [], []
    rng = np.random.default_rng(7)
    for dtype in dtypes.all:
        sink = alu_kernel(dtype) if kind == "alu" else cast_kernel(dtype)
        program = Program(get_program(sink, renderer, []))
        arrays = input_arrays(program, rng, divisor_nonzero=kind == "alu")
        programs.append(program)
        host_buffers.append(arrays)
        interpreted.append([array.copy() for array in arrays])
    _run_on_host(programs, host_buffers, [{} for _ in programs])
    for program, host, expected in zip(programs, host_buffers, interpreted):
        run_program(program, expected, {}, *program.launch_dims({}))
        for slot, (got, want) in enumerate(zip(host, expected)):
            element = program.buffer_dtypes[slot].base
            message = f"{program.name} output {slot} ({element})"
            if dtypes.is_float(element) and kind == "alu":
                # transcendentals: the host's libm and numpy may differ in the last place
                got_values, want_values = from_storage(got, element), from_storage(want, element)
                tolerance = 2e-6 if element.itemsize >= 4 else 1e-2
                np.testing.assert_allclose(got_values, want_values, rtol=tolerance, atol=0, err_msg=message)
            else:
                same = (got.view(np.uint8).reshape(got.size, -1) == want.view(np.uint8).reshape(want.size, -1)).all(1)
                declared = declared_dtypes(program).get(slot, element)  # bfloat16 is stored as uint16 after emulation
                if dtypes.is_float(declared):  # NaN payloads (and NaN signs) of casts are not part of the IR's meaning
                    same |= np.isnan(from_storage(got, declared)) & np.isnan(from_storage(want, declared))
                if kind == "casts":
                    source = declared_dtypes(program)[len(host) - 1]
                    same |= undefined_cast_lanes(source, slot, host[-1])
                assert same.all(), f"{message}: got {got[~same]}, want {want[~same]}"


def declared_dtypes(program: Program) -> dict[int, DType]:
    """Element dtype of each buffer slot as the kernel sink declared it (before dtype emulation)."""
    return {u.arg: u.dtype.base for u in program.sink.toposort() if u.op is Ops.DEFINE_GLOBAL}
