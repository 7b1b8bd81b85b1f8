"""The schedule cache: plans keyed by the normalized graph, least recently used first out.

Normalized nodes are hash-consed, so the tuple of a request's normalized nodes (the sources of its SINK) identifies
its structure, and a lookup is one dict probe without building the SINK.

Constants that change from call to call (a fill value, a learning rate, a step count) would make every call a new
structure, a new plan and a new kernel. `varying_constants` remembers, for each structure with its constants taken
out, the constant values it was seen with; the constants that differed between calls are then lifted into
one-element input buffers (`normalize(..., lift=...)`), so later calls share one plan and one kernel.
"""

from __future__ import annotations

from collections import OrderedDict

from kiln.tensor.schedule.items import SchedulePlan
from kiln.tensor.schedule.normalize import ConstKey
from kiln.tensor.schedule.planner import plan_schedule
from kiln.uops import Ops, UOp

_MAX_PLANS = 4096
_MAX_STRUCTURES = 4096
_VARIANTS_KEPT = 4  # constant sets remembered per structure
_plans: OrderedDict[tuple[UOp, ...], SchedulePlan] = OrderedDict()
_variants: OrderedDict[tuple[UOp, ...], list[tuple[ConstKey, ...]]] = OrderedDict()


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
    plan = lookup_plan(roots)
    if plan is not None:
        return plan
    ScheduleCacheInfo.misses += 1
    plan = plan_schedule(UOp(Ops.SINK, src=roots))
    if len(_plans) >= _MAX_PLANS:
        _plans.popitem(last=False)  # the least recently used entry
    _plans[roots] = plan
    return plan


def lookup_plan(roots: tuple[UOp, ...]) -> SchedulePlan | None:
    """The cached plan of the normalized nodes `roots`, or None (counted as a hit only when found)."""
    plan = _plans.get(roots)
    if plan is not None:
        ScheduleCacheInfo.hits += 1
        _plans.move_to_end(roots)
    return plan


def varying_constants(masked_roots: tuple[UOp, ...], constants: tuple[ConstKey, ...]) -> frozenset[int]:
    """The numbers of the constants whose value differed between the calls seen with the structure `masked_roots`
    (normalized with every constant lifted), counting this call with `constants`."""
    seen = _variants.get(masked_roots)
    if seen is None:
        if len(_variants) >= _MAX_STRUCTURES:
            _variants.popitem(last=False)
        seen = _variants[masked_roots] = []
    else:
        _variants.move_to_end(masked_roots)
    if constants not in seen:
        seen.append(constants)
        del seen[:-_VARIANTS_KEPT]
    if len(seen) < 2:
        return frozenset()
    return frozenset(number for number in range(len(constants)) if len({values[number] for values in seen}) > 1)


def cache_sizes() -> dict[str, int]:
    """How many entries each schedule-level cache holds (plans, structures with constant variants)."""
    return {"plans": len(_plans), "structures": len(_variants)}


def clear_schedule_cache() -> None:
    """Forgets every cached plan and resets the hit and miss counts."""
    _plans.clear()
    _variants.clear()
    ScheduleCacheInfo.hits = 0
    ScheduleCacheInfo.misses = 0
