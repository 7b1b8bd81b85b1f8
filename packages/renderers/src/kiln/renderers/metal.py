"""Metal Shading Language kernels for Apple GPUs, compiled by Xcode's `metal` and `metallib` (macOS only).

The dialect differs from C in the places `CStyleRenderer`'s hooks cover:
- `kernel void` entry; buffers in the `device` address space with `[[buffer(n)]]` slots (buffers first, then the
  variables as `constant int&`), `threadgroup` shared arrays, `threadgroup_barrier(mem_flags::mem_threadgroup)`;
- gidx/lidx from the `[[threadgroup_position_in_grid]]` and `[[thread_position_in_threadgroup]]` arguments;
- MSL's vector types (`float4`, lanes by subscript); a wide access goes through the `packed_` vector type, which
  needs only the element's alignment (an aligned `float4` access would need 16 bytes, more than codegen promises);
- bit casts by `as_type<T>`, 64-bit integers as `long`/`ulong`, signed ADD/SUB/MUL/NEG through the unsigned type
  (signed overflow is undefined in MSL as in C++; shared with OpenCL C: `c_style.LongIntegerCStyleRenderer`);
- no 64-bit float at all (MSL has no `double`): float64 is neither native nor emulated, so codegen refuses it.
float16 is native (`half`); bfloat16 is native (`bfloat`) from MSL 3.1 and emulated by codegen before; fp8 is emulated;
the transcendentals are decomposed by codegen (exact against the interpreter) instead of taken from `metal::` (its
precise functions are still a few ulp off). Tensor cores: `simdgroup_matrix` 8x8 tiles through
`simdgroup_multiply_accumulate` (`TENSOR_CORES_METAL`).
"""

from __future__ import annotations

import functools
import math
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from kiln.codegen import Compiler, TensorCore, WmmaArg
from kiln.renderers.c_style import CStyleWriter, LongIntegerCStyleRenderer
from kiln.renderers.target import METAL, metal_language_version, metal_target
from kiln.renderers.toolchain import ToolchainNotFoundError
from kiln.uops import DType, GroupOp, MemoryScope, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes

METAL_SCALAR_TYPES: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.int8: "char",
    dtypes.uint8: "uchar",
    dtypes.int16: "short",
    dtypes.uint16: "ushort",
    dtypes.int32: "int",
    dtypes.uint32: "uint",
    dtypes.int64: "long",
    dtypes.uint64: "ulong",
    dtypes.float16: "half",
    dtypes.bfloat16: "bfloat",
    dtypes.float32: "float",
}
"""MSL's scalar type of each dtype (MSL spec, "Scalar Data Types"; `bfloat` from MSL 3.1; no `double`)."""

VECTOR_COUNTS = (2, 3, 4)
"""Lane counts of MSL's vector types."""

_C_SPELLINGS = {"unsigned long long": "ulong", "long long": "long"}
_C_SPELLING_PATTERN = re.compile(r"\b(unsigned long long|long long)\b")
"""The shared C helpers spell 64-bit integers the C way; MSL has only `long` / `ulong` (64-bit)."""

_ADDRESS_SPACES: dict[MemoryScope, str] = {
    MemoryScope.GLOBAL: "device",
    MemoryScope.LOCAL: "threadgroup",
    MemoryScope.REG: "thread",
}

_METAL_FLOAT_FUNCTIONS: dict[tuple[Ops, DType], str] = {
    (Ops.SQRT, dtypes.float32): "precise::sqrt",
    (Ops.TRUNC, dtypes.float32): "trunc",
}
"""MSL functions that are exact (trunc) or correctly rounded in precise mode (sqrt, with -fno-fast-math)."""

_MATRIX_TYPES = {dtypes.float32: "simdgroup_float8x8", dtypes.float16: "simdgroup_half8x8"}


# ---- the compiler -----------------------------------------------------------------------------------------------


class MetalCompileError(RuntimeError):
    """The Metal compiler rejected a kernel; the message has its diagnostics."""


