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
        rules = pm_identities.by_op
        for _ in range(calls):
            rewrite_all(small, rules, None, False, None, None)

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


# ---------------------------------------------------------------------------------------------------------------
# symbolic simplification
# ---------------------------------------------------------------------------------------------------------------


def index_expressions(count: int, offset: int) -> list[UOp]:
    """Kernel-like index expressions: a flat index split into digits and recombined, gated, divided, clamped."""
    gidx, lidx = UOp.special(64, "gidx0"), UOp.special(16, "lidx0")
    loop, upcast = UOp.range(32, 0), UOp.range(4, 1)
    width = UOp.variable("width", 1, 512)
    expressions = []
    for i in range(offset, offset + count):
        flat = (gidx * 16 + lidx) * 4 + upcast + i % 7
        digits = ((flat // 4) % 16) * 4 + flat % 4 + (flat // 64) * 64
        gate = (loop * 4 + upcast + i % 3).lt(64 + i % 50)
        strided = (flat * 3 + loop * width) // 3 + (flat * 2 + 1) % 2
        expressions.append(gate.where(digits + strided.maximum(0), (loop + i) // 8 * 8 + (loop + i) % 8))
    return expressions


def bench_symbolic(count: int, repeats: int) -> list[str]:
    """Expressions simplified per second by pm_symbolic and pm_symbolic_simple, against a rewrite with no rules."""
    from kiln.uops import pm_symbolic, pm_symbolic_simple

    no_rules = PatternMatcher([])
    timings: dict[str, float] = {}
    nodes_in = nodes_out = 0
    for name, matcher in (("full", pm_symbolic), ("simple", pm_symbolic_simple), ("none", no_rules)):
        best = float("inf")
        for repeat in range(repeats):
            # fresh expressions every run: nothing cached on the nodes (bounds, canonical sums) from an earlier run
            corpus = index_expressions(count, offset=1000 * repeat + 100_000 * len(timings))
            gc.collect()
            start = time.process_time()
            results = [graph_rewrite(expression, matcher) for expression in corpus]
            best = min(best, time.process_time() - start)
            if name == "full":
                nodes_in = sum(len(expression.toposort()) for expression in corpus)
                nodes_out = sum(len(result.toposort()) for result in results)
        timings[name] = best
    variables = [UOp.variable(f"v{i:03d}", 0, 100) for i in range(100)]
    long_sum = variables[0]
    for variable in variables[1:]:
        long_sum = long_sum + variable * 3 + 1
    long_time = best_time(lambda: graph_rewrite(long_sum, pm_symbolic), 1)
    return [
        f"simplify (pm_symbolic), index expressions  {count / timings['full']:9.0f} expressions/s"
        f"  ({nodes_in / count:.0f} -> {nodes_out / count:.0f} nodes each)",
        f"pm_symbolic_simple on the same             {count / timings['simple']:9.0f} expressions/s",
        f"  reference: graph_rewrite with no rules   {count / timings['none']:9.0f} expressions/s",
        f"simplify a 100-term sum built term by term {long_time * 1e3:9.1f} ms",
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
        ("symbolic simplification", lambda: bench_symbolic(1000 // scale, repeats)),
    ]
    for title, run in sections:
        print(f"== {title}")
        for line in run():
            print(line)


if __name__ == "__main__":
    main()
