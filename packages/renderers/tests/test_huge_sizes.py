"""Kernels past 2**31 elements: every renderer lowers them, the CPU renderers compile and run them (issue 44).

`x + 1` over 2**31 + 64 uint8 elements and a float32 kernel over 2**40 elements (`Tensor.rand(2**40)`'s size) need
int64 index math while hardware indices (CPU `core_id`, GPU block/thread ids) stay 32-bit: LLVM rejected the kernel
("'%core_id' defined with type 'i32' but expected 'i64'") and the GPU grid split counted 2**31 divisor candidates
in Python (minutes). The run checks sampled windows (below, across and past 2**31) against numpy's uint8 arithmetic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.codegen import KernelInfo, Program, Renderer, get_program
from kiln.renderers import (
    AMDRenderer,
    CRenderer,
    CUDARenderer,
    LLVMRenderer,
    MetalRenderer,
    OpenCLRenderer,
    PTXRenderer,
    WGSLRenderer,
    opencl_available,
)
from kiln.runtime import Buffer, Device
from kiln.uops import Ops, UOp, dtypes

ELEMENTS = 2**31 + 64
"""The issue's uint8 size: past int32 offsets, and 64 * (2**25 + 1) (a grid split needs a non-trivial divisor)."""
RAND_ELEMENTS = 2**40


def add_one_kernel(count: int) -> UOp:
    """out[i] = a[i] + 1 over `count` uint8 elements (buffers: out, a)."""
    i = UOp.range(count, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.uint8.ptr(count), (), 0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.uint8.ptr(count), (), 1)
    store = out.index(i).store(a.index(i).load() + UOp.const(dtypes.uint8, 1)).end(i)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo("add_one"))


def scale_kernel(count: int) -> UOp:
    """out[i] = a[i] * 0.5 over `count` float32 elements (buffers: out, a)."""
    i = UOp.range(count, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(count), (), 0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(count), (), 1)
    store = out.index(i).store(a.index(i).load() * UOp.const(dtypes.float32, 0.5)).end(i)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo("scale"))


def _source_only(renderer: Renderer) -> Renderer:
    renderer.compiler = None  # get_program stops at the source (no toolchain needed)
    return renderer


GPU_RENDERERS = {
    "OpenCL": lambda: _source_only(OpenCLRenderer()),
    "CUDA": lambda: _source_only(CUDARenderer("sm_80")),
    "PTX": lambda: _source_only(PTXRenderer("sm_80")),
    "AMD": lambda: _source_only(AMDRenderer("gfx1100")),
    "Metal": lambda: _source_only(MetalRenderer()),
}
OPTS = {"heuristic": None, "noopt": ()}
KERNELS = {"uint8_add": (add_one_kernel, ELEMENTS), "float32_2_40": (scale_kernel, RAND_ELEMENTS)}


def _program(kernel: str, renderer: Renderer, opts: str) -> Program:
    build, count = KERNELS[kernel]
    chosen = OPTS[opts]
    return Program(get_program(build(count), renderer, None if chosen is None else list(chosen)))


def _threads(program: Program) -> int:
    sizes = [*program.global_size, *(program.local_size or ())]
    assert all(isinstance(size, int) for size in sizes), f"static sizes expected, got {sizes}"
    return math.prod(int(size) for size in sizes)


@pytest.mark.parametrize("opts", OPTS)
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", GPU_RENDERERS)
def test_gpu_renderers_render_kernels_past_int32(name: str, kernel: str, opts: str) -> None:
    renderer = GPU_RENDERERS[name]()
    program = _program(kernel, renderer, opts)
    count = KERNELS[kernel][1]
    assert renderer.global_max is not None
    assert all(size <= limit for size, limit in zip(program.global_size, renderer.global_max))
    # every element is some thread's (times the elements a thread handles, from upcasts: at most 16 here)
    assert count // 16 <= _threads(program) <= count and count % _threads(program) == 0
    assert program.source.count(" ") > 10


