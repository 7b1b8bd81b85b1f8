"""Graphs of a trace: the node table, the graph after each step of a rewrite, and what is drawn of it.

A rewrite records its input graph and, per fired rule, the node it replaced and the replacement. The graph after
step k is the graph after step k-1 with that node substituted (parents rebuilt; a rebuilt parent equal to a node an
earlier step replaced is replaced too, as graph_rewrite's memo of finished nodes does). Nodes are interned by structure
(op, dtype, arg, sources, tag), so a rebuilt parent is the same id as the node the trace recorded for it, and the
replayed final graph can be compared with the recorded result. Steps are replayed lazily, once each.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["DrawnGraph", "GraphStore", "StepGraph"]

NodeKey = tuple[str, str, str, tuple[int, ...], str | None]


@dataclass(frozen=True)
class StepGraph:
    """The graph after a step: its root, the ids new at this step, and whether the step's node was in the graph."""

    root: int
    changed: frozenset[int]
    in_graph: bool


@dataclass(frozen=True)
class DrawnGraph:
    """The part of a graph that is drawn: kept node ids, edges (source, user), and per kept node the number of
    its sources left out (drawn as one "+N hidden" box)."""

    nodes: tuple[int, ...]
    edges: tuple[tuple[int, int], ...]
    hidden_sources: dict[int, int]
    total: int


