"""`HCQProgramRunner.launch_direct`: a one-core native kernel called at once with its buffers' addresses (what the
eager lane launches with) gives numpy's values, keeps the queue's order, and refuses (running nothing) where the
full launch must run: PROFILE, a busy queue, a multi-core kernel."""

from __future__ import annotations

import numpy as np
from corpus import CASES_BY_NAME, to_storage

from kiln.codegen import Opt, OptOps, Program, get_program
from kiln.renderers import LLVMRenderer
from kiln.runtime import Buffer, Device
from kiln.runtime.hcq_runner import HCQProgramRunner
from kiln.uops import Context

CASE = CASES_BY_NAME["elementwise_float32"]


def _runner(opts: list[Opt] | None = None) -> HCQProgramRunner:
    renderer = LLVMRenderer()
    renderer.thread_max = 4
    runner = Device["CPU"].runtime(Program(get_program(CASE.sink, renderer, opts or [])))
    assert isinstance(runner, HCQProgramRunner)
    return runner


def _buffers(seed: int) -> tuple[list[Buffer], list[np.ndarray]]:
    inputs = CASE.inputs(np.random.default_rng(seed))
    buffers = [Buffer("CPU", size, dtype).allocate() for dtype, size in CASE.buffers]
    for buffer, values, (dtype, _) in zip(buffers[1:], inputs, CASE.buffers[1:]):
        buffer.copyin(np.ascontiguousarray(to_storage(values, dtype)))
    return buffers, inputs


def _output(buffer: Buffer) -> np.ndarray:
    raw = np.empty(buffer.nbytes, np.uint8)
    buffer.copyout(raw)
    return raw.view(np.float32)


def test_a_direct_launch_gives_numpys_values_and_takes_no_timeline_value() -> None:
    # done when it returns, after all earlier work: nothing is left for a wait, so the timeline stays where it was
    runner = _runner()
    device = Device["CPU"]
    for seed in range(3):
        buffers, inputs = _buffers(seed)
        device.synchronize()
        before = device.timeline_value  # type: ignore[attr-defined]
        assert runner.launch_direct(buffers)
        assert device.timeline_value == before  # type: ignore[attr-defined]
        assert device.timeline_signal.value == before - 1  # type: ignore[attr-defined]
        np.testing.assert_allclose(_output(buffers[0]), CASE.reference(inputs, {})[0], rtol=1e-6)


def test_a_direct_launch_after_queued_work_sees_its_results() -> None:
    runner = _runner()
    buffers, inputs = _buffers(7)
    runner(buffers, None)  # queued or inline: done before the next launch either way (the queue keeps order)
    second, _ = _buffers(8)
    chained = [second[0], buffers[0], buffers[2]]  # reads the first launch's output
    if not runner.launch_direct(chained):
        runner(chained, None)
    first = CASE.reference(inputs, {})[0]
    expected = CASE.reference([first, inputs[1]], {})[0]
    np.testing.assert_allclose(_output(second[0]), expected, rtol=1e-5)


def test_profiling_is_refused_and_nothing_runs() -> None:
    runner = _runner()
    buffers, _ = _buffers(1)
    buffers[0].copyin(np.zeros(buffers[0].nbytes, np.uint8))
    with Context(PROFILE=1):
        assert not runner.launch_direct(buffers)
    np.testing.assert_array_equal(_output(buffers[0]), np.zeros(buffers[0].size, np.float32))


def test_a_busy_engine_refuses_until_its_work_is_done() -> None:
    runner = _runner()
    device = Device["CPU"]
    engine = device.compute_engine  # type: ignore[attr-defined]
    buffers, inputs = _buffers(2)
    buffers[0].copyin(np.zeros(buffers[0].nbytes, np.uint8))
    with engine._state_lock:
        engine._outstanding += 1  # a list counted as queued: the engine is not idle
    try:
        assert not runner.launch_direct(buffers)
    finally:
        with engine._state_lock:
            engine._outstanding -= 1
    np.testing.assert_array_equal(_output(buffers[0]), np.zeros(buffers[0].size, np.float32))
    assert runner.launch_direct(buffers)
    np.testing.assert_allclose(_output(buffers[0]), CASE.reference(inputs, {})[0], rtol=1e-6)


def test_a_multi_core_kernel_is_never_called_directly() -> None:
    runner = _runner([Opt(OptOps.THREAD, 0, 2)])
    buffers, _ = _buffers(3)
    assert not runner.launch_direct(buffers)
