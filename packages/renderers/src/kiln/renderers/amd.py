"""C for AMD GPUs (RDNA3 gfx1100, CDNA3 gfx942), compiled by clang's amdgcn target into an HSA code object.

The source is plain C, not HIP: no ROCm headers or device libraries are needed (`-nogpulib`), only a clang whose
amdgcn backend knows the architecture and `ld.lld` to link the relocatable object into the shared-object code
object the HSA loader takes. HIP's spellings map onto what clang offers in C:
- `__global__` is `__attribute__((amdgpu_kernel))`; buffers and block-shared arrays carry explicit address spaces
  (`KILN_GLOBAL`, `KILN_LDS` in the preamble), so loads and stores become global_* and ds_* instructions, not flat_*;
- blockIdx/threadIdx are `__builtin_amdgcn_workgroup_id_*` / `__builtin_amdgcn_workitem_id_*`;
- `__syncthreads()` is a workgroup release fence, `s_barrier`, a workgroup acquire fence (as HIP defines it).
float16 is native (`_Float16`); bfloat16 and fp8 are emulated by codegen; the transcendentals are decomposed by
codegen, since without the device libraries there is no libm. Tensor cores: WMMA on gfx1100 (wave32), MFMA on
gfx942 (wave64), see `TENSOR_CORES_GFX1100` and `TENSOR_CORES_GFX942`.

The kernel is `kiln_kernel(buffers by slot..., variables by name...)` with gidx/lidx in dimension order x, y, z.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

from kiln.codegen import TensorCore
from kiln.renderers.amd_toolchain import AMDToolchain, find_amd_toolchain
from kiln.renderers.c_dialect import C_FLOAT_FUNCTIONS, CDialect
from kiln.renderers.c_style import CStyleRenderer, CStyleWriter
from kiln.renderers.target import AMD, WITHOUT_MATH_LIBRARY, amd_target
from kiln.renderers.toolchain import ToolchainCompiler
from kiln.uops import DType, MemoryScope, Ops, dtypes

AMD_COMPILE_FLAGS: tuple[str, ...] = ("-O3", "-ffp-contract=off", "-fwrapv", "-fno-math-errno", "-nogpulib")
"""Flags of every compile: no contraction into fma (the IR rounds every op), wrapping integers, no libm."""


# ---- tensor cores -----------------------------------------------------------------------------------------------

# ---- the compiler -----------------------------------------------------------------------------------------------


class AMDCompileError(RuntimeError):
    """clang or ld.lld rejected a kernel; the message has their diagnostics."""


class AMDCompiler(ToolchainCompiler):
    """C -> an HSA code object (an ELF shared object) for one architecture, with clang and ld.lld."""

    def __init__(self, arch: str = "gfx1100") -> None:
        self.arch = amd_target(arch).architecture
        self.flags = (f"-mcpu={self.arch}", *AMD_COMPILE_FLAGS)

    @functools.cached_property
    def toolchain(self) -> AMDToolchain:
        """clang, ld.lld and llvm-objdump that know the architecture (ToolchainNotFoundError otherwise)."""
        return find_amd_toolchain(self.arch)

    def toolchain_identity(self) -> str:
        return f"{self.toolchain.version} amdgcn-amd-amdhsa {self.arch}"

    def compile(self, source: str) -> bytes:
        """The code object of `source`; AMDCompileError with the tool's diagnostics on failure."""
        tools = self.toolchain
        with tempfile.TemporaryDirectory(prefix="kiln-amd-") as directory:
            folder = Path(directory)
            (folder / "kernel.c").write_text(source)
            compile_command = [tools.clang, "--target=amdgcn-amd-amdhsa", *self.flags, "-c", "kernel.c"]
            _run([*compile_command, "-o", "kernel.o"], folder, "clang", source)
            _run([tools.linker, "-shared", "kernel.o", "-o", "kernel.hsaco"], folder, "ld.lld", source)
            return (folder / "kernel.hsaco").read_bytes()

    def disassemble(self, binary: bytes) -> str:
        """The GCN/RDNA assembly of a code object, from llvm-objdump."""
        with tempfile.TemporaryDirectory(prefix="kiln-amd-") as directory:
            path = Path(directory) / "kernel.hsaco"
            path.write_bytes(binary)
            command = [self.toolchain.objdump, "-d", f"--mcpu={self.arch}", str(path)]
            return _run(command, Path(directory), "llvm-objdump", "")

    def __repr__(self) -> str:
        return f"AMDCompiler(arch={self.arch!r})"


def _run(command: list[str], folder: Path, tool: str, source: str) -> str:
    completed = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300, check=False)
    if completed.returncode != 0:
        listing = f"\n--- source ---\n{source}" if source else ""
        raise AMDCompileError(f"{tool} failed ({' '.join(command)}):\n{completed.stderr.strip()}{listing}")
    return completed.stdout


# ---- the renderer -----------------------------------------------------------------------------------------------

_AMD_FLOAT_FUNCTIONS: dict[tuple[Ops, DType], str] = {
    **C_FLOAT_FUNCTIONS,
    (Ops.MULACC, dtypes.float16): "__builtin_fmaf16",
}
"""C's builtins, which the amdgcn backend lowers to instructions (llvm.sqrt.f32 without !fpmath is correctly
rounded), and the float16 fma (float16 is native here)."""

