"""The expander (UPCAST/UNROLL -> vectors): lane maps, and golden text of the pass on small kernels."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer, ScalarRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, apply_opts, get_program, run_program
from kiln.codegen.lowering.expander import lane_map, merge_axes, pm_expand
from kiln.uops import AxisKind, Ops, UOp, dtypes, graph_rewrite, print_graph


def upcast_store() -> UOp:
    """out[i] = a[i] * 2 with i = 4 * outer + lane."""
    out, a = buffer(0, 8), buffer(1, 8)
    i = UOp.range(8, 0)
    sink = kernel(out.index(i).store(a.index(i).load() * 2.0).end(i))
    return apply_opts(sink, [Opt(OptOps.UPCAST, 0, 4)], CPULikeRenderer())


def unroll_reduce() -> UOp:
    """out[i] = sum_j a[4 i + j] with j fully unrolled."""
    out, a = buffer(0, 2), buffer(1, 8)
    i, j = UOp.range(2, 0), UOp.range(4, 1, AxisKind.REDUCE)
    sink = kernel(out.index(i).store(a.index(i * 4 + j).load().reduce(j)).end(i))
    return apply_opts(sink, [Opt(OptOps.UNROLL, 1, 0)], ScalarRenderer())


UPCAST_STORE_BEFORE = """\
%0 = DEFINE_GLOBAL float32.ptr(8) arg=0
%1 = CONST index arg=2
%2 = RANGE index %1 arg=RangeArg(axis=0, kind=AxisKind.LOOP)
%3 = CONST index arg=4
%4 = MUL index %2 %3
%5 = RANGE index %3 arg=RangeArg(axis=1, kind=AxisKind.UPCAST)
%6 = ADD index %4 %5
%7 = INDEX float32.ptr(8) %0 %6
%8 = DEFINE_GLOBAL float32.ptr(8) arg=1
%9 = INDEX float32.ptr(8) %8 %6
%10 = LOAD float32 %9
%11 = CONST float32 arg=2.0
%12 = MUL float32 %10 %11
%13 = STORE void %7 %12
%14 = END void %13 %2 %5
%15 = SINK void %14 arg=KernelInfo(name='', opts_to_apply=None, applied_opts=(Opt(op=OptOps.UPCAST, axis=0, arg=4),))"""

UPCAST_STORE_AFTER = """\
%0 = DEFINE_GLOBAL float32.ptr(8) arg=0
%1 = CONST index arg=2
%2 = RANGE index %1 arg=RangeArg(axis=0, kind=AxisKind.LOOP)
%3 = CONST index arg=4
%4 = MUL index %2 %3
%5 = VECTORIZE index.vec(4) %4 %4 %4 %4
%6 = VCONST index.vec(4) arg=(0, 1, 2, 3)
%7 = ADD index.vec(4) %5 %6
%8 = INDEX float32.ptr(8).vec(4) %0 %7
%9 = DEFINE_GLOBAL float32.ptr(8) arg=1
%10 = INDEX float32.ptr(8).vec(4) %9 %7
%11 = LOAD float32.vec(4) %10
%12 = VCONST float32.vec(4) arg=(2.0, 2.0, 2.0, 2.0)
%13 = MUL float32.vec(4) %11 %12
%14 = STORE void %8 %13
%15 = END void %14 %2
%16 = SINK void %15 arg=KernelInfo(name='', opts_to_apply=None, applied_opts=(Opt(op=OptOps.UPCAST, axis=0, arg=4),))"""

UNROLL_REDUCE_BEFORE = """\
%0 = DEFINE_GLOBAL float32.ptr(2) arg=0
%1 = CONST index arg=2
%2 = RANGE index %1 arg=RangeArg(axis=0, kind=AxisKind.LOOP)
%3 = INDEX float32.ptr(2) %0 %2
%4 = DEFINE_GLOBAL float32.ptr(8) arg=1
%5 = CONST index arg=4
%6 = MUL index %2 %5
%7 = RANGE index %5 arg=RangeArg(axis=1, kind=AxisKind.UNROLL)
%8 = ADD index %6 %7
%9 = INDEX float32.ptr(8) %4 %8
%10 = LOAD float32 %9
%11 = REDUCE float32 %10 %7 arg=ADD
%12 = STORE void %3 %11
%13 = END void %12 %2
%14 = SINK void %13 arg=KernelInfo(name='', opts_to_apply=None, applied_opts=(Opt(op=OptOps.UNROLL, axis=1, arg=0),))"""

UNROLL_REDUCE_AFTER = """\
%0 = DEFINE_GLOBAL float32.ptr(2) arg=0
%1 = CONST index arg=2
%2 = RANGE index %1 arg=RangeArg(axis=0, kind=AxisKind.LOOP)
%3 = INDEX float32.ptr(2) %0 %2
%4 = DEFINE_GLOBAL float32.ptr(8) arg=1
%5 = CONST index arg=4
%6 = MUL index %2 %5
%7 = VECTORIZE index.vec(4) %6 %6 %6 %6
%8 = VCONST index.vec(4) arg=(0, 1, 2, 3)
%9 = ADD index.vec(4) %7 %8
%10 = INDEX float32.ptr(8).vec(4) %4 %9
%11 = LOAD float32.vec(4) %10
%12 = GEP float32 %11 arg=(0,)
%13 = GEP float32 %11 arg=(1,)
%14 = ADD float32 %12 %13
%15 = GEP float32 %11 arg=(2,)
%16 = ADD float32 %14 %15
%17 = GEP float32 %11 arg=(3,)
%18 = ADD float32 %16 %17
%19 = STORE void %3 %18
%20 = END void %19 %2
%21 = SINK void %20 arg=KernelInfo(name='', opts_to_apply=None, applied_opts=(Opt(op=OptOps.UNROLL, axis=1, arg=0),))"""


def test_upcast_store_golden() -> None:
    # the index becomes a vector (4 outer + lanes 0..3), load/multiply/store act on 4 lanes, END forgets the lanes
    assert print_graph(upcast_store()) == UPCAST_STORE_BEFORE
    assert print_graph(graph_rewrite(upcast_store(), pm_expand)) == UPCAST_STORE_AFTER


def test_unroll_reduce_golden() -> None:
    # the reduce over the unrolled axis becomes a horizontal sum of the lanes, in loop order; no REDUCE is left
    assert print_graph(unroll_reduce()) == UNROLL_REDUCE_BEFORE
    assert print_graph(graph_rewrite(unroll_reduce(), pm_expand)) == UNROLL_REDUCE_AFTER


def test_no_unroll_is_left_after_expansion() -> None:
    for sink in (upcast_store(), unroll_reduce()):
        ops = {node.op for node in graph_rewrite(sink, pm_expand).toposort()}
        assert Ops.UNROLL not in ops and Ops.REDUCE not in ops


def test_lane_map_broadcasts_missing_axes() -> None:
    # target axes (axis 1 size 2, axis 3 size 3), row-major; a source over axis 3 only repeats for each axis-1 lane
    assert lane_map(((1, 2), (3, 3)), ((3, 3),)) == (0, 1, 2, 0, 1, 2)
    assert lane_map(((1, 2), (3, 3)), ((1, 2),)) == (0, 0, 0, 1, 1, 1)
    assert lane_map(((1, 2), (3, 3)), ((1, 2), (3, 3))) == tuple(range(6))


def test_merge_axes_sorts_and_checks_sizes() -> None:
    assert merge_axes(((3, 2),), ((1, 4), (3, 2))) == ((1, 4), (3, 2))
    with pytest.raises(ValueError, match="axis 3 is expanded with two sizes 2 and 4"):
        merge_axes(((3, 2),), ((3, 4),))


def partly_unrolled_sum() -> UOp:
    """out[i] = sum_j a[16 i + j], j split into a loop of 4 and an unroll of 4."""
    out, a = buffer(0, 2), buffer(1, 32)
    i, j = UOp.range(2, 0), UOp.range(16, 1, AxisKind.REDUCE)
    sink = kernel(out.index(i).store(a.index(i * 16 + j).load().reduce(j)).end(i))
    return apply_opts(sink, [Opt(OptOps.UNROLL, 1, 4)], ScalarRenderer())


def _reduces(sink: UOp) -> list[UOp]:
    return [node for node in sink.toposort() if node.op is Ops.REDUCE]


def test_unrolled_lanes_fold_inside_the_loop_by_default_and_after_it_with_ctx() -> None:
    # default: one scalar REDUCE over the loop of the horizontal sum of the 4 lanes; ctx True (vector-ALU renderers):
    # the REDUCE keeps the 4 lanes as a vector accumulator, and the 4 lanes are added up once, outside the loop
    folded_inside = _reduces(graph_rewrite(partly_unrolled_sum(), pm_expand))
    assert len(folded_inside) == 1 and folded_inside[0].dtype.count == 1
    float_adds = [n for n in folded_inside[0].src[0].toposort() if n.op is Ops.ADD and n.dtype == dtypes.float32]
    assert len(float_adds) == 3
    deferred = graph_rewrite(partly_unrolled_sum(), pm_expand, ctx=True)
    (reduction,) = _reduces(deferred)
    assert reduction.dtype.count == 4 and reduction.src[0].op is not Ops.ADD
    # the fold after the loop is a tree: lanes (0, 1) + (2, 3) in one 2-lane add, then the two halves of that
    store = next(node for node in deferred.toposort() if node.op is Ops.STORE)
    lanes = sorted(node.arg for node in store.src[1].toposort() if node.op is Ops.GEP and node.src[0] is reduction)
    assert lanes == [(0, 1), (2, 3)]
    adds = [n for n in store.src[1].toposort() if n.op is Ops.ADD and dtypes.is_float(n.dtype)]
    assert sorted(n.dtype.count for n in adds) == [1, 2]


def _unrolled_reduce(op: Ops, lanes: int, rows: int = 3, length: int = 0) -> UOp:
    """out[i] = reduce_j a[length i + j], j split into a loop and an unroll of `lanes`."""
    length = length or 4 * lanes
    out, a = buffer(0, rows), buffer(1, rows * length)
    i, j = UOp.range(rows, 0), UOp.range(length, 1, AxisKind.REDUCE)
    value = a.index(i * length + j).load()
    sink = kernel(out.index(i).store(value.reduce(j, op=op)).end(i))
    return apply_opts(sink, [Opt(OptOps.UNROLL, 1, lanes)], ScalarRenderer())


@pytest.mark.parametrize("lanes", [2, 3, 5, 6, 7, 8, 12, 16, 64])
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_deferred_fold_is_a_tree_of_vector_ops_and_matches_numpy(op: Ops, lanes: int) -> None:
    # the deferred accumulator's lanes are folded by halves (an odd part out set aside and folded in last): at most
    # log2(lanes) + (number of odd levels) ops after the loop, each on a vector, and the values stay exact (small
    # integers: any order of the adds gives numpy's sum; MAX: nan operands ignored, -0 below +0, as exec_alu)
    deferred = graph_rewrite(_unrolled_reduce(op, lanes), pm_expand, ctx=True)
    (reduction,) = _reduces(deferred)
    store = next(node for node in deferred.toposort() if node.op is Ops.STORE)
    folds = [
        n for n in store.src[1].toposort() if n.op is op and dtypes.is_float(n.dtype) and reduction in n.toposort()
    ]
    assert len(folds) <= 2 * (lanes - 1).bit_length()
    assert max(n.dtype.count for n in folds) == lanes // 2
    rng = np.random.default_rng(lanes)
    a = rng.integers(-50, 50, 3 * 4 * lanes).astype(np.float32)
    if op is Ops.MAX:
        a[::7] = -0.0
        a[1 :: 4 * lanes] = np.nan
    for renderer in (ScalarRenderer(), _VectorALU()):
        program = Program(get_program(_unrolled_reduce(op, lanes), renderer, ()))
        out = np.zeros(3, np.float32)
        run_program(program, [out, a], {}, *program.launch_dims({}))
        rows = a.reshape(3, 4 * lanes)
        expected = rows.sum(axis=1) if op is Ops.ADD else np.fmax.reduce(rows, axis=1)
        np.testing.assert_array_equal(out, expected)
        if op is Ops.MAX:  # a row whose largest value is 0: +0 if any +0 is in it, and -0 here only when none is
            assert all(np.signbit(o) == np.signbit(e) for o, e in zip(out, expected) if e == 0)


def _rows_sum_with_output_lanes() -> UOp:
    """out[i] = sum_j a[16 i + j]: the 4 rows upcast whole (axis 0), then j split into a loop of 4 and an unroll of
    4 (axis 2): the output lanes are the outer ones, the unrolled lanes the inner ones."""
    out, a = buffer(0, 4), buffer(1, 64)
    i, j = UOp.range(4, 0), UOp.range(16, 1, AxisKind.REDUCE)
    sink = kernel(out.index(i).store(a.index(i * 16 + j).load().reduce(j)).end(i))
    return apply_opts(sink, [Opt(OptOps.UPCAST, 0, 0), Opt(OptOps.UNROLL, 1, 4)], ScalarRenderer())


class _VectorALU(CPULikeRenderer):
    """A CPU-like renderer whose ALU ops stay vectors (like the LLVM IR renderer): the deferred fold is taken."""

    device = "TESTVECTORALU"
    vector_alu = True
    vector_widths = (4, 8, 16)


def test_deferred_accumulator_keeps_the_lane_order_of_its_value() -> None:
    # the 16 lanes (4 rows x 4 unrolled) accumulate in the order the loads give them (each row's 4 lanes one
    # contiguous load), not regrouped by unrolled lane every iteration; the fold after the loop picks each row's
    # lanes, so the results still match numpy
    deferred = graph_rewrite(_rows_sum_with_output_lanes(), pm_expand, ctx=True)
    (reduction,) = _reduces(deferred)
    assert reduction.dtype.count == 16
    assert reduction.src[0].op is not Ops.GEP  # no per-iteration shuffle of the accumulated value
    rng = np.random.default_rng(0)
    a = rng.integers(-8, 8, 64).astype(np.float32)
    for renderer in (ScalarRenderer(), _VectorALU()):
        program = Program(get_program(_rows_sum_with_output_lanes(), renderer, ()))
        out = np.zeros(4, np.float32)
        run_program(program, [out, a], {}, *program.launch_dims({}))
        np.testing.assert_array_equal(out, a.reshape(4, 16).sum(axis=1))
