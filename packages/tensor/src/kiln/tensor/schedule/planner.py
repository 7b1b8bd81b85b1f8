"""The scheduler proper: a normalized tensor graph -> a `SchedulePlan` of kernels and copies.

0. Split reductions of very many elements into two stages (split_reduce.py).
1. Decide where buffers must exist ("points") by the graph rules (rules.py `GRAPH_RULES`, in that order): requested
   values that are not already a buffer, CONTIGUOUS, ASSIGN, COPY (and its source), a reduce or costly value read
   through an EXPAND (it would be recomputed for every expanded element), a reduce nested in another reduce. Row
   fusion (row_fusion.py) exempts reduces over short rows from the last two: softmax's max, sum and output stay one
   kernel that loops over each row three times.
2. Build one kernel per point (`KernelBuilder`); everything between points fuses into the kernel that reads it.
   Building reveals what would be recomputed; the kernel rules (`KERNEL_RULES`, then `LAST_RESORT_RULES`) make
   more points (a reduce needed by two kernels or at two index sets, a row-fused reduce the kernel's loops would
   run more than once per value, independent matrix products side by side that cost more together than apart
   (cost.py), a recomputation blow-up), and the kernels are built again until no rule cuts. Every decision is
   recorded (rule, node, decision) for viz.
3. Merge kernels that share their loop shape and do not depend on each other into multi-output kernels (never a
   matrix product that needs its register tile with another product, for the same reason).
4. Order the steps, give every point a buffer (requested: an output buffer; an ASSIGN: its target's buffer;
   the rest: temporaries) and let temporaries with disjoint lifetimes share memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from kiln.tensor.graph import MOVEMENT_OPS, device_of, reshape, shape_of, shrink
from kiln.tensor.schedule.cost import MachineCosts, keeps_its_tile, machine_costs, product_shape
from kiln.tensor.schedule.items import (
    BufferRef,
    BufferSource,
    BufferSpecification,
    CopyStep,
    KernelStep,
    OutputSlot,
    SchedulePlan,
    Step,
)
from kiln.tensor.schedule.kernel_builder import (
    MAX_CONTEXTS,
    MAX_KERNEL_NODES,
    KernelBuilder,
    KernelOutput,
    KernelTooLarge,
    LeafBuffer,
)
from kiln.tensor.schedule.memory_planner import plan_temporaries
from kiln.tensor.schedule.rules import (
    GRAPH_RULES,
    KERNEL_RULES,
    LAST_RESORT_RULES,
    OVERRIDING_RULES,
    BuiltKernel,
    Decision,
    contiguous_base,
    rule_location,
    strip_detach,
    value_node,
)
from kiln.tensor.schedule.split_reduce import split_large_reductions
from kiln.tensor.symbolic import max_numel, unbind
from kiln.uops import Ops, UOp, trace

_MAX_ROUNDS = 64


def _view_base(node: UOp) -> UOp | None:
    # the BUFFER under a chain of movement ops (the target of an ASSIGN, maybe an earlier ASSIGN to it), or None
    while node.op in MOVEMENT_OPS or node.op in (Ops.DETACH, Ops.ASSIGN):
        node = node.src[0]
    return node if node.op is Ops.BUFFER else None


class _Planner:
    def __init__(self, sink: UOp, costs: MachineCosts | None = None) -> None:
        self.machine = costs  # None: each device's own (cost.machine_costs)
        self.sink = split_large_reductions(_drop_bufferless_assigns(sink))
        self.requested = list(self.sink.src)
        self.order = self.sink.toposort()
        self.position = {node: i for i, node in enumerate(self.order)}
        self.points: dict[UOp, None] = {}
        self.reasons: dict[UOp, str] = {}  # why each point is one (the viz trace shows it as a refused fusion)
        self.decisions: list[Decision] = []  # every rule's decisions, in order (for the viz trace)
        self.kept: set[tuple[str, UOp]] = set()
        # values read through an expand left in their readers by row fusion: the reason they would be a point, and
        # the reduces they hold (if a built kernel would recompute one, the value becomes a point after all)
        self.row_fused: dict[UOp, tuple[str, frozenset[UOp]]] = {}

    def mark(self, node: UOp, reason: str, rule: str) -> None:
        """Make `node` a point (its value gets a buffer), remembering the first reason."""
        self.points[node] = None
        self.reasons.setdefault(node, reason)
        self.decisions.append(Decision(rule, node, reason))

    def keep(self, node: UOp, reason: str, rule: str) -> None:
        """Record that `node` stays fused in its readers although `reason` would cut it (once per rule and node: the
        kernel rules run again after every round of cuts)."""
        if (rule, node) not in self.kept:
            self.kept.add((rule, node))
            self.decisions.append(Decision(rule, node, reason, cut=False))

    def costs(self, node: UOp) -> MachineCosts:
        """The machine parameters that price the kernels computing `node`: the plan's, else its device's."""
        return self.machine if self.machine is not None else machine_costs(device_of(node))

    def is_boundary(self, node: UOp) -> bool:
        """Whether a kernel reading `node` loads it (a point, a buffer, a constant or a device)."""
        return node in self.points or node.op in (Ops.BUFFER, Ops.CONST, Ops.DEVICE)

    def subtree(self, node: UOp) -> Iterable[UOp]:
        """The nodes a kernel computing `node` evaluates (down to points and sources)."""
        return node.toposort(gate=lambda n: n is node or not self.is_boundary(n))

    # -- step 1 -----------------------------------------------------------------------------------------------------
    def initial_points(self) -> None:
        for rule in GRAPH_RULES:
            rule(self)

    # -- step 2 -----------------------------------------------------------------------------------------------------
    def computed_points(self) -> list[UOp]:
        """Points computed by kernels, in graph order."""
        ordered = sorted(self.points, key=self.position.__getitem__)
        return [p for p in ordered if p.op is not Ops.COPY and max_numel(shape_of(p)) > 0]

    def build_kernel(self, members: list[UOp], refs: dict[UOp, BufferRef]) -> BuiltKernel:
        member_set = set(members)
        leaves: dict[UOp, LeafBuffer] = {}
        for node in self.order:
            if node.op is Ops.BUFFER:
                leaves[node] = LeafBuffer(refs[node], (node.arg.size,), node.arg.size, node.dtype)
            elif node in self.points and node not in member_set and node.op is not Ops.ASSIGN:
                shape = shape_of(node)
                leaves[node] = LeafBuffer(refs[node], shape, max_numel(shape), node.dtype)
        assigns = frozenset(p for p in self.points if p.op is Ops.ASSIGN and p not in member_set)
        builder = KernelBuilder(leaves, assigns)
        outputs = []
        for member in members:
            shape = shape_of(member)
            target = member.src[0] if member.op is Ops.ASSIGN else None
            size = target_base_size(member) if target is not None else max_numel(shape)
            outputs.append(KernelOutput(member, value_node(member), refs[member], shape, size, target))
        try:
            ast = builder.build(outputs)
        except KernelTooLarge as too_large:
            return BuiltKernel(members, None, too_large.stats, builder.slots, device_of(members[0]))
        return BuiltKernel(members, ast, builder.stats, builder.slots, device_of(members[0]))

    def find_recomputation(self, kernels: list[BuiltKernel]) -> dict[UOp, tuple[str, str]]:
        """Nodes that should get a buffer because kernels would recompute them, with the reason and the rule (the
        first rule's, or an overriding rule's): the kernel rules' cuts, else the last resort's."""
        for table in (KERNEL_RULES, LAST_RESORT_RULES):
            found: dict[UOp, tuple[str, str]] = {}
            for rule in table:
                for node, why in rule(self, kernels):
                    if rule in OVERRIDING_RULES:
                        found[node] = (why, rule.__name__)
                    else:
                        found.setdefault(node, (why, rule.__name__))
            if found:
                return found
        return {}

    # -- steps 3 and 4 ----------------------------------------------------------------------------------------------
    def assign_refs(self) -> tuple[dict[UOp, BufferRef], list[BufferSpecification], list[BufferSpecification]]:
        refs: dict[UOp, BufferRef] = {}
        outputs: list[BufferSpecification] = []
        temporaries: list[BufferSpecification] = []
        for node in self.order:
            if node.op is Ops.BUFFER:
                refs[node] = BufferRef(BufferSource.INPUT, node.arg.position)
        requested = {strip_detach(node) for node in self.requested}
        for point in sorted(self.points, key=self.position.__getitem__):
            shape = shape_of(point)
            if point.op is Ops.ASSIGN:
                base = _view_base(point.src[0])
                assert base is not None
                refs[point] = refs[base]
                continue
            spec = BufferSpecification(max_numel(shape), point.dtype, device_of(point))
            if point in requested:
                refs[point] = BufferRef(BufferSource.OUTPUT, len(outputs))
                outputs.append(spec)
            else:
                refs[point] = BufferRef(BufferSource.TEMPORARY, len(temporaries))
                temporaries.append(spec)
        return refs, outputs, temporaries

    def view_of(self, node: UOp, refs: dict[UOp, BufferRef], outputs: list[BufferSpecification]) -> UOp:
        stripped = strip_detach(node)
        if stripped.op is Ops.ASSIGN:
            return _target_view(stripped.src[0])
        if stripped not in self.points:
            while stripped.op in (Ops.DETACH, Ops.CONTIGUOUS):
                stripped = stripped.src[0]
            return stripped
        ref = refs[stripped]
        spec = outputs[ref.number]
        buffer = UOp(Ops.BUFFER, stripped.dtype, (), OutputSlot(ref.number, spec.size, spec.device))
        shape = shape_of(stripped)
        count = math.prod(shape)
        if not isinstance(count, int):  # symbolic: the bound elements lead a buffer sized for the largest value
            buffer = shrink(buffer, ((0, count),))
        return reshape(buffer, shape)


def _target_view(node: UOp) -> UOp:
    # an ASSIGN target as a plain view of its buffer: earlier ASSIGNs to the same buffer are that buffer
    movements = []
    while node.op is not Ops.BUFFER:
        if node.op in MOVEMENT_OPS:
            movements.append(node)
        node = node.src[0]
    for movement in reversed(movements):
        node = movement.replace(src=(node,))
    return node


def target_base_size(assign: UOp) -> int:
    """Elements of the buffer an ASSIGN writes into."""
    base = _view_base(assign.src[0])
    assert base is not None
    return int(base.arg.size)


def _drop_bufferless_assigns(sink: UOp) -> UOp:
    # assigning to a tensor that never had a buffer just gives it the value
    replace = {n: n.src[1] for n in sink.toposort() if n.op is Ops.ASSIGN and _view_base(n.src[0]) is None}
    return sink.substitute(replace) if replace else sink


# a multi-output kernel reads at most this many buffers: merging siblings saves launches, but a kernel with very many
# inputs (a cat of thousands of tensors cut into groups) compiles in time that grows faster than its size
_MAX_MERGED_INPUTS = 64


def _group_kernels(planner: _Planner, kernels: dict[UOp, BuiltKernel]) -> list[list[UOp]]:
    """Members of each multi-output kernel: same device and loop shape, no ASSIGN, and merging creates no cycle.

    Points are visited in graph order, so everything a point reads is grouped already; a point joins a group only if
    no group it reads from (directly or through other groups) depends on that group.
    """
    groups: list[list[UOp]] = []
    group_of: dict[UOp, int] = {}
    needs: list[set[int]] = []
    inputs: list[int] = []  # buffers each group's kernel reads (an upper bound: leaves counted once per member)
    # whether each group computes a matrix product, and whether one that needs its register tile (cost.keeps_its_tile:
    # two products sharing a kernel get none): such a product never shares a group with another product
    products: list[bool] = []
    tiled: list[bool] = []

    def reads(point: UOp) -> set[UOp]:
        if point.op is Ops.COPY:
            source = strip_detach(point.src[0])
            return {source} if source in planner.points else set()
        kernel = kernels.get(point)
        return set() if kernel is None else {leaf for leaf in kernel.stats.leaves if leaf in planner.points}

    def reaches(starts: set[int], target: int) -> bool:
        stack, seen = list(starts), set(starts)
        while stack:
            current = stack.pop()
            if current == target:
                return True
            for parent in needs[current] - seen:
                seen.add(parent)
                stack.append(parent)
        return False

    for point in sorted(planner.points, key=planner.position.__getitem__):
        depends = {group_of[leaf] for leaf in reads(point) if leaf is not point}
        shapes = [] if point not in kernels else [product_shape(r) for r in kernels[point].stats.reduces]
        found = [shape for shape in shapes if shape is not None]
        product = bool(found)
        needs_tile = any(keeps_its_tile(shape, planner.costs(point)) for shape in found)
        chosen = None
        if point in kernels and point.op is not Ops.ASSIGN:
            for number, group in enumerate(groups):
                first = group[0]
                if (
                    first in kernels
                    and first.op is not Ops.ASSIGN
                    and shape_of(first) == shape_of(point)
                    and kernels[first].device == kernels[point].device
                    and inputs[number] + len(kernels[point].stats.leaves) <= _MAX_MERGED_INPUTS
                    and not (product and products[number] and (needs_tile or tiled[number]))
                    and not reaches(depends, number)
                ):
                    chosen = number
                    break
        if chosen is None:
            groups.append([point])
            needs.append(set())
            inputs.append(0)
            products.append(False)
            tiled.append(False)
            chosen = len(groups) - 1
        else:
            groups[chosen].append(point)
        products[chosen] = products[chosen] or product
        tiled[chosen] = tiled[chosen] or needs_tile
        kernel = kernels.get(point)
        inputs[chosen] += 0 if kernel is None else len(kernel.stats.leaves)
        group_of[point] = chosen
        needs[chosen] |= depends
    return [group for group in groups if group[0] in kernels]


def plan_schedule(sink: UOp, costs: MachineCosts | None = None) -> SchedulePlan:
    """The plan that computes every source of `sink` (a SINK of normalized tensor-graph nodes), its trade-offs
    priced by `costs` (default: each device's `cost.machine_costs`)."""
    planner = _Planner(sink, costs)
    planner.initial_points()
    for _ in range(_MAX_ROUNDS):
        refs, outputs, temporaries = planner.assign_refs()
        kernels = {p: planner.build_kernel([p], refs) for p in planner.computed_points()}
        found = planner.find_recomputation(list(kernels.values()))
        extra = {node: decided for node, decided in found.items() if node not in planner.points}
        if not extra:
            break
        for node, (why, rule) in extra.items():
            planner.mark(node, why, rule)
    if any(kernel.ast is None for kernel in kernels.values()):
        raise RuntimeError(
            f"the scheduler could not split a kernel whose value graph exceeds {MAX_KERNEL_NODES} nodes or needs a "
            f"node at more than {MAX_CONTEXTS} index sets; realize() or .contiguous() part of the graph first"
        )
    groups = _group_kernels(planner, kernels)
    merged: dict[UOp, BuiltKernel] = {}
    for group in groups:
        kernel = kernels[group[0]] if len(group) == 1 else planner.build_kernel(group, refs)
        for member in group:
            merged[member] = kernel
    steps = _order_steps(planner, merged, refs)
    views = tuple(planner.view_of(node, refs, outputs) for node in planner.requested)
    slots, slot_bytes = plan_temporaries(steps, temporaries)
    written = tuple(sorted({refs[p].number for p in planner.points if p.op is Ops.ASSIGN}))
    if trace.STATE.enabled:
        record_schedule(planner, groups, merged)
    return SchedulePlan(tuple(steps), tuple(outputs), tuple(temporaries), slots, slot_bytes, views, written)


@dataclass
class _Unit:
    position: int
    step: Step
    produces: set[UOp]
    needs: set[UOp]
    reads: set[UOp]


def _order_steps(planner: _Planner, kernels: dict[UOp, BuiltKernel], refs: dict[UOp, BufferRef]) -> list[Step]:
    """Kernels and copies in an order that respects every dependency; reads of a buffer run before an ASSIGN that
    overwrites it."""
    units: list[_Unit] = []
    seen: set[int] = set()
    for point in sorted(planner.points, key=planner.position.__getitem__):
        if point.op is Ops.COPY:
            source = strip_detach(point.src[0])
            if source in planner.points:
                units.append(
                    _Unit(planner.position[point], CopyStep(refs[point], refs[source]), {point}, {source}, set())
                )
            else:
                base = contiguous_base(source)
                assert base is not None
                units.append(_Unit(planner.position[point], CopyStep(refs[point], refs[base]), {point}, set(), {base}))
            continue
        kernel = kernels.get(point)
        if kernel is None or id(kernel) in seen:
            continue
        seen.add(id(kernel))
        assert kernel.ast is not None, "plan_schedule stops before ordering a kernel that failed to build"
        step = _kernel_step(kernel.ast, kernel.device, tuple(kernel.slots))
        # an empty point has no kernel (nothing to compute); a kernel reading it loops over no elements of it
        needs = {leaf for leaf in kernel.stats.leaves if leaf in planner.points and max_numel(shape_of(leaf)) > 0}
        needs -= set(kernel.members)
        reads = {leaf for leaf in kernel.stats.leaves if leaf.op is Ops.BUFFER}
        units.append(_Unit(planner.position[point], step, set(kernel.members), needs, reads))
    producer = {node: number for number, unit in enumerate(units) for node in unit.produces}
    edges: dict[int, set[int]] = {number: {producer[need] for need in unit.needs} for number, unit in enumerate(units)}
    ancestors = _ancestors(edges)
    for number, unit in enumerate(units):
        added = False
        for node in unit.produces:
            base = _view_base(node.src[0]) if node.op is Ops.ASSIGN else None
            if base is None:
                continue
            # A reader that (transitively) needs this ASSIGN reads the new value; every other reader must run first.
            # Giving the ASSIGN new parents never changes which units need it, so the ancestor sets (bit masks) stay
            # valid for that question until the next ASSIGN; edges the ASSIGN already implies are not added.
            for reader, other in enumerate(units):
                if reader == number or base not in other.reads or ancestors[reader] >> number & 1:
                    continue
                if not ancestors[number] >> reader & 1:
                    edges[number].add(reader)
                    added = True
        if added:
            ancestors = _ancestors(edges)
    return [units[number].step for number in _topological(edges, [unit.position for unit in units])]


def _ancestors(edges: dict[int, set[int]]) -> dict[int, int]:
    """For every unit, the units it needs directly or through others, as a bit mask (bit n: unit n)."""
    masks: dict[int, int] = {}
    for root in edges:
        if root in masks:
            continue
        path, on_path = [(root, iter(edges[root]))], {root}  # depth-first, iteratively: chains can be long
        while path:
            current, parents = path[-1]
            parent = next((p for p in parents if p not in masks), None)
            if parent is not None:
                if parent in on_path:
                    raise RuntimeError("the schedule has a dependency cycle (an ASSIGN reads and writes one buffer?)")
                path.append((parent, iter(edges[parent])))
                on_path.add(parent)
                continue
            mask = 0
            for done in edges[current]:
                mask |= masks[done] | 1 << done
            masks[current] = mask
            on_path.discard(current)
            path.pop()
    return masks


def _topological(edges: dict[int, set[int]], priority: list[int]) -> list[int]:
    # Kahn's algorithm, ties broken by graph position so the order is deterministic
    remaining = {number: set(parents) for number, parents in edges.items()}
    order: list[int] = []
    while remaining:
        ready = [number for number, parents in remaining.items() if not parents]
        if not ready:
            raise RuntimeError("the schedule has a dependency cycle (an ASSIGN reads and writes one buffer?)")
        chosen = min(ready, key=lambda number: priority[number])
        order.append(chosen)
        del remaining[chosen]
        for parents in remaining.values():
            parents.discard(chosen)
    return order


_MAX_LISTED_OPS = 64  # fused ops listed per kernel in the trace


def record_schedule(planner: _Planner, groups: list[list[UOp]], kernels: dict[UOp, BuiltKernel]) -> None:
    """Record the scheduler's decisions in the viz trace: per kernel its outputs, the tensor ops fused into it, and
    for each output why it is a kernel boundary (why it was not fused into its readers)."""
    entries = []
    asts = []
    for group in groups:
        kernel = kernels[group[0]]
        if kernel.ast is None:
            continue
        fused: list[str] = []
        count = 0
        for member in group:
            for node in planner.subtree(value_node(member)):
                if node.op in (Ops.BUFFER, Ops.CONST, Ops.DEVICE) or (node in planner.points and node not in group):
                    continue
                count += 1
                if len(fused) < _MAX_LISTED_OPS:
                    shape = shape_of(node) if node.op is not Ops.SINK else ()
                    fused.append(f"{node.op.name} {tuple(shape)} {node.dtype}")
        outputs = [
            {"op": member.op.name, "shape": list(shape_of(member)), "reason": planner.reasons.get(member, "")}
            for member in group
        ]
        entries.append({"device": kernel.device, "outputs": outputs, "fused_ops": fused, "fused_count": count})
        asts.append(kernel.ast)
    if not entries:
        return
    with trace.trace_group("schedule", f"schedule of {len(entries)} kernels") as record:
        if record is not None:
            record.info["kernels"] = entries
            record.uops["kernels"] = asts
            # every rule's decisions in order: the node (the group's `decided` graphs, by index), the rule's name and
            # its function ("file:line", as codegen's rewrite steps say), the decision in words (with the costs it
            # compared), and whether the node got a buffer
            record.info["decisions"] = [
                {
                    "rule": rule,
                    "location": rule_location(rule),
                    "node": number,
                    "description": f"{node.op.name} {tuple(shape_of(node))} {node.dtype}",
                    "decision": decision,
                    "cut": cut,
                }
                for number, (rule, node, decision, cut) in enumerate(planner.decisions)
            ]
            record.uops["decided"] = [decision.node for decision in planner.decisions]


def _kernel_step(ast: UOp, device: str, slots: tuple[BufferRef, ...]) -> KernelStep:
    """The step of one kernel; a kernel over bound variables runs its unbound program with their values."""
    if not any(node.op is Ops.BIND for node in ast.toposort()):
        return KernelStep(ast, device, slots)
    unbound, var_vals = unbind(ast)
    return KernelStep(unbound, device, slots, var_vals)
