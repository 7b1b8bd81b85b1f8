"""CUDA C for NVIDIA GPUs (sm_75 and newer), compiled in-process by NVRTC to PTX or cubin.

The source needs no header: vectors are small aligned structs of their own, float16 and the fp8 formats are
emulated (values in float32, memory in raw bits, every result rounded back, see `float_emulation`) and bfloat16 is
emulated by codegen, so neither `cuda_fp16.h` nor `cuda_bf16.h` (which the NVRTC wheel does not ship) is included.
Tensor cores are reached with inline PTX `mma.sync` (sm_80+): the float32 lanes of the operands are converted to
f16 pairs exactly (they hold float16 values).

The kernel is `extern "C" __global__ void kiln_kernel(buffers by slot..., variables by name...)`, with
`__launch_bounds__` of its block size; gidx/lidx are blockIdx/threadIdx (dimension 0 = x).
"""

from __future__ import annotations

import functools
import math
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from typing import ClassVar

from kiln.codegen import Compiler, TensorCore, WmmaArg
from kiln.renderers.c_style import C_SCALAR_TYPES, ENTRY_NAME, CStyleRenderer, CStyleWriter
from kiln.renderers.nvrtc import Nvrtc, load_nvrtc
from kiln.renderers.target import NVIDIA, architecture_number, nvidia_target
from kiln.uops import DType, GroupOp, Ops, PatternMatcher, UOp, UPat, dtypes

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


def local_size(uops: Sequence[UOp]) -> int:
    """Threads per block of a linear program: the product of its lidx sizes (1 without local threads)."""
    sizes = {u.arg.name: u.src[0] for u in uops if u.op is Ops.SPECIAL and u.arg.name.startswith("lidx")}
    if any(size.op is not Ops.CONST for size in sizes.values()):
        raise ValueError(f"local sizes must be constants, got {sizes}")
    return math.prod(int(size.arg) for size in sizes.values())


# ---- the compiler -----------------------------------------------------------------------------------------------


class CUDACompiler(Compiler):
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

    @property
    def identity(self) -> str:  # type: ignore[override]
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


def _wmma(ctx: CStyleWriter, x: UOp) -> str:
    language = ctx.language
    assert isinstance(language, CUDARenderer)
    core = language.tensor_core_of(x)
    helper = ctx.require_helper(f"kiln_{core}", lambda: language.wmma_helper(ctx, core))
    return f"{helper}({', '.join(ctx[s] for s in x.src)})"


pm_cuda = PatternMatcher([(UPat(Ops.WMMA, name="x"), _wmma)])
"""CUDA's own string rules, tried before the C family's."""


