"""Metal Shading Language kernels for Apple GPUs, compiled by Xcode's `metal` and `metallib` (macOS only).

The dialect (`METAL_DIALECT`) differs from C in these places:
- `kernel void` entry; buffers in the `device` address space with `[[buffer(n)]]` slots (buffers first, then the
  variables as `constant int&`), `threadgroup` shared arrays, `threadgroup_barrier(mem_flags::mem_threadgroup)`;
- gidx/lidx from the `[[threadgroup_position_in_grid]]` and `[[thread_position_in_threadgroup]]` arguments;
- MSL's vector types (`float4`, lanes by subscript); a wide access goes through the `packed_` vector type, which
  needs only the element's alignment (an aligned `float4` access would need 16 bytes, more than codegen promises);
- bit casts by `as_type<T>`, 64-bit integers as `long`/`ulong`, signed ADD/SUB/MUL/NEG through the unsigned type
  (signed overflow is undefined in MSL as in C++; shared with OpenCL C: `SHORT_NAMES_DIALECT`);
- no 64-bit float at all (MSL has no `double`): float64 is neither native nor emulated, so codegen refuses it.
float16 is native (`half`); bfloat16 is native (`bfloat`) from MSL 3.1 and emulated by codegen before; fp8 is emulated;
the transcendentals are decomposed by codegen (exact against the interpreter) instead of taken from `metal::` (its
precise functions are still a few ulp off). Tensor cores: `simdgroup_matrix` 8x8 tiles through
`simdgroup_multiply_accumulate` (`TENSOR_CORES_METAL`).
"""

from __future__ import annotations

import dataclasses
import functools
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from kiln.codegen import TensorCore
from kiln.renderers.c_dialect import SHORT_NAMES_DIALECT, SHORT_SCALAR_TYPES
from kiln.renderers.c_style import CStyleRenderer, CStyleWriter
from kiln.renderers.target import METAL, WITHOUT_MATH_LIBRARY, metal_language_version, metal_target
from kiln.renderers.toolchain import ToolchainCompiler, ToolchainNotFoundError
from kiln.uops import DType, MemoryScope, Ops, dtypes

METAL_SCALAR_TYPES: dict[DType, str] = {**SHORT_SCALAR_TYPES, dtypes.float16: "half", dtypes.bfloat16: "bfloat"}
"""MSL's scalar type of each dtype (MSL spec, "Scalar Data Types"; `bfloat` from MSL 3.1; no `double`)."""

VECTOR_COUNTS = (2, 3, 4)
"""Lane counts of MSL's vector types."""

_METAL_FLOAT_FUNCTIONS: dict[tuple[Ops, DType], str] = {
    (Ops.SQRT, dtypes.float32): "precise::sqrt",
    (Ops.TRUNC, dtypes.float32): "trunc",
}
"""MSL functions that are exact (trunc) or correctly rounded in precise mode (sqrt, with -fno-fast-math)."""

_MATRIX_TYPES = {dtypes.float32: "simdgroup_float8x8", dtypes.float16: "simdgroup_half8x8"}


# ---- the compiler -----------------------------------------------------------------------------------------------


class MetalCompileError(RuntimeError):
    """The Metal compiler rejected a kernel; the message has its diagnostics."""


class MetalCompiler(ToolchainCompiler):
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

    def toolchain_identity(self) -> str:
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


