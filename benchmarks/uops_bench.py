"""Benchmarks of kiln.uops: UOp creation, graph_rewrite throughput, and the cost of tracing when it is off.

Run: `uv run python benchmarks/uops_bench.py` (add `--quick` for a smaller run). Each figure is printed next to a
reference measured in the same run on the same machine. Times are CPU time of this process (time.process_time), the
best of several runs, so that other processes on a busy machine do not inflate them.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

from kiln.uops import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from kiln.uops import rewrite as rewrite_module
from kiln.uops import trace as trace_module


def best_time(run: Callable[[], object], repeats: int) -> float:
    """The fastest of `repeats` runs, in CPU seconds of this process."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


# ---------------------------------------------------------------------------------------------------------------
# UOp creation
# ---------------------------------------------------------------------------------------------------------------


def bench_creation(count: int, repeats: int) -> list[str]:
    """New UOps per second (hash-consing miss), cache hits per second, against building plain tuples in a dict."""
    variable = UOp.variable("a", 0, 1 << 20)

    # distinct constants make every node new content; the variable keeps them from being folded by anything
    def create() -> list[UOp]:
        return [UOp(Ops.ADD, dtypes.index, (variable, UOp(Ops.CONST, dtypes.index, (), i))) for i in range(count)]

    created = best_time(create, repeats)  # 2 * count new UOps per run
    kept = create()
    hits = best_time(create, repeats)  # the same content again: every lookup hits
    del kept

    def reference() -> dict[tuple[object, ...], tuple[object, ...]]:
        table: dict[tuple[object, ...], tuple[object, ...]] = {}
        for i in range(count):
            leaf = (Ops.CONST, dtypes.index, (), i)
            table[leaf] = leaf
            node = (Ops.ADD, dtypes.index, (variable, leaf), None)
            table[node] = node
        return table

    reference_time = best_time(reference, repeats)
    return [
        f"UOps created (new content)      {2 * count / created / 1e3:9.0f} k/s",
        f"UOps created (hash-cons hits)   {2 * count / hits / 1e3:9.0f} k/s",
        f"  reference: tuples into a dict {2 * count / reference_time / 1e3:9.0f} k/s",
    ]


# ---------------------------------------------------------------------------------------------------------------
# graph_rewrite over a 100k-node graph
# ---------------------------------------------------------------------------------------------------------------

pm_identities = PatternMatcher(
    [
        (UPat.var("x") + 0, lambda x: x),
        (UPat.var("x") * 1, lambda x: x),
        (
            UPat.cvar("left", vec=False) + UPat.cvar("right", vec=False),
            lambda left, right: left.const_like(left.arg + right.arg),
        ),
    ]
)


def build_graph(nodes: int) -> UOp:
    """A graph of at least `nodes` UOps: a sink of short chains over a few variables, with identities to fold."""
    variables = [UOp.variable(f"v{i}", 0, 100) for i in range(8)]
    terms: list[UOp] = []
    seen: set[UOp] = set()
    position = 0
    while len(seen) < nodes:
        term = variables[position % 8]
        for step in range(6):
            term = term * (step + 2) + position if step % 3 else term + 0
        seen.update(term.toposort(gate=lambda node: node not in seen))
        terms.append(term)
        position += 1
    return UOp.sink(*terms)


def bench_graph_rewrite(nodes: int, repeats: int) -> list[str]:
    """Nodes per second of graph_rewrite (both orders) against a plain toposort walk of the same graph."""
    graph = build_graph(nodes)
    size = len(graph.toposort())
    top_down = best_time(lambda: graph_rewrite(graph, pm_identities), repeats)
    bottom_up = best_time(lambda: graph_rewrite(graph, pm_identities, bottom_up=True), repeats)
    untouched = graph_rewrite(graph, pm_identities)  # a fixed point: measures matching without rebuilding
    fixed_size = len(untouched.toposort())
    fixed = best_time(lambda: graph_rewrite(untouched, pm_identities), repeats)
    walk = best_time(graph.toposort, repeats)
    return [
        f"graph_rewrite, {size} nodes (default order)  {size / top_down / 1e3:9.0f} k nodes/s",
        f"graph_rewrite, {size} nodes (bottom_up)      {size / bottom_up / 1e3:9.0f} k nodes/s",
        f"graph_rewrite of its fixed point ({fixed_size} nodes) {fixed_size / fixed / 1e3:9.0f} k nodes/s",
        f"  reference: toposort of the graph           {size / walk / 1e3:9.0f} k nodes/s",
    ]


# ---------------------------------------------------------------------------------------------------------------
# tracing overhead when off
# ---------------------------------------------------------------------------------------------------------------


def bench_tracing_overhead(calls: int, repeats: int) -> list[str]:
    """Time per graph_rewrite call with tracing off, against calling the untraced core directly (no check)."""
    trace_module.enable_tracing(False)
    small = (UOp.variable("a", 0, 9) + 0) * 1

    def public() -> None:
        for _ in range(calls):
            graph_rewrite(small, pm_identities)

    def core() -> None:
        rewrite_all = rewrite_module._rewrite_all
        rewrite = pm_identities.rewrite
        for _ in range(calls):
            rewrite_all(small, rewrite, None, False, None)

    public_time = best_time(public, repeats)
    core_time = best_time(core, repeats)
    with trace_module.tracing():
        traced_time = best_time(public, 1)
    trace_module.clear_traces()
    per_call = (public_time - core_time) / calls * 1e9
    return [
        f"graph_rewrite call, tracing off {public_time / calls * 1e6:8.2f} us",
        f"  reference: untraced core      {core_time / calls * 1e6:8.2f} us",
        f"  cost of the off switch and argument checks: {per_call:.0f} ns per graph_rewrite call",
        f"graph_rewrite call, tracing on  {traced_time / calls * 1e6:8.2f} us",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    options = parser.parse_args()
    scale = 10 if options.quick else 1
    repeats = 2 if options.quick else 5
    sections: list[tuple[str, Callable[[], list[str]]]] = [
        ("UOp creation", lambda: bench_creation(100_000 // scale, repeats)),
        ("graph_rewrite", lambda: bench_graph_rewrite(100_000 // scale, repeats)),
        ("tracing overhead", lambda: bench_tracing_overhead(20_000 // scale, repeats)),
    ]
    for title, run in sections:
        print(f"== {title}")
        for line in run():
            print(line)


if __name__ == "__main__":
    main()