AMD_DIALECT = CDialect(
    "C for amdgcn",
    float_functions=_AMD_FLOAT_FUNCTIONS,
    preamble=(
        # LLVM AMDGPUUsage, "Address Spaces": 1 is global memory, 3 is local memory (LDS, shared by a workgroup)
        "#define KILN_GLOBAL __attribute__((address_space(1)))",
        "#define KILN_LDS_POINTER __attribute__((address_space(3)))",
        "#define KILN_LDS static __attribute__((address_space(3), loader_uninitialized))",
    ),
    kernel_prefix='__attribute__((amdgpu_kernel, visibility("default"))) ',
    buffer_parameter="{const}KILN_GLOBAL {element}* {restrict} {name}",
    shared_prefix="KILN_LDS ",
    barrier_statement=(
        '__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
        '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");'
    ),
    group_index="__builtin_amdgcn_workgroup_id_{axis}()",
    thread_index="__builtin_amdgcn_workitem_id_{axis}()",
    # buffers and block-shared arrays keep their address spaces through vector pointers, so loads and stores become
    # global_* and ds_* instructions, not flat_*
    vector_pointer_spaces={MemoryScope.GLOBAL: "KILN_GLOBAL ", MemoryScope.LOCAL: "KILN_LDS_POINTER "},
    # without fmod (a libm call, and there is no libm): for |x| >= 2**64 the double is a multiple of 2**12, so
    # x - trunc(x / 2**64) * 2**64 is exact
    float_modulo="{x} - __builtin_trunc({x} / {m}) * {m}",
)
"""Plain C for clang's amdgcn target (no HIP headers, no device libraries): address spaces by attributes."""


class AMDRenderer(CStyleRenderer[AMDCompiler], target=AMD):
    """C kernels for one AMD GPU architecture (`arch`: "gfx1100" or "gfx942"); owns an `AMDCompiler`."""

    vector_widths = (2, 4)
    native_ops = WITHOUT_MATH_LIBRARY
    dialect = AMD_DIALECT

    def __init__(self, arch: str = "gfx1100", device: str = "AMD") -> None:
        self.use_architecture(amd_target(arch), device)

    def make_compiler(self) -> AMDCompiler:
        """clang's amdgcn target and ld.lld for this architecture."""
        return AMDCompiler(self.arch)

    def __repr__(self) -> str:
        return f"AMDRenderer(arch={self.arch!r})"

    # ---- tensor cores ----

    def wmma_body(self, writer: CStyleWriter, core: TensorCore, types: tuple[str, str, str]) -> list[str]:
        """One WMMA (gfx1100) or MFMA (gfx942) on this lane's fragments."""
        a_type, _, c_type = types
        if self.arch == "gfx942":
            # the builtin takes clang's ext_vector_type operands; kiln's vectors are GCC vectors of the same size
            # the last three operands (cbsz, abid, blgp) are 0: no broadcast between blocks, no B lane swizzle
            call = "__builtin_amdgcn_mfma_f32_16x16x16f16((half4)a, (half4)b, (float4)c, 0, 0, 0)"
            return [
                "  typedef _Float16 half4 __attribute__((ext_vector_type(4)));",
                "  typedef float float4 __attribute__((ext_vector_type(4)));",
                f"  return ({c_type}){call};",
            ]
        full = writer.require_helper("kiln_wave32_full_k", lambda: self._full_k_helper(a_type))
        if core.dtype_out == dtypes.float32:
            call = f"__builtin_amdgcn_wmma_f32_16x16x16_f16_w32({full}(a), {full}(b), (float8)c)"
            return ["  typedef float float8 __attribute__((ext_vector_type(8)));", f"  return ({c_type}){call};"]
        # f16 accumulators: register j in element 2j (the low half of VGPR j), the odd elements unused
        lanes = ", ".join(f"c[{j // 2}]" if j % 2 == 0 else "0" for j in range(16))
        results = ", ".join(f"d[{2 * j}]" for j in range(8))
        return [
            "  typedef _Float16 half16 __attribute__((ext_vector_type(16)));",
            f"  half16 wide = {{{lanes}}};",
            f"  half16 d = __builtin_amdgcn_wmma_f16_16x16x16_f16_w32({full}(a), {full}(b), wide, 0);",
            f"  return ({c_type}){{{results}}};",
        ]

    def _full_k_helper(self, half8: str) -> str:
        """The 16 K values of this lane's row (of A) or column (of B) for v_wmma: its own 8 and those of lane l ^ 16.

        v_permlanex16_b32 (RDNA3 ISA, "VOP3 permlane"): lane i of each 16-lane row reads lane sel[i] of the other
        row; the selects 0x76543210 / 0xfedcba98 are the identity, so every lane reads lane l ^ 16.
        """
        return "\n".join(
            [
                "typedef _Float16 kiln_half16 __attribute__((ext_vector_type(16)));",
                "typedef unsigned int kiln_uint4 __attribute__((ext_vector_type(4)));",
                "typedef unsigned int kiln_uint8 __attribute__((ext_vector_type(8)));",
                f"{self.dialect.helper_prefix}kiln_half16 kiln_wave32_full_k({half8} own) {{",
                "  kiln_uint4 mine = (kiln_uint4)own, other;",
                "  for (int i = 0; i < 4; i++)",
                "    other[i] = __builtin_amdgcn_permlanex16(mine[i], mine[i], 0x76543210u, 0xfedcba98u, 0, 0);",
                "  // lanes 0-15 hold K 0..7, lanes 16-31 K 8..15 (the layouts' lane bit 4)",
                "  int upper = (__builtin_amdgcn_mbcnt_lo(~0u, 0u) & 16) != 0;",
                "  kiln_uint8 full = upper ? __builtin_shufflevector(other, mine, 0, 1, 2, 3, 4, 5, 6, 7)",
                "                          : __builtin_shufflevector(mine, other, 0, 1, 2, 3, 4, 5, 6, 7);",
                "  return (kiln_half16)full;",
                "}",
            ]
        )