METAL_DIALECT = dataclasses.replace(
    SHORT_NAMES_DIALECT,
    name="MSL",
    scalar_types=METAL_SCALAR_TYPES,
    float_functions=_METAL_FLOAT_FUNCTIONS,
    cplusplus=True,
    preamble=("#include <metal_stdlib>", "using namespace metal;"),
    kernel_prefix="kernel ",
    helper_prefix="inline ",
    restrict_keyword="",
    buffer_parameter="{const}device {element}* {name} [[buffer({slot})]]",
    variable_parameter="constant {type}& {name} [[buffer({slot})]]",
    extra_parameters=(
        "uint3 kiln_group [[threadgroup_position_in_grid]]",
        "uint3 kiln_thread [[thread_position_in_threadgroup]]",
    ),
    shared_prefix="threadgroup ",
    barrier_statement="threadgroup_barrier(mem_flags::mem_threadgroup);",
    group_index="kiln_group.{axis}",
    thread_index="kiln_thread.{axis}",
    vector_pointer_spaces={
        MemoryScope.GLOBAL: "device ",
        MemoryScope.LOCAL: "threadgroup ",
        MemoryScope.REG: "thread ",
    },
    packed_vectors=True,
    builtin_vectors=VECTOR_COUNTS,
    bool_vector_element=None,  # MSL has bool vectors
    vector_literal="{type}({lanes})",
    bitcast="as_type<{type}>({value})",  # NaN and the infinities too, as float bits (half and bfloat convert exactly)
    # MSL has no double: the conversion computes in float; for |x| >= 2**64 a float is a multiple of 2**41, so
    # x - trunc(x / 2**64) * 2**64 is exact
    helper_float="float",
    helper_float_suffix="f",
    float_modulo="{x} - trunc({x} / {m}) * {m}",
)
"""MSL: C++ with address spaces, `[[buffer(n)]]` arguments, built-in and packed vectors, `as_type<T>` bit casts."""


class MetalRenderer(CStyleRenderer[MetalCompiler], target=METAL):
    """MSL kernels (`language_version` "3.0" or newer; bfloat16 is native from "3.1"); owns a `MetalCompiler`."""

    vector_widths = (2, 4)
    native_ops = WITHOUT_MATH_LIBRARY - {Ops.MULACC}
    dialect = METAL_DIALECT

    def __init__(self, language_version: str = "3.0", device: str = "METAL") -> None:
        self.use_target(metal_target(language_version))
        self.language_version = language_version
        self.device = device

    def make_compiler(self) -> MetalCompiler:
        """xcrun metal for this language version."""
        return MetalCompiler(self.language_version)

    def __repr__(self) -> str:
        return f"MetalRenderer(language_version={self.language_version!r})"

    def float_alu(self, writer: CStyleWriter, op: Ops, dtype: DType, operands: list[str]) -> str:
        # half and bfloat take sqrt/trunc of float (exact: sqrt of a float rounds once more to the narrow type only
        # after a float result with more than twice the narrow precision, trunc is exact); the overloads for the
        # narrow types are not in every MSL version
        if dtype.itemsize < 4 and (op, dtypes.float32) in self.dialect.float_functions:
            operands = [f"((float){operand})" for operand in operands]
        return super().float_alu(writer, op, dtype, operands)

    def cast(self, writer: CStyleWriter, value: str, source: DType, target: DType) -> str:
        # between half and bfloat through float: both widen to float exactly, so the result is rounded once
        narrow = (dtypes.float16, dtypes.bfloat16)
        if source in narrow and target in narrow and source != target:
            return f"(({self.scalar_type(target)})(float){value})"
        return super().cast(writer, value, source, target)

    # ---- tensor cores ----

    def wmma_body(self, writer: CStyleWriter, core: TensorCore, types: tuple[str, str, str]) -> list[str]:
        """Three simdgroup matrices filled with this thread's elements, multiply-accumulated."""
        output_vector = types[2]
        input_matrix, output_matrix = _MATRIX_TYPES[core.dtype_in], _MATRIX_TYPES[core.dtype_out]
        lines = [f"  {input_matrix} matrix_a, matrix_b;", f"  {output_matrix} matrix_c;"]
        for matrix, value in (("matrix_a", "a"), ("matrix_b", "b"), ("matrix_c", "c")):
            lines.append(f"  {matrix}.thread_elements()[0] = {value}[0]; {matrix}.thread_elements()[1] = {value}[1];")
        return [
            *lines,
            "  simdgroup_multiply_accumulate(matrix_c, matrix_a, matrix_b, matrix_c);",
            f"  return {output_vector}(matrix_c.thread_elements()[0], matrix_c.thread_elements()[1]);",
        ]
