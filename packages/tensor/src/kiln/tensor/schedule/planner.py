"""The scheduler proper: a normalized tensor graph -> a `SchedulePlan` of kernels and copies.

0. Split reductions of very many elements into two stages (split_reduce.py).
1. Decide where buffers must exist ("points"): requested values that are not already a buffer, CONTIGUOUS, COPY
   (and its source), ASSIGN, a reduce or costly value read through an EXPAND (it would be recomputed for every
   expanded element), a reduce nested in another reduce. Row fusion (row_fusion.py) exempts reduces over short
   rows from the last two: softmax's max, sum and output stay one kernel that loops over each row three times.
2. Build one kernel per point (`KernelBuilder`); everything between points fuses into the kernel that reads it.
   Building reveals what would be recomputed: a reduce needed by two kernels or at two index sets, a row-fused
   reduce the kernel's loops would run more than once per value (a column reduce read back over the rows) or
   inside another reduce's loop, or a node needed at many index sets (a recomputation blow-up), becomes a point
   too, and the kernels are built again. So do two or more large matrix products one kernel would hold side by side
   (a llama MLP's silu(x @ w1.T) * (x @ w3.T)): together they get no register tile.
3. Merge kernels that share their loop shape and do not depend on each other into multi-output kernels (never two
   large matrix products, for the same reason).
4. Order the steps, give every point a buffer (requested: an output buffer; an ASSIGN: its target's buffer;
   the rest: temporaries) and let temporaries with disjoint lifetimes share memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from kiln.tensor.graph import MOVEMENT_OPS, const_value, device_of, reshape, shape_of, shrink
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
    KernelStats,
    KernelTooLarge,
    LeafBuffer,
)
from kiln.tensor.schedule.memory_planner import plan_temporaries
from kiln.tensor.schedule.row_fusion import fits_in_a_row, recomputed_reduces
from kiln.tensor.schedule.split_reduce import split_large_reductions
from kiln.tensor.symbolic import max_numel, unbind
from kiln.uops import GroupOp, Ops, UOp, dtypes, trace

# ops whose recomputation for every element of an expand costs more than reading a buffer
_COSTLY_OPS = frozenset(
    {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.FDIV, Ops.RECIPROCAL, Ops.IDIV, Ops.MOD, Ops.THREEFRY}
)
_CHEAP_ALU_LIMIT = 8  # more ALU ops than this under an expand is costly too
_COSTLY_EXPAND_RATIO = 4  # recomputing a costly elementwise value fewer times than this is cheaper than a kernel
_MAX_ROUNDS = 64


SEPARATE_PRODUCT_MACS = 1 << 24
"""Multiply-adds from which a matrix product is big enough to keep out of a kernel holding another one (see
`_Planner._sibling_products`): smaller ones (an MLP's layers and their gradients) stay merged, saving launches."""


def _broadcast_operand(node: UOp) -> bool:
    """Whether `node` reaches a non-movement value through a movement chain (casts included) holding an EXPAND."""
    expanded = False
    while node.op in MOVEMENT_OPS or node.op in (Ops.CAST, Ops.DETACH):
        expanded = expanded or node.op is Ops.EXPAND
        node = node.src[0]
    return expanded


def _is_matrix_product(node: UOp) -> bool:
    """Whether REDUCE_AXIS `node` sums a product of two broadcast operands over one axis (a matmul's contraction).

    A product summed over more axes is not one: kiln.tensor.llm.quantized sums a quantized weight's runs of 32 values
    as two axes, which get no register tile either way, and two of them in one kernel share the loads of their input
    (the Q8_0 bench model prefilled ~195 tok/s with its gate and up products together, 161 apart)."""
    if node.op is not Ops.REDUCE_AXIS or node.arg.op is not Ops.ADD or len(node.arg.axes) != 1:
        return False
    if max_numel(shape_of(node.src[0])) < SEPARATE_PRODUCT_MACS:
        return False
    value = node.src[0]
    while value.op is Ops.CAST:
        value = value.src[0]
    return value.op is Ops.MUL and all(_broadcast_operand(source) for source in value.src)


def _constant_only(nodes: list[UOp]) -> set[UOp]:
    # the nodes (of a subtree listed sources first) computed from constants and movement ops alone, no buffer read
    found: set[UOp] = set()
    for node in nodes:
        if node.op is Ops.CONST or (
            node.op is not Ops.BUFFER
            and node.src
            and all(s in found or s.op in (Ops.CONST, Ops.DEVICE) for s in node.src)
        ):
            found.add(node)
    return found


def _cheap_integer_op(node: UOp) -> bool:
    # integer / bool ALU with no division other than by a power of two (a shift or a mask). Over constants only (the
    # digit sums of an `arange`) recomputing them under an expand costs less than a kernel and a buffer, and kept in
    # the consumer a one-hot product over them becomes a gather (codegen's pm_gather)
    if not (dtypes.is_int(node.dtype) or node.dtype == dtypes.bool) or node.op in (Ops.POW, Ops.THREEFRY):
        return False
    if node.op in (Ops.IDIV, Ops.MOD):
        divisor = const_value(node.src[1])
        return isinstance(divisor, int) and divisor > 0 and divisor & (divisor - 1) == 0
    return True


def _strip_detach(node: UOp) -> UOp:
    while node.op is Ops.DETACH:
        node = node.src[0]
    return node


def _is_placeholder(node: UOp) -> bool:
    return node.op is Ops.BUFFER


def contiguous_base(node: UOp) -> UOp | None:
    """The BUFFER whose data `node` is exactly, row-major (only RESHAPE / DETACH / CONTIGUOUS on the way), or None."""
    while node.op in (Ops.RESHAPE, Ops.DETACH, Ops.CONTIGUOUS):
        node = node.src[0]
    return node if node.op is Ops.BUFFER else None


def _view_base(node: UOp) -> UOp | None:
    # the BUFFER under a chain of movement ops (the target of an ASSIGN, maybe an earlier ASSIGN to it), or None
    while node.op in MOVEMENT_OPS or node.op in (Ops.DETACH, Ops.ASSIGN):
        node = node.src[0]
    return node if node.op is Ops.BUFFER else None


def _value_node(point: UOp) -> UOp:
    # what a point's kernel computes
    if point.op is Ops.CONTIGUOUS:
        return point.src[0]
    if point.op is Ops.ASSIGN:
        return point.src[1]
    return point


@dataclass
class _Kernel:
    members: list[UOp]
    ast: UOp | None  # None: the build stopped at a recomputation blow-up
    stats: KernelStats
    slots: list[BufferRef]
    device: str


class _Planner:
    def __init__(self, sink: UOp) -> None:
        self.sink = split_large_reductions(_drop_bufferless_assigns(sink))
        self.requested = list(self.sink.src)
        self.order = self.sink.toposort()
        self.position = {node: i for i, node in enumerate(self.order)}
        self.points: dict[UOp, None] = {}
        self.reasons: dict[UOp, str] = {}  # why each point is one (the viz trace shows it as a refused fusion)
        # values read through an expand left in their readers by row fusion: the reason they would be a point, and
        # the reduces they hold (if a built kernel would recompute one, the value becomes a point after all)
        self.row_fused: dict[UOp, tuple[str, frozenset[UOp]]] = {}

    def mark(self, node: UOp, reason: str) -> None:
        """Make `node` a point (its value gets a buffer), remembering the first reason."""
        self.points[node] = None
        self.reasons.setdefault(node, reason)

    # -- step 1 -----------------------------------------------------------------------------------------------------
    def initial_points(self) -> None:
        for node in self.requested:
            stripped = _strip_detach(node)
            if stripped.op is not Ops.ASSIGN and contiguous_base(stripped) is not None:
                continue  # already a buffer: nothing to compute
            if const_value(stripped) is not None:
                continue  # a broadcast constant stays a constant (CONTIGUOUS asks for a buffer)
            self.mark(stripped, "requested: realized as an output")
        for node in self.order:
            if node.op is Ops.CONTIGUOUS and contiguous_base(node) is None:
                self.mark(node, "contiguous() asks for a buffer")
            elif node.op is Ops.COPY:
                self.mark(node, "a copy between devices")
                source = _strip_detach(node.src[0])
                if contiguous_base(source) is None:
                    self.mark(source, "the source of a copy between devices is a buffer")
            elif node.op is Ops.ASSIGN:
                self._check_assign(node)
                self.mark(node, "assign writes into its target's buffer")
        self._expand_rule()
        self._nested_reduce_rule()

    def _check_assign(self, node: UOp) -> None:
        chain = node.src[0]
        while chain.op is not Ops.BUFFER:
            if chain.op in (Ops.PAD, Ops.EXPAND):
                raise ValueError(f"cannot assign through {chain.op.name}: the target must be a plain view of a buffer")
            chain = chain.src[0]

    def _is_boundary(self, node: UOp) -> bool:
        return node in self.points or node.op in (Ops.BUFFER, Ops.CONST, Ops.DEVICE)

    def _subtree(self, node: UOp) -> Iterable[UOp]:
        # the nodes a kernel computing `node` would evaluate (down to points and sources)
        return node.toposort(gate=lambda n: n is node or not self._is_boundary(n))

    def _expand_rule(self) -> None:
        for node in self.order:
            if node.op is not Ops.EXPAND:
                continue
            ratio = max_numel(node.arg) / max(1, max_numel(shape_of(node.src[0])))
            source = node.src[0]
            while source.op in MOVEMENT_OPS or source.op is Ops.DETACH:
                source = source.src[0]
            if self._is_boundary(source) or ratio <= 1:
                continue
            inner = [n for n in self._subtree(source) if not self._is_boundary(n) or n is source]
            reduces = frozenset(n for n in inner if n.op is Ops.REDUCE_AXIS)
            constant = _constant_only(inner)
            alu = [n for n in inner if n.op in GroupOp.ALU and not (n in constant and _cheap_integer_op(n))]
            costly = any(n.op in _COSTLY_OPS for n in alu) or len(alu) > _CHEAP_ALU_LIMIT
            if reduces or (costly and ratio >= _COSTLY_EXPAND_RATIO):
                what = "a reduce" if reduces else "a costly elementwise value"
                reason = f"{what} read through an expand would be recomputed {ratio:g} times per value"
                if reduces and all(fits_in_a_row(n) for n in reduces):
                    # row fusion: computed once per row inside the reader, checked once the kernel is built
                    self.row_fused[source] = (reason, reduces)
                else:
                    self.mark(source, reason)

    def _nested_reduce_rule(self) -> None:
        for node in self.order:
            if node.op is not Ops.REDUCE_AXIS or self._is_boundary(node.src[0]):
                continue
            for inner in self._subtree(node.src[0]):
                if inner.op is not Ops.REDUCE_AXIS or self._is_boundary(inner):
                    continue
                if not (fits_in_a_row(inner) and fits_in_a_row(node)):
                    self.mark(inner, "a reduce nested inside another reduce")

    # -- step 2 -----------------------------------------------------------------------------------------------------
    def computed_points(self) -> list[UOp]:
        """Points computed by kernels, in graph order."""
        ordered = sorted(self.points, key=self.position.__getitem__)
        return [p for p in ordered if p.op is not Ops.COPY and max_numel(shape_of(p)) > 0]

    def build_kernel(self, members: list[UOp], refs: dict[UOp, BufferRef]) -> _Kernel:
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
            outputs.append(KernelOutput(member, _value_node(member), refs[member], shape, size, target))
        try:
            ast = builder.build(outputs)
        except KernelTooLarge as too_large:
            return _Kernel(members, None, too_large.stats, builder.slots, device_of(members[0]))
        return _Kernel(members, ast, builder.stats, builder.slots, device_of(members[0]))

    def find_recomputation(self, kernels: list[_Kernel]) -> dict[UOp, str]:
        """Nodes that should get a buffer because kernels would recompute them, with the reason."""
        found: dict[UOp, str] = {}
        reduce_users: dict[UOp, int] = {}
        for kernel in kernels:
            for assign in kernel.stats.racing_assigns:
                found.setdefault(_value_node(assign), "the value is read while an assign overwrites its source")
        for kernel in kernels:
            for reduce in kernel.stats.reduces:
                reduce_users[reduce] = reduce_users.get(reduce, 0) + 1
                if kernel.stats.contexts.get(reduce, 0) > 1:
                    found.setdefault(reduce, "a reduce needed at several index sets of one kernel")
        for reduce, count in reduce_users.items():
            if count > 1:
                found.setdefault(reduce, f"a reduce needed by {count} kernels")
        for kernel in kernels:
            for reduce in self._sibling_products(kernel.stats.reduces):
                found.setdefault(reduce, "one of several independent matrix products that would share a kernel")
        for kernel in kernels:
            if kernel.ast is None:
                continue
            for reduce in recomputed_reduces(kernel.ast, kernel.stats.built_reduces):
                # cut where the planner would have cut without row fusion
                cuts = {v: why for v, (why, held) in self.row_fused.items() if reduce in held and v not in self.points}
                found.update(cuts or {reduce: "a reduce nested inside another reduce (recomputed, or run serially)"})
        if found:
            return found
        for kernel in kernels:
            if kernel.ast is not None:
                continue
            contexts = kernel.stats.contexts
            worst = [n for n, count in contexts.items() if n.op in GroupOp.Elementwise and count > 1]
            if worst:
                chosen = max(worst, key=lambda n: (contexts[n], self.position[n]))
                found[chosen] = f"recomputed at {contexts[chosen]} index sets (the kernel grew too large)"
                continue
            # no node is recomputed: the value graph is just long (a chain of many ops): cut it in the middle
            middle = _middle_node([n for n in contexts if n.op in GroupOp.Elementwise and n not in kernel.members])
            if middle is not None:
                found[middle] = f"a chain longer than {MAX_KERNEL_NODES} nodes is cut in the middle"
        return found

    def _sibling_products(self, reduces: Iterable[UOp]) -> list[UOp]:
        """The matrix products among a kernel's `reduces` that neither read nor are read by another of them, when
        there are two or more (silu(x @ w1.T) * (x @ w3.T)): together in one kernel they get no register tile and no
        packed operand ((64, 768) inputs, (2048, 768) weights: 62 ms against 2.7 ms as kernels of their own). A product
        inside another's operand (the last token's row through a model's last layers into its output head) stays:
        as a point it would be computed for every row."""
        products = [r for r in reduces if _is_matrix_product(r)]
        if len(products) < 2:
            return []
        inside = {p: {q for q in self._subtree(p.src[0]) if q in products and q is not p} for p in products}
        nested = set().union(*inside.values())
        siblings = [p for p in products if not inside[p] and p not in nested]
        return sorted(siblings, key=self.position.__getitem__) if len(siblings) > 1 else []

    # -- steps 3 and 4 ----------------------------------------------------------------------------------------------
    def assign_refs(self) -> tuple[dict[UOp, BufferRef], list[BufferSpecification], list[BufferSpecification]]:
        refs: dict[UOp, BufferRef] = {}
        outputs: list[BufferSpecification] = []
        temporaries: list[BufferSpecification] = []
        for node in self.order:
            if node.op is Ops.BUFFER:
                refs[node] = BufferRef(BufferSource.INPUT, node.arg.position)
        requested = {_strip_detach(node) for node in self.requested}
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
        stripped = _strip_detach(node)
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


def _middle_node(nodes: list[UOp]) -> UOp | None:
    # the node halfway down a long value graph, by depth (sources before users)
    if len(nodes) < 2:
        return None
    depth: dict[UOp, int] = {}
    members = set(nodes)
    for node in UOp(Ops.SINK, src=tuple(nodes)).toposort(gate=lambda n: n.op is Ops.SINK or n in members):
        if node in members:
            depth[node] = 1 + max((depth.get(source, 0) for source in node.src), default=0)
    deepest = max(depth.values())
    return min(nodes, key=lambda n: abs(depth[n] - deepest // 2))


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


def _group_kernels(planner: _Planner, kernels: dict[UOp, _Kernel]) -> list[list[UOp]]:
    """Members of each multi-output kernel: same device and loop shape, no ASSIGN, and merging creates no cycle.

    Points are visited in graph order, so everything a point reads is grouped already; a point joins a group only if
    no group it reads from (directly or through other groups) depends on that group.
    """
    groups: list[list[UOp]] = []
    group_of: dict[UOp, int] = {}
    needs: list[set[int]] = []
    inputs: list[int] = []  # buffers each group's kernel reads (an upper bound: leaves counted once per member)
    # whether each group computes a matrix product: two products sharing a kernel get no register tile (see
    # _Planner._sibling_products), so a product never joins a group that has one
    products: list[bool] = []

    def reads(point: UOp) -> set[UOp]:
        if point.op is Ops.COPY:
            source = _strip_detach(point.src[0])
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
        product = point in kernels and any(_is_matrix_product(r) for r in kernels[point].stats.reduces)
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
                    and not (product and products[number])
                    and not reaches(depends, number)
                ):
                    chosen = number
                    break
        if chosen is None:
            groups.append([point])
            needs.append(set())
            inputs.append(0)
            products.append(False)
            chosen = len(groups) - 1
        else:
            groups[chosen].append(point)
        products[chosen] = products[chosen] or product
        kernel = kernels.get(point)
        inputs[chosen] += 0 if kernel is None else len(kernel.stats.leaves)
        group_of[point] = chosen
        needs[chosen] |= depends
    return [group for group in groups if group[0] in kernels]


def plan_schedule(sink: UOp) -> SchedulePlan:
    """The plan that computes every source of `sink` (a SINK of normalized tensor-graph nodes)."""
    planner = _Planner(sink)
    planner.initial_points()
    for _ in range(_MAX_ROUNDS):
        refs, outputs, temporaries = planner.assign_refs()
        kernels = {p: planner.build_kernel([p], refs) for p in planner.computed_points()}
        extra = {node: why for node, why in planner.find_recomputation(list(kernels.values())).items()}
        extra = {node: why for node, why in extra.items() if node not in planner.points}
        if not extra:
            break
        for node, why in extra.items():
            planner.mark(node, why)
    if any(kernel.ast is None for kernel in kernels.values()):
        raise RuntimeError(
            f"the scheduler could not split a kernel whose value graph exceeds {MAX_KERNEL_NODES} nodes or needs a "
            f"node at more than {MAX_CONTEXTS} index sets; realize() or .contiguous() part of the graph first"
        )
    groups = _group_kernels(planner, kernels)
    merged: dict[UOp, _Kernel] = {}
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


def _order_steps(planner: _Planner, kernels: dict[UOp, _Kernel], refs: dict[UOp, BufferRef]) -> list[Step]:
    """Kernels and copies in an order that respects every dependency; reads of a buffer run before an ASSIGN that
    overwrites it."""
    units: list[_Unit] = []
    seen: set[int] = set()
    for point in sorted(planner.points, key=planner.position.__getitem__):
        if point.op is Ops.COPY:
            source = _strip_detach(point.src[0])
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


def record_schedule(planner: _Planner, groups: list[list[UOp]], kernels: dict[UOp, _Kernel]) -> None:
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
            for node in planner._subtree(_value_node(member)):
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


def _kernel_step(ast: UOp, device: str, slots: tuple[BufferRef, ...]) -> KernelStep:
    """The step of one kernel; a kernel over bound variables runs its unbound program with their values."""
    if not any(node.op is Ops.BIND for node in ast.toposort()):
        return KernelStep(ast, device, slots)
    unbound, var_vals = unbind(ast)
    return KernelStep(unbound, device, slots, var_vals)
