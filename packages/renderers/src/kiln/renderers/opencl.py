"""OpenCL C kernels for the CL device, built by the OpenCL platform itself into a binary the device reloads.

The dialect (`OPENCL_DIALECT`) differs from C in a few places:
- `__kernel` entry, `__global` buffers (bool buffers are `uchar`: kernel arguments may not point to bool), `__local`
  shared arrays, `barrier(CLK_LOCAL_MEM_FENCE)`, gidx/lidx from `get_group_id` / `get_local_id`;
- OpenCL's vector types (`float4`, lanes `.s0`...), read and written with `vloadN` / `vstoreN`, which need only the
  element's alignment (codegen promises nothing more), never by casting a pointer to a vector pointer;
- OpenCL's scalar names (`uchar`, `ulong` ...), literals with `l`/`ul` suffixes, bit casts through `as_<type>`,
  NaN/infinity through `as_float` / `as_double`;
- the IR's numerics: `#pragma OPENCL FP_CONTRACT OFF` (OpenCL C contracts `a*b+c` by default; the IR rounds every
  op), `-cl-fp32-correctly-rounded-divide-sqrt` (float32 `/` and `sqrt` are otherwise allowed 2.5-3 ulp), signed
  ADD/SUB/MUL/NEG computed in unsigned arithmetic (wrap-around; signed overflow is undefined in OpenCL C as in C).
  The integer literals and that signed arithmetic are shared with Metal (`SHORT_NAMES_DIALECT`, their base).
float16 (no `cl_khr_fp16` on PoCL's CPU device), bfloat16 and fp8 are emulated by codegen; the transcendentals are
decomposed by codegen (exact against the interpreter) rather than taken from the OpenCL library (3-4 ulp).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools

from kiln.renderers.c_dialect import SHORT_NAMES_DIALECT, SHORT_SCALAR_TYPES
from kiln.renderers.c_style import CStyleRenderer, CStyleWriter
from kiln.renderers.opencl_library import (
    CL_PROGRAM_BINARIES,
    CL_PROGRAM_BINARY_SIZES,
    OpenCLError,
    OpenCLTarget,
    load_opencl,
    opencl_target,
)
from kiln.renderers.target import OPENCL, WITHOUT_MATH_LIBRARY
from kiln.renderers.toolchain import ToolchainCompiler
from kiln.uops import DType, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes

OPENCL_BUILD_OPTIONS: tuple[str, ...] = ("-cl-std=CL1.2", "-cl-fp32-correctly-rounded-divide-sqrt")
"""Options of every program build (no -cl-mad-enable / -cl-fast-relaxed-math: they change results)."""

OPENCL_SCALAR_TYPES: dict[DType, str] = {**SHORT_SCALAR_TYPES, dtypes.float64: "double"}

_OPENCL_FLOAT_FUNCTIONS: dict[tuple[Ops, DType], str] = {
    (op, dtype): name
    for op, name in ((Ops.SQRT, "sqrt"), (Ops.TRUNC, "trunc"), (Ops.MOD, "fmod"), (Ops.MULACC, "fma"))
    for dtype in (dtypes.float32, dtypes.float64)
}
"""Correctly rounded OpenCL builtins (sqrt with -cl-fp32-correctly-rounded-divide-sqrt; trunc, fmod, fma exact)."""

VECTOR_COUNTS = (2, 3, 4, 8, 16)
"""Lane counts of OpenCL's built-in vector types."""


class OpenCLCompileError(RuntimeError):
    """The OpenCL platform rejected a program; the message has its build log and the source."""


class OpenCLCompiler(ToolchainCompiler):
    """OpenCL C -> the platform's program binary for one device (`clBuildProgram`, `CL_PROGRAM_BINARIES`).

    The binary is what `clCreateProgramWithBinary` reloads on the same device (the CL device does, then builds it
    with the same options); it is specific to the platform, device and driver, which form `identity`.
    """

    def __init__(self, device_index: int = 0) -> None:
        self.device_index = device_index
        self.flags = OPENCL_BUILD_OPTIONS

    @functools.cached_property
    def target(self) -> OpenCLTarget:
        """The OpenCL device built for (OpenCLNotFoundError naming what to install when there is none)."""
        return opencl_target(self.device_index)

    def toolchain_identity(self) -> str:
        return self.target.identity

    def compile(self, source: str) -> bytes:
        """The program binary of `source`; OpenCLCompileError with the build log when the build fails."""
        library, target = load_opencl(), self.target
        encoded = ctypes.c_char_p(source.encode())
        program = library.create(
            "clCreateProgramWithSource", target.context, 1, ctypes.byref(encoded), None, what="program"
        )
        try:
            build_program(program, target, "building from source", source)
            sizes = library.info_bytes("clGetProgramInfo", program, CL_PROGRAM_BINARY_SIZES)
            size = int.from_bytes(sizes[:8], "little")
            binary = ctypes.create_string_buffer(size)
            pointers = (ctypes.c_char_p * 1)(ctypes.cast(binary, ctypes.c_char_p))
            library.call("clGetProgramInfo", program, CL_PROGRAM_BINARIES, ctypes.sizeof(pointers), pointers, None)
            return binary.raw
        finally:
            library.call("clReleaseProgram", program)

    def __repr__(self) -> str:
        return f"OpenCLCompiler(device_index={self.device_index})"


