"""Typed payloads (`UOp.arg`) of the ops whose argument has more than one meaning-bearing part."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kiln.uops.ir_enum import IREnum


class AxisKind(IREnum):
    """What a RANGE loops over once the kernel is optimized and lowered."""

    LOOP = enum.auto()
    REDUCE = enum.auto()
    GLOBAL = enum.auto()
    LOCAL = enum.auto()
    UPCAST = enum.auto()
    UNROLL = enum.auto()
    GROUP_REDUCE = enum.auto()
    THREAD = enum.auto()
    BLOCK = enum.auto()


@dataclass(frozen=True)
class RangeArg:
    """Payload of RANGE: the loop's `axis` number and its `kind`. The loop variable runs 0..size-1."""

    axis: int
    kind: AxisKind = AxisKind.LOOP


@dataclass(frozen=True)
class VarArg:
    """Payload of DEFINE_VAR: a named symbolic variable with inclusive bounds `lo <= value <= hi`."""

    name: str
    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"variable name must be a non-empty str, got {self.name!r}")
        if not (isinstance(self.lo, int) and isinstance(self.hi, int)) or self.lo > self.hi:
            raise ValueError(f"variable {self.name!r} needs int bounds lo <= hi, got lo={self.lo!r} hi={self.hi!r}")


@dataclass(frozen=True)
class SpecialArg:
    """Payload of SPECIAL: the hardware index it reads, e.g. 'gidx0' (global index) or 'lidx1' (local index)."""

    name: str
