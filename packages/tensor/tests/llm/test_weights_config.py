"""LlamaConfig parsing and load_model's errors for incomplete or inconsistent files."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

from kiln.tensor.llm import LlamaConfig, load_model

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def test_configs_of_both_formats_agree() -> None:
    for model in ("llama", "qwen2", "qwen3", "mixtral", "qwen2_moe"):
        gguf_file = next((FIXTURES / model).glob("*-f32.gguf"))
        from_gguf, from_hf = load_model(gguf_file).config, load_model(FIXTURES / model).config
        for field in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "hidden_dim", "head_dim"):
            assert getattr(from_gguf, field) == getattr(from_hf, field), (model, field)
        for field in ("context_length", "attention_bias", "qk_norm", "n_experts", "n_experts_used"):
            assert getattr(from_gguf, field) == getattr(from_hf, field), (model, field)
        if from_hf.n_experts:
            assert from_gguf.norm_topk_prob == from_hf.norm_topk_prob == (model == "mixtral")
        assert from_gguf.max_seq_len == 128 and from_gguf.eos_token_id == 2  # written by the recorder
        assert from_hf.eos_token_id == json.loads((FIXTURES / model / "config.json").read_text())["eos_token_id"]
        assert from_gguf.rope_interleaved == (from_gguf.architecture == "llama") and not from_hf.rope_interleaved
    qwen2 = load_model(FIXTURES / "qwen2").config
    assert qwen2.tie_embeddings and qwen2.attention_bias and not qwen2.qk_norm


def test_rope_frequencies() -> None:
    hf = json.loads((FIXTURES / "qwen2" / "config.json").read_text())
    base = LlamaConfig.from_hf_config(hf)
    plain, scale = base.inv_freq()
    np.testing.assert_allclose(plain, 1e6 ** -(np.arange(0, 16, 2) / 16))
    assert scale == 1.0
    linear = LlamaConfig.from_hf_config(hf | {"rope_scaling": {"rope_type": "linear", "factor": 4.0}})
    np.testing.assert_allclose(linear.inv_freq()[0], plain / 4)
    with pytest.raises(NotImplementedError, match="'dynamic'"):
        LlamaConfig.from_hf_config(hf | {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}).inv_freq()


def test_incomplete_configs() -> None:
    with pytest.raises(ValueError, match="lacks 'hidden_size'"):
        LlamaConfig.from_hf_config({"vocab_size": 8, "num_attention_heads": 2})
    with pytest.raises(ValueError, match=r"no general\.architecture"):
        LlamaConfig.from_gguf_metadata({})
    with pytest.raises(ValueError, match=r"lacks llama\.embedding_length"):
        LlamaConfig.from_gguf_metadata({"general.architecture": "llama"})


def test_missing_shard_and_weights(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "llama"
    shutil.copytree(FIXTURES / "llama", folder)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model-00002-of-00002\.safetensors not found"):
        load_model(folder)
    (folder / "model.safetensors.index.json").unlink()  # no index: the one shard left, which lacks layers
    with pytest.raises(ValueError, match="lacks weights"):
        load_model(folder)
    (folder / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a safetensors index"):
        load_model(folder)
    with pytest.raises(ValueError, match=r"expected a \.gguf file"):
        load_model(FIXTURES / "llama" / "config.json")
