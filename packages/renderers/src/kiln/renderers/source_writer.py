"""`SourceWriter`: the state every text renderer keeps while it prints one kernel (C family, WGSL).

It holds the name each rendered uop is known by, the body lines at their nesting depth, the helper functions the
kernel needs (each once), and the counters that make fresh local names.
"""

from __future__ import annotations

import math

from kiln.uops import DType, Ops, UOp, dtypes

__all__ = ["NAME_PREFIXES", "STATEMENT_OPS", "SourceWriter", "nonfinite_bits", "root_buffer"]

STATEMENT_OPS = frozenset(
    {Ops.STORE, Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF, Ops.BARRIER, Ops.DEFINE_REG, Ops.DEFINE_LOCAL}
)
"""Ops printed as statements (effects, loops, declarations), not as values with a name."""

NAME_PREFIXES: dict[Ops, str] = {
    Ops.LOAD: "val",
    Ops.CAST: "cast",
    Ops.BITCAST: "bits",
    Ops.RANGE: "ridx",
    Ops.DEFINE_REG: "acc",
    Ops.DEFINE_LOCAL: "smem",
}
"""The prefix of a fresh local name by the op that makes it (others: "alu")."""


def nonfinite_bits(value: float, dtype: DType) -> int:
    """The IEEE bits of NaN (the quiet NaN, positive) or of an infinity `value` in float32 or float64 `dtype`, for
    languages that have no literal of them and write them as a bit cast."""
    if math.isfinite(value) or dtype not in (dtypes.float32, dtypes.float64):
        raise ValueError(f"nonfinite_bits takes NaN or an infinity in float32 or float64, got {value!r} ({dtype!r})")
    mantissa_bits = 23 if dtype == dtypes.float32 else 52
    infinity = ((1 << (dtype.itemsize * 8 - 1 - mantissa_bits)) - 1) << mantissa_bits
    if math.isnan(value):
        return infinity | 1 << (mantissa_bits - 1)
    return infinity | (value < 0) << (dtype.itemsize * 8 - 1)


class SourceWriter:
    """Names of rendered uops, body lines (indented by `depth`) and helper functions of one kernel's source."""

    def __init__(self) -> None:
        self.names: dict[UOp, str] = {}
        self.lines: list[str] = []
        self.depth = 1
        self.helpers: dict[str, str] = {}
        self._counters: dict[str, int] = {}

    def __getitem__(self, uop: UOp) -> str:
        return self.names[uop]

    def fresh_name(self, prefix: str) -> str:
        """A new local name `prefix<n>`."""
        number = self._counters.get(prefix, 0)
        self._counters[prefix] = number + 1
        return f"{prefix}{number}"

    def emit(self, line: str) -> None:
        """Append `line` to the body at the current nesting depth."""
        self.lines.append("  " * self.depth + line)


def root_buffer(pointer: UOp) -> UOp:
    """The DEFINE_GLOBAL / DEFINE_LOCAL / DEFINE_REG an INDEX / AFTER chain addresses."""
    while pointer.op in (Ops.INDEX, Ops.AFTER):
        pointer = pointer.src[0]
    return pointer
