"""The OpenCL renderer and its compiler (the OpenCL platform's program build).

Golden text pins the dialect (vloadN/vstoreN wide accesses, `__local` memory and barriers, unsigned wrap-around of
signed arithmetic, bool memory as uchar); the platform then builds every coverage kernel (every op, dtype, cast,
vector access, gate, variable and shared memory), its binary reloads, and errors name what is wrong. Running the
kernels is the runtime's conformance suite (packages/runtime-hcq/tests/test_conformance.py, pair CL-OpenCL).
"""

from __future__ import annotations

import ctypes

import pytest
from gpu_kernels import coverage_sinks, group_reduce_kernel, vector_kernel

from kiln.codegen import Program, get_program
from kiln.renderers import opencl_library
from kiln.renderers.opencl import OpenCLCompileError, OpenCLCompiler, OpenCLRenderer, build_program
from kiln.renderers.opencl_library import OpenCLNotFoundError, load_opencl, opencl_available, opencl_target
from kiln.uops import dtypes

needs_opencl = pytest.mark.skipif(
    not opencl_available(), reason="no OpenCL platform: apt install ocl-icd-libopencl1 pocl-opencl-icd"
)


class SourceOnlyRenderer(OpenCLRenderer):
    """The OpenCL renderer without its compiler: get_program stops at the source."""

    compiler = None  # type: ignore[assignment]


VECTOR_SOURCE = """\
/* kiln SourceOnlyRenderer kernel vectors */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
__kernel void kiln_kernel(__global float* restrict data0, __global const float* restrict data1, \
__global const float* restrict data2) {
  int sidx0 = ((int)get_group_id(0));
  int alu0 = ((int)((uint)(sidx0)*(uint)(4)));
  float4 val0 = vload4(0,(data1+alu0));
  float4 val1 = vload4(0,(data2+alu0));
  float alu1 = ((val0).s0*(val1).s0);
  float alu2 = (alu1+1.0f);
  float alu3 = ((val0).s1*(val1).s1);
  float alu4 = (alu3+1.0f);
  float alu5 = ((val0).s2*(val1).s2);
  float alu6 = (alu5+1.0f);
  float alu7 = ((val0).s3*(val1).s3);
  float alu8 = (alu7+1.0f);
  float4 vec0 = ((float4)(alu2,alu4,alu6,alu8));
  vstore4(vec0,0,(data0+alu0));
}
"""


def test_wide_accesses_are_vload_and_vstore() -> None:
    sink, opts = vector_kernel()
    assert Program(get_program(sink, SourceOnlyRenderer(), opts)).source == VECTOR_SOURCE


def test_group_reduce_uses_local_memory_and_a_barrier() -> None:
    sink, opts = group_reduce_kernel()
    source = Program(get_program(sink, SourceOnlyRenderer(), opts)).source
    lines = [line.strip() for line in source.splitlines()]
    assert "__local float smem0[16];" in lines
    assert lines.index("__local float smem0[16];") < lines.index("barrier(CLK_LOCAL_MEM_FENCE);")
    assert "int sidx1 = ((int)get_local_id(0));" in lines
    assert "*acc0 = as_float(0xff800000u);" in lines  # -inf, the identity of MAX


def test_no_c_only_spellings_reach_the_source() -> None:
    sources = [Program(get_program(sink, SourceOnlyRenderer(), opts)).source for _, sink, opts in coverage_sinks()]
    for banned in ("long long", "unsigned ", "signed char", "__builtin", "_Bool", "bool*"):
        assert not [source for source in sources if banned in source], banned


def test_renderer_capabilities() -> None:
    renderer = OpenCLRenderer()
    assert renderer.device == "CL" and renderer.has_local and renderer.has_shared
    assert dtypes.float16 in renderer.emulated_dtypes and dtypes.float64 in renderer.native_dtypes
    assert OpenCLRenderer(device_index=1, device="CL:1").compiler.device_index == 1


COMPILED_HERE = ("alu_float32", "alu_int64", "casts_float32", "casts_bool")
"""The op and cast kernels of every other dtype are built and run by the runtime's conformance suite (on CL)."""


@needs_opencl
def test_every_kind_of_kernel_compiles() -> None:
    renderer = OpenCLRenderer()
    kernels = [k for k in coverage_sinks() if not k[0].startswith(("alu_", "casts_")) or k[0] in COMPILED_HERE]
    assert len(kernels) >= 8
    for name, sink, opts in kernels:
        binary = Program(get_program(sink, renderer, opts)).binary
        assert binary is not None and len(binary) > 0, name


@needs_opencl
def test_the_binary_reloads_on_the_device() -> None:
    sink, opts = vector_kernel()
    binary = OpenCLCompiler().compile(Program(get_program(sink, SourceOnlyRenderer(), opts)).source)
    library, target = load_opencl(), opencl_target(0)
    device = ctypes.c_void_p(target.device)
    size = ctypes.c_size_t(len(binary))
    data = (ctypes.c_char_p * 1)(binary)
    program = library.create(
        "clCreateProgramWithBinary", target.context, 1, ctypes.byref(device), ctypes.byref(size), data, None
    )
    try:
        build_program(program, target, "reloading")
        kernel = library.create("clCreateKernel", program, b"kiln_kernel")
        library.call("clReleaseKernel", kernel)
    finally:
        library.call("clReleaseProgram", program)


@needs_opencl
def test_cache_key_names_the_platform_device_and_options() -> None:
    key = OpenCLCompiler().cache_key("source")
    target = opencl_target(0)
    assert target.platform_name in key and target.device_name in key
    assert "-cl-fp32-correctly-rounded-divide-sqrt" in key


@needs_opencl
def test_compile_error_carries_the_build_log() -> None:
    with pytest.raises(OpenCLCompileError, match="undefined_thing"):
        OpenCLCompiler().compile("__kernel void kiln_kernel(__global int* a) { a[0] = undefined_thing; }")


def test_missing_library_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opencl_library, "LIBRARY_NAMES", ("libkiln-no-such-opencl.so",))
    load_opencl.cache_clear()
    try:
        with pytest.raises(OpenCLNotFoundError, match="pocl-opencl-icd"):
            load_opencl()
    finally:
        load_opencl.cache_clear()


@needs_opencl
def test_unknown_device_index_lists_the_devices() -> None:
    with pytest.raises(OpenCLNotFoundError, match="there is no OpenCL device 99"):
        OpenCLCompiler(99).compile("__kernel void kiln_kernel() {}")


def test_vector_types_are_opencls_own_with_bool_lanes_in_uchar() -> None:
    renderer = OpenCLRenderer()
    assert renderer.vector_type(dtypes.float32.vec(4)) == ("float4", None)
    assert renderer.vector_type(dtypes.int64.vec(16)) == ("long16", None)
    assert renderer.vector_type(dtypes.bool.vec(2)) == ("uchar2", None)  # OpenCL C has no bool vectors
    with pytest.raises(ValueError, match=r"OpenCL C has no vector of 5 lanes"):
        renderer.vector_type(dtypes.float32.vec(5))
