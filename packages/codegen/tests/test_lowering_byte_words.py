"""Words assembled from their bytes (`b0 | b1 << 8 | ...`, how a GGUF F16 / F32 matrix is decoded from its raw bytes)
are read by one access of all their bytes and reinterpreted (memory access lowering, vector-ALU renderers); a prompt's
rows times such a matrix take the dot-product tile of a float16 matrix. Values against numpy's decode of the bytes."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer, VectorCPU
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, Renderer, get_program, hand_coded_optimizations, run_program
from kiln.uops import AxisKind, DType, Ops, PtrDType, UOp, dtypes

UPCAST, UNROLL, SWAP = OptOps.UPCAST, OptOps.UNROLL, OptOps.SWAP
WORDS = {2: (dtypes.uint16, dtypes.float16, np.float16), 4: (dtypes.uint32, dtypes.float32, np.float32)}


def _decoded(weight: UOp, element: UOp, size: int, order: tuple[int, ...], bits: int = 8) -> UOp:
    """Element `element` of a little-endian matrix of `size`-byte floats, assembled from its bytes as the tensor layer
    does: byte `order[k]` of the element shifted left by `bits * k` (the real decode: order 0, 1, ... and 8 bits)."""
    unsigned, floating, _ = WORDS[size]
    word: UOp | None = None
    for shift, byte in enumerate(order):
        term = weight.index(element * size + byte).load().cast(unsigned)
        term = term << UOp.const(unsigned, bits * shift) if shift else term
        word = term if word is None else word | term
    assert word is not None
    return word.bitcast(floating).cast(dtypes.float32)


def _bytes_product(
    rows: int, columns: int, depth: int, size: int = 2, order: tuple[int, ...] | None = None, bits: int = 8
) -> UOp:
    """out[i, j] = sum_k x[i, k] * w[j, k] with w stored as bytes (x @ W.T, a prompt's rows times a GGUF matrix)."""
    out, x = buffer(0, rows * columns), buffer(1, rows * depth)
    weight = buffer(2, size * columns * depth, dtypes.uint8)
    i, j, k = UOp.range(rows, 0), UOp.range(columns, 1), UOp.range(depth, 2, AxisKind.REDUCE)
    element = _decoded(weight, j * depth + k, size, tuple(range(size)) if order is None else order, bits)
    product = x.index(i * depth + k).load() * element
    return kernel(out.index(i * columns + j).store(product.reduce(k)).end(i, j))


def _run(sink: UOp, renderer: Renderer, x: np.ndarray, stored: np.ndarray, outputs: int) -> tuple[np.ndarray, Program]:
    program = Program(get_program(sink, renderer, list(hand_coded_optimizations(sink, renderer))))
    out = np.full(outputs, np.nan, np.float32)
    run_program(program, [out, x.reshape(-1), stored.reshape(-1)], {}, *program.launch_dims({}))
    return out, program


def _weight_loads(program: Program) -> list[DType]:
    """The dtype of every load from the byte matrix (buffer 2)."""
    found = []
    for uop in program.uops:
        pointer = uop.src[0].dtype if uop.op is Ops.LOAD else None
        if isinstance(pointer, PtrDType) and uop.src[0].src[0].arg == 2:
            found.append(uop.dtype)
    return found


def _values(shape: tuple[int, int], dtype: type, seed: int) -> np.ndarray:
    # multiples of 1/4 with both signs: every byte of an element differs between neighbours, and every product and
    # partial sum is exact in float32, so any byte taken from the wrong place or order shows as a wrong value
    return (np.random.default_rng(seed).integers(-64, 64, shape) / 4).astype(dtype)


def test_prompt_rows_times_half_bytes_take_the_dot_product_tile() -> None:
    # 64 rows of the 100M llama against its (2048, 768) F16 feed-forward weight: before, the bytes' stride of 2 per
    # element kept it from step 2r, and step 2s gave it a gathered 8 x 16 tile with the reduce rolled (~2 GFLOP/s)
    opts = hand_coded_optimizations(_bytes_product(64, 2048, 768), VectorCPU())
    assert opts[:4] == (Opt(UPCAST, 1, 4), Opt(UPCAST, 0, 4), Opt(SWAP, 0, 1), Opt(UNROLL, 2, 16))


@pytest.mark.parametrize("size", [2, 4])
def test_each_tile_row_of_words_is_one_load(size: int) -> None:
    rows, columns, depth = 8, 16, 48
    unsigned, _, numpy_type = WORDS[size]
    x = _values((rows, depth), np.float32, 1)
    weight = _values((columns, depth), numpy_type, 2)
    sink = _bytes_product(rows, columns, depth, size)
    out, program = _run(sink, VectorCPU(), x, weight.view(np.uint8), rows * columns)
    np.testing.assert_array_equal(out.reshape(rows, columns), x @ weight.astype(np.float32).T)
    # the 4 x 4 x 16 tile: each of its 4 weight rows is one load of 16 words' bytes, reinterpreted as the 16 words
    assert _weight_loads(program) == [dtypes.uint8.vec(16 * size)] * 4
    bitcasts = [u for u in program.uops if u.op is Ops.BITCAST and u.src[0].dtype == dtypes.uint8.vec(16 * size)]
    assert len(bitcasts) == 4 and all(u.dtype == unsigned.vec(16) for u in bitcasts)


@pytest.mark.parametrize("rows", [1, 8])
def test_decode_step_words_are_one_load(rows: int) -> None:
    # a decode step's few rows (all rows upcast, the reduce by 16) and one row (step 3v's 64-lane unroll)
    columns, depth = 1024, 128
    x = _values((rows, depth), np.float32, 3)
    weight = _values((columns, depth), np.float16, 4)
    sink = _bytes_product(rows, columns, depth)
    out, program = _run(sink, VectorCPU(), x, weight.view(np.uint8), rows * columns)
    np.testing.assert_array_equal(out.reshape(rows, columns), x @ weight.astype(np.float32).T)
    assert all(dtype.count > 1 for dtype in _weight_loads(program))


@pytest.mark.parametrize(
    ("order", "bits"),
    [
        ((1, 0), 8),  # big-endian bytes: the word is not the bytes' little-endian reading
        ((0, 1), 4),  # not shifted by whole bytes (two nibbles' worth)
    ],
)
def test_other_byte_arrangements_are_left_alone(order: tuple[int, ...], bits: int) -> None:
    rows, columns, depth = 4, 16, 32
    sink = _bytes_product(rows, columns, depth, 2, order, bits)
    xs = _values((rows, depth), np.float32, 5)
    # bytes of at most 0x3B: every word is a float16 under 1 in either reading (no infinity or NaN)
    stored = np.random.default_rng(6).integers(0, 0x3C, 2 * columns * depth).astype(np.uint8)
    pairs = stored.reshape(-1, 2).astype(np.uint16)
    words = (pairs[:, order[0]] | (pairs[:, order[1]] << bits)).astype(np.uint16)
    expected = xs.astype(np.float64) @ words.view(np.float16).astype(np.float64).reshape(columns, depth).T
    got, program = _run(sink, VectorCPU(), xs, stored, rows * columns)
    np.testing.assert_allclose(got.reshape(rows, columns), expected, rtol=1e-5, atol=1e-5)
    assert not any(u.op is Ops.BITCAST and u.src[0].dtype.scalar() == dtypes.uint8 for u in program.uops)


def test_renderer_without_vector_alu_keeps_byte_loads() -> None:
    # the merge is for vector-ALU renderers (LLVM IR): others keep their aligned accesses of the renderer's widths
    rows, columns, depth = 4, 16, 32
    x = _values((rows, depth), np.float32, 7)
    weight = _values((columns, depth), np.float16, 8)
    sink = _bytes_product(rows, columns, depth)
    out, program = _run(sink, CPULikeRenderer(), x, weight.view(np.uint8), rows * columns)
    np.testing.assert_array_equal(out.reshape(rows, columns), x @ weight.astype(np.float32).T)
    assert all(dtype.scalar() == dtypes.uint8 for dtype in _weight_loads(program))


def _chunk_product(most: int, columns: int, heads: int, size: int, split_heads: bool) -> UOp:
    """A prefill chunk's rows times an F16 GGUF matrix: out[i, j] = sum_k x[i, k] * w[j, k] for i < length (a bound
    Variable); `split_heads`: x read in the attention output's layout, x[k / size, i, k % size] for heads of `size`
    values ((k / size) / 3 and (k / size) % 3 of three groups of heads: the index the scheduler builds)."""
    depth = heads * size
    length = UOp.variable("length", 1, most)
    out, x = buffer(0, most * columns), buffer(1, most * depth)
    weight = buffer(2, 2 * columns * depth, dtypes.uint8)
    i, j, k = UOp.range(length, 0), UOp.range(columns, 1), UOp.range(depth, 2, AxisKind.REDUCE)
    if split_heads:
        head = k // size
        row = (head // 3) * (length * size * 3) + (head % 3) * (length * size) + i * size + k % size
    else:
        row = i * depth + k
    product = x.index(row).load() * _decoded(weight, j * depth + k, 2, (0, 1))
    return kernel(out.index(i * columns + j).store(product.reduce(k)).end(i, j))


@pytest.mark.parametrize("split_heads", [False, True])
def test_chunk_rows_times_half_bytes_take_the_dot_product_tile(split_heads: bool) -> None:
    # the 100M llama's prefill: its rows are a bound Variable, which no output axis of `_walked_axes` is; with the
    # heads' layout, the division of the head number by 3 kept the attention output projection out of step 2r too
    # (it took step 2s's gathered 16 columns with the reduce rolled: ~25% of a 64-token prefill's kernel time)
    most, columns, heads, size = 8, 32, 6, 16
    sink = _chunk_product(most, columns, heads, size, split_heads)
    renderer = VectorCPU()
    opts = hand_coded_optimizations(sink, renderer)
    assert Opt(UPCAST, 1, 4) in opts and Opt(UNROLL, 2, 16) in opts
    for length in (3, 8):
        x = _values((length, heads * size), np.float32, length)
        weight = _values((columns, heads * size), np.float16, 10)
        stored = np.zeros(most * heads * size, np.float32)
        # x's rows in the kernel's layout: heads outermost when split, each head's (length, size) block
        if split_heads:
            blocks = x.reshape(length, heads, size).transpose(1, 0, 2).reshape(-1)
            stored[: blocks.size] = blocks
        else:
            stored[: x.size] = x.reshape(-1)
        program = Program(get_program(sink, renderer, list(opts)))
        out = np.full(most * columns, np.nan, np.float32)
        values = {"length": length}
        run_program(program, [out, stored, weight.view(np.uint8).reshape(-1)], values, *program.launch_dims(values))
        got = out[: length * columns].reshape(length, columns)
        np.testing.assert_array_equal(got, x @ weight.astype(np.float32).T)
