"""The scheduler: tensor graphs -> kernels (codegen kernel sinks) and copies, with fusion and buffer planning."""

from kiln.tensor.schedule.cache import ScheduleCache
from kiln.tensor.schedule.items import (
    BufferRef,
    BufferSource,
    BufferSpecification,
    CopyStep,
    InputSlot,
    KernelStep,
    OutputSlot,
    SchedulePlan,
    Step,
)
from kiln.tensor.schedule.normalize import (
    NormalizedGraph,
    alias_base,
    forget_realized_into,
    mark_overwritten,
    normalize,
    padding_hidden,
    realized_view,
    record_realized,
    whole_buffer,
)
from kiln.tensor.schedule.planner import plan_schedule

__all__ = [
    "BufferRef",
    "BufferSource",
    "BufferSpecification",
    "CopyStep",
    "InputSlot",
    "KernelStep",
    "NormalizedGraph",
    "OutputSlot",
    "ScheduleCache",
    "SchedulePlan",
    "Step",
    "alias_base",
    "forget_realized_into",
    "mark_overwritten",
    "normalize",
    "padding_hidden",
    "plan_schedule",
    "realized_view",
    "record_realized",
    "whole_buffer",
]
