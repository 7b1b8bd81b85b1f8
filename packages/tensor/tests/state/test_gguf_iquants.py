"""IQ4_NL, IQ4_XS, MXFP4, TQ1_0 and TQ2_0 decoding (kiln kernels) against gguf-py's numpy dequantization.

Random raw blocks with valid scales (finite float16, E8M0 exponents in a sane range) go through kiln's decoders,
gguf-py's `quants.dequantize`, a GGUF file written by gguf-py and read back by kiln, and the LLM's QuantizedWeight.
"""

from __future__ import annotations

import pathlib

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.llm import load_model
from kiln.tensor.llm.quantized import QuantizedWeight, linear
from kiln.tensor.state import GGML_BLOCKS, GGMLType, dequantize, gguf_load, gguf_load_raw

NEW_TYPES = [GGMLType.IQ4_NL, GGMLType.IQ4_XS, GGMLType.MXFP4, GGMLType.TQ1_0, GGMLType.TQ2_0]
HALF_SCALE_AT = {GGMLType.IQ4_NL: 0, GGMLType.IQ4_XS: 0, GGMLType.TQ1_0: 52, GGMLType.TQ2_0: 64}


def random_raw(kind: GGMLType, blocks: int, seed: int) -> np.ndarray:
    """(blocks, type_size) random bytes whose scale fields hold valid scales: a float16 of moderate size, or an E8M0
    exponent between 2 ** -20 and 2 ** 20 (and the subnormal-producing 0 and 1 once each when there is room)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (blocks, GGML_BLOCKS[kind].type_size), dtype=np.uint8)
    if kind == GGMLType.MXFP4:
        raw[:, 0] = rng.integers(107, 148, blocks)
        raw[: min(blocks, 2), 0] = [0, 1][: min(blocks, 2)]
    else:
        at = HALF_SCALE_AT[kind]
        scales = (rng.standard_normal(blocks) * 0.1).astype(np.float16)
        raw[:, at : at + 2] = scales.view(np.uint8).reshape(blocks, 2)
    return raw


def oracle(raw: np.ndarray, kind: GGMLType, shape: tuple[int, ...]) -> np.ndarray:
    return np.asarray(quants.dequantize(raw, GGMLQuantizationType[kind.name]), np.float32).reshape(shape)


@pytest.mark.parametrize("kind", NEW_TYPES, ids=lambda kind: kind.name)
@pytest.mark.parametrize("layout", [(1, 1), (3, 2), (2, 2, 1)], ids=["one", "rows", "stacked"])
def test_random_blocks_equal_gguf_py(kind: GGMLType, layout: tuple[int, ...]) -> None:
    block = GGML_BLOCKS[kind]
    shape = (*layout[:-1], layout[-1] * block.block_size)
    count = int(np.prod(shape)) // block.block_size
    raw = random_raw(kind, count, seed=int(kind) * 10 + len(layout))
    got = dequantize(Tensor(raw.reshape(-1)), kind, shape).numpy()
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_array_equal(got, oracle(raw, kind, shape))


def test_iq4_nl_codes_read_the_non_linear_table() -> None:
    # d = 0.5; byte j holds code j (low nibble) and code 15 - j (high nibble): elements 0..15 then 15..0
    raw = np.concatenate(
        [
            np.float16(0.5).reshape(1).view(np.uint8),
            np.arange(16, dtype=np.uint8) | (15 - np.arange(16, dtype=np.uint8)) << 4,
        ]
    )
    table = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
    got = dequantize(Tensor(raw.astype(np.uint8)), GGMLType.IQ4_NL, (32,)).numpy()
    np.testing.assert_array_equal(got, 0.5 * np.concatenate([table, table[::-1]]))


def test_mxfp4_reads_e2m1_values_times_the_e8m0_scale() -> None:
    # OCP MX spec: E2M1 codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and bit 3 is the sign; E8M0 byte e is 2 ** (e - 127)
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    codes = np.arange(16, dtype=np.uint8)
    for exponent in (0, 1, 120, 127, 130, 200):
        raw = np.concatenate([np.array([exponent], np.uint8), codes | (codes[::-1] << 4)])
        got = dequantize(Tensor(raw), GGMLType.MXFP4, (32,)).numpy()
        scale = np.float32(2.0 ** (exponent - 127))
        np.testing.assert_array_equal(got, scale * np.concatenate([e2m1, e2m1[::-1]]), err_msg=str(exponent))


@pytest.mark.parametrize("kind", [GGMLType.MXFP4, GGMLType.TQ1_0, GGMLType.TQ2_0], ids=lambda kind: kind.name)
def test_quantized_values_round_trip(kind: GGMLType) -> None:
    rng = np.random.default_rng(int(kind))
    if kind == GGMLType.MXFP4:
        values = rng.standard_normal((3, 64)).astype(np.float32)
    else:  # ternary: values already in {-1, 0, 1} times a per-block scale come back exactly
        values = (rng.integers(-1, 2, (3, 256)) * np.float32(0.75)).astype(np.float32)
        values[:, 0] = 0.75  # the block maximum sets the scale
    raw = quants.quantize(values, GGMLQuantizationType[kind.name])
    got = dequantize(Tensor(raw.reshape(-1)), kind, values.shape).numpy()
    np.testing.assert_array_equal(got, oracle(raw, kind, values.shape))
    if kind == GGMLType.MXFP4:  # within one E2M1 step (a quarter of the block's largest magnitude) of the input
        step = np.abs(values).reshape(-1, 32).max(axis=1, keepdims=True) / 3
        assert (np.abs(got - values).reshape(-1, 32) <= step).all()
    else:
        np.testing.assert_allclose(got, values, rtol=1e-3)


def write_gguf(path: pathlib.Path, rows: int, cols: int) -> dict[str, np.ndarray]:
    """A GGUF file (gguf-py's writer) holding one (rows, cols) matrix of each new type; gguf-py's decoded values."""
    writer = gguf.GGUFWriter(str(path), "llama")
    expected: dict[str, np.ndarray] = {}
    for kind in NEW_TYPES:
        block = GGML_BLOCKS[kind]
        raw = random_raw(kind, rows * cols // block.block_size, seed=int(kind)).reshape(rows, -1)
        writer.add_tensor(f"w.{kind.name}", raw, raw_dtype=GGMLQuantizationType[kind.name])
        expected[f"w.{kind.name}"] = oracle(raw, kind, (rows, cols))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


def test_gguf_file_tensors_feed_a_matmul(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "iquants.gguf"
    rows, cols = 6, 512
    expected = write_gguf(path, rows, cols)
    _, tensors = gguf_load(path)
    x = np.random.default_rng(1).standard_normal((3, cols)).astype(np.float32)
    for name, matrix in expected.items():
        assert tensors[name].shape == (rows, cols), name
        np.testing.assert_array_equal(tensors[name].numpy(), matrix, err_msg=name)
        product = (Tensor(x) @ tensors[name].T).numpy()
        np.testing.assert_allclose(product, x @ matrix.T, rtol=1e-5, atol=1e-4, err_msg=name)


def test_quantized_weight_linear_decodes_the_new_types(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "iquants.gguf"
    rows, cols = 5, 256
    expected = write_gguf(path, rows, cols)
    _, raw_tensors = gguf_load_raw(path)
    x = np.random.default_rng(2).standard_normal((2, cols)).astype(np.float32)
    for name, matrix in expected.items():
        raw, kind, shape = raw_tensors[name]
        weight = QuantizedWeight(raw, kind, shape)
        inputs = Tensor(x).realize()
        GlobalCounters.reset()
        np.testing.assert_allclose(linear(inputs, weight).numpy(), x @ matrix.T, rtol=1e-5, atol=1e-4)
        assert GlobalCounters.kernel_count <= 2, name  # decoded inside the product, not to a float matrix first
        np.testing.assert_array_equal(weight.row(3).numpy(), matrix[3:4], err_msg=name)


@pytest.mark.parametrize("kind", NEW_TYPES, ids=lambda kind: kind.name)
def test_block_size_errors_name_the_type(kind: GGMLType) -> None:
    block = GGML_BLOCKS[kind]
    with pytest.raises(ValueError, match=rf"{kind.name} encodes blocks of {block.block_size} elements; shape \(3, 5\)"):
        dequantize(Tensor(np.zeros(block.type_size, np.uint8)), kind, (3, 5))
    with pytest.raises(ValueError, match=rf"{kind.name} data of shape \(2, {block.block_size}\) takes"):
        dequantize(Tensor(np.zeros(block.type_size, np.uint8)), kind, (2, block.block_size))
    half = block.block_size // 2
    with pytest.raises(ValueError, match=rf"{kind.name} rows of {half} are not whole {block.block_size}-blocks"):
        QuantizedWeight(Tensor(np.zeros(block.type_size, np.uint8)), kind, (2, half))


IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def iq4_nl_blocks(values: np.ndarray) -> np.ndarray:
    """A plain IQ4_NL encoding of float rows (gguf-py has no IQ4_NL quantizer): per block of 32, d = -max|x| / 127
    signed so the largest magnitude lands on level -127, each value on its nearest level."""
    blocks = values.reshape(-1, 32)
    largest = blocks[np.arange(len(blocks)), np.abs(blocks).argmax(axis=1)]
    scale = (largest / -127).astype(np.float16)
    ratio = blocks / np.where(scale == 0, 1, scale.astype(np.float32))[:, None]
    codes = np.abs(ratio[:, :, None] - IQ4_LEVELS).argmin(axis=2).astype(np.uint8)
    packed = codes[:, :16] | (codes[:, 16:] << 4)
    return np.concatenate([scale[:, None].view(np.uint8), packed], axis=1)


def test_llama_with_iq4_nl_and_mxfp4_weights() -> None:
    # the f32 llama fixture (its logits equal transformers', tests/llm/test_model_logits.py) with every matrix
    # re-encoded, alternately IQ4_NL and MXFP4, and kept encoded: its logits equal those of the float model given
    # gguf-py's decoding of the same bytes, and stay near the unquantized model's
    fixtures = pathlib.Path(__file__).parent.parent / "llm" / "fixtures" / "llama"
    quantized = load_model(fixtures / "llama-f32.gguf")
    decoded = load_model(fixtures / "llama-f32.gguf")
    prompt = Tensor(np.load(fixtures / "expected.npz")["prompt"].reshape(1, -1).astype(np.int32))
    original = decoded.model(prompt, 0).numpy()
    encoded: dict[str, object] = {}
    floats: dict[str, object] = {}
    matrices = [(n, w) for n, w in quantized.model.state_dict().items() if len(w.shape) == 2]
    for number, (name, weight) in enumerate(matrices):
        assert isinstance(weight, Tensor)
        values = weight.numpy()
        kind = GGMLType.IQ4_NL if number % 2 == 0 else GGMLType.MXFP4
        if kind == GGMLType.IQ4_NL:
            raw = iq4_nl_blocks(values)
        else:
            raw = quants.quantize(values, GGMLQuantizationType.MXFP4)
        encoded[name] = QuantizedWeight(Tensor(raw.reshape(-1)), kind, values.shape)
        floats[name] = Tensor(oracle(raw, kind, values.shape))
    quantized.model.load_state_dict(encoded, strict=False)
    decoded.model.load_state_dict(floats, strict=False)
    kinds = {w.ggml_type for w in quantized.model.weights.values() if isinstance(w, QuantizedWeight)}
    assert kinds == {GGMLType.IQ4_NL, GGMLType.MXFP4} and len(encoded) == 16
    got = quantized.model(prompt, 0).numpy()
    np.testing.assert_allclose(got, decoded.model(prompt, 0).numpy(), atol=2e-5, rtol=0)
    assert 1e-3 < np.abs(got - original).max() < 0.2  # the encoded weights are the ones used
