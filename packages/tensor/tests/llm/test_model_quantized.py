"""QuantizedWeight: x @ W.T with W kept as ggml blocks, against gguf-py's numpy dequantization of the same bytes."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.llm.quantized import QuantizedWeight, linear
from kiln.tensor.state.quantization import GGML_BLOCKS, GGMLType

# byte offsets of each block's float16 scale fields (the rest of a block is packed integers: any bytes are valid)
SCALE_FIELDS = {
    GGMLType.Q8_0: [0],
    GGMLType.Q4_0: [0],
    GGMLType.Q4_1: [0, 2],
    GGMLType.Q5_0: [0],
    GGMLType.Q4_K: [0, 2],
    GGMLType.Q5_K: [0, 2],
    GGMLType.Q6_K: [208],
}


def random_blocks(kind: GGMLType, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    block = GGML_BLOCKS[kind]
    blocks = rows * cols // block.block_size
    raw = rng.integers(0, 256, (blocks, block.type_size), dtype=np.uint8)
    for offset in SCALE_FIELDS[kind]:
        scales = rng.uniform(0.001, 0.02, blocks).astype(np.float16)
        raw[:, offset : offset + 2] = scales.view(np.uint8).reshape(blocks, 2)
    return raw.reshape(-1)


def weight_and_oracle(
    kind: GGMLType, rows: int, cols: int, rng: np.random.Generator
) -> tuple[QuantizedWeight, np.ndarray]:
    """A random (rows, cols) quantized weight and gguf-py's numpy dequantization of the same bytes."""
    raw = random_blocks(kind, rows, cols, rng)
    oracle = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(int(kind))).reshape(rows, cols)
    return QuantizedWeight(Tensor(raw), kind, (rows, cols)), oracle


@pytest.mark.parametrize("kind", list(SCALE_FIELDS))
def test_quantized_linear_matches_numpy_dequantization(kind: GGMLType) -> None:
    rng = np.random.default_rng(int(kind))
    rows, cols = 48, 512
    weight, oracle = weight_and_oracle(kind, rows, cols, rng)
    x = rng.standard_normal((3, cols)).astype(np.float32)
    inputs = Tensor(x).realize()
    GlobalCounters.reset()
    got = linear(inputs, weight).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64) @ oracle.T.astype(np.float64), rtol=1e-4, atol=1e-4)
    assert GlobalCounters.kernel_count <= 2  # decoded inside the matmul, not expanded to a float matrix first


def test_expert_slices_stay_quantized() -> None:
    rng = np.random.default_rng(5)
    raw = random_blocks(GGMLType.Q8_0, 3 * 8, 64, rng)
    stacked = QuantizedWeight(Tensor(raw), GGMLType.Q8_0, (3, 8, 64))
    oracle = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0).reshape(3, 8, 64)
    for expert in range(3):
        part = stacked[expert]
        assert part.shape == (8, 64) and part.nbytes == 8 * 2 * 34
        np.testing.assert_allclose(part.dequantized().numpy(), oracle[expert], rtol=0, atol=0)
    with pytest.raises(IndexError):
        stacked[3]
    with pytest.raises(ValueError, match="not whole 32-blocks"):
        QuantizedWeight(Tensor(np.zeros(34, np.uint8)), GGMLType.Q8_0, (1, 48))


@pytest.mark.parametrize("kind", list(SCALE_FIELDS))
def test_one_row_decodes_like_gguf(kind: GGMLType) -> None:
    rng = np.random.default_rng(100 + int(kind))
    rows, cols = 7, 512
    weight, oracle = weight_and_oracle(kind, rows, cols, rng)
    for row in (0, 3, rows - 1):
        np.testing.assert_array_equal(weight.row(row).numpy(), oracle[row : row + 1])
    for bad in (-1, rows):
        with pytest.raises(IndexError):
            weight.row(bad)


@pytest.mark.parametrize("kind", [GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K])
def test_quantized_linear_of_batched_tokens_with_bias(kind: GGMLType) -> None:
    # (batch, tokens, cols) inputs as the model passes them (decode: one token; prompts), with a bias; and a 1-D input
    rng = np.random.default_rng(40 + int(kind))
    rows, cols = 24, 512
    weight, oracle = weight_and_oracle(kind, rows, cols, rng)
    bias = rng.standard_normal(rows).astype(np.float32)
    for tokens in (1, 5, 40):
        x = rng.standard_normal((2, tokens, cols)).astype(np.float32)
        got = linear(Tensor(x), weight, Tensor(bias)).numpy()
        assert got.shape == (2, tokens, rows)
        expected = x.astype(np.float64) @ oracle.T.astype(np.float64) + bias
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    vector = rng.standard_normal(cols).astype(np.float32)
    got = linear(Tensor(vector), weight).numpy()
    assert got.shape == (rows,)
    np.testing.assert_allclose(got, oracle.astype(np.float64) @ vector, rtol=1e-4, atol=1e-4)


def test_quantized_linear_names_mismatched_shapes() -> None:
    rng = np.random.default_rng(9)
    weight = QuantizedWeight(Tensor(random_blocks(GGMLType.Q8_0, 4, 64, rng)), GGMLType.Q8_0, (4, 64))
    with pytest.raises(ValueError, match=r"shape \(3, 32\) cannot multiply a weight of shape \(4, 64\)"):
        linear(Tensor.ones(3, 32), weight)
