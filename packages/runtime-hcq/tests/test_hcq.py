"""HCQCompiled on a software-serviced device: the timeline, launches, copies, profiling and cross-device waits."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kiln.runtime import Buffer, HCQArgsState, HCQCompiled, HCQQueue, KernelArgLayout, profiler
from kiln.uops import Context, UOp, dtypes

Launch = tuple[int, int, int]


def no_args() -> HCQArgsState:
    return HCQArgsState(KernelArgLayout(()), memoryview(bytearray(8)), [])


def observer(
    device: HCQCompiled, seen: list[int], delay: float = 0.0
) -> Callable[[HCQArgsState, Launch, Launch], None]:
    """A kernel that records the device's timeline value at the moment it runs."""

    def kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        time.sleep(delay)
        seen.append(device.timeline_signal.value)

    return kernel


def test_each_submission_advances_the_timeline_by_one(host_device: HCQCompiled) -> None:
    seen: list[int] = []
    for _ in range(20):
        host_device.execute(observer(host_device, seen), no_args(), (1,))
    host_device.synchronize(timeout=5.0)
    # Kernel k runs after submission k-1 signalled k-1 and before its own signal k.
    assert seen == list(range(20))
    assert host_device.timeline_signal.value == host_device.timeline_value - 1 == 20


def test_synchronize_waits_for_queued_work(host_device: HCQCompiled) -> None:
    seen: list[int] = []
    host_device.execute(observer(host_device, seen, delay=0.05), no_args(), (1,))
    assert seen == []  # execute() does not block
    host_device.synchronize(timeout=5.0)
    assert seen == [0]


def test_synchronize_times_out_with_a_clear_error(host_device: HCQCompiled) -> None:
    host_device.execute(observer(host_device, [], delay=0.3), no_args(), (1,))
    with pytest.raises(TimeoutError, match=r"TESTHOST:fresh timeline did not reach 1 within 0.01 s"):
        host_device.synchronize(timeout=0.01)
    host_device.synchronize(timeout=5.0)


def test_execute_with_wait_returns_the_kernel_time(host_device: HCQCompiled) -> None:
    elapsed = host_device.execute(observer(host_device, [], delay=0.02), no_args(), (1,), wait=True)
    assert elapsed is not None and 0.02 <= elapsed < 2.0


