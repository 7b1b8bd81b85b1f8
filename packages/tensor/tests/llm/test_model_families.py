"""Phi-3, OLMo 2, Gemma 2, Gemma 3, Mistral with a sliding window and DeepSeek-V2 (MLA + MoE) against transformers:
the logits of a 12-token prompt and the greedy tokens of full recomputation, recorded by
fixtures/make_family_fixtures.py from tiny random models (safetensors, and an F32 GGUF under llama.cpp's names)."""

from __future__ import annotations

import dataclasses
import pathlib

import gguf
import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.llm import load_model
from kiln.tensor.llm.batching import BatchedGenerator, Sequence
from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.families import split_rows
from kiln.tensor.llm.generate import Generator
from kiln.tensor.llm.model import Transformer
from kiln.tensor.llm.quantized import QuantizedWeight

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
FAMILIES = ["phi3", "olmo2", "gemma2", "gemma3", "mistral_sw", "deepseek2"]


def prompt_logits(path: pathlib.Path, family: str) -> np.ndarray:
    prompt = np.load(FIXTURES / family / "expected.npz")["prompt"]
    return load_model(path).model(Tensor(prompt.reshape(1, -1).astype(np.int32)), 0).numpy()[0]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("gguf", [False, True], ids=["safetensors", "gguf"])
def test_prompt_logits_match_transformers(family: str, gguf: bool) -> None:
    path = FIXTURES / family / (f"{family}-f32.gguf" if gguf else "")
    expected = np.load(FIXTURES / family / "expected.npz")["logits"]
    np.testing.assert_allclose(prompt_logits(path, family), expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize(
    ("family", "file"),
    [("phi3", ""), ("olmo2", "olmo2-f32.gguf"), ("gemma2", ""), ("gemma3", "gemma3-f32.gguf"),
     ("mistral_sw", "mistral_sw-f32.gguf"), ("deepseek2", "")],
)  # fmt: skip
def test_greedy_tokens_through_the_kv_cache_equal_transformers(family: str, file: str) -> None:
    """Prefill, then one decoded token at a time through the KV cache (past the sliding windows: 12 + 12 tokens
    against windows of 4 and 5), against transformers' full recomputation."""
    expected = np.load(FIXTURES / family / "expected.npz")
    generator = Generator(load_model(FIXTURES / family / file))
    got = list(generator.generate(expected["prompt"].tolist(), max_tokens=len(expected["greedy"])))
    assert got == expected["greedy"].tolist()


def run_all(batched: BatchedGenerator, requests: list[dict[str, object]]) -> list[list[int]]:
    """Runs `requests` through the batch, each joining one step after the one before it."""
    sequences: list[Sequence | None] = [None] * len(requests)
    step = 0
    while any(s is None or not s.finished for s in sequences):
        if step < len(requests):
            sequences[step] = batched.start(**requests[step])  # type: ignore[arg-type]
        batched.step()
        step += 1
        assert step < 200
    return [s.tokens for s in sequences if s is not None]


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "deepseek2"])
def test_batched_decode_gives_transformers_tokens_among_other_sequences(family: str) -> None:
    """Every sequence at its own position in one batched decode step: the sliding windows and Gemma 3's local
    rotary follow each slot's position, and MLA's latent cache keeps each slot's rows."""
    expected = np.load(FIXTURES / family / "expected.npz")
    batched = BatchedGenerator(load_model(FIXTURES / family), slots=3)
    others = [{"prompt_ids": [5, 6, 7, 8, 9, 10, 11][: 3 + 2 * n], "max_tokens": 14 + n} for n in range(2)]
    target = {"prompt_ids": expected["prompt"].tolist(), "max_tokens": len(expected["greedy"])}
    got = run_all(batched, [*others, target])
    assert got[-1] == expected["greedy"].tolist()


def test_the_sliding_window_is_what_makes_the_match() -> None:
    """Without its window (every earlier key visible), the Mistral model's logits leave transformers' from the
    position where the window first hides a key: the window is not a no-op of this test."""
    loaded = load_model(FIXTURES / "mistral_sw")
    expected = np.load(FIXTURES / "mistral_sw" / "expected.npz")
    window = loaded.config.sliding_window
    assert window == 5
    unwindowed = Transformer(dataclasses.replace(loaded.config, sliding_window=0), loaded.model.weights)
    got = unwindowed(Tensor(expected["prompt"].reshape(1, -1).astype(np.int32)), 0).numpy()[0]
    np.testing.assert_allclose(got[:window], expected["logits"][:window], atol=1e-4, rtol=0)
    assert np.abs(got[window:] - expected["logits"][window:]).max() > 1e-2


