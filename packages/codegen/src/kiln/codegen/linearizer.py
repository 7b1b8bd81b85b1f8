"""The linearizer: a lowered kernel graph -> the ordered list of uops of the linear program format.

Every node runs inside the loops it depends on and no others (loop-invariant work is hoisted for free): the loops
around a node are its open RANGEs plus the loops enclosing those. Inside one loop body the nodes are ordered by a
deterministic topological sort; a whole inner loop (RANGE ... END) is one item of its parent's sort, so everything
the loop reads comes before it and everything that reads its results (through END) comes after.
Gated STOREs become IF / STORE / ENDIF (IF's arg numbers the IFs). GROUP nodes only gather effects and are not emitted.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from kiln.codegen.loop_structure import open_ranges_map
from kiln.uops import Ops, RangeArg, SpecialArg, UOp, VarArg

_FIRST_OPS: dict[Ops, int] = {
    Ops.DEFINE_GLOBAL: 0,
    Ops.DEFINE_VAR: 1,
    Ops.DEFINE_LOCAL: 2,
    Ops.DEFINE_REG: 3,
    Ops.SPECIAL: 4,
}


def _priority(node: UOp, position: int) -> tuple[int, int, int]:
    # parameters and hardware indices first (buffers by slot), then everything in graph order
    rank = _FIRST_OPS.get(node.op)
    if rank is None:
        return (9, 0, position)
    slot = node.arg if node.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG) else 0
    return (rank, slot, position)


class _LoopNest:
    """Which loops enclose every node of a lowered graph."""

    def __init__(self, sink: UOp) -> None:
        self.open = open_ranges_map(sink)
        self.end_of: dict[UOp, UOp] = {}
        for node in sink.toposort():
            if node.op is Ops.END:
                if len(node.src) != 2 or node.src[1].op is not Ops.RANGE:
                    raise ValueError(
                        f"the linearizer needs ENDs of exactly one RANGE, got END with {len(node.src)} sources"
                    )
                rng = node.src[1]
                if rng in self.end_of:
                    raise ValueError(f"RANGE {rng.arg} is closed by two ENDs; a RANGE is one loop")
                self.end_of[rng] = node
        unclosed = [rng.arg for rng in self.open if rng.op is Ops.RANGE and rng not in self.end_of]
        if unclosed:
            raise ValueError(f"RANGEs without an END: {unclosed}")
        if self.open[sink]:
            raise ValueError(f"loops still open at the SINK: {[rng.arg for rng in self.open[sink]]}")
        self._enclosing: dict[UOp, tuple[UOp, ...]] = {}
        self._in_progress: set[UOp] = set()
        self._chains: dict[frozenset[UOp], tuple[UOp, ...]] = {}

    def enclosing(self, rng: UOp) -> tuple[UOp, ...]:
        """The loops around loop `rng`, outermost first: those still open where it ends."""
        found = self._enclosing.get(rng)
        if found is None:
            if rng in self._in_progress:
                raise ValueError(f"loop {rng.arg} encloses itself")
            self._in_progress.add(rng)
            found = self.chain(self.open[self.end_of[rng]])
            self._in_progress.discard(rng)
            self._enclosing[rng] = found
        return found

    def chain(self, ranges: frozenset[UOp]) -> tuple[UOp, ...]:
        """The loops a node with open `ranges` sits in, outermost first."""
        if not ranges:
            return ()
        found = self._chains.get(ranges)
        if found is None:
            found = self._chains[ranges] = self._build_chain(ranges)
        return found

    def _build_chain(self, ranges: frozenset[UOp]) -> tuple[UOp, ...]:
        members = set(ranges)
        for rng in ranges:
            members.update(self.enclosing(rng))
        ordered = sorted(members, key=lambda rng: (len(self.enclosing(rng)), rng.arg.axis))
        for depth, rng in enumerate(ordered):
            if self.enclosing(rng) != tuple(ordered[:depth]):
                raise ValueError(f"loops {[r.arg for r in ordered]} do not nest: a node runs in two sibling loops")
        return tuple(ordered)

    def block(self, node: UOp) -> tuple[UOp, ...]:
        """The loops `node` is placed in (for a RANGE: the loops around it)."""
        if node.op is Ops.RANGE:
            return self.enclosing(node)
        return self.chain(self.open[node])


def linearize(sink: UOp) -> list[UOp]:
    """The uops of `sink` in program order (linear program format), with RANGE/END, IF/ENDIF and no GROUP.

    `sink` must be lowered: every RANGE closed by exactly one single-range END, no REDUCE/UNROLL/CONTRACT left.
    """
    if sink.op is not Ops.SINK:
        raise ValueError(f"linearize needs a SINK, got {sink.op!r}")
    nodes = sink.toposort()[:-1]
    position = {node: index for index, node in enumerate(nodes)}
    nest = _LoopNest(sink)
    blocks: dict[tuple[UOp, ...], list[UOp]] = defaultdict(list)
    block_of: dict[UOp, tuple[UOp, ...]] = {}
    for node in nodes:
        block_of[node] = nest.block(node)
        if node.op is not Ops.RANGE:
            blocks[block_of[node]].append(node)
    # dependencies between the items of one block; a RANGE's sources belong to its loop's END
    depends: dict[UOp, set[UOp]] = defaultdict(set)
    for node in nodes:
        if node.op is Ops.END:
            continue
        owner = nest.end_of[node] if node.op is Ops.RANGE else node
        owner_block = block_of[owner]
        for source in node.src:
            if source.op is Ops.RANGE:
                continue
            source_block = block_of[source]
            if owner_block[: len(source_block)] != source_block:
                raise ValueError(f"{node.op!r} uses a {source.op!r} from a loop it is not inside")
            if len(source_block) == len(owner_block):
                depends[owner].add(source)
            else:
                depends[nest.end_of[owner_block[len(source_block)]]].add(source)
    ordered: list[UOp] = []
    _emit_block((), blocks, depends, position, nest, ordered)
    return _rebuild(ordered)


def _emit_block(
    block: tuple[UOp, ...],
    blocks: dict[tuple[UOp, ...], list[UOp]],
    depends: dict[UOp, set[UOp]],
    position: dict[UOp, int],
    nest: _LoopNest,
    ordered: list[UOp],
) -> None:
    items = blocks.get(block, [])
    waiting = {item: len(depends[item]) for item in items}
    users: dict[UOp, list[UOp]] = defaultdict(list)
    for item in items:
        for dependency in depends[item]:
            users[dependency].append(item)
    ready = [(_priority(item, position[item]), item) for item, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    emitted = 0
    while ready:
        _, item = heapq.heappop(ready)
        emitted += 1
        if item.op is Ops.END:
            rng = item.src[1]
            ordered.append(rng)
            _emit_block((*block, rng), blocks, depends, position, nest, ordered)
        ordered.append(item)
        for user in users[item]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (_priority(user, position[user]), user))
    if emitted != len(items):
        raise ValueError("the kernel graph has a dependency cycle between loops")


def _rebuild(ordered: list[UOp]) -> list[UOp]:
    # graph nodes -> linear-format uops: END keeps only its RANGE, GROUP disappears, gated STOREs get an IF
    linear: dict[UOp, tuple[UOp, ...]] = {}
    result: list[UOp] = []
    placed: set[UOp] = set()

    def sources(node: UOp) -> tuple[UOp, ...]:
        return tuple(mapped for source in node.src for mapped in linear[source])

    def place(node: UOp) -> UOp:
        if node not in placed:
            placed.add(node)
            result.append(node)
        return node

    for node in ordered:
        if node.op is Ops.GROUP:
            linear[node] = sources(node)
        elif node.op is Ops.INDEX and len(node.src) == 3:
            linear[node] = ()  # a gated store address: the store below emits it ungated inside an IF
        elif node.op is Ops.END:
            linear[node] = (place(UOp(Ops.END, node.dtype, (linear[node.src[1]][0],), node.arg)),)
        elif node.op is Ops.STORE and len(node.src[0].src) == 3:
            buffer, offset, gate = (linear[s][0] for s in node.src[0].src)
            # IFs are numbered so that two stores under the same gate get two IF blocks (uops are hash-consed)
            condition = place(UOp(Ops.IF, src=(gate,), arg=sum(1 for uop in result if uop.op is Ops.IF)))
            address = place(node.src[0].replace(src=(buffer, offset)))
            store = place(node.replace(src=(address, *(m for s in node.src[1:] for m in linear[s]))))
            place(UOp(Ops.ENDIF, src=(condition,)))
            linear[node] = (store,)
        else:
            linear[node] = (place(node.replace(src=sources(node))),)
    return result


def format_linear(uops: list[UOp]) -> str:
    """A linear program as text, one uop per line in program order, indented by loop/IF depth:

    %3 = RANGE int32 %2 axis=0 LOOP
    """
    numbers: dict[UOp, int] = {}
    lines = []
    depth = 0
    for uop in uops:
        if uop.op in (Ops.END, Ops.ENDIF):
            depth -= 1
        numbers[uop] = len(numbers)
        sources = " ".join(f"%{numbers[s]}" if s in numbers else "%?" for s in uop.src)
        dtype = repr(uop.dtype).removeprefix("dtypes.")
        arg = "" if uop.arg is None else f" {_format_arg(uop.arg)}"
        lines.append(f"{'  ' * depth}%{numbers[uop]} = {uop.op.name} {dtype} {sources}".rstrip() + arg)
        if uop.op in (Ops.RANGE, Ops.IF):
            depth += 1
    return "\n".join(lines)


def _format_arg(arg: object) -> str:
    if isinstance(arg, RangeArg):
        return f"axis={arg.axis} {arg.kind.name}"
    if isinstance(arg, (SpecialArg, VarArg)):
        return repr(arg.name) if isinstance(arg, SpecialArg) else f"{arg.name}[{arg.lo}..{arg.hi}]"
    if isinstance(arg, Ops):
        return arg.name
    return repr(arg)
