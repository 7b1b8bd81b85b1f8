"""`TimelineSignal`: a monotonically increasing 64-bit counter in memory that queues signal and wait on."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable

from kiln.runtime.fork_hooks import renew_module_after_fork

__all__ = ["TimelineSignal"]

_MAX_VALUE = 2**64 - 1

# Every change of a software-set signal wakes all waiters, which then re-check their own signal: few threads wait
# at once, and one condition lets a waiter also notice failures of the engine that should have set its signal.
# `_waiting` counts the threads inside a wait (under the condition's lock), so a change nobody waits for (most of
# them: every launch sets its device's timeline) skips the notification.
_changed_lock = threading.Lock()
_changed = threading.Condition(_changed_lock)
_waiting = [0]


def _renew_after_fork() -> None:
    # In a child of os.fork() only the forking thread lives: a thread of the parent may have held the lock (setting
    # or waiting on a signal) and the waiters it counted are gone.
    global _changed_lock, _changed
    _changed_lock = threading.Lock()
    _changed = threading.Condition(_changed_lock)
    _waiting[0] = 0


renew_module_after_fork(_renew_after_fork)


class TimelineSignal:
    """A 64-bit value and a 64-bit timestamp in 16 bytes of host memory (value at byte 0, timestamp at byte 8).

    Queues set the value with a signal command and block on it with a wait command (`value >= target`); the host
    waits with `wait()`. The value only grows: that is what lets "wait for value N" mean "everything up to N is
    done". A timestamp command stores the time the queue reached it, in device ticks (`timestamp_divider` ticks per
    microsecond; nanoseconds for software queues).

    Args:
        value: the initial value.
        name: used in error messages.
    """

    timestamp_divider = 1000.0
    poll_interval = 0.01  # seconds between re-checks when a device writes the memory without telling the host

    def __init__(self, value: int = 0, name: str = "signal") -> None:
        _check_value(value)
        self.name = name
        self._memory = (ctypes.c_uint64 * 2)(value, 0)
        self._failure: BaseException | None = None

    def __repr__(self) -> str:
        return f"<TimelineSignal {self.name} value={self.value}>"

    @property
    def address(self) -> int:
        """Host address of the value (the timestamp follows 8 bytes later); what a device writes to."""
        return ctypes.addressof(self._memory)

    @property
    def value(self) -> int:
        """The current value."""
        return int(self._memory[0])

    @property
    def timestamp(self) -> float:
        """The last recorded timestamp, in microseconds."""
        return self._memory[1] / self.timestamp_divider

    @property
    def failure(self) -> BaseException | None:
        """The error that prevents this signal from advancing further, if its producer failed."""
        return self._failure

    def set(self, value: int) -> None:
        """Moves the value to `value` (what a signal command does); the value must not go backwards."""
        if type(value) is not int or not 0 <= value <= _MAX_VALUE:  # exact-type test first: set on every launch
            _check_value(value)
        memory = self._memory
        with _changed_lock:
            current = memory[0]
            if value < current:
                raise ValueError(f"{self.name}: timeline value cannot go back from {current} to {value}")
            memory[0] = value
            if _waiting[0]:
                _changed.notify_all()

    def reset(self, value: int = 0) -> None:
        """Sets the value unconditionally (host only, when nothing can be waiting on the signal) and clears failures."""
        _check_value(value)
        with _changed:
            self._memory[0] = value
            self._failure = None
            _changed.notify_all()

    def record_timestamp(self) -> None:
        """Stores the current time (what a timestamp command does on a software queue)."""
        self._memory[1] = time.perf_counter_ns()

    def fail(self, error: BaseException) -> None:
        """Marks the signal as never advancing again because its producer failed; waiters raise at once."""
        with _changed:
            self._failure = error
            _changed.notify_all()

    def wait(self, value: int, timeout: float | None = None, abort: Callable[[], None] | None = None) -> None:
        """Blocks until the value is at least `value`.

        Args:
            value: the value to reach.
            timeout: seconds to wait at most; None waits forever.
            abort: called while waiting; it raises to stop the wait (e.g. when the waiting engine shuts down).

        Raises:
            TimeoutError: `timeout` passed first (the message names the signal and both values).
            RuntimeError: the producer of the signal failed (the failure is the cause).
        """
        _check_value(value)
        if self.value >= value:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with _changed:
            _waiting[0] += 1
            try:
                self._wait_locked(value, deadline, timeout, abort)
            finally:
                _waiting[0] -= 1

    def _wait_locked(
        self, value: int, deadline: float | None, timeout: float | None, abort: Callable[[], None] | None
    ) -> None:
        # the body of `wait`, holding the condition's lock
        while self.value < value:
            if self._failure is not None:
                raise RuntimeError(
                    f"{self.name} will not reach {value} (it is at {self.value}): its producer failed: {self._failure}"
                ) from self._failure
            if abort is not None:
                abort()
            remaining = self.poll_interval if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.name} did not reach {value} within {timeout} s (it is at {self.value})")
            _changed.wait(min(remaining, self.poll_interval))


def _check_value(value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a signal value must be an int, got {type(value).__name__} {value!r}")
    if not 0 <= value <= _MAX_VALUE:
        raise ValueError(f"a signal value must be in [0, 2**64), got {value}")
