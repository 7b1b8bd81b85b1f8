"""ThreadQueueEngine: in-order execution, cross-queue signal ordering, failures that reach every waiter."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from kiln.runtime import (
    EngineClosed,
    ExecCommand,
    HCQArgsState,
    HCQQueue,
    KernelArgLayout,
    ThreadQueueEngine,
    TimelineSignal,
)

Launch = tuple[int, int, int]


@pytest.fixture
def engines() -> Iterator[list[ThreadQueueEngine]]:
    created = [ThreadQueueEngine(f"engine{index}") for index in range(4)]
    yield created
    for engine in created:
        engine.close(timeout=5.0)


def no_args() -> HCQArgsState:
    return HCQArgsState(KernelArgLayout(()), memoryview(bytearray(8)), [])


def appender(log: list[str], label: str, delay: float = 0.0) -> Callable[[HCQArgsState, Launch, Launch], None]:
    def kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        time.sleep(delay)
        log.append(label)

    kernel.__name__ = label
    return kernel


def test_lists_and_commands_run_in_submission_order(engines: list[ThreadQueueEngine]) -> None:
    log: list[str] = []
    done = TimelineSignal(0, name="done")
    for batch in range(3):
        queue = HCQQueue()
        for index in range(3):
            queue.exec(appender(log, f"{batch}.{index}", delay=0.001 * (3 - index)), no_args(), (1,))
        queue.signal(done, batch + 1).submit(engines[0])
    done.wait(3, timeout=5.0)
    assert log == [f"{batch}.{index}" for batch in range(3) for index in range(3)]


def test_queue_waiting_on_another_queue_runs_after_it(engines: list[ThreadQueueEngine]) -> None:
    log: list[str] = []
    produced, consumed = TimelineSignal(0, name="produced"), TimelineSignal(0, name="consumed")
    # B is submitted first but waits for A's signal; A is slow, so without the wait B would run first.
    HCQQueue().wait(produced, 1).exec(appender(log, "B"), no_args(), (1,)).signal(consumed, 1).submit(engines[1])
    HCQQueue().exec(appender(log, "A", delay=0.05), no_args(), (1,)).signal(produced, 1).submit(engines[0])
    consumed.wait(1, timeout=5.0)
    assert log == ["A", "B"]


def test_chain_of_queues_submitted_in_reverse_runs_in_chain_order(engines: list[ThreadQueueEngine]) -> None:
    log: list[str] = []
    signals = [TimelineSignal(0, name=f"link{index}") for index in range(len(engines) + 1)]
    signals[0].set(1)
    for index in reversed(range(len(engines))):  # the last link is submitted first
        queue = HCQQueue().wait(signals[index], 1).exec(appender(log, f"link{index}", delay=0.005), no_args(), (1,))
        queue.signal(signals[index + 1], 1).submit(engines[index])
    signals[-1].wait(1, timeout=5.0)
    assert log == [f"link{index}" for index in range(len(engines))]


def test_ping_pong_between_two_queues_interleaves_exactly(engines: list[ThreadQueueEngine]) -> None:
    log: list[str] = []
    ping, pong = TimelineSignal(0, name="ping"), TimelineSignal(0, name="pong")
    rounds = 5
    queue_a, queue_b = HCQQueue(), HCQQueue()
    for step in range(1, rounds + 1):
        queue_a.wait(pong, step - 1).exec(appender(log, f"a{step}"), no_args(), (1,)).signal(ping, step)
        queue_b.wait(ping, step).exec(appender(log, f"b{step}"), no_args(), (1,)).signal(pong, step)
    queue_b.submit(engines[1])
    queue_a.submit(engines[0])
    pong.wait(rounds, timeout=5.0)
    assert log == [name for step in range(1, rounds + 1) for name in (f"a{step}", f"b{step}")]


def test_exec_passes_arguments_and_launch_sizes(engines: list[ThreadQueueEngine]) -> None:
    # A software "add" kernel that finds its buffers through the packed argument block.
    n = 64
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    out = np.zeros(n, np.float32)
    seen: list[tuple[Launch, Launch]] = []

    def add(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        out_address, a_address, b_address = args.buffer_addresses
        (count,) = args.variable_values
        views = [
            np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_float)), (count,))
            for address in (out_address, a_address, b_address)
        ]
        views[0][:] = views[1] + views[2]
        seen.append((global_size, local_size))

    layout = KernelArgLayout.buffers_then_variables(3, 1)
    args = HCQArgsState(
        layout, memoryview(bytearray(layout.size)), [out.ctypes.data, a.ctypes.data, b.ctypes.data], [n]
    )
    done = TimelineSignal()
    HCQQueue().exec(add, args, (n // 16,), (16,)).signal(done, 1).submit(engines[0])
    done.wait(1, timeout=5.0)
    np.testing.assert_array_equal(out, a + b)
    assert seen == [((4, 1, 1), (16, 1, 1))]


def test_copy_command_moves_bytes(engines: list[ThreadQueueEngine]) -> None:
    source = np.random.default_rng(0).integers(0, 255, 1000, dtype=np.uint8)
    dest = np.zeros(1000, np.uint8)
    done = TimelineSignal()
    HCQQueue().copy(dest.ctypes.data + 10, source.ctypes.data, 990).signal(done, 1).submit(engines[0])
    done.wait(1, timeout=5.0)
    np.testing.assert_array_equal(dest[10:], source[:990])
    assert not dest[:10].any()


def test_timestamps_follow_execution_order(engines: list[ThreadQueueEngine]) -> None:
    first, second, done = TimelineSignal(), TimelineSignal(), TimelineSignal()
    log: list[str] = []
    queue = HCQQueue().timestamp(first).exec(appender(log, "work", delay=0.01), no_args(), (1,)).timestamp(second)
    queue.signal(done, 1).submit(engines[0])
    done.wait(1, timeout=5.0)
    assert second.timestamp - first.timestamp >= 10_000 * 0.9  # microseconds


def test_failure_stops_the_engine_and_fails_every_pending_signal(engines: list[ThreadQueueEngine]) -> None:
    log: list[str] = []

    def crash(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        raise ZeroDivisionError("bad kernel")

    mine, later, downstream = (
        TimelineSignal(0, name="mine"),
        TimelineSignal(0, name="later"),
        TimelineSignal(0, name="downstream"),
    )
    HCQQueue().exec(crash, no_args(), (1,)).exec(appender(log, "skipped"), no_args(), (1,)).signal(mine, 1).submit(
        engines[0]
    )
    HCQQueue().exec(appender(log, "after"), no_args(), (1,)).signal(later, 1).submit(engines[0])
    # Another engine waiting on the failed one must not hang either.
    HCQQueue().wait(mine, 1).exec(appender(log, "dependent"), no_args(), (1,)).signal(downstream, 1).submit(engines[1])
    for signal in (mine, later, downstream):
        with pytest.raises(RuntimeError, match="will not reach 1") as raised:
            signal.wait(1, timeout=5.0)
        assert "bad kernel" in str(raised.value)
    assert log == []
    with pytest.raises(RuntimeError, match="engine 'engine0' failed: ZeroDivisionError: bad kernel"):
        HCQQueue().signal(later, 2).submit(engines[0])


def test_exec_of_a_non_callable_fails_the_engine(engines: list[ThreadQueueEngine]) -> None:
    done = TimelineSignal()
    HCQQueue().exec(object(), no_args(), (1,), name="thing").signal(done, 1).submit(engines[0])
    with pytest.raises(RuntimeError, match="runs Python callables, got object for thing"):
        done.wait(1, timeout=5.0)


def test_close_releases_a_worker_blocked_on_a_wait() -> None:
    engine = ThreadQueueEngine("blocked")
    never = TimelineSignal(0, name="never")
    HCQQueue().wait(never, 1).submit(engine)
    time.sleep(0.02)
    engine.close(timeout=5.0)
    assert engine._thread is not None and not engine._thread.is_alive()
    assert isinstance(engine.error, EngineClosed)
    with pytest.raises(RuntimeError, match="failed: EngineClosed"):
        engine.submit_commands([])


def test_many_host_threads_submitting_concurrently_lose_nothing(engines: list[ThreadQueueEngine]) -> None:
    counter = [0]
    done = TimelineSignal()

    def bump(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        counter[0] += 1  # only the worker thread runs kernels, so no lock is needed

    def submit_many() -> None:
        for _ in range(50):
            HCQQueue().exec(bump, no_args(), (1,)).submit(engines[0])

    threads = [threading.Thread(target=submit_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    HCQQueue().signal(done, 1).submit(engines[0])
    done.wait(1, timeout=5.0)
    assert counter[0] == 200


# -- inline execution ---------------------------------------------------------------------------------------------


def thread_recorder(log: list[tuple[str, int]], label: str) -> Callable[[HCQArgsState, Launch, Launch], None]:
    """A kernel that logs its label and the thread it ran on."""

    def kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        log.append((label, threading.get_ident()))

    return kernel


def test_run_inline_runs_an_idle_engines_list_in_the_calling_thread(engines: list[ThreadQueueEngine]) -> None:
    log: list[tuple[str, int]] = []
    done = TimelineSignal(0, name="done")
    ready = TimelineSignal(3, name="ready")
    commands = HCQQueue().wait(ready, 3).exec(thread_recorder(log, "tiny"), no_args(), (1,)).signal(done, 1).commands
    assert engines[0].run_inline(commands)
    # finished when the call returns, on this thread, with its signal set
    assert log == [("tiny", threading.get_ident())] and done.value == 1
    assert engines[0].idle


def test_run_inline_refuses_while_earlier_work_is_queued_and_order_is_kept(engines: list[ThreadQueueEngine]) -> None:
    engine = engines[0]
    log: list[tuple[str, int]] = []
    gate = threading.Event()

    def blocked(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        assert gate.wait(5.0)
        log.append(("queued", threading.get_ident()))

    done = TimelineSignal(0, name="done")
    HCQQueue().exec(blocked, no_args(), (1,)).signal(done, 1).submit(engine)
    assert not engine.idle
    later = HCQQueue().exec(thread_recorder(log, "later"), no_args(), (1,)).signal(done, 2)
    assert not engine.run_inline(later.commands)  # refused: it would overtake the queued list
    assert log == [] and done.value == 0  # ... and nothing of it ran
    later.submit(engine)
    gate.set()
    done.wait(2, timeout=5.0)
    assert [label for label, _ in log] == ["queued", "later"]
    assert all(thread != threading.get_ident() for _, thread in log)  # both on the worker


def test_run_inline_refuses_a_list_with_an_unreached_wait(engines: list[ThreadQueueEngine]) -> None:
    log: list[tuple[str, int]] = []
    other = TimelineSignal(0, name="other")
    commands = HCQQueue().wait(other, 1).exec(thread_recorder(log, "waiting"), no_args(), (1,)).commands
    assert not engines[0].run_inline(commands)  # running it here would block the caller
    assert log == []


def test_a_list_submitted_during_an_inline_run_runs_after_it(engines: list[ThreadQueueEngine]) -> None:
    engine = engines[0]
    order: list[str] = []
    submitted = threading.Event()
    done = TimelineSignal(0, name="done")

    def submitter() -> None:
        HCQQueue().exec(appender(order, "submitted"), no_args(), (1,)).signal(done, 2).submit(engine)
        submitted.set()

    def inline_kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        thread = threading.Thread(target=submitter)
        thread.start()
        assert submitted.wait(5.0)  # the other list is queued while this one still runs
        time.sleep(0.02)  # give the worker every chance to overtake (it must not)
        order.append("inline")
        thread.join()

    assert engine.run_inline(HCQQueue().exec(inline_kernel, no_args(), (1,)).signal(done, 1).commands)
    done.wait(2, timeout=5.0)
    assert order == ["inline", "submitted"]


def test_an_inline_failure_is_kept_like_a_queued_one(engines: list[ThreadQueueEngine]) -> None:
    engine = engines[0]

    def crash(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        raise ZeroDivisionError("inline crash")

    done = TimelineSignal(0, name="done")
    assert engine.run_inline(HCQQueue().exec(crash, no_args(), (1,)).signal(done, 1).commands)  # no raise here
    with pytest.raises(RuntimeError, match="inline crash"):
        done.wait(1, timeout=5.0)
    with pytest.raises(RuntimeError, match="ZeroDivisionError: inline crash"):
        HCQQueue().signal(done, 2).submit(engine)
    assert not engine.run_inline(HCQQueue().signal(done, 2).commands)  # a failed engine runs nothing more


# -- one launch and its signal, inline (the CPU device's launch fast path) --------------------------------------


def _exec_command(kernel: Callable[[HCQArgsState, Launch, Launch], None]) -> ExecCommand:
    command = HCQQueue().exec(kernel, no_args(), (1,)).commands[0]
    assert isinstance(command, ExecCommand)
    return command


def test_run_exec_inline_runs_the_launch_here_and_sets_the_signal(engines: list[ThreadQueueEngine]) -> None:
    log: list[tuple[str, int]] = []
    done = TimelineSignal(0, name="done")
    assert engines[0].run_exec_inline(_exec_command(thread_recorder(log, "tiny")), done, 1)
    assert log == [("tiny", threading.get_ident())] and done.value == 1 and engines[0].idle


def test_run_exec_inline_refuses_behind_queued_work_and_runs_nothing(engines: list[ThreadQueueEngine]) -> None:
    engine = engines[0]
    log: list[tuple[str, int]] = []
    gate = threading.Event()

    def blocked(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        assert gate.wait(5.0)
        log.append(("queued", threading.get_ident()))

    done = TimelineSignal(0, name="done")
    HCQQueue().exec(blocked, no_args(), (1,)).signal(done, 1).submit(engine)
    assert not engine.run_exec_inline(_exec_command(thread_recorder(log, "later")), done, 2)
    gate.set()
    done.wait(1, timeout=5.0)
    assert [label for label, _ in log] == ["queued"] and done.value == 1


def test_run_exec_inline_keeps_a_failure_like_a_queued_one(engines: list[ThreadQueueEngine]) -> None:
    engine = engines[0]

    def crash(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        raise ZeroDivisionError("inline crash")

    done = TimelineSignal(0, name="done")
    assert engine.run_exec_inline(_exec_command(crash), done, 1)  # no raise here
    with pytest.raises(RuntimeError, match="inline crash"):
        done.wait(1, timeout=5.0)
    with pytest.raises(RuntimeError, match="ZeroDivisionError: inline crash"):
        engine.check()
    assert not engine.run_exec_inline(_exec_command(crash), done, 2)  # a failed engine runs nothing more


def test_a_waiter_blocked_before_an_inline_launch_wakes_when_it_sets_the_signal(
    engines: list[ThreadQueueEngine],
) -> None:
    # set() notifies only when someone waits: a thread already waiting must still be woken at once
    done = TimelineSignal(0, name="done")
    woke = threading.Event()

    def waiter() -> None:
        done.wait(1, timeout=5.0)
        woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.05)  # the waiter is blocked in wait()
    assert engines[0].run_exec_inline(_exec_command(appender([], "tiny")), done, 1)
    assert woke.wait(1.0)
    thread.join()
