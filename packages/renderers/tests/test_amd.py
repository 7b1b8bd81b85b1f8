"""The AMD renderer and its compiler (clang's amdgcn target and ld.lld), compile-only: no AMD GPU runs here.

Golden text pins the dialect (address spaces, workgroup builtins, the barrier). clang then builds every coverage
kernel for gfx1100 and gfx942, and the disassembly is the oracle of what reached the hardware: global_load/store
(never flat_*: the address spaces survived), ds_* exactly for kernels with shared memory, s_barrier exactly for
kernels with barriers, v_wmma / v_mfma for tensor cores. The fragment layouts are checked against the ISA's
formulas, and the programs codegen builds with them compute a matmul in the reference interpreter.
"""

from __future__ import annotations

import pytest
from gpu_kernels import (
    check_tensor_core_matmul,
    coverage_sinks,
    group_reduce_kernel,
    matmul_sink,
    vector_kernel,
    wmma_program,
)

from kiln.codegen import Opt, OptOps, Program, get_program
from kiln.renderers import DEVICE_TABLE, ToolchainNotFoundError, dtypes_for, renderers_for
from kiln.renderers.amd import AMDCompileError, AMDCompiler, AMDRenderer
from kiln.renderers.amd_toolchain import amd_toolchain_available, find_amd_toolchain
from kiln.renderers.tensor_cores import TENSOR_CORES_GFX942, TENSOR_CORES_GFX1100
from kiln.uops import Ops, UOp, dtypes
from kiln.uops.knobs import Context

ARCHITECTURES = ("gfx1100", "gfx942")
MISSING = "clang with the amdgcn target for {arch} (and ld.lld) missing: apt-get install clang-19 lld-19 llvm-19"


def needs_toolchain(arch: str) -> pytest.MarkDecorator:
    """Skip unless a clang that targets `arch` and an ld.lld are installed."""
    return pytest.mark.skipif(not amd_toolchain_available(arch), reason=MISSING.format(arch=arch))


def with_toolchains() -> list[object]:
    return [pytest.param(arch, marks=needs_toolchain(arch)) for arch in ARCHITECTURES]


class SourceOnlyRenderer(AMDRenderer):
    """The AMD renderer without its compiler: get_program stops at the source."""

    compiler = None  # type: ignore[assignment]


VECTOR_SOURCE = """\
/* kiln SourceOnlyRenderer kernel vectors */
#define KILN_GLOBAL __attribute__((address_space(1)))
#define KILN_LDS_POINTER __attribute__((address_space(3)))
#define KILN_LDS static __attribute__((address_space(3), loader_uninitialized))
typedef float float32x4 __attribute__((vector_size(16), aligned(4), may_alias));
__attribute__((amdgpu_kernel, visibility("default"))) void kiln_kernel(KILN_GLOBAL float* restrict data0, \
const KILN_GLOBAL float* restrict data1, const KILN_GLOBAL float* restrict data2) {
  int sidx0 = ((int)__builtin_amdgcn_workgroup_id_x());
  int alu0 = (sidx0*4);
  float32x4 val0 = (*((KILN_GLOBAL float32x4*)(data1+alu0)));
  float32x4 val1 = (*((KILN_GLOBAL float32x4*)(data2+alu0)));
  float alu1 = (val0[0]*val1[0]);
  float alu2 = (alu1+1.0f);
  float alu3 = (val0[1]*val1[1]);
  float alu4 = (alu3+1.0f);
  float alu5 = (val0[2]*val1[2]);
  float alu6 = (alu5+1.0f);
  float alu7 = (val0[3]*val1[3]);
  float alu8 = (alu7+1.0f);
  float32x4 vec0 = ((float32x4){alu2,alu4,alu6,alu8});
  *((KILN_GLOBAL float32x4*)(data0+alu0)) = vec0;
}
"""


def test_golden_vector_kernel() -> None:
    sink, opts = vector_kernel()
    assert Program(get_program(sink, SourceOnlyRenderer(), opts)).source == VECTOR_SOURCE


def test_golden_lines_of_a_group_reduce() -> None:
    sink, opts = group_reduce_kernel()
    lines = [line.strip() for line in Program(get_program(sink, SourceOnlyRenderer(), opts)).source.splitlines()]
    assert "KILN_LDS float smem0[16];" in lines
    assert "int sidx1 = ((int)__builtin_amdgcn_workitem_id_x());" in lines
    barrier = (
        '__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
        '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");'
    )
    assert barrier in lines


def test_targets_and_the_device_table() -> None:
    assert AMDRenderer("gfx1100").tensor_cores == TENSOR_CORES_GFX1100
    assert AMDRenderer("gfx942").tensor_cores == TENSOR_CORES_GFX942
    assert TENSOR_CORES_GFX1100[0].threads == 32 and TENSOR_CORES_GFX942[0].threads == 64  # wave32 / wave64
    for bad in ("gfx90a", "sm_80", "gfx1100 "):
        with pytest.raises(ValueError, match=repr(bad)):
            AMDRenderer(bad)
    assert "AMD" in DEVICE_TABLE and renderers_for("AMD") == (AMDRenderer,)
    assert dtypes.float64 in dtypes_for("AMD") and dtypes.bfloat16 in AMDRenderer().emulated_dtypes


def test_missing_toolchain_names_what_to_install() -> None:
    with Context(AMD_CLANG="kiln-no-such-clang"), pytest.raises(ToolchainNotFoundError, match="apt-get install"):
        find_amd_toolchain("gfx1100")
    with Context(AMD_CLANG="kiln-no-such-clang"), pytest.raises(ToolchainNotFoundError, match="AMD_CLANG"):
        AMDCompiler("gfx942").compile("")


