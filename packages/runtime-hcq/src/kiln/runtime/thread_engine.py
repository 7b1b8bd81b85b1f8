"""`ThreadQueueEngine`: a software hardware-queue, serviced by a worker thread.

Devices whose "hardware" is the host CPU (the CPU and PYTHON devices, test devices) submit command lists here. The
worker runs the lists in submission order and the commands of a list in order, exactly as a GPU queue would, so code
written against the HCQ abstractions behaves the same on them.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from kiln.runtime.command_queue import (
    CopyCommand,
    ExecCommand,
    HCQCommand,
    LaunchSize,
    MemoryBarrierCommand,
    SignalCommand,
    TimestampCommand,
    WaitCommand,
)
from kiln.runtime.fork_hooks import renew_after_fork
from kiln.runtime.kernel_args import HCQArgsState
from kiln.runtime.signal import TimelineSignal

__all__ = ["EngineClosed", "SoftwareKernel", "ThreadQueueEngine"]


@runtime_checkable
class SoftwareKernel(Protocol):
    """What an exec command runs on a software engine: a callable taking the argument block and the launch sizes."""

    def __call__(self, args: HCQArgsState, global_size: tuple[int, int, int], local_size: tuple[int, int, int]) -> None:
        """Runs the whole grid."""
        ...


def _concrete(size: LaunchSize) -> tuple[int, int, int]:
    x, y, z = size
    assert type(x) is int and type(y) is int and type(z) is int, "submitted commands carry resolved values"
    return (x, y, z)


_COMMAND_KINDS = frozenset(
    {WaitCommand, SignalCommand, TimestampCommand, MemoryBarrierCommand, ExecCommand, CopyCommand}
)


class EngineClosed(RuntimeError):
    """The engine was closed while its worker was waiting, or before a submission."""


class ThreadQueueEngine:
    """Executes submitted command lists in order on one worker thread (started on first submit).

    If a command raises, the engine stops: the error is kept in `error`, later submissions raise it, and every signal
    that the failed list or any later list would have set is marked failed, so whoever waits on one (the host or
    another engine) gets the error instead of hanging.

    Args:
        name: used for the thread and in error messages.
    """

    def __init__(self, name: str) -> None:
        renew_after_fork(self)  # its worker thread does not survive a fork
        self.name = name
        self.error: BaseException | None = None
        self._pending: queue.SimpleQueue[list[HCQCommand] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._start_lock = threading.Lock()
        # `_outstanding` counts lists submitted or claimed for inline execution and not finished yet (under
        # `_state_lock`); whoever runs a list (the worker or an inline caller) holds `_run_lock`, so an inline list
        # and a list submitted while it runs never overlap and keep their order.
        self._state_lock = threading.Lock()
        self._run_lock = threading.Lock()
        self._outstanding = 0

    def __repr__(self) -> str:
        return f"<ThreadQueueEngine {self.name}>"

    def after_fork_in_child(self) -> None:
        """Makes this process's copy usable after `os.fork()` (run by `fork_hooks` in the child): the worker
        thread and whatever held the locks did not survive the fork, so the locks are new and the next submission
        starts a new worker, which runs the lists still queued at the fork in order. A list that was running at
        the fork cannot finish in the child: the engine then fails, naming the fork, so waiting on its signals
        raises instead of hanging."""
        running = self._run_lock.locked()
        self._start_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._run_lock = threading.Lock()
        self._thread = None
        queued, self._pending = self._pending, queue.SimpleQueue()
        kept = 0
        while True:
            try:
                self._pending.put(queued.get_nowait())
            except queue.Empty:
                break
            kept += 1
        # a list the worker had taken from the queue but not started is lost like a running one; the count is the
        # kept lists only (the threads that counted the others are gone), so the engine can go idle again
        running = running or self._outstanding > kept
        self._outstanding = kept
        if running and self.error is None:
            self.error = RuntimeError(
                f"engine {self.name!r}: the process forked while a command list was running on it; that work cannot "
                "finish in the child process (fork when the device is idle, e.g. after synchronize())"
            )

    def submit_commands(self, commands: Sequence[HCQCommand]) -> None:
        """Queues `commands` behind everything submitted before."""
        self.check()
        if self._closed:
            raise EngineClosed(f"engine {self.name!r} is closed")
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=f"kiln-{self.name}", daemon=True)
                self._thread.start()
        with self._state_lock:
            self._outstanding += 1
        self._pending.put(list(commands))

    @property
    def idle(self) -> bool:
        """Whether every list submitted so far has finished (nothing queued or running)."""
        return self._outstanding == 0

    def run_inline(self, commands: Sequence[HCQCommand]) -> bool:
        """Runs `commands` in the calling thread, as if submitted, when that cannot change any order: the engine is
        idle and every wait of the list is already satisfied (so the caller never blocks). Returns False, having
        run nothing, otherwise (submit the list instead).

        A failing command is handled as on the worker (kept in `error`, the list's signals failed): the caller
        sees it when it waits on a signal or submits again, not as an exception from this call. An interrupt of the
        calling thread (KeyboardInterrupt, SystemExit: not an `Exception`) is not a failure of the engine: the rest
        of the list is skipped, its signals are set (the list counts as done, so later work is not held up) and
        the interrupt goes on to the caller; the engine stays usable.
        """
        if self._closed or self.error is not None:
            return False  # let submit_commands raise its usual error
        waits = False
        for command in commands:
            if isinstance(command, WaitCommand):
                if not (isinstance(command.value, int) and command.signal.value >= command.value):
                    return False
                waits = True
        if not self._claim_idle():
            return False
        try:
            with self._run_lock:
                # the waits are satisfied (checked above, and signals never go back): running them is a no-op
                self._run_list(
                    [command for command in commands if type(command) is not WaitCommand] if waits else commands,
                    inline=True,
                )
        finally:
            self._finish_one()
        return True

    def run_exec_inline(self, command: ExecCommand, signal: TimelineSignal, value: int) -> bool:
        """`run_inline((command, SignalCommand(signal, value)))` for the most common list, one launch and its
        timeline signal, without building the list or dispatching on command types: the same conditions (an idle
        engine that has not failed), the same lock, the same order and the same failure handling. The launch sizes
        must be concrete ints (a runner with static launch sizes checked them when it was made)."""
        return self.run_call_inline(
            command.program, command.args, command.global_size, command.local_size, command.name, signal, value
        )

    def run_call_inline(
        self,
        program: object,
        args: HCQArgsState,
        global_size: LaunchSize,
        local_size: LaunchSize,
        name: str,
        signal: TimelineSignal,
        value: int,
    ) -> bool:
        """`run_exec_inline` of the exec command these fields would make, without making it (a launch that runs
        here never needs the command object; the caller builds one only when this refuses): `run_direct_list` of
        the one call `program(args, global_size, local_size)`. A program that is not callable fails the launch as
        it fails on the worker."""
        if callable(program):
            return self.run_direct_list(((program, (args, global_size, local_size)),), signal, value)
        error = TypeError(f"{self.name!r} runs Python callables, got {type(program).__name__} for {name}")
        return self.run_direct_list(((_raise, (error,)),), signal, value)

    def run_direct_list(
        self, calls: Sequence[tuple[Callable[..., None], tuple[object, ...]]], signal: TimelineSignal, value: int
    ) -> bool:
        """Runs each `function(*arguments)` of `calls` (a native kernel's entry point and its buffer addresses, or a
        Python kernel and its argument block and launch sizes) in the calling thread, in order, then sets `signal`
        to `value`, when the engine is idle and has not failed; False, having run nothing, otherwise. A failing call
        stops the list and is kept like a queued failure (`error`, the signal failed: seen at the next wait or
        submit); an interrupt of the calling thread abandons the rest, sets the signal and goes on to the caller.

        It claims nothing: holding `_run_lock` with nothing outstanding means nothing is queued or running (the
        worker holds that lock while it runs a list and counts a list done after it lets go), and a list submitted
        meanwhile waits for the lock, so it runs after these calls, as it was submitted after them."""
        return self._run_now(calls, signal, value) is not False

    def run_direct_now(self, calls: Sequence[tuple[Callable[..., None], tuple[object, ...]]]) -> bool | Exception:
        """`run_direct_list` without a signal, for a launch the caller makes synchronous (`HCQCompiled.launch_direct`:
        done when this returns, after everything submitted before, so it needs no timeline value): each
        `function(*arguments)` of `calls` in the calling thread, in order, when the engine is idle and has not
        failed. Returns True when they ran, False (having run nothing) otherwise, or the error of a failing call
        (kept in `error` as a queued failure is; the rest of the list is skipped: the caller fails a timeline value
        with it). An interrupt of the calling thread abandons the rest and goes on to the caller."""
        return self._run_now(calls, None, 0)

    def _run_now(
        self,
        calls: Sequence[tuple[Callable[..., None], tuple[object, ...]]],
        signal: TimelineSignal | None,
        value: int,
    ) -> bool | Exception:
        """The two direct runs' one body: the calls in order under `_run_lock` when idle (False: nothing ran), then
        `signal` set to `value` if there is one; a failing call is kept as a queued failure (and fails the signal)
        and returned; an interrupt sets the signal and goes on to the caller."""
        if self._closed or self.error is not None or self._outstanding:
            return False
        with self._run_lock:
            if self._outstanding:
                return False
            try:
                for function, arguments in calls:
                    function(*arguments)
            except Exception as error:  # kept like a queued failure: seen at the next wait or submit
                self.error = error
                if signal is not None:
                    signal.fail(error)
                return error
            except BaseException:  # the caller was interrupted: the rest is abandoned, the engine stays usable
                if signal is not None:
                    signal.set(value)
                raise
            if signal is not None:
                signal.set(value)
        return True

    def _claim_idle(self) -> bool:
        """Claims the idle engine for an inline list (counted as outstanding); False if anything is outstanding."""
        with self._state_lock:
            if self._outstanding:
                return False
            self._outstanding = 1
            return True

    def _finish_one(self) -> None:
        with self._state_lock:
            self._outstanding -= 1

    def check(self) -> None:
        """Raises RuntimeError if a command failed on this engine."""
        if self.error is not None:
            raise RuntimeError(
                f"engine {self.name!r} failed: {type(self.error).__name__}: {self.error}"
            ) from self.error

    def close(self, timeout: float | None = None) -> None:
        """Stops the worker after the lists already submitted (a worker blocked on a wait stops at once)."""
        self._closed = True
        self._pending.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    def _abort_wait(self) -> None:
        if self._closed:
            raise EngineClosed(f"engine {self.name!r} was closed while waiting on a signal")

    def _work(self) -> None:
        while (commands := self._pending.get()) is not None:
            with self._run_lock:
                self._run_list(commands)
            self._finish_one()

    def _run_list(self, commands: Sequence[HCQCommand], inline: bool = False) -> None:
        if self.error is not None:
            self._fail_signals(commands, self.error)
            return
        for position, command in enumerate(commands):
            try:
                self._execute(command)
            except BaseException as error:  # a failing command must never kill the worker silently
                if inline and not isinstance(error, Exception):
                    # an interrupt of the calling thread (see run_inline): the list is abandoned, not failed
                    for rest in commands[position:]:
                        if isinstance(rest, SignalCommand):
                            assert isinstance(rest.value, int)
                            rest.signal.set(rest.value)
                    raise
                self.error = error
                self._fail_signals(commands[position:], error)
                break

    @staticmethod
    def _fail_signals(commands: Sequence[HCQCommand], error: BaseException) -> None:
        for command in commands:
            if isinstance(command, SignalCommand):
                command.signal.fail(error)

    def _execute(self, command: HCQCommand) -> None:
        # exact-type tests first: one list runs several commands per launch, so the common kinds go first
        kind = type(command)
        if kind is MemoryBarrierCommand:
            return  # one worker thread: its own writes are visible to its later commands
        if kind is SignalCommand:
            assert isinstance(command, SignalCommand) and isinstance(command.value, int), "resolved values only"
            command.signal.set(command.value)
            return
        if kind is ExecCommand or (kind not in _COMMAND_KINDS and isinstance(command, ExecCommand)):
            assert isinstance(command, ExecCommand)
            program = command.program
            if not callable(program):  # what SoftwareKernel's isinstance checks, without the protocol machinery
                raise TypeError(f"{self.name!r} runs Python callables, got {type(program).__name__} for {command.name}")
            program(command.args, _concrete(command.global_size), _concrete(command.local_size))
        elif isinstance(command, WaitCommand):
            assert isinstance(command.value, int), "submitted commands carry resolved values"
            command.signal.wait(command.value, abort=self._abort_wait)
        elif isinstance(command, SignalCommand):
            assert isinstance(command.value, int), "submitted commands carry resolved values"
            command.signal.set(command.value)
        elif isinstance(command, TimestampCommand):
            command.signal.record_timestamp()
        elif isinstance(command, CopyCommand):
            assert isinstance(command.size, int), "submitted commands carry resolved values"
            ctypes.memmove(command.dest, command.src, command.size)
        elif isinstance(command, MemoryBarrierCommand):
            pass
        else:
            raise TypeError(f"unknown command {command!r}")


def _raise(error: BaseException) -> None:
    # a launch that fails with `error` (kept like a queued failure by `run_direct_list`)
    raise error