@pytest.mark.parametrize("opts", OPTS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_opencl_compiles_kernels_past_int32(kernel: str, opts: str) -> None:
    if not opencl_available():
        pytest.skip("no OpenCL platform (PoCL) to build the kernel")
    program = _program(kernel, OpenCLRenderer(), opts)
    assert program.binary, "the OpenCL build returned no binary"
    assert "long" in program.source  # int64 offsets


@pytest.mark.parametrize("kernel", KERNELS)
def test_ptx_assembles_kernels_past_int32(kernel: str, requires_ptxas: str) -> None:
    program = _program(kernel, PTXRenderer("sm_80"), "heuristic")
    assert program.binary
    assert ".s64" in program.source or ".u64" in program.source


@pytest.mark.parametrize("kernel", KERNELS)
def test_wgsl_refuses_int64_offsets_by_name(kernel: str) -> None:
    # WGSL has no 64-bit integers (and WebGPU binds at most 4 GiB): a clear error naming the missing dtype
    with pytest.raises(ValueError, match=r"int64|cannot be split"):
        _program(kernel, _source_only(WGSLRenderer()), "heuristic")


CPU_RENDERERS = {"C-gcc": lambda: CRenderer("gcc"), "LLVM": LLVMRenderer}


@pytest.mark.parametrize("opts", OPTS)
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", CPU_RENDERERS)
def test_cpu_renderers_compile_kernels_past_int32(name: str, kernel: str, opts: str) -> None:
    program = _program(kernel, CPU_RENDERERS[name](), opts)
    assert program.binary
    if name == "LLVM":
        assert "i64" in program.source
        if "%core_id" in program.source:  # the heuristic's THREAD axis: an i32 parameter, widened once
            assert "i32 %core_id)" in program.source and "sext i32 %core_id to i64" in program.source
    else:
        assert "long long" in program.source
        if "core_id" in program.source:
            assert "int core_id)" in program.source


WINDOW = 16
WINDOWS = (0, 2**30 + 7, 2**31 - 8, 2**31 + 24, ELEMENTS - WINDOW)
"""Byte offsets of the input windows holding a pattern: the start, the middle, across 2**31, past it, the end."""


def _read(buffer: Buffer, offset: int) -> np.ndarray:
    got = np.empty(WINDOW, np.uint8)
    buffer.view(WINDOW, dtypes.uint8, offset).copyout(got)
    return got


UNTOUCHED = (2**30 + 2**20, 2**31 - 2**20, ELEMENTS - 100)
"""Offsets of windows whose input is zero (output 1)."""


@pytest.mark.slow
@pytest.mark.parametrize("name", CPU_RENDERERS)
def test_cpu_renderers_run_past_2_31_elements(name: str) -> None:
    # 2 GiB of output is written; the input is zero pages except the windows (untouched pages cost no memory). The
    # allocator may hand back another test's blocks: every checked window is written before the run
    program = _program("uint8_add", CPU_RENDERERS[name](), "heuristic")
    out, source = (Buffer("CPU", ELEMENTS, dtypes.uint8).allocate() for _ in range(2))
    rng = np.random.default_rng(len(name))
    patterns = {offset: rng.integers(0, 256, WINDOW, dtype=np.uint8) for offset in WINDOWS}
    patterns.update({offset: np.zeros(WINDOW, np.uint8) for offset in UNTOUCHED})
    for offset, pattern in patterns.items():
        source.view(WINDOW, dtypes.uint8, offset).copyin(pattern)
        out.view(WINDOW, dtypes.uint8, offset).copyin(pattern + np.uint8(77))  # not the expected values
    Device["CPU"].runtime(program)([out, source], {}, wait=True)
    for offset, pattern in patterns.items():  # numpy's uint8 addition wraps 255 + 1 to 0, as the IR does
        np.testing.assert_array_equal(_read(out, offset), pattern + np.uint8(1), err_msg=f"window at {offset}")
