"""Golden simplifications, exactness guards, render and sym_infer."""

from __future__ import annotations

import gc
import itertools
import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.uops import Ops, UOp, dtypes, exec_alu, graph_rewrite, live_uop_count, truncate
from kiln.uops.symbolic import pm_symbolic, pm_symbolic_simple, render, simplify, sym_infer

a = UOp.variable("a", 0, 10)
b = UOp.variable("b", 0, 3)
c = UOp.variable("c", 0, 7)
x = UOp.variable("x", 0, 100)
n = UOp.variable("n", 1, 16)
s = UOp.variable("s", -5, 5)
r0 = UOp.range(16, 0)
r1 = UOp.range(4, 1)
gidx = UOp.special(32, "gidx0")
lidx = UOp.special(8, "lidx0")
v8 = UOp.variable("v", 0, 10, dtypes.int8)

# (input, expected render of the simplified form); the expected strings were worked out by hand
GOLDEN: list[tuple[Callable[[], UOp], str]] = [
    # identities
    (lambda: a + 0, "a"),
    (lambda: a * 1, "a"),
    (lambda: a * 0, "0"),
    (lambda: a // 1, "a"),
    (lambda: a % 1, "0"),
    (lambda: a.alu(Ops.NEG).alu(Ops.NEG), "a"),
    (lambda: a - a, "0"),
    (lambda: a.lt(5).ne(True).ne(True), "(a<5)"),
    (lambda: x.eq(x), "true"),
    (lambda: a.lt(b).where(x, x), "x"),
    # canonical sums: like terms, order, constants last
    (lambda: a * 2 + a * 3, "(a*5)"),
    (lambda: (a + b) - a, "b"),
    (lambda: (a + 3) + (b + 4), "((a+b)+7)"),
    (lambda: b + a, "(a+b)"),
    (lambda: 3 + a, "(a+3)"),
    (lambda: c + b + a, "((a+b)+c)"),
    (lambda: 3 - a, "(3-a)"),
    (lambda: (a * 3 + b) * 2 - a * 6, "(b*2)"),
    (lambda: (3 * a) * (2 * b), "((a*b)*6)"),
    (lambda: UOp.const(dtypes.int8, 100) + UOp.const(dtypes.int8, 100), "-56"),
    # division and modulo by constants
    (lambda: (a * 4 + b) // 4, "a"),
    (lambda: (a * 4 + b) % 4, "b"),
    (lambda: (a * 4 + c) // 4, "(a+(c/4))"),
    (lambda: (a * 4 + c) % 4, "(c%4)"),
    (lambda: (a // 2) // 3, "(a/6)"),
    (lambda: (x % 12) // 4, "((x/4)%3)"),
    (lambda: (x % 12) % 4, "(x%4)"),
    (lambda: (x % 4) % 12, "(x%4)"),
    (lambda: (gidx * 8 + lidx) // 8, "gidx0"),
    (lambda: (gidx * 8 + lidx) % 8, "lidx0"),
    (lambda: (r0 * 4 + r1) // 4, "ridx0"),
    (lambda: (r0 * 4 + r1) % 4, "ridx1"),
    (lambda: (r0 + a * 16) // 16, "a"),
    (lambda: (a * 6 + 4) // 2, "((a*3)+2)"),
    (lambda: (a * 4 + 2) // 8, "(a/2)"),
    (lambda: (x * 4 + 2) % 8, "(((x%2)*4)+2)"),
    (lambda: (a * 8 + b * 2 + 1) // 4, "((a*2)+(b/2))"),
    (lambda: (x // 4 + 1) // 2, "((x+4)/8)"),
    (lambda: (-a) // 4, "(-(a/4))"),
    (lambda: a // -4, "(-(a/4))"),
    (lambda: a % -4, "(a%4)"),
    (lambda: ((a + 1) % 2 + a) % 2, "1"),
    # recombining split indices
    (lambda: x % 4 + (x // 4) * 4, "x"),
    (lambda: ((x // 4) % 3) * 4 + x % 4, "(x%12)"),
    (lambda: x // 4 + (x + 1) // 4 + (x + 2) // 4 + (x + 3) // 4, "x"),
    # variable divisors
    (lambda: (a * n) // n, "a"),
    (lambda: (a * n + b) // n, "(a+(b/n))"),
    (lambda: (a * n) % n, "0"),
    # comparisons
    (lambda: (a + b).lt(20), "true"),
    (lambda: (a * 4).lt(9), "(a<3)"),
    (lambda: (a * 4 + b).lt(8), "(a<2)"),
    (lambda: (a // 4).lt(2), "(a<8)"),
    (lambda: (a + 3).lt(5), "(a<2)"),
    (lambda: (a * 2).eq(5), "false"),
    (lambda: (a + 3).ne(7), "(a!=4)"),
    (lambda: (a + b).lt(a + 5), "true"),
    (lambda: (x % 4).lt(4), "true"),
    # max, min, where
    (lambda: a.maximum(b + 20), "(b+20)"),
    (lambda: a.maximum(a + 1), "(a+1)"),
    (lambda: x.maximum(0), "x"),
    (lambda: a.minimum(20), "a"),
    (lambda: a.lt(20).where(a, b), "a"),
    (lambda: a.lt(b).ne(True).where(a, b), "((a<b)?b:a)"),
    # casts
    (lambda: v8.cast(dtypes.int32).cast(dtypes.int8), "v"),
    (lambda: UOp.const(dtypes.float32, 3.7).cast(dtypes.int32), "3"),
]


@pytest.mark.parametrize(("build", "expected"), GOLDEN, ids=[f"{render(build())} -> {want}" for build, want in GOLDEN])
def test_golden_simplification(build: Callable[[], UOp], expected: str) -> None:
    expression = build()
    simplified = simplify(expression)
    assert render(simplified) == expected, f"{render(expression)} simplified to {render(simplified)}"
    assert simplified.dtype == expression.dtype


def test_golden_list_is_large_enough() -> None:
    assert len(GOLDEN) >= 40


def test_simplified_forms_are_the_hand_built_uops() -> None:
    # identity with hand-built canonical forms: hash-consing makes equal graphs the same object
    assert simplify((a * 4 + c) // 4) is UOp(Ops.ADD, dtypes.index, (a, c // 4))
    assert simplify(b + a * 2 + a) is UOp(Ops.ADD, dtypes.index, (a * 3, b))
    assert simplify((x % 12) // 4) is (x // 4) % 3
    assert simplify(a - b) is UOp(Ops.SUB, dtypes.index, (a, b))
    assert simplify(a.maximum(a + 1)) is UOp(Ops.ADD, dtypes.index, (a, UOp.const(dtypes.index, 1)))


def test_simplify_is_idempotent() -> None:
    for build, _ in GOLDEN:
        once = simplify(build())
        assert simplify(once) is once


# ---- what must not happen: rewrites that would change a value ---------------------------------------------------


def values_agree(expression: UOp, variables: list[UOp]) -> None:
    simplified = simplify(expression)
    ranges = [range(v.arg.lo, v.arg.hi + 1) for v in variables]
    for assignment in itertools.product(*ranges):
        env = {v.arg.name: value for v, value in zip(variables, assignment)}
        assert sym_infer(simplified, env) == sym_infer(expression, env), env


def test_mixed_sign_division_is_not_treated_as_floor_division() -> None:
    # C truncates toward zero: (4s+3)/4 is s for s >= 0 but s+1 for s < 0, so it must stay a division
    expression = (s * 4 + 3) // 4
    assert simplify(expression).op is Ops.IDIV
    values_agree(expression, [s])
    assert sym_infer(expression, {"s": -1}) == 0
    assert simplify(s % 4).op is Ops.MOD
    values_agree((s * 4 - 1) % 4, [s])


def test_wrapping_arithmetic_is_not_divided_back() -> None:
    # x*2 wraps around for x >= 2**30 in int32, so (x*2)/2 is not x
    big = UOp.variable("big", 0, 2**30 + 5, dtypes.int32)
    expression = (big * 2) // 2
    simplified = simplify(expression)
    for value in (0, 7, 2**30 - 1, 2**30, 2**30 + 5):
        assert sym_infer(simplified, {"big": value}) == sym_infer(expression, {"big": value})
    assert sym_infer(expression, {"big": 2**30}) == -(2**30)
    small = UOp.variable("small", 0, 1000, dtypes.int32)
    assert simplify((small * 2) // 2) is small  # no wrap-around possible: folds


def test_float_identities_that_are_not_exact_stay() -> None:
    f = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0).index(UOp.const(dtypes.index, 0)).load()
    assert simplify(f + 0.0).op is Ops.ADD  # -0.0 + 0.0 is +0.0
    assert simplify(f + (-0.0)) is f
    assert simplify(f * 0.0).op is Ops.MUL  # inf * 0 and nan * 0 are nan
    assert simplify(f - f).op is Ops.SUB  # inf - inf is nan
    assert simplify(f.ne(f)).op is Ops.CMPNE  # nan != nan
    assert simplify(f.maximum(UOp.const(dtypes.float32, -math.inf))).op is Ops.MAX
    assert simplify(f * 1.0) is f
    assert simplify(f.trunc()).op is Ops.TRUNC  # trunc(2.5) is 2.0
    assert simplify(a.trunc()) is a
    assert simplify(f.lt(f)) is UOp.const(dtypes.bool, False)


def test_power_by_one_and_two_fold_to_the_base_and_its_square() -> None:
    f = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0).index(UOp.const(dtypes.index, 0)).load()
    assert simplify(f.alu(Ops.POW, f.const_like(1.0))) is f
    square = simplify(f.alu(Ops.POW, f.const_like(2.0)))
    assert square.op is Ops.MUL and square.src == (f, f)
    assert simplify(f.alu(Ops.POW, f.const_like(3.0))).op is Ops.POW  # x * x * x would round twice
    assert simplify(f.alu(Ops.POW, f.const_like(0.5))).op is Ops.POW  # sqrt(-0.0) is -0.0, pow(-0.0, 0.5) is +0.0
    assert simplify(a.alu(Ops.POW, a.const_like(2))).op is Ops.MUL
    # the folded forms give what the general power defines (C99 pow), special values included
    values = [0.0, -0.0, 1.5, -1.5, 3.0e-30, -7.25, 1.0e20, -1.0e200, math.inf, -math.inf, math.nan, 5e-324]
    for dtype in (dtypes.float32, dtypes.float64):
        for value in (truncate(dtype, v) for v in values):
            for exponent in (1.0, 2.0):
                expected = exec_alu(Ops.POW, dtype, (value, exponent))
                folded = value if exponent == 1.0 else exec_alu(Ops.MUL, dtype, (value, value))
                if math.isnan(expected):
                    assert math.isnan(folded), (dtype, value, exponent)
                else:
                    assert folded == expected and math.copysign(1, folded) == math.copysign(1, expected), (
                        dtype, value, exponent, folded, expected)  # fmt: skip


def test_division_by_zero_is_left_alone() -> None:
    expression = a // UOp.const(dtypes.index, 0)
    assert simplify(expression).op is Ops.IDIV
    assert graph_rewrite(UOp.const(dtypes.int32, 5) % UOp.const(dtypes.int32, 0), pm_symbolic_simple).op is Ops.MOD


# ---- the simple matcher ----------------------------------------------------------------------------------------


def test_simple_matcher_folds_constants_with_truncation_but_does_not_reorder() -> None:
    folded = graph_rewrite(UOp.const(dtypes.uint8, 250) + UOp.const(dtypes.uint8, 10), pm_symbolic_simple)
    assert folded is UOp.const(dtypes.uint8, 4)
    half = graph_rewrite(UOp.const(dtypes.float16, 1.0) / UOp.const(dtypes.float16, 3.0), pm_symbolic_simple)
    assert half.arg == 0.333251953125  # float16's nearest value to 1/3
    expression = (b + a) * (UOp.const(dtypes.index, 2) + 3)
    assert render(graph_rewrite(expression, pm_symbolic_simple)) == "((b+a)*5)"
    assert render(graph_rewrite(expression, pm_symbolic)) == "((a*5)+(b*5))"
    vector = UOp.const(dtypes.int32.vec(2), (1, 2)) * UOp.const(dtypes.int32.vec(2), (3, 4))
    assert graph_rewrite(vector, pm_symbolic_simple) is UOp.const(dtypes.int32.vec(2), (3, 8))


# ---- render and sym_infer --------------------------------------------------------------------------------------


def test_render_is_c_like() -> None:
    assert render(a * 4 + b) == "((a*4)+b)"
    assert render((a // 4) % 3) == "((a/4)%3)"
    assert render(a.maximum(b)) == "max(a,b)"
    assert render(a.lt(b).where(a, b)) == "((a<b)?a:b)"
    assert render(-a) == "(-a)"
    assert render(r0 + gidx) == "(ridx0+gidx0)"
    assert render(a.cast(dtypes.int32)) == "((int32)a)"
    assert render(UOp.const(dtypes.bool, True)) == "true"
    assert render(a.ne(3) & b.eq(1)) == "((a!=3)&(b==1))"


def test_sym_infer_evaluates_with_c_semantics() -> None:
    assert sym_infer(7, {}) == 7
    assert sym_infer(a * 4 + b, {"a": 3, "b": 2}) == 14
    assert sym_infer((s * 4 + 3) // 4, {"s": -2}) == -1  # -5/4 truncates to -1
    assert sym_infer(s % 4, {"s": -5}) == -1
    assert sym_infer(n.bind(5) * 2, {}) == 10  # a bound variable uses its value
    assert sym_infer(n.bind(5) * 2, {"n": 7}) == 14
    assert sym_infer(gidx * 2, {"gidx0": 3}) == 6
    assert sym_infer(a.lt(b), {"a": 1, "b": 2}) == 1


def test_sym_infer_errors_name_the_variable() -> None:
    with pytest.raises(ValueError, match="'b'"):
        sym_infer(a + b, {"a": 1})
    with pytest.raises(ValueError, match=r"outside its bounds \[0, 10\]"):
        sym_infer(a, {"a": 11})
    with pytest.raises(ValueError, match="RANGE"):
        sym_infer(r0 + 1, {})
    with pytest.raises(TypeError):
        sym_infer("a", {})  # type: ignore[arg-type]


def test_the_memos_on_simplified_nodes_die_with_them() -> None:
    # canonical sums, their prefixes and range bounds are kept on the nodes themselves: dropping the graph frees it
    def simplify_fresh_sums() -> None:
        loop, lane = UOp.range(1000, 0), UOp.range(16, 1)
        for k in range(50):
            expression = (lane * 7 + loop * 16 + (k + 1)) * 3 - loop + k * lane
            result = simplify(expression)
            assert result.vmin <= result.vmax

    gc.collect()
    before = live_uop_count()
    simplify_fresh_sums()
    gc.collect()
    assert live_uop_count() == before


def _read_sum(node: UOp) -> tuple[dict[UOp, int], int]:
    # an independent reading of a canonical chain: ADD/SUB/NEG of terms, MUL by a constant, constants
    if node.op is Ops.CONST:
        return {}, int(node.arg)
    if node.op in (Ops.ADD, Ops.SUB):
        left_terms, left_constant = _read_sum(node.src[0])
        right_terms, right_constant = _read_sum(node.src[1])
        sign = 1 if node.op is Ops.ADD else -1
        for term, coefficient in right_terms.items():
            left_terms[term] = left_terms.get(term, 0) + sign * coefficient
        return {t: c for t, c in left_terms.items() if c}, left_constant + sign * right_constant
    if node.op is Ops.NEG:
        terms, constant = _read_sum(node.src[0])
        return {t: -c for t, c in terms.items()}, -constant
    if node.op is Ops.MUL and node.src[1].op is Ops.CONST:
        return {node.src[0]: int(node.src[1].arg)}, 0
    return {node: 1}, 0


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-5, 5)), min_size=1, max_size=6),
    st.integers(-40, 40),
    st.integers(-40, 40),
)
@settings(max_examples=200, deadline=None)
def test_every_remembered_sum_is_what_its_chain_reads(terms: list[tuple[int, int]], constant: int, shift: int) -> None:
    # build_sum remembers the terms of its result and of every ADD/SUB prefix of the chain; linear_form and the
    # `prefix + c` fast path trust them, so each must be what the node reads, and `prefix + c` must simplify to
    # what the same sum built in another order does
    from kiln.uops.linear_form import _CANONICAL_SUM

    ranges = [UOp.range(7 + axis, axis) for axis in range(4)]
    expression = UOp.const(dtypes.index, constant)
    for axis, coefficient in terms:
        expression = ranges[axis] * coefficient + expression
    result = simplify(expression)
    for node in result.toposort():
        remembered = _CANONICAL_SUM.get(node)
        if remembered is not None:
            assert (dict(remembered[0]), remembered[1]) == _read_sum(node), node.render()
            reordered = UOp.const(dtypes.index, shift)
            for term, coefficient in reversed(list(_read_sum(node)[0].items())):
                reordered = reordered + term * coefficient
            assert simplify(node + shift) is simplify(reordered + _read_sum(node)[1])
