"""`HCQCompiled.launch_direct_many` takes no timeline value: the calls run in the calling thread after all earlier
work and are done when it returns. What that must keep: the queue's order, a failure seen at the next wait as a
queued one is, an interrupt leaving the device usable, and a buffer freed after the launch released at once."""

from __future__ import annotations

import threading

import pytest

from kiln.runtime import Buffer, HCQArgsState, HCQCompiled, KernelArgLayout
from kiln.uops import dtypes


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt (a BaseException, not an Exception) without stopping pytest."""


def _no_args() -> HCQArgsState:
    return HCQArgsState(KernelArgLayout(()), memoryview(bytearray(8)), [])


def test_direct_calls_run_in_order_here_and_leave_the_timeline_as_it_was(host_device: HCQCompiled) -> None:
    order: list[str] = []
    threads: list[threading.Thread] = []
    value = host_device.timeline_value

    def first() -> None:
        order.append("first")
        threads.append(threading.current_thread())

    calls = [(first, ()), (order.append, ("second",))]
    assert host_device.launch_direct_many(calls)  # type: ignore[arg-type]
    assert order == ["first", "second"] and threads == [threading.current_thread()]
    assert host_device.timeline_value == value and host_device.timeline_signal.value == value - 1
    host_device.synchronize(timeout=5.0)  # nothing to wait for


def test_a_direct_launch_waits_its_turn_behind_queued_work(host_device: HCQCompiled) -> None:
    # a queued launch still running: the direct launch refuses (runs nothing); once it is done, it runs after it
    order: list[str] = []
    release = threading.Event()

    def slow(args: HCQArgsState, global_size: object, local_size: object) -> None:
        release.wait(5.0)
        order.append("queued")

    host_device.execute(slow, _no_args(), (1,))
    assert not host_device.launch_direct(order.append, ("direct",))  # type: ignore[arg-type]
    release.set()
    host_device.synchronize(timeout=5.0)
    assert host_device.launch_direct(order.append, ("direct",))  # type: ignore[arg-type]
    assert order == ["queued", "direct"]


def test_a_failing_direct_call_fails_a_timeline_value_like_a_queued_launch(host_device: HCQCompiled) -> None:
    order: list[str] = []

    def failing() -> None:
        raise ValueError("kernel fault")

    value = host_device.timeline_value
    calls = [(order.append, ("before",)), (failing, ()), (order.append, ("after",))]
    assert host_device.launch_direct_many(calls)  # type: ignore[arg-type]  # it ran (and failed), as queued work
    assert order == ["before"]  # the rest of the list is skipped
    assert host_device.timeline_value == value + 1
    with pytest.raises(RuntimeError) as raised:
        host_device.synchronize(timeout=5.0)
    assert isinstance(raised.value.__cause__, ValueError)
    assert not host_device.launch_direct(order.append, ("later",))  # type: ignore[arg-type]  # the engine failed
    assert order == ["before"]


def test_an_interrupted_direct_launch_leaves_the_device_usable(host_device: HCQCompiled) -> None:
    order: list[str] = []

    def interrupted() -> None:
        raise _Interrupt()

    value = host_device.timeline_value
    with pytest.raises(_Interrupt):
        host_device.launch_direct_many([(order.append, ("one",)), (interrupted, ()), (order.append, ("two",))])  # type: ignore[list-item]
    assert order == ["one"] and host_device.timeline_value == value
    host_device.synchronize(timeout=5.0)  # no failure recorded
    assert host_device.launch_direct(order.append, ("three",))  # type: ignore[arg-type]
    host_device.execute(lambda args, global_size, local_size: order.append("queued"), _no_args(), (1,))
    host_device.synchronize(timeout=5.0)
    assert order == ["one", "three", "queued"]


def test_memory_freed_after_a_direct_launch_is_released_at_once(host_device: HCQCompiled) -> None:
    # the allocator holds a freed block until the timeline passes the last value submitted: a direct launch submits
    # none, so the block is not held back for it
    buffer = Buffer(host_device.name, 64, dtypes.float32).allocate()
    assert host_device.launch_direct(lambda: None, ())
    allocator = host_device.allocator
    buffer.deallocate()
    assert not allocator._deferred
