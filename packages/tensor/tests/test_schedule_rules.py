"""The scheduler's placement rules (schedule/rules.py): named functions applied in their tables' order, each decision
recorded as (rule, node, decision) in the viz trace, one rewrite per rule as codegen's passes are."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import cast

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.schedule import normalize, plan_schedule
from kiln.tensor.schedule.items import KernelStep
from kiln.tensor.schedule.row_fusion import fuses_rows
from kiln.tensor.schedule.rules import GRAPH_RULES, KERNEL_RULES, LAST_RESORT_RULES, rule_location
from kiln.uops import Ops, trace

DEVICE = "PYTHON"  # planning only: nothing is compiled


def _buffer(*shape: int, device: str = DEVICE) -> Tensor:
    return Tensor(np.zeros(shape, np.float32), device=device).realize()


def _decisions(*tensors: Tensor) -> tuple[int, list[tuple[str, str, str]], trace.TraceGroup]:
    # kernels planned for `tensors`, the decisions recorded in the trace (rule, node op, decision), and the trace group
    sink = normalize([tensor.uop for tensor in tensors]).sink
    with trace.tracing():
        groups_before = len(trace.recorded_groups())
        plan = plan_schedule(sink)
        (group,) = trace.recorded_groups()[groups_before:]
    decisions = [
        (entry["rule"], entry["description"].split()[0], entry["decision"]) for entry in group.info["decisions"]
    ]
    kernels = sum(isinstance(step, KernelStep) for step in plan.steps)
    return kernels, decisions, group


def test_the_tables_name_their_rules_in_order_and_every_rule_says_what_it_decides() -> None:
    assert [rule.__name__ for rule in GRAPH_RULES] == [
        "requested_outputs",
        "contiguous_buffers",
        "assign_targets",
        "device_copies",
        "materialize_through_expand",
        "nested_reduces",
    ]
    assert [rule.__name__ for rule in KERNEL_RULES] == [
        "racing_assigns",
        "shared_reduces",
        "separate_sibling_products",
        "recomputed_row_reduces",
    ]
    assert [rule.__name__ for rule in LAST_RESORT_RULES] == ["split_blown_up_kernels"]
    for rule in (*GRAPH_RULES, *KERNEL_RULES, *LAST_RESORT_RULES):
        assert inspect.getdoc(rule), rule.__name__
        path, line = rule_location(rule.__name__).rsplit(":", 1)
        assert path.endswith("rules.py") and inspect.getsourcelines(cast(Callable[..., object], rule))[1] == int(line)
    with pytest.raises(ValueError, match="no placement rule is named 'fuse_everything'"):
        rule_location("fuse_everything")


def test_a_reduce_over_long_rows_read_through_an_expand_gets_a_buffer() -> None:
    x = _buffer(4, 16384)  # 64 KiB rows: longer than row fusion keeps
    kernels, decisions, group = _decisions(x - x.sum(axis=1, keepdim=True))
    assert kernels == 2  # the row sums, then the difference
    assert [(rule, op) for rule, op, _ in decisions] == [
        ("requested_outputs", "SUB"),
        ("materialize_through_expand", "REDUCE_AXIS"),
    ]
    assert "recomputed 16384 times per value" in decisions[1][2]
    entry = group.info["decisions"][1]
    assert entry["location"] == rule_location("materialize_through_expand") and entry["node"] == 1
    decided = group.uops["decided"]
    assert isinstance(decided, list) and decided[1].op is Ops.REDUCE_AXIS and decided[0].op is Ops.SUB
    saved = json.loads(json.dumps(trace.traces_to_json([], [group])))  # the trace file viz reads
    (written,) = saved["groups"]
    assert written["info"]["decisions"][1]["rule"] == "materialize_through_expand"
    assert saved["nodes"][written["uops"]["decided"][1]]["op"] == "REDUCE_AXIS"


@pytest.mark.skipif(not fuses_rows("CPU"), reason="the CPU renderer has local threads: no row fusion")
def test_a_reduce_over_short_rows_is_kept_by_row_fusion() -> None:
    x = _buffer(8, 256, device="CPU")
    kernels, decisions, _ = _decisions(x - x.sum(axis=1, keepdim=True))
    assert kernels == 1  # sum and difference in one kernel over each row
    assert [(rule, op) for rule, op, _ in decisions] == [("requested_outputs", "SUB"), ("row_fusion", "REDUCE_AXIS")]
    assert decisions[1][2].startswith("kept in its reader over short rows")


def test_independent_products_are_separated_by_their_costs_and_the_decision_says_them() -> None:
    # (64, 768) @ (768, 2048) twice: each weight (6 MiB) is larger than the cache and streamed once per row of x in a
    # shared kernel; (64, 64) @ (64, 64) operands stay in the cache, and together they save two launches
    for rows, inner, cols, separated in ((64, 768, 2048, True), (64, 64, 64, False)):
        x, w1, w3 = _buffer(rows, inner), _buffer(cols, inner), _buffer(cols, inner)
        _, _, group = _decisions((x @ w1.T).relu() * (x @ w3.T))
        decided = [entry for entry in group.info["decisions"] if entry["rule"] == "separate_sibling_products"]
        assert [entry["cut"] for entry in decided] == [separated, separated], rows
        assert all(entry["description"].startswith("REDUCE_AXIS") for entry in decided)
        verdict = "apart" if separated else "fused"
        assert all(entry["decision"].split(": ", 1)[1].startswith(verdict) for entry in decided), decided


def test_a_reduce_read_by_two_kernels_is_computed_once() -> None:
    x = _buffer(16, 16)
    total = x.sum(axis=0)
    first, second = (total * 2.0).contiguous(), (total + x[0]).contiguous()
    kernels, decisions, _ = _decisions(first, second)
    shared = [(op, decision) for rule, op, decision in decisions if rule == "shared_reduces"]
    assert shared == [("REDUCE_AXIS", "a reduce needed by 2 kernels")]
    assert kernels == 2  # the sum; both outputs share one multi-output kernel


def test_nothing_is_recorded_while_tracing_is_off() -> None:
    x = _buffer(4, 16384)
    groups = len(trace.recorded_groups())
    assert not trace.tracing_enabled()
    plan_schedule(normalize([(x - x.sum(axis=1, keepdim=True)).uop]).sink)
    assert len(trace.recorded_groups()) == groups
