"""kiln.tensor.llm logits against transformers' (recorded by fixtures/make_llm_fixtures.py), per format."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.llm import load_model
from kiln.tensor.llm.quantized import QuantizedWeight

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def logits(path: pathlib.Path) -> np.ndarray:
    loaded = load_model(path)
    prompt = np.load(FIXTURES / path.relative_to(FIXTURES).parts[0] / "expected.npz")["prompt"]
    return loaded.model(Tensor(prompt.reshape(1, -1).astype(np.int32)), 0).numpy()[0]


@pytest.mark.parametrize(
    ("model", "file", "key"),
    [
        ("llama", "", "logits"),  # two shards with an index, Llama 3 rope scaling, untied head
        ("qwen2", "", "logits"),  # attention biases, tied embeddings
        ("qwen3", "", "logits"),  # QK-norm, head_dim != dim / heads
        ("mixtral", "", "logits"),  # top-2 of 4 experts
        ("qwen2_moe", "", "logits"),  # unnormalized top-2 plus a gated shared expert, Qwen expert names
        ("qwen2_moe", "qwen2_moe-f32.gguf", "logits_f32"),
        ("qwen3", "model.safetensors", "logits"),  # a single file with config.json beside it
        ("llama", "llama-f32.gguf", "logits_f32"),  # GGUF: llama.cpp's permuted q/k rows, rope_freqs
        ("qwen2", "qwen2-f32.gguf", "logits_f32"),
        ("qwen3", "qwen3-f32.gguf", "logits_f32"),
        ("mixtral", "mixtral-f32.gguf", "logits_f32"),
        ("llama", "llama-f16.gguf", "logits_f16"),
        ("llama", "llama-bf16.gguf", "logits_bf16"),
        ("qwen2_yarn", "", "logits"),  # YaRN rope scaling (frequency blend and attention factor)
    ],
)
def test_float_logits_match_transformers(model: str, file: str, key: str) -> None:
    expected = np.load(FIXTURES / model / "expected.npz")[key]
    np.testing.assert_allclose(logits(FIXTURES / model / file), expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize(
    ("model", "kind", "bound"),
    [("llama", "q8_0", 0.01), ("llama", "q4_0", 0.1), ("llama", "q4_1", 0.1), ("qwen3", "q8_0", 0.01)],
)
def test_quantized_logits(model: str, kind: str, bound: float) -> None:
    """Tight against transformers run on gguf.quants' numpy dequantization of the same blocks; within `bound` of
    the float model."""
    path = FIXTURES / model / f"{model}-{kind}.gguf"
    loaded = load_model(path)
    quantized = [w for w in loaded.model.weights.values() if isinstance(w, QuantizedWeight)]
    assert quantized and all(w.ggml_type.name.lower() == kind for w in quantized)  # kept encoded in memory
    got = logits(path)
    recorded = np.load(FIXTURES / model / "expected.npz")
    np.testing.assert_allclose(got, recorded[f"logits_{kind}"], atol=2e-5, rtol=0)
    error = np.abs(got - recorded["logits"]).max()
    assert 0 < error < bound


def test_missing_and_corrupt_files(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nowhere\.gguf"):
        load_model(tmp_path / "nowhere.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUX" + bytes(20))
    with pytest.raises(ValueError, match=r"bad\.gguf.*not a GGUF file"):
        load_model(bad)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\x00" * 3)
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        load_model(folder)
    (folder / "config.json").write_text((FIXTURES / "qwen2" / "config.json").read_text())
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        load_model(folder)
