"""The linearizer: deterministic order, loops placed by dependence (hoisting), IF/ENDIF, barriers, and errors."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest
from renderers_for_tests import GPULikeRenderer, ScalarRenderer
from sinks_for_tests import buffer, elementwise_add, kernel, matmul, row_sum

import kiln.codegen.loop_structure as loop_structure
from kiln.codegen import Opt, OptOps, Renderer, apply_opts, format_linear, linearize, lower, verify_linear
from kiln.uops import AxisKind, Ops, UOp, dtypes

SCALAR, GPU = ScalarRenderer(), GPULikeRenderer()


def linear_of(sink: UOp, renderer: Renderer = SCALAR, opts: tuple[Opt, ...] = ()) -> list[UOp]:
    uops = linearize(lower(apply_opts(sink, opts, renderer), renderer))
    verify_linear(uops)
    return uops


def control_flow(uops: list[UOp]) -> list[str]:
    """The loop / IF / barrier skeleton, e.g. ['RANGE 0', 'RANGE 1', 'END 1', 'END 0']."""
    names = []
    for uop in uops:
        if uop.op is Ops.RANGE:
            names.append(f"RANGE {uop.arg.axis}")
        elif uop.op is Ops.END:
            names.append(f"END {uop.src[0].arg.axis}")
        elif uop.op in (Ops.IF, Ops.ENDIF, Ops.BARRIER):
            names.append(uop.op.name)
        elif uop.op is Ops.STORE:
            names.append("STORE " + ("REG" if uop.src[0].dtype.scope.name == "REG" else uop.src[0].dtype.scope.name))
    return names


ROW_SUM_GOLDEN = """\
%0 = DEFINE_GLOBAL float32.ptr(4) 0
%1 = DEFINE_GLOBAL float32.ptr(32) 1
%2 = DEFINE_REG float32.ptr(1, MemoryScope.REG) 0
%3 = CONST int32 4
%4 = CONST int32 0
%5 = INDEX float32.ptr(1, MemoryScope.REG) %2 %4
%6 = CONST float32 0.0
%7 = CONST int32 8
%8 = RANGE int32 %3 axis=0 LOOP
  %9 = INDEX float32.ptr(4) %0 %8
  %10 = AFTER float32.ptr(1, MemoryScope.REG) %2 %8
  %11 = INDEX float32.ptr(1, MemoryScope.REG) %10 %4
  %12 = STORE void %11 %6
  %13 = MUL int32 %8 %7
  %14 = RANGE int32 %7 axis=1 REDUCE
    %15 = AFTER float32.ptr(1, MemoryScope.REG) %2 %12 %14
    %16 = INDEX float32.ptr(1, MemoryScope.REG) %15 %4
    %17 = LOAD float32 %16
    %18 = ADD int32 %13 %14
    %19 = INDEX float32.ptr(32) %1 %18
    %20 = LOAD float32 %19
    %21 = ADD float32 %17 %20
    %22 = STORE void %5 %21
  %23 = END void %14
  %24 = AFTER float32.ptr(1, MemoryScope.REG) %2 %23
  %25 = INDEX float32.ptr(1, MemoryScope.REG) %24 %4
  %26 = LOAD float32 %25
  %27 = STORE void %9 %26
