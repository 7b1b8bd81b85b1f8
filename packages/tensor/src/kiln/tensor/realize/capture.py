"""`Recording`: what `Engine.capture()` reports every kernel launch, copy, host read and random stream to.

    with engine.capture() as recording:
        (x + 1).realize()
    [program.name for program, _buffers in recording.kernels]

A capture belongs to one Engine and to the thread that opened it: launches of other engines, and of other threads
using the same engine, are not recorded. TinyJit captures a function's second call with its own `Recording`
(`kiln.tensor.jit`), which turns the launches into replay steps and refuses host reads.
"""

from __future__ import annotations

from kiln.codegen import Program
from kiln.runtime import Buffer, ProgramRunner
from kiln.tensor.core import TensorCore

__all__ = ["Recording"]


class Recording:
    """Records what an Engine launches inside `with engine.capture() as recording:`; subclass it to act on each event.

    Attributes:
        kernels: each kernel launched, in order: its program and the Buffers passed to it.
        copies: each copy, in order: (destination, source).
        stream_calls: the call number of each random tensor drawn.
        host_reads: what was read back to the host (a sentence each).
    """

    def __init__(self) -> None:
        self.kernels: list[tuple[Program, list[Buffer]]] = []
        self.copies: list[tuple[Buffer, Buffer]] = []
        self.stream_calls: list[int] = []
        self.host_reads: list[str] = []

    def __repr__(self) -> str:
        return f"<Recording {len(self.kernels)} kernels, {len(self.copies)} copies, {len(self.stream_calls)} streams>"

    def record_kernel(
        self, program: Program, runner: ProgramRunner, buffers: list[Buffer], var_vals: dict[str, int] | None
    ) -> None:
        """Called after each kernel launch with its program, loaded runner, argument buffers and variable values."""
        self.kernels.append((program, list(buffers)))

    def record_copy(self, destination: Buffer, source: Buffer) -> None:
        """Called after each copy step."""
        self.copies.append((destination, source))

    def record_host_read(self, what: str) -> None:
        """Called when data is about to be read back to the host (a subclass may raise)."""
        self.host_reads.append(what)

    def observe_stream(self, stream: TensorCore, call: int) -> None:
        """Called for each random tensor drawn: the uint32 tensor holding its call number, and that number."""
        self.stream_calls.append(call)
