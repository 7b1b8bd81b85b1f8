"""HCQQueue recording, symbolic values resolved per submission, and argument checks."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kiln.runtime import (
    CopyCommand,
    ExecCommand,
    HCQArgsState,
    HCQCommand,
    HCQQueue,
    KernelArgLayout,
    MemoryBarrierCommand,
    SignalCommand,
    TimelineSignal,
    TimestampCommand,
    WaitCommand,
)
from kiln.uops import UOp


class Recorder:
    """A queue target that keeps what it receives."""

    def __init__(self) -> None:
        self.submissions: list[list[HCQCommand]] = []

    def submit_commands(self, commands: Sequence[HCQCommand]) -> None:
        self.submissions.append(list(commands))


def empty_args() -> HCQArgsState:
    return HCQArgsState(KernelArgLayout(()), memoryview(bytearray(8)), [])


def kernel(args: HCQArgsState, global_size: tuple[int, int, int], local_size: tuple[int, int, int]) -> None:
    """A do-nothing kernel whose name the queue records."""


def test_commands_are_recorded_in_order() -> None:
    signal, args = TimelineSignal(), empty_args()
    queue = (
        HCQQueue()
        .wait(signal, 1)
        .memory_barrier()
        .timestamp(signal)
        .exec(kernel, args, (4, 2), (8,))
        .copy(0x2000, 0x1000, 64)
        .signal(signal, 2)
    )
    assert queue.commands == (
        WaitCommand(signal, 1),
        MemoryBarrierCommand(),
        TimestampCommand(signal),
        ExecCommand(kernel, args, (4, 2, 1), (8, 1, 1), "kernel"),
        CopyCommand(0x2000, 0x1000, 64),
        SignalCommand(signal, 2),
    )
    target = Recorder()
    queue.submit(target).submit(target)  # a queue can be submitted again
    assert target.submissions == [list(queue.commands)] * 2


def test_symbolic_values_are_resolved_per_submission() -> None:
    n = UOp.variable("n", 1, 1000)
    signal, args = TimelineSignal(), empty_args()
    queue = (
        HCQQueue()
        .wait(signal, n)
        .exec(kernel, args, (n * 4, 2), (n,), name="k")
        .copy(16, 0, n * 8)
        .signal(signal, n + 1)
    )
    target = Recorder()
    for value in (3, 10):
        queue.submit(target, {"n": value})
    for value, commands in zip((3, 10), target.submissions):
        assert commands == [
            WaitCommand(signal, value),
            ExecCommand(kernel, args, (value * 4, 2, 1), (value, 1, 1), "k"),
            CopyCommand(16, 0, value * 8),
            SignalCommand(signal, value + 1),
        ]
    assert queue.commands[0] == WaitCommand(signal, n)  # the recording keeps its symbols


def test_missing_variable_is_named() -> None:
    n = UOp.variable("n", 1, 10)
    with pytest.raises(ValueError, match=r"no value for variable 'n'; got values for \['m'\]"):
        HCQQueue().signal(TimelineSignal(), n).submit(Recorder(), {"m": 1})


def test_extend_appends_another_queues_commands() -> None:
    signal = TimelineSignal()
    inner = HCQQueue().signal(signal, UOp.variable("v", 0, 9))
    outer = HCQQueue().wait(signal, 0).extend(inner)
    assert outer.resolved({"v": 4}) == [WaitCommand(signal, 0), SignalCommand(signal, 4)]


def test_bad_commands_raise() -> None:
    signal, args = TimelineSignal(), empty_args()
    with pytest.raises(ValueError, match="wait value must be at least 0, got -1"):
        HCQQueue().wait(signal, -1)
    with pytest.raises(TypeError, match="signal value must be an int or a symbolic UOp, got float"):
        HCQQueue().signal(signal, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"global_size must have 1 to 3 dimensions, got \(1, 1, 1, 1\)"):
        HCQQueue().exec(kernel, args, (1, 1, 1, 1))
    with pytest.raises(ValueError, match="local_size entry must be at least 1, got 0"):
        HCQQueue().exec(kernel, args, (1,), (0,))
    with pytest.raises(TypeError, match="exec args must be an HCQArgsState"):
        HCQQueue().exec(kernel, b"", (1,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="copy source must be a non-negative int address"):
        HCQQueue().copy(0, -8, 8)