class MetalCompiler(Compiler):
    """MSL -> a metallib with `xcrun metal` and `xcrun metallib`; only on macOS with Xcode's command line tools.

    Elsewhere `compile` raises ToolchainNotFoundError (there is no Metal compiler for other systems).
    """

    def __init__(self, language_version: str = "3.0") -> None:
        metal_language_version(language_version)
        self.language_version = language_version
        # -fno-fast-math: Metal compiles with fast math by default, which changes results (the IR rounds every op)
        self.flags = (f"-std=metal{language_version}", "-fno-fast-math")

    @functools.cached_property
    def xcrun(self) -> str:
        """The path of `xcrun` (ToolchainNotFoundError off macOS or without Xcode's tools)."""
        if platform.system() != "Darwin":
            raise ToolchainNotFoundError(
                f"Metal shaders compile only on macOS (`xcrun metal` from Xcode); this system is {platform.system()}"
            )
        xcrun = shutil.which("xcrun")
        if xcrun is None:
            raise ToolchainNotFoundError("the Metal renderer needs Xcode's command line tools: xcode-select --install")
        return xcrun

    @property
    def identity(self) -> str:  # type: ignore[override]
        completed = subprocess.run(
            [self.xcrun, "-sdk", "macosx", "metal", "--version"], capture_output=True, text=True, check=False
        )
        return completed.stdout.strip().splitlines()[0] if completed.stdout.strip() else "xcrun metal"

    def compile(self, source: str) -> bytes:
        """The metallib of `source`; MetalCompileError with the compiler's diagnostics on failure."""
        xcrun = self.xcrun
        with tempfile.TemporaryDirectory(prefix="kiln-metal-") as directory:
            folder = Path(directory)
            (folder / "kernel.metal").write_text(source)
            steps = (
                [xcrun, "-sdk", "macosx", "metal", *self.flags, "-c", "kernel.metal", "-o", "kernel.air"],
                [xcrun, "-sdk", "macosx", "metallib", "kernel.air", "-o", "kernel.metallib"],
            )
            for command in steps:
                completed = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
                if completed.returncode != 0:
                    raise MetalCompileError(f"{' '.join(command[3:5])} failed:\n{completed.stderr.strip()}\n{source}")
            return (folder / "kernel.metallib").read_bytes()

    def __repr__(self) -> str:
        return f"MetalCompiler(language_version={self.language_version!r})"


# ---- the renderer -----------------------------------------------------------------------------------------------


def _root(pointer: UOp) -> UOp:
    while pointer.op in (Ops.INDEX, Ops.AFTER):
        pointer = pointer.src[0]
    return pointer


def _index(ctx: CStyleWriter, x: UOp) -> str:
    pointer, offset = ctx[x.src[0]], ctx[x.src[1]]
    assert isinstance(x.dtype, PtrDType)
    address = pointer if x.src[1].op is Ops.CONST and x.src[1].arg == 0 else f"({pointer}+{offset})"
    if x.dtype.base.count == 1:
        return address
    root = _root(x).dtype
    assert isinstance(root, PtrDType)
    vector = ctx.type_name(x.dtype.base)
    packed = vector if x.dtype.base.scalar() == dtypes.bool else f"packed_{vector}"  # MSL has no packed_bool
    return f"(({_ADDRESS_SPACES[root.scope]} {packed}*){address})"


def _memory(ctx: CStyleWriter, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType)
    prefix = "threadgroup " if x.dtype.scope is MemoryScope.LOCAL else ""
    return f"{prefix}{ctx.type_name(x.dtype.base)} {ctx[x]}[{x.dtype.size}];"


def _wmma(ctx: CStyleWriter, x: UOp) -> str:
    language = ctx.language
    assert isinstance(language, MetalRenderer)
    core = language.tensor_core_of(x)
    helper = ctx.require_helper(f"kiln_{core}", lambda: language.wmma_helper(ctx, core))
    return f"{helper}({', '.join(ctx[s] for s in x.src)})"


