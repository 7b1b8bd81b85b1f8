"""`shared_load_unroll`: the nibble loop of a packed 4-bit product (two values per byte) unrolled after the heuristic's
product tile, so one loaded byte vector feeds both nibbles; checked on hand-built kernels against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, get_program, hand_coded_optimizations, run_program
from kiln.codegen.opt.apply import apply_opt, prepare_axes
from kiln.codegen.opt.quantized_products import shared_load_unroll
from kiln.uops import AxisKind, UOp, dtypes

UPCAST, UNROLL = OptOps.UPCAST, OptOps.UNROLL
ROWS, PAIRS, BYTES = 64, 3, 32  # out[n] sums PAIRS pairs of runs of BYTES values: 2 * PAIRS * BYTES columns


class _VectorCPU(CPULikeRenderer):
    """A CPU whose ALU ops stay vectors (like the LLVM IR renderer): 4-, 8- and 16-wide."""

    device = "TESTVECTORCPU"
    vector_alu = True
    vector_widths = (4, 8, 16)


class _NarrowVectorCPU(_VectorCPU):
    """The same with room for only 128 lanes of register tile (an AVX2-like register file)."""

    register_tile_lanes = 128


def _nibble_product(byte_index: str) -> UOp:
    """out[n] = sum over (p, h, l) of x[64 p + 32 h + l] * ((w[n, p, l] >> 4 h) & 15), axes n, p, h (the nibble), l.

    `byte_index` spells the byte's address: "plain" without h, "paired" through run 2 p + h halved (as the tensor
    layer's reshapes leave it: the same byte for both nibbles), "walked" with h in it (another byte per nibble)."""
    columns = 2 * PAIRS * BYTES
    out, x, weight = buffer(0, ROWS), buffer(1, columns), buffer(2, ROWS * PAIRS * 2 * BYTES, dtypes.uint8)
    n = UOp.range(ROWS, 0)
    p, h, lane = (UOp.range(size, axis, AxisKind.REDUCE) for axis, size in ((1, PAIRS), (2, 2), (3, BYTES)))
    row = n * (PAIRS * 2 * BYTES)
    address = {
        "plain": row + p * BYTES + lane,
        "paired": row + ((p * 2 + h) // 2) * BYTES + lane,
        "walked": row + p * (2 * BYTES) + h * BYTES + lane,
    }[byte_index]
    packed = weight.index(address).load().cast(dtypes.uint32)
    nibble = ((packed >> (h.cast(dtypes.uint32) * 4)) & 15).cast(dtypes.float32)
    value = x.index(p * (2 * BYTES) + h * BYTES + lane).load() * nibble
    return kernel(out.index(n).store(value.reduce(p, h, lane)).end(n))


def _tiled(sink: UOp, renderer: _VectorCPU) -> tuple[UOp, tuple[Opt, ...]]:
    """`sink` with the heuristic's product tile applied (its first two opts: the rows upcast, the bytes unrolled; the
    nibble unroll, once the heuristic takes it, and the THREAD split come after), and those two opts."""
    opts = hand_coded_optimizations(sink, renderer)[:2]
    tiled = prepare_axes(sink, renderer)
    for opt in opts:
        tiled = apply_opt(tiled, opt, renderer)
    return tiled, opts


def _oracle(x: np.ndarray, weight: np.ndarray, byte_index: str) -> np.ndarray:
    """The product computed from the bytes in numpy (float64), each nibble taken as the sink spells it."""
    packed = weight.reshape(ROWS, -1).astype(np.int64)
    total = np.zeros(ROWS)
    for p in range(PAIRS):
        for h in range(2):
            start = p * 2 * BYTES + h * BYTES if byte_index == "walked" else p * BYTES
            nibbles = (packed[:, start : start + BYTES] >> (4 * h)) & 15
            total += nibbles @ x[p * 2 * BYTES + h * BYTES :][:BYTES].astype(np.float64)
    return total


@pytest.mark.parametrize("byte_index", ["plain", "paired"])
def test_the_nibble_loop_is_unrolled_after_the_tile_and_computes_the_product(byte_index: str) -> None:
    renderer = _VectorCPU()
    sink = _nibble_product(byte_index)
    tiled, opts = _tiled(sink, renderer)
    assert opts == (Opt(UPCAST, 0, 8), Opt(UNROLL, 3, 16))  # rows by 8, the bytes by 16 lanes; h still a loop
    pair = shared_load_unroll(tiled, renderer)
    assert pair == Opt(UNROLL, 2, 0)
    rng = np.random.default_rng(7)
    x = rng.integers(-4, 5, 2 * PAIRS * BYTES).astype(np.float32)
    weight = rng.integers(0, 256, ROWS * PAIRS * 2 * BYTES).astype(np.uint8)
    program = Program(get_program(sink, renderer, [*opts, pair]))
    out = np.full(ROWS, np.nan, np.float32)
    run_program(program, [out, x, weight], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out, _oracle(x, weight, byte_index))


def test_a_loop_that_moves_the_byte_load_is_not_unrolled() -> None:
    # each nibble of this kernel comes from a byte of its own: unrolling h would share nothing
    renderer = _VectorCPU()
    tiled, _ = _tiled(_nibble_product("walked"), renderer)
    assert shared_load_unroll(tiled, renderer) is None


def test_nothing_before_the_lanes_are_unrolled() -> None:
    renderer = _VectorCPU()
    assert shared_load_unroll(prepare_axes(_nibble_product("plain"), renderer), renderer) is None


def test_not_past_the_register_tile_lanes() -> None:
    # 8 rows x 16 lanes x 2 nibbles = 256 lanes: over a 128-lane register file the tile stays as it is
    renderer = _NarrowVectorCPU()
    tiled, opts = _tiled(_nibble_product("plain"), renderer)
    assert opts == (Opt(UPCAST, 0, 8), Opt(UNROLL, 3, 16))
    assert shared_load_unroll(tiled, renderer) is None
