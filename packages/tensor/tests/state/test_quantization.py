"""ggml block decoders (kiln kernels) against a per-element numpy reading of the block layouts and gguf-py."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from kiln.tensor import Tensor, dtypes
from kiln.tensor.state import GGML_BLOCKS, GGMLType, dequantize

# byte offsets of each type's float16 fields (set to finite values: random bytes could spell inf / nan)
HALF_FIELDS = {
    GGMLType.Q4_0: (0,),
    GGMLType.Q4_1: (0, 2),
    GGMLType.Q5_0: (0,),
    GGMLType.Q5_1: (0, 2),
    GGMLType.Q8_0: (0,),
    GGMLType.Q2_K: (80, 82),
    GGMLType.Q3_K: (108,),
    GGMLType.Q4_K: (0, 2),
    GGMLType.Q5_K: (0, 2),
    GGMLType.Q6_K: (208,),
    GGMLType.Q8_K: (),
}


def random_blocks(kind: GGMLType, blocks: int, seed: int) -> np.ndarray:
    """`blocks` blocks of random bytes with finite float16 (and, for Q8_K, float32) scale fields."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (blocks, GGML_BLOCKS[kind].type_size), dtype=np.uint8)
    for offset in HALF_FIELDS[kind]:
        raw[:, offset : offset + 2] = rng.uniform(-2, 2, (blocks, 1)).astype(np.float16).view(np.uint8)
    if kind == GGMLType.Q8_K:
        raw[:, 0:4] = rng.uniform(-2, 2, (blocks, 1)).astype(np.float32).view(np.uint8)
    return raw


def _half(block: np.ndarray, offset: int) -> float:
    return float(block[offset : offset + 2].view(np.float16)[0])


def _scale_min_k4(scales: np.ndarray, j: int) -> tuple[int, int]:
    """ggml's get_scale_min_k4: the j-th 6-bit (scale, min) pair of the 12 packed bytes of a Q4_K / Q5_K block."""
    if j < 4:
        return int(scales[j] & 63), int(scales[j + 4] & 63)
    return int((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4)), int((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))


def reference_block(kind: GGMLType, block: np.ndarray) -> list[float]:
    """One block decoded element by element, straight from the ggml struct descriptions."""
    out: list[float] = []
    if kind in (GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1):
        has_min = kind in (GGMLType.Q4_1, GGMLType.Q5_1)
        five = kind in (GGMLType.Q5_0, GGMLType.Q5_1)
        d, m = _half(block, 0), _half(block, 2) if has_min else 0.0
        qh_at = 4 if has_min else 2
        qh = int.from_bytes(bytes(block[qh_at : qh_at + 4]), "little") if five else 0
        qs = block[qh_at + 4 if five else qh_at :]
        for e in range(32):
            q = int(qs[e % 16] >> (4 * (e // 16))) & 0xF
            q |= ((qh >> e) & 1) << 4
            offset = 0 if has_min else (16 if five else 8)
            out.append(d * (q - offset) + m)
    elif kind == GGMLType.Q8_0:
        out = [_half(block, 0) * int(v) for v in block[2:34].view(np.int8)]
    elif kind == GGMLType.Q8_K:
        d = float(block[0:4].view(np.float32)[0])
        out = [d * int(v) for v in block[4:260].view(np.int8)]
    elif kind == GGMLType.Q2_K:
        d, dmin = _half(block, 80), _half(block, 82)
        for e in range(256):
            q = (int(block[16 + 32 * (e // 128) + e % 32]) >> (2 * ((e % 128) // 32))) & 3
            scale = int(block[e // 16])
            out.append(d * (scale & 0xF) * q - dmin * (scale >> 4))
    elif kind == GGMLType.Q3_K:
        d = _half(block, 108)
        for e in range(256):
            s = e // 16
            low = (int(block[96 + s % 8]) >> (4 * (s // 8))) & 0xF
            high = (int(block[96 + 8 + s % 4]) >> (2 * (s // 4))) & 3
            q = (int(block[32 + 32 * (e // 128) + e % 32]) >> (2 * ((e % 128) // 32))) & 3
            mask_bit = (int(block[e % 32]) >> (4 * (e // 128) + (e % 128) // 32)) & 1
            out.append(d * ((low | (high << 4)) - 32) * (q - (0 if mask_bit else 4)))
    elif kind in (GGMLType.Q4_K, GGMLType.Q5_K):
        d, dmin = _half(block, 0), _half(block, 2)
        qs_at = 16 if kind == GGMLType.Q4_K else 48
        for e in range(256):
            scale, minimum = _scale_min_k4(block[4:16], e // 32)
            q = (int(block[qs_at + 32 * (e // 64) + e % 32]) >> (4 * ((e % 64) // 32))) & 0xF
            if kind == GGMLType.Q5_K:
                q += 16 * ((int(block[16 + e % 32]) >> (e // 32)) & 1)
            out.append(d * scale * q - dmin * minimum)
    elif kind == GGMLType.Q6_K:
        d = _half(block, 208)
        scales = block[192:208].view(np.int8)
        for e in range(256):
            h, k, lane = e // 128, (e % 128) // 32, e % 32
            low = (int(block[64 * h + 32 * (k % 2) + lane]) >> (4 * (k // 2))) & 0xF
            high = (int(block[128 + 32 * h + lane]) >> (2 * k)) & 3
            out.append(d * int(scales[e // 16]) * ((low | (high << 4)) - 32))
    return out


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
