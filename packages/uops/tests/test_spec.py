"""Tests of kiln.uops.spec: pm_spec_alu accepts well-formed graphs and type_verify names what it rejects."""

from __future__ import annotations

import pytest

from kiln.uops import Ops, PatternMatcher, SpecError, UOp, UPat, dtypes, pm_spec_alu, type_verify


def test_well_formed_symbolic_and_alu_graphs_pass() -> None:
    a = UOp.variable("a", 0, 9)
    loop = UOp.range(a + 1, 0)
    index = (a * 4 + loop) // 3 % 5
    f = UOp.const(dtypes.float32, 2.0)
    floats = (f.exp2() + f.sqrt() / f).maximum(f.reciprocal()).cast(dtypes.float16)
    vector = UOp.vectorize(f, f * 3.0)
    graph = UOp.sink(
        index,
        (index < 3).where(a, loop),
        floats,
        vector.gep(1),
        UOp.const(dtypes.int8.vec(2), (1, -2)),
        a.bind(4),
        UOp.special(8, "lidx0"),
        f.bitcast(dtypes.int32) & 7,
    )
    type_verify(graph, pm_spec_alu)
    type_verify(graph.toposort(), pm_spec_alu)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (UOp(Ops.CONST, dtypes.int8, (), 300), "rejects"),
        (UOp(Ops.CONST, dtypes.int32, (), 1.5), "rejects"),
        (UOp(Ops.CONST, dtypes.float16, (), 0.1), "rejects"),  # 0.1 is not a float16 value
        (UOp(Ops.ADD, dtypes.int32, (UOp.const(dtypes.int32, 1), UOp.const(dtypes.int64, 1))), "rejects"),
        (UOp(Ops.FDIV, dtypes.int32, (UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2))), "rejects"),
        (UOp(Ops.CMPLT, dtypes.int32, (UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2))), "rejects"),
        (UOp(Ops.SQRT, dtypes.int32, (UOp.const(dtypes.int32, 4),)), "rejects"),
        (UOp(Ops.LOAD, dtypes.float32), "no spec rule"),
    ],
)
def test_malformed_uops_are_named(bad: UOp, why: str) -> None:
    graph = UOp.sink(bad)
    with pytest.raises(SpecError, match=why) as caught:
        type_verify(graph, pm_spec_alu)
    assert caught.value.uop is bad
    message = str(caught.value)
    assert f"= {bad.op.name} " in message.splitlines()[1]
    assert "its users:" in message and "SINK" in message.split("its users:")[1]


def test_the_message_shows_sources_and_users() -> None:
    a = UOp.variable("a", 0, 9)
    bad = UOp(Ops.ADD, dtypes.int32, (a, a))  # index sources, int32 result
    with pytest.raises(SpecError) as caught:
        type_verify(UOp.sink(UOp(Ops.NEG, dtypes.int32, (bad,))), pm_spec_alu)
    expected = """\
UOp fails the spec (the spec rule at {location} rejects it):
  %1 = ADD int32 %0 %0
its sources:
  %0 = DEFINE_VAR index arg=VarArg(name='a', lo=0, hi=9)
  %0 = DEFINE_VAR index arg=VarArg(name='a', lo=0, hi=9)
its users:
  %2 = NEG int32 %1"""
    message = str(caught.value)
    location = message.split("the spec rule at ")[1].split(" rejects")[0]
    assert message == expected.format(location=location)


def test_specs_extend_by_concatenation() -> None:
    buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0)
    graph = UOp.sink(buffer.index(UOp.const(dtypes.index, 0)).load())
    with pytest.raises(SpecError):
        type_verify(graph, pm_spec_alu)
    pm_memory = PatternMatcher(
        [
            (UPat((Ops.DEFINE_GLOBAL, Ops.INDEX)), lambda: True),
            (UPat(Ops.LOAD, src=(UPat(Ops.INDEX),)), lambda: True),
        ]
    )
    type_verify(graph, pm_spec_alu + pm_memory)
