"""Ops a renderer lacks are rewritten into ops it has; division by powers of two becomes shifts when exact."""

from __future__ import annotations

import numpy as np
from renderers_for_tests import ScalarRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import Program, get_program, run_program
from kiln.uops import GroupOp, Ops, UOp, dtypes
from kiln.uops.alu import exec_alu

MISSING = frozenset({Ops.SUB, Ops.NEG, Ops.CMPEQ, Ops.MAX, Ops.MULACC, Ops.RECIPROCAL, Ops.SHL, Ops.SHR})


class BareRenderer(ScalarRenderer):
    device = "TESTBARE"
    native_ops = GroupOp.ALU - MISSING


def test_missing_ops_are_decomposed_and_results_unchanged() -> None:
    f_out, i_out, x, y, n = (
        buffer(0, 16),
        buffer(1, 16, dtypes.int32),
        buffer(2, 16),
        buffer(3, 16),
        buffer(4, 16, dtypes.int32),
    )
    i = UOp.range(16, 0)
    a, b, k = x.index(i).load(), y.index(i).load(), n.index(i).load()
    floats = (a - b) * (-a) + a.maximum(b) + a.alu(Ops.MULACC, b, a) + a.reciprocal() + a.eq(b).where(a, b)
    ints = (k << 3) + ((k * 4) >> 2) - k.maximum(k.const_like(2)) + k.eq(k.const_like(5)).cast(dtypes.int32)
    sink = kernel(f_out.index(i).store(floats).end(i), i_out.index(i).store(ints).end(i))
    rng = np.random.default_rng(11)
    xs = rng.uniform(0.5, 4, 16).astype(np.float32)
    ys = xs.copy()
    ys[::2] += 1.0
    ns = rng.integers(0, 100, 16).astype(np.int32)
    results = {}
    for renderer in (ScalarRenderer(), BareRenderer()):
        program = Program(get_program(sink, renderer, ()))
        outs = [np.zeros(16, np.float32), np.zeros(16, np.int32)]
        run_program(program, [*outs, xs, ys, ns])
        results[renderer.device] = outs
        if renderer.device == "TESTBARE":
            assert not {u.op for u in program.uops} & MISSING
    np.testing.assert_allclose(results["TESTBARE"][0], results["TESTSCALAR"][0], rtol=1e-6)
    np.testing.assert_array_equal(results["TESTBARE"][1], results["TESTSCALAR"][1])
    expected_ints = (ns << 3) + ns - np.maximum(ns, 2) + (ns == 5)
    np.testing.assert_array_equal(results["TESTBARE"][1], expected_ints)


def test_non_negative_division_by_powers_of_two_uses_shifts_and_masks() -> None:
    out, a = buffer(0, 32, dtypes.int32), buffer(1, 32, dtypes.int32)
    i = UOp.range(32, 0)
    value = a.index(i).load()
    non_negative = value.maximum(value.const_like(0))
    sink = kernel(out.index(i).store(non_negative // 8 + non_negative % 4 + value // 4).end(i))
    program = Program(get_program(sink, ScalarRenderer(), ()))
    ops = [u.op for u in program.uops]
    # the possibly negative `value // 4` keeps IDIV (C division truncates toward zero, a shift would floor)
    assert ops.count(Ops.SHR) == 1 and ops.count(Ops.AND) == 1 and ops.count(Ops.IDIV) == 1
    values = np.arange(-16, 16, dtype=np.int32)
    result = np.zeros(32, np.int32)
    run_program(program, [result, values])
    clipped = np.maximum(values, 0)
    np.testing.assert_array_equal(result, clipped // 8 + clipped % 4 + np.trunc(values / 4).astype(np.int32))


def test_float_max_fallback_follows_exec_alu_for_signed_zeros_and_nan() -> None:
    specials = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan")]
    pairs = [(x, y) for x in specials for y in specials]
    count = len(pairs)
    out, a_buffer, b_buffer = buffer(0, count), buffer(1, count), buffer(2, count)
    i = UOp.range(count, 0)
    sink = kernel(out.index(i).store(a_buffer.index(i).load().maximum(b_buffer.index(i).load())).end(i))
    program = Program(get_program(sink, BareRenderer(), []))
    assert Ops.MAX not in {u.op for u in program.uops}
    got = np.zeros(count, np.float32)
    a = np.array([x for x, _ in pairs], np.float32)
    b = np.array([y for _, y in pairs], np.float32)
    run_program(program, [got, a, b])
    for k, (x, y) in enumerate(pairs):
        expected = float(exec_alu(Ops.MAX, dtypes.float32, (x, y)))
        if np.isnan(expected):
            assert np.isnan(got[k]), (x, y)
        else:
            assert got[k] == expected and np.signbit(got[k]) == np.signbit(expected), (x, y, got[k])
