"""`QuantizedWeight.take_rows`: an embedding lookup in a quantized table gathers the picked rows' bytes, then decodes
only them (against gguf-py's numpy dequantization of the same bytes, indexed by numpy)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from state.ggml_reference import random_blocks

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.jit import TinyJit, Variable
from kiln.tensor.llm.quantized import QuantizedWeight
from kiln.tensor.state.quantization import GGML_BLOCKS, GGMLType
from kiln.tensor.symbolic import as_size

KINDS = [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.Q2_K, GGMLType.Q5_0]


def table_and_oracle(kind: GGMLType, rows: int, cols: int, seed: int) -> tuple[QuantizedWeight, np.ndarray]:
    raw = random_blocks(kind, rows * cols // GGML_BLOCKS[kind].block_size, seed).reshape(-1)
    oracle = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(int(kind))).reshape(rows, cols)
    return QuantizedWeight(Tensor(raw), kind, (rows, cols)), oracle


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_picked_rows_equal_numpy_dequantization(kind: GGMLType) -> None:
    table, oracle = table_and_oracle(kind, 300, 512, seed=int(kind))
    ids = np.array([[3, 299, 0, 17, 3], [250, 1, 1, 128, 64]], np.int32)
    got = table.take_rows(Tensor(ids)).numpy()
    assert got.shape == (2, 5, 512)
    np.testing.assert_array_equal(got, oracle[ids])


def test_only_the_picked_rows_are_read() -> None:
    # the whole table is 4096 rows of 288 bytes (1.2 MB); three picked rows must not cost a pass over it
    table, oracle = table_and_oracle(GGMLType.Q4_K, 4096, 512, seed=1)
    ids = Tensor(np.array([[7, 4095, 1000]], np.int32)).realize()
    GlobalCounters.reset()
    got = table.take_rows(ids).numpy()
    np.testing.assert_array_equal(got, oracle[[[7, 4095, 1000]]])
    assert GlobalCounters.mem_bytes < table.nbytes // 10


def test_ids_outside_the_table_pick_zero_rows() -> None:
    table, oracle = table_and_oracle(GGMLType.Q8_0, 16, 64, seed=2)
    got = table.take_rows(Tensor(np.array([-1, 16, 5], np.int32))).numpy()
    np.testing.assert_array_equal(got, np.stack([np.zeros(64), np.zeros(64), oracle[5]]).astype(np.float32))


def test_a_symbolic_token_count_replays_in_a_jit() -> None:
    # a prefill chunk's length is a Variable: the gather and the decode are built for every bound value
    table, oracle = table_and_oracle(GGMLType.Q6_K, 64, 256, seed=3)
    ids = np.random.default_rng(4).integers(0, 64, (1, 12)).astype(np.int32)
    length = Variable("tokens", 1, 12)
    step = TinyJit(lambda tokens, count: table.take_rows(tokens[:, : as_size(count, "tokens")]).realize())
    for count in (3, 12, 5, 1):
        got = step(Tensor(ids), length.bind(count)).numpy()
        np.testing.assert_array_equal(got[:, :count], oracle[ids[:, :count]])


def test_a_stacked_weight_is_refused() -> None:
    raw = random_blocks(GGMLType.Q8_0, 4, 0).reshape(-1)
    stacked = QuantizedWeight(Tensor(raw), GGMLType.Q8_0, (2, 2, 32))
    with pytest.raises(ValueError, match=r"take_rows needs a \(rows, cols\) weight, got .* shape \(2, 2, 32\)"):
        stacked.take_rows(Tensor(np.array([0], np.int32)))