%28 = END void %8"""


def test_row_sum_golden() -> None:
    # accumulator reset inside the row loop, before the reduce loop; the result read after the reduce loop ends
    assert format_linear(linear_of(row_sum(4, 8))) == ROW_SUM_GOLDEN


def test_order_is_the_same_in_another_process() -> None:
    # set and dict iteration over uops depends on id() and string hashes; the order must not
    script = textwrap.dedent(
        """
        from test_linearizer import linear_of, matmul, GPU
        from kiln.codegen import Opt, OptOps, format_linear
        opts = (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUPTOP, 2, 4))
        print(format_linear(linear_of(matmul(8, 8, 16), GPU, opts)))
        """
    )
    opts = (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUPTOP, 2, 4))
    here = format_linear(linear_of(matmul(8, 8, 16), GPU, opts))
    environment = {**os.environ, "PYTHONHASHSEED": "12345"}
    # run in this folder: `python -c` puts the working directory first on sys.path, so test_linearizer imports
    command, folder = [sys.executable, "-c", script], Path(__file__).parent
    there = subprocess.run(command, capture_output=True, text=True, env=environment, check=True, cwd=folder)
    assert there.stdout.strip() == here
    assert format_linear(linear_of(matmul(8, 8, 16), GPU, opts)) == here  # and again in this process


def test_loop_invariant_reduce_is_hoisted_out_of_the_loop() -> None:
    # out[i] = a[i] / sum_j b[j]: the sum does not depend on i, so its loop runs once, before the i loop
    out, a, b = buffer(0, 8), buffer(1, 8), buffer(2, 16)
    i, j = UOp.range(8, 0), UOp.range(16, 1, AxisKind.REDUCE)
    sink = kernel(out.index(i).store(a.index(i).load() / b.index(j).load().reduce(j)).end(i))
    assert control_flow(linear_of(sink)) == [
        "STORE REG",
        "RANGE 1",
        "STORE REG",
        "END 1",
        "RANGE 0",
        "STORE GLOBAL",
        "END 0",
    ]


def test_nested_loops_follow_the_kind_then_axis_order() -> None:
    flow = control_flow(linear_of(matmul(4, 4, 4)))
    assert flow == [
        "RANGE 0",
        "RANGE 1",
        "STORE REG",
        "RANGE 2",
        "STORE REG",
        "END 2",
        "STORE GLOBAL",
        "END 1",
        "END 0",
    ]


def test_two_outputs_of_one_loop_share_it() -> None:
    out0, out1, a = buffer(0, 8), buffer(1, 8), buffer(2, 8)
    i = UOp.range(8, 0)
    value = a.index(i).load()
    sink = kernel(out0.index(i).store(value + 1.0).end(i), out1.index(i).store(value * 2.0).end(i))
    uops = linear_of(sink)
    assert control_flow(uops) == ["RANGE 0", "STORE GLOBAL", "STORE GLOBAL", "END 0"]
    assert sum(u.op is Ops.LOAD for u in uops) == 1  # the shared load is computed once


def test_gated_store_becomes_if_block() -> None:
    flow = control_flow(linear_of(elementwise_add(10), GPU, (Opt(OptOps.PADTO, 0, 16),)))
    assert flow == ["IF", "STORE GLOBAL", "ENDIF"]
    uops = linear_of(elementwise_add(10), SCALAR, (Opt(OptOps.PADTO, 0, 16), Opt(OptOps.UPCAST, 0, 2)))
    # two lanes, each its own gate: two IF blocks numbered 0 and 1, inside the loop
    assert control_flow(uops) == ["RANGE 0", "IF", "STORE GLOBAL", "ENDIF", "IF", "STORE GLOBAL", "ENDIF", "END 0"]
    assert [u.arg for u in uops if u.op is Ops.IF] == [0, 1]
    gated_loads = [u for u in uops if u.op is Ops.LOAD and len(u.src) == 3]
    assert len(gated_loads) == 4 and all(u.src[2].dtype == dtypes.bool for u in gated_loads)


def test_group_reduce_has_barrier_between_local_store_and_load() -> None:
    uops = linear_of(row_sum(2, 64), GPU, (Opt(OptOps.GROUP, 1, 16),))
    flow = control_flow(uops)
    assert flow == [
        "STORE REG", "STORE REG", "RANGE 1", "STORE REG", "END 1", "STORE LOCAL", "BARRIER",
        "RANGE 3", "STORE REG", "END 3", "IF", "STORE GLOBAL", "ENDIF",
    ]  # fmt: skip
    barrier = next(u for u in uops if u.op is Ops.BARRIER)
    local_loads = [u for u in uops if u.op is Ops.LOAD and u.src[0].dtype.scope.name == "LOCAL"]
    assert local_loads and all(uops.index(load) > uops.index(barrier) for load in local_loads)


def test_malformed_loop_structure_is_rejected() -> None:
    out, a = buffer(0, 8), buffer(1, 8)
    i = UOp.range(8, 0)
    store = out.index(i).store(a.index(i).load())
    with pytest.raises(ValueError, match="RANGEs without an END"):
        linearize(UOp(Ops.SINK, src=(UOp(Ops.GROUP, src=(store,)),)))
    with pytest.raises(ValueError, match="ENDs of exactly one RANGE"):
        linearize(UOp.sink(store.end(i, UOp.range(2, 1))))
    with pytest.raises(ValueError, match="linearize needs a SINK"):
        linearize(store)
    j = UOp.range(4, 1)
    twice = UOp.sink(
        UOp(Ops.END, src=(out.index(i).store(a.index(i).load()), i)),
        UOp(Ops.END, src=(out.index(j).store(a.index(i).load()), i)),
    )
    with pytest.raises(ValueError, match="closed by two ENDs"):
        linearize(twice)


def test_a_sinks_open_ranges_are_computed_once_and_each_caller_gets_its_own_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    computed: list[UOp] = []
    compute = loop_structure._open_ranges_map
    monkeypatch.setattr(loop_structure, "_open_ranges_map", lambda root: computed.append(root) or compute(root))
    sink = row_sum(7, 13)
    first = loop_structure.open_ranges_map(sink)
    first.clear()  # a caller's map is its own
    second = loop_structure.open_ranges_map(sink)
    assert second == compute(sink) and list(second) == sink.toposort()
    assert computed == [sink]  # the second call read the kept map
    value = sink.src[0].src[0]  # not a sink: computed each time
    loop_structure.open_ranges_map(value)
    loop_structure.open_ranges_map(value)
    assert computed == [sink, value, value]
    gone = weakref.ref(sink)  # the kept map does not hold its sink: no reference cycle
    del first, second, sink
    computed.clear()
    gc.disable()
    try:
        assert gone() is None
    finally:
        gc.enable()
