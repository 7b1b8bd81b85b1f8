"""CUDA C for NVIDIA GPUs (sm_75 and newer), compiled in-process by NVRTC to PTX or cubin.

The source needs no header: vectors are small aligned structs of their own, float16 and the fp8 formats are
emulated (values in float32, memory in raw bits, every result rounded back, see `float_emulation`) and bfloat16 is
emulated by codegen, so neither `cuda_fp16.h` nor `cuda_bf16.h` (which the NVRTC wheel does not ship) is included.
Tensor cores are reached with inline PTX `mma.sync` (sm_80+), f16 and bf16 inputs: the float32 lanes of the operands
are packed into f16 or bf16 pairs exactly (they hold float16 or bfloat16 values).

The kernel is `extern "C" __global__ void kiln_kernel(buffers by slot..., variables by name...)`, with
`__launch_bounds__` of its block size; gidx/lidx are blockIdx/threadIdx (dimension 0 = x).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from kiln.codegen import TensorCore
from kiln.renderers.c_dialect import C_SCALAR_TYPES, CDialect
from kiln.renderers.c_style import CStyleRenderer, CStyleWriter
from kiln.renderers.nvrtc import Nvrtc, load_nvrtc
from kiln.renderers.target import NVIDIA, architecture_number, nvidia_target
from kiln.renderers.toolchain import ToolchainCompiler
from kiln.uops import DType, GroupOp, Ops, dtypes

CUDA_SCALAR_TYPES: dict[DType, str] = {**C_SCALAR_TYPES, dtypes.bool: "bool"}  # C++ spelling (also `cplusplus`)
del CUDA_SCALAR_TYPES[dtypes.float16]  # emulated: no header provides `half` to NVRTC

_CUDA_FLOAT_FUNCTIONS: dict[tuple[Ops, DType], str] = {
    (op, dtype): (name + "f" if dtype == dtypes.float32 else name)
    for op, name in (
        (Ops.SQRT, "sqrt"),
        (Ops.TRUNC, "trunc"),
        (Ops.MOD, "fmod"),
        (Ops.EXP2, "exp2"),
        (Ops.LOG2, "log2"),
        (Ops.SIN, "sin"),
        (Ops.POW, "pow"),
        (Ops.MULACC, "fma"),
    )
    for dtype in (dtypes.float32, dtypes.float64)
}
"""CUDA's math library (no fast-math: sqrt/div correctly rounded, fma rounded once, exp2/log2/sin within 2 ulps,
CUDA guide App. E). MULACC is the hardware's fused multiply-add: codegen's exact emulation for renderers without one
overflows in its Veltkamp split for float64 operands above 2**995 (seen on an H200: 0 * DBL_MAX + c gave NaN)."""


# ---- the compiler -----------------------------------------------------------------------------------------------


class CUDACompiler(ToolchainCompiler):
    """NVRTC (ctypes): CUDA C -> PTX text or a cubin for one architecture. NVRTC is loaded on first use."""

    def __init__(self, arch: str = "sm_80", output: str = "ptx", extra_options: Sequence[str] = ()) -> None:
        if output not in ("ptx", "cubin"):
            raise ValueError(f"CUDACompiler output must be 'ptx' or 'cubin', got {output!r}")
        self.arch = f"sm_{architecture_number(arch)}"
        self.output = output
        # --fmad=false: the IR rounds every multiply and add (no contraction); no fast-math flags
        self.options = (f"--gpu-architecture={self.arch}", "--fmad=false", "-default-device", *extra_options)
        self.flags = (output, *self.options)

    @functools.cached_property
    def nvrtc(self) -> Nvrtc:
        """The loaded NVRTC (NvrtcNotFoundError naming the pip extra when missing)."""
        return load_nvrtc()

    def toolchain_identity(self) -> str:
        major, minor = self.nvrtc.version
        return f"nvrtc {major}.{minor}"

    def compile(self, source: str) -> bytes:
        """PTX (UTF-8 text) or a cubin of `source`; NvrtcCompileError with NVRTC's log on failure."""
        return self.nvrtc.compile(source, self.options, self.output)

    def disassemble(self, binary: bytes) -> str:
        """The PTX itself, or for a cubin the SASS from `nvdisasm` (NotImplementedError when it is not installed)."""
        if self.output == "ptx":
            return binary.decode()
        nvdisasm = shutil.which("nvdisasm") or shutil.which("/usr/local/cuda/bin/nvdisasm")
        if nvdisasm is None:
            raise NotImplementedError("disassembling a cubin needs nvdisasm from the CUDA toolkit")
        with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
            file.write(binary)
            file.flush()
            completed = subprocess.run([nvdisasm, file.name], capture_output=True, text=True, timeout=120, check=False)
        if completed.returncode != 0:
            raise RuntimeError(f"nvdisasm failed: {completed.stderr.strip()}")
        return completed.stdout

    def __repr__(self) -> str:
        return f"CUDACompiler(arch={self.arch!r}, output={self.output!r})"


# ---- the renderer -----------------------------------------------------------------------------------------------

