"""`reuse_row_values`: a row scaled by a function of its own sum keeps the summed values (softmax's second exp).

Each rewritten kernel is run by the interpreter against numpy; the rewrite's conditions are checked by kernels that
look alike but must not be rewritten; the opts that would break the stored row are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from corpus import CORPUS, buffer, kernel, loop, reduce_range, run_case, write
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer

from kiln.codegen import KernelOptError, Opt, OptOps, Program, apply_opts, get_program
from kiln.codegen.interpreter import run_program
from kiln.codegen.opt.optimize import prepare_kernel
from kiln.codegen.opt.row_reuse import reuse_row_values
from kiln.uops import Ops, UOp, dtypes

SERIAL = [ScalarRenderer(), CPULikeRenderer()]
ROWS, COLUMNS = 3, 24


def _softmax_case():
    return next(case for case in CORPUS if case.name == "softmax")


def _count(sink: UOp, op: Ops) -> int:
    return sum(1 for node in sink.toposort() if node.op is op)


def _row_kernel(kind: str) -> UOp:
    """Softmax-like row kernels over a (ROWS, COLUMNS) input in slot 1, output in slot 0 (and a second input in
    slot 2 for the variants that need one)."""
    out, a = buffer(0, dtypes.float32, ROWS * COLUMNS), buffer(1, dtypes.float32, ROWS * COLUMNS)
    i, k = loop(ROWS, 0), loop(COLUMNS, 1)
    r_max, r_sum = reduce_range(COLUMNS, 2), reduce_range(COLUMNS, 3)
    peak = a.index(i * COLUMNS + r_max).load().reduce(r_max, op=Ops.MAX)

    def e(column: UOp) -> UOp:
        return (a.index(i * COLUMNS + column).load() - peak).exp2()

    total = e(r_sum).reduce(r_sum)
    if kind == "reciprocal":
        value = e(k) * total.reciprocal()
    elif kind == "scale_first":
        value = (total.reciprocal() * 2.0) * e(k)
    elif kind == "divide":
        value = e(k) / total
    elif kind == "other_expression":  # the sum is of something else
        value = e(k) * (e(r_sum) + 1.0).reduce(r_sum).reciprocal()
    elif kind == "max_reduce":  # a MAX, not a sum
        value = e(k) * e(r_sum).reduce(r_sum, op=Ops.MAX).reciprocal()
    elif kind == "shifted":  # the same expression one column over
        value = e((k + 1) % COLUMNS) * total.reciprocal()
    elif kind == "quotient_of_sum":  # sum / e: the row is the divisor
        value = total / e(k)
    elif kind == "plain":  # (x - max) / sum(x - max): a load and a subtraction, storing them would save nothing
        plain_sum = (a.index(i * COLUMNS + r_sum).load() - peak).reduce(r_sum)
        value = (a.index(i * COLUMNS + k).load() - peak) * plain_sum.reciprocal()
    elif kind == "reads_output":  # the kernel reads its own output buffer
        value = e(k) * total.reciprocal() + out.index(i * COLUMNS + k).load()
    else:
        raise AssertionError(kind)
    return kernel("row", write(out, i * COLUMNS + k, value, i, k))


def _reference(kind: str, x: np.ndarray, previous: np.ndarray) -> np.ndarray:
    x = x.reshape(ROWS, COLUMNS).astype(np.float64)
    e = np.exp2(x - x.max(axis=1, keepdims=True))
    total = e.sum(axis=1, keepdims=True)
    if kind in ("reciprocal", "divide"):
        return e / total
    if kind == "scale_first":
        return 2.0 * e / total
    if kind == "other_expression":
        return e / (e + 1.0).sum(axis=1, keepdims=True)
    if kind == "max_reduce":
        return e / e.max(axis=1, keepdims=True)
    if kind == "shifted":
        return np.roll(e, -1, axis=1) / total
    if kind == "quotient_of_sum":
        return total / e
    if kind == "reads_output":
        return e / total + previous.reshape(ROWS, COLUMNS)
    if kind == "plain":
        shifted = x - x.max(axis=1, keepdims=True)
        return shifted / shifted.sum(axis=1, keepdims=True)
    raise AssertionError(kind)


def _run(sink: UOp, renderer, opts, x: np.ndarray, previous: np.ndarray) -> np.ndarray:
    program = Program(get_program(sink, renderer, opts))
    out = previous.copy()
    global_size, local_size = program.launch_dims({})
    run_program(program, [out, x.copy()], {}, global_size, local_size)
    return out


REWRITTEN = ["reciprocal", "scale_first", "divide"]
KEPT = ["other_expression", "max_reduce", "shifted", "quotient_of_sum", "reads_output", "plain"]


@pytest.mark.parametrize("kind", REWRITTEN + KEPT)
@pytest.mark.parametrize("renderer", [*SERIAL, GPULikeRenderer()], ids=lambda r: r.device)
def test_rewrite_applies_exactly_where_the_row_is_its_sums_values(kind: str, renderer) -> None:
    sink = _row_kernel(kind)
    prepared = reuse_row_values(sink, renderer)
    if kind in REWRITTEN and not renderer.has_local:
        # the output loop no longer computes its exp2: the sum loop's is stored and read back
        assert _count(prepared, Ops.EXP2) == _count(sink, Ops.EXP2) - 1
        stores = [node for node in prepared.toposort() if node.op is Ops.STORE]
        assert len(stores) == 2
    else:
        assert prepared is sink


@pytest.mark.parametrize("kind", REWRITTEN + KEPT)
@pytest.mark.parametrize("renderer", SERIAL, ids=lambda r: r.device)
@pytest.mark.parametrize(
    "opts",
    [
        [],
        None,  # the heuristic's
        [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 3, 8)],
        [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UNROLL, 3, 0), Opt(OptOps.UNROLL, 2, 4)],
        [Opt(OptOps.PADTO, 3, 16), Opt(OptOps.UNROLL, 3, 16)],
        [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 16)],
        [Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UPCAST, 1, 2)],
        [Opt(OptOps.THREAD, 0, 3), Opt(OptOps.UNROLL, 3, 4)],
    ],
    ids=lambda opts: "heuristic" if opts is None else ",".join(f"{o.op.name}{o.axis}:{o.arg}" for o in opts) or "none",
)
def test_values_match_numpy(kind: str, renderer, opts) -> None:
    if opts and any(opt.op is OptOps.THREAD for opt in opts) and not renderer.has_threads:
        pytest.skip("THREAD needs a renderer with CPU threads")
    rng = np.random.default_rng(3)
    x = rng.normal(size=ROWS * COLUMNS).astype(np.float32) * 4
    previous = rng.normal(size=ROWS * COLUMNS).astype(np.float32)
    got = _run(_row_kernel(kind), renderer, opts, x, previous)
    np.testing.assert_allclose(got, _reference(kind, x, previous).reshape(-1), rtol=3e-6, atol=1e-7)


@pytest.mark.parametrize("renderer", SERIAL, ids=lambda r: r.device)
def test_opts_that_would_store_the_row_again_are_refused(renderer) -> None:
    prepared = prepare_kernel(_row_kernel("reciprocal"), renderer)
    # the output loop outside the row loop: each column's pass would store the whole row again
    with pytest.raises(KernelOptError, match="enclose the reduce that stores the row"):
        apply_opts(prepared, [Opt(OptOps.SWAP, 1, 0)], renderer)
    # threads over the output loop: each would store the whole row while another scales it
    if renderer.has_threads:
        with pytest.raises(KernelOptError, match="does not split every store"):
            apply_opts(prepared, [Opt(OptOps.THREAD, 1, 2)], renderer)
    # the same opts on the kernel as written stay legal (it has one store)
    apply_opts(_row_kernel("reciprocal"), [Opt(OptOps.SWAP, 1, 0)], renderer)


def test_corpus_softmax_keeps_its_values_on_serial_renderers() -> None:
    case = _softmax_case()
    x = case.inputs(np.random.default_rng(0))
    expected = case.reference(x, case.var_vals)
    for renderer in SERIAL:
        assert _count(prepare_kernel(case.sink, renderer), Ops.EXP2) == 1  # the sum loop's only
        got = run_case(case, renderer, None, x)
        np.testing.assert_allclose(got[0], expected[0], rtol=2e-6, atol=1e-7)
    assert _count(prepare_kernel(case.sink, GPULikeRenderer()), Ops.EXP2) == 2


def test_rewriting_twice_changes_nothing() -> None:
    renderer = CPULikeRenderer()
    once = reuse_row_values(_row_kernel("reciprocal"), renderer)
    assert reuse_row_values(once, renderer) is once
