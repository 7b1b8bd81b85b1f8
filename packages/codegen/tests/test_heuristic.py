"""hand_coded_optimizations: the documented recipe, checked step by step on a CPU-like and a GPU-like renderer."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer, VectorCPU
from sinks_for_tests import buffer, conv_weight_gradient, elementwise_add, kernel, matmul, row_sum

from kiln.codegen import (
    Opt,
    OptOps,
    Program,
    Renderer,
    apply_opts,
    get_program,
    hand_coded_optimizations,
    run_program,
)
from kiln.codegen.opt import heuristic
from kiln.codegen.opt.kernel_axes import axes_of, constant_size
from kiln.uops import AxisKind, Context, Ops, UOp, dtypes

CPU, GPU, SCALAR = CPULikeRenderer(), GPULikeRenderer(), ScalarRenderer()
UPCAST, UNROLL, LOCAL, THREAD, GROUPTOP = OptOps.UPCAST, OptOps.UNROLL, OptOps.LOCAL, OptOps.THREAD, OptOps.GROUPTOP


def test_matmul_on_cpu_blocks_registers_and_spreads_over_cores() -> None:
    # c[i, j] = sum_k a[i, k] b[k, j]: b does not depend on i, a not on j -> on a CPU upcast j then i by 8 (8x8
    # register block, 8 divides 64), k stays rolled; 64*64*64 iterations >= 2**14 -> THREAD the outer loop
    # (64/8 = 8 left) by 8 cores
    opts = hand_coded_optimizations(matmul(64, 64, 64), CPU)
    assert opts == (Opt(UPCAST, 1, 8), Opt(UPCAST, 0, 8), Opt(THREAD, 0, 8))


def test_matmul_on_gpu_blocks_registers_and_uses_locals() -> None:
    # without tensor cores (step 0 off): a 4x4 register block, k unrolled by 4; then locals innermost first within
    # 128 threads: j (16 left) by 16, i (16 left) by 8
    with Context(TENSOR_CORES=False):
        opts = hand_coded_optimizations(matmul(64, 64, 64), GPU)
    assert opts == (Opt(UPCAST, 1, 4), Opt(UPCAST, 0, 4), Opt(UNROLL, 2, 4), Opt(LOCAL, 1, 16), Opt(LOCAL, 0, 8))


def test_matmul_on_gpu_takes_the_tensor_core_its_dtypes_fit() -> None:
    # step 0: the GPU-like renderer's float32 8x8x8 unit fits a float32 matmul; nothing else is applied; the
    # program's values equal numpy's
    sink = matmul(64, 64, 64)
    assert hand_coded_optimizations(sink, GPU) == (Opt(OptOps.TC, 2, -1),)
    program = Program(get_program(sink, GPU))
    assert [u.op for u in program.uops].count(Ops.WMMA) == 1
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    out = np.zeros(64 * 64, np.float32)
    run_program(program, [out, a.ravel(), b.ravel()], {}, *program.launch_dims({}))
    np.testing.assert_allclose(out.reshape(64, 64), a @ b, rtol=1e-4, atol=1e-4)


def test_small_matmul_gets_no_threads() -> None:
    # 16*16*16 = 4096 iterations is below the THREAD threshold; the 8x8 CPU block alone
    assert hand_coded_optimizations(matmul(16, 16, 16), CPU) == (Opt(UPCAST, 1, 8), Opt(UPCAST, 0, 8))


def test_matmul_on_cpu_blocks_by_4_where_8_does_not_divide() -> None:
    # j = 12: 12 % 8 != 0 -> 4; i = 16 -> 8; k stays rolled; 16*12*16 = 3072 iterations: no THREAD
    assert hand_coded_optimizations(matmul(16, 12, 16), CPU) == (Opt(UPCAST, 1, 4), Opt(UPCAST, 0, 8))


def test_matmul_with_odd_sizes_skips_what_does_not_divide() -> None:
    # n = 6 is not a multiple of 4: only i is blocked; k = 7 cannot be unrolled by 4, but is short: fully unrolled
    assert hand_coded_optimizations(matmul(8, 6, 7), SCALAR) == (Opt(UPCAST, 0, 4), Opt(UNROLL, 2, 0))


@pytest.mark.parametrize(("size", "expected"), [(4096, ()), (65536, (Opt(THREAD, 0, 8),))])
def test_elementwise_on_cpu_is_left_to_the_loop_vectorizer(size: int, expected: tuple[Opt, ...]) -> None:
    # no reduce, scalar ALU: no upcast (step 3 skipped); 65536 >= 2**14 iterations -> THREAD by 8 (thread_max)
    assert hand_coded_optimizations(elementwise_add(size), CPU) == expected


def test_elementwise_on_cpu_with_vector_alu_uses_the_widest_vector() -> None:
    vector_cpu = CPULikeRenderer()
    vector_cpu.vector_alu = True
    assert hand_coded_optimizations(elementwise_add(4096), vector_cpu) == (Opt(UPCAST, 0, 8),)


def test_elementwise_on_gpu_uses_vectors_then_locals() -> None:
    # float4 (GPU widths 2/4), then 1024/4 = 256 left -> LOCAL 32
    assert hand_coded_optimizations(elementwise_add(1024), GPU) == (Opt(UPCAST, 0, 4), Opt(LOCAL, 0, 32))


def test_long_reduce_with_small_output_groups_on_gpu_only() -> None:
    assert hand_coded_optimizations(row_sum(4, 4096), GPU) == (Opt(GROUPTOP, 1, 256),)
    # a CPU has no shared memory: the 4 contiguous outputs become one vector, the reduce is unrolled by 4
    assert hand_coded_optimizations(row_sum(4, 4096), CPU) == (Opt(UPCAST, 0, 4), Opt(UNROLL, 1, 4))


def test_short_reduce_is_unrolled_fully() -> None:
    assert hand_coded_optimizations(row_sum(16, 8), SCALAR) == (Opt(UNROLL, 1, 0),)


def test_noopt_and_given_opts_override_the_heuristic() -> None:
    with Context(NOOPT=True):
        assert Program(get_program(matmul(16, 16, 16), CPU)).applied_opts == ()
    given = (Opt(UPCAST, 0, 2),)
    assert Program(get_program(matmul(16, 16, 16), CPU, given)).applied_opts == given


@pytest.mark.parametrize("renderer", [CPU, GPU], ids=["cpu", "gpu"])
def test_heuristic_programs_compute_the_matmul(renderer: Renderer) -> None:
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((64, 64), np.float32), rng.standard_normal((64, 64), np.float32)
    out = np.zeros(64 * 64, np.float32)
    program = Program(get_program(matmul(64, 64, 64), renderer))
    assert program.applied_opts == hand_coded_optimizations(matmul(64, 64, 64), renderer)
    run_program(program, [out, a.ravel(), b.ravel()])
    np.testing.assert_allclose(out.reshape(64, 64), a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_on_vector_cpu_tiles_rows_then_32_contiguous_columns() -> None:
    # rows (i: only a walks it) by 8 first, then columns (j: b is contiguous) by 32: a proper split gets the larger
    # axis number, so the columns are the inner lanes (b's row is one vector); k stays rolled; 64/8 rows -> THREAD 8
    opts = hand_coded_optimizations(matmul(64, 64, 64), VectorCPU())
    assert opts == (Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 32), Opt(THREAD, 0, 8))


def test_matmul_on_vector_cpu_never_puts_rows_inside_the_columns() -> None:
    # 32 columns upcast whole keep axis 1 (below the rows' new axis 3): the rows would be the inner lanes, so the
    # two upcast axes swap numbers and the columns become the inner lanes (b's row is one vector load)
    opts = hand_coded_optimizations(matmul(64, 32, 64), VectorCPU())
    assert opts[:3] == (Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 32), Opt(OptOps.SWAP, 1, 3))
    sink = apply_opts(matmul(64, 32, 64), list(opts), VectorCPU())
    lanes = sorted(axes_of(sink, AxisKind.UPCAST), key=lambda r: r.arg.axis)
    assert [constant_size(r) for r in lanes] == [8, 32]  # rows outer, columns inner


@pytest.mark.parametrize("columns", [16, 32])
def test_narrow_right_operand_gets_a_whole_columns_tile(columns: int) -> None:
    # (m, k) @ (k, 16 or 32): the columns upcast whole and swapped inside, at most 8 rows (16 x 16 measured 1.5x the
    # time of 8 x 16 on (1024, 1024) @ (1024, 16)); the result matches numpy
    renderer = VectorCPU()
    opts = hand_coded_optimizations(matmul(64, columns, 64), renderer)
    assert opts[:3] == (Opt(UPCAST, 0, 8), Opt(UPCAST, 1, columns), Opt(OptOps.SWAP, 1, 3))
    rng = np.random.default_rng(9)
    a, b = rng.integers(-4, 4, (64, 64)).astype(np.float32), rng.integers(-4, 4, (64, columns)).astype(np.float32)
    program = Program(get_program(matmul(64, columns, 64), renderer, list(opts)))
    out = np.zeros(64 * columns, np.float32)
    run_program(program, [out, a.reshape(-1), b.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out.reshape(64, columns), a @ b)


def test_matmul_on_vector_cpu_puts_the_columns_outside_when_the_contiguous_operand_is_big() -> None:
    # b is k x n = 1024 x 512 float32 (2 MiB >= STREAM_SWAP_BYTES): each 32-column panel of b should stay in cache
    # while a streams, so the columns loop (axis 1) goes outside the rows loop (axis 0); THREAD then splits columns
    opts = hand_coded_optimizations(matmul(256, 512, 1024), VectorCPU())
    assert opts == (Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 32), Opt(OptOps.SWAP, 0, 1), Opt(THREAD, 0, 8))
    # a smaller b (1 MiB) stays where it was
    assert OptOps.SWAP not in {opt.op for opt in hand_coded_optimizations(matmul(256, 512, 512), VectorCPU())}
    # 16-bit operands (widened after each load) measured slower swapped: a 4 MiB float16 b keeps the rows outside
    wide = hand_coded_optimizations(matmul(256, 1024, 2048, dtypes.float16), VectorCPU())
    assert OptOps.SWAP not in {opt.op for opt in wide}
    assert OptOps.SWAP in {opt.op for opt in hand_coded_optimizations(matmul(256, 1024, 2048), VectorCPU())}


def test_swapped_matmul_tile_computes_what_numpy_computes() -> None:
    renderer = VectorCPU()
    rng = np.random.default_rng(6)
    a, b = (rng.integers(-4, 4, (64, 64)).astype(np.float32) for _ in range(2))
    opts = [Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 32), Opt(OptOps.SWAP, 0, 1), Opt(THREAD, 0, 2)]
    program = Program(get_program(matmul(64, 64, 64), renderer, opts))
    out = np.zeros(64 * 64, np.float32)
    run_program(program, [out, a.reshape(-1), b.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out.reshape(64, 64), a @ b)


def _row_exp_sum(rows: int, columns: int) -> UOp:
    out, a = buffer(0, rows), buffer(1, rows * columns)
    i, j = UOp.range(rows, 0), UOp.range(columns, 1, AxisKind.REDUCE)
    return kernel(out.index(i).store(a.index(i * columns + j).load().alu(Ops.EXP2).reduce(j, op=Ops.ADD)).end(i))


def test_row_exp_sum_on_vector_cpu_unrolls_the_contiguous_reduce_by_up_to_four_vectors() -> None:
    # the exp-sum of a softmax: the reduce axis is unrolled by up to 4 widest vectors (64 exps, 4 independent
    # accumulator chains) when that divides it and leaves a loop of at least 4 steps, else by the largest such
    # multiple of the width (192: 3 vectors, 128: 2), else the width (96 and 80: too short for more than one)
    assert hand_coded_optimizations(_row_exp_sum(64, 1024), VectorCPU()) == (Opt(UNROLL, 1, 64), Opt(THREAD, 0, 8))
    assert hand_coded_optimizations(_row_exp_sum(64, 192), VectorCPU())[0] == Opt(UNROLL, 1, 48)
    assert hand_coded_optimizations(_row_exp_sum(64, 128), VectorCPU())[0] == Opt(UNROLL, 1, 32)
    assert hand_coded_optimizations(_row_exp_sum(64, 96), VectorCPU()) == (Opt(UNROLL, 1, 16),)
    assert hand_coded_optimizations(_row_exp_sum(64, 80), VectorCPU()) == (Opt(UNROLL, 1, 16),)


def test_plain_row_sum_on_vector_cpu_unrolls_the_contiguous_reduce_by_vectors() -> None:
    # 64 lanes of the row (contiguous: four vector loads) accumulate on their own and are added up after the loop
    # (16 rows in lanes would load 16 scalars from 16 rows per step: measured 2x slower on the 16M sum)
    assert hand_coded_optimizations(row_sum(64, 1024), VectorCPU()) == (Opt(UNROLL, 1, 64), Opt(THREAD, 0, 8))


@pytest.mark.parametrize("sink_name", ["matmul", "row_sum"])
def test_vector_cpu_opts_compute_what_numpy_computes(sink_name: str) -> None:
    renderer = VectorCPU()
    rng = np.random.default_rng(5)
    if sink_name == "matmul":
        sink = matmul(64, 64, 64)
        a, b = (rng.integers(-4, 4, (64, 64)).astype(np.float32) for _ in range(2))
        inputs, expected = [a.reshape(-1), b.reshape(-1)], (a @ b).reshape(-1)
    else:
        sink = row_sum(64, 1024)
        x = rng.integers(-4, 4, (64, 1024)).astype(np.float32)
        inputs, expected = [x.reshape(-1)], x.sum(axis=1)
    program = Program(get_program(sink, renderer, list(hand_coded_optimizations(sink, renderer))))
    out = np.zeros(expected.size, np.float32)
    run_program(program, [out, *inputs], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    ("m", "n", "k", "column_padding"),
    # 60 -> 64 and 120 -> 128 waste at most 1/8; no column tile divides 11, 13, 17 or 26 at all (scalar code): they
    # are padded up to 2x (26 -> 32 within 1/4); 40 has an 8-column tile and 3 -> 8 would more than double: left alone
    [
        *((60, 60, 16, 32), (36, 120, 8, 32), (20, 17, 5, 16), (16, 11, 9, 16), (8, 13, 7, 16), (24, 26, 9, 32)),
        *((20, 40, 5, None), (20, 3, 5, None)),
    ],
)
def test_vector_cpu_pads_untileable_matmul_sizes_and_computes_what_numpy_computes(
    m: int, n: int, k: int, column_padding: int | None
) -> None:
    # columns/rows no tile divides are padded up (PADTO, see the heuristic's docstring); padding lanes store nothing
    renderer = VectorCPU()
    sink = matmul(m, n, k)
    opts = hand_coded_optimizations(sink, renderer)
    assert next((opt.arg for opt in opts if opt.op is OptOps.PADTO and opt.axis == 1), None) == column_padding
    rng = np.random.default_rng(6)
    a = rng.integers(-4, 4, (m, k)).astype(np.float32)
    b = rng.integers(-4, 4, (k, n)).astype(np.float32)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(m * n, np.nan, np.float32)
    run_program(program, [out, a.reshape(-1), b.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out, (a @ b).reshape(-1))


def _transposed_product(m: int, n: int, k: int) -> UOp:
    # c[i, j] = sum_r a[i, r] * b[j, r]: both operands contiguous along the reduce, neither along an output axis
    c, a, b = buffer(0, m * n), buffer(1, m * k), buffer(2, n * k)
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisKind.REDUCE)
    product = a.index(i * k + r).load() * b.index(j * k + r).load()
    return kernel(c.index(i * n + j).store(product.reduce(r)).end(i, j))


@pytest.mark.parametrize(
    ("m", "n", "k", "expected"),
    [
        (6, 5, 64, (Opt(UNROLL, 2, 16),)),
        (6, 5, 11, (Opt(OptOps.PADTO, 2, 16), Opt(UNROLL, 2, 16))),
        # output lanes first (independent accumulator chains): a 4 x 4 tile when a walks one output axis and b the
        # other, every loaded vector serving 4 outputs; 8 rows when only one axis qualifies (b's 5 rows do not)
        (8, 12, 64, (Opt(UPCAST, 1, 4), Opt(UPCAST, 0, 4), Opt(UNROLL, 2, 16))),
        (16, 5, 32, (Opt(UPCAST, 0, 8), Opt(UNROLL, 2, 16))),
    ],
)
def test_vector_cpu_unrolls_the_contiguous_reduce_of_an_untileable_product(
    m: int, n: int, k: int, expected: tuple[Opt, ...]
) -> None:
    # no columns axis (b walks j by k, not 1): step 2r unrolls the reduce by 16 (11 padded to 16 first); the deferred
    # fold keeps the accumulator lanes; integer-valued floats make the reassociated sum exact
    renderer = VectorCPU()
    sink = _transposed_product(m, n, k)
    opts = hand_coded_optimizations(sink, renderer)
    assert opts[: len(expected)] == expected and all(opt.op is THREAD for opt in opts[len(expected) :])
    rng = np.random.default_rng(7)
    a, b = rng.integers(-4, 4, (m, k)).astype(np.float32), rng.integers(-4, 4, (n, k)).astype(np.float32)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(m * n, np.nan, np.float32)
    run_program(program, [out, a.reshape(-1), b.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out, (a @ b.T).reshape(-1))


def _gradient_like(channels: int, width: int, taps: int, k: int) -> UOp:
    # c[i, j, t] = sum_r g[r, j] * w[r, i, t] (a convolution's input gradient): the innermost axis t (3 taps) is a
    # columns candidate of w that no tile fits; j (width) is the columns candidate of g, with i as rows
    c = buffer(0, channels * width * taps)
    g, w = buffer(1, k * width), buffer(2, k * channels * taps)
    i, j, t = UOp.range(channels, 0), UOp.range(width, 1), UOp.range(taps, 2)
    r = UOp.range(k, 3, AxisKind.REDUCE)
    product = g.index(r * width + j).load() * w.index(r * channels * taps + i * taps + t).load()
    return kernel(c.index((i * width + j) * taps + t).store(product.reduce(r)).end(i, j, t))


def test_vector_cpu_tries_every_columns_and_rows_candidate() -> None:
    # t (3 wide) cannot be tiled; j = 11 is padded to 16 and tiled with the 8 channels as rows
    renderer = VectorCPU()
    sink = _gradient_like(8, 11, 3, 16)
    opts = hand_coded_optimizations(sink, renderer)
    assert opts[:3] == (Opt(OptOps.PADTO, 1, 16), Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 16))
    rng = np.random.default_rng(8)
    g, w = rng.integers(-4, 4, (16, 11)).astype(np.float32), rng.integers(-4, 4, (16, 8, 3)).astype(np.float32)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(8 * 11 * 3, np.nan, np.float32)
    run_program(program, [out, g.reshape(-1), w.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out, np.einsum("rj,rit->ijt", g, w).reshape(-1))


def test_short_reduce_under_output_lanes_on_vector_cpu_is_unrolled_fully() -> None:
    # no vector width divides 5: 16 output lanes, then the 5-long reduce has no loop left
    renderer = VectorCPU()
    sink = row_sum(64, 5)
    opts = hand_coded_optimizations(sink, renderer)
    assert opts == (Opt(UPCAST, 0, 16), Opt(UNROLL, 1, 0))
    x = np.random.default_rng(9).integers(-4, 4, (64, 5)).astype(np.float32)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(64, np.nan, np.float32)
    run_program(program, [out, x.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out, x.sum(axis=1))


class _VectorCPU64(VectorCPU):
    """An AVX2-like vector CPU: register tiles of at most 64 accumulator lanes."""

    register_tile_lanes = 64


def test_matmul_tile_fits_the_renderers_register_tile_lanes() -> None:
    # 8 x 32 (256 lanes) does not fit in 64: the first tile that does is 4 x 16
    renderer = _VectorCPU64()
    sink = matmul(64, 64, 64)
    opts = hand_coded_optimizations(sink, renderer)
    assert opts == (Opt(UPCAST, 0, 4), Opt(UPCAST, 1, 16), Opt(THREAD, 0, 8))
    rng = np.random.default_rng(10)
    a, b = (rng.integers(-4, 4, (64, 64)).astype(np.float32) for _ in range(2))
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(64 * 64, np.nan, np.float32)
    run_program(program, [out, a.reshape(-1), b.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out, (a @ b).reshape(-1))


def test_vector_cpu_reduce_unroll_needs_8_lanes_and_an_undivided_index() -> None:
    # 26 = 2 x 13: no 8+ lane vector divides it, the rows keep their 16 output lanes
    assert hand_coded_optimizations(row_sum(64, 26), VectorCPU()) == (Opt(UPCAST, 0, 16),)
    # the reduce index of a flattened (16, 5, 5) view divides the axis: not unrolled (output lanes as for 26)
    out, a = buffer(0, 64), buffer(1, 64 * 400)
    i, k = UOp.range(64, 0), UOp.range(400, 1, AxisKind.REDUCE)
    flattened = i * 400 + (k // 25) * 25 + (k // 5 % 5) * 5 + k % 5
    sink = kernel(out.index(i).store(a.index(flattened).load().reduce(k)).end(i))
    assert all(opt.op is not UNROLL for opt in hand_coded_optimizations(sink, VectorCPU()))


def _padded_rows(rows: int, width: int, compute: bool) -> UOp:
    """out[i, j] = a[i, j - 1] for 1 <= j <= width - 2, else 0 (a row padded by 1 on each side); `compute`: its exp2."""
    out, a = buffer(0, rows * width), buffer(1, rows * (width - 2))
    i, j = UOp.range(rows, 0), UOp.range(width, 1)
    valid = (j >= 1) & (j < width - 1)
    value = valid.where(a.index(i * (width - 2) + j - 1, valid).load(), 0.0)
    if compute:
        value = value.alu(Ops.EXP2)
    return kernel(out.index(i * width + j).store(value).end(i, j))


def test_padded_copy_on_vector_cpu_keeps_its_rolled_loop_but_computed_values_get_2_lanes() -> None:
    # 34 columns: only 2 divides them; a padded copy stays a rolled loop (LLVM's vectorizer masks the loads), an
    # exp2 of the padded values still gets its 2 lanes; both compute numpy's values
    renderer = VectorCPU()
    renderer.vector_widths = (2, 4, 8, 16)  # the LLVM renderer's
    copy_opts = hand_coded_optimizations(_padded_rows(64, 34, False), renderer)
    exp_opts = hand_coded_optimizations(_padded_rows(64, 34, True), renderer)
    assert not any(o.op is UPCAST for o in copy_opts)
    assert Opt(UPCAST, 1, 2) in exp_opts
    x = np.random.default_rng(2).integers(-3, 4, (64, 32)).astype(np.float32)
    for compute, opts in ((False, copy_opts), (True, exp_opts)):
        program = Program(get_program(_padded_rows(64, 34, compute), renderer, list(opts)))
        out = np.zeros(64 * 34, np.float32)
        run_program(program, [out, x.reshape(-1)], {}, *program.launch_dims({}))
        padded = np.pad(x, ((0, 0), (1, 1)))
        np.testing.assert_array_equal(out.reshape(64, 34), np.exp2(padded) if compute else padded)


def test_vector_cpu_blocks_the_batch_of_a_weight_gradient_whose_operands_outgrow_the_cache() -> None:
    # step 7: an 18 KiB output, 6.5 MiB of operands each re-read by the output loops the other walks: blocks of 8
    # of the 32 images (1.6 MiB of operands each); not when the operands fit (4 images), nor for a big output
    opts = hand_coded_optimizations(conv_weight_gradient(32, 32, 16, 32), VectorCPU())
    assert opts[-1] == Opt(OptOps.BLOCK, 4, 8)
    assert all(
        opt.op is not OptOps.BLOCK for opt in hand_coded_optimizations(conv_weight_gradient(4, 32, 16, 32), VectorCPU())
    )
    assert all(opt.op is not OptOps.BLOCK for opt in hand_coded_optimizations(matmul(2048, 2048, 2048), VectorCPU()))
    assert all(
        opt.op is not OptOps.BLOCK for opt in hand_coded_optimizations(conv_weight_gradient(32, 32, 16, 32), CPU)
    )


def test_blocked_weight_gradient_computes_what_numpy_computes(monkeypatch: pytest.MonkeyPatch) -> None:
    # the thresholds scaled down so a kernel the interpreter runs quickly is blocked: 4 blocks of 4 images (10 KiB)
    monkeypatch.setattr(heuristic, "BLOCK_REUSED_BYTES", 1024)
    monkeypatch.setattr(heuristic, "BLOCK_PANEL_BYTES", 11000)
    batch, outputs, inputs, size = 16, 4, 4, 8
    renderer = VectorCPU()
    sink = conv_weight_gradient(batch, outputs, inputs, size)
    opts = hand_coded_optimizations(sink, renderer)
    assert opts[-1] == Opt(OptOps.BLOCK, 4, 4)
    rng = np.random.default_rng(9)
    g = rng.integers(-4, 4, (batch, outputs, size, size)).astype(np.float32)
    p = np.pad(rng.integers(-4, 4, (batch, inputs, size, size)).astype(np.float32), ((0, 0), (0, 0), (1, 1), (1, 1)))
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(outputs * inputs * 9, np.nan, np.float32)
    run_program(program, [out, g.reshape(-1), p.reshape(-1)], {}, *program.launch_dims({}))
    windows = np.lib.stride_tricks.sliding_window_view(p, (size, size), axis=(2, 3))  # n, c, u, v, y, x
    np.testing.assert_array_equal(out, np.einsum("noyx,ncuvyx->ocuv", g, windows).reshape(-1))


def _vector_matrix(n: int, k: int) -> UOp:
    # c[j] = sum_r a[r] * b[r, j]: one row times a matrix contiguous along the output (x @ W for a single x)
    c, a, b = buffer(0, n), buffer(1, k), buffer(2, k * n)
    j, r = UOp.range(n, 0), UOp.range(k, 1, AxisKind.REDUCE)
    return kernel(c.index(j).store((a.index(r).load() * b.index(r * n + j).load()).reduce(r)).end(j))


@pytest.mark.parametrize(
    ("renderer", "n", "k", "expected"),
    [
        (VectorCPU(), 2048, 64, (Opt(UPCAST, 0, 64),)),
        (VectorCPU(), 48, 32, (Opt(UPCAST, 0, 16),)),
        (VectorCPU(), 1000, 16, (Opt(OptOps.PADTO, 0, 32), Opt(UPCAST, 0, 64))),
        (_VectorCPU64(), 2048, 64, (Opt(UPCAST, 0, 64),)),
        (_VectorCPU64(), 24, 8, (Opt(UPCAST, 0, 8),)),
    ],
)
def test_vector_times_matrix_on_vector_cpu_gets_a_one_row_columns_tile(
    renderer: Renderer, n: int, k: int, expected: tuple[Opt, ...]
) -> None:
    # no output axis only the vector walks (no rows): the tile is one row of columns lanes, the widest of
    # VECTOR_MATRIX_LANES dividing the (padded) columns, and the reduce stays rolled (it used to be unrolled along
    # the vector, reading the matrix a column at a time: (1, 1024) @ (1024, 2048) 3.5 ms -> 0.17 ms of kernel time)
    sink = _vector_matrix(n, k)
    opts = hand_coded_optimizations(sink, renderer)
    assert opts[: len(expected)] == expected and all(opt.op is THREAD for opt in opts[len(expected) :])
    rng = np.random.default_rng(n)
    a, b = rng.integers(-4, 4, k).astype(np.float32), rng.integers(-4, 4, (k, n)).astype(np.float32)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(n, np.nan, np.float32)
    run_program(program, [out, a, b.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out, a @ b)
