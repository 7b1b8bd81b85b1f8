"""The TC opt, WMMA uops and their interpretation, checked against numpy matmuls.

Oracles: numpy's matmul (float32; half inputs are rounded to half first and multiplied in float32), the PTX ISA's
fragment formulas for mma.m16n8k16 written out independently, and a brute-force check of layout coverage.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from renderers_for_tests import TC_8X8X8_FLOAT, TC_M16N8K16_HALF_FLOAT, CPULikeRenderer, GPULikeRenderer
from sinks_for_tests import buffer, kernel, matmul

from kiln.codegen import (
    FragmentLayout,
    KernelOptError,
    Opt,
    OptOps,
    Program,
    TensorCore,
    WmmaArg,
    apply_opts,
    get_program,
    run_program,
)
from kiln.uops import AxisKind, DType, Ops, UOp, dtypes

GPU = GPULikeRenderer()
FLOAT_TC, HALF_TC = 0, 1


def half_matmul(m: int, n: int, k: int) -> UOp:
    """c[i, j] = sum_k float(a[i, k]) * float(b[k, j]) with half a, b and a float32 c; axes i=0, j=1, k=2."""
    c, a, b = buffer(0, m * n, dtypes.float32), buffer(1, m * k, dtypes.float16), buffer(2, k * n, dtypes.float16)
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisKind.REDUCE)
    product = a.index(i * k + r).load().cast(dtypes.float32) * b.index(r * n + j).load().cast(dtypes.float32)
    return kernel(c.index(i * n + j).store(product.reduce(r)).end(i, j))


def run_matmul(sink: UOp, opts: list[Opt], m: int, n: int, k: int, dtype: DType, seed: int = 0) -> np.ndarray:
    numpy_dtype = np.float16 if dtype == dtypes.float16 else np.float32
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(numpy_dtype)
    b = rng.standard_normal((k, n)).astype(numpy_dtype)
    out = np.zeros(m * n, np.float32)
    run_program(Program(get_program(sink, GPU, opts)), [out, a.ravel(), b.ravel()])
    expected = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(out.reshape(m, n), expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    return out


# ---- layouts -------------------------------------------------------------------------------------------------------


def test_m16n8k16_layout_matches_the_ptx_formulas() -> None:
    # the PTX ISA's fragment formulas, written per register instead of per bit
    a, b, c = TC_M16N8K16_HALF_FLOAT.layouts or ()
    for lane in range(32):
        group, thread_in_group = lane >> 2, lane % 4
        for i in range(8):
            row = group + 8 * (i in (2, 3, 6, 7))
            assert a.coordinate(lane, i) == (row, 2 * thread_in_group + (i & 1) + 8 * (i >= 4))
        for i in range(4):
            assert b.coordinate(lane, i) == (2 * thread_in_group + (i & 1) + 8 * (i >= 2), group)
            assert c.coordinate(lane, i) == (group + 8 * (i >= 2), 2 * thread_in_group + (i & 1))


def test_layouts_cover_their_tiles_once() -> None:
    for tc, shapes in ((TC_8X8X8_FLOAT, ((8, 8),) * 3), (TC_M16N8K16_HALF_FLOAT, ((16, 16), (16, 8), (16, 8)))):
        for layout, (rows, columns) in zip(tc.layouts or (), shapes):
            cells = [layout.coordinate(lane, e) for lane in range(layout.threads) for e in range(layout.elements)]
            assert sorted(cells) == [(r, col) for r in range(rows) for col in range(columns)]


def test_a_layout_that_misses_elements_is_rejected() -> None:
    overlapping = FragmentLayout(((0, 2), (0, 4), (1, 0), (2, 0), (4, 0)), ((0, 2),))  # register bit repeats lane bit 0
    with pytest.raises(ValueError, match="one-to-one"):
        TensorCore((8, 8, 8), 32, (2, 2, 2), dtypes.float32, dtypes.float32, layouts=(overlapping,) * 3)
    wrong_lanes = FragmentLayout(((1, 0),), ((0, 1),))
    with pytest.raises(ValueError, match="lanes"):
        TensorCore((8, 8, 8), 32, (2, 2, 2), dtypes.float32, dtypes.float32, layouts=(wrong_lanes,) * 3)


# ---- results ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "n", "k"), [(8, 8, 8), (16, 24, 32), (8, 40, 16), (32, 8, 8)])
def test_float32_tensor_core_matmul_equals_numpy(m: int, n: int, k: int) -> None:
    run_matmul(matmul(m, n, k), [Opt(OptOps.TC, 2, FLOAT_TC)], m, n, k, dtypes.float32)


@pytest.mark.parametrize(("m", "n", "k"), [(16, 8, 16), (32, 16, 48)])
def test_half_tensor_core_accumulates_in_float32(m: int, n: int, k: int) -> None:
    run_matmul(half_matmul(m, n, k), [Opt(OptOps.TC, 2, HALF_TC)], m, n, k, dtypes.float16)


def test_tc_program_uses_wmma_on_whole_warps() -> None:
    program = Program(get_program(matmul(16, 16, 16), GPU, [Opt(OptOps.TC, 2, FLOAT_TC)]))
    wmmas = [u for u in program.uops if u.op is Ops.WMMA]
    assert len(wmmas) == 1 and isinstance(wmmas[0].arg, WmmaArg)
    assert wmmas[0].arg.dims == (8, 8, 8) and wmmas[0].arg.threads == 32
    # the accumulator feeds the unit (no separate add), and the warp is the 32 threads of lidx0
    assert wmmas[0].src[2].op is not Ops.CONST and not any(
        u.op is Ops.ADD and u.dtype == dtypes.float32 for u in program.uops
    )
    assert program.local_size == (32, 1, 1) and program.global_size == (2, 2, 1)


def test_epilogue_and_operand_order() -> None:
    # out[i, j] = max(sum_k b[k, j] * a[i, k], 0) + bias[j]: operands swapped in the product, work after the reduce
    m, n, k = 16, 8, 24
    out, a, b, bias = buffer(0, m * n), buffer(1, m * k), buffer(2, k * n), buffer(3, n)
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisKind.REDUCE)
    total = (b.index(r * n + j).load() * a.index(i * k + r).load()).reduce(r)
    sink = kernel(out.index(i * n + j).store(total.maximum(0.0) + bias.index(j).load()).end(i, j))
    rng = np.random.default_rng(3)
    a_values, b_values = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    bias_values = rng.standard_normal(n).astype(np.float32)
    result = np.zeros(m * n, np.float32)
    run_program(
        Program(get_program(sink, GPU, [Opt(OptOps.TC, 2, FLOAT_TC)])), [result, a_values, b_values, bias_values]
    )
    expected = np.maximum(a_values @ b_values, 0) + bias_values
    np.testing.assert_allclose(result.reshape(m, n), expected, rtol=1e-5, atol=1e-5)


# ---- illegal opts ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sink", "opts", "message"),
    [
        (matmul(16, 16, 16), [Opt(OptOps.TC, 2, 2)], "tensor core index"),
        (matmul(16, 16, 16), [Opt(OptOps.TC, 2, (0, 0))], "tensor core index"),
        (matmul(16, 16, 16), [Opt(OptOps.TC, 0, FLOAT_TC)], "REDUCE axis 0"),
        (matmul(16, 16, 12), [Opt(OptOps.TC, 2, FLOAT_TC)], "not a multiple of K=8"),
        (matmul(12, 16, 16), [Opt(OptOps.TC, 2, FLOAT_TC)], "multiples of 8"),
        (matmul(16, 16, 16), [Opt(OptOps.TC, 2, HALF_TC)], "two float16 loads"),  # float32 kernel, half unit
        (half_matmul(16, 8, 16), [Opt(OptOps.TC, 2, FLOAT_TC)], "two float32 loads"),
        (matmul(16, 16, 16), [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.TC, 2, FLOAT_TC)], "first opt"),
        (matmul(16, 16, 16), [Opt(OptOps.TC, 2, FLOAT_TC), Opt(OptOps.UPCAST, 0, 2)], "UPCAST after TC"),
        (matmul(16, 16, 16), [Opt(OptOps.TC, 2, FLOAT_TC), Opt(OptOps.UNROLL, 2, 2)], "UNROLL after TC"),
        (matmul(16, 16, 16), [Opt(OptOps.TC, 2, FLOAT_TC), Opt(OptOps.NOLOCALS)], "NOLOCALS after LOCAL"),
    ],
)
def test_illegal_tc_opts_raise(sink: UOp, opts: list[Opt], message: str) -> None:
    with pytest.raises(KernelOptError, match=message):
        apply_opts(sink, opts, GPU)


def test_tc_needs_a_matmul_and_a_renderer_with_units() -> None:
    with pytest.raises(KernelOptError, match="has none"):
        apply_opts(matmul(16, 16, 16), [Opt(OptOps.TC, 2, 0)], CPULikeRenderer())
    rows = buffer(0, 16)
    i, j = UOp.range(16, 0), UOp.range(16, 1, AxisKind.REDUCE)
    row_max = kernel(rows.index(i).store(buffer(1, 256).index(i * 16 + j).load().reduce(j, op=Ops.MAX)).end(i))
    with pytest.raises(KernelOptError, match="sum over"):
        apply_opts(row_max, [Opt(OptOps.TC, 1, 0)], GPU)
    # a product where both sides read the same axes: no M / N split exists
    square = buffer(1, 256)
    dot = (square.index(i * 16 + j).load() * square.index(i * 16 + j).load()).reduce(j)
    with pytest.raises(KernelOptError, match="only one side"):
        apply_opts(kernel(rows.index(i).store(dot).end(i)), [Opt(OptOps.TC, 1, 0)], GPU)


# ---- fuzz: TC with the opts allowed after it -------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_tc_combined_with_other_opts(data: st.DataObject) -> None:
    half = data.draw(st.booleans(), label="half")
    tile_m, tile_n, tile_k = (16, 8, 16) if half else (8, 8, 8)
    m = tile_m * data.draw(st.integers(1, 4), label="m tiles")
    n = tile_n * data.draw(st.integers(1, 4), label="n tiles")
    k = tile_k * data.draw(st.integers(1, 3), label="k tiles")
    sink = half_matmul(m, n, k) if half else matmul(m, n, k)
    opts = [Opt(OptOps.TC, 2, HALF_TC if half else FLOAT_TC)]
    for _ in range(data.draw(st.integers(0, 3), label="extra opts")):
        op = data.draw(st.sampled_from([OptOps.LOCAL, OptOps.SWAP, OptOps.UPCAST, OptOps.GROUP]), label="op")
        axis = data.draw(st.integers(0, 3), label="axis")
        arg = data.draw(st.sampled_from([0, 1, 2, 3, 4]), label="arg")
        candidate = [*opts, Opt(op, axis, arg)]
        try:
            apply_opts(sink, candidate, GPU)
        except KernelOptError:
            continue
        assert op in (OptOps.LOCAL, OptOps.SWAP)  # the others are refused after TC
        opts = candidate
    run_matmul(sink, opts, m, n, k, dtypes.float16 if half else dtypes.float32, seed=m * n * k)


# ---- the interpreter's WMMA on hand-written fragments ----------------------------------------------------------------


def test_interpreter_wmma_follows_the_fragment_layouts() -> None:
    # lane t holds registers (2t, 2t+1) of a, b and c; lidx0 has 64 threads = two warps with different data
    tc = TC_8X8X8_FLOAT
    arg = tc.wmma_arg()
    i32, f32 = dtypes.int32, dtypes.float32
    size = 64 * 2
    out, a, b, c = (UOp(Ops.DEFINE_GLOBAL, f32.ptr(size), (), slot) for slot in range(4))
    lane = UOp(Ops.SPECIAL, i32, (UOp.const(i32, 64),), UOp.special(64, "lidx0").arg)
    base = lane * UOp.const(i32, 2)
    offsets = [base, base + UOp.const(i32, 1)]

    def fragment(pointer: UOp) -> UOp:
        return UOp.vectorize(*(UOp(Ops.LOAD, f32, (UOp(Ops.INDEX, pointer.dtype, (pointer, o)),)) for o in offsets))

    d = UOp(Ops.WMMA, f32.vec(2), (fragment(a), fragment(b), fragment(c)), arg)
    stores = [
        UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, o)), d.gep(e))) for e, o in enumerate(offsets)
    ]
    uops = list(UOp(Ops.SINK, src=tuple(stores)).toposort())[:-1]
    rng = np.random.default_rng(7)
    registers = [rng.standard_normal(size).astype(np.float32) for _ in range(3)]
    result = np.zeros(size, np.float32)
    run_program(uops, [result, *registers], local_size=(64, 1, 1), global_size=(1, 1, 1))
    # the oracle: scatter registers into tiles with the mma-style formulas (groupID = lane >> 2, tig = lane % 4)
    for warp in range(2):
        tiles = [np.zeros((8, 8), np.float32) for _ in range(3)]
        for t in range(32):
            group, tig = t >> 2, t % 4
            for e in range(2):
                register = 2 * (warp * 32 + t) + e
                tiles[0][group, 2 * tig + e] = registers[0][register]  # A[m][k]
                tiles[1][2 * tig + e, group] = registers[1][register]  # B[k][n]
                tiles[2][group, 2 * tig + e] = registers[2][register]  # C[m][n]
        expected = tiles[0] @ tiles[1] + tiles[2]
        for t in range(32):
            group, tig = t >> 2, t % 4
            for e in range(2):
                assert result[2 * (warp * 32 + t) + e] == pytest.approx(
                    expected[group, 2 * tig + e], rel=1e-5, abs=1e-6
                )


@pytest.mark.parametrize(
    "extra",
    [[], [Opt(OptOps.LOCAL, 2, 2)], [Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 0, 3)], [Opt(OptOps.SWAP, 0, 2)]],
)
def test_batched_matmul_keeps_warps_in_the_low_thread_bits(extra: list[Opt]) -> None:
    # the batch axis is read by both operands (neither M nor N); LOCAL axes made after TC (also of the batch axis,
    # which both operands read) must not split a warp
    batch, m, n, k = 6, 16, 32, 16
    out, a, b = buffer(0, batch * m * n), buffer(1, batch * m * k), buffer(2, batch * k * n)
    t, i, j, r = UOp.range(batch, 0), UOp.range(m, 1), UOp.range(n, 2), UOp.range(k, 3, AxisKind.REDUCE)
    total = (a.index(t * m * k + i * k + r).load() * b.index(t * k * n + r * n + j).load()).reduce(r)
    sink = kernel(out.index(t * m * n + i * n + j).store(total).end(t, i, j))
    rng = np.random.default_rng(11)
    a_values = rng.standard_normal((batch, m, k)).astype(np.float32)
    b_values = rng.standard_normal((batch, k, n)).astype(np.float32)
    program = Program(get_program(sink, GPU, [Opt(OptOps.TC, 3, FLOAT_TC), *extra]))
    assert program.local_size is not None and program.local_size[0] == 32
    result = np.zeros(batch * m * n, np.float32)
    run_program(program, [result, a_values.ravel(), b_values.ravel()])
    np.testing.assert_allclose(result.reshape(batch, m, n), a_values @ b_values, rtol=1e-5, atol=1e-5)


def test_estimates_count_the_tile_products() -> None:
    m, n, k = 16, 24, 32
    program = Program(get_program(matmul(m, n, k), GPU, [Opt(OptOps.TC, 2, FLOAT_TC)]))
    estimates = program.estimates
    assert estimates.flops == 2 * m * n * k  # every multiply-add of the matmul, counted once over all warps
    assert estimates.global_memory_bytes == 4 * (m * n + (m * k) * (n // 8) + (k * n) * (m // 8))