def test_family_configs_read_from_config_json_and_gguf_agree() -> None:
    for family in FAMILIES:
        hf = load_model(FIXTURES / family).config
        gguf = load_model(FIXTURES / family / f"{family}-f32.gguf").config
        for field in ("sliding_window", "sliding_layers", "attn_softcap", "final_softcap", "post_norm", "pre_norm",
                      "qk_norm", "qk_norm_full", "activation", "embedding_scale", "kv_lora_rank", "q_lora_rank",
                      "v_head_dim", "shared_expert_dim", "expert_weights_scale", "leading_dense_layers",
                      "rope_local_theta", "rope_theta", "tie_embeddings"):  # fmt: skip
            assert getattr(hf, field) == getattr(gguf, field), (family, field)
        assert (hf.attention_scale is None) == (gguf.attention_scale is None), family
        if hf.attention_scale is not None:
            assert hf.attention_scale == pytest.approx(gguf.attention_scale, rel=1e-6), family
    # llama.cpp's llama layout rotates pairs (its converter permutes the q / k rows); DeepSeek rotates pairs in both
    assert [load_model(FIXTURES / "mistral_sw" / f).config.rope_interleaved for f in ("", "mistral_sw-f32.gguf")] == [
        False,
        True,
    ]
    assert load_model(FIXTURES / "deepseek2").config.rope_interleaved
    gemma3 = load_model(FIXTURES / "gemma3").config
    assert gemma3.sliding_layers == (True, True, False) and gemma3.rope_local_theta == 10000.0
    assert gemma3.rope_scaling == {"rope_type": "linear", "factor": 2.0}


def gemma2_metadata(layers: int) -> dict[str, object]:
    return {
        "general.architecture": "gemma2", "gemma2.embedding_length": 4608, "gemma2.attention.head_count": 32,
        "gemma2.attention.head_count_kv": 16, "gemma2.attention.key_length": 128, "gemma2.block_count": layers,
        "gemma2.feed_forward_length": 36864, "gemma2.vocab_size": 256000, "gemma2.context_length": 8192,
    }  # fmt: skip


def test_gemma2_gguf_defaults_follow_llama_cpp() -> None:
    """Without the optional keys: llama.cpp's soft-caps (50, 30), window 4096, every other layer sliding, and the
    query scale of the 27B model (46 layers: dim / heads) against the head size elsewhere."""
    big = LlamaConfig.from_gguf_metadata(gemma2_metadata(46))
    assert (big.attn_softcap, big.final_softcap, big.sliding_window) == (50.0, 30.0, 4096)
    assert big.sliding_layers[:4] == (True, False, True, False)
    assert big.attention_scale == pytest.approx(144**-0.5)
    assert LlamaConfig.from_gguf_metadata(gemma2_metadata(42)).attention_scale == pytest.approx(128**-0.5)


