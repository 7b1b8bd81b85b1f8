"""Placement rules: where the scheduler gives a value a buffer of its own (a "point"), one named function per reason.

Everything between points fuses into the kernel that reads it, so these rules are the scheduler's fusion policy.
They come in two tables, applied in their order by the planner (planner.py):

- `GRAPH_RULES` read the normalized tensor graph before any kernel is built (what the user asked for, what an op
  demands, what would obviously be recomputed);
- `KERNEL_RULES` read the kernels built from the points so far, which reveal recomputation the graph does not show;
  the planner adds their cuts and builds again until no rule cuts. `LAST_RESORT_RULES` run only when no kernel rule
  cut anything: a kernel that could not be built at all is split.

Where fusing or cutting is a trade-off (recomputing a value under an expand, two matrix products sharing a kernel),
the rule compares the two plans' costs (cost.py: bytes moved, recomputed work, register tiles, launches, priced by
the device's `MachineCosts`) and its decision states both. A rule records each decision (`Decision`: its name, the
node, what it decided) through `Placement.mark` (the node gets a buffer) or `Placement.keep` (the node stays fused
although another rule would cut it: row fusion, or a comparison that chose fusing). The planner records them in the
viz trace's schedule group, which viz lists rule by rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kiln.tensor.graph import MOVEMENT_OPS, const_value, shape_of
from kiln.tensor.schedule.cost import (
    MachineCosts,
    ProductShape,
    expand_comparison,
    product_shape,
    products_comparison,
    work_of,
)
from kiln.tensor.schedule.items import BufferRef
from kiln.tensor.schedule.kernel_builder import MAX_KERNEL_NODES, KernelStats
from kiln.tensor.schedule.row_fusion import fits_in_a_row, recomputed_reduces
from kiln.tensor.symbolic import max_numel
from kiln.uops import GroupOp, Ops, UOp, dtypes


class Decision(NamedTuple):
    """One placement decision: the rule that made it, the node it is about, what it decided (in words), and whether
    the node got a buffer (`cut`) or stays fused in its readers."""

    rule: str
    node: UOp
    decision: str
    cut: bool = True


@dataclass
class BuiltKernel:
    """A kernel built from one or more points: its members (the points it stores), its AST (None: the build stopped
    at a recomputation blow-up), what building it touched, its buffer slots and its device."""

    members: list[UOp]
    ast: UOp | None
    stats: KernelStats
    slots: list[BufferRef]
    device: str


class Placement(Protocol):
    """What a rule reads of the planner and how it records a decision."""

    requested: list[UOp]
    order: list[UOp]
    position: dict[UOp, int]
    points: dict[UOp, None]
    row_fused: dict[UOp, tuple[str, frozenset[UOp]]]

    def mark(self, node: UOp, reason: str, rule: str) -> None:
        """Makes `node` a point (its value gets a buffer), recording the decision under `rule`."""
        ...

    def keep(self, node: UOp, reason: str, rule: str) -> None:
        """Records that `node` stays fused in its readers although `reason` would cut it."""
        ...

    def is_boundary(self, node: UOp) -> bool:
        """Whether a kernel reading `node` loads it (a point, a buffer, a constant or a device)."""
        ...

    def subtree(self, node: UOp) -> Iterable[UOp]:
        """The nodes a kernel computing `node` evaluates (down to points and sources)."""
        ...

    def costs(self, node: UOp) -> MachineCosts:
        """The machine parameters that price the kernels computing `node` (its device's)."""
        ...


GraphRule = Callable[[Placement], None]
KernelRule = Callable[[Placement, list[BuiltKernel]], Iterable[tuple[UOp, str]]]


def strip_detach(node: UOp) -> UOp:
    """`node` without the DETACHes on top of it."""
    while node.op is Ops.DETACH:
        node = node.src[0]
    return node


def contiguous_base(node: UOp) -> UOp | None:
    """The BUFFER whose data `node` is exactly, row-major (only RESHAPE / DETACH / CONTIGUOUS on the way), or None."""
    while node.op in (Ops.RESHAPE, Ops.DETACH, Ops.CONTIGUOUS):
        node = node.src[0]
    return node if node.op is Ops.BUFFER else None


def value_node(point: UOp) -> UOp:
    """What a point's kernel computes (the value under a CONTIGUOUS, the value an ASSIGN writes)."""
    if point.op is Ops.CONTIGUOUS:
        return point.src[0]
    if point.op is Ops.ASSIGN:
        return point.src[1]
    return point


# -- graph rules ------------------------------------------------------------------------------------------------------
def requested_outputs(placement: Placement) -> None:
    """A requested value gets an output buffer, unless it already is a buffer or is a broadcast constant."""
    for node in placement.requested:
        stripped = strip_detach(node)
        if stripped.op is not Ops.ASSIGN and contiguous_base(stripped) is not None:
            continue  # already a buffer: nothing to compute
        if const_value(stripped) is not None:
            continue  # a broadcast constant stays a constant (CONTIGUOUS asks for a buffer)
        placement.mark(stripped, "requested: realized as an output", "requested_outputs")


def contiguous_buffers(placement: Placement) -> None:
    """contiguous() asks for a buffer (of a value that is not already one, row-major)."""
    for node in placement.order:
        if node.op is Ops.CONTIGUOUS and contiguous_base(node) is None:
            placement.mark(node, "contiguous() asks for a buffer", "contiguous_buffers")


def assign_targets(placement: Placement) -> None:
    """An ASSIGN writes into its target's buffer, which must be a plain view of a buffer (no PAD, no EXPAND)."""
    for node in placement.order:
        if node.op is not Ops.ASSIGN:
            continue
        chain = node.src[0]
        while chain.op is not Ops.BUFFER:
            if chain.op in (Ops.PAD, Ops.EXPAND):
                raise ValueError(f"cannot assign through {chain.op.name}: the target must be a plain view of a buffer")
            chain = chain.src[0]
        placement.mark(node, "assign writes into its target's buffer", "assign_targets")


def device_copies(placement: Placement) -> None:
    """A copy between devices is a step of its own, from a buffer to a buffer."""
    for node in placement.order:
        if node.op is not Ops.COPY:
            continue
        placement.mark(node, "a copy between devices", "device_copies")
        source = strip_detach(node.src[0])
        if contiguous_base(source) is None:
            placement.mark(source, "the source of a copy between devices is a buffer", "device_copies")


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


def materialize_through_expand(placement: Placement) -> None:
    """A reduce read through an EXPAND would be recomputed for every expanded element (its loop inside the reader's
    loops): it gets a buffer. Row fusion (row_fusion.py) keeps a reduce over short rows in its reader instead
    (softmax's max, sum and output in one kernel), checked by `recomputed_row_reduces` once the kernel is built.
    An elementwise value read through an EXPAND gets a buffer when recomputing it at every expanded element costs
    more than writing it once, reading it back and a launch (`cost.expand_comparison`)."""
    for node in placement.order:
        if node.op is not Ops.EXPAND:
            continue
        expanded = max_numel(node.arg)
        ratio = expanded / max(1, max_numel(shape_of(node.src[0])))
        source = node.src[0]
        while source.op in MOVEMENT_OPS or source.op is Ops.DETACH:
            source = source.src[0]
        if placement.is_boundary(source) or ratio <= 1:
            continue
        inner = [n for n in placement.subtree(source) if not placement.is_boundary(n) or n is source]
        reduces = frozenset(n for n in inner if n.op is Ops.REDUCE_AXIS)
        costs = placement.costs(source)
        if reduces:
            reason = f"a reduce read through an expand would be recomputed {ratio:g} times per value"
            if all(fits_in_a_row(n, costs) for n in reduces):
                # row fusion: computed once per row inside the reader, checked once the kernel is built
                placement.row_fused[source] = (reason, reduces)
                placement.keep(source, f"kept in its reader over short rows ({reason})", "row_fusion")
            else:
                placement.mark(source, reason, "materialize_through_expand")
            continue
        constant = _constant_only(inner)
        alu = [n for n in inner if n.op in GroupOp.ALU and not (n in constant and _cheap_integer_op(n))]
        if not alu:
            continue
        comparison = expand_comparison(source, expanded, work_of(alu, costs), costs)
        what = f"an elementwise value read through an expand would be recomputed {ratio:g} times per value"
        if comparison.cuts:
            placement.mark(source, f"{what}: {comparison.describe()}", "materialize_through_expand")
        else:
            placement.keep(source, f"{what}: {comparison.describe()}", "materialize_through_expand")


def nested_reduces(placement: Placement) -> None:
    """A reduce inside another reduce's value would run its loop inside the other's: it gets a buffer, unless both
    reduce short rows (row fusion)."""
    for node in placement.order:
        if node.op is not Ops.REDUCE_AXIS or placement.is_boundary(node.src[0]):
            continue
        for inner in placement.subtree(node.src[0]):
            if inner.op is not Ops.REDUCE_AXIS or placement.is_boundary(inner):
                continue
            if not (fits_in_a_row(inner) and fits_in_a_row(node)):
                placement.mark(inner, "a reduce nested inside another reduce", "nested_reduces")


GRAPH_RULES: tuple[GraphRule, ...] = (
    requested_outputs,
    contiguous_buffers,
    assign_targets,
    device_copies,
    materialize_through_expand,
    nested_reduces,
)
"""The rules over the graph, in the order they are applied (a node keeps the reason of the first rule marking it)."""


# -- kernel rules -----------------------------------------------------------------------------------------------------
def racing_assigns(placement: Placement, kernels: list[BuiltKernel]) -> Iterable[tuple[UOp, str]]:
    """The value of an ASSIGN that reads its own target at other elements than the one written would race with the
    write: it is computed into a buffer first."""
    for kernel in kernels:
        for assign in kernel.stats.racing_assigns:
            yield value_node(assign), "the value is read while an assign overwrites its source"


def shared_reduces(placement: Placement, kernels: list[BuiltKernel]) -> Iterable[tuple[UOp, str]]:
    """A reduce needed at several index sets of one kernel, or by several kernels, would be computed more than once:
    it gets a buffer."""
    users: dict[UOp, int] = {}
    for kernel in kernels:
        for reduce in kernel.stats.reduces:
            users[reduce] = users.get(reduce, 0) + 1
            if kernel.stats.contexts.get(reduce, 0) > 1:
                yield reduce, "a reduce needed at several index sets of one kernel"
    for reduce, count in users.items():
        if count > 1:
            yield reduce, f"a reduce needed by {count} kernels"


def sibling_products(placement: Placement, reduces: Iterable[UOp]) -> list[tuple[UOp, ProductShape]]:
    """The matrix products (`cost.product_shape`) among a kernel's `reduces` that neither read nor are read by
    another of them, with their shapes, when there are two or more, in graph order."""
    shapes = {r: shape for r in reduces if (shape := product_shape(r)) is not None}
    if len(shapes) < 2:
        return []
    inside = {p: {q for q in placement.subtree(p.src[0]) if q in shapes and q is not p} for p in shapes}
    nested = set().union(*inside.values())
    siblings = sorted((p for p in shapes if not inside[p] and p not in nested), key=placement.position.__getitem__)
    return [(p, shapes[p]) for p in siblings] if len(siblings) > 1 else []


def separate_sibling_products(placement: Placement, kernels: list[BuiltKernel]) -> Iterable[tuple[UOp, str]]:
    """Two or more independent matrix products in one kernel (silu(x @ w1.T) * (x @ w3.T)) get no register tile:
    each gets a kernel of its own when that costs less (`cost.products_comparison`: an operand larger than the
    cache streamed once per row instead of once per tile of rows, against the products' outputs written and read
    back and a launch each; (64, 768) inputs, (2048, 768) float32 weights measured 62 ms together, 2.7 ms apart).
    The comparison also separates a few rows' products, which a threshold of 2**24 multiply-adds kept together: a
    llama MLP over 8 rows of 768 (float32, weights (2048, 768)) measured ~18 ms together against ~2.2 ms apart
    (first quartile of 35 runs each, alternated, loaded 2-core box); one row reads each weight once either way and
    stays. A product inside another's operand (the last token's row through a model's last layers into its output
    head) stays: as a point it would be computed for every row."""
    for kernel in kernels:
        siblings = sibling_products(placement, kernel.stats.reduces)
        if not siblings:
            continue
        comparison = products_comparison([shape for _, shape in siblings], placement.costs(siblings[0][0]))
        what = f"one of {len(siblings)} independent matrix products that would share a kernel"
        for reduce, _ in siblings:
            if comparison.cuts:
                yield reduce, f"{what}: {comparison.describe()}"
            else:
                placement.keep(reduce, f"{what}: {comparison.describe()}", "separate_sibling_products")


def recomputed_row_reduces(placement: Placement, kernels: list[BuiltKernel]) -> Iterable[tuple[UOp, str]]:
    """A reduce left in its reader by row fusion that the built kernel's loops would compute more than once per
    value, or inside another reduce's loop (`recomputed_reduces`), is cut where the planner would have cut it without
    row fusion."""
    for kernel in kernels:
        if kernel.ast is None:
            continue
        for reduce in recomputed_reduces(kernel.ast, kernel.stats.built_reduces):
            cuts = [
                (value, why)
                for value, (why, held) in placement.row_fused.items()
                if reduce in held and value not in placement.points
            ]
            yield from cuts or [(reduce, "a reduce nested inside another reduce (recomputed, or run serially)")]


def split_blown_up_kernels(placement: Placement, kernels: list[BuiltKernel]) -> Iterable[tuple[UOp, str]]:
    """A kernel whose build stopped (a node needed at too many index sets, or too many nodes) is split: the node
    recomputed at the most index sets gets a buffer, else (a long chain) the node in the middle of the chain."""
    for kernel in kernels:
        if kernel.ast is not None:
            continue
        contexts = kernel.stats.contexts
        worst = [n for n, count in contexts.items() if n.op in GroupOp.Elementwise and count > 1]
        if worst:
            chosen = max(worst, key=lambda n: (contexts[n], placement.position[n]))
            yield chosen, f"recomputed at {contexts[chosen]} index sets (the kernel grew too large)"
            continue
        middle = _middle_node([n for n in contexts if n.op in GroupOp.Elementwise and n not in kernel.members])
        if middle is not None:
            yield middle, f"a chain longer than {MAX_KERNEL_NODES} nodes is cut in the middle"


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


KERNEL_RULES: tuple[KernelRule, ...] = (
    racing_assigns,
    shared_reduces,
    separate_sibling_products,
    recomputed_row_reduces,
)
"""The rules over built kernels, in the order they are applied (a node keeps the first reason found for it, except
that `recomputed_row_reduces` states the cut it makes: see `OVERRIDING_RULES`)."""
OVERRIDING_RULES = frozenset({recomputed_row_reduces})
LAST_RESORT_RULES: tuple[KernelRule, ...] = (split_blown_up_kernels,)
"""Applied when no kernel rule cut anything."""


def rule_location(name: str) -> str:
    """Where the rule named `name` is defined ("file:line", as codegen's rewrite steps say); `row_fusion` is decided
    by `materialize_through_expand`."""
    rules = {rule.__name__: rule for rule in (*GRAPH_RULES, *KERNEL_RULES, *LAST_RESORT_RULES)}
    rule = rules.get("materialize_through_expand" if name == "row_fusion" else name)
    if rule is None:
        raise ValueError(f"no placement rule is named {name!r}; the rules are {sorted(rules)} and row_fusion")
    return f"{rule.__code__.co_filename}:{rule.__code__.co_firstlineno}"
