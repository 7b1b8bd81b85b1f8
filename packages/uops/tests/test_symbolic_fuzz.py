"""Fuzzing the symbolic simplifier against an independent C-semantics evaluator written here.

Random integer expressions over 1-4 bounded variables (+ - * // % min max < == != where, constants) are evaluated
before and after `simplify()` under many assignments of the variables; the values must agree, and every
subexpression of both graphs must lie within its range analysis bounds [vmin, vmax]. The evaluator below is plain
Python and does not use kiln's exec_alu.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.uops import UOp, dtypes
from kiln.uops.dtype import DType
from kiln.uops.ops import Ops


class Undefined(Exception):
    """The C program would have undefined behaviour (division by zero, signed overflow of INT_MIN / -1)."""


def c_div(a: int, b: int) -> int:
    if b == 0:
        raise Undefined
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def c_mod(a: int, b: int) -> int:
    return a - b * c_div(a, b)


def make_wrap(dtype: DType) -> Callable[[int], int]:
    if dtype == dtypes.index:
        return lambda v: v
    bits = dtype.itemsize * 8

    def wrap(v: int) -> int:
        v &= (1 << bits) - 1
        return v - (1 << bits) if v >= 1 << (bits - 1) else v

    return wrap


def evaluate_all(root: UOp, env: dict[str, int]) -> dict[UOp, int | bool]:
    """Value of every node of `root`'s graph; raises Undefined where C would be undefined."""
    values: dict[UOp, int | bool] = {}
    for node in root.toposort():
        s = [values[x] for x in node.src]
        op = node.op
        wrap = make_wrap(node.dtype) if node.dtype != dtypes.bool else bool
        if op is Ops.CONST:
            v: int | bool = node.arg
        elif op is Ops.DEFINE_VAR:
            v = env[node.arg.name]
        elif op is Ops.ADD:
            v = wrap(s[0] + s[1])
        elif op is Ops.SUB:
            v = wrap(s[0] - s[1])
        elif op is Ops.MUL:
            v = wrap(s[0] * s[1])
        elif op is Ops.NEG:
            v = wrap(-s[0])
        elif op in (Ops.IDIV, Ops.MOD):
            if wrap(c_div(s[0], s[1])) != c_div(s[0], s[1]):
                raise Undefined  # INT_MIN / -1
            v = c_div(s[0], s[1]) if op is Ops.IDIV else c_mod(s[0], s[1])
        elif op is Ops.MAX:
            v = max(s[0], s[1])
        elif op is Ops.CMPLT:
            v = s[0] < s[1]
        elif op is Ops.CMPNE:
            v = s[0] != s[1]
        elif op is Ops.CMPEQ:
            v = s[0] == s[1]
        elif op is Ops.WHERE:
            v = s[1] if s[0] else s[2]
        elif op is Ops.AND and node.dtype == dtypes.bool:
            v = bool(s[0] and s[1])
        elif op is Ops.OR and node.dtype == dtypes.bool:
            v = bool(s[0] or s[1])
        else:
            raise AssertionError(f"the evaluator does not know {op} ({node.dtype})")
        values[node] = v
    return values


# ---- expression generation -------------------------------------------------------------------------------------


@st.composite
def variables(draw: st.DrawFn, dtype: DType, magnitude: int) -> list[UOp]:
    count = draw(st.integers(1, 4))
    result = []
    for i in range(count):
        low = draw(st.integers(-magnitude, magnitude))
        width = draw(st.sampled_from([0, 1, 2, 3, 5, 8, 13, 20, magnitude]))
        if draw(st.booleans()):
            low = abs(low)  # many index expressions are non-negative
        result.append(UOp.variable("abcd"[i], low, low + width, dtype))
    return result


