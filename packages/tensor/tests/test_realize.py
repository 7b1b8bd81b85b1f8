"""The realize engine: method cache, launching on each device, GlobalCounters, DEBUG output, dropped buffers."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import numpy as np
import pytest
from engine_graphs import FAST_DEVICE, const_like

from kiln.tensor import GlobalCounters, Tensor, default_device
from kiln.tensor.graph import buffer_uop, device_of, shape_of
from kiln.tensor.realize import clear_method_cache, default_engine, method_cache_size
from kiln.uops import Context, Ops

DEVICES = sorted({FAST_DEVICE, default_device()})


@pytest.mark.parametrize("device", DEVICES)
def test_kernels_run_on_each_device(device: str) -> None:
    values = np.linspace(-2, 2, 30, dtype=np.float32).reshape(5, 6)
    x = Tensor(values, device=device)
    result = x._binary(Ops.MUL, x)._reduce(Ops.ADD, (1,))._unary(Ops.SQRT)
    assert result.device == device
    np.testing.assert_allclose(result.numpy(), np.sqrt((values * values).sum(1, keepdims=True)), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_method_cache_builds_each_kernel_once(device: str) -> None:
    clear_method_cache()
    for step in range(3):
        x = Tensor(np.full(7, step, np.float32), device=device)
        np.testing.assert_array_equal(x._binary(Ops.ADD, const_like(x, 1.5)).numpy(), np.full(7, step + 1.5))
    assert method_cache_size() == 1  # one kernel structure, three launches
    x = Tensor(np.zeros(7, np.float32), device=device)
    x._binary(Ops.ADD, const_like(x, 2.5)).realize()
    assert method_cache_size() == 2  # another constant is another kernel


@pytest.mark.parametrize("device", DEVICES)
def test_global_counters(device: str) -> None:
    size = 1000
    a = Tensor(np.ones(size, np.float32), device=device)
    b = Tensor(np.full(size, 2, np.float32), device=device)
    GlobalCounters.reset()
    assert (GlobalCounters.kernel_count, GlobalCounters.flops, GlobalCounters.mem_bytes) == (0, 0, 0)
    total = a._binary(Ops.ADD, b).realize()
    assert GlobalCounters.kernel_count == 1
    assert GlobalCounters.flops == size  # one add per element
    assert GlobalCounters.mem_bytes == 3 * 4 * size  # two float32 loads and one store per element
    assert GlobalCounters.time_ns > 0
    total.to(FAST_DEVICE if device != FAST_DEVICE else "CPU").realize()
    assert GlobalCounters.copies == 1 and GlobalCounters.kernel_count == 1
    GlobalCounters.reset()
    assert (GlobalCounters.kernel_count, GlobalCounters.copies, GlobalCounters.time_ns) == (0, 0, 0)


def test_debug_output(capsys: pytest.CaptureFixture[str]) -> None:
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=FAST_DEVICE)
    with Context(DEBUG=1):
        x._binary(Ops.ADD, x)._reduce(Ops.MAX, (1,)).realize()
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(r"scheduled 1 kernels, 0 copies in [0-9.]+ ms", lines[0])
    centered = x._binary(Ops.SUB, x._reduce(Ops.MAX, (1,))._movement(Ops.EXPAND, (3, 4)))
    with Context(DEBUG=2):
        centered.realize()
    lines = capsys.readouterr().out.strip().splitlines()
    kernel_lines = [line for line in lines if line.startswith("***")]
    assert len(kernel_lines) == 2
    for line in kernel_lines:
        assert re.search(
            r"\*\*\* PYTHON\s+\S+\s+global=\[.*\] local=\[.*\]\s+[0-9.]+ ms\s+[0-9.]+ GFLOP/s\s+[0-9.]+ GB/s", line
        )
    assert lines[-1].startswith("scheduled 2 kernels")
    np.testing.assert_array_equal(centered.numpy(), np.arange(12).reshape(3, 4) - [[3], [7], [11]])


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_whose_input_is_never_read(device: str) -> None:
    # the padded part only: every load of x is gated off and codegen drops x's buffer parameter
    x = Tensor(np.arange(4, dtype=np.float32), device=device)
    y = Tensor(np.full(4, 10, np.float32), device=device)
    zeros = x._movement(Ops.PAD, ((0, 4),))._movement(Ops.SHRINK, ((4, 8),))
    np.testing.assert_array_equal(y._binary(Ops.ADD, zeros).numpy(), np.full(4, 10.0))
    np.testing.assert_array_equal(zeros._binary(Ops.ADD, y).numpy(), np.full(4, 10.0))


def test_results_are_shared_not_recomputed() -> None:
    x = Tensor(np.arange(6, dtype=np.float32), device=FAST_DEVICE)
    doubled = x._binary(Ops.ADD, x)
    tripled = doubled._binary(Ops.ADD, x)  # built before doubled is realized: its graph holds doubled's node
    doubled.realize()
    GlobalCounters.reset()
    np.testing.assert_array_equal(tripled.numpy(), 3 * np.arange(6))
    assert GlobalCounters.kernel_count == 1
    GlobalCounters.reset()
    np.testing.assert_array_equal(doubled.numpy(), 2 * np.arange(6))
    assert GlobalCounters.kernel_count == 0  # already a buffer


@pytest.mark.parametrize("device", DEVICES)
def test_repeated_tiny_ops_hit_every_cache_and_match_numpy(device: str) -> None:
    x = Tensor(np.zeros(16, np.float32), device=device)
    expected = np.zeros(16, np.float32)
    x = x._binary(Ops.ADD, const_like(x, 1.0)).realize()
    expected += 1
    methods, hits = method_cache_size(), default_engine().schedule.hits
    for step in range(60):
        x = x._binary(Ops.ADD, const_like(x, 1.0)).realize()
        expected += 1
        if step % 20 == 7:  # reading in between waits for every launch so far
            np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_array_equal(x.numpy(), expected)
    assert method_cache_size() == methods and default_engine().schedule.hits >= hits + 60


def test_realized_buffers_report_the_shape_and_device_graph_infers() -> None:
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=FAST_DEVICE)
    y = x._binary(Ops.MUL, x)._reduce(Ops.ADD, (1,))
    results = Tensor.realize_all(y, x._binary(Ops.ADD, x))
    for view in results:
        base = view
        while base.op is not Ops.BUFFER:
            base = base.src[0]
        # the engine fills these for its new buffers; the graph's own inference on an equal fresh node agrees
        fresh = buffer_uop(base.arg.device, base.arg.size, base.dtype)
        assert (
            (shape_of(base), device_of(base)) == (shape_of(fresh), device_of(fresh)) == ((base.arg.size,), FAST_DEVICE)
        )
    np.testing.assert_array_equal(y.numpy(), (np.arange(12).reshape(3, 4) ** 2).sum(1, keepdims=True))


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt (raised by a signal handler) without stopping pytest."""


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs POSIX signals")
def test_interrupts_during_cpu_ops_leave_the_device_usable_and_correct() -> None:
    # Ctrl-C lands wherever it lands: in the middle of a two-core launch run in this thread, in the pool's wait, in
    # graph building... After each, the CPU device must still compute right (numpy is the oracle) and never be
    # left failed; the interrupted op itself is simply abandoned
    assert threading.current_thread() is threading.main_thread()
    rng = np.random.default_rng(12)
    # a two-core kernel of ~0.2 ms run in this thread (the usual landing place of an interrupt), then a tiny op
    a_values = rng.standard_normal((1024, 1024)).astype(np.float32)
    b_values = rng.standard_normal((1024, 16)).astype(np.float32)
    a, b = Tensor(a_values, device="CPU").realize(), Tensor(b_values, device="CPU").realize()
    for _ in range(3):  # compiled and imported before the interrupts (one landing in an import repeats it)
        (a @ b).realize()
        (a[:4, :4] + 1).realize()

    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupt()

    previous = signal.signal(signal.SIGUSR1, interrupt)
    hits = 0
    try:
        for trial in range(8):
            timer = threading.Timer(0.0005 + 0.0004 * trial, os.kill, (os.getpid(), signal.SIGUSR1))
            try:
                timer.start()
                deadline = time.monotonic() + 0.3  # an interrupt swallowed by a weakref callback ends here
                while time.monotonic() < deadline:
                    (a @ b).realize()
                    (a[:4, :4] + 1).realize()
            except _Interrupt:
                hits += 1
            finally:
                try:
                    timer.join()
                except _Interrupt:  # it landed after the loop: still one interrupt survived
                    hits += 1
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert hits >= 4
    np.testing.assert_allclose((a @ b).numpy(), a_values @ b_values, rtol=1e-4, atol=1e-4)
    assert (Tensor(np.arange(4, dtype=np.float32), device="CPU") + 1).tolist() == [1.0, 2.0, 3.0, 4.0]
