"""A transposing copy (`x.T.contiguous()`, heuristic step 3 `_transposed_copy_order`): its innermost loop, which
steps the load by whole rows, swaps with the loop the load is contiguous along; the result is numpy's transpose."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import VectorCPU
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, get_program, hand_coded_optimizations, run_program
from kiln.uops import UOp

UPCAST, SWAP, THREAD = OptOps.UPCAST, OptOps.SWAP, OptOps.THREAD


def _transpose(rows: int, columns: int, scale: float | None = None) -> UOp:
    """out[i, j] = a[j, i] (times `scale` when given): out is (rows, columns), a is (columns, rows); axes i=0, j=1."""
    out, a = buffer(0, rows * columns), buffer(1, rows * columns)
    i, j = UOp.range(rows, 0), UOp.range(columns, 1)
    value = a.index(j * rows + i).load()
    return kernel(out.index(i * columns + j).store(value if scale is None else value * scale).end(i, j))


def test_transpose_walks_the_loaded_rows_innermost() -> None:
    opts = hand_coded_optimizations(_transpose(1024, 1024), VectorCPU())
    assert opts[:2] == (Opt(UPCAST, 1, 16), Opt(SWAP, 0, 1)) and opts[2].op is THREAD


def test_scaled_transpose_swaps_too() -> None:
    # elementwise math on the one loaded value does not change what the loads and stores walk
    opts = hand_coded_optimizations(_transpose(256, 256, 2.0), VectorCPU())
    assert opts[:2] == (Opt(UPCAST, 1, 16), Opt(SWAP, 0, 1))


def _transpose_plus(size: int) -> UOp:
    """out[i, j] = a[j, i] + b[i, j]: b is read along the stores, so it keeps the store order."""
    out, a, b = buffer(0, size * size), buffer(1, size * size), buffer(2, size * size)
    i, j = UOp.range(size, 0), UOp.range(size, 1)
    value = a.index(j * size + i).load() + b.index(i * size + j).load()
    return kernel(out.index(i * size + j).store(value).end(i, j))


@pytest.mark.parametrize("sink", [_transpose(1024, 8), _transpose_plus(256)], ids=["near-rows", "two-loads"])
def test_other_copies_keep_their_loop_order(sink: UOp) -> None:
    # a's rows 8 floats apart: the innermost loop stays within a line; a second load read along the stores
    assert SWAP not in {opt.op for opt in hand_coded_optimizations(sink, VectorCPU())}


def test_contiguous_copy_keeps_its_loop_order() -> None:
    out, a = buffer(0, 64 * 64), buffer(1, 64 * 64)
    i, j = UOp.range(64, 0), UOp.range(64, 1)
    sink = kernel(out.index(i * 64 + j).store(a.index(i * 64 + j).load()).end(i, j))
    assert SWAP not in {opt.op for opt in hand_coded_optimizations(sink, VectorCPU())}


@pytest.mark.parametrize(("rows", "columns"), [(64, 48), (32, 128)])
def test_swapped_transpose_is_numpys(rows: int, columns: int) -> None:
    renderer = VectorCPU()
    sink = _transpose(rows, columns)
    opts = hand_coded_optimizations(sink, renderer)
    assert Opt(SWAP, 0, 1) in opts
    a = np.arange(rows * columns, dtype=np.float32).reshape(columns, rows)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(rows * columns, np.nan, np.float32)
    run_program(program, [out, a.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out.reshape(rows, columns), a.T)
