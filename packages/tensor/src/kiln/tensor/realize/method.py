"""`Method`: a kernel ready to launch, as the engine caches it and its eager fast path remembers it."""

from __future__ import annotations

from dataclasses import dataclass

from kiln.codegen import Program
from kiln.runtime import HCQCompiled, ProgramRunner

__all__ = ["Method"]


@dataclass(frozen=True)
class Method:
    """A kernel ready to launch: the program, the kernel slot each program parameter takes, the loaded runner and
    the program's cost estimates. `queue`: the queue-driven device a run of a plan may submit the launch to in one
    list with its neighbours (a runner with fixed launch sizes and no variables), else None."""

    program: Program
    slots: tuple[int, ...]
    runner: ProgramRunner
    flops: int
    mem_bytes: int
    queue: HCQCompiled | None = None
