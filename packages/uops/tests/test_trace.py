"""Tests of kiln.uops.trace: what graph_rewrite records, the JSON file, and that nothing is recorded when off."""

from __future__ import annotations

import json
import pathlib

from kiln.uops import Ops, PatternMatcher, UOp, UPat, dtypes, enable_tracing, graph_rewrite, save_trace, tracing
from kiln.uops import trace as trace_module

a = UOp.variable("a", 0, 9)
pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x), (UPat.var("x") * 1, lambda x: x)])
RULE_LINE = pm.rules[0].location.rsplit(":", 1)[1]


def test_tracing_records_each_fired_rule_in_order() -> None:
    graph = (a + 0) * 1
    with tracing() as traces:
        result = graph_rewrite(graph, pm, name="identities")
        graph_rewrite(a, pm, bottom_up=True)
    assert result is a
    assert len(traces) == 2
    first = traces[0]
    assert (first.name, first.bottom_up, first.input, first.result) == ("identities", False, graph, a)
    assert [(step.before, step.after) for step in first.steps] == [(a + 0, a), (a * 1, a)]
    assert first.steps[0].location.endswith(f"test_trace.py:{RULE_LINE}")
    assert "Ops.ADD" in first.steps[0].pattern
    assert traces[1].steps == [] and traces[1].result is a


def test_nothing_is_recorded_when_tracing_is_off() -> None:
    enable_tracing(False)
    before = len(trace_module.recorded_traces())
    graph_rewrite((a + 0) * 1, pm)
    assert len(trace_module.recorded_traces()) == before


def test_save_trace_writes_a_self_contained_json(tmp_path: pathlib.Path) -> None:
    with tracing() as traces:
        graph_rewrite((a + 0) * 1, pm, name="identities")
    path = tmp_path / "trace.json"
    save_trace(path, traces)
    document = json.loads(path.read_text())
    assert (document["format"], document["version"]) == ("kiln-rewrite-trace", 2)
    nodes = document["nodes"]
    (rewrite,) = document["rewrites"]
    assert rewrite["name"] == "identities"

    def rebuild(node_id: int) -> str:
        node = nodes[node_id]
        return f"{node['op']}({', '.join(rebuild(s) for s in node['src'])})"

    assert rebuild(rewrite["input"]) == "MUL(ADD(DEFINE_VAR(), CONST()), CONST())"
    assert rebuild(rewrite["result"]) == "DEFINE_VAR()"
    assert [(rebuild(s["before"]), rebuild(s["after"])) for s in rewrite["steps"]] == [
        ("ADD(DEFINE_VAR(), CONST())", "DEFINE_VAR()"),
        ("MUL(DEFINE_VAR(), CONST())", "DEFINE_VAR()"),
    ]
    assert nodes[rewrite["result"]]["dtype"] == "dtypes.index"
    assert nodes[rewrite["result"]]["arg"] == "VarArg(name='a', lo=0, hi=9)"
    assert all(node["op"] in Ops.__members__ for node in nodes)
    _ = dtypes