def expression(draw: st.DrawFn, leaves: list[UOp], depth: int, dtype: DType, constants: st.SearchStrategy[int]) -> UOp:
    if depth == 0 or draw(st.integers(0, 4)) == 0:
        if draw(st.integers(0, 2)) == 0:
            return UOp.const(dtype, draw(constants))
        return draw(st.sampled_from(leaves))

    def sub() -> UOp:
        return expression(draw, leaves, depth - 1, dtype, constants)

    kind = draw(st.sampled_from(["add", "sub", "mul", "div", "mod", "min", "max", "where", "neg", "mulc", "addc"]))
    if kind == "add":
        return sub() + sub()
    if kind == "sub":
        return sub() - sub()
    if kind == "mul":
        return sub() * sub()
    if kind == "mulc":
        return sub() * draw(constants)
    if kind == "addc":
        return sub() + draw(constants)
    if kind == "neg":
        return -sub()
    if kind in ("div", "mod"):
        if draw(st.integers(0, 3)):
            divisor = UOp.const(dtype, draw(st.sampled_from([-7, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 8, 12, 16])))
        else:
            divisor = sub()
        return sub() // divisor if kind == "div" else sub() % divisor
    if kind == "min":
        return sub().minimum(sub())
    if kind == "max":
        return sub().maximum(sub())
    comparison = draw(st.sampled_from(["lt", "ne", "eq"]))
    left, right = sub(), sub()
    condition = left.lt(right) if comparison == "lt" else left.ne(right) if comparison == "ne" else left.eq(right)
    return condition.where(sub(), sub())


def assignments(leaves: list[UOp], seed: int, count: int) -> list[dict[str, int]]:
    domains = [range(v.arg.lo, v.arg.hi + 1) for v in leaves]
    sizes = [len(d) for d in domains]
    total = 1
    for size in sizes:
        total *= size
    names = [v.arg.name for v in leaves]
    if total <= count:
        return [dict(zip(names, values)) for values in itertools.product(*domains)]
    rng = random.Random(seed)
    corners = [dict(zip(names, values)) for values in itertools.product(*[(d[0], d[-1]) for d in domains])]
    return corners[:count] + [{n: rng.choice(d) for n, d in zip(names, domains)} for _ in range(count)]


def check(root: UOp, leaves: list[UOp], seed: int) -> None:
    simplified = root.simplify()
    assert simplified.dtype == root.dtype
    assert simplified.simplify() is simplified, f"not a fixed point: {simplified.render()}"
    for env in assignments(leaves, seed, 40):
        try:
            before = evaluate_all(root, env)
        except Undefined:
            continue
        after = evaluate_all(simplified, env)  # must be defined where the original is
        assert after[simplified] == before[root], (
            f"value changed for {env}: {root.render()} = {before[root]} but {simplified.render()} = {after[simplified]}"
        )
        for values in (before, after):
            for node, value in values.items():
                assert node.vmin <= value <= node.vmax, f"{node.render()} = {value} outside [{node.vmin}, {node.vmax}]"


@st.composite
def index_cases(draw: st.DrawFn) -> tuple[UOp, list[UOp], int]:
    leaves = draw(variables(dtypes.index, 12))
    root = expression(draw, leaves, 4, dtypes.index, st.integers(-16, 16))
    return root, leaves, draw(st.integers(0, 2**32))


@st.composite
def int32_cases(draw: st.DrawFn) -> tuple[UOp, list[UOp], int]:
    # large constants and bounds make int32 arithmetic wrap around
    leaves = draw(variables(dtypes.int32, 1 << 20))
    constants = st.one_of(st.integers(-16, 16), st.integers(-(1 << 31), (1 << 31) - 1))
    root = expression(draw, leaves, 3, dtypes.int32, constants)
    return root, leaves, draw(st.integers(0, 2**32))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index_cases())
def test_simplify_preserves_index_values(case: tuple[UOp, list[UOp], int]) -> None:
    check(*case)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int32_cases())
def test_simplify_preserves_wrapping_int32_values(case: tuple[UOp, list[UOp], int]) -> None:
    check(*case)
