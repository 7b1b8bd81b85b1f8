"""The PYTHON emulator device: GPU-style and CPU-style programs against numpy; failures that do not wedge it."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.codegen import Compiler, KernelInfo, KernelSignature, Opt, OptOps, Program, get_program
from kiln.renderers import PythonRenderer
from kiln.runtime import Buffer, Device, PythonDevice
from kiln.uops import AxisKind, Context, Ops, UOp, dtypes


def row_sum_sink(rows: int, columns: int) -> UOp:
    """out[i] = sum_j a[i * columns + j] (float32)."""
    row, column = UOp.range(rows, 0), UOp.range(columns, 1, AxisKind.REDUCE)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(rows), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(rows * columns), arg=1)
    total = a.index(row * columns + column).load().reduce(column, op=Ops.ADD)
    return UOp(Ops.SINK, src=(out.index(row).store(total).end(row),), arg=KernelInfo("row_sum"))


def run_row_sum(device: str, program: Program, values: np.ndarray) -> np.ndarray:
    rows = values.shape[0]
    out = Buffer(device, rows, dtypes.float32)
    source = Buffer(device, values.size, dtypes.float32).copyin(values.reshape(-1))
    Device[device].runtime(program)([out, source], wait=True)
    return out.numpy().copy()


@pytest.mark.parametrize(
    "opts",
    [
        (Opt(OptOps.GROUP, 1, 16),),  # threads of a block reduce through local memory with barriers
        (Opt(OptOps.GROUPTOP, 1, 8), Opt(OptOps.LOCAL, 0, 2)),
        (Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.UNROLL, 1, 4)),
    ],
    ids=["group", "grouptop-local", "local-unroll"],
)
def test_gpu_style_programs_with_local_memory_match_numpy(opts: tuple[Opt, ...]) -> None:
    program = Program(get_program(row_sum_sink(8, 64), PythonRenderer(), opts))
    uses = {u.op for u in program.uops}
    if any(opt.op in (OptOps.GROUP, OptOps.GROUPTOP) for opt in opts):
        assert {Ops.DEFINE_LOCAL, Ops.BARRIER} <= uses
    values = np.random.default_rng(0).integers(-9, 10, (8, 64)).astype(np.float32)
    np.testing.assert_array_equal(run_row_sum("PYTHON", program, values), values.sum(axis=1))


class CoresRenderer(PythonRenderer):
    """The Python renderer shaped like a CPU: THREAD axes over up to 8 cores (core_id), no blocks."""

    has_local = has_shared = False
    global_max = local_max = None
    has_threads = True
    thread_max = 8


def test_cpu_style_program_runs_every_core() -> None:
    program = Program(get_program(row_sum_sink(16, 8), CoresRenderer(), (Opt(OptOps.THREAD, 0, 4),)))
    assert program.global_size == (4, 1, 1)
    values = np.random.default_rng(1).integers(-9, 10, (16, 8)).astype(np.float32)
    np.testing.assert_array_equal(run_row_sum("PYTHON", program, values), values.sum(axis=1))


def test_the_renderer_is_the_python_renderer_and_programs_run_from_its_binary() -> None:
    device = Device["PYTHON"]
    assert isinstance(device, PythonDevice) and device.renderers == (PythonRenderer,)
    program = Program(get_program(row_sum_sink(4, 4), device.renderer))
    assert program.binary is not None and program.binary.startswith(b"# kiln linear program")
    # a value outside the accepted renderers is rejected when set, listing them
    with pytest.raises(ValueError, match=r"PYTHON_RENDERER='nosuch'.*'python'"), Context(PYTHON_RENDERER="nosuch"):
        device.renderer_class  # noqa: B018


def test_the_device_runs_the_linear_not_the_rendered_text() -> None:
    # the text a renderer prints is for people and the compile cache: the device interprets Program.linear, so a
    # renderer printing something unrelated still runs the kernel its LINEAR describes
    class WrongBinary(PythonRenderer):
        def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
            return "int main() {}"

    class NoCheck(Compiler):
        def compile(self, source: str) -> bytes:
            return source.encode()

    renderer = WrongBinary()
    renderer.compiler = NoCheck()
    program = Program(get_program(row_sum_sink(2, 3), renderer))
    assert program.binary == b"int main() {}"
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run_row_sum("PYTHON", program, values), values.sum(1))


def racing_program() -> Program:
    """Every thread of a block stores its own value to out[0]: a data race the interpreter reports."""
    i = UOp.range(8, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(1), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(8), arg=1)
    sink = UOp(Ops.SINK, src=(out.index(0).store(a.index(i).load()).end(i),), arg=KernelInfo("racy"))
    return Program(get_program(sink, PythonRenderer(), (Opt(OptOps.LOCAL, 0, 8),)))


def test_a_failing_program_raises_at_synchronize_and_the_device_keeps_working() -> None:
    program = racing_program()
    out = Buffer("PYTHON:racy", 1, dtypes.float32)
    a = Buffer("PYTHON:racy", 8, dtypes.float32).copyin(np.arange(8, dtype=np.float32))
    runner = Device["PYTHON:racy"].runtime(program)  # a second PYTHON device, so no other test sees its failures
    with pytest.raises(RuntimeError, match=r"PYTHON:racy: program 'racy' failed: DataRaceError"):
        runner([out, a], wait=True)
    runner([out, a])  # queued: the error is reported by the next host access
    with pytest.raises(RuntimeError, match="DataRaceError"):
        out.numpy()
    # the queue still runs programs after the failures
    good = Program(get_program(row_sum_sink(2, 4), PythonRenderer()))
    values = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(run_row_sum("PYTHON:racy", good, values), values.sum(axis=1))
