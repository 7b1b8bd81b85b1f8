"""`ThreadQueueEngine`: a software hardware-queue, serviced by a worker thread.

Devices whose "hardware" is the host CPU (the CPU and PYTHON devices, test devices) submit command lists here. The
worker runs the lists in submission order and the commands of a list in order, exactly as a GPU queue would, so code
written against the HCQ abstractions behaves the same on them.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Sequence
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
from kiln.runtime.kernel_args import HCQArgsState

__all__ = ["EngineClosed", "SoftwareKernel", "ThreadQueueEngine"]


@runtime_checkable
class SoftwareKernel(Protocol):
    """What an exec command runs on a software engine: a callable taking the argument block and the launch sizes."""

    def __call__(self, args: HCQArgsState, global_size: tuple[int, int, int], local_size: tuple[int, int, int]) -> None:
        """Runs the whole grid."""
        ...


def _concrete(size: LaunchSize) -> tuple[int, int, int]:
    x, y, z = size
    assert isinstance(x, int) and isinstance(y, int) and isinstance(z, int), "submitted commands carry resolved values"
    return (x, y, z)


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
        self.name = name
        self.error: BaseException | None = None
        self._pending: queue.SimpleQueue[list[HCQCommand] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._start_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ThreadQueueEngine {self.name}>"

    def submit_commands(self, commands: Sequence[HCQCommand]) -> None:
        """Queues `commands` behind everything submitted before."""
        self.check()
        if self._closed:
            raise EngineClosed(f"engine {self.name!r} is closed")
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=f"kiln-{self.name}", daemon=True)
                self._thread.start()
        self._pending.put(list(commands))

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
            if self.error is not None:
                self._fail_signals(commands, self.error)
                continue
            for position, command in enumerate(commands):
                try:
                    self._execute(command)
                except BaseException as error:  # a failing command must never kill the worker silently
                    self.error = error
                    self._fail_signals(commands[position:], error)
                    break

    @staticmethod
    def _fail_signals(commands: Sequence[HCQCommand], error: BaseException) -> None:
        for command in commands:
            if isinstance(command, SignalCommand):
                command.signal.fail(error)

    def _execute(self, command: HCQCommand) -> None:
        if isinstance(command, WaitCommand):
            assert isinstance(command.value, int), "submitted commands carry resolved values"
            command.signal.wait(command.value, abort=self._abort_wait)
        elif isinstance(command, SignalCommand):
            assert isinstance(command.value, int), "submitted commands carry resolved values"
            command.signal.set(command.value)
        elif isinstance(command, TimestampCommand):
            command.signal.record_timestamp()
        elif isinstance(command, ExecCommand):
            program = command.program
            if not isinstance(program, SoftwareKernel):
                raise TypeError(f"{self.name!r} runs Python callables, got {type(program).__name__} for {command.name}")
            program(command.args, _concrete(command.global_size), _concrete(command.local_size))
        elif isinstance(command, CopyCommand):
            assert isinstance(command.size, int), "submitted commands carry resolved values"
            ctypes.memmove(command.dest, command.src, command.size)
        elif isinstance(command, MemoryBarrierCommand):
            pass  # one worker thread: its own writes are visible to its later commands
        else:
            raise TypeError(f"unknown command {command!r}")