def test_unsupported_family_options_are_refused() -> None:
    base = {"vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}
    deepseek = base | {"model_type": "deepseek_v2", "kv_lora_rank": 4, "qk_nope_head_dim": 2, "qk_rope_head_dim": 2,
                       "v_head_dim": 2, "n_routed_experts": 2, "moe_intermediate_size": 4}  # fmt: skip
    with pytest.raises(NotImplementedError, match="'noaux_tc'"):
        LlamaConfig.from_hf_config(deepseek | {"topk_method": "noaux_tc"})
    with pytest.raises(ValueError, match="n_group dividing the 2 experts"):
        LlamaConfig.from_hf_config(deepseek | {"topk_method": "group_limited_greedy", "n_group": 3, "topk_group": 1})
    with pytest.raises(NotImplementedError, match=r"partial_rotary_factor 0\.5"):
        LlamaConfig.from_hf_config(base | {"model_type": "phi3", "rope_parameters": {"partial_rotary_factor": 0.5}})
    with pytest.raises(NotImplementedError, match="'gelu'"):
        LlamaConfig.from_hf_config(base | {"model_type": "gemma2", "hidden_activation": "gelu"})
    with pytest.raises(ValueError, match="lacks 'kv_lora_rank'"):
        LlamaConfig.from_hf_config({k: v for k, v in deepseek.items() if k != "kv_lora_rank"})


@pytest.mark.parametrize("kind", [gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0])
def test_fused_quantized_matrices_split_by_rows(kind: gguf.GGMLQuantizationType) -> None:
    """Phi-3's fused q/k/v (and gate/up) GGUF matrices split into byte ranges of their blocks, still quantized, each
    decoding to its rows of gguf-py's numpy dequantization of the whole."""
    rng = np.random.default_rng(5)
    values = rng.standard_normal((48 + 16 + 16, 256)).astype(np.float32)
    raw = gguf.quants.quantize(values, kind)
    oracle = gguf.quants.dequantize(raw, kind).reshape(values.shape)
    fused = QuantizedWeight(Tensor(raw.reshape(-1)), int(kind), values.shape)
    parts = split_rows(fused, (48, 16, 16), "blk.0.attn_qkv.weight")
    assert [p.shape for p in parts] == [(48, 256), (16, 256), (16, 256)]
    assert all(isinstance(p, QuantizedWeight) for p in parts)
    got = np.concatenate([p.dequantized().numpy() for p in parts if isinstance(p, QuantizedWeight)])
    np.testing.assert_array_equal(got, oracle)
    with pytest.raises(ValueError, match=r"attn_qkv\.weight has shape \(80, 256\), expected \(96, cols\)"):
        split_rows(fused, (48, 24, 24), "blk.0.attn_qkv.weight")


@pytest.mark.parametrize("gguf_file", [False, True], ids=["safetensors", "gguf"])
def test_phi3_longrope_picks_its_factors_by_the_context(gguf_file: bool) -> None:
    """Within the original 64 positions (a cache of 64): the short factors, as transformers uses them for a prompt
    that fits; a cache past them (the trained 256): the long factors, as transformers uses them for an 80-token
    prompt. Both with the attention factor sqrt(1 + ln(256 / 64) / ln(64))."""
    path = FIXTURES / "phi3_longrope" / ("phi3_longrope-f32.gguf" if gguf_file else "")
    expected = np.load(FIXTURES / "phi3_longrope" / "expected.npz")
    short = load_model(path, max_context=64)
    assert short.config.rope_scaling["rope_type"] == "longrope"
    got = short.model(Tensor(expected["prompt"].reshape(1, -1).astype(np.int32)), 0).numpy()[0]
    np.testing.assert_allclose(got, expected["logits"], atol=2e-5, rtol=0)
    long = load_model(path)
    got = long.model(Tensor(expected["long_prompt"].reshape(1, -1).astype(np.int32)), 0).numpy()[0]
    np.testing.assert_allclose(got, expected["long_logits"], atol=2e-5, rtol=0)
    short.model.reset()
    got = short.model(Tensor(expected["long_prompt"][:64].reshape(1, -1).astype(np.int32)), 0).numpy()[0]
    assert np.abs(got - expected["long_logits"][:64]).max() > 1e-2  # the factors differ: the choice is tested


def test_deepseek2_gguf_with_kv_b_split_per_head() -> None:
    """llama.cpp's current converter splits kv_b into attn_k_b (heads, rank, nope) and attn_v_b (heads, v, rank) and
    writes the cached widths under key_length / value_length: kiln then scores the latents with the queries taken
    into the latent space (absorbed), the same logits and tokens as transformers' expanded keys and values."""
    path = FIXTURES / "deepseek2" / "deepseek2-split-f32.gguf"
    expected = np.load(FIXTURES / "deepseek2" / "expected.npz")
    loaded = load_model(path)
    assert loaded.config.kv_b_split and (loaded.config.qk_nope_head_dim, loaded.config.v_head_dim) == (16, 12)
    assert "blk.1.attn_k_b.weight" in loaded.model.weights and "blk.1.attn_kv_b.weight" not in loaded.model.weights
    np.testing.assert_allclose(prompt_logits(path, "deepseek2"), expected["logits"], atol=2e-5, rtol=0)
    got = list(Generator(loaded).generate(expected["prompt"].tolist(), max_tokens=len(expected["greedy"])))
    assert got == expected["greedy"].tolist()


def test_deepseek2_group_limited_routing() -> None:
    """Full DeepSeek-V2's routing (top-2 of 8 experts within the best 1 of 4 groups, a group scored by its best
    expert), with a plain query projection (no q_lora): logits and greedy tokens against transformers; routing
    over every group instead gives other logits, so the groups are what makes the match."""
    folder = FIXTURES / "deepseek2_groups"
    expected = np.load(folder / "expected.npz")
    loaded = load_model(folder)
    assert (loaded.config.expert_groups, loaded.config.expert_groups_used, loaded.config.q_lora_rank) == (4, 1, 0)
    np.testing.assert_allclose(prompt_logits(folder, "deepseek2_groups"), expected["logits"], atol=2e-5, rtol=0)
    got = list(Generator(loaded).generate(expected["prompt"].tolist(), max_tokens=len(expected["greedy"])))
    assert got == expected["greedy"].tolist()
    ungrouped = Transformer(dataclasses.replace(loaded.config, expert_groups=0), loaded.model.weights)
    logits = ungrouped(Tensor(expected["prompt"].reshape(1, -1).astype(np.int32)), 0).numpy()[0]
    assert np.abs(logits - expected["logits"]).max() > 1e-3
