"""ProgramRunner: argument checks name the bad argument; variables, launch dims and the device's runner cache."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.codegen import KernelInfo, Opt, OptOps, Program, get_program
from kiln.renderers import PythonRenderer
from kiln.runtime import ArgKind, Buffer, Device, DeviceBase, HostAllocator, ProgramRunner
from kiln.uops import Ops, UOp, dtypes


def scaled_copy_sink(limit: int = 64) -> UOp:
    """out[i] = a[i] * scale for i < n: a symbolic length `n` and an int64 scale variable `scale`."""
    n = UOp.variable("n", 1, limit)
    i = UOp.range(n, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.int64.ptr(limit), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.int64.ptr(limit), arg=1)
    scale = UOp.variable("scale", -(2**40), 2**40).cast(dtypes.int64)
    return UOp(Ops.SINK, src=(out.index(i).store(a.index(i).load() * scale).end(i),), arg=KernelInfo("scaled_copy"))


@pytest.fixture(scope="module")
def runner() -> ProgramRunner:
    return Device["PYTHON"].runtime(Program(get_program(scaled_copy_sink(), PythonRenderer())))


def buffers(size: int = 64, dtype: object = dtypes.int64, device: str = "PYTHON") -> list[Buffer]:
    values = np.arange(size, dtype=np.int64) - 7
    out = Buffer(device, size, dtypes.int64).copyin(np.zeros(size, np.int64))  # reused memory is not zeroed
    source = Buffer(device, size, dtypes.int64).copyin(values)
    return [out, source]


def test_variables_are_passed_by_name_in_sorted_order(runner: ProgramRunner) -> None:
    assert [variable.name for variable in runner.variables] == ["n", "scale"]
    out, source = buffers()
    runner([out, source], {"scale": 3, "n": 40, "unused": 9}, wait=True)
    expected = np.zeros(64, np.int64)
    expected[:40] = (np.arange(40) - 7) * 3
    np.testing.assert_array_equal(out.numpy(), expected)


def test_wait_returns_the_kernel_time_and_no_wait_returns_none(runner: ProgramRunner) -> None:
    out, source = buffers()
    elapsed = runner([out, source], {"n": 64, "scale": 1}, wait=True)
    assert isinstance(elapsed, float) and 0 < elapsed < 10
    assert runner([out, source], {"n": 64, "scale": 2}) is None
    np.testing.assert_array_equal(out.numpy(), (np.arange(64) - 7) * 2)  # the host access waits for the launch


@pytest.mark.parametrize(
    ("var_vals", "error", "message"),
    [
        (
            {"scale": 1},
            ValueError,
            r"scaled_copy: no value for variable 'n' \(bounds 1..64\); var_vals has \['scale'\]",
        ),
        ({"n": 65, "scale": 1}, ValueError, r"variable 'n' = 65 is outside its bounds \[1, 64\]"),
        ({"n": 0, "scale": 1}, ValueError, r"variable 'n' = 0 is outside its bounds"),
        ({"n": 3.0, "scale": 1}, TypeError, r"variable 'n' must be an int, got 3.0"),
        ({"n": True, "scale": 1}, TypeError, r"variable 'n' must be an int, got True"),
        ({"n": 2, "scale": 2**41}, ValueError, r"'scale' = 2199023255552 is outside its bounds"),
    ],
)
def test_bad_variables_raise(
    runner: ProgramRunner, var_vals: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        runner(buffers(), var_vals)  # type: ignore[arg-type]


def test_int64_variables_get_an_int64_parameter(runner: ProgramRunner) -> None:
    # scale's bounds exceed int32, so codegen lowers the index math (and both variables) to int64
    assert [variable.dtype for variable in runner.program.variables] == [dtypes.int64, dtypes.int64]
    assert runner.arg_layout.kinds == (ArgKind.POINTER, ArgKind.POINTER, ArgKind.INT64, ArgKind.INT64)
    assert runner.arg_layout.offsets == (0, 8, 16, 24)
    out, source = buffers()
    runner([out, source], {"n": 2, "scale": -(2**40)}, wait=True)
    np.testing.assert_array_equal(out.numpy()[:2], np.array([-7, -6]) * -(2**40))


def test_bad_buffers_raise(runner: ProgramRunner) -> None:
    out, source = buffers()
    var_vals = {"n": 4, "scale": 1}
    with pytest.raises(ValueError, match=r"scaled_copy takes 2 buffers \(slots 0..1\), got 1"):
        runner([out], var_vals)
    with pytest.raises(TypeError, match=r"buffer 1 must be a kiln\.runtime Buffer, got ndarray"):
        runner([out, np.zeros(64)], var_vals)  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"buffer 0 is on 'PYTHON:other', the program runs on 'PYTHON'"):
        runner([Buffer("PYTHON:other", 64, dtypes.int64), source], var_vals)
    with pytest.raises(TypeError, match=r"buffer 1 holds dtypes.int32, the kernel reads dtypes.int64"):
        runner([out, Buffer("PYTHON", 128, dtypes.int32)], var_vals)
    with pytest.raises(ValueError, match=r"buffer 1 holds 504 bytes \(63 x dtypes.int64\), the kernel accesses 512"):
        runner([out, Buffer("PYTHON", 63, dtypes.int64)], var_vals)
    view = Buffer("PYTHON", 64, dtypes.int64).view(64, dtypes.int64)  # views of a big enough base work
    runner([view, source], var_vals, wait=True)
    np.testing.assert_array_equal(view.numpy()[:4], np.arange(4) - 7)


def test_unaligned_views_are_refused_for_wide_accesses() -> None:
    i = UOp.range(16, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(16), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(16), arg=1)
    sink = UOp(Ops.SINK, src=(out.index(i).store(a.index(i).load() + 1.0).end(i),), arg=KernelInfo("plus_one"))
    program = Program(get_program(sink, PythonRenderer(), (Opt(OptOps.UPCAST, 0, 4),)))
    runner = Device["PYTHON"].runtime(program)
    assert runner.alignments == {0: 16, 1: 16}  # float32 x 4 loads and stores
    base = Buffer("PYTHON", 20, dtypes.float32).copyin(np.arange(20, dtype=np.float32))
    out = Buffer("PYTHON", 16, dtypes.float32)
    with pytest.raises(ValueError, match=r"buffer 1 starts at address 0x[0-9a-f]+, .* aligned to 16 bytes"):
        runner([out, base.view(16, dtypes.float32, offset=4)])
    runner([out, base.view(16, dtypes.float32, offset=16)], wait=True)
    np.testing.assert_array_equal(out.numpy(), np.arange(4, 20, dtype=np.float32) + 1)


def test_a_program_for_another_device_kind_is_refused() -> None:
    class OtherRenderer(PythonRenderer):
        device = "ELSEWHERE"

    program = Program(get_program(scaled_copy_sink(), OtherRenderer()))
    with pytest.raises(ValueError, match=r"built for 'ELSEWHERE', it cannot run on 'PYTHON'"):
        Device["PYTHON"].runtime(program)
    with pytest.raises(TypeError, match=r"takes a kiln\.codegen Program, got UOp"):
        Device["PYTHON"].runtime(program.uop)  # type: ignore[arg-type]


def test_devices_cache_their_runners_per_program() -> None:
    program = Program(get_program(scaled_copy_sink(32), PythonRenderer()))
    device = Device["PYTHON"]
    first = device.runtime(program)
    assert device.runtime(Program(program.uop)) is first  # the same PROGRAM uop: the same runner
    assert Device["PYTHON:other"].runtime(program) is not first


def test_devices_without_a_loader_cannot_run_programs() -> None:
    class MemoryOnly(DeviceBase):
        def __init__(self, name: str) -> None:
            super().__init__(name, HostAllocator(name))

    program = Program(get_program(scaled_copy_sink(), PythonRenderer()))
    with pytest.raises(RuntimeError, match="device 'MEMONLY' cannot run programs"):
        MemoryOnly("MEMONLY").runtime(program)
