"""Replaying a rewrite step by step, checked against kiln.uops itself: the graph after step k must be the input with
the first k recorded replacements substituted (UOp.substitute), and the changed nodes exactly the new ones."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kiln.uops import PatternMatcher, UOp, UPat, graph_rewrite, tracing
from kiln.uops.trace import traces_to_json
from kiln.viz.dot import to_dot
from kiln.viz.graphs import GraphStore

a, b, c = (UOp.variable(name, 0, 9) for name in "abc")
IDENTITIES = PatternMatcher(
    [
        (UPat.var("x") + 0, lambda x: x),
        (UPat.var("x") * 1, lambda x: x),
        (UPat.var("x") * 0, lambda x: x.const_like(0)),
        (UPat.var("x") - UPat.var("x"), lambda x: x.const_like(0)),
    ]
)


def structure(node: UOp) -> Any:
    return (node.op.name, repr(node.dtype).removeprefix("dtypes."), repr(node.arg), tuple(map(structure, node.src)))


def viz_structure(store: GraphStore, node: int) -> Any:
    return (store.op[node], store.dtype[node], store.arg[node], tuple(viz_structure(store, s) for s in store.src[node]))


def _substitute(root: UOp, replaced: dict[UOp, UOp]) -> UOp:
    # the model on kiln's own UOps: rebuild parents of replaced nodes; a rebuilt node replaced earlier is replaced
    memo: dict[UOp, UOp] = {}

    def rebuild(node: UOp) -> UOp:
        if node not in memo:
            if node in replaced:
                memo[node] = resolve(replaced[node])
            else:
                sources = tuple(rebuild(source) for source in node.src)
                memo[node] = node if sources == node.src else resolve(node.replace(src=sources))
        return memo[node]

    def resolve(node: UOp) -> UOp:
        while node in replaced:
            node = replaced[node]
        return node

    return rebuild(root)


def replay_against_uops(graph: UOp, bottom_up: bool) -> tuple[GraphStore, int]:
    with tracing() as traces:
        graph_rewrite(graph, IDENTITIES, bottom_up=bottom_up, name="identities")
    (record,) = traces
    document = traces_to_json(traces)
    store = GraphStore(document["nodes"], document["rewrites"])
    current = graph
    assert viz_structure(store, store.step(0, 0).root) == structure(current)
    replaced: dict[UOp, UOp] = {}
    for number, fired in enumerate(record.steps, start=1):
        previous = current
        replaced[fired.before] = fired.after
        if fired.before in previous.toposort():
            current = _substitute(previous, replaced)
        replayed = store.step(0, number)
        assert replayed.in_graph == (fired.before in previous.toposort())
        assert viz_structure(store, replayed.root) == structure(current)
        new_nodes = sorted(map(structure, set(current.toposort()) - set(previous.toposort())), key=repr)
        assert sorted((viz_structure(store, n) for n in replayed.changed), key=repr) == new_nodes
    return store, len(record.steps)


def test_the_documented_example_step_by_step() -> None:
    store, steps = replay_against_uops((a + 0) * 1, bottom_up=False)
    assert steps == 2
    assert viz_structure(store, store.step(0, 1).root) == structure(a * 1)
    assert store.step(0, 2).root == store.canonical[store.rewrites[0]["result"]]
    assert store.result_matches(0) is True


def _random_graph(rng: random.Random, depth: int) -> UOp:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([a, b, c, a.const_like(rng.choice([0, 1, 2]))])
    left, right = _random_graph(rng, depth - 1), _random_graph(rng, depth - 1)
    kind = rng.choice(["add", "mul", "sub", "add0", "mul1", "mul0", "self-sub"])
    return {
        "add": lambda: left + right,
        "mul": lambda: left * right,
        "sub": lambda: left - right,
        "add0": lambda: left + 0,
        "mul1": lambda: left * 1,
        "mul0": lambda: left * 0,
        "self-sub": lambda: left - left,
    }[kind]()


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("bottom_up", [False, True])
def test_random_rewrites_replay_like_substitute(seed: int, bottom_up: bool) -> None:
    graph = _random_graph(random.Random(seed), 6)
    store, _ = replay_against_uops(graph, bottom_up)
    # the replayed end is graph_rewrite's own result
    assert store.result_matches(0) is True


def _chain(length: int) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = [{"op": "DEFINE_VAR", "dtype": "dtypes.int", "arg": "x", "src": []}]
    for index in range(1, length):
        nodes.append({"op": "CONST", "dtype": "dtypes.int", "arg": str(index), "src": []})
        nodes.append({"op": "ADD", "dtype": "dtypes.int", "arg": "None", "src": [len(nodes) - 2, len(nodes) - 1]})
    return nodes


def test_big_graphs_are_drawn_in_part_with_hidden_sources_counted() -> None:
    nodes = _chain(2500)  # 4999 nodes
    store = GraphStore(nodes, [])
    root = store.canonical[-1]
    highlight = frozenset({store.canonical[2000]})
    drawn = store.drawn(root, highlight, 250)
    assert drawn.total == len(nodes) == 4999
    kept = set(drawn.nodes)
    assert len(kept) <= 250 and root in kept and highlight <= kept
    assert all(source in kept and user in kept for source, user in drawn.edges)
    for node in kept:  # brute force: the sources of a kept node that are not drawn
        missing = {source for source in store.src[node] if source not in kept}
        assert drawn.hidden_sources.get(node, 0) == len(missing)
    small = store.drawn(store.canonical[20], frozenset(), 250)
    assert small.hidden_sources == {} and len(small.nodes) == small.total
    dot = to_dot(store, drawn, highlight)
    assert dot.count('class="changed"') == 1 and "hidden" in dot


def test_interning_merges_nodes_of_one_structure() -> None:
    nodes = [
        {"op": "CONST", "dtype": "dtypes.int", "arg": "1", "src": []},
        {"op": "CONST", "dtype": "dtypes.int", "arg": "1", "src": []},
        {"op": "ADD", "dtype": "dtypes.int", "arg": "None", "src": [0, 1]},
    ]
    store = GraphStore(nodes, [])
    assert store.canonical[0] == store.canonical[1]
    assert store.src[store.canonical[2]] == (store.canonical[0], store.canonical[0])