@pytest.mark.parametrize("arch", with_toolchains())
def test_cache_key_names_clang_and_the_architecture(arch: str) -> None:
    key = AMDCompiler(arch).cache_key("source")
    assert f"-mcpu={arch}" in key and "clang version" in key and "-ffp-contract=off" in key


@pytest.mark.parametrize("arch", with_toolchains())
def test_compile_error_carries_clangs_message(arch: str) -> None:
    with pytest.raises(AMDCompileError, match="undefined_thing"):
        AMDCompiler(arch).compile("void kiln_kernel(void) { undefined_thing(); }")


def _instructions(disassembly: str) -> set[str]:
    return {line.split()[0] for line in disassembly.splitlines() if line.startswith("\t")}


def _reads_buffer(load: UOp) -> bool:
    pointer = load.src[0]
    while pointer.op in (Ops.INDEX, Ops.AFTER):
        pointer = pointer.src[0]
    return pointer.op is Ops.DEFINE_GLOBAL


CHUNKS = 2


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("arch", with_toolchains())
def test_every_kernel_compiles_to_global_and_lds_instructions(arch: str, chunk: int) -> None:
    renderer = AMDRenderer(arch)
    for name, sink, opts in coverage_sinks()[chunk::CHUNKS]:
        program = Program(get_program(sink, renderer, opts))
        binary = program.binary
        assert binary is not None and binary[:4] == b"\x7fELF" and b"kiln_kernel.kd" in binary, name
        instructions = _instructions(renderer.compiler.disassemble(binary))
        assert any(i.startswith("global_store") for i in instructions), name
        reads_global = any(u.op is Ops.LOAD and _reads_buffer(u) for u in program.uops)
        # a load whose address is the same in every lane may become a scalar s_load instead of a global_load
        assert any(i.startswith(("global_load", "s_load")) for i in instructions) or not reads_global, name
        assert not any(i.startswith("flat_") for i in instructions), name  # buffers kept address space 1
        has_local = any(u.op is Ops.DEFINE_LOCAL for u in program.uops)
        assert any(i.startswith("ds_") for i in instructions) == has_local, name
        assert ("s_barrier" in instructions) == any(u.op is Ops.BARRIER for u in program.uops), name


MATRIX_INSTRUCTIONS = {
    ("gfx1100", "float32"): ("v_wmma_f32_16x16x16_f16",),
    ("gfx1100", "float16"): ("v_wmma_f16_16x16x16_f16",),
    ("gfx942", "float32"): ("v_mfma_f32_16x16x16_f16", "v_mfma_f32_16x16x16f16"),
}
"""The instruction llvm-objdump prints for each (architecture, accumulator) (older LLVM spells the MFMA `f16` bare)."""


@pytest.mark.parametrize("arch", with_toolchains())
def test_tensor_cores_compile_to_matrix_instructions(arch: str) -> None:
    renderer = AMDRenderer(arch)
    for number, core in enumerate(renderer.tensor_cores):
        expected = set(MATRIX_INSTRUCTIONS[arch, core.dtype_out.name])
        binary = renderer.compiler.compile(renderer.render(wmma_program(core, renderer), "wmma"))
        instructions = _instructions(renderer.compiler.disassemble(binary))
        assert instructions & expected, core
        if arch == "gfx1100":
            assert "v_permlanex16_b32" in instructions  # the other half of each lane's K values
        program = Program(get_program(matmul_sink(32, 32, 32, core.dtype_out), renderer, [Opt(OptOps.TC, 2, number)]))
        assert program.launch_dims({})[1] == (core.threads, 1, 1)  # one wave per workgroup
        assert program.binary is not None
        assert _instructions(renderer.compiler.disassemble(program.binary)) & expected, core


def test_gfx1100_layouts_are_the_wmma_formulas() -> None:
    # RDNA3 ISA, WMMA in wave32: A row l % 16, B column l % 16, each with K 8 * (l / 16) + r here (the hardware's
    # other 8 K values come from lane l ^ 16); D register r of lane l is row 2r + l / 16, column l % 16
    a, b, c = TENSOR_CORES_GFX1100[0].layouts or ()
    for lane in range(32):
        for register in range(8):
            k = 8 * (lane // 16) + register
            assert a.coordinate(lane, register) == (lane % 16, k)
            assert b.coordinate(lane, register) == (k, lane % 16)
            assert c.coordinate(lane, register) == (2 * register + lane // 16, lane % 16)


def test_gfx942_layouts_are_the_mfma_formulas() -> None:
    # CDNA3 v_mfma_f32_16x16x16_f16: A[i][k] in lane i + 16 (k / 4), register k % 4; B[k][j] in lane j + 16 (k / 4);
    # D[i][j] in lane j + 16 (i / 4), register i % 4
    a, b, c = TENSOR_CORES_GFX942[0].layouts or ()
    for i in range(16):
        for j in range(16):
            assert a.coordinate(i + 16 * (j // 4), j % 4) == (i, j)
            assert b.coordinate(j + 16 * (i // 4), i % 4) == (i, j)
            assert c.coordinate(j + 16 * (i // 4), i % 4) == (i, j)


@pytest.mark.parametrize(
    ("arch", "core_number"), [("gfx1100", 0), ("gfx1100", 1), ("gfx942", 0)], ids=["wmma_f32", "wmma_f16", "mfma"]
)
def test_tensor_core_programs_compute_the_matmul(arch: str, core_number: int) -> None:
    # the program codegen builds with the layouts, run by the interpreter (the WMMA uop through the layouts)
    check_tensor_core_matmul(SourceOnlyRenderer(arch), core_number, (32, 16, 48), seed=5)
