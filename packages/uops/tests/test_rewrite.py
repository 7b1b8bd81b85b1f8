"""Tests of kiln.uops.rewrite: fixed points, the two orders, maps, deep graphs, and non-termination."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.uops import Ops, PatternMatcher, UOp, UPat, VarArg, dtypes, graph_rewrite, graph_rewrite_map, tracing

x_var = UOp(Ops.DEFINE_VAR, dtypes.int32, (), VarArg("x", 0, 9))
y_var = UOp(Ops.DEFINE_VAR, dtypes.int32, (), VarArg("y", 0, 9))


def _fold(op: Ops, left: UOp, right: UOp) -> UOp:
    value = {Ops.ADD: left.arg + right.arg, Ops.MUL: left.arg * right.arg}[op]
    return UOp.const(left.dtype, value)


pm_fold = PatternMatcher(
    [
        (UPat.var("x") + 0, lambda x: x),
        (UPat.var("x") * 1, lambda x: x),
        (UPat.var("x") * 0, lambda x: x.const_like(0)),
        (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
        (
            UPat((Ops.ADD, Ops.MUL), src=(UPat.cvar("left", vec=False), UPat.cvar("right", vec=False)), name="n"),
            lambda n, left, right: _fold(n.op, left, right),
        ),
    ]
)


def _negated(node: UOp, times: int) -> UOp:
    for _ in range(times):
        node = -node
    return node


def test_rewrites_to_a_fixed_point() -> None:
    # ((x*1 + 0) * (2 + 3)) + (y * (4*0))  ->  x*5 + 0  ->  x*5
    expression = ((x_var * 1 + 0) * (UOp.const(dtypes.int32, 2) + 3)) + y_var * (UOp.const(dtypes.int32, 4) * 0)
    assert graph_rewrite(expression, pm_fold) is x_var * 5
    assert graph_rewrite(_negated(x_var, 4), pm_fold) is x_var
    assert graph_rewrite(x_var + y_var, pm_fold) is x_var + y_var


def _naive(node: UOp, pm: PatternMatcher) -> UOp:
    # the definition of the default order, written recursively: sources to their fixed point, then the node
    while True:
        node = node.replace(src=tuple(_naive(source, pm) for source in node.src))
        replaced = pm.rewrite(node)
        if replaced is None:
            return node
        node = replaced


leaves = st.sampled_from([x_var, y_var] + [UOp.const(dtypes.int32, v) for v in (0, 1, 2, 3)])
expressions = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.builds(lambda left, right: left + right, inner, inner),
        st.builds(lambda left, right: left * right, inner, inner),
        st.builds(lambda v: -v, inner),
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(expressions)
def test_default_order_agrees_with_the_recursive_definition(expression: UOp) -> None:
    assert graph_rewrite(expression, pm_fold) is _naive(expression, pm_fold)


@settings(max_examples=200, deadline=None)
@given(expressions, st.integers(0, 9), st.integers(0, 9))
def test_rewriting_preserves_the_value(expression: UOp, x: int, y: int) -> None:
    def evaluate(node: UOp) -> int:
        if node.op is Ops.CONST:
            return int(node.arg)
        if node.op is Ops.DEFINE_VAR:
            return {"x": x, "y": y}[node.arg.name]
        values = [evaluate(source) for source in node.src]
        return {
            Ops.ADD: lambda: values[0] + values[1],
            Ops.MUL: lambda: values[0] * values[1],
            Ops.NEG: lambda: -values[0],
        }[node.op]()

    for bottom_up in (False, True):
        assert evaluate(graph_rewrite(expression, pm_fold, bottom_up=bottom_up)) == evaluate(expression)


def test_top_down_and_bottom_up_differ_where_the_order_matters() -> None:
    # rule on a leaf: x -> 1; rule on the parent that only sees the original leaf: ADD(x, y) -> y*2
    pm = PatternMatcher(
        [
            (UPat(Ops.DEFINE_VAR, arg=VarArg("x", 0, 9)), lambda: UOp.const(dtypes.int32, 1)),
            (UPat(Ops.ADD, src=(UPat(Ops.DEFINE_VAR, arg=VarArg("x", 0, 9)), UPat.var("y"))), lambda y: y * 2),
        ]
    )
    graph = x_var + y_var
    assert graph_rewrite(graph, pm) is UOp.const(dtypes.int32, 1) + y_var  # sources first: the leaf changes first
    assert graph_rewrite(graph, pm, bottom_up=True) is y_var * 2  # node first: the parent rule sees the leaf


def test_bottom_up_retries_a_node_after_its_sources_change() -> None:
    # NEG(NEG(NEG(NEG(x)))): bottom-up sees the outer pair first, then must also fold what the sources become
    pm = PatternMatcher([(UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x)])
    assert graph_rewrite(_negated(x_var, 5), pm, bottom_up=True) is -x_var
    # ADD(c, NEG(NEG(c2))) with a folding rule on ADD of constants only fires after the source is simplified
    pm2 = pm + PatternMatcher(
        [
            (
                UPat.cvar("left", vec=False) + UPat.cvar("right", vec=False),
                lambda left, right: left.const_like(left.arg + right.arg),
            )
        ]
    )
    two, three = UOp.const(dtypes.int32, 2), UOp.const(dtypes.int32, 3)
    assert graph_rewrite(two + _negated(three, 2), pm2, bottom_up=True) is UOp.const(dtypes.int32, 5)


def test_each_node_is_rewritten_once_and_ctx_reaches_callbacks() -> None:
    visited: list[UOp] = []
    pm = PatternMatcher([(UPat(name="n"), lambda ctx, n: ctx.append(n))])
    shared = x_var + y_var
    graph = UOp.sink(shared * shared, shared)
    graph_rewrite(graph, pm, ctx=visited)
    assert sorted(map(id, visited)) == sorted(map(id, graph.toposort()))


def test_a_100k_node_graph_needs_no_recursion() -> None:
    node = x_var
    for i in range(70_000):
        node = (node + 0) * 1 if i % 2 else node + 0
    assert len(node.toposort()) > 100_000
    assert graph_rewrite(node, pm_fold) is x_var
    assert graph_rewrite(node, pm_fold, bottom_up=True) is x_var


def test_graph_rewrite_map_maps_every_node() -> None:
    inner = x_var * 1
    graph = UOp.sink(inner + 0, y_var)
    mapping = graph_rewrite_map(graph, pm_fold)
    assert set(mapping) == set(graph.toposort())
    assert mapping[inner] is x_var and mapping[inner + 0] is x_var and mapping[graph] is UOp.sink(x_var, y_var)
    assert mapping[y_var] is y_var
    # bottom-up replaces `inner + 0` before visiting `inner`; the map still gives `inner` its own result
    bottom = graph_rewrite_map(graph, pm_fold, bottom_up=True)
    assert bottom[inner] is x_var and bottom[graph] is UOp.sink(x_var, y_var)
    # composing with an earlier map: earlier key -> where its value went
    earlier = {UOp(Ops.DEVICE, dtypes.void, (), "tensor"): inner + 0}
    composed = graph_rewrite_map(graph, pm_fold, input_map=earlier)
    assert list(composed.values()) == [x_var]


def test_non_terminating_rules_raise() -> None:
    growing = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: v + 0)])
    with pytest.raises(RuntimeError, match="does not terminate"):
        graph_rewrite(x_var, growing)
    one, two = UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2)
    swapping = PatternMatcher([(UPat.const(dtypes.int32, 1), lambda: two), (UPat.const(dtypes.int32, 2), lambda: one)])
    with pytest.raises(RuntimeError, match="does not terminate"):
        graph_rewrite(one + x_var, swapping)
    with pytest.raises(RuntimeError, match="does not terminate"):
        graph_rewrite(one + x_var, swapping, bottom_up=True)


def test_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="PatternMatcher"):
        graph_rewrite(x_var, [(UPat(), lambda: None)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="UOp"):
        graph_rewrite("x", pm_fold)  # type: ignore[arg-type]
    returns_bool = PatternMatcher([(UPat(Ops.DEFINE_VAR), lambda: True)])
    for bottom_up in (False, True):
        with pytest.raises(TypeError, match="returned True"):
            graph_rewrite(x_var, returns_bool, bottom_up=bottom_up)


# ---------------------------------------------------------------------------------------------------------------
# the engine against an independent model: a recursive walk trying every pattern of the table by linear scan
# (UPat.match, no dispatch by op), on random graphs and random rule tables
# ---------------------------------------------------------------------------------------------------------------

_three = UOp.const(dtypes.int32, 3)
_x = UPat.var("x")
_RULE_POOL: list[tuple[UPat, Callable[..., UOp | None]]] = [
    (_x + 0, lambda x: x),
    (_x * 1, lambda x: x),
    (_x * 0, lambda x: x.const_like(0)),
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(_x,)),)), lambda x: x),
    (
        UPat((Ops.ADD, Ops.MUL), src=(UPat.cvar("left", vec=False), UPat.cvar("right", vec=False)), name="n"),
        lambda n, left, right: _fold(n.op, left, right),
    ),
    # wildcard roots: no op, so every node is a candidate (one also filters by dtype, one observes only)
    (UPat(dtype=dtypes.int32, name="n"), lambda n: _three if n is y_var else None),
    (UPat(name="n"), lambda n: None),
    # alternatives with different root ops (one of them commutative), and a rule binding one name twice
    (UPat.any(-UPat.cvar("c", vec=False), UPat.var("y") * UPat.cvar("c", vec=False)), lambda c, **_: -c),
    (_x + _x, lambda x: x * 2),
    # a result holding a node that another rule rewrites (y -> 3 above): it must be rebuilt on that node's result
    (UPat(Ops.DEFINE_VAR, arg=VarArg("x", 0, 9)), lambda: -y_var),
]


def _reference_rewrite(
    root: UOp, table: list[tuple[UPat, Callable[..., UOp | None]]], fired: list[tuple[UOp, UOp]]
) -> UOp:
    done: dict[UOp, UOp] = {}

    def rewrite(node: UOp) -> UOp | None:
        for pattern, callback in table:
            for bound in pattern.match(node):
                result = callback(**bound)
                if result is not None and result is not node:
                    fired.append((node, result))
                    return result
        return None

    def visit(node: UOp) -> UOp:
        if node in done:
            return done[node]
        sources = tuple(visit(source) for source in node.src)
        if sources != node.src:
            result = visit(node.replace(src=sources))
        else:
            replaced = rewrite(node)
            result = node if replaced is None else visit(replaced)
        done[node] = result
        return result

    return visit(root)


def _logged(table: list[tuple[UPat, Callable[..., UOp | None]]], log: list[tuple[int, UOp]]) -> list[Any]:
    def wrap(position: int, callback: Callable[..., UOp | None]) -> Callable[..., UOp | None]:
        def logged(**bound: UOp) -> UOp | None:
            result = callback(**bound)
            if result is not None:
                log.append((position, result))
            return result

        return logged

    return [(pattern, wrap(position, callback)) for position, (pattern, callback) in enumerate(table)]


@settings(max_examples=300, deadline=None)
@given(expressions, st.lists(st.sampled_from(range(len(_RULE_POOL))), min_size=1, max_size=8, unique=True))
def test_dispatch_by_op_fires_the_rules_a_linear_scan_fires(expression: UOp, chosen: list[int]) -> None:
    table = [_RULE_POOL[i] for i in chosen]
    expected_log: list[tuple[int, UOp]] = []
    expected_steps: list[tuple[UOp, UOp]] = []
    expected = _reference_rewrite(expression, _logged(table, expected_log), expected_steps)
    for traced in (False, True):
        log: list[tuple[int, UOp]] = []
        pm = PatternMatcher(_logged(table, log))
        if traced:
            with tracing() as traces:
                result = graph_rewrite(expression, pm)
            assert [(step.before, step.after) for step in traces[0].steps] == expected_steps
        else:
            result = graph_rewrite(expression, pm)
        assert result is expected
        assert log == expected_log


def test_a_wildcard_root_pattern_is_tried_on_every_op() -> None:
    seen: list[Ops] = []
    pm = PatternMatcher([(UPat(Ops.NEG, name="n"), lambda n: None), (UPat(name="n"), lambda n: seen.append(n.op))])
    graph_rewrite(UOp.sink(-(x_var + y_var), UOp.const(dtypes.int32, 1)), pm)
    assert sorted(seen, key=lambda op: op.value) == sorted(
        [Ops.DEFINE_VAR, Ops.DEFINE_VAR, Ops.ADD, Ops.NEG, Ops.CONST, Ops.SINK], key=lambda op: op.value
    )


def test_a_result_holding_an_already_rewritten_node_is_rebuilt_on_its_result() -> None:
    # y -> 3, then x -> -y: y was rewritten before x is reached, so the result -y must become -3
    pm = PatternMatcher(
        [
            (UPat(Ops.DEFINE_VAR, arg=VarArg("y", 0, 9)), lambda: _three),
            (UPat(Ops.DEFINE_VAR, arg=VarArg("x", 0, 9)), lambda: -y_var),
        ]
    )
    assert graph_rewrite(y_var + x_var, pm) is _three + -_three
    assert graph_rewrite(x_var + y_var, pm) is -_three + _three


def test_users_of_the_first_rewritten_node_are_rebuilt_and_an_untouched_graph_is_returned_as_is() -> None:
    # the walk looks sources up only once a rule has fired: nodes before the first firing keep their sources, every
    # user after it (near or far) is rebuilt on the new form
    x, y = UOp.variable("x", 0, 9), UOp.variable("y", 0, 9)
    before = x * 3  # met before the node the rule rewrites
    far = ((y + 100) * 2) + before  # the rewritten node's user, and that user's user
    sink = UOp(Ops.SINK, dtypes.void, (before, far))
    marker = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.const_like(7) if c.arg == 100 else None)])
    rewritten = graph_rewrite(sink, marker)
    assert rewritten.src[0] is before
    assert rewritten.src[1] is ((y + 7) * 2) + before
    assert graph_rewrite(sink, PatternMatcher([])) is sink
    never = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.const_like(7) if c.arg == 12345 else None)])
    assert graph_rewrite(sink, never) is sink
