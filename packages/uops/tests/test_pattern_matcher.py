"""Tests of kiln.uops.pattern_matcher: rule order, backtracking, ctx passing, dispatch and callback checks."""

from __future__ import annotations

import pytest

from kiln.uops import Ops, PatternMatcher, UOp, UPat, VarArg, dtypes

a = UOp(Ops.DEFINE_VAR, dtypes.int32, (), VarArg("a", 0, 9))
b = UOp(Ops.DEFINE_VAR, dtypes.int32, (), VarArg("b", 0, 9))


def test_first_matching_rule_in_table_order_wins() -> None:
    pm = PatternMatcher(
        [
            (UPat(Ops.MUL, name="x"), lambda x: x.src[0]),
            (UPat(Ops.ADD, name="x"), lambda x: x.src[0]),
            (UPat(Ops.ADD, name="x"), lambda x: x.src[1]),
        ]
    )
    assert pm.rewrite(a + b) is a
    assert pm.rewrite(a * b) is a
    assert pm.rewrite(a - b) is None


def test_a_rejecting_callback_falls_through_to_the_next_binding_and_rule() -> None:
    seen: list[tuple[UOp, UOp]] = []

    def only_when_x_is_b(x: UOp, y: UOp) -> UOp | None:
        seen.append((x, y))
        return y if x is b else None

    pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.var("y")]), only_when_x_is_b)])
    assert pm.rewrite(a + b) is a  # the second permutation binds x=b
    assert seen == [(a, b), (b, a)]
    fallback = PatternMatcher([(UPat(Ops.ADD), lambda: None), (UPat(Ops.ADD, name="x"), lambda x: x.src[1])])
    assert fallback.rewrite(a + b) is b


def test_returning_the_node_itself_counts_as_no_match() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x), (UPat(Ops.ADD, name="x"), lambda x: x.src[0])])
    assert pm.rewrite(a + b) is a


def test_ctx_is_passed_only_to_callbacks_that_take_it() -> None:
    calls: list[object] = []

    def with_ctx(ctx: list[object], x: UOp) -> None:
        ctx.append(x)

    def without_ctx(x: UOp) -> None:
        calls.append(x)

    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), with_ctx), (UPat(Ops.ADD, name="x"), without_ctx)])
    context: list[object] = []
    assert pm.rewrite(a + b, ctx=context) is None
    assert context == [a + b] and calls == [a + b]


def test_patterns_without_an_op_are_tried_on_every_op() -> None:
    order: list[str] = []
    pm = PatternMatcher(
        [
            (UPat(name="x"), lambda x: order.append("any")),
            (UPat(Ops.ADD, name="x"), lambda x: order.append("add")),
        ]
    )
    pm.rewrite(a + b)
    pm.rewrite(a)
    assert order == ["any", "add", "any"]


def test_alternatives_dispatch_by_their_own_ops() -> None:
    # the ADD alternative must not be tried on MUL nodes (and the other way round)
    pm = PatternMatcher(
        [
            (
                UPat.any(
                    UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), UPat(Ops.MUL, src=(UPat.var("y"), UPat.var("x")))
                ),
                lambda x, y: x,
            )
        ]
    )
    assert pm.rewrite(a + b) is a
    assert pm.rewrite(a * b) is b
    assert pm.rewrite(a - b) is None


def test_concatenation_keeps_order() -> None:
    first = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x.src[0])])
    second = PatternMatcher(
        [(UPat(Ops.ADD, name="x"), lambda x: x.src[1]), (UPat(Ops.MUL, name="x"), lambda x: x.src[1])]
    )
    combined = first + second
    assert len(combined) == 3
    assert combined.rewrite(a + b) is a
    assert combined.rewrite(a * b) is b
    assert (second + first).rewrite(a + b) is b


def test_callback_signature_is_checked_when_the_table_is_built() -> None:
    with pytest.raises(TypeError, match="does not accept"):
        PatternMatcher([(UPat(Ops.ADD, name="x"), lambda y: y)])
    with pytest.raises(TypeError, match="never binds"):
        PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x, z: x)])
    with pytest.raises(TypeError, match="UPat, callable"):
        PatternMatcher([(Ops.ADD, lambda x: x)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="reserved"):
        UPat(Ops.ADD, name="ctx")
    # **kwargs takes every name
    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), lambda **kw: kw["y"])])
    assert pm.rewrite(a + b) is b


def test_rules_record_where_their_callback_lives() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x.src[0])])
    result, rule = pm.rewrite_with_rule(a + b)
    assert result is a and rule is not None
    assert rule.location.endswith(
        f"test_pattern_matcher.py:{test_rules_record_where_their_callback_lives.__code__.co_firstlineno + 1}"
    )
