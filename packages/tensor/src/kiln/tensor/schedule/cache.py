"""The schedule cache: plans keyed by the normalized graph.

Normalized nodes are hash-consed, so the tuple of a request's normalized nodes (the sources of its SINK) identifies
its structure, and a lookup is one dict probe without building the SINK.
"""

from __future__ import annotations

from kiln.tensor.schedule.items import SchedulePlan
from kiln.tensor.schedule.planner import plan_schedule
from kiln.uops import Ops, UOp

_MAX_PLANS = 4096
_plans: dict[tuple[UOp, ...], SchedulePlan] = {}


class ScheduleCacheInfo:
    """Hit and miss counts of the schedule cache since the last `clear_schedule_cache()`."""

    hits = 0
    misses = 0


def cached_plan(sink: UOp) -> SchedulePlan:
    """The plan of normalized SINK `sink`, computed once per structure."""
    if sink.op is not Ops.SINK:
        raise TypeError(f"cached_plan takes the SINK of a normalized graph, got {sink.op!r}")
    return cached_plan_of(sink.src)


def cached_plan_of(roots: tuple[UOp, ...]) -> SchedulePlan:
    """The plan of the normalized nodes `roots` (`NormalizedGraph.roots`), computed once per structure."""
    plan = _plans.get(roots)
    if plan is not None:
        ScheduleCacheInfo.hits += 1
        return plan
    ScheduleCacheInfo.misses += 1
    plan = plan_schedule(UOp(Ops.SINK, src=roots))
    if len(_plans) >= _MAX_PLANS:
        del _plans[next(iter(_plans))]  # the oldest entry
    _plans[roots] = plan
    return plan


def clear_schedule_cache() -> None:
    """Forgets every cached plan and resets the hit and miss counts."""
    _plans.clear()
    ScheduleCacheInfo.hits = 0
    ScheduleCacheInfo.misses = 0
