"""A language model's prefill product x @ W.T (heuristic step 2r): a few dozen rows of x against a weight W far bigger
than L2, both contiguous along the reduce. The 4 x 4 dot-product tile puts the loop over W's rows outside (SWAP), so
W is read once and x stays in the cache; the tile's 16 x 16 accumulator lanes fold in two-register shuffles."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import VectorCPU
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, get_program, hand_coded_optimizations, run_program
from kiln.codegen.lowering.expander import _fold_tree
from kiln.codegen.opt import product_tiles
from kiln.uops import AxisKind, Ops, UOp, dtypes

UPCAST, UNROLL, SWAP, THREAD = OptOps.UPCAST, OptOps.UNROLL, OptOps.SWAP, OptOps.THREAD


def _prefill(m: int, n: int, k: int, weight_dtype: dtypes.DType = dtypes.float32) -> UOp:
    """c[i, j] = sum_r x[i, r] * w[j, r] (x @ W.T, W stored (n, k) row-major); axes i=0, j=1, r=2; (c, x, w)."""
    c, x, w = buffer(0, m * n), buffer(1, m * k), buffer(2, n * k, weight_dtype)
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisKind.REDUCE)
    weight = w.index(j * k + r).load()
    if weight_dtype != dtypes.float32:
        weight = weight.cast(dtypes.float32)
    product = x.index(i * k + r).load() * weight
    return kernel(c.index(i * n + j).store(product.reduce(r)).end(i, j))


@pytest.mark.parametrize(
    ("n", "k", "weight_dtype"),
    [
        (32000, 768, dtypes.float32),  # the 100M llama's output layer
        (2048, 768, dtypes.float32),  # its feed-forward up projection
        (768, 2048, dtypes.float32),  # and down projection
        (32000, 768, dtypes.float16),  # an F16 weight, widened inside the tile
    ],
)
def test_big_weight_goes_outside_the_prompt_rows(n: int, k: int, weight_dtype: dtypes.DType) -> None:
    opts = hand_coded_optimizations(_prefill(64, n, k, weight_dtype), VectorCPU())
    assert opts[:3] == (Opt(UPCAST, 1, 4), Opt(UPCAST, 0, 4), Opt(SWAP, 0, 1))
    assert opts[3] == Opt(UNROLL, 2, 16) and opts[4].op is THREAD


@pytest.mark.parametrize(
    ("m", "n", "k"),
    [
        (64, 256, 768),  # a weight of 768 KiB stays in L2: rows outside, as before
        (1024, 2048, 768),  # x of 3 MiB would not stay in L2 either: no order reads both once
    ],
)
def test_small_weight_or_big_input_keeps_the_rows_outside(m: int, n: int, k: int) -> None:
    opts = hand_coded_optimizations(_prefill(m, n, k), VectorCPU())
    assert opts[:2] == (Opt(UPCAST, 1, 4), Opt(UPCAST, 0, 4)) and SWAP not in {opt.op for opt in opts}


@pytest.mark.parametrize(("m", "n", "k"), [(8, 64, 48), (16, 64, 80)])
def test_swapped_dot_tile_computes_what_numpy_computes(m: int, n: int, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # sizes scaled down (the interpreter runs the kernel) with the threshold scaled along
    monkeypatch.setattr(product_tiles, "STREAM_SWAP_BYTES", n * k * 4 - 1)
    renderer = VectorCPU()
    sink = _prefill(m, n, k)
    opts = hand_coded_optimizations(sink, renderer)
    assert Opt(SWAP, 0, 1) in opts and Opt(UNROLL, 2, 16) in opts
    rng = np.random.default_rng(3)
    # integer-valued floats: every partial sum is exact, so any order of the fold must give numpy's result exactly
    x, w = rng.integers(-4, 4, (m, k)).astype(np.float32), rng.integers(-4, 4, (n, k)).astype(np.float32)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(m * n, np.nan, np.float32)
    run_program(program, [out, x.reshape(-1), w.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out.reshape(m, n), x @ w.T)


def _gep_levels(result: UOp) -> list[tuple[int, ...]]:
    """The lane lists of the GEPs that read the accumulator and each fold level's result, outermost level first."""
    levels: list[tuple[int, ...]] = []
    for node in result.toposort():
        if node.op is Ops.GEP and node.src[0].op in (Ops.LOAD, Ops.ADD):
            levels.append(tuple(node.arg))
    return levels


@pytest.mark.parametrize(("outputs", "parts"), [(16, 16), (8, 16), (16, 8), (4, 32)])
def test_output_major_fold_reads_two_registers_per_register(outputs: int, parts: int) -> None:
    # a 4 x 4 tile's accumulator: lane = output * 16 + unrolled part (each output's parts are one contiguous load)
    vector = buffer(1, outputs * parts).index(0).load(dtype=dtypes.float32.vec(outputs * parts))
    part_lanes = [tuple(o * parts + p for o in range(outputs)) for p in range(parts)]
    levels = _gep_levels(_fold_tree(vector, part_lanes, Ops.ADD))
    assert len(levels) >= 2
    for lanes in levels:
        for start in range(0, len(lanes), 16):
            registers = {lane // 16 for lane in lanes[start : start + 16]}
            assert len(registers) <= 2, f"a 16-lane register of {lanes} draws on registers {sorted(registers)}"


def _lanes(node: UOp) -> np.ndarray:
    """The lanes of a fold of constants: GEPs and ADDs evaluated with numpy."""
    if node.op is Ops.ADD:
        return _lanes(node.src[0]) + _lanes(node.src[1])
    if node.op is Ops.GEP:
        return _lanes(node.src[0])[list(node.arg)]
    return np.array(node.arg, np.float64)


@pytest.mark.parametrize(("outputs", "parts"), [(4, 8), (16, 16), (3, 5)])
def test_output_major_fold_adds_each_output_s_parts(outputs: int, parts: int) -> None:
    # lane values 2**lane: each output's sum is a distinct bit pattern, so a lane folded into the wrong output shows
    part_lanes = [tuple(o * parts + p for o in range(outputs)) for p in range(parts)]
    values = np.exp2(np.arange(outputs * parts, dtype=np.float64))
    vector = UOp.const(dtypes.float64.vec(outputs * parts), tuple(float(v) for v in values))
    folded = _lanes(_fold_tree(vector, part_lanes, Ops.ADD))
    np.testing.assert_array_equal(folded, values.reshape(outputs, parts).sum(axis=1))
