"""`HCQQueue`: a recorded list of hardware-queue commands, submitted to a device as a whole.

A queue is built once with chainable methods and can be submitted many times. Signal values, launch sizes and copy
sizes may be symbolic (UOp expressions of variables); each `submit` resolves them with that submission's variable
values, so one recorded queue serves every value of a symbolic shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from kiln.runtime.kernel_args import HCQArgsState
from kiln.runtime.signal import TimelineSignal
from kiln.uops import UOp, sym_infer

__all__ = [
    "CopyCommand",
    "ExecCommand",
    "HCQCommand",
    "HCQQueue",
    "LaunchSize",
    "MemoryBarrierCommand",
    "QueueTarget",
    "SignalCommand",
    "SymbolicInt",
    "TimestampCommand",
    "WaitCommand",
]

SymbolicInt = int | UOp
LaunchSize = tuple[SymbolicInt, SymbolicInt, SymbolicInt]


@dataclass(frozen=True)
class _SignalValueCommand:
    signal: TimelineSignal
    value: SymbolicInt


class WaitCommand(_SignalValueCommand):
    """Block the queue until `signal` reaches `value`."""


class SignalCommand(_SignalValueCommand):
    """Set `signal` to `value` once every earlier command of the queue is done."""


@dataclass(frozen=True)
class TimestampCommand:
    """Record the time the queue reaches this point in `signal`'s timestamp."""

    signal: TimelineSignal


@dataclass(frozen=True)
class MemoryBarrierCommand:
    """Make memory writes by earlier commands (and the host) visible to later ones."""


@dataclass(frozen=True)
class ExecCommand:
    """Run `program` over a grid of `global_size` workgroups of `local_size` threads, reading arguments from `args`.

    What `program` is belongs to the device: a compiled function, a code object, or a Python callable for software
    engines.
    """

    program: object
    args: HCQArgsState
    global_size: LaunchSize
    local_size: LaunchSize
    name: str
    profile: Mapping[str, object] | None = None
    """What a PROFILE event of this launch carries besides its times (the kernel's trace key, flops, bytes)."""


@dataclass(frozen=True)
class CopyCommand:
    """Copy `size` bytes from device address `src` to device address `dest`."""

    dest: int
    src: int
    size: SymbolicInt


HCQCommand = WaitCommand | SignalCommand | TimestampCommand | MemoryBarrierCommand | ExecCommand | CopyCommand


class QueueTarget(Protocol):
    """Something that executes submitted command lists in order (a device, or an engine of one)."""

    def submit_commands(self, commands: Sequence[HCQCommand]) -> None:
        """Queues `commands` (all values concrete ints) for execution after everything submitted before."""
        ...


def _check_symbolic(value: SymbolicInt, what: str, minimum: int) -> SymbolicInt:
    if isinstance(value, UOp):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int or a symbolic UOp, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {value}")
    return value


def _launch_size(size: Sequence[SymbolicInt], what: str) -> LaunchSize:
    if not 1 <= len(size) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, got {tuple(size)!r}")
    padded = [_check_symbolic(each, f"{what} entry", 1) for each in size] + [1] * (3 - len(size))
    return (padded[0], padded[1], padded[2])


def _resolve(value: SymbolicInt, var_vals: Mapping[str, int]) -> int:
    # sym_infer raises ValueError naming a variable that is missing or out of its bounds.
    return value if isinstance(value, int) else sym_infer(value, var_vals)


