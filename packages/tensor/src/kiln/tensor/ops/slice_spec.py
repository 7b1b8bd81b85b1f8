"""How one dim of a tensor is indexed (`DimIndex`), and the slice specifications of `tensor[...]`.

An int slice is clamped to the dim as Python does. A slice with a bound Variable in its start or stop, or over a dim
whose size holds one, is not clamped: its bounds must lie inside the dim for every value of the variables (the
SHRINK it becomes proves them), so one kernel serves every value. Negative ints count from the end; any positive step
works, a negative step only over the whole dim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from kiln.tensor.ops._checks import check_int, check_size
from kiln.tensor.symbolic import BoundVariable, Variable, carries_variable, describe_variables, format_size, settle
from kiln.uops import UOp

__all__ = ["SYMBOLIC_INDEX", "DimIndex", "size_text", "slice_spec"]


@dataclass(frozen=True)
class DimIndex:
    """How one source dim is indexed: kind 'int' (position `first`), 'slice' (`count` elements from `first` every
    `stride`, after flipping when `flip`), or 'full' (kept whole for an advanced index). A slice with a bound
    Variable in its bounds or its dim's size also keeps its `end` (the window is [first, end), cut every `stride`)."""

    kind: str
    first: int = 0
    count: int = 0
    stride: int = 1
    flip: bool = False
    end: int | None = None


def slice_spec(item: slice, size: int) -> DimIndex:
    """How the Python slice `item` indexes a dim of `size`: int bounds clamped as Python does; with a bound Variable
    in its bounds or in `size`, bounds proven inside the dim instead (`_symbolic_slice_spec`)."""
    if _symbolic_slice(item, size):
        return _symbolic_slice_spec(item, size)
    for name, value in (("start", item.start), ("stop", item.stop), ("step", item.step)):
        if value is not None and (isinstance(value, bool) or not hasattr(value, "__index__")):
            raise TypeError(f"slice {name} must be an int or None, got {value!r}")
    if item.step == 0:
        raise ValueError("slice step cannot be zero")
    start, stop, step = item.indices(size)
    count = len(range(start, stop, step))
    if count == 0:
        return DimIndex("slice", 0, 0, 1, False)
    if step > 0:
        return DimIndex("slice", start, count, step, False)
    return DimIndex("slice", size - 1 - start, count, -step, True)


SYMBOLIC_INDEX = (BoundVariable, Variable, UOp)
"""The types that stand for a bound Variable in an index (a Tensor may too: `carries_variable`)."""


def _symbolic_slice(item: slice, size: int) -> bool:
    return (
        type(size) is not int
        or isinstance(item.start, SYMBOLIC_INDEX)
        or isinstance(item.stop, SYMBOLIC_INDEX)
        or carries_variable(item.start)
        or carries_variable(item.stop)
    )


def _symbolic_slice_spec(item: slice, size: int) -> DimIndex:
    """A slice with a bound Variable in its start or stop (or over a symbolic dim): bounds counted from the front,
    proven inside the dim for every value of the variables (by the shrink it becomes), any positive step; a
    negative step only over the whole dim (`x[::-2]`: the dim flipped, then every second)."""
    step = 1 if item.step is None else check_int(item.step, "slice step")
    if step == 0:
        raise ValueError("slice step cannot be zero")
    if step < 0:
        if item.start is not None or item.stop is not None:
            raise ValueError(
                f"a slice with a bound Variable takes a negative step only over the whole dim (x[::{step}]), got "
                f"start {item.start!r} and stop {item.stop!r} with step {step}"
            )
        return DimIndex("slice", 0, _stepped_count(size, -step), -step, True, size)
    start = 0 if item.start is None else check_size(item.start, "slice start")
    stop = size if item.stop is None else check_size(item.stop, "slice stop")
    # a negative int counts from the end, as in Python (x[:n][:-1] keeps n - 1 rows); the shrink proves the bounds
    start = cast(int, settle(size + start)) if type(start) is int and start < 0 else start
    stop = cast(int, settle(size + stop)) if type(stop) is int and stop < 0 else stop
    span = stop if type(start) is int and start == 0 else stop - start
    return DimIndex("slice", start, _stepped_count(span, step), step, False, stop)


def _stepped_count(span: int, step: int) -> int:
    # how many elements a slice of `span` elements keeps taking every `step`-th: ceil(span / step)
    return cast(int, settle(span if step == 1 else (span + (step - 1)) // step))


def size_text(size: int) -> str:
    """A dim's size for messages: an int, or a bound Variable expression with its value and its variables' ranges."""
    return str(size) if type(size) is int else f"{format_size(size)} ({describe_variables(size)})"