class GraphStore:
    """The trace's nodes, interned by structure, and the replayed steps of its rewrites."""

    def __init__(self, nodes: list[dict[str, Any]], rewrites: list[dict[str, Any]]) -> None:
        self.op: list[str] = []
        self.dtype: list[str] = []
        self.arg: list[str] = []
        self.src: list[tuple[int, ...]] = []
        self.tag: list[str | None] = []
        self._interned: dict[NodeKey, int] = {}
        # canonical id of each node of the file (two file nodes of one structure become one)
        self.canonical: list[int] = []
        for node in nodes:
            sources = tuple(self.canonical[source] for source in node["src"])
            dtype = str(node.get("dtype", "")).removeprefix("dtypes.")
            self.canonical.append(self.intern(node["op"], dtype, str(node.get("arg", "")), sources, node.get("tag")))
        self.rewrites = rewrites
        self._replayed: dict[int, list[StepGraph]] = {}
        self._replaced: dict[int, dict[int, int]] = {}

    def intern(self, op: str, dtype: str, arg: str, src: tuple[int, ...], tag: str | None) -> int:
        """The id of the node with this structure (a new one if there is none)."""
        key = (op, dtype, arg, src, tag)
        found = self._interned.get(key)
        if found is None:
            found = self._interned[key] = len(self.op)
            self.op.append(op)
            self.dtype.append(dtype)
            self.arg.append(arg)
            self.src.append(src)
            self.tag.append(tag)
        return found

    def toposort(self, root: int) -> list[int]:
        """Every node reachable from `root`, sources before users."""
        order: list[int] = []
        seen = {root}
        stack: list[tuple[int, int]] = [(root, 0)]
        while stack:
            node, index = stack.pop()
            sources = self.src[node]
            if index < len(sources):
                stack.append((node, index + 1))
                child = sources[index]
                if child not in seen:
                    seen.add(child)
                    stack.append((child, 0))
            else:
                order.append(node)
        return order

    @staticmethod
    def _resolve(node: int, replaced: dict[int, int]) -> int:
        seen = {node}
        while node in replaced and replaced[node] not in seen:
            node = replaced[node]
            seen.add(node)
        return node

    def substitute(self, root: int, old: int, new: int, replaced: dict[int, int] | None = None) -> int | None:
        """`root`'s graph with `old` replaced by `new` (parents rebuilt; a rebuilt node that is a key of `replaced`
        becomes its replacement), or None when `old` is not in it."""
        order = self.toposort(root)
        if old not in set(order):
            return None
        earlier = {} if replaced is None else replaced
        mapped: dict[int, int] = {old: new}
        for node in order:
            if node == old:
                continue
            sources = self.src[node]
            if any(source in mapped for source in sources):
                rebuilt = tuple(mapped.get(source, source) for source in sources)
                built = self.intern(self.op[node], self.dtype[node], self.arg[node], rebuilt, self.tag[node])
                mapped[node] = self._resolve(built, earlier)
        return mapped.get(root, root)

    def whole_result_step(self, rewrite: int) -> bool:
        """Whether `rewrite` fired no rule yet changed the graph (a pass that is not a pattern rewrite, like the
        optimizer or the linearizer): it is shown as one step from its input to its recorded result."""
        record = self.rewrites[rewrite]
        result = record.get("result")
        return not record["steps"] and result is not None and self.canonical[result] != self.canonical[record["input"]]

    def step_count(self, rewrite: int) -> int:
        """How many steps `rewrite` is shown in (its fired rules, or 1 for a whole-result step)."""
        return len(self.rewrites[rewrite]["steps"]) or int(self.whole_result_step(rewrite))

    def step(self, rewrite: int, number: int) -> StepGraph:
        """The graph of `rewrite` after `number` fired rules (0: its input)."""
        record = self.rewrites[rewrite]
        steps = record["steps"]
        count = self.step_count(rewrite)
        if not 0 <= number <= count:
            raise IndexError(f"rewrite {rewrite} has steps 0..{count}, not {number}")
        done = self._replayed.setdefault(rewrite, [StepGraph(self.canonical[record["input"]], frozenset(), True)])
        replaced = self._replaced.setdefault(rewrite, {})
        if number == 1 and not steps:
            result = self.canonical[record["result"]]
            changed = frozenset(self.toposort(result)) - frozenset(self.toposort(done[0].root))
            return StepGraph(result, changed, True)
        while len(done) <= number:
            previous = done[-1]
            fired = steps[len(done) - 1]
            before, after = self.canonical[fired["before"]], self.canonical[fired["after"]]
            replaced[before] = after
            root = previous.root if before != previous.root else after
            in_graph = True
            if before != previous.root:
                substituted = self.substitute(previous.root, before, after, replaced)
                in_graph = substituted is not None
                root = previous.root if substituted is None else substituted
            changed = frozenset(self.toposort(root)) - frozenset(self.toposort(previous.root))
            done.append(StepGraph(root, changed, in_graph))
        return done[number]

    def result_matches(self, rewrite: int) -> bool | None:
        """Whether replaying every step of `rewrite` ends at its recorded result (None when none was recorded)."""
        record = self.rewrites[rewrite]
        if record.get("result") is None:
            return None
        result: int = self.canonical[record["result"]]
        return self.step(rewrite, len(record["steps"])).root == result

    def drawn(self, root: int, highlight: frozenset[int], limit: int) -> DrawnGraph:
        """At most `limit` nodes of `root`'s graph: all when it is small; else the highlighted nodes and their
        neighbourhood first, then the nodes nearest the root; sources left out are counted per kept node."""
        order = self.toposort(root)
        if len(order) <= limit:
            kept = set(order)
        else:
            users: dict[int, list[int]] = {}
            for node in order:
                for source in self.src[node]:
                    users.setdefault(source, []).append(node)
            kept = {root}
            queue: deque[int] = deque(sorted(highlight))
            queue.append(root)
            budget_near = limit // 2
            while queue and len(kept) < budget_near + 1:
                node = queue.popleft()
                kept.add(node)
                for neighbour in (*self.src[node], *users.get(node, ())):
                    if neighbour not in kept:
                        queue.append(neighbour)
            queue = deque([root])
            visited = {root}
            while queue and len(kept) < limit:
                node = queue.popleft()
                kept.add(node)
                for source in self.src[node]:
                    if source not in visited:
                        visited.add(source)
                        queue.append(source)
        nodes = tuple(node for node in order if node in kept)
        edges = []
        hidden: dict[int, int] = {}
        for node in nodes:
            left_out = set()
            for source in self.src[node]:
                if source in kept:
                    edges.append((source, node))
                else:
                    left_out.add(source)
            if left_out:
                hidden[node] = len(left_out)
        return DrawnGraph(nodes, tuple(edges), hidden, len(order))

    def describe(self, node: int) -> dict[str, Any]:
        """A node as JSON: op, dtype, arg, tag and source ids."""
        return {
            "id": node,
            "op": self.op[node],
            "dtype": self.dtype[node],
            "arg": self.arg[node],
            "tag": self.tag[node],
            "src": list(self.src[node]),
        }
