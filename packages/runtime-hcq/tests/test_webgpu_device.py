"""The WEBGPU device (wgpu; Mesa's lavapipe here and in CI): opening and its errors, buffers and copies (including the
odd sizes and offsets of bool buffers), views, launches with variables, bool buffers written by many invocations,
the IR's cast semantics, the queue's timeline, the device table and `python -m kiln.runtime`'s listing.
The conformance suite (test_conformance.py, pair WEBGPU-WGSL) runs every corpus and coverage kernel of its dtypes.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from kiln.codegen import KernelInfo, Opt, OptOps, Program, get_program
from kiln.renderers import WGSLRenderer, dtypes_for, renderers_for, webgpu_available
from kiln.renderers import webgpu_library as library_module
from kiln.runtime import Buffer, Device, DeviceUnavailable, copy_between
from kiln.runtime.__main__ import survey
from kiln.runtime.webgpu import WebGPUDevice
from kiln.uops import AxisKind, DType, Ops, UOp, VarArg, dtypes

needs_webgpu = pytest.mark.skipif(
    not webgpu_available(), reason="no WebGPU adapter: pip install wgpu, apt install mesa-vulkan-drivers"
)


def scale_add_sink(size: int) -> UOp:
    """out[i] = a[i] * 3 + b[i] over int32."""
    loop = UOp.range(size, 0, AxisKind.LOOP)
    out, a, b = (UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(size), arg=slot) for slot in range(3))
    value = a.index(loop).load() * 3 + b.index(loop).load()
    return UOp(Ops.SINK, src=(out.index(loop).store(value).end(loop),), arg=KernelInfo("scale_add"))


def test_the_table_offers_the_wgsl_renderer_and_32_bit_dtypes() -> None:
    assert renderers_for("WEBGPU") == (WGSLRenderer,)
    assert dtypes_for("WEBGPU") == {dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32}


def test_no_wgpu_is_a_clear_device_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wgpu", None)
    monkeypatch.setattr(library_module.webgpu_target, "_made", [])  # forget the adapter until the test ends
    library_module.load_wgpu.cache_clear()
    try:
        with pytest.raises(DeviceUnavailable, match=r"^WEBGPU unavailable: the wgpu package is not installed"):
            WebGPUDevice("WEBGPU")
    finally:
        library_module.load_wgpu.cache_clear()


def test_no_adapter_is_a_clear_device_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoAdapter:
        class gpu:
            @staticmethod
            def request_adapter_sync(**_: object) -> None:
                return None

    monkeypatch.setattr(library_module, "load_wgpu", lambda: NoAdapter)
    monkeypatch.setattr(library_module.webgpu_target, "_made", [])  # forget the adapter until the test ends
    with pytest.raises(DeviceUnavailable, match=r"^WEBGPU unavailable: no WebGPU adapter"):
        WebGPUDevice("WEBGPU")


def test_there_is_one_webgpu_device() -> None:
    with pytest.raises(DeviceUnavailable, match="there is one WEBGPU device"):
        WebGPUDevice("WEBGPU:1")


@needs_webgpu
def test_it_names_the_adapter_and_lists_it() -> None:
    device = Device["WEBGPU"]
    assert isinstance(device, WebGPUDevice)
    assert device.supported_dtypes == dtypes_for("WEBGPU")
    report = {r.kind: r for r in survey(run_smoke_tests=True)}["WEBGPU"]
    assert report.opens == "yes" and device.target.adapter_name in report.hardware
    assert report.smoke_test.startswith("WGSLRenderer: ok")
    with pytest.raises(TypeError, match="float64"):
        Buffer("WEBGPU", 4, dtypes.float64).allocate()


@needs_webgpu
def test_copies_round_trip_at_any_size_and_offset() -> None:
    values = np.arange(96, dtype=np.float32) * 0.5
    buffer = Buffer("WEBGPU", 96, dtypes.float32).copyin(values)
    out = np.empty(96, np.float32)
    buffer.copyout(out)
    np.testing.assert_array_equal(out, values)
    flags = np.array([True, False, True, True, False, False, True, False, True, True, False])  # 11 bytes
    bools = Buffer("WEBGPU", 11, dtypes.bool).copyin(flags)
    middle = bools.view(5, dtypes.bool, offset=3)
    got = np.empty(5, bool)
    middle.copyout(got)
    np.testing.assert_array_equal(got, flags[3:8])
    middle.copyin(np.ones(5, bool))  # a read-modify-write of the words around bytes 3..7
    whole = np.empty(11, bool)
    bools.copyout(whole)
    np.testing.assert_array_equal(whole, np.concatenate([flags[:3], np.ones(5, bool), flags[8:]]))
    copy = Buffer("WEBGPU", 96, dtypes.float32)
    copy_between(copy, buffer)  # a buffer-to-buffer copy on the device
    copy.copyout(out)
    np.testing.assert_array_equal(out, values)
    odd = Buffer("WEBGPU", 5, dtypes.bool)
    copy_between(odd, bools.view(5, dtypes.bool, offset=1))  # unaligned: through the host
    odd.copyout(got)
    np.testing.assert_array_equal(got, whole[1:6])


@needs_webgpu
def test_a_kernel_runs_and_the_timeline_advances() -> None:
    device = Device["WEBGPU"]
    assert isinstance(device, WebGPUDevice)
    program = Program(get_program(scale_add_sink(1000), device.renderer, [Opt(OptOps.LOCAL, 0, 8)]))
    rng = np.random.default_rng(1)
    a, b = rng.integers(-(2**31), 2**31, 1000).astype(np.int32), rng.integers(-1000, 1000, 1000).astype(np.int32)
    buffers = [Buffer("WEBGPU", 1000, dtypes.int32) for _ in range(3)]
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
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, a * np.int32(3) + b)  # int32 wraps around


@needs_webgpu
def test_variables_reach_the_kernel() -> None:
    device = Device["WEBGPU"]
    n = UOp(Ops.DEFINE_VAR, dtypes.index, (), VarArg("n", 1, 64))
    loop = UOp.range(n, 0, AxisKind.LOOP)
    out, a = (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(64), arg=slot) for slot in range(2))
    store = out.index(loop).store(a.index(loop).load() + n.cast(dtypes.float32)).end(loop)
    program = Program(get_program(UOp(Ops.SINK, src=(store,), arg=KernelInfo("add_n")), device.renderer))
    values = np.arange(64, dtype=np.float32)
    source, target = Buffer("WEBGPU", 64, dtypes.float32).copyin(values), Buffer("WEBGPU", 64, dtypes.float32)
    for count in (5, 64):
        target.copyin(np.zeros(64, np.float32))
        device.runtime(program)([target, source], {"n": count}, wait=True)
        got = np.empty(64, np.float32)
        target.copyout(got)
        np.testing.assert_array_equal(got[:count], values[:count] + count)
        assert not got[count:].any()


@needs_webgpu
def test_bool_bytes_written_by_neighbouring_invocations_all_land() -> None:
    device = Device["WEBGPU"]
    size = 1001
    loop = UOp.range(size, 0, AxisKind.LOOP)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.bool.ptr(size), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=1)
    store = out.index(loop).store(a.index(loop).load() < 0.0).end(loop)
    sink = UOp(Ops.SINK, src=(store,), arg=KernelInfo("negative"))
    program = Program(get_program(sink, device.renderer, [Opt(OptOps.LOCAL, 0, 7)]))
    values = np.random.default_rng(2).standard_normal(size).astype(np.float32)
    result = Buffer("WEBGPU", size, dtypes.bool).copyin(np.zeros(size, bool))
    device.runtime(program)([result, Buffer("WEBGPU", size, dtypes.float32).copyin(values)], {}, wait=True)
    got = np.empty(size, bool)
    result.copyout(got)
    np.testing.assert_array_equal(got, values < 0)


CAST_INPUTS = np.array(
    [
        0.0,
        -0.0,
        1.5,
        -1.5,
        2.5e9,
        -2.5e9,
        3.0e9,
        5.0e9,
        -5.0e9,
        1e20,
        -1e20,
        np.inf,
        -np.inf,
        np.nan,
        2.0**31,
        -(2.0**31),
    ],
    dtype=np.float32,
)


def _cast_sink(targets: tuple[DType, ...]) -> UOp:
    size = len(CAST_INPUTS)
    loop = UOp.range(size, 0, AxisKind.LOOP)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=len(targets)).index(loop).load()
    stores = [
        UOp(Ops.DEFINE_GLOBAL, target.ptr(size), arg=slot).index(loop).store(a.cast(target)).end(loop)
        for slot, target in enumerate(targets)
    ]
    return UOp(Ops.SINK, src=tuple(stores), arg=KernelInfo("float_casts"))


@needs_webgpu
def test_float_to_int_casts_wrap_and_send_nan_to_the_minimum_as_the_ir_says() -> None:
    targets = (dtypes.int32, dtypes.uint32, dtypes.bool)
    sink = _cast_sink(targets)
    results = {}
    for name in ("WEBGPU", "PYTHON"):  # the PYTHON device interprets the IR: the oracle
        device = Device[name]
        program = Program(get_program(sink, device.renderer, []))
        buffers = [Buffer(name, len(CAST_INPUTS), target) for target in targets]
        buffers.append(Buffer(name, len(CAST_INPUTS), dtypes.float32).copyin(CAST_INPUTS))
        device.runtime(program)(buffers, {}, wait=True)
        outputs = []
        for buffer, target in zip(buffers, targets):
            raw = np.empty(len(CAST_INPUTS), {dtypes.int32: np.int32, dtypes.uint32: np.uint32}.get(target, bool))
            buffer.copyout(raw)
            outputs.append(raw)
        results[name] = outputs
    for got, expected, target in zip(results["WEBGPU"], results["PYTHON"], targets):
        np.testing.assert_array_equal(got, expected, err_msg=f"float32 -> {target.name}")
    assert results["WEBGPU"][0][13] == -(2**31) and results["WEBGPU"][1][3] == 2**32 - 1  # NaN, -1.5


@needs_webgpu
def test_a_misaligned_view_and_a_program_without_binary_are_refused() -> None:
    device = Device["WEBGPU"]
    program = Program(get_program(scale_add_sink(16), device.renderer, []))
    base = Buffer("WEBGPU", 128, dtypes.int32).copyin(np.arange(128, dtype=np.int32))
    out, zeros = Buffer("WEBGPU", 16, dtypes.int32), Buffer("WEBGPU", 16, dtypes.int32).copyin(np.zeros(16, np.int32))
    alignment = device.target.limits["min-storage-buffer-offset-alignment"]
    aligned = base.view(16, dtypes.int32, offset=alignment)
    device.runtime(program)([out, aligned, zeros], {}, wait=True)
    got = np.empty(16, np.int32)
    out.copyout(got)
    np.testing.assert_array_equal(got, (np.arange(16) + alignment // 4) * 3)
    with pytest.raises(ValueError, match="WebGPU binds storage buffers at multiples of"):
        device.runtime(program)([out, base.view(16, dtypes.int32, offset=4), zeros], {})
    source_only = WGSLRenderer()
    source_only.compiler = None  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="has no binary"):
        device.runtime(Program(get_program(scale_add_sink(8), source_only, [])))


NARROW_OPS = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.MAX, Ops.XOR)


def _narrow_sink(dtype: DType, size: int) -> UOp:
    loop = UOp.range(size, 0, AxisKind.LOOP)
    slots = len(NARROW_OPS) + 1
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(size), arg=slots).index(loop).load().cast(dtype)
    b = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(size), arg=slots + 1).index(loop).load().cast(dtype)
    results = [a.alu(op, b) for op in NARROW_OPS] + [-a]
    stores = [
        UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(size), arg=slot).index(loop).store(value.cast(dtypes.int32)).end(loop)
        for slot, value in enumerate(results)
    ]
    return UOp(Ops.SINK, src=tuple(stores), arg=KernelInfo(f"narrow_{dtype.name}"))


@needs_webgpu
@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16], ids=str)
def test_8_and_16_bit_arithmetic_in_32_bit_registers_wraps_as_the_ir_says(dtype: DType) -> None:
    size = 256
    rng = np.random.default_rng(7)
    a = rng.integers(-70000, 70000, size).astype(np.int32)
    b = rng.integers(-70000, 70000, size).astype(np.int32)
    b[(b & 0xFF) == 0] = 3  # no zero divisor once narrowed (the interpreter raises on one)
    b[::17] = rng.integers(0, 20, len(b[::17]))  # shift counts inside and outside the width
    b[(b & 0xFF) == 0] = 3
    sink = _narrow_sink(dtype, size)
    results = {}
    for name in ("WEBGPU", "PYTHON"):
        device = Device[name]
        program = Program(get_program(sink, device.renderer, []))
        buffers = [Buffer(name, size, dtypes.int32) for _ in range(len(NARROW_OPS) + 1)]
        buffers += [Buffer(name, size, dtypes.int32).copyin(a), Buffer(name, size, dtypes.int32).copyin(b)]
        device.runtime(program)(buffers, {}, wait=True)
        outputs = []
        for buffer in buffers[: len(NARROW_OPS) + 1]:
            raw = np.empty(size, np.int32)
            buffer.copyout(raw)
            outputs.append(raw)
        results[name] = outputs
    for got, expected, op in zip(results["WEBGPU"], results["PYTHON"], [*NARROW_OPS, Ops.NEG]):
        np.testing.assert_array_equal(got, expected, err_msg=f"{op} on {dtype.name}")
