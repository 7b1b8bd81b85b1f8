"""`QuantizedWeight.run_scales`: the per-run step and offset of a Q4_K / Q5_K weight, decoded once and kept, against
ggml's get_scale_min_k4 written here in numpy; the few-rows product that reads them against gguf-py's dequantization."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from state.ggml_reference import random_blocks

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.llm.quantized import QuantizedWeight, linear
from kiln.tensor.state.quantization import GGML_BLOCKS, GGMLType

K_KINDS = [GGMLType.Q4_K, GGMLType.Q5_K]


def scale_min_k4(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's get_scale_min_k4 for j = 0..7 over (blocks, 12) scale bytes: (blocks, 8) scales and mins."""
    scales, mins = np.zeros((len(packed), 8), np.int64), np.zeros((len(packed), 8), np.int64)
    q = packed.astype(np.int64)
    for j in range(8):
        if j < 4:
            scales[:, j], mins[:, j] = q[:, j] & 63, q[:, j + 4] & 63
        else:
            scales[:, j] = (q[:, j + 4] & 0xF) | ((q[:, j - 4] >> 6) << 4)
            mins[:, j] = (q[:, j + 4] >> 4) | ((q[:, j] >> 6) << 4)
    return scales, mins


@pytest.mark.parametrize("kind", K_KINDS, ids=lambda kind: kind.name)
def test_steps_and_offsets_equal_ggml_fields(kind: GGMLType) -> None:
    rows, cols = 6, 512
    raw = random_blocks(kind, rows * cols // 256, int(kind)).reshape(-1)
    blocks = raw.reshape(-1, GGML_BLOCKS[kind].type_size)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    scales, mins = scale_min_k4(blocks[:, 4:16])
    step, offset = QuantizedWeight(Tensor(raw), kind, (rows, cols)).run_scales()
    assert step.shape == offset.shape == (rows, cols // 32, 1)
    np.testing.assert_array_equal(step.numpy().reshape(-1, 8), d * scales.astype(np.float32))
    np.testing.assert_array_equal(offset.numpy().reshape(-1, 8), dmin * mins.astype(np.float32))


@pytest.mark.parametrize("kind", K_KINDS, ids=lambda kind: kind.name)
def test_the_table_is_decoded_once_and_the_products_stay_exact(kind: GGMLType) -> None:
    rows, cols = 40, 768
    raw = random_blocks(kind, rows * cols // 256, 7).reshape(-1)
    oracle = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(int(kind))).reshape(rows, cols).astype(np.float64)
    weight = QuantizedWeight(Tensor(raw), kind, (rows, cols))
    scale = float(np.abs(oracle).max()) * np.sqrt(cols)
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal((1, cols)).astype(np.float32)
        inputs = Tensor(x).realize()
        GlobalCounters.reset()
        got = linear(inputs, weight).numpy()
        np.testing.assert_allclose(got, x @ oracle.T, rtol=1e-5, atol=1e-6 * scale)
        assert GlobalCounters.kernel_count == (2 if seed == 0 else 1)  # the table's kernel on the first call only


def test_other_formats_have_no_run_table() -> None:
    raw = random_blocks(GGMLType.Q8_0, 4, 0).reshape(-1)
    with pytest.raises(ValueError, match=r"run_scales needs a \(rows, cols\) Q4_K or Q5_K weight, got .*Q8_0"):
        QuantizedWeight(Tensor(raw), GGMLType.Q8_0, (4, 32)).run_scales()
