"""Generation with the KV cache and the jitted decode step against full-sequence recomputation."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.llm import load_model
from kiln.tensor.llm.generate import Generator, sample
from kiln.tensor.llm.sampling import SamplingMode

GREEDY = SamplingMode(greedy=True)

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("model", "file"),
    [("llama", ""), ("qwen3", "qwen3-f32.gguf"), ("mixtral", ""), ("qwen2_moe", "qwen2_moe-f32.gguf")],
)
def test_greedy_32_tokens_equal_transformers(model: str, file: str) -> None:
    """transformers' tokens were recorded by full recomputation (argmax of the whole sequence's logits each step)."""
    expected = np.load(FIXTURES / model / "expected.npz")
    generator = Generator(load_model(FIXTURES / model / file))
    got = list(generator.generate(expected["prompt"].tolist(), max_tokens=32))
    assert got == expected["greedy"].tolist()
    stats = generator.last_stats
    assert (stats.prefill_tokens, stats.decode_tokens) == (len(expected["prompt"]), 31)
    assert stats.prefill_seconds > 0 and stats.decode_seconds > 0


def test_decode_is_captured_once_and_matches_recomputation() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    generator = Generator(loaded)
    prompt = [1, 5, 9, 77]
    captures, kernels, tokens = [], [], []
    for token in generator.generate(prompt, max_tokens=8):
        tokens.append(token)
        captures.append(id(generator.step(GREEDY).captured))
        kernels.append(GlobalCounters.kernel_count)
        GlobalCounters.reset()
    # the step is captured on its second call (token 3) and replayed from then on: one capture, same kernel count
    assert len(set(captures[3:])) == 1 and generator.step(GREEDY).captured is not None
    assert len(set(kernels[4:])) == 1
    # oracle: argmax of the last position of a cache-free run over the whole sequence (a fresh model each time)
    fresh = load_model(FIXTURES / "llama" / "llama-q4_0.gguf").model
    sequence = list(prompt)
    for token in tokens:
        logits = fresh(Tensor(np.array([sequence], np.int32)), 0).numpy()[0, -1]
        assert token == int(np.argmax(logits))
        fresh.reset()
        sequence.append(token)


def test_stop_ids_seed_and_errors() -> None:
    generator = Generator(load_model(FIXTURES / "qwen2"))
    greedy = list(generator.generate([3, 4, 5], max_tokens=6))
    assert list(generator.generate([3, 4, 5], max_tokens=6, stop_ids={greedy[1]})) == greedy[:2]
    assert list(generator.generate([3, 4, 5], max_tokens=6, temperature=0.7, top_k=1)) == greedy
    first = list(generator.generate([3, 4, 5], max_tokens=6, temperature=1.5, seed=11))
    assert list(generator.generate([3, 4, 5], max_tokens=6, temperature=1.5, seed=11)) == first
    assert list(generator.generate([3, 4, 5], max_tokens=0)) == []
    context = generator.config.context_length
    with pytest.raises(ValueError, match=f"more than the context length {context}"):
        generator.generate([1] * (context + 1), max_tokens=1)
    with pytest.raises(ValueError, match="max_tokens >= 0"):
        generator.generate([1], max_tokens=-1)
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 128\)"):
        generator.generate([128], max_tokens=1)


def test_sampling_distribution() -> None:
    """Draw frequencies against the tempered softmax restricted by top-k / top-p, computed independently."""
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0], np.float32)
    rng = np.random.default_rng(0)
    draws = np.bincount([sample(logits, 0.5, 3, 1.0, rng) for _ in range(4000)], minlength=5) / 4000
    weights = np.exp(logits[:3] / 0.5)
    np.testing.assert_allclose(draws[:3], weights / weights.sum(), atol=0.03)
    assert draws[3:].sum() == 0
    probs = np.exp(logits) / np.exp(logits).sum()  # 0.575, 0.211, 0.128...: top_p 0.7 keeps the first two
    draws = np.bincount([sample(logits, 1.0, 0, 0.7, rng) for _ in range(4000)], minlength=5) / 4000
    np.testing.assert_allclose(draws[:2], probs[:2] / probs[:2].sum(), atol=0.03)
    assert draws[2:].sum() == 0
    assert sample(logits, 0.0, 0, 1.0, rng) == 0
