"""`ScheduleCache`: plans keyed by the normalized graph, least recently used first out (one per realize `Engine`).

Normalized nodes are hash-consed, so the tuple of a request's normalized nodes (the sources of its SINK) identifies
its structure, and a lookup is one dict probe without building the SINK.

Constants that change from call to call (a fill value, a learning rate, a step count) would make every call a new
structure, a new plan and a new kernel. `varying_constants` remembers, for each structure with its constants taken
out, the constant values it was seen with; the constants that differed between calls are then lifted into
one-element input buffers (`normalize(..., lift=...)`), so later calls share one plan and one kernel.

A graph over bound Variables (`x[:n]`) normalizes to other roots for each value of `n`, but its plan does not depend
on the values: the kernels are compiled unbound and buffers are sized for the largest values. Plans are therefore
also kept by the graph's unbound structure (`graph_unbind`); a new value finds the plan made for another one and
takes it with its own values (`SchedulePlan.rebound`: the kernels' var_vals and the views' sizes), without planning.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from kiln.tensor.schedule.items import SchedulePlan
from kiln.tensor.schedule.normalize import (
    ConstKey,
    PlaceholderMemo,
    StructureKey,
    StructureNumbering,
    StructureWalk,
    normalize,
    normalize_shallow,
    walk_structure,
)
from kiln.tensor.schedule.planner import plan_schedule
from kiln.tensor.symbolic import graph_unbind
from kiln.uops import Ops, UOp

__all__ = ["ScheduleCache"]

_Unbound = tuple[tuple[UOp, ...], dict[str, int]] | None


def _lift_all(number: int) -> bool:
    return True


def _holds_size(arg: object) -> bool:
    # a tensor-graph arg holds symbolic sizes only as UOps inside (nested) tuples: (n, 4), ((0, n), (0, 4))
    if type(arg) is not tuple:
        return False
    return any(isinstance(entry, UOp) or (type(entry) is tuple and _holds_size(entry)) for entry in arg)


class ScheduleCache:
    """Schedule plans by normalized structure, and the constant values each structure was seen with.

    Attributes:
        hits, misses: lookups that found a plan / had to plan, since construction or the last `clear()`.
        rebinds: plans taken from the plan of the same graph with other values of its Variables (no planning).
        max_plans, max_structures: the least recently used entries beyond these are forgotten.
        variants_kept: how many constant sets are remembered per structure.
    """

    def __init__(self, max_plans: int = 4096, max_structures: int = 4096, variants_kept: int = 4) -> None:
        self.max_plans, self.max_structures, self.variants_kept = max_plans, max_structures, variants_kept
        self._plans: OrderedDict[tuple[UOp, ...], SchedulePlan] = OrderedDict()
        self._variants: OrderedDict[tuple[UOp, ...], list[tuple[ConstKey, ...]]] = OrderedDict()
        # plans by `structure_key`: found without normalizing (only plans of graphs normalized without lifting)
        self._keyed: OrderedDict[tuple[object, ...], SchedulePlan] = OrderedDict()
        # plans by the unbound structure of a graph over bound Variables (`graph_unbind`): serve every value
        self._unbound: OrderedDict[tuple[UOp, ...], SchedulePlan] = OrderedDict()
        self.numbering = StructureNumbering()
        self.placeholders: PlaceholderMemo = {}  # input placeholder nodes for `normalize`
        self.hits = 0
        self.misses = 0
        self.rebinds = 0

    def __repr__(self) -> str:
        return f"<ScheduleCache {len(self._plans)} plans, {self.hits} hits, {self.misses} misses>"

    def plan(self, sink: UOp) -> SchedulePlan:
        """The plan of normalized SINK `sink`, computed once per structure."""
        if not isinstance(sink, UOp) or sink.op is not Ops.SINK:
            raise TypeError(f"ScheduleCache.plan takes the SINK of a normalized graph, got {sink!r:.80}")
        return self.plan_of(sink.src)

    def plan_of(self, roots: tuple[UOp, ...]) -> SchedulePlan:
        """The plan of the normalized nodes `roots` (`NormalizedGraph.roots`), computed once per structure."""
        plan = self.lookup(roots) or self.lookup_rebound(roots)
        return plan if plan is not None else self._plan_new(roots, graph_unbind(roots))

    def _plan_new(self, roots: tuple[UOp, ...], unbound: _Unbound) -> SchedulePlan:
        # plans a structure seen neither bound nor unbound; `unbound`: `graph_unbind(roots)`
        self.misses += 1
        plan = plan_schedule(UOp(Ops.SINK, src=roots))
        if unbound is not None:
            _keep(self._unbound, unbound[0], plan, self.max_plans)
        _keep(self._plans, roots, plan, self.max_plans)
        return plan

    def lookup_rebound(self, roots: tuple[UOp, ...]) -> SchedulePlan | None:
        """The plan of the normalized nodes `roots` taken from the plan of the same graph at other values of its
        Variables (counted in `rebinds`, and remembered for `roots`), or None."""
        if not self._unbound:
            return None
        return self._lookup_unbound(roots, graph_unbind(roots))

    def _lookup_unbound(self, roots: tuple[UOp, ...], unbound: _Unbound) -> SchedulePlan | None:
        # `lookup_rebound` with `unbound` = `graph_unbind(roots)` known
        general = self._unbound.get(unbound[0]) if unbound is not None else None
        if unbound is None or general is None:
            return None
        self.rebinds += 1
        self._unbound.move_to_end(unbound[0])
        plan = general.rebound(unbound[1])
        _keep(self._plans, roots, plan, self.max_plans)
        return plan

    def _found(self, table: OrderedDict[Any, SchedulePlan], key: object) -> SchedulePlan | None:
        # the plan under `key` in one of the LRU tables, made the most recently used and counted as a hit; or None
        plan = table.get(key)
        if plan is not None:
            self.hits += 1
            table.move_to_end(key)
        return plan

    def lookup(self, roots: tuple[UOp, ...]) -> SchedulePlan | None:
        """The cached plan of the normalized nodes `roots`, or None (counted as a hit only when found)."""
        return self._found(self._plans, roots)

    def structure_key(self, uops: Sequence[UOp]) -> StructureKey | None:
        """`structure_key(uops)` in this cache's numbering (see `walk`)."""
        walk = self.walk(uops)
        return None if walk is None else StructureKey(walk.key, walk.inputs)

    def walk(self, uops: Sequence[UOp]) -> StructureWalk | None:
        """`walk_structure(uops)` in this cache's numbering; a numbering grown past its limit starts again, and the
        plans remembered by its keys are forgotten with it (a key of the old numbering could mean another graph)."""
        if len(self.numbering.numbers) > self.numbering.limit:
            self.numbering.clear()
            self._keyed.clear()
        return walk_structure(uops, self.numbering)

    def resolve(self, uops: Sequence[UOp]) -> tuple[SchedulePlan, tuple[UOp, ...]]:
        """The plan that realizes `uops` and the BUFFER node of each of its input positions: found by structure, or
        planned (then remembered), with the constants that varied between calls lifted into inputs.

        The usual op (one node over buffers and constants) normalizes cheaply. A larger graph is walked once
        (`StructureWalk`): its key finds a plan seen before without building a node (a @ b with b (1024, 16):
        36 -> 16 us); on a miss the normalized forms, with and without lifted constants, are built from that walk's
        nodes instead of walking the graph again, and a graph whose sizes hold no variable skips `graph_unbind`.
        """
        memo = self.placeholders
        walk = None
        normalized = normalize_shallow(uops[0], memo) if len(uops) == 1 else None
        if normalized is None:
            walk = self.walk(uops)
            if walk is None:  # a buffer was overwritten: normalize raises the error naming it
                normalized = normalize(uops, placeholders=memo)
            else:
                found = self.lookup_key(walk.key)
                if found is not None:
                    return found, walk.inputs
                normalized = walk.normalized(placeholders=memo)
        # a graph over bound Variables seen at other values takes that plan before any constant is lifted
        plan = self.lookup(normalized.roots)
        lifted = False
        if plan is None:
            symbolic = walk is None or any(_holds_size(node.arg) for node in walk.order)
            unbound = graph_unbind(normalized.roots) if symbolic else None
            plan = self._lookup_unbound(normalized.roots, unbound)
        if plan is None:
            masked = walk.normalized(_lift_all, memo) if walk is not None else normalize(uops, _lift_all, memo)
            masked_roots = masked.roots
            if symbolic:
                masked_unbound = graph_unbind(masked_roots)
                masked_roots = masked_unbound[0] if masked_unbound is not None else masked_roots
            varying = self._varying(masked_roots, masked.constants)
            if varying:
                if walk is not None:
                    normalized = walk.normalized(varying.__contains__, memo)
                else:
                    normalized = normalize(uops, varying.__contains__, memo)
                lifted = True
                unbound = graph_unbind(normalized.roots) if symbolic else None
                plan = self.lookup(normalized.roots) or self._lookup_unbound(normalized.roots, unbound)
            if plan is None:
                plan = self._plan_new(normalized.roots, unbound)
        if walk is not None and not lifted:
            self.remember_key(walk.key, plan)
        return plan, normalized.inputs

    def lookup_key(self, key: tuple[object, ...]) -> SchedulePlan | None:
        """The plan remembered for `StructureKey.key` `key`, or None (counted as a hit only when found)."""
        return self._found(self._keyed, key)

    def remember_key(self, key: tuple[object, ...], plan: SchedulePlan) -> None:
        """Remembers `plan` for `key`: the plan of the graph that key was made of, normalized without lifting."""
        _keep(self._keyed, key, plan, self.max_plans)

    def varying_constants(self, masked_roots: tuple[UOp, ...], constants: tuple[ConstKey, ...]) -> frozenset[int]:
        """The numbers of the constants whose value differed between the calls seen with the structure
        `masked_roots` (normalized with every constant lifted), counting this call with `constants`.

        A structure over bound Variables is taken without their values, so a constant that changes together with a
        variable's value is still seen to vary (and is lifted: one kernel for both)."""
        unbound = graph_unbind(masked_roots)
        return self._varying(unbound[0] if unbound is not None else masked_roots, constants)

    def _varying(self, masked_roots: tuple[UOp, ...], constants: tuple[ConstKey, ...]) -> frozenset[int]:
        # `varying_constants` with the Variables' values already taken out of `masked_roots`
        seen = self._variants.get(masked_roots)
        if seen is None:
            if len(self._variants) >= self.max_structures:
                self._variants.popitem(last=False)
            seen = self._variants[masked_roots] = []
        else:
            self._variants.move_to_end(masked_roots)
        if constants not in seen:
            seen.append(constants)
            del seen[: -self.variants_kept]
        # A one-element input buffer and a lifted constant get the same placeholder node, so one masked structure
        # can come with different numbers of constants (x[1] + c and c0 + c1): compare only calls with as many.
        alike = [values for values in seen if len(values) == len(constants)]
        if len(alike) < 2:
            return frozenset()
        return frozenset(n for n in range(len(constants)) if len({values[n] for values in alike}) > 1)

    def sizes(self) -> dict[str, int]:
        """How many entries each part holds (plans, structures with constant variants, plans by structure key)."""
        return {
            "plans": len(self._plans),
            "structures": len(self._variants),
            "keyed_plans": len(self._keyed),
            "unbound_plans": len(self._unbound),
        }

    def clear(self) -> None:
        """Forgets every plan and constant variant and resets the hit and miss counts."""
        self._plans.clear()
        self._variants.clear()
        self._keyed.clear()
        self._unbound.clear()
        self.numbering.clear()
        self.placeholders.clear()
        self.hits = 0
        self.misses = 0
        self.rebinds = 0


def _keep(table: OrderedDict[Any, SchedulePlan], key: object, plan: SchedulePlan, limit: int) -> None:
    """Puts `plan` under `key` in an LRU table of at most `limit` plans (the least recently used entry first out)."""
    if len(table) >= limit:
        table.popitem(last=False)
    table[key] = plan
