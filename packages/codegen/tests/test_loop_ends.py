"""Golden text of the REDUCE -> accumulator pass and the END normalization, plus their error cases."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import Program, get_program, run_program
from kiln.codegen.lowering.accumulators import RegisterSlots, pm_reduce_to_accumulator, reduce_identity
from kiln.codegen.lowering.loop_ends import merge_ends, normalize_ends, separate_ranges
from kiln.uops import AxisKind, Ops, UOp, dtypes, graph_rewrite, print_graph

CPU = CPULikeRenderer()
MAX_REDUCE_AFTER = """\
%0 = DEFINE_GLOBAL float32.ptr(2) arg=0
%1 = CONST index arg=2
%2 = RANGE index %1 arg=RangeArg(axis=0, kind=AxisKind.LOOP)
%3 = INDEX float32.ptr(2) %0 %2
%4 = DEFINE_REG float32.ptr(1, REG) arg=0
%5 = CONST index arg=0
%6 = INDEX float32.ptr(1, REG) %4 %5
%7 = AFTER float32.ptr(1, REG) %4 %2
%8 = INDEX float32.ptr(1, REG) %7 %5
%9 = CONST float32 arg=-math.inf
%10 = STORE void %8 %9
%11 = CONST index arg=4
%12 = RANGE index %11 arg=RangeArg(axis=1, kind=AxisKind.REDUCE)
%13 = AFTER float32.ptr(1, REG) %4 %10 %12
%14 = INDEX float32.ptr(1, REG) %13 %5
%15 = LOAD float32 %14
%16 = DEFINE_GLOBAL float32.ptr(8) arg=1
%17 = MUL index %2 %11
%18 = ADD index %17 %12
%19 = INDEX float32.ptr(8) %16 %18
%20 = LOAD float32 %19
%21 = MAX float32 %15 %20
%22 = STORE void %6 %21
%23 = END void %22 %12
%24 = AFTER float32.ptr(1, REG) %4 %23
%25 = INDEX float32.ptr(1, REG) %24 %5
%26 = LOAD float32 %25
%27 = STORE void %3 %26
%28 = END void %27 %2
%29 = SINK void %28 arg=KernelInfo(name='', opts_to_apply=None, applied_opts=())"""
ENDS_AFTER = """\
%0 = DEFINE_GLOBAL float32.ptr(12) arg=0
%1 = CONST index arg=3
%2 = RANGE index %1 arg=RangeArg(axis=0, kind=AxisKind.LOOP)
%3 = CONST index arg=4
%4 = MUL index %2 %3
%5 = RANGE index %3 arg=RangeArg(axis=1, kind=AxisKind.LOOP)
%6 = ADD index %4 %5
%7 = INDEX float32.ptr(12) %0 %6
%8 = DEFINE_GLOBAL float32.ptr(12) arg=2
%9 = INDEX float32.ptr(12) %8 %6
%10 = LOAD float32 %9
%11 = STORE void %7 %10
%12 = END void %11 %5
%13 = DEFINE_GLOBAL float32.ptr(3) arg=1
%14 = INDEX float32.ptr(3) %13 %2
%15 = INDEX float32.ptr(12) %8 %4
%16 = LOAD float32 %15
%17 = STORE void %14 %16
%18 = GROUP void %12 %17
%19 = END void %18 %2
%20 = SINK void %19 arg=KernelInfo(name='', opts_to_apply=None, applied_opts=())"""


def test_max_reduce_becomes_an_accumulator_golden() -> None:
    # the init store runs inside the row loop (AFTER the row RANGE), before the reduce loop; the result is read
    # AFTER the reduce loop's END
    out, a = buffer(0, 2), buffer(1, 8)
    i, j = UOp.range(2, 0), UOp.range(4, 1, AxisKind.REDUCE)
    sink = kernel(out.index(i).store(a.index(i * 4 + j).load().reduce(j, op=Ops.MAX)).end(i))
    assert print_graph(graph_rewrite(sink, pm_reduce_to_accumulator, ctx=RegisterSlots())) == MAX_REDUCE_AFTER


def test_reduce_identities() -> None:
    assert reduce_identity(Ops.ADD, dtypes.float32) == 0.0 and isinstance(
        reduce_identity(Ops.ADD, dtypes.float32), float
    )
    assert reduce_identity(Ops.MUL, dtypes.int8) == 1
    assert reduce_identity(Ops.MAX, dtypes.int8) == -128
    assert reduce_identity(Ops.MAX, dtypes.uint16) == 0
    assert reduce_identity(Ops.MAX, dtypes.float16) == float("-inf")


def test_ends_are_split_nested_and_merged_golden() -> None:
    # END(store0, j, i) -> END(END(store0, j), i); the two ENDs of loop i merge into END(GROUP(...), i)
    o0, o1, x = buffer(0, 12), buffer(1, 3), buffer(2, 12)
    i, j = UOp.range(3, 0), UOp.range(4, 1)
    sink = kernel(
        o0.index(i * 4 + j).store(x.index(i * 4 + j).load()).end(j, i),
        o1.index(i).store(x.index(i * 4).load()).end(i),
    )
    assert print_graph(normalize_ends(sink)) == ENDS_AFTER


def test_end_of_an_unused_loop_is_dropped() -> None:
    out, x = buffer(0, 4), buffer(1, 4)
    i, unused = UOp.range(4, 0), UOp.range(3, 1)
    store = out.index(i).store(x.index(i).load())
    assert normalize_ends(kernel(store.end(i, unused))) == kernel(store.end(i))


def test_unmergeable_ends_raise() -> None:
    out, x = buffer(0, 4), buffer(1, 4)
    i, j = UOp.range(4, 0), UOp.range(4, 1)
    inner = out.index(j).store(x.index(i).load()).end(j)  # loop j inside loop i
    outer = out.index(j).store(x.index(j).load() * 2.0).end(j)  # loop j outside every loop
    with pytest.raises(ValueError, match="used in different outer loops"):
        merge_ends(UOp.sink(inner.end(i), outer))  # merge_ends alone: separate_ranges has not run
    first = out.index(j).store(x.index(j).load()).end(j)
    after_first = UOp(Ops.AFTER, x.dtype, (x, first))
    second = out.index(j).store(after_first.index(j).load() * 2.0).end(j)
    with pytest.raises(ValueError, match="one needs the other's result"):
        merge_ends(UOp.sink(first, second))


def test_ends_in_different_outer_loops_get_their_own_range() -> None:
    # loop j inside loop i, and loop j outside every loop: the outside one is renumbered to a fresh axis (2)
    out, x = buffer(0, 4), buffer(1, 4)
    i, j = UOp.range(4, 0), UOp.range(4, 1)
    inner = out.index(j).store(x.index(i).load()).end(j)
    outer = out.index(j).store(x.index(j).load() * 2.0).end(j)
    separated = separate_ranges(UOp.sink(inner.end(i), outer))
    fresh = UOp.range(4, 2)
    assert separated == UOp.sink(inner.end(i), out.index(fresh).store(x.index(fresh).load() * 2.0).end(fresh))
    assert normalize_ends(UOp.sink(inner.end(i), outer)) == separated


def test_loop_invariant_reduction_next_to_an_inner_one_runs_right() -> None:
    # out[i] = sum_j a[i, j] + sum_j b[j]: the second sum does not depend on the row loop i, so the accumulator pass
    # lowers it outside that loop while the first runs inside; both used the one RANGE j (log_softmax's backward
    # on a (32, 32) input failed this way: "RANGE ... is used in different outer loops")
    rows, columns = 5, 7
    out, a, b = buffer(0, rows), buffer(1, rows * columns), buffer(2, columns)
    i, j = UOp.range(rows, 0), UOp.range(columns, 1, AxisKind.REDUCE)
    total = a.index(i * columns + j).load().reduce(j) + b.index(j).load().reduce(j)
    program = Program(get_program(kernel(out.index(i).store(total).end(i)), CPU, ()))
    a_values = np.arange(rows * columns, dtype=np.float32) / 8
    b_values = np.arange(columns, dtype=np.float32) * 3 - 5
    result = np.zeros(rows, np.float32)
    run_program(program, [result, a_values, b_values])
    np.testing.assert_allclose(result, a_values.reshape(rows, columns).sum(1) + b_values.sum(), rtol=1e-6)