def build_program(program: int, target: OpenCLTarget, what: str, source: str = "") -> None:
    """`clBuildProgram` for `target` with OPENCL_BUILD_OPTIONS; OpenCLCompileError carrying the build log."""
    library = load_opencl()
    device = ctypes.c_void_p(target.device)
    options = " ".join(OPENCL_BUILD_OPTIONS).encode()
    try:
        library.call("clBuildProgram", program, 1, ctypes.byref(device), options, None, None, what=what)
    except OpenCLError as error:
        log = library.build_log(program, target.device)
        listing = f"\n--- source ---\n{source}" if source else ""
        raise OpenCLCompileError(f"{error}\n{log}{listing}") from error


# ---- the renderer -----------------------------------------------------------------------------------------------


def _wide_access(index: UOp) -> int:
    """Lanes of a vector access through a scalar buffer (vloadN/vstoreN), or 0 for a plain dereference."""
    if index.op is not Ops.INDEX:
        return 0
    pointer, buffer = index.dtype, index.src[0].dtype
    assert isinstance(pointer, PtrDType) and isinstance(buffer, PtrDType)
    return pointer.base.count if pointer.base.count > 1 and buffer.base.count == 1 else 0


def _index(ctx: CStyleWriter, x: UOp) -> str:
    pointer, offset = ctx[x.src[0]], ctx[x.src[1]]
    return pointer if x.src[1].op is Ops.CONST and x.src[1].arg == 0 else f"({pointer}+{offset})"


def _load(ctx: CStyleWriter, x: UOp) -> str:
    lanes = _wide_access(x.src[0])
    value = f"vload{lanes}(0,{ctx[x.src[0]]})" if lanes else f"(*{ctx[x.src[0]]})"
    return f"({ctx[x.src[2]]}?{value}:{ctx[x.src[1]]})" if len(x.src) == 3 else value


def _store(ctx: CStyleWriter, x: UOp) -> str:
    lanes = _wide_access(x.src[0])
    if lanes:
        return f"vstore{lanes}({ctx[x.src[1]]},0,{ctx[x.src[0]]});"
    return f"*{ctx[x.src[0]]} = {ctx[x.src[1]]};"


pm_opencl = PatternMatcher(
    [
        (UPat(Ops.INDEX, name="x"), _index),
        (UPat(Ops.LOAD, name="x"), _load),
        (UPat(Ops.STORE, name="x"), _store),
    ]
)
"""OpenCL's own string rules (wide accesses by vloadN/vstoreN, never a vector pointer), tried before the C family's."""

OPENCL_DIALECT = dataclasses.replace(
    SHORT_NAMES_DIALECT,
    name="OpenCL C",
    scalar_types=OPENCL_SCALAR_TYPES,
    float_functions=_OPENCL_FLOAT_FUNCTIONS,
    preamble=("#pragma OPENCL EXTENSION cl_khr_fp64 : enable", "#pragma OPENCL FP_CONTRACT OFF"),
    kernel_prefix="__kernel ",
    buffer_parameter="__global {const}{element}* {restrict} {name}",
    stored_bool="uchar",  # kernel arguments may not point to bool
    shared_prefix="__local ",
    barrier_statement="barrier(CLK_LOCAL_MEM_FENCE);",
    group_index="get_group_id({dimension})",
    thread_index="get_local_id({dimension})",
    builtin_vectors=VECTOR_COUNTS,
    bool_vector_element="uchar",  # no bool vectors in OpenCL C
    vector_literal="(({type})({lanes}))",
    lane="({vector}).s{lane:x}",
    bitcast="as_{type}({value})",
    uint32="uint",
    float_modulo="fmod(trunc({x}), {m})",
)
"""OpenCL C 1.2: address-space qualifiers, built-in vector types, `as_<type>` bit casts, 64-bit `long`."""


class OpenCLRenderer(CStyleRenderer[OpenCLCompiler], target=OPENCL):
    """OpenCL C kernels for one OpenCL device (`device_index` over all platforms); owns an `OpenCLCompiler`."""

    vector_widths = (2, 4, 8)
    native_ops = WITHOUT_MATH_LIBRARY
    dialect = OPENCL_DIALECT
    extra_rules = pm_opencl

    def __init__(self, device_index: int = 0, device: str = "CL") -> None:
        self.device_index = device_index
        self.device = device

    def make_compiler(self) -> OpenCLCompiler:
        """The OpenCL platform's program build for device `device_index`."""
        return OpenCLCompiler(self.device_index)

    def bitcast(self, writer: CStyleWriter, value: str, source: DType, target: DType) -> str:
        if source.scalar() == dtypes.bool or target.scalar() == dtypes.bool:
            return self.cast(writer, value, source, target)  # bool and uint8 carry the same 0/1 byte
        return super().bitcast(writer, value, source, target)