class HCQQueue:
    """A list of commands (wait, signal, timestamp, exec, copy, memory barrier), built with chained calls.

    Example:
        HCQQueue().wait(timeline, 4).exec(kernel, args, (16, 1, 1), (32, 1, 1)).signal(timeline, 5).submit(device)
    """

    def __init__(self) -> None:
        self._commands: list[HCQCommand] = []
        self._symbolic = False

    @property
    def commands(self) -> tuple[HCQCommand, ...]:
        """The recorded commands, in order."""
        return tuple(self._commands)

    def _add(self, command: HCQCommand) -> HCQQueue:
        self._commands.append(command)
        if not self._symbolic:  # remember whether any value needs resolving at submit (checked per command kind)
            if isinstance(command, WaitCommand | SignalCommand):
                self._symbolic = isinstance(command.value, UOp)
            elif isinstance(command, CopyCommand):
                self._symbolic = isinstance(command.size, UOp)
            elif isinstance(command, ExecCommand):
                self._symbolic = any(isinstance(each, UOp) for each in (*command.global_size, *command.local_size))
        return self

    def wait(self, signal: TimelineSignal, value: SymbolicInt) -> HCQQueue:
        """Waits until `signal` reaches `value`."""
        return self._add(WaitCommand(signal, _check_symbolic(value, "wait value", 0)))

    def signal(self, signal: TimelineSignal, value: SymbolicInt) -> HCQQueue:
        """Sets `signal` to `value` when everything before is done."""
        return self._add(SignalCommand(signal, _check_symbolic(value, "signal value", 0)))

    def timestamp(self, signal: TimelineSignal) -> HCQQueue:
        """Records the current time into `signal`'s timestamp."""
        return self._add(TimestampCommand(signal))

    def memory_barrier(self) -> HCQQueue:
        """Makes earlier writes visible to later commands."""
        return self._add(MemoryBarrierCommand())

    def exec(
        self,
        program: object,
        args: HCQArgsState,
        global_size: Sequence[SymbolicInt],
        local_size: Sequence[SymbolicInt] = (1,),
        name: str | None = None,
    ) -> HCQQueue:
        """Runs `program` with argument block `args` on a grid of `global_size` groups of `local_size` threads."""
        if not isinstance(args, HCQArgsState):
            raise TypeError(f"exec args must be an HCQArgsState, got {type(args).__name__}")
        label = name or getattr(program, "name", None) or getattr(program, "__name__", None) or repr(program)
        grid, block = _launch_size(global_size, "global_size"), _launch_size(local_size, "local_size")
        return self._add(ExecCommand(program, args, grid, block, str(label)))

    def copy(self, dest: int, src: int, size: SymbolicInt) -> HCQQueue:
        """Copies `size` bytes from address `src` to address `dest`."""
        for what, address in (("copy destination", dest), ("copy source", src)):
            if isinstance(address, bool) or not isinstance(address, int) or address < 0:
                raise ValueError(f"{what} must be a non-negative int address, got {address!r}")
        return self._add(CopyCommand(dest, src, _check_symbolic(size, "copy size", 0)))

    def extend(self, other: HCQQueue) -> HCQQueue:
        """Appends every command of `other` (symbolic values stay symbolic)."""
        for command in other.commands:
            self._add(command)
        return self

    def resolved(self, var_vals: Mapping[str, int] | None = None) -> list[HCQCommand]:
        """The commands with every symbolic value replaced by its value under `var_vals`."""
        if not self._symbolic:
            return list(self._commands)
        values = var_vals or {}
        result: list[HCQCommand] = []
        for command in self._commands:
            if isinstance(command, WaitCommand | SignalCommand):
                command = replace(command, value=_resolve(command.value, values))
            elif isinstance(command, CopyCommand):
                command = replace(command, size=_resolve(command.size, values))
            elif isinstance(command, ExecCommand):
                grid = tuple(_resolve(each, values) for each in command.global_size)
                block = tuple(_resolve(each, values) for each in command.local_size)
                command = replace(
                    command, global_size=(grid[0], grid[1], grid[2]), local_size=(block[0], block[1], block[2])
                )
            result.append(command)
        return result

    def submit(self, target: QueueTarget, var_vals: Mapping[str, int] | None = None) -> HCQQueue:
        """Hands the commands (symbols resolved with `var_vals`) to `target`; the queue can be submitted again."""
        target.submit_commands(self.resolved(var_vals))
        return self
