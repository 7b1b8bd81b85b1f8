"""Tests of kiln.uops.upat: pattern semantics, hand cases and a brute-force reference matcher on random graphs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.uops import Ops, UOp, UPat, VarArg, dtypes

a = UOp(Ops.DEFINE_VAR, dtypes.int32, (), VarArg("a", 0, 9))
b = UOp(Ops.DEFINE_VAR, dtypes.int32, (), VarArg("b", 0, 9))
three = UOp.const(dtypes.int32, 3)


def test_op_dtype_arg_and_name() -> None:
    assert UPat(Ops.ADD).match(a + b) == [{}]
    assert UPat(Ops.MUL).match(a + b) == []
    assert UPat((Ops.MUL, Ops.ADD), name="x").match(a + b) == [{"x": a + b}]
    assert UPat(dtype=dtypes.int32).match(a) == [{}]
    assert UPat(dtype={dtypes.int64, dtypes.float32}).match(a) == []
    assert UPat(Ops.CONST, arg=3).match(three) == [{}]
    assert UPat(Ops.CONST, arg=4).match(three) == []
    assert UPat(Ops.CONST, arg=None).match(three) == []
    assert UPat(Ops.ADD, arg=None).match(a + b) == [{}]
    assert UPat.const(dtypes.int32, 3).match(three) == [{}]
    assert UPat.const(dtypes.float32, 3).match(three) == []


def test_scalar_dtype_matches_its_vectors() -> None:
    vector = UOp(Ops.DEVICE, dtypes.float32.vec(4))
    assert UPat(dtype=dtypes.float32).match(vector) == [{}]
    assert UPat(dtype=dtypes.float32.vec(2)).match(vector) == []


def test_exact_sources_and_allow_any_len() -> None:
    pattern = UPat(Ops.ADD, src=(UPat(name="x"), UPat.cvar("c")))
    assert pattern.match(a + 3) == [{"x": a, "c": three}]
    assert pattern.match(3 + a) == []
    sink = UOp.sink(a, b, three)
    assert UPat(Ops.SINK, src=(UPat(name="first"),)).match(sink) == []
    assert UPat(Ops.SINK, src=(UPat(name="first"),), allow_any_len=True).match(sink) == [{"first": a}]
    assert UPat(Ops.SINK, src=()).match(sink) == []


def test_permutation_sources_give_every_binding() -> None:
    pattern = UPat(Ops.ADD, src=[UPat.var("x"), UPat.var("y")])
    assert pattern.match(a + b) == [{"x": a, "y": b}, {"x": b, "y": a}]
    commutative = UPat.var("x") + UPat.cvar("c")
    assert commutative.match(a + 3) == [{"x": a, "c": three}]
    assert commutative.match(3 + a) == [{"x": a, "c": three}]
    assert (UPat.var("x") - UPat.cvar("c")).match(3 - a) == []


def test_repeated_sources() -> None:
    every_const = UPat(Ops.SINK, src=UPat.cvar())
    assert every_const.match(UOp.sink(three, three)) == [{}]
    assert every_const.match(UOp.sink(three, a)) == []
    assert every_const.match(UOp(Ops.SINK)) == [{}]  # zero sources: vacuously every source
    same = UPat(Ops.SINK, src=UPat(name="x"))
    assert same.match(UOp.sink(a, a)) == [{"x": a}]
    assert same.match(UOp.sink(a, b)) == []


def test_a_name_used_twice_must_bind_the_same_uop() -> None:
    pattern = UPat.var("x") + UPat.var("x")
    assert pattern.match(a + a) == [{"x": a}]
    assert pattern.match(a + b) == []
    nested = (UPat.var("x") * UPat.cvar("c")) + UPat.var("x")
    assert nested.match(a * 3 + a) == [{"x": a, "c": three}]
    assert nested.match(a + 3 * a) == [{"x": a, "c": three}]
    assert nested.match(b * 3 + a) == []


def test_any_alternatives() -> None:
    pattern = UPat.any(UPat(Ops.ADD, name="x"), UPat(Ops.MUL, name="x"))
    assert pattern.match(a + b) == [{"x": a + b}]
    assert pattern.match(a * b) == [{"x": a * b}]
    assert pattern.match(a - b) == []
    assert UPat.any(UPat(Ops.ADD), UPat(Ops.MUL)).named("y").match(a * b) == [{"y": a * b}]


def test_operator_sugar_builds_alu_patterns() -> None:
    x = UPat.var("x")
    assert (x * 2).match(a * 2) == [{"x": a}]
    assert (x * 2).match(2 * a) == [{"x": a}]
    assert (x // 2).match(a // 2) == [{"x": a}]
    assert (x % 2).match(a % 2) == [{"x": a}]
    assert x.lt(3).match(a < 3) == [{"x": a}]
    assert (x < 3).match(a < 3) == [{"x": a}]
    assert x.ne(3).match(a.ne(3)) == [{"x": a}]
    assert x.eq(3).match(UOp.const(dtypes.int32, 3).eq(a)) == [{"x": a}]
    assert x.where(UPat.var("t"), 0).match((a < 1).where(b, 0)) == [{"x": a < 1, "t": b}]
    assert x.where(UPat.var("t"), 0).match((a < 1).where(0, b)) == []
    assert x.cast(dtypes.float32).match(a.cast(dtypes.float32)) == [{"x": a}]
    assert x.cast(dtypes.float16).match(a.cast(dtypes.float32)) == []
    assert (-x).match(-a) == [{"x": a}]
    assert repr(UPat.var("x") + 1) == "UPat(Ops.ADD, src=[UPat(name='x'), UPat(Ops.CONST, arg=1)])"


# ---------------------------------------------------------------------------------------------------------------
# a brute-force reference matcher, driven by the same pattern description as the UPat under test
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    op: Ops | None
    name: str | None
    kind: str  # "any" | "exact" | "perm" | "repeat" | "alt"
    children: tuple[Spec, ...] = ()

    def build(self) -> UPat:
        if self.kind == "alt":
            return UPat.any(*(child.build() for child in self.children))
        src: Any = None
        if self.kind == "exact":
            src = tuple(child.build() for child in self.children)
        elif self.kind == "perm":
            src = [child.build() for child in self.children]
        elif self.kind == "repeat":
            src = self.children[0].build()
        return UPat(self.op, src=src, name=self.name)


def reference(spec: Spec, node: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    if spec.kind == "alt":
        return _unique([result for child in spec.children for result in reference(child, node, store)])
    if spec.op is not None and node.op is not spec.op:
        return []
    stores = [dict(store)]
    if spec.kind in ("exact", "perm"):
        if len(node.src) != len(spec.children):
            return []
        orders = itertools.permutations(spec.children) if spec.kind == "perm" else [spec.children]
        stores = []
        for order in orders:
            partial = [dict(store)]
            for child, source in zip(order, node.src):
                partial = [result for s in partial for result in reference(child, source, s)]
            stores.extend(partial)
    elif spec.kind == "repeat":
        current = dict(store)
        for source in node.src:
            found = reference(spec.children[0], source, current)
            if not found:
                return []
            current = found[0]
        stores = [current]
    if spec.name is not None:
        stores = [s for s in stores if s.setdefault(spec.name, node) is node]
    return _unique(stores)


def _unique(stores: list[dict[str, UOp]]) -> list[dict[str, UOp]]:
    unique: list[dict[str, UOp]] = []
    for s in stores:
        if s not in unique:
            unique.append(s)
    return unique


LEAVES = [a, b, three, UOp.const(dtypes.int32, 5)]
NODE_OPS = [Ops.ADD, Ops.MUL, Ops.MAX]
PATTERN_OPS = [None, Ops.ADD, Ops.MUL, Ops.MAX, Ops.CONST, Ops.DEFINE_VAR]
NAMES = [None, None, "x", "y", "z"]

graphs = st.recursive(
    st.sampled_from(LEAVES),
    lambda inner: st.builds(
        lambda op, left, right: UOp(op, dtypes.int32, (left, right)), st.sampled_from(NODE_OPS), inner, inner
    ),
    max_leaves=8,
)

leaf_specs = st.builds(lambda op, name: Spec(op, name, "any"), st.sampled_from(PATTERN_OPS), st.sampled_from(NAMES))


def _extend(inner: st.SearchStrategy[Spec]) -> st.SearchStrategy[Spec]:
    return st.one_of(
        st.builds(
            lambda op, name, kind, left, right: Spec(op, name, kind, (left, right)),
            st.sampled_from(PATTERN_OPS),
            st.sampled_from(NAMES),
            st.sampled_from(["exact", "perm"]),
            inner,
            inner,
        ),
        st.builds(
            lambda op, name, c: Spec(op, name, "repeat", (c,)),
            st.sampled_from(PATTERN_OPS),
            st.sampled_from(NAMES),
            inner,
        ),
        st.builds(lambda left, right: Spec(None, None, "alt", (left, right)), inner, inner),
    )


specs = st.recursive(leaf_specs, _extend, max_leaves=6)


@settings(max_examples=400, deadline=None)
@given(specs, graphs)
def test_compiled_matcher_agrees_with_the_reference(spec: Spec, graph: UOp) -> None:
    assert spec.build().match(graph) == reference(spec, graph, {})
