"""os.fork() while work is in flight: the child either works (fresh locks, queued work resumed, a launch of a thread
that did not survive the fork abandoned) or fails at once naming the fork; it never hangs.

Each child runs in `_in_child`: it reports its error through a pipe and leaves with os._exit; the parent waits with a
deadline and kills a child that hangs (the bug these tests guard against: before the fork hooks covered in-flight
work, a child waited forever on a lock or a signal of the parent's threads).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kiln.runtime import Device, HCQArgsState, HCQCompiled, KernelArgLayout, TimelineSignal
from kiln.runtime import signal as signal_module

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

Launch = tuple[int, int, int]
HANG = "the child hung (killed after the deadline)"


def no_args() -> HCQArgsState:
    return HCQArgsState(KernelArgLayout(()), memoryview(bytearray(8)), [])


def _in_child(work: Callable[[], None], deadline: float = 20.0) -> str:
    """Runs `work` in a forked child; "" when it returned, else its error (or HANG when it did not finish)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read_end)
            work()
        except BaseException:
            code = 1
            os.write(write_end, traceback.format_exc().encode()[-4000:])
        finally:
            os._exit(code)
    os.close(write_end)
    end = time.monotonic() + deadline
    try:
        while time.monotonic() < end:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                message = os.read(read_end, 8192).decode()
                return "" if os.waitstatus_to_exitcode(status) == 0 else message or f"exit status {status}"
            time.sleep(0.005)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return HANG
    finally:
        os.close(read_end)


def _launch_and_check(device: HCQCompiled, inline: bool) -> None:
    """A launch in the child runs and its result is seen after synchronize."""
    ran: list[int] = []

    def kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        ran.append(global_size[0])

    device.execute(kernel, no_args(), (7,), inline=inline)
    device.synchronize(timeout=10.0)
    if ran != [7]:
        raise AssertionError(f"the child's launch did not run once: {ran}")


@contextlib.contextmanager
def _held_by_another_thread(*locks: Any) -> Iterator[None]:
    """While the block runs, another thread holds every lock of `locks` (what a fork at that moment inherits)."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with contextlib.ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            holding.set()
            release.wait(30.0)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10.0)
        yield
    finally:
        release.set()
        thread.join(10.0)


class _Blocker:
    """A kernel that announces it started and then waits for the test to let it finish."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.gate = threading.Event()

    def __call__(self, args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        self.started.set()
        self.gate.wait(30.0)


def test_a_child_forked_while_another_thread_runs_an_inline_launch_launches_normally(host_device: HCQCompiled) -> None:
    # the other thread held the device's submit lock at the fork (runtime/hcq.py launch_inline): the child hung on
    # its first launch. Now that launch is abandoned in the child and the device works.
    blocker = _Blocker()
    thread = threading.Thread(target=lambda: host_device.execute(blocker, no_args(), (1,), inline=True))
    thread.start()
    try:
        assert blocker.started.wait(10.0)

        def child() -> None:
            _launch_and_check(host_device, inline=True)
            _launch_and_check(host_device, inline=False)

        assert _in_child(child) == ""
    finally:
        blocker.gate.set()
        thread.join(10.0)
    _launch_and_check(host_device, inline=False)  # the parent is unaffected


def test_a_child_forked_with_a_launch_running_on_the_queue_fails_naming_the_fork(host_device: HCQCompiled) -> None:
    # the parent's queue thread was running a launch and another was queued behind it: the child waited forever in
    # synchronize (runtime/signal.py, the wait loop). That work cannot finish in the child: waits and launches raise.
    blocker = _Blocker()
    host_device.execute(blocker, no_args(), (1,))
    host_device.execute(lambda args, global_size, local_size: None, no_args(), (1,))
    try:
        assert blocker.started.wait(10.0)

        def child() -> None:
            with pytest.raises(RuntimeError, match=r"forked while .*TESTHOST:fresh|TESTHOST:fresh.*forked"):
                host_device.synchronize()  # no timeout: it must raise, not wait
            with pytest.raises(RuntimeError, match="fork"):
                _launch_and_check(host_device, inline=True)

        assert _in_child(child) == ""
    finally:
        blocker.gate.set()
    host_device.synchronize(timeout=10.0)
    _launch_and_check(host_device, inline=True)  # the parent is unaffected


def test_a_child_forked_while_a_thread_holds_the_signal_lock_can_signal_and_wait(host_device: HCQCompiled) -> None:
    # every signal change takes one module-level lock; a thread of the parent holding it at the fork left it held
    with _held_by_another_thread(signal_module._changed_lock):

        def child() -> None:
            signal = TimelineSignal(0, name="child")
            threading.Timer(0.01, signal.set, (3,)).start()
            signal.wait(3, timeout=10.0)
            _launch_and_check(host_device, inline=False)

        assert _in_child(child) == ""


def test_a_child_forked_while_threads_hold_the_allocator_and_registry_locks_allocates_and_opens_devices(
    host_device: HCQCompiled,
) -> None:
    allocator = host_device.allocator
    with _held_by_another_thread(allocator._lock, allocator._deferred_lock, Device._lock, host_device._runners_lock):  # type: ignore[attr-defined]

        def child() -> None:
            block = allocator.alloc(4096)
            allocator.free(block, 4096)
            if Device["TESTHOST:forkchild"].name != "TESTHOST:forkchild":
                raise AssertionError("the registry opened the wrong device")

        assert _in_child(child) == ""


def test_fork_while_another_thread_launches_stress(host_device: HCQCompiled) -> None:
    # the bounded CI form: 50 forks at arbitrary points of another thread's launches (inline and queued); every
    # child must finish its own launches or fail naming the fork, never hang
    stop = threading.Event()
    launches = [0]

    def launch_forever() -> None:
        def kernel(args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
            launches[0] += 1

        while not stop.is_set():
            host_device.execute(kernel, no_args(), (1,), inline=launches[0] % 3 != 0)

    thread = threading.Thread(target=launch_forever)
    thread.start()
    outcomes: dict[str, int] = {}
    try:
        for _ in range(50):

            def child() -> None:
                try:
                    _launch_and_check(host_device, inline=True)
                    _launch_and_check(host_device, inline=False)
                except RuntimeError as error:  # allowed: the parent's queue was running a launch at the fork
                    if "fork" not in str(error):
                        raise

            outcome = _in_child(child)
            key = "ok" if outcome == "" else HANG if outcome == HANG else outcome
            outcomes[key] = outcomes.get(key, 0) + 1
    finally:
        stop.set()
        thread.join(10.0)
    assert set(outcomes) == {"ok"}, outcomes
    assert launches[0] > 0


def test_a_child_forked_while_the_python_device_records_a_failure_synchronizes() -> None:
    # PYTHON keeps failed programs' errors under a lock its engine thread takes; held at the fork, the child's first
    # synchronize after a failure hung on it
    device = Device["PYTHON"]
    with _held_by_another_thread(device._failures_lock):  # type: ignore[attr-defined]

        def child() -> None:
            device.record_failure("probe", ValueError("recorded in the child"))  # type: ignore[attr-defined]
            try:
                device.synchronize()
            except RuntimeError as error:
                if "recorded in the child" not in str(error):
                    raise
            else:
                raise AssertionError("the failure recorded in the child was not raised")

        assert _in_child(child, deadline=10.0) == ""
