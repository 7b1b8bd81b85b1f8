"""The BLOCK opt (reduce blocking, opt/reduce_blocking.py): values against numpy on the corpus's reduce, matmul and
convolution kernels for every test renderer, alone and with the other opts, and a clear KernelOptError for every
kernel it cannot block correctly."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import CASES_BY_NAME, assert_matches, run_case
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer
from sinks_for_tests import buffer, kernel, matmul, row_sum

from kiln.codegen import KernelOptError, Opt, OptOps, Program, Renderer, apply_opts, get_program, run_program
from kiln.codegen.loop_structure import kernel_ranges
from kiln.uops import AxisKind, Ops, UOp, dtypes

CPU, GPU, SCALAR = CPULikeRenderer(), GPULikeRenderer(), ScalarRenderer()
RENDERERS = [SCALAR, CPU, GPU]


def shape(sink: UOp) -> list[tuple[int, str, int]]:
    """(axis, kind, size) of every RANGE, in nesting order."""
    return [(r.arg.axis, r.arg.kind.name, r.src[0].arg) for r in kernel_ranges(sink)]


def test_block_loop_encloses_the_output_loops_inside_the_threads() -> None:
    # the block loop (axis 3, 12 / 4 blocks) takes the next number; the inner reduce of 4 keeps axis 2
    assert shape(apply_opts(matmul(8, 16, 12), [Opt(OptOps.BLOCK, 2, 4)], CPU)) == [
        (3, "BLOCK", 3),
        (0, "LOOP", 8),
        (1, "LOOP", 16),
        (2, "REDUCE", 4),
    ]
    threaded = apply_opts(matmul(8, 16, 12), [Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.THREAD, 0, 2)], CPU)
    assert shape(threaded) == [(4, "THREAD", 2), (3, "BLOCK", 3), (0, "LOOP", 4), (1, "LOOP", 16), (2, "REDUCE", 4)]
    # on a GPU the output axes are launch dimensions: the block loop runs inside each thread
    assert shape(apply_opts(matmul(8, 16, 12), [Opt(OptOps.BLOCK, 2, 6)], GPU)) == [
        (0, "GLOBAL", 8),
        (1, "GLOBAL", 16),
        (3, "BLOCK", 2),
        (2, "REDUCE", 6),
    ]


def test_block_loop_is_the_outermost_loop_of_the_linear_program() -> None:
    program = Program(get_program(matmul(8, 16, 12), CPU, [Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.UPCAST, 1, 4)]))
    loops = [u.arg for u in program.uops if u.op is Ops.RANGE]
    assert loops[0].kind is AxisKind.BLOCK and loops[-1].kind is AxisKind.REDUCE
    # the output is read in every block, gated off in block 0 (a gated LOAD has the sources index, alt, gate)
    pointers = {u for u in program.uops if u.op is Ops.DEFINE_GLOBAL and u.arg == 0}
    reads = [u for u in program.uops if u.op is Ops.LOAD and u.src[0].src[0] in pointers]
    assert reads and all(len(u.src) == 3 for u in reads)


CORPUS_OPTS = [
    ("matmul", [Opt(OptOps.BLOCK, 2, 4)]),
    ("matmul", [Opt(OptOps.BLOCK, 2, 3), Opt(OptOps.UPCAST, 1, 5), Opt(OptOps.UNROLL, 2, 0)]),
    ("matmul", [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 2, 2), Opt(OptOps.BLOCK, 2, 2)]),
    ("matmul", [Opt(OptOps.PADTO, 2, 16), Opt(OptOps.BLOCK, 2, 8)]),  # the padded tail is in the last block
    ("matmul", [Opt(OptOps.BLOCK, 2, 6), Opt(OptOps.PADTO, 2, 8)]),  # the inner reduce padded inside each block
    ("matmul_int8_into_int32", [Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.UNROLL, 2, 2)]),
    ("conv2d", [Opt(OptOps.PADTO, 4, 4), Opt(OptOps.BLOCK, 4, 2)]),  # 3 input channels padded to 2 blocks of 2
    ("sum_axis0", [Opt(OptOps.BLOCK, 1, 2)]),
    ("sum_axis1", [Opt(OptOps.BLOCK, 1, 3), Opt(OptOps.UPCAST, 0, 2)]),
    ("max_axis0", [Opt(OptOps.BLOCK, 1, 3)]),
    ("max_axis1", [Opt(OptOps.BLOCK, 1, 4), Opt(OptOps.UNROLL, 1, 2)]),
    ("prod_axis1", [Opt(OptOps.BLOCK, 1, 6)]),
    ("sum_int32_wraps", [Opt(OptOps.BLOCK, 1, 2)]),
    ("max_int8", [Opt(OptOps.BLOCK, 1, 2)]),
    ("sum_all", [Opt(OptOps.BLOCK, 1, 2)]),  # a store outside every loop gets an END of its block loop
    ("sum_all", [Opt(OptOps.BLOCK, 1, 4), Opt(OptOps.UNROLL, 0, 0)]),
    ("sum_middle_axis", [Opt(OptOps.PADTO, 1, 6), Opt(OptOps.BLOCK, 1, 3)]),  # 5 padded to 2 blocks of 3
    ("row_mean", [Opt(OptOps.BLOCK, 1, 5)]),  # the epilogue (* 0.1) applies once, in the last block
    ("subtract_row_sum", [Opt(OptOps.BLOCK, 2, 4)]),  # every output element carries its own copy of the sum
]


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda r: r.device)
@pytest.mark.parametrize(("name", "opts"), CORPUS_OPTS)
def test_blocked_corpus_kernels_equal_numpy(name: str, opts: list[Opt], renderer: Renderer) -> None:
    case = CASES_BY_NAME[name]
    inputs = case.inputs(np.random.default_rng(1))
    got = run_case(case, renderer, opts, inputs)
    assert_matches(case, got, case.reference(inputs, case.var_vals), exact=case.exact)


@pytest.mark.parametrize(
    ("renderer", "opts"),
    [
        (CPU, [Opt(OptOps.THREAD, 0, 4), Opt(OptOps.BLOCK, 2, 4)]),  # each core blocks over its own rows
        (CPU, [Opt(OptOps.BLOCK, 2, 2), Opt(OptOps.THREAD, 1, 8), Opt(OptOps.UPCAST, 0, 4)]),
        (CPU, [Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.SWAP, 0, 1)]),
        (GPU, [Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.UPCAST, 0, 2)]),
        (GPU, [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.BLOCK, 2, 2), Opt(OptOps.UNROLL, 2, 2)]),
        (SCALAR, [Opt(OptOps.BLOCK, 2, 8), Opt(OptOps.UNROLL, 2, 4)]),
    ],
)
def test_blocked_matmul_with_an_epilogue_equals_numpy(renderer: Renderer, opts: list[Opt]) -> None:
    # relu(a @ b + bias): the bias and the relu apply to the whole sum only (relu of a partial sum would clip it)
    m, n, k = 8, 16, 16
    c, a, b, bias = buffer(0, m * n), buffer(1, m * k), buffer(2, k * n), buffer(3, n)
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisKind.REDUCE)
    total = (a.index(i * k + r).load() * b.index(r * n + j).load()).reduce(r)
    sink = kernel(c.index(i * n + j).store((total + bias.index(j).load()).maximum(0.0)).end(i, j))
    rng = np.random.default_rng(2)
    x, y, z = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32), rng.standard_normal(n)
    out = np.full(m * n, np.nan, np.float32)  # block 0 must not read what was there before
    program = Program(get_program(sink, renderer, opts))
    run_program(program, [out, x.ravel(), y.ravel(), z.astype(np.float32)], {}, *program.launch_dims())
    np.testing.assert_allclose(out.reshape(m, n), np.maximum(x @ y + z.astype(np.float32), 0), rtol=1e-5, atol=1e-5)


def _repeated_store() -> UOp:
    # out[i] = sum_k a[i, k], written in every iteration of a loop j the address does not use
    out, a = buffer(0, 4), buffer(1, 32)
    i, j, r = UOp.range(4, 0), UOp.range(2, 1), UOp.range(8, 2, AxisKind.REDUCE)
    return kernel(out.index(i).store(a.index(i * 8 + r).load().reduce(r)).end(i, j))


def _overlapping_store() -> UOp:
    out, a = buffer(0, 7), buffer(1, 64)
    i, j, r = UOp.range(4, 0), UOp.range(4, 1), UOp.range(4, 2, AxisKind.REDUCE)
    return kernel(out.index(i + j).store(a.index((i * 4 + j) * 4 + r).load().reduce(r)).end(i, j))


def _wrapped_store() -> UOp:
    out, a = buffer(0, 16), buffer(1, 64)
    i, r = UOp.range(16, 0), UOp.range(4, 1, AxisKind.REDUCE)
    return kernel(out.index((i * 5) % 16).store(a.index(i * 4 + r).load().reduce(r)).end(i))


def _rounded_output() -> UOp:
    out, a = buffer(0, 4, dtypes.float16), buffer(1, 32)
    i, r = UOp.range(4, 0), UOp.range(8, 1, AxisKind.REDUCE)
    return kernel(out.index(i).store(a.index(i * 8 + r).load().reduce(r).cast(dtypes.float16)).end(i))


def _in_place() -> UOp:
    out, a = buffer(0, 4), buffer(1, 32)
    i, r = UOp.range(4, 0), UOp.range(8, 1, AxisKind.REDUCE)
    return kernel(out.index(i).store(out.index(i).load() + a.index(i * 8 + r).load().reduce(r)).end(i))


def _divided_by_the_sum() -> UOp:
    out, a = buffer(0, 4, dtypes.int32), buffer(1, 32, dtypes.int32)
    i, r = UOp.range(4, 0), UOp.range(8, 1, AxisKind.REDUCE)
    total = a.index(i * 8 + r).load().reduce(r)
    return kernel(out.index(i).store(UOp.const(dtypes.int32, 1000) // total).end(i))


def _symbolic() -> UOp:
    n = UOp.variable("n", 1, 16)
    out, a = buffer(0, 16), buffer(1, 256)
    i, r = UOp.range(n, 0), UOp.range(8, 1, AxisKind.REDUCE)
    return kernel(out.index(i).store(a.index(i * 8 + r).load().reduce(r)).end(i))


REJECTED = [
    (CPU, matmul(8, 16, 12), [Opt(OptOps.BLOCK, 0, 2)], "BLOCK needs a REDUCE axis; axis 0 is LOOP"),
    (CPU, matmul(8, 16, 12), [Opt(OptOps.BLOCK, 2, 0)], "BLOCK: blocking axis 2 of size 12 by 12 leaves one block"),
    (CPU, matmul(8, 16, 12), [Opt(OptOps.BLOCK, 2, 5)], "BLOCK: amount 5 does not divide axis 2 of size 12"),
    (
        CPU,
        matmul(8, 16, 12),
        [Opt(OptOps.BLOCK, 2, 6), Opt(OptOps.BLOCK, 2, 2)],
        "BLOCK: the kernel already has a BLOCK axis",
    ),
    (GPU, row_sum(4, 64), [Opt(OptOps.GROUP, 1, 16), Opt(OptOps.BLOCK, 1, 2)], "BLOCK: a group reduce's partial"),
    (GPU, row_sum(4, 64), [Opt(OptOps.BLOCK, 1, 16), Opt(OptOps.GROUP, 1, 4)], "GROUP after BLOCK"),
    (GPU, row_sum(4, 64), [Opt(OptOps.BLOCK, 1, 16), Opt(OptOps.GROUPTOP, 1, 4)], "GROUPTOP after BLOCK"),
    (GPU, matmul(8, 8, 16), [Opt(OptOps.TC, 2, 0), Opt(OptOps.BLOCK, 2, 2)], "BLOCK after TC is not supported"),
    (GPU, matmul(8, 8, 16), [Opt(OptOps.BLOCK, 2, 8), Opt(OptOps.TC, 2, 0)], "TC after BLOCK is not supported"),
    (CPU, _symbolic(), [Opt(OptOps.BLOCK, 1, 2)], r"BLOCK: needs constant loop sizes; axes \[0\] are symbolic"),
    (
        CPU,
        CASES_BY_NAME["softmax"].sink,
        [Opt(OptOps.BLOCK, 3, 4)],
        "BLOCK: needs a kernel with exactly one REDUCE, this one has 2",
    ),
    (
        CPU,
        CASES_BY_NAME["sum_of_row_maxima"].sink,
        [Opt(OptOps.BLOCK, 0, 2)],
        "BLOCK: needs a kernel with exactly one REDUCE, this one has 2",
    ),
    (
        CPU,
        _rounded_output(),
        [Opt(OptOps.BLOCK, 1, 2)],
        r"BLOCK: the output holds dtypes.float16, the reduce accumulates dtypes.float32: a partial result",
    ),
    (CPU, _in_place(), [Opt(OptOps.BLOCK, 1, 2)], "BLOCK: the kernel also reads its output buffer 0"),
    (CPU, _divided_by_the_sum(), [Opt(OptOps.BLOCK, 1, 2)], r"BLOCK: the epilogue divides by the REDUCE \(IDIV\)"),
    (
        CPU,
        _repeated_store(),
        [Opt(OptOps.BLOCK, 2, 2)],
        "BLOCK: the output index must step by a constant, nonzero stride along every output loop; along axis 1 it "
        "steps by 0",
    ),
    (CPU, _overlapping_store(), [Opt(OptOps.BLOCK, 2, 2)], "BLOCK: output loops overlap: axis 1 steps by 1"),
    (CPU, _wrapped_store(), [Opt(OptOps.BLOCK, 1, 2)], "along axis 0 it steps by a non-constant amount"),
]


@pytest.mark.parametrize(("renderer", "sink", "opts", "message"), REJECTED)
def test_what_block_cannot_do_raises_with_a_message(
    renderer: Renderer, sink: UOp, opts: list[Opt], message: str
) -> None:
    with pytest.raises(KernelOptError, match=message):
        apply_opts(sink, opts, renderer)


def test_two_outputs_are_rejected() -> None:
    out0, out1, a = buffer(0, 4), buffer(1, 4), buffer(2, 32)
    i, r = UOp.range(4, 0), UOp.range(8, 1, AxisKind.REDUCE)
    total = a.index(i * 8 + r).load().reduce(r)
    sink = kernel(out0.index(i).store(total).end(i), out1.index(i).store(total * 2.0).end(i))
    with pytest.raises(KernelOptError, match="BLOCK: needs a kernel with one store, this one has 2"):
        apply_opts(sink, [Opt(OptOps.BLOCK, 1, 2)], CPU)


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX, Ops.MUL])
def test_each_reduce_op_carries_its_partial_result(op: Ops) -> None:
    a = (np.random.default_rng(4).random(3 * 16, np.float32) + 0.5) * (-1 if op is Ops.MAX else 1)
    reference = {Ops.ADD: np.sum, Ops.MAX: np.max, Ops.MUL: np.prod}[op](a.reshape(3, 16), axis=1)
    for renderer in RENDERERS:
        out = np.full(3, np.nan, np.float32)
        program = Program(get_program(row_sum(3, 16, op), renderer, [Opt(OptOps.BLOCK, 1, 4)]))
        run_program(program, [out, a], {}, *program.launch_dims())
        np.testing.assert_allclose(out, reference, rtol=1e-5)
