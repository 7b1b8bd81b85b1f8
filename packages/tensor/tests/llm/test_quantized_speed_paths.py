"""The two forms of `linear` on a quantized weight, each against gguf-py's numpy dequantization and a float64 matmul:
the fused product of few rows (a decode step: blocks decoded inside the reduction) and the batched one of many or a
symbolic count of rows (a prompt: the weight decoded once into a float matrix, then the tiled matmul)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from state.ggml_reference import random_blocks

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.jit import TinyJit, Variable
from kiln.tensor.llm.quantized import BATCHED_ROWS, QuantizedWeight, linear
from kiln.tensor.ops._checks import ShapeError
from kiln.tensor.state.quantization import GGML_BLOCKS, GGMLType
from kiln.tensor.symbolic import as_size

KINDS = [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.Q4_1]


def weight_and_oracle(kind: GGMLType, rows: int, cols: int, seed: int) -> tuple[QuantizedWeight, np.ndarray]:
    """A (rows, cols) weight of random valid blocks and gguf-py's float32 decode of the same bytes."""
    raw = random_blocks(kind, rows * cols // GGML_BLOCKS[kind].block_size, seed).reshape(-1)
    oracle = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(int(kind))).reshape(rows, cols)
    return QuantizedWeight(Tensor(raw), kind, (rows, cols)), oracle


def assert_product(got: np.ndarray, x: np.ndarray, oracle: np.ndarray) -> None:
    """`got` equals x @ oracle.T in float64 up to float32 rounding of sums of `cols` products (random bytes make
    large weights: the absolute tolerance scales with them)."""
    scale = float(np.abs(oracle).max()) * np.sqrt(oracle.shape[1])
    np.testing.assert_allclose(got, x.astype(np.float64) @ oracle.T.astype(np.float64), rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
@pytest.mark.parametrize("tokens", [1, BATCHED_ROWS - 1, BATCHED_ROWS, 37])
def test_both_forms_match_numpy_dequantization(kind: GGMLType, tokens: int) -> None:
    weight, oracle = weight_and_oracle(kind, 40, 512, seed=int(kind) + tokens)
    x = np.random.default_rng(tokens).standard_normal((1, tokens, 512)).astype(np.float32)
    got = linear(Tensor(x), weight).numpy()
    assert got.shape == (1, tokens, 40)
    assert_product(got, x, oracle)


@pytest.mark.parametrize("kind", [GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K], ids=lambda kind: kind.name)
def test_many_rows_decode_the_weight_once(kind: GGMLType) -> None:
    # one kernel decodes the blocks into a float matrix, the matmul reads it (the input may need a kernel of its own)
    weight, oracle = weight_and_oracle(kind, 64, 256, seed=3)
    x = np.random.default_rng(4).standard_normal((2, 20, 256)).astype(np.float32)
    inputs = Tensor(x).realize()
    GlobalCounters.reset()
    got = linear(inputs, weight).numpy()
    assert_product(got, x, oracle)
    assert 2 <= GlobalCounters.kernel_count <= 3


def test_symbolic_row_count_takes_the_batched_form() -> None:
    # a prefill chunk's length is a Variable: the product must be right for every bound value, not one traced size
    weight, oracle = weight_and_oracle(GGMLType.Q4_K, 32, 256, seed=5)
    x = np.random.default_rng(6).standard_normal((1, 12, 256)).astype(np.float32)
    length = Variable("rows", 1, 12)
    step = TinyJit(lambda inputs, count: linear(inputs[:, : as_size(count, "rows")], weight).realize())
    for rows in (3, 12, 5, 1):
        count = length.bind(rows)
        got = step(Tensor(x), count).numpy()
        assert_product(got[:, :rows], x[:, :rows], oracle)


@pytest.mark.parametrize("tokens", [2, 20])
def test_a_wrong_column_count_is_named_in_both_forms(tokens: int) -> None:
    weight, _ = weight_and_oracle(GGMLType.Q8_0, 4, 64, seed=7)
    with pytest.raises(ShapeError, match=rf"shape \({tokens}, 32\) cannot multiply a weight of shape \(4, 64\)"):
        linear(Tensor.ones(tokens, 32), weight)
