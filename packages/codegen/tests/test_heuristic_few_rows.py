"""Few-rows products (heuristic step 2r): an LLM decode step of R sequences multiplying its (R, K) activations by a
long (N, K) weight, stored as float32 or as the bytes of float16 values (an F16 GGUF matrix decoded in the kernel)."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import VectorCPU
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, get_program, hand_coded_optimizations, run_program
from kiln.uops import AxisKind, UOp, dtypes

UPCAST, UNROLL, THREAD = OptOps.UPCAST, OptOps.UNROLL, OptOps.THREAD


def _weight_value(weight: UOp, element: UOp, half_bytes: bool) -> UOp:
    if not half_bytes:
        return weight.index(element).load()
    # element i is the little-endian float16 in bytes 2i and 2i + 1, decoded as the tensor layer does
    low = weight.index(element * 2 + 0).load().cast(dtypes.uint16)
    high = weight.index(element * 2 + 1).load().cast(dtypes.uint16)
    return (low | (high << 8)).bitcast(dtypes.float16).cast(dtypes.float32)


def _few_rows_product(rows: int, columns: int, depth: int, half_bytes: bool) -> UOp:
    # out[r, n] = sum_k x[r, k] * w[n, k]; axes r, n (outputs) then k (reduce); one row drops the r axis, as the
    # scheduler drops a size-1 axis
    out, x = buffer(0, rows * columns), buffer(1, rows * depth)
    weight = buffer(2, 2 * columns * depth, dtypes.uint8) if half_bytes else buffer(2, columns * depth)
    if rows == 1:
        n, k = UOp.range(columns, 0), UOp.range(depth, 1, AxisKind.REDUCE)
        product = x.index(k).load() * _weight_value(weight, n * depth + k, half_bytes)
        return kernel(out.index(n).store(product.reduce(k)).end(n))
    r, n, k = UOp.range(rows, 0), UOp.range(columns, 1), UOp.range(depth, 2, AxisKind.REDUCE)
    product = x.index(r * depth + k).load() * _weight_value(weight, n * depth + k, half_bytes)
    return kernel(out.index(r * columns + n).store(product.reduce(k)).end(r, n))


@pytest.mark.parametrize(
    ("rows", "half_bytes", "tile"),
    [
        # one row: float32 keeps 8 weight rows by a 16-lane reduce; the float16 bytes keep step 3v's 64-lane unroll
        (1, False, (Opt(UPCAST, 0, 8), Opt(UNROLL, 1, 16))),
        (1, True, (Opt(UNROLL, 1, 64),)),
        # few rows: all of them upcast (each loaded vector of the weight serves every row), the reduce by 16 lanes;
        # before, float32 took a 4 x 4 tile (the weight read R / 4 times) and the float16 bytes step 2s's gathered
        # 8 x 16 tile with the reduce rolled (~1.2 GB/s in the 100M llama's 8-row decode)
        (2, False, (Opt(UPCAST, 0, 2), Opt(UNROLL, 2, 16))),
        (2, True, (Opt(UPCAST, 0, 2), Opt(UNROLL, 2, 16))),
        (8, False, (Opt(UPCAST, 0, 8), Opt(UNROLL, 2, 16))),
        (8, True, (Opt(UPCAST, 0, 8), Opt(UNROLL, 2, 16))),
        (16, False, (Opt(UPCAST, 0, 16), Opt(UNROLL, 2, 16))),
        (16, True, (Opt(UPCAST, 0, 16), Opt(UNROLL, 2, 16))),
    ],
)
def test_decode_output_layer_reads_the_weight_once(rows: int, half_bytes: bool, tile: tuple[Opt, ...]) -> None:
    # the 100M llama's output layer: (R, 768) @ (32000, 768).T
    opts = hand_coded_optimizations(_few_rows_product(rows, 32000, 768, half_bytes), VectorCPU())
    assert opts[: len(tile)] == tile and all(opt.op is THREAD for opt in opts[len(tile) :])


def test_many_rows_keep_the_four_by_four_tile() -> None:
    # 64 rows against 2048 columns is no few-rows product (32x, under FEW_ROWS_RATIO; and over FEW_ROWS rows)
    opts = hand_coded_optimizations(_few_rows_product(64, 2048, 256, False), VectorCPU())
    assert opts[:3] == (Opt(UPCAST, 1, 4), Opt(UPCAST, 0, 4), Opt(UNROLL, 2, 16))


@pytest.mark.parametrize(("rows", "half_bytes"), [(1, True), (2, True), (8, False), (8, True), (16, True)])
def test_few_rows_product_computes_what_numpy_computes(rows: int, half_bytes: bool) -> None:
    columns, depth = 2048, 96
    renderer = VectorCPU()
    sink = _few_rows_product(rows, columns, depth, half_bytes)
    opts = hand_coded_optimizations(sink, renderer)
    rng = np.random.default_rng(rows)
    x = rng.integers(-4, 4, (rows, depth)).astype(np.float32)
    weight = rng.integers(-8, 8, (columns, depth)).astype(np.float16) / np.float16(4)
    stored = weight.view(np.uint8).reshape(-1) if half_bytes else weight.astype(np.float32).reshape(-1)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(rows * columns, np.nan, np.float32)
    run_program(program, [out, x.reshape(-1), stored], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out.reshape(rows, columns), x @ weight.astype(np.float32).T)
