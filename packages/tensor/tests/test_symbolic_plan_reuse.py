"""Schedule plans of graphs over bound Variables are reused across values outside the JIT (issue 37).

A new value of a variable normalizes to new roots, but the plan made for another value serves it: the schedule
cache takes that plan with the new values (`ScheduleCache.rebinds`) instead of planning (`misses`). Results are
checked against numpy; the counters say whether a plan was made, not timing."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor, Variable
from kiln.tensor.realize.engine import Engine
from kiln.tensor.schedule import normalize, plan_schedule
from kiln.tensor.symbolic import graph_rebind, graph_unbind
from kiln.uops import Ops, UOp

N = Variable("n", 1, 64)
DATA = np.random.default_rng(37).standard_normal((64, 8)).astype(np.float32)
WEIGHT = np.random.default_rng(38).standard_normal((8, 5)).astype(np.float32)


def _graph(x: Tensor, w: Tensor, value: int) -> Tensor:
    rows = x[: N.bind(value)]
    return (rows @ w).relu().sum(0) + rows.mean(0)[:5] + Tensor.arange(N.bind(value)).float().sum()


def _expected(value: int) -> np.ndarray:
    rows = DATA[:value]
    return np.maximum(rows @ WEIGHT, 0).sum(0) + rows.mean(0)[:5] + np.arange(value).sum()


def test_a_new_value_reuses_the_plan_without_planning(engine: Engine) -> None:
    x, w = Tensor(DATA).realize(), Tensor(WEIGHT).realize()
    np.testing.assert_allclose(_graph(x, w, 5).numpy(), _expected(5), rtol=1e-5, atol=1e-4)
    misses, built = engine.schedule.misses, engine.programs_built
    for count, value in enumerate((6, 64, 1, 33), start=1):
        np.testing.assert_allclose(_graph(x, w, value).numpy(), _expected(value), rtol=1e-5, atol=1e-4)
        assert engine.schedule.misses == misses, f"value {value} planned the schedule again"
        assert engine.schedule.rebinds >= count
        assert engine.programs_built == built
    rebinds = engine.schedule.rebinds
    np.testing.assert_allclose(_graph(x, w, 6).numpy(), _expected(6), rtol=1e-5, atol=1e-4)
    assert engine.schedule.rebinds == rebinds and engine.schedule.misses == misses  # a value seen before: a hit


def test_the_rebound_plan_equals_the_plan_made_for_the_value() -> None:
    x, w = Tensor(DATA).realize(), Tensor(WEIGHT).realize()
    first = normalize([_graph(x, w, 5).uop])
    general = plan_schedule(UOp(Ops.SINK, src=first.roots))
    for value in (1, 17, 64):
        graph = normalize([_graph(x, w, value).uop])
        unbound = graph_unbind(graph.roots)
        assert unbound is not None and unbound[1] == {"n": value}
        assert unbound[0] == graph_unbind(first.roots)[0]  # type: ignore[index]
        assert general.rebound(unbound[1]) == plan_schedule(UOp(Ops.SINK, src=graph.roots))
        assert graph_rebind(first.roots, unbound[1]) == graph.roots


def test_graphs_without_variables_or_with_one_variable_at_two_values_have_no_unbound_plan(engine: Engine) -> None:
    x = Tensor(DATA).realize()
    assert graph_unbind(normalize([(x * 2).sum(0).uop]).roots) is None
    three, four = x[: N.bind(3)].sum(0), (x[: N.bind(4)] * 2).sum(0)
    assert graph_unbind(normalize([three.uop, four.uop]).roots) is None  # one variable at two values: no sharing
    with pytest.raises(ValueError, match=r"'n' is bound to both 3 and 4"):  # planned as before: one kernel
        Tensor.realize_all(three, four)
    assert engine.schedule.rebinds == 0


def test_a_sum_of_two_variables_is_one_structure_for_every_pair_of_values(engine: Engine) -> None:
    # the simplifier orders a sum's terms by their nodes, and a bound node holds its value: sizes are simplified
    # unbound, so start + length keeps one form (one plan, one kernel) whatever the values
    start, length = Variable("start", 0, 32), Variable("length", 1, 32)
    x = Tensor(DATA).realize()
    pairs = [(0, 8), (4, 5), (3, 8), (5, 2), (32, 32), (17, 1)]
    for count, (first, size) in enumerate(pairs):
        total = start.bind(first) + length.bind(size)
        np.testing.assert_allclose((x[:total] * 2).sum(0).numpy(), DATA[: first + size].sum(0) * 2, rtol=1e-5)
        if count == 0:
            misses, built = engine.schedule.misses, engine.programs_built
    assert (engine.schedule.misses, engine.programs_built) == (misses, built)
    assert engine.schedule.rebinds == len(pairs) - 1


def test_a_constant_that_changes_with_the_variable_is_lifted_once(engine: Engine) -> None:
    # a scale that changes at every call together with n: the constant is seen to vary in the structure without the
    # variable's values, lifted into a buffer, and one kernel then serves every (n, scale)
    x = Tensor(DATA).realize()
    calls = [(3, 0.5), (4, 0.25), (5, 0.125), (60, 2.0), (7, 3.0), (3, 0.5), (64, 1.5)]
    built = []
    for value, scale in calls:
        got = (x[: N.bind(value)] * scale).sum(0).numpy()
        np.testing.assert_allclose(got, (DATA[:value] * np.float32(scale)).sum(0), rtol=1e-5, atol=1e-5)
        built.append(engine.programs_built)
    assert built[1] == built[-1], f"programs built after each call: {built}"
