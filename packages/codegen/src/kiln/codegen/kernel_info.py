"""The payload of a kernel sink (`KernelInfo`) and the optimizations that reshape a kernel's loops (`Opt`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OptOps(enum.Enum):
    """The kinds of optimization `apply_opts` knows.

    UPCAST    split a loop axis; the inner part becomes vector lanes (one thread computes `arg` outputs)
    UNROLL    split a reduce axis; the inner part is unrolled into vector lanes reduced horizontally
    LOCAL     split a global axis; the inner part becomes threads of a block (lidx)
    GROUP     split a reduce axis; the inner part is reduced by the threads of a block through shared memory
    GROUPTOP  like GROUP, but the threads take the outer part (each thread reduces a contiguous chunk)
    THREAD    split a loop axis; the outer part is spread over `arg` CPU cores (core_id)
    PADTO     round an axis up to a multiple of `arg`; the extra iterations are masked off
    SWAP      exchange two global axes' launch dimensions, two loops' nesting on a CPU, or two upcast axes' order in
              the vector lanes (lanes are ordered by axis number, the highest innermost) (`arg`: the other axis)
    NOLOCALS  promise not to use local threads in this kernel (axis and arg are None)
    TC        map a matmul-shaped reduce onto the renderer's tensor cores (`arg` = (tensor core index, level))
    BLOCK     reduce blocking: split a reduce axis into an outer loop of blocks (outside the output loops, inside the
              threads) and an inner reduce of `arg`; each block adds its partial result to the one the previous
              block stored in the output, and the epilogue (what follows the reduce) applies in the last block
    """

    UPCAST = enum.auto()
    UNROLL = enum.auto()
    LOCAL = enum.auto()
    GROUP = enum.auto()
    GROUPTOP = enum.auto()
    THREAD = enum.auto()
    PADTO = enum.auto()
    SWAP = enum.auto()
    NOLOCALS = enum.auto()
    TC = enum.auto()
    BLOCK = enum.auto()

    def __repr__(self) -> str:
        return f"OptOps.{self.name}"


@dataclass(frozen=True)
class Opt:
    """One optimization: `op` applied to the RANGE whose `RangeArg.axis` is `axis`, with amount or payload `arg`.

    Axis numbers are the kernel's own (`RangeArg.axis`), not positions: a split keeps the original number on the
    remaining part and gives the new range the next unused number, so later opts can still name both.
    An amount of 0 means "the whole axis".
    """

    op: OptOps
    axis: int | None = None
    arg: int | tuple[int, ...] | None = None

    def __repr__(self) -> str:
        return f"Opt(op={self.op!r}, axis={self.axis!r}, arg={self.arg!r})"


class KernelOptError(ValueError):
    """An optimization that is illegal for this kernel or renderer; the message says which and why."""


@dataclass(frozen=True)
class KernelInfo:
    """The payload (`arg`) of a kernel sink.

    name           kernel name for the rendered function ("" lets codegen pick one from the loop shape)
    opts_to_apply  optimizations to apply as given (None: let the heuristic or BEAM choose)
    applied_opts   the optimizations already applied (filled in by codegen)
    """

    name: str = ""
    opts_to_apply: tuple[Opt, ...] | None = None
    applied_opts: tuple[Opt, ...] = ()
