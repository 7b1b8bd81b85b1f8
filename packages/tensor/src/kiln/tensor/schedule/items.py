"""The schedule's data: where each buffer of a step comes from, kernel and copy steps, and the whole plan."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace

from kiln.tensor.symbolic import graph_rebind
from kiln.uops import DType, UOp


class BufferSource(enum.Enum):
    """Where a buffer a step uses comes from."""

    INPUT = enum.auto()  # a buffer that existed before the schedule (a realized tensor), by input position
    OUTPUT = enum.auto()  # a new buffer that outlives the schedule (a requested tensor), by output buffer number
    TEMPORARY = enum.auto()  # an intermediate buffer that dies with the schedule, by temporary number


@dataclass(frozen=True)
class BufferRef:
    """One buffer of a step: its `source` and its number there."""

    source: BufferSource
    number: int


@dataclass(frozen=True)
class BufferSpecification:
    """Size (elements), dtype and device of a buffer the schedule creates."""

    size: int
    dtype: DType
    device: str

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer."""
        return self.size * self.dtype.itemsize


@dataclass(frozen=True)
class KernelStep:
    """Run the kernel `ast` (a codegen kernel sink) on `device` with `buffers` bound to its DEFINE_GLOBAL slots.

    `var_vals`: for a kernel over symbolic sizes, the value of each of its variables by name (the `ast` holds the
    bare DEFINE_VARs, so one compiled program serves every value); None for a kernel without variables.
    """

    ast: UOp
    device: str
    buffers: tuple[BufferRef, ...]
    var_vals: dict[str, int] | None = None


@dataclass(frozen=True)
class CopyStep:
    """Copy buffer `source` into buffer `destination` (between devices)."""

    destination: BufferRef
    source: BufferRef


Step = KernelStep | CopyStep


@dataclass(frozen=True)
class SchedulePlan:
    """A schedule independent of the concrete input buffers (what the schedule cache stores).

    steps            kernels and copies in execution order
    outputs          the buffers each OUTPUT number is created as
    temporaries      the buffers each TEMPORARY number is created as
    temporary_slots  the memory slot each temporary lives in (temporaries with disjoint lifetimes share one slot)
    slot_bytes       the size of each slot in bytes
    views            for each requested node, its realized value: a graph of movement ops over BUFFER nodes whose
                     arg is an `InputSlot` (input position) or an `OutputSlot` (output number)
    written_inputs   input positions whose buffers ASSIGN steps overwrite
    """

    steps: tuple[Step, ...]
    outputs: tuple[BufferSpecification, ...]
    temporaries: tuple[BufferSpecification, ...]
    temporary_slots: tuple[int, ...]
    slot_bytes: tuple[int, ...]
    views: tuple[UOp, ...]
    written_inputs: tuple[int, ...] = ()

    def rebound(self, values: Mapping[str, int]) -> SchedulePlan:
        """This plan for other values of its variables (a plan of a graph over bound Variables, by name in
        `values`): the kernels, buffers and memory slots are the same (sized for the largest values), only the
        kernels' `var_vals` and the views' bound sizes change."""
        steps = tuple(
            replace(step, var_vals={name: values[name] for name in step.var_vals})
            if isinstance(step, KernelStep) and step.var_vals
            else step
            for step in self.steps
        )
        return replace(self, steps=steps, views=graph_rebind(self.views, values))

    @property
    def kernel_count(self) -> int:
        """The number of kernels the plan runs."""
        return sum(isinstance(step, KernelStep) for step in self.steps)


@dataclass(frozen=True)
class InputSlot:
    """BUFFER payload in a normalized graph: the `position`-th input buffer (size and device kept for shapes)."""

    position: int
    size: int
    device: str


@dataclass(frozen=True)
class OutputSlot:
    """BUFFER payload in a plan's views: the `number`-th output buffer the plan creates."""

    number: int
    size: int
    device: str
