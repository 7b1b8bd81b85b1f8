"""apply_opts: what each opt does to the RANGE structure, and a clear KernelOptError for each illegal one (BLOCK's own
rejections and values: test_reduce_blocking.py)."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer
from sinks_for_tests import elementwise_add, matmul, row_sum, symbolic_scale

from kiln.codegen import KernelOptError, Opt, OptOps, Program, apply_opt, apply_opts, get_program, run_program
from kiln.codegen.loop_structure import kernel_ranges
from kiln.uops import AxisKind, Ops, UOp

CPU, GPU, SCALAR = CPULikeRenderer(), GPULikeRenderer(), ScalarRenderer()


def shape(sink: UOp) -> list[tuple[int, str, int]]:
    """(axis, kind, size) of every RANGE, in nesting order."""
    return [(r.arg.axis, r.arg.kind.name, r.src[0].arg) for r in kernel_ranges(sink)]


def run_matmul(opts: list[Opt], renderer: object) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 12), np.float32), rng.standard_normal((12, 16), np.float32)
    out = np.zeros(8 * 16, np.float32)
    program = Program(get_program(matmul(8, 16, 12), renderer, opts))  # type: ignore[arg-type]
    run_program(program, [out, a.ravel(), b.ravel()])
    np.testing.assert_allclose(out.reshape(8, 16), a @ b, rtol=1e-5, atol=1e-5)


def test_prepare_makes_loops_global_on_gpu_only() -> None:
    assert shape(apply_opts(matmul(8, 16, 12), [], GPU)) == [(0, "GLOBAL", 8), (1, "GLOBAL", 16), (2, "REDUCE", 12)]
    assert shape(apply_opts(matmul(8, 16, 12), [], CPU)) == [(0, "LOOP", 8), (1, "LOOP", 16), (2, "REDUCE", 12)]


@pytest.mark.parametrize(
    ("renderer", "opts", "expected"),
    [
        # the split keeps the axis number on the remaining part; the new part takes the next number (3)
        (CPU, [Opt(OptOps.UPCAST, 1, 4)], [(0, "LOOP", 8), (1, "LOOP", 4), (2, "REDUCE", 12), (3, "UPCAST", 4)]),
        (CPU, [Opt(OptOps.UNROLL, 2, 0)], [(0, "LOOP", 8), (1, "LOOP", 16), (2, "UNROLL", 12)]),
        (CPU, [Opt(OptOps.THREAD, 0, 4)], [(3, "THREAD", 4), (0, "LOOP", 2), (1, "LOOP", 16), (2, "REDUCE", 12)]),
        (GPU, [Opt(OptOps.LOCAL, 1, 8)], [(0, "GLOBAL", 8), (1, "GLOBAL", 2), (3, "LOCAL", 8), (2, "REDUCE", 12)]),
        (
            GPU,
            [Opt(OptOps.GROUPTOP, 2, 4)],
            [(0, "GLOBAL", 8), (1, "GLOBAL", 16), (3, "GROUP_REDUCE", 4), (2, "REDUCE", 3)],
        ),
        (GPU, [Opt(OptOps.SWAP, 0, 1)], [(0, "GLOBAL", 16), (1, "GLOBAL", 8), (2, "REDUCE", 12)]),
        # on a CPU the loops' nesting is exchanged: the columns loop (16) goes outside the rows loop (8)
        (CPU, [Opt(OptOps.SWAP, 0, 1)], [(0, "LOOP", 16), (1, "LOOP", 8), (2, "REDUCE", 12)]),
        (CPU, [Opt(OptOps.PADTO, 2, 16)], [(0, "LOOP", 8), (1, "LOOP", 16), (2, "REDUCE", 16)]),
        # BLOCK: the block loop (3 blocks, the new axis 3) goes outside the output loops; the reduce keeps axis 2
        (CPU, [Opt(OptOps.BLOCK, 2, 4)], [(3, "BLOCK", 3), (0, "LOOP", 8), (1, "LOOP", 16), (2, "REDUCE", 4)]),
        (GPU, [Opt(OptOps.BLOCK, 2, 6)], [(0, "GLOBAL", 8), (1, "GLOBAL", 16), (3, "BLOCK", 2), (2, "REDUCE", 6)]),
        (
            CPU,
            [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 0), Opt(OptOps.UNROLL, 2, 3)],
            [(0, "LOOP", 4), (2, "REDUCE", 4), (1, "UPCAST", 16), (3, "UPCAST", 2), (4, "UNROLL", 3)],
        ),
        # two upcast axes exchange numbers, so the lanes change order: the 16 columns become the inner lanes
        (
            CPU,
            [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 0), Opt(OptOps.SWAP, 1, 3)],
            [(0, "LOOP", 4), (2, "REDUCE", 12), (1, "UPCAST", 2), (3, "UPCAST", 16)],
        ),
    ],
)
def test_opt_reshapes_ranges_and_keeps_results(
    renderer: object, opts: list[Opt], expected: list[tuple[int, str, int]]
) -> None:
    sink = apply_opts(matmul(8, 16, 12), opts, renderer)  # type: ignore[arg-type]
    assert shape(sink) == expected
    assert sink.arg.applied_opts == tuple(opts)
    run_matmul(opts, renderer)


def test_thread_split_is_top_and_upcast_split_is_inner() -> None:
    # THREAD takes the outer part: i = thread * 2 + rest; UPCAST the inner: j = rest * 4 + lane
    sink = apply_opts(matmul(8, 16, 12), [Opt(OptOps.THREAD, 0, 4), Opt(OptOps.UPCAST, 1, 4)], CPU)
    store_index = next(n for n in sink.toposort() if n.op is Ops.STORE).src[0].src[1]
    ranges = {(r.arg.axis, r.arg.kind): r for r in kernel_ranges(sink)}
    values = {
        ranges[(3, AxisKind.THREAD)]: 3,
        ranges[(0, AxisKind.LOOP)]: 1,
        ranges[(1, AxisKind.LOOP)]: 2,
        ranges[(4, AxisKind.UPCAST)]: 1,
    }
    i, j = 3 * 2 + 1, 2 * 4 + 1
    substituted = store_index.substitute({r: UOp.const(r.dtype, v) for r, v in values.items()}).simplify()
    assert substituted.arg == i * 16 + j


def test_symbolic_axis_cannot_be_split() -> None:
    with pytest.raises(KernelOptError, match="UPCAST: axis 0 has the symbolic size n"):
        apply_opts(symbolic_scale(64), [Opt(OptOps.UPCAST, 0, 4)], CPU)


ILLEGAL = [
    (CPU, Opt(OptOps.UPCAST, 7, 4), r"UPCAST: no axis 7; axes are \[0, 1, 2\]"),
    (CPU, Opt(OptOps.UPCAST, None, 4), r"UPCAST: no axis None"),
    (CPU, Opt(OptOps.UPCAST, 2, 4), "UPCAST needs a LOOP or GLOBAL or LOCAL axis; axis 2 is REDUCE"),
    (CPU, Opt(OptOps.UPCAST, 1, 5), "UPCAST: amount 5 does not divide axis 1 of size 16"),
    (CPU, Opt(OptOps.UPCAST, 1, 1), "UPCAST needs an amount > 1, got 1"),
    (CPU, Opt(OptOps.UPCAST, 1, -2), "UPCAST needs an amount > 1, got -2"),
    (CPU, Opt(OptOps.UPCAST, 1, "4"), "UPCAST needs an int amount, got '4'"),  # type: ignore[arg-type]
    (CPU, Opt(OptOps.UPCAST, 1, True), "UPCAST needs an int amount, got True"),
    (CPU, Opt(OptOps.UNROLL, 0, 4), "UNROLL needs a REDUCE axis; axis 0 is LOOP"),
    (CPU, Opt(OptOps.LOCAL, 0, 4), "LOCAL needs a GLOBAL axis; axis 0 is LOOP"),
    (GPU, Opt(OptOps.LOCAL, 1, 2048), "LOCAL: amount 2048 does not divide axis 1 of size 16"),
    (GPU, Opt(OptOps.THREAD, 0, 2), "THREAD needs a LOOP axis; axis 0 is GLOBAL"),
    (
        SCALAR,
        Opt(OptOps.THREAD, 0, 2),
        "THREAD needs a renderer with CPU threads; <ScalarRenderer for TESTSCALAR> has none",
    ),
    (CPU, Opt(OptOps.THREAD, 1, 16), "THREAD: 16 threads exceed the limit 8"),
    (CPU, Opt(OptOps.GROUP, 2, 4), "GROUP needs a renderer with local threads; <CPULikeRenderer for TESTCPU> has none"),
    (GPU, Opt(OptOps.GROUP, 0, 4), "GROUP needs a REDUCE axis; axis 0 is GLOBAL"),
    (CPU, Opt(OptOps.SWAP, 2, 0), "SWAP needs a GLOBAL or LOOP or UPCAST axis; axis 2 is REDUCE"),
    (CPU, Opt(OptOps.SWAP, 0, 2), "SWAP needs another LOOP axis as arg, got 2"),
    (GPU, Opt(OptOps.SWAP, 0, 0), "SWAP needs another GLOBAL axis as arg, got 0"),
    (GPU, Opt(OptOps.SWAP, 0, 2), "SWAP needs another GLOBAL axis as arg, got 2"),
    (CPU, Opt(OptOps.NOLOCALS), "NOLOCALS needs a renderer with local threads"),
    (GPU, Opt(OptOps.NOLOCALS, 0), "NOLOCALS takes no axis or arg"),
    (CPU, Opt(OptOps.PADTO, 1, 8), "PADTO: axis 1 of size 16 is already a multiple of 8"),
    (CPU, Opt(OptOps.PADTO, 0, 32), "PADTO: padding axis 0 from 8 to 32 more than doubles it"),
    (CPU, Opt(OptOps.PADTO, 0, 1), "PADTO needs an amount > 1, got 1"),
    (CPU, Opt(OptOps.TC, 2, (0, 0)), "TC needs a renderer with tensor cores"),
    (CPU, Opt(OptOps.BLOCK, 0, 2), "BLOCK needs a REDUCE axis; axis 0 is LOOP"),
    (CPU, Opt(OptOps.BLOCK, 2, 0), "BLOCK: blocking axis 2 of size 12 by 12 leaves one block"),
]


@pytest.mark.parametrize(("renderer", "opt", "message"), ILLEGAL)
def test_illegal_opt_raises_with_message(renderer: object, opt: Opt, message: str) -> None:
    sink = apply_opts(matmul(8, 16, 12), [], renderer)  # type: ignore[arg-type]
    with pytest.raises(KernelOptError, match=message):
        apply_opt(sink, opt, renderer)  # type: ignore[arg-type]
    assert issubclass(KernelOptError, ValueError)


def test_limits_that_depend_on_earlier_opts() -> None:
    # 256 lanes at most
    sink = apply_opts(matmul(64, 64, 64), [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 1, 16)], CPU)
    with pytest.raises(KernelOptError, match=r"UNROLL by 2 makes 512 vector lanes \(limit 256\)"):
        apply_opt(sink, Opt(OptOps.UNROLL, 2, 2), CPU)
    # one THREAD axis per kernel
    threaded = apply_opts(matmul(8, 16, 12), [Opt(OptOps.THREAD, 0, 2)], CPU)
    with pytest.raises(KernelOptError, match="the kernel already has a THREAD axis"):
        apply_opt(threaded, Opt(OptOps.THREAD, 1, 2), CPU)
    # threads per block
    wide = apply_opts(matmul(64, 64, 8), [Opt(OptOps.LOCAL, 0, 32)], GPU)
    with pytest.raises(KernelOptError, match="2048 threads per block exceed the limit 1024"):
        apply_opt(wide, Opt(OptOps.LOCAL, 1, 64), GPU)
    # NOLOCALS forbids later locals, and cannot come after them
    no_locals = apply_opts(matmul(8, 16, 12), [Opt(OptOps.NOLOCALS)], GPU)
    with pytest.raises(KernelOptError, match="LOCAL after NOLOCALS"):
        apply_opt(no_locals, Opt(OptOps.LOCAL, 0, 2), GPU)
    with pytest.raises(KernelOptError, match="GROUPTOP after NOLOCALS"):
        apply_opt(no_locals, Opt(OptOps.GROUPTOP, 2, 2), GPU)
    with pytest.raises(KernelOptError, match="NOLOCALS is already applied"):
        apply_opt(no_locals, Opt(OptOps.NOLOCALS), GPU)
    local = apply_opts(matmul(8, 16, 12), [Opt(OptOps.LOCAL, 0, 2)], GPU)
    with pytest.raises(KernelOptError, match="NOLOCALS after LOCAL or GROUP axes exist"):
        apply_opt(local, Opt(OptOps.NOLOCALS), GPU)


def test_group_reduce_shared_memory_limit() -> None:
    class SmallShared(GPULikeRenderer):
        shared_max = 64

    sink = apply_opts(row_sum(4, 256), [], SmallShared())
    apply_opt(sink, Opt(OptOps.GROUP, 1, 16), SmallShared())  # 16 float32 partials = 64 bytes fit
    with pytest.raises(KernelOptError, match="group reduce needs 128 bytes of shared memory, the renderer has 64"):
        apply_opt(sink, Opt(OptOps.GROUP, 1, 32), SmallShared())


def test_local_dims_must_fit_the_renderer() -> None:
    class TwoDims(GPULikeRenderer):
        local_max = (8, 8)

    sink = apply_opts(matmul(16, 16, 16), [Opt(OptOps.LOCAL, 0, 8)], TwoDims())
    apply_opt(sink, Opt(OptOps.LOCAL, 1, 8), TwoDims())
    # 16 threads on one dimension of at most 8, with no free dimension to split into
    with pytest.raises(KernelOptError, match=r"local axes do not fit the renderer: lidx size 16 .* exceeds the limits"):
        apply_opt(sink, Opt(OptOps.LOCAL, 1, 16), TwoDims())


def test_apply_opts_rejects_non_sinks_and_non_opts() -> None:
    with pytest.raises(TypeError, match="apply_opts needs a kernel SINK"):
        apply_opts(UOp.const(elementwise_add(4).src[0].src[1].dtype, 0), [], CPU)
    with pytest.raises(TypeError, match="expected an Opt"):
        apply_opts(elementwise_add(4), [("UPCAST", 0, 2)], CPU)  # type: ignore[list-item]


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX, Ops.MUL])
def test_padded_reduce_uses_the_identity(op: Ops) -> None:
    # padding a reduce axis must not change the result even where the padded loads would read 0
    rng = np.random.default_rng(3)
    a = (rng.random(3 * 13, np.float32) + 0.5) * (-1 if op is Ops.MAX else 1)
    out = np.zeros(3, np.float32)
    run_program(Program(get_program(row_sum(3, 13, op), CPU, [Opt(OptOps.PADTO, 1, 16)])), [out, a])
    reference = {Ops.ADD: np.sum, Ops.MAX: np.max, Ops.MUL: np.prod}[op](a.reshape(3, 13), axis=1)
    np.testing.assert_allclose(out, reference, rtol=1e-5)


def test_padded_loop_masks_loads_and_stores() -> None:
    a, b = np.arange(10, dtype=np.float32), np.full(10, 0.5, np.float32)
    out = np.full(12, -1.0, np.float32)  # two guard elements past the end must stay untouched
    program = Program(get_program(elementwise_add(10), GPU, [Opt(OptOps.PADTO, 0, 16), Opt(OptOps.UPCAST, 0, 4)]))
    assert program.launch_dims()[0] == (4, 1, 1)
    run_program(program, [out[:10], a, b])
    np.testing.assert_array_equal(out, [*(a + b), -1, -1])
