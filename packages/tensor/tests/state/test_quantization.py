"""ggml block decoders (kiln kernels) against a per-element numpy reading of the block layouts and gguf-py."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants
from state.ggml_reference import HALF_FIELDS, random_blocks, reference_block

from kiln.tensor import Tensor, dtypes
from kiln.tensor.state import GGML_BLOCKS, GGMLType, dequantize


@pytest.mark.parametrize("kind", list(HALF_FIELDS), ids=lambda kind: kind.name)
def test_random_blocks_match_the_reference(kind: GGMLType) -> None:
    block = GGML_BLOCKS[kind]
    raw = random_blocks(kind, 3, seed=int(kind))
    expected = np.array([v for row in raw for v in reference_block(kind, row)], dtype=np.float32)
    shape = (3, block.block_size)
    got = dequantize(Tensor(raw.reshape(-1)), kind, shape)
    assert got.dtype == dtypes.float32 and got.shape == shape
    np.testing.assert_allclose(got.numpy().reshape(-1), expected, rtol=1e-6, atol=1e-6)
    if kind != GGMLType.Q8_K:  # gguf-py has no Q8_K decoder
        oracle = quants.dequantize(raw, GGMLQuantizationType[kind.name]).reshape(-1)
        np.testing.assert_allclose(got.numpy().reshape(-1), oracle, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0])
def test_quantized_values_round_trip(kind: GGMLType) -> None:
    values = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float32)
    raw = quants.quantize(values, GGMLQuantizationType[kind.name])
    got = dequantize(Tensor(raw.reshape(-1)), kind, values.shape).numpy()
    np.testing.assert_allclose(got, quants.dequantize(raw, GGMLQuantizationType[kind.name]), rtol=1e-6)
    step = np.abs(values).reshape(-1, 32).max(axis=1, keepdims=True) / (4 if kind == GGMLType.Q8_0 else 0.25) / 32
    assert (np.abs(got - values).reshape(-1, 32) <= step).all()  # within the block's quantization step


@pytest.mark.parametrize(
    ("kind", "dtype", "numpy_dtype"),
    [
        (GGMLType.F32, dtypes.float32, np.float32),
        (GGMLType.F16, dtypes.float16, np.float16),
        (GGMLType.I32, dtypes.int32, np.int32),
        (GGMLType.I16, dtypes.int16, np.int16),
        (GGMLType.F64, dtypes.float64, np.float64),
    ],
)
def test_plain_types_reassemble_bytes(kind: GGMLType, dtype: object, numpy_dtype: type) -> None:
    values: np.ndarray = (np.random.default_rng(2).standard_normal((3, 4)) * 1000).astype(numpy_dtype)
    got = dequantize(Tensor(values.reshape(-1).view(np.uint8)), kind, (3, 4))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), values)


def test_bfloat16_bytes() -> None:
    values = np.array([1.0, -2.5, 3.140625, 65536.0], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    got = dequantize(Tensor(bits.view(np.uint8)), GGMLType.BF16, (2, 2))
    assert got.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(got.numpy(), values.reshape(2, 2))


def test_decoded_weights_feed_a_matmul() -> None:
    raw = random_blocks(GGMLType.Q4_K, 2, seed=9)
    weight = dequantize(Tensor(raw.reshape(-1)), GGMLType.Q4_K, (2, 256))
    vector = Tensor(np.ones((256, 1), dtype=np.float32))
    product = (weight @ vector).numpy()
    expected = np.array([reference_block(GGMLType.Q4_K, row) for row in raw], dtype=np.float32) @ np.ones((256, 1))
    np.testing.assert_allclose(product, expected, rtol=1e-4)


def test_bad_arguments() -> None:
    with pytest.raises(NotImplementedError, match="ggml tensor type IQ2_XXS is not supported; kiln decodes F32"):
        dequantize(Tensor(np.zeros(66, dtype=np.uint8)), GGMLType.IQ2_XXS, (256,))
    with pytest.raises(NotImplementedError, match="ggml tensor type #99 is not supported"):
        dequantize(Tensor(np.zeros(4, dtype=np.uint8)), 99, (1,))
    with pytest.raises(ValueError, match=r"Q4_0 encodes blocks of 32 elements; shape \(3, 5\) holds 15"):
        dequantize(Tensor(np.zeros(18, dtype=np.uint8)), GGMLType.Q4_0, (3, 5))
    with pytest.raises(ValueError, match=r"Q4_0 data of shape \(64,\) takes 36 bytes, got 18"):
        dequantize(Tensor(np.zeros(18, dtype=np.uint8)), GGMLType.Q4_0, (64,))
    with pytest.raises(TypeError, match="dequantize needs the raw bytes as a uint8 tensor"):
        dequantize(Tensor(np.zeros(18, dtype=np.int8)), GGMLType.Q4_0, (32,))
