"""The schedule cache: plans keyed by the normalized graph (a hash-consed SINK, so a lookup is one dict probe)."""

from __future__ import annotations

from kiln.tensor.schedule.items import SchedulePlan
from kiln.tensor.schedule.planner import plan_schedule
from kiln.uops import UOp

_MAX_PLANS = 4096
_plans: dict[UOp, SchedulePlan] = {}


class ScheduleCacheInfo:
    """Hit and miss counts of the schedule cache since the last `clear_schedule_cache()`."""

    hits = 0
    misses = 0


def cached_plan(sink: UOp) -> SchedulePlan:
    """The plan of normalized SINK `sink`, computed once per structure."""
    plan = _plans.get(sink)
    if plan is not None:
        ScheduleCacheInfo.hits += 1
        return plan
    ScheduleCacheInfo.misses += 1
    plan = plan_schedule(sink)
    if len(_plans) >= _MAX_PLANS:
        del _plans[next(iter(_plans))]  # the oldest entry
    _plans[sink] = plan
    return plan


def clear_schedule_cache() -> None:
    """Forgets every cached plan and resets the hit and miss counts."""
    _plans.clear()
    ScheduleCacheInfo.hits = 0
    ScheduleCacheInfo.misses = 0
