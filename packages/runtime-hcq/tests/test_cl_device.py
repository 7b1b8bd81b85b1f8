"""The CL device (OpenCL through ctypes; PoCL's CPU device here and in CI): opening, buffers and copies, views,
programs from the OpenCL renderer, the queue's timeline, the device table and `python -m kiln.runtime`'s listing.
The conformance suite (test_conformance.py, pair CL-OpenCL) runs every corpus and coverage kernel on it."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from kiln.codegen import KernelInfo, Opt, OptOps, Program, get_program
from kiln.renderers import DEVICE_TABLE, OpenCLRenderer, dtypes_for, opencl_available, opencl_library, renderers_for
from kiln.runtime import Buffer, Device, DeviceUnavailable, find_dtypes, find_renderers
from kiln.runtime.__main__ import survey
from kiln.runtime.opencl import CLDevice
from kiln.uops import AxisKind, Ops, UOp, dtypes

needs_opencl = pytest.mark.skipif(
    not opencl_available(), reason="no OpenCL platform: apt install ocl-icd-libopencl1 pocl-opencl-icd"
)


def scale_add_sink(size: int) -> UOp:
    """out[i] = a[i] * 3 + b[i] over int32."""
    loop = UOp.range(size, 0, AxisKind.LOOP)
    out, a, b = (UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(size), arg=slot) for slot in range(3))
    value = a.index(loop).load() * 3 + b.index(loop).load()
    return UOp(Ops.SINK, src=(out.index(loop).store(value).end(loop),), arg=KernelInfo("scale_add"))


def test_the_table_lists_renderers_and_dtypes_per_kind() -> None:
    assert renderers_for("CL") == find_renderers("CL") == (OpenCLRenderer,)
    assert [r.__name__ for r in renderers_for("CPU")][-1] == "CRenderer" and renderers_for("NOSUCHKIND") == ()
    assert "WEBGPU" in DEVICE_TABLE and dtypes.float64 not in dtypes_for("WEBGPU") == find_dtypes("WEBGPU")
    assert find_dtypes("NOSUCHKIND") == frozenset(dtypes.all)


def test_no_platform_is_a_clear_device_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opencl_library, "LIBRARY_NAMES", ("libkiln-no-such-opencl.so",))
    opencl_library.load_opencl.cache_clear()
    try:
        with pytest.raises(DeviceUnavailable, match=r"CL: no OpenCL library could be loaded .*pocl-opencl-icd"):
            CLDevice("CL")
    finally:
        opencl_library.load_opencl.cache_clear()


def test_bad_names_are_refused() -> None:
    with pytest.raises(DeviceUnavailable, match="CL devices are numbered"):
        CLDevice("CL:first")
    if opencl_available():
        with pytest.raises(DeviceUnavailable, match="there is no OpenCL device 57"):
            CLDevice("CL:57")


@needs_opencl
def test_it_names_the_platform_and_device_clinfo_lists() -> None:
    device = Device["CL"]
    assert isinstance(device, CLDevice)
    if shutil.which("clinfo"):
        listing = subprocess.run(["clinfo", "-l"], capture_output=True, text=True, check=True).stdout
        assert device.target.platform_name in listing and device.target.device_name in listing
    assert device.supported_dtypes == frozenset(dtypes.all)  # PoCL has cl_khr_fp64; float16 is emulated
    report = {r.kind: r for r in survey(run_smoke_tests=True)}["CL"]
    assert report.opens == "yes" and device.target.platform_name in report.hardware
    assert report.smoke_test.startswith("OpenCLRenderer: ok")


@needs_opencl
def test_copies_round_trip_and_views_read_their_part() -> None:
    values = np.arange(96, dtype=np.float32) * 0.5
    buffer = Buffer("CL", 96, dtypes.float32).copyin(values)
    out = np.empty(96, np.float32)
    buffer.copyout(out)
    np.testing.assert_array_equal(out, values)
    view = buffer.view(8, dtypes.float32, offset=4 * 10)
    part = np.empty(8, np.float32)
    view.copyout(part)
    np.testing.assert_array_equal(part, values[10:18])


@needs_opencl
def test_a_kernel_runs_and_the_timeline_advances() -> None:
    device = Device["CL"]
    assert isinstance(device, CLDevice)
    program = Program(get_program(scale_add_sink(1000), device.renderer, [Opt(OptOps.LOCAL, 0, 8)]))
    rng = np.random.default_rng(1)
    a, b = rng.integers(-1000, 1000, 1000).astype(np.int32), rng.integers(-1000, 1000, 1000).astype(np.int32)
    buffers = [Buffer("CL", 1000, dtypes.int32), Buffer("CL", 1000, dtypes.int32), Buffer("CL", 1000, dtypes.int32)]
    buffers[1].copyin(a)
    buffers[2].copyin(b)
    before = device.timeline.value_enqueued
    device.runtime(program)(buffers, {})  # queued, not waited for
    assert device.timeline.value_enqueued == before + 1
    device.synchronize()
    assert device.timeline.reached(before + 1)
    seconds = device.runtime(program)(buffers, {}, wait=True)
    assert seconds is not None and 0 < seconds < 10
    got = np.empty(1000, np.int32)
    buffers[0].copyout(got)
    np.testing.assert_array_equal(got, a * 3 + b)


@needs_opencl
def test_a_kernel_reads_a_view_at_an_aligned_offset_and_refuses_a_misaligned_one() -> None:
    device = Device["CL"]
    program = Program(get_program(scale_add_sink(16), device.renderer, []))
    base = Buffer("CL", 64, dtypes.int32).copyin(np.arange(64, dtype=np.int32))
    out = Buffer("CL", 16, dtypes.int32)
    zeros = Buffer("CL", 16, dtypes.int32).copyin(np.zeros(16, np.int32))
    aligned = base.view(16, dtypes.int32, offset=128)  # 128 bytes: PoCL's CL_DEVICE_MEM_BASE_ADDR_ALIGN
    device.runtime(program)([out, aligned, zeros], {}, wait=True)
    got = np.empty(16, np.int32)
    out.copyout(got)
    np.testing.assert_array_equal(got, np.arange(32, 48) * 3)
    with pytest.raises(ValueError, match="sub-buffers must start at a multiple of"):
        device.runtime(program)([out, base.view(16, dtypes.int32, offset=4), zeros], {})


@needs_opencl
def test_a_program_for_another_device_or_without_binary_is_refused() -> None:
    device = Device["CL"]
    source_only = OpenCLRenderer()
    source_only.compiler = None  # type: ignore[assignment]
    program = Program(get_program(scale_add_sink(8), source_only, []))
    with pytest.raises(RuntimeError, match="has no binary"):
        device.runtime(program)
    cpu_program = Program(get_program(scale_add_sink(8), Device["CPU"].renderer, []))
    with pytest.raises(ValueError, match="it cannot run on 'CL'"):
        device.runtime(cpu_program)
