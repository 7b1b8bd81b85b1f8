"""TimelineSignal: memory layout, monotonic values, waits, timeouts and failures."""

from __future__ import annotations

import ctypes
import threading
import time

import pytest

from kiln.runtime import TimelineSignal


def test_value_and_timestamp_live_in_memory_at_the_signal_address() -> None:
    signal = TimelineSignal(5, name="s")
    assert ctypes.c_uint64.from_address(signal.address).value == 5
    signal.set(2**40 + 3)
    assert ctypes.c_uint64.from_address(signal.address).value == 2**40 + 3
    before = time.perf_counter_ns()
    signal.record_timestamp()
    after = time.perf_counter_ns()
    raw = ctypes.c_uint64.from_address(signal.address + 8).value
    assert before <= raw <= after
    assert signal.timestamp == raw / 1000.0


def test_value_written_to_memory_directly_is_seen_by_a_waiter() -> None:
    # A device writes the value without going through set(); the waiter polls.
    signal = TimelineSignal(0)
    timer = threading.Timer(0.02, lambda: setattr(ctypes.c_uint64.from_address(signal.address), "value", 9))
    timer.start()
    signal.wait(9, timeout=5.0)
    timer.join()
    assert signal.value == 9


def test_value_cannot_go_backwards_but_reset_can() -> None:
    signal = TimelineSignal(10, name="timeline")
    signal.set(10)  # staying put is allowed
    with pytest.raises(ValueError, match="timeline: timeline value cannot go back from 10 to 9"):
        signal.set(9)
    signal.reset(1)
    assert signal.value == 1


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (2**64, ValueError), (1.0, TypeError), (True, TypeError)]
)
def test_bad_values_raise(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="signal value"):
        TimelineSignal().set(value)  # type: ignore[arg-type]


def test_wait_returns_at_once_when_the_value_is_reached() -> None:
    signal = TimelineSignal(7)
    start = time.monotonic()
    signal.wait(3, timeout=0.0)
    signal.wait(7, timeout=0.0)
    assert time.monotonic() - start < 0.5


def test_wait_times_out_then_a_late_set_completes_it() -> None:
    signal = TimelineSignal(1, name="late")
    with pytest.raises(TimeoutError, match=r"late did not reach 2 within 0.05 s \(it is at 1\)"):
        signal.wait(2, timeout=0.05)
    setter = threading.Timer(0.05, signal.set, args=(2,))
    setter.start()
    signal.wait(2, timeout=5.0)
    setter.join()
    assert signal.value == 2


def test_each_waiter_wakes_exactly_when_its_value_is_reached() -> None:
    signal = TimelineSignal(0)
    woken: list[int] = []
    lock = threading.Lock()

    def waiter(target: int) -> None:
        signal.wait(target, timeout=10.0)
        with lock:
            woken.append(target)

    threads = [threading.Thread(target=waiter, args=(target,)) for target in (3, 1, 2)]
    for thread in threads:
        thread.start()
    time.sleep(0.02)
    assert woken == []
    for value in (1, 2, 3):
        signal.set(value)
        deadline = time.monotonic() + 10.0
        while len(woken) < value and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.01)  # give a wrongly woken waiter the chance to show up
        assert woken == list(range(1, value + 1))
    for thread in threads:
        thread.join(5.0)


def test_failure_wakes_waiters_with_the_cause() -> None:
    signal = TimelineSignal(0, name="doomed")
    cause = ValueError("kernel crashed")
    threading.Timer(0.02, signal.fail, args=(cause,)).start()
    with pytest.raises(RuntimeError, match=r"doomed will not reach 1 .*kernel crashed") as raised:
        signal.wait(1, timeout=5.0)
    assert raised.value.__cause__ is cause
    signal.reset(0)
    assert signal.failure is None


def test_abort_hook_stops_a_wait() -> None:
    class Stop(Exception):
        pass

    def abort() -> None:
        raise Stop

    with pytest.raises(Stop):
        TimelineSignal(0).wait(1, timeout=5.0, abort=abort)
