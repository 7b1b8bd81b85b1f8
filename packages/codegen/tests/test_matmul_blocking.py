"""K panels of a matmul whose broadcast operand is transposed (heuristic step 2v, `_reduce_panels`): A.T @ B reads
A[k, i], a cache line further at each reduce step; the heuristic blocks the reduce (BLOCK) instead of putting the
columns loop outside, and the blocked tile computes what numpy computes."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import VectorCPU
from sinks_for_tests import buffer, kernel, matmul

from kiln.codegen import Opt, OptOps, Program, get_program, hand_coded_optimizations, run_program
from kiln.codegen.opt import product_tiles
from kiln.uops import AxisKind, UOp, dtypes

UPCAST, SWAP, BLOCK, THREAD = OptOps.UPCAST, OptOps.SWAP, OptOps.BLOCK, OptOps.THREAD


def _left_transposed(m: int, n: int, k: int) -> UOp:
    """c[i, j] = sum_r a[r, i] * b[r, j]: A.T @ B with a stored (k, m) row-major; axes i=0, j=1, r=2; (c, a, b)."""
    c, a, b = buffer(0, m * n), buffer(1, k * m), buffer(2, k * n)
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisKind.REDUCE)
    product = a.index(r * m + i).load() * b.index(r * n + j).load()
    return kernel(c.index(i * n + j).store(product.reduce(r)).end(i, j))


@pytest.mark.parametrize(
    ("m", "n", "k", "panel"),
    [
        (1024, 1024, 1024, 128),  # 128 rows of b (4 KiB each) are REDUCE_PANEL_BYTES
        (512, 2048, 2048, 64),  # 8 KiB rows: 64 of them
        (1024, 256, 512, 256),  # small b rows: the largest panel size, still 2 panels
    ],
)
def test_transposed_left_operand_blocks_the_reduce_and_keeps_the_rows_outside(
    m: int, n: int, k: int, panel: int
) -> None:
    opts = hand_coded_optimizations(_left_transposed(m, n, k), VectorCPU())
    assert opts[:3] == (Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 32), Opt(BLOCK, 2, panel))
    assert SWAP not in {opt.op for opt in opts} and opts[3].op is THREAD


def test_contiguous_left_operand_keeps_its_order_and_no_panels() -> None:
    # a[i, k] is contiguous along the reduce (one line serves 16 steps): the big b still puts the columns outside
    opts = hand_coded_optimizations(matmul(256, 1024, 1024), VectorCPU())
    assert opts == (Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 32), Opt(SWAP, 0, 1), Opt(THREAD, 0, 8))


@pytest.mark.parametrize(
    ("m", "n", "k"),
    [
        (16384, 64, 32),  # a reduce no panel size splits into two or more panels (32 steps)
        (8, 64, 65536),  # a's rows 8 floats apart: each line of a still serves two reduce steps
        (128, 1024, 128),  # a is 64 KiB, within L2 anyway (a linear layer's weight gradient over a batch of 128)
    ],
)
def test_short_reduce_near_rows_or_small_left_operand_get_no_panels(m: int, n: int, k: int) -> None:
    assert BLOCK not in {opt.op for opt in hand_coded_optimizations(_left_transposed(m, n, k), VectorCPU())}


def test_float16_output_is_not_blocked() -> None:
    # a partial sum stored in a float16 output would be rounded: BLOCK refuses, the tile keeps the plain order
    c, a, b = buffer(0, 1024 * 512, dtypes.float16), buffer(1, 512 * 1024), buffer(2, 512 * 512)
    i, j, r = UOp.range(1024, 0), UOp.range(512, 1), UOp.range(512, 2, AxisKind.REDUCE)
    total = (a.index(r * 1024 + i).load() * b.index(r * 512 + j).load()).reduce(r)
    sink = kernel(c.index(i * 512 + j).store(total.cast(dtypes.float16)).end(i, j))
    opts = hand_coded_optimizations(sink, VectorCPU())
    assert opts[:2] == (Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 32)) and BLOCK not in {opt.op for opt in opts}


@pytest.mark.parametrize(("m", "n", "k"), [(16, 64, 128), (32, 32, 96)])
def test_paneled_transposed_product_computes_what_numpy_computes(
    m: int, n: int, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sizes scaled down so a kernel the interpreter runs quickly gets several panels of 32
    monkeypatch.setattr(product_tiles, "REDUCE_PANEL_BYTES", 32 * n * 4)
    monkeypatch.setattr(product_tiles, "STREAM_SWAP_BYTES", k * m * 4)
    renderer = VectorCPU()
    sink = _left_transposed(m, n, k)
    opts = hand_coded_optimizations(sink, renderer)
    assert Opt(BLOCK, 2, 32) in opts
    rng = np.random.default_rng(42)
    # integer-valued floats: every partial sum is exact, so the blocked order must give numpy's result exactly
    a, b = rng.integers(-4, 4, (k, m)).astype(np.float32), rng.integers(-4, 4, (k, n)).astype(np.float32)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(m * n, np.nan, np.float32)
    run_program(program, [out, a.reshape(-1), b.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out.reshape(m, n), a.T @ b)