pm_metal = PatternMatcher(
    [
        (UPat(Ops.INDEX, name="x"), _index),
        (UPat((Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="x"), _memory),
        (UPat(Ops.WMMA, name="x"), _wmma),
    ]
)
"""Metal's own string rules (packed wide accesses, threadgroup arrays, simdgroup matrices), tried before C's."""


class MetalRenderer(LongIntegerCStyleRenderer, target=METAL):
    """MSL kernels (`language_version` "3.0" or newer; bfloat16 is native from "3.1"); owns a `MetalCompiler`."""

    vector_widths = (2, 4)
    native_ops = GroupOp.ALU - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW, Ops.MULACC}

    kernel_prefix: ClassVar[str] = "kernel "
    helper_prefix: ClassVar[str] = "inline "
    restrict_keyword: ClassVar[str] = ""
    shared_prefix: ClassVar[str] = "threadgroup "
    barrier_statement: ClassVar[str | None] = "threadgroup_barrier(mem_flags::mem_threadgroup);"
    scalar_types: ClassVar[dict[DType, str]] = METAL_SCALAR_TYPES
    float_functions: ClassVar[dict[tuple[Ops, DType], str]] = _METAL_FLOAT_FUNCTIONS
    extra_rules: ClassVar[PatternMatcher | None] = pm_metal
    cplusplus: ClassVar[bool] = True

    def __init__(self, language_version: str = "3.0", device: str = "METAL") -> None:
        self.use_target(metal_target(language_version))
        self.language_version = language_version
        self.device = device

    @functools.cached_property
    def compiler(self) -> MetalCompiler:  # type: ignore[override]
        return MetalCompiler(self.language_version)

    def __repr__(self) -> str:
        return f"MetalRenderer(language_version={self.language_version!r})"

    def render(self, uops: list[UOp], name: str) -> str:
        """The MSL program of one `kernel void kiln_kernel(...)` (see the module docstring)."""
        return _C_SPELLING_PATTERN.sub(lambda match: _C_SPELLINGS[match.group(1)], super().render(uops, name))

    def preamble(self) -> list[str]:
        return ["#include <metal_stdlib>", "using namespace metal;"]

    def parameters(self, writer: CStyleWriter, uops: Sequence[UOp]) -> list[str]:
        stored = {_root(u.src[0]) for u in uops if u.op is Ops.STORE}
        buffers = sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
        declarations = []
        for slot, buffer in enumerate(buffers):
            assert isinstance(buffer.dtype, PtrDType)
            constant = "" if buffer in stored else "const "
            element = writer.type_name(buffer.dtype.base.scalar())
            declarations.append(f"{constant}device {element}* {writer[buffer]} [[buffer({slot})]]")
        variables = sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg.name)
        for slot, variable in enumerate(variables, start=len(buffers)):
            declarations.append(f"constant {writer.type_name(variable.dtype)}& {writer[variable]} [[buffer({slot})]]")
        declarations.append("uint3 kiln_group [[threadgroup_position_in_grid]]")
        declarations.append("uint3 kiln_thread [[thread_position_in_threadgroup]]")
        return declarations

    def special(self, writer: CStyleWriter, uop: UOp) -> str:
        name = uop.arg.name
        if name[:4] in ("gidx", "lidx") and name[4:] in ("0", "1", "2"):
            argument = "kiln_group" if name.startswith("gidx") else "kiln_thread"
            return f"(({writer.type_name(uop.dtype)}){argument}.{'xyz'[int(name[4])]})"
        raise ValueError(f"{type(self).__name__} has no hardware index {name!r}; expected gidx0..2 or lidx0..2")

    def vector_type(self, dtype: DType) -> tuple[str, str | None]:
        if dtype.count not in VECTOR_COUNTS:
            raise ValueError(f"MSL has no vector of {dtype.count} lanes ({dtype!r}); expected {VECTOR_COUNTS}")
        return f"{self.scalar_type(dtype.scalar())}{dtype.count}", None

    def vector_literal(self, writer: CStyleWriter, dtype: DType, lanes: list[str]) -> str:
        return f"{writer.type_name(dtype)}({','.join(lanes)})"

    def lane(self, vector: str, dtype: DType, lane: int) -> str:
        return f"{vector}[{lane}]"

    def float_constant(self, value: float, dtype: DType) -> str:
        if math.isnan(value) or math.isinf(value):
            bits = 0x7FC00000 if math.isnan(value) else 0x7F800000 | (value < 0) << 31
            text = f"as_type<float>({bits:#x}u)"
            return text if dtype == dtypes.float32 else f"(({self.scalar_type(dtype)}){text})"
        return super().float_constant(value, dtype)

    def float_alu(self, writer: CStyleWriter, op: Ops, dtype: DType, operands: list[str]) -> str:
        # half and bfloat take sqrt/trunc of float (exact: sqrt of a float rounds once more to the narrow type only
        # after a float result with more than twice the narrow precision, trunc is exact); the overloads for the
        # narrow types are not in every MSL version
        if dtype.itemsize < 4 and (op, dtypes.float32) in self.float_functions:
            operands = [f"((float){operand})" for operand in operands]
        return super().float_alu(writer, op, dtype, operands)

    def cast(self, writer: CStyleWriter, value: str, source: DType, target: DType) -> str:
        # between half and bfloat through float: both widen to float exactly, so the result is rounded once
        narrow = (dtypes.float16, dtypes.bfloat16)
        if source in narrow and target in narrow and source != target:
            return f"(({self.scalar_type(target)})(float){value})"
        return super().cast(writer, value, source, target)

    def bitcast(self, writer: CStyleWriter, value: str, source: DType, target: DType) -> str:
        return f"as_type<{writer.type_name(target)}>({value})"

    def float_to_int_helper(self, target: DType) -> str:
        """Truncate, wrap around, NaN/inf -> the minimum, all in float (MSL has no double).

        For |x| >= 2**64 the float is a multiple of 2**41, so x - trunc(x / 2**64) * 2**64 is exact.
        """
        c_type = self.scalar_type(target)
        minimum = self.int_constant(int(dtypes.min(target)), target)
        two63, two64 = "9223372036854775808.0f", "18446744073709551616.0f"
        return (
            f"{self.helper_prefix}{c_type} kiln_to_{target.name}(float x) {{\n"
            f"  if (!isfinite(x)) return {minimum};\n"
            f"  if (x >= -{two63} && x < {two63}) return ({c_type})(long)x;\n"
            f"  float wrapped = x - trunc(x / {two64}) * {two64};\n"
            f"  if (wrapped >= {two63}) wrapped -= {two64};\n"
            f"  if (wrapped < -{two63}) wrapped += {two64};\n"
            f"  return ({c_type})(long)wrapped;\n"
            "}"
        )

    # ---- tensor cores ----

    def tensor_core_of(self, uop: UOp) -> TensorCore:
        """The tensor core a WMMA uop runs on (its `WmmaArg` names one of `tensor_cores`)."""
        for core in self.tensor_cores:
            if isinstance(uop.arg, WmmaArg) and uop.arg == core.wmma_arg():
                return core
        raise ValueError(f"{self!r} has no tensor core {uop.arg!r}; it has {self.tensor_cores}")

    def wmma_helper(self, writer: CStyleWriter, core: TensorCore) -> str:
        """A function filling three simdgroup matrices with this thread's elements and multiply-accumulating."""
        input_vector = writer.type_name(core.dtype_in.vec(2))
        output_vector = writer.type_name(core.dtype_out.vec(2))
        input_matrix, output_matrix = _MATRIX_TYPES[core.dtype_in], _MATRIX_TYPES[core.dtype_out]
        parameters = f"{input_vector} a, {input_vector} b, {output_vector} c"
        lines = [
            f"{self.helper_prefix}{output_vector} kiln_{core}({parameters}) {{",
            f"  {input_matrix} matrix_a, matrix_b;",
            f"  {output_matrix} matrix_c;",
        ]
        for matrix, value in (("matrix_a", "a"), ("matrix_b", "b"), ("matrix_c", "c")):
            lines.append(f"  {matrix}.thread_elements()[0] = {value}[0]; {matrix}.thread_elements()[1] = {value}[1];")
        lines += [
            "  simdgroup_multiply_accumulate(matrix_c, matrix_a, matrix_b, matrix_c);",
            f"  return {output_vector}(matrix_c.thread_elements()[0], matrix_c.thread_elements()[1]);",
            "}",
        ]
        return "\n".join(lines)