CUDA_DIALECT = CDialect(
    "CUDA C",
    scalar_types=CUDA_SCALAR_TYPES,
    float_functions=_CUDA_FLOAT_FUNCTIONS,
    cplusplus=True,
    kernel_prefix='extern "C" __global__ ',
    # __launch_bounds__ of the block size lets the compiler budget registers for exactly that many threads
    launch_bounds="__launch_bounds__({threads})",
    helper_prefix="__device__ static inline ",
    restrict_keyword="__restrict__",
    shared_prefix="__shared__ ",
    barrier_statement="__syncthreads();",
    group_index="blockIdx.{axis}",
    thread_index="threadIdx.{axis}",
    vector_literal="{type}{{{{{lanes}}}}}",
    lane="{vector}.v[{lane}]",
    not_finite="!({x} - {x} == 0.0)",  # x - x is NaN exactly for NaN and infinities
    float_modulo="fmod(trunc({x}), {m})",
    nonfinite_float="__uint_as_float({bits}u)",
    nonfinite_double="__longlong_as_double({bits}{unsigned}ll)",
)
"""CUDA C++ as NVRTC compiles it without headers: vectors are structs of their own, the math library's functions."""


class CUDARenderer(CStyleRenderer[CUDACompiler], target=NVIDIA):
    """CUDA C kernels for one architecture (`arch`, e.g. "sm_80"); its compiler is NVRTC (created lazily)."""

    vector_widths = (2, 4)
    native_ops = GroupOp.ALU
    dialect = CUDA_DIALECT

    def __init__(self, arch: str = "sm_80", output: str = "ptx", device: str = "CUDA") -> None:
        self.use_architecture(nvidia_target(arch), device)
        self.output = output

    def make_compiler(self) -> CUDACompiler:
        """NVRTC for this architecture, to PTX or a cubin (`output`)."""
        return CUDACompiler(self.arch, self.output)

    def vector_type(self, dtype: DType) -> tuple[str, str | None]:
        scalar, element = dtype.scalar(), self.vector_element(dtype)
        name = f"kiln_{scalar.name}x{dtype.count}"
        alignment = scalar.itemsize * dtype.count
        return name, f"struct __align__({alignment}) {name} {{ {element} v[{dtype.count}]; }};"

    def wmma_body(self, writer: CStyleWriter, core: TensorCore, types: tuple[str, str, str]) -> list[str]:
        """One mma.sync on float32-carried f16 or bf16 operands: each register pair packed into an f16x2 or bf16x2
        (exactly: they hold float16 or bfloat16 values)."""
        c_type = types[2]
        pack = self._pack_helper(writer, core.dtype_in)
        lines = [
            f"  unsigned int ra[4] = {{{', '.join(f'{pack}(a.v[{2 * i}], a.v[{2 * i + 1}])' for i in range(4))}}};",
            f"  unsigned int rb[2] = {{{pack}(b.v[0], b.v[1]), {pack}(b.v[2], b.v[3])}};",
        ]
        a_operands = "{%4, %5, %6, %7}" if core.dtype_out == dtypes.float32 else "{%2, %3, %4, %5}"
        if core.dtype_out == dtypes.float32:
            inputs = "bf16.bf16" if core.dtype_in == dtypes.bfloat16 else "f16.f16"
            return [
                *lines,
                f"  {c_type} d = c;",
                f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{inputs}.f32 {{%0, %1, %2, %3}}, '
                f'{a_operands}, {{%8, %9}}, {{%0, %1, %2, %3}};"',
                '    : "+f"(d.v[0]), "+f"(d.v[1]), "+f"(d.v[2]), "+f"(d.v[3])',
                '    : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));',
                "  return d;",
            ]
        return [
            *lines,
            f"  unsigned int rc[2] = {{{pack}(c.v[0], c.v[1]), {pack}(c.v[2], c.v[3])}};",
            '  asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, '
            f'{a_operands}, {{%6, %7}}, {{%0, %1}};"',
            '    : "+r"(rc[0]), "+r"(rc[1])',
            '    : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));',
            f"  {c_type} d;",
            "  for (int i = 0; i < 4; i++) {",
            "    unsigned short half_bits = (unsigned short)(rc[i / 2] >> (16 * (i % 2)));",
            '    asm("{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(d.v[i]) : "h"(half_bits));',
            "  }",
            "  return d;",
        ]

    def _pack_helper(self, writer: CStyleWriter, dtype: DType) -> str:
        """The helper packing two float32-carried `dtype` (float16 or bfloat16) values into one 32-bit register, the
        first in the low half. A bfloat16 carried in float32 is the float32's upper 16 bits (its low bits are zero),
        so the pair is cut out of the bits; float16 is converted (exactly: the values are float16's)."""
        if dtype == dtypes.bfloat16:
            return writer.require_helper(
                "kiln_pack_bf16x2",
                lambda: (
                    f"{self.dialect.helper_prefix}unsigned int kiln_pack_bf16x2(float low, float high) {{\n"
                    "  return (__float_as_uint(high) & 0xFFFF0000u) | (__float_as_uint(low) >> 16);\n}"
                ),
            )
        return writer.require_helper(
            "kiln_pack_f16x2",
            lambda: (
                f"{self.dialect.helper_prefix}unsigned int kiln_pack_f16x2(float low, float high) {{\n"
                "  unsigned int packed;\n"
                '  asm("{ .reg .f16 l, h; cvt.rn.f16.f32 l, %1; cvt.rn.f16.f32 h, %2; mov.b32 %0, {l, h}; }"'
                ' : "=r"(packed) : "f"(low), "f"(high));\n'
                "  return packed;\n}"
            ),
        )