class CUDARenderer(CStyleRenderer, target=NVIDIA):
    """CUDA C kernels for one architecture (`arch`, e.g. "sm_80"); its compiler is NVRTC (created lazily)."""

    vector_widths = (2, 4)
    native_ops = GroupOp.ALU

    kernel_prefix: ClassVar[str] = 'extern "C" __global__ '
    helper_prefix: ClassVar[str] = "__device__ static inline "
    restrict_keyword: ClassVar[str] = "__restrict__"
    shared_prefix: ClassVar[str] = "__shared__ "
    barrier_statement: ClassVar[str | None] = "__syncthreads();"
    scalar_types: ClassVar[dict[DType, str]] = CUDA_SCALAR_TYPES
    float_functions: ClassVar[dict[tuple[Ops, DType], str]] = _CUDA_FLOAT_FUNCTIONS
    extra_rules: ClassVar[PatternMatcher | None] = pm_cuda
    cplusplus: ClassVar[bool] = True

    def __init__(self, arch: str = "sm_80", output: str = "ptx", device: str = "CUDA") -> None:
        self.use_target(nvidia_target(arch))
        self.arch = self.target.architecture
        self.output = output
        self.device = device

    @functools.cached_property
    def compiler(self) -> CUDACompiler:  # type: ignore[override]
        return CUDACompiler(self.arch, self.output)

    def kernel_signature(self, uops: Sequence[UOp], parameters: list[str]) -> str:
        # __launch_bounds__ of the block size lets the compiler budget registers for exactly that many threads
        bounds = f"__launch_bounds__({local_size(uops)})"
        return f"{self.kernel_prefix}void {bounds} {ENTRY_NAME}({', '.join(parameters)})"

    def vector_type(self, dtype: DType) -> tuple[str, str | None]:
        scalar = dtype.scalar()
        element = "unsigned char" if scalar == dtypes.bool else self.scalar_type(scalar)
        name = f"kiln_{scalar.name}x{dtype.count}"
        alignment = scalar.itemsize * dtype.count
        return name, f"struct __align__({alignment}) {name} {{ {element} v[{dtype.count}]; }};"

    def vector_literal(self, writer: CStyleWriter, dtype: DType, lanes: list[str]) -> str:
        return f"{writer.type_name(dtype)}{{{{{','.join(lanes)}}}}}"

    def lane(self, vector: str, dtype: DType, lane: int) -> str:
        return f"{vector}.v[{lane}]"

    def special(self, writer: CStyleWriter, uop: UOp) -> str:
        name = uop.arg.name
        if name[:4] in ("gidx", "lidx") and name[4:] in ("0", "1", "2"):
            register = "blockIdx" if name.startswith("gidx") else "threadIdx"
            return f"(({writer.type_name(uop.dtype)}){register}.{'xyz'[int(name[4])]})"
        raise ValueError(f"{type(self).__name__} has no hardware index {name!r}; expected gidx0..2 or lidx0..2")

    def float_constant(self, value: float, dtype: DType) -> str:
        if math.isnan(value) or math.isinf(value):
            if dtype == dtypes.float64:
                bits = 0x7FF8000000000000 if math.isnan(value) else 0x7FF0000000000000 | (value < 0) << 63
                return f"__longlong_as_double({bits}ll)" if bits < 1 << 63 else f"__longlong_as_double({bits}ull)"
            bits = 0x7FC00000 if math.isnan(value) else 0x7F800000 | (value < 0) << 31
            return f"__uint_as_float({bits}u)"
        return super().float_constant(value, dtype)

    def float_to_int_helper(self, target: DType) -> str:
        """Truncate, wrap around, NaN/inf -> the minimum (CUDA's own conversion saturates instead)."""
        c_type = self.scalar_type(target)
        minimum = self.int_constant(int(dtypes.min(target)), target)
        two63, two64 = "9223372036854775808.0", "18446744073709551616.0"
        return (
            f"{self.helper_prefix}{c_type} kiln_to_{target.name}(double x) {{\n"
            f"  if (!(x - x == 0.0)) return {minimum};\n"  # x - x is NaN exactly for NaN and infinities
            f"  if (x >= -{two63} && x < {two63}) return ({c_type})(long long)x;\n"
            f"  double wrapped = fmod(trunc(x), {two64});\n"
            f"  if (wrapped >= {two63}) wrapped -= {two64};\n"
            f"  if (wrapped < -{two63}) wrapped += {two64};\n"
            f"  return ({c_type})(long long)wrapped;\n"
            "}"
        )

    # ---- tensor cores ----

    def tensor_core_of(self, uop: UOp) -> TensorCore:
        """The tensor core a WMMA uop runs on (its `WmmaArg` names one of `tensor_cores`, with the same layouts)."""
        for core in self.tensor_cores:
            if isinstance(uop.arg, WmmaArg) and uop.arg == core.wmma_arg():
                return core
        raise ValueError(f"{self!r} ({self.arch}) has no tensor core {uop.arg!r}; it has {self.tensor_cores}")

    def wmma_helper(self, writer: CStyleWriter, core: TensorCore) -> str:
        """A device function running one mma.sync on float32-carried f16 operands."""
        a_type = writer.type_name(dtypes.float32.vec(core.elements_per_thread[0]))
        b_type = writer.type_name(dtypes.float32.vec(core.elements_per_thread[1]))
        c_type = writer.type_name(dtypes.float32.vec(core.elements_per_thread[2]))
        pack = writer.require_helper(
            "kiln_pack_f16x2",
            lambda: (
                f"{self.helper_prefix}unsigned int kiln_pack_f16x2(float low, float high) {{\n"
                "  unsigned int packed;\n"
                '  asm("{ .reg .f16 l, h; cvt.rn.f16.f32 l, %1; cvt.rn.f16.f32 h, %2; mov.b32 %0, {l, h}; }"'
                ' : "=r"(packed) : "f"(low), "f"(high));\n'
                "  return packed;\n}"
            ),
        )
        lines = [
            f"{self.helper_prefix}{c_type} kiln_{core}({a_type} a, {b_type} b, {c_type} c) {{",
            f"  unsigned int ra[4] = {{{', '.join(f'{pack}(a.v[{2 * i}], a.v[{2 * i + 1}])' for i in range(4))}}};",
            f"  unsigned int rb[2] = {{{pack}(b.v[0], b.v[1]), {pack}(b.v[2], b.v[3])}};",
        ]
        a_operands = "{%4, %5, %6, %7}" if core.dtype_out == dtypes.float32 else "{%2, %3, %4, %5}"
        if core.dtype_out == dtypes.float32:
            lines += [
                f"  {c_type} d = c;",
                '  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, '
                f'{a_operands}, {{%8, %9}}, {{%0, %1, %2, %3}};"',
                '    : "+f"(d.v[0]), "+f"(d.v[1]), "+f"(d.v[2]), "+f"(d.v[3])',
                '    : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));',
                "  return d;",
            ]
        else:
            lines += [
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
        return "\n".join(lines) + "\n}"