def test_kernel_failure_surfaces_at_synchronize(host_device: HCQCompiled) -> None:
    def crash(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        raise IndexError("out of bounds store")

    host_device.execute(crash, no_args(), (1,))
    with pytest.raises(RuntimeError, match="out of bounds store"):
        host_device.synchronize(timeout=5.0)


def test_symbolic_launch_sizes_resolve_per_launch(host_device: HCQCompiled) -> None:
    sizes: list[Launch] = []

    def record(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        sizes.append(global_size)

    n = UOp.variable("n", 1, 64)
    for value in (2, 7):
        host_device.execute(record, no_args(), (n, 3), var_vals={"n": value})
    host_device.synchronize(timeout=5.0)
    assert sizes == [(2, 3, 1), (7, 3, 1)]


def test_device_copy_is_ordered_after_the_kernel_that_writes_the_source(host_device: HCQCompiled) -> None:
    source = Buffer("TESTHOST", 256, dtypes.uint8).copyin(np.zeros(256, np.uint8))
    dest = Buffer("TESTHOST", 256, dtypes.uint8).copyin(np.zeros(256, np.uint8))
    source_view = source.numpy()

    def fill(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        time.sleep(0.02)  # the copy would read zeros if it did not wait for this kernel
        source_view[:] = np.arange(256, dtype=np.uint8)

    host_device.execute(fill, no_args(), (1,))
    host_device.copy(dest.opaque.address, source.opaque.address, 256)
    host_device.synchronize(timeout=5.0)
    np.testing.assert_array_equal(dest.numpy(), np.arange(256, dtype=np.uint8))


def test_cross_device_wait_orders_work_on_two_devices(host_device: HCQCompiled) -> None:
    other = type(host_device)("TESTHOST:other")
    try:
        log: list[str] = []

        def step(label: str, delay: float = 0.0) -> Callable[[HCQArgsState, Launch, Launch], None]:
            def kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
                time.sleep(delay)
                log.append(label)

            return kernel

        host_device.execute(step("producer", delay=0.05), no_args(), (1,))
        produced = host_device.timeline_value - 1
        # The consumer device waits on the producer device's timeline before its own work.
        HCQQueue().wait(host_device.timeline_signal, produced).submit(other)
        other.execute(step("consumer"), no_args(), (1,))
        other.synchronize(timeout=5.0)
        assert log == ["producer", "consumer"]
    finally:
        other.engine.close(timeout=5.0)  # type: ignore[attr-defined]


def test_profile_events_are_recorded_and_exported(host_device: HCQCompiled, tmp_path: Path) -> None:
    profiler.clear()
    buffer = Buffer("TESTHOST", 64, dtypes.uint8).allocate()
    with Context(PROFILE=True):
        host_device.execute(observer(host_device, [], delay=0.01), no_args(), (1,), name="slow_kernel")
        host_device.copy(buffer.opaque.address, buffer.opaque.address + 32, 32, name="shift")
        host_device.synchronize(timeout=5.0)
    host_device.execute(observer(host_device, []), no_args(), (1,), name="unprofiled")
    host_device.synchronize(timeout=5.0)
    events = [event for event in profiler.events if event.device == "TESTHOST:fresh"]
    assert [(event.name, event.category) for event in events] == [
        ("slow_kernel", "program"),
        ("shift 32 bytes", "copy"),
    ]
    kernel, copy = events
    assert kernel.duration_us >= 10_000 * 0.9
    assert kernel.end_us <= copy.start_us <= copy.end_us
    trace = json.loads(profiler.save(tmp_path / "profile.json").read_text())
    # devices are numbered processes named by "process_name" metadata, queues numbered threads named likewise
    meta = [event for event in trace["traceEvents"] if event["ph"] == "M"]
    (pid,) = [event["pid"] for event in meta if event["args"]["name"] == "TESTHOST:fresh"]
    (tid,) = [event["tid"] for event in meta if event["name"] == "thread_name" and event["pid"] == pid]
    exported = [event for event in trace["traceEvents"] if event["ph"] == "X" and event["pid"] == pid]
    assert exported[0] == {
        "name": "slow_kernel",
        "cat": "program",
        "ph": "X",
        "ts": kernel.start_us,
        "dur": kernel.duration_us,
        "pid": pid,
        "tid": tid,
    }
    profiler.clear()
    assert profiler.events == []


# -- inline launches ----------------------------------------------------------------------------------------------


def thread_observer(device: HCQCompiled, seen: list[tuple[int, int]], delay: float = 0.0) -> Callable[..., None]:
    """A kernel that records (timeline value, thread) at the moment it runs."""

    def kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        time.sleep(delay)
        seen.append((device.timeline_signal.value, threading.get_ident()))

    return kernel


def test_inline_launch_on_an_idle_device_runs_in_the_calling_thread(host_device: HCQCompiled) -> None:
    seen: list[tuple[int, int]] = []
    for _ in range(5):
        assert host_device.execute(thread_observer(host_device, seen), no_args(), (1,), inline=True) is None
        # done on return: the timeline already moved past this launch
        assert host_device.timeline_signal.value == host_device.timeline_value - 1
    assert seen == [(value, threading.get_ident()) for value in range(5)]


def test_inline_launch_behind_queued_work_is_queued_in_order(host_device: HCQCompiled) -> None:
    seen: list[tuple[int, int]] = []
    host_device.execute(thread_observer(host_device, seen, delay=0.05), no_args(), (1,))
    for _ in range(3):  # the device is busy: these must not overtake the slow kernel
        host_device.execute(thread_observer(host_device, seen), no_args(), (1,), inline=True)
    host_device.synchronize(timeout=5.0)
    assert [value for value, _ in seen] == [0, 1, 2, 3]
    assert threading.get_ident() not in {thread for _, thread in seen[:2]}  # the first two ran on the worker


def test_inline_launch_with_wait_and_profile_still_times_the_kernel(host_device: HCQCompiled) -> None:
    elapsed = host_device.execute(observer(host_device, [], delay=0.02), no_args(), (1,), wait=True, inline=True)
    assert elapsed is not None and 0.02 <= elapsed < 2.0


def test_inline_kernel_failure_surfaces_at_synchronize(host_device: HCQCompiled) -> None:
    def crash(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        raise IndexError("inline out of bounds")

    host_device.execute(crash, no_args(), (1,), inline=True)  # no exception from the launch itself
    with pytest.raises(RuntimeError, match="inline out of bounds"):
        host_device.synchronize(timeout=5.0)


def test_launch_inline_runs_here_when_idle_and_refuses_behind_queued_work(host_device: HCQCompiled) -> None:
    seen: list[tuple[int, int]] = []
    value = host_device.timeline_value
    assert host_device.launch_inline(thread_observer(host_device, seen), no_args(), (1, 1, 1), (1, 1, 1), "here")
    assert host_device.timeline_value == value + 1 and host_device.timeline_signal.value == value
    host_device.execute(thread_observer(host_device, seen, delay=0.05), no_args(), (1,))
    # busy: refused, nothing ran and no timeline value was taken (the caller queues it instead)
    assert not host_device.launch_inline(thread_observer(host_device, seen), no_args(), (1, 1, 1), (1, 1, 1), "x")
    assert host_device.timeline_value == value + 2
    host_device.synchronize(timeout=5.0)
    assert seen == [(value - 1, threading.get_ident()), (value, seen[1][1])] and seen[1][1] != threading.get_ident()


def test_launch_many_is_one_submission_in_order(host_device: HCQCompiled) -> None:
    from kiln.runtime import ExecCommand

    order: list[int] = []

    def recorder(number: int) -> Callable[[HCQArgsState, Launch, Launch], None]:
        def kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
            order.append(number)
            time.sleep(0.002)

        return kernel

    host_device.execute(observer(host_device, [], delay=0.02), no_args(), (1,))
    commands = [ExecCommand(recorder(n), no_args(), (1, 1, 1), (1, 1, 1), f"k{n}") for n in range(5)]
    before = host_device.timeline_value
    host_device.launch_many(commands)
    assert host_device.timeline_value == before + 1  # the whole list is one timeline value
    host_device.execute(recorder(5), no_args(), (1,))
    host_device.synchronize(timeout=5.0)
    assert order == [0, 1, 2, 3, 4, 5]  # after earlier work, before later work, in list order
    host_device.launch_many([])
    assert host_device.timeline_value == before + 2  # an empty list submits nothing


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt (a BaseException, not an Exception) without stopping pytest."""


@pytest.mark.parametrize("path", ["launch_inline", "execute"])
def test_an_interrupted_inline_launch_leaves_the_device_usable(host_device: HCQCompiled, path: str) -> None:
    # Ctrl-C in the launching thread is not a device fault: the interrupt reaches the caller, the launch's timeline
    # value is used up (set), and later launches, inline or queued, run and synchronize as before
    def interrupted(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        raise _Interrupt()

    value = host_device.timeline_value
    with pytest.raises(_Interrupt):
        if path == "launch_inline":
            host_device.launch_inline(interrupted, no_args(), (1, 1, 1), (1, 1, 1), "interrupted")
        else:
            host_device.execute(interrupted, no_args(), (1,), inline=True)
    assert host_device.timeline_value == value + 1 and host_device.timeline_signal.value == value
    host_device.synchronize(timeout=5.0)  # no failure recorded
    seen: list[tuple[int, int]] = []
    host_device.execute(thread_observer(host_device, seen), no_args(), (1,), inline=True)
    host_device.execute(thread_observer(host_device, seen, delay=0.02), no_args(), (1,))
    host_device.synchronize(timeout=5.0)
    assert [number for number, _ in seen] == [value, value + 1]


def test_an_interrupted_inline_list_skips_its_rest_and_leaves_the_device_usable(host_device: HCQCompiled) -> None:
    from kiln.runtime import ExecCommand

    order: list[int] = []

    def step(number: int) -> Callable[[HCQArgsState, Launch, Launch], None]:
        def kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
            if number == 2:
                raise _Interrupt()
            order.append(number)

        return kernel

    commands = [ExecCommand(step(n), no_args(), (1, 1, 1), (1, 1, 1), f"k{n}") for n in range(5)]
    value = host_device.timeline_value
    with pytest.raises(_Interrupt):
        host_device.launch_many(commands, inline=True)
    assert order == [0, 1]  # run in this thread up to the interrupt; the rest abandoned
    assert host_device.timeline_value == value + 1 and host_device.timeline_signal.value == value
    host_device.launch_many([ExecCommand(step(7), no_args(), (1, 1, 1), (1, 1, 1), "k7")], inline=True)
    host_device.execute(step(8), no_args(), (1,))
    host_device.synchronize(timeout=5.0)
    assert order == [0, 1, 7, 8]


def test_an_interrupt_before_the_inline_run_starts_does_not_hold_up_later_work(
    host_device: HCQCompiled, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the interrupt lands in the engine's call before it ran anything (so it set no signal): the device still
    # counts the value as used up and sets it, or every later wait on the timeline would hang
    def interrupted_early(*arguments: object) -> bool:
        raise _Interrupt()

    value = host_device.timeline_value
    monkeypatch.setattr(host_device, "_run_call_inline", interrupted_early)
    with pytest.raises(_Interrupt):
        host_device.launch_inline(observer(host_device, []), no_args(), (1, 1, 1), (1, 1, 1), "early")
    monkeypatch.undo()
    assert host_device.timeline_value == value + 1 and host_device.timeline_signal.value == value
    seen: list[tuple[int, int]] = []
    host_device.execute(thread_observer(host_device, seen, delay=0.01), no_args(), (1,))
    host_device.synchronize(timeout=5.0)  # TimeoutError here if the value were never set
    assert [number for number, _ in seen] == [value]
