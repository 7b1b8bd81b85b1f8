"""Tests of kiln.uops.printing: golden print_graph text and pyrender round trips."""

from __future__ import annotations

import math

from kiln.uops import AxisKind, MemoryScope, Ops, UOp, dtypes, print_graph, pyrender


def _index_expression() -> UOp:
    a = UOp.variable("a", 0, 9)
    loop = UOp.range(16, 0, AxisKind.REDUCE)
    return (a * 4 + loop) % 7


def test_print_graph_golden() -> None:
    expected = """\
%0 = DEFINE_VAR index arg=VarArg(name='a', lo=0, hi=9)
%1 = CONST index arg=4
%2 = MUL index %0 %1
%3 = CONST index arg=16
%4 = RANGE index %3 arg=RangeArg(axis=0, kind=AxisKind.REDUCE)
%5 = ADD index %2 %4
%6 = CONST index arg=7
%7 = MOD index %5 %6"""
    assert print_graph(_index_expression()) == expected


def test_print_graph_golden_memory_and_vectors() -> None:
    buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(64), (), 0)
    local = UOp(Ops.DEFINE_LOCAL, dtypes.half.ptr(8, MemoryScope.LOCAL), (), 1)
    loaded = buffer.index(UOp.const(dtypes.index, 3)).load()
    vector = UOp.vectorize(loaded, loaded * 2.0)
    sink = UOp.sink(vector.gep(1).reduce(op=Ops.MAX), local, UOp.const(dtypes.float32, -math.inf))
    expected = """\
%0 = DEFINE_GLOBAL float32.ptr(64) arg=0
%1 = CONST index arg=3
%2 = INDEX float32.ptr(64) %0 %1
%3 = LOAD float32 %2
%4 = CONST float32 arg=2.0
%5 = MUL float32 %3 %4
%6 = VECTORIZE float32.vec(2) %3 %5
%7 = GEP float32 %6 arg=(1,)
%8 = REDUCE float32 %7 arg=MAX
%9 = DEFINE_LOCAL float16.ptr(8, LOCAL) arg=1
%10 = CONST float32 arg=-math.inf
%11 = SINK void %8 %9 %10"""
    assert print_graph(sink) == expected


def test_print_graph_shows_shared_nodes_once_and_tags() -> None:
    a = UOp.variable("a", 0, 3)
    shared = (a + 1).replace(tag="t")
    assert print_graph(UOp.sink(shared, shared)).splitlines()[-2:] == [
        "%2 = ADD index %0 %1 tag='t'",
        "%3 = SINK void %2 %2",
    ]


def _round_trip(root: UOp) -> UOp:
    namespace: dict[str, object] = {}
    exec(pyrender(root), namespace)
    result = namespace["root"]
    assert isinstance(result, UOp)
    return result


def test_pyrender_round_trips_to_the_same_object() -> None:
    assert _round_trip(_index_expression()) is _index_expression()
    buffer = UOp(Ops.DEFINE_LOCAL, dtypes.float32.vec(4).ptr(8, MemoryScope.LOCAL), (), 0)
    special = UOp.special(32, "gidx0")
    value = buffer.index(special).load()
    odd = UOp.sink(
        value.gep((3, 0)),
        UOp.const(dtypes.float16, (math.inf, -0.0, 1.5)),
        UOp.const(dtypes.float32, math.nan),
        UOp(Ops.DEVICE, dtypes.void, (), ("text", 2), tag=(1,)),
        value.reduce(op=Ops.MAX),
    )
    assert _round_trip(odd) is odd


def test_pyrender_golden() -> None:
    a = UOp.variable("a", 0, 9)
    expected = """\
from kiln.uops import Ops, UOp, VarArg, dtypes
n0 = UOp(Ops.DEFINE_VAR, dtypes.index, (), VarArg(name='a', lo=0, hi=9))
n1 = UOp(Ops.NEG, dtypes.index, (n0,), None)
root = n1
"""
    assert pyrender(-a) == expected
