"""`BatchedGenerator.join`: a joining prompt is prefilled one chunk per step, between the running streams' decodes.

Oracle: each request run alone through `Generator` (greedy and seeded sampling), as in test_batching."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kiln.tensor.llm import load_model
from kiln.tensor.llm.batching import BatchedGenerator
from kiln.tensor.llm.generate import Generator

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def alone(loaded: object, prompt: list[int], **options: object) -> list[int]:
    generator = Generator(loaded)  # type: ignore[arg-type]
    return list(generator.generate(prompt, **options))  # type: ignore[arg-type]


def test_a_long_prompt_joins_while_a_stream_keeps_its_token_per_step() -> None:
    loaded = load_model(FIXTURES / "llama")
    vocab, rng = loaded.config.vocab_size, np.random.default_rng(11)
    short = rng.integers(0, vocab, size=4).tolist()
    long = rng.integers(0, vocab, size=45).tolist()  # 6 chunks of 8: the last one partial
    batched = BatchedGenerator(loaded, slots=2, prefill_chunk=8)
    running = batched.start(short, max_tokens=30)
    joining = batched.join(long, max_tokens=6, temperature=0.8, seed=5)
    assert joining.tokens == [] and batched.decoding == [running] and batched.active == [running, joining]
    chunks = 0
    while not running.finished or not joining.finished:
        before = len(running.tokens)
        waiting = bool(batched.joining)
        produced = batched.step()
        chunks += waiting
        if not running.finished and waiting:
            # the running stream gets a token in every step that prefills a chunk: no gap of two chunks
            assert len(running.tokens) == before + 1, f"no token for the running stream in chunk {chunks}"
        if joining.tokens and chunks == 6:
            assert (joining, joining.tokens[0]) in produced
            chunks += 1  # its first token was reported once, by the step of its last chunk
    assert chunks == 7
    assert joining.stats.prefill_tokens == 45 and joining.stats.prefill_seconds > 0
    assert running.tokens == alone(loaded, short, max_tokens=30)
    assert joining.tokens == alone(loaded, long, max_tokens=6, temperature=0.8, seed=5)


def test_joining_requests_prefill_oldest_first_and_equal_each_alone() -> None:
    loaded = load_model(FIXTURES / "llama")
    vocab, rng = loaded.config.vocab_size, np.random.default_rng(12)
    prompts = [rng.integers(0, vocab, size=n).tolist() for n in (20, 3, 9)]
    batched = BatchedGenerator(loaded, slots=3, prefill_chunk=4)
    sequences = [batched.join(prompt, max_tokens=5) for prompt in prompts]
    first_steps: list[int] = []
    step = 0
    while not all(sequence.finished for sequence in sequences):
        produced = batched.step()
        step += 1
        first_steps += [sequences.index(s) for s, _ in produced if len(s.tokens) == 1 and s in sequences]
        assert step < 100
    assert first_steps == [0, 1, 2]  # 5 chunks, then 1, then 3: one chunk per step, oldest first
    assert [s.tokens for s in sequences] == [alone(loaded, p, max_tokens=5) for p in prompts]


def test_a_cancelled_joining_request_frees_its_slot_and_keeps_the_others_exact() -> None:
    loaded = load_model(FIXTURES / "llama")
    vocab, rng = loaded.config.vocab_size, np.random.default_rng(13)
    batched = BatchedGenerator(loaded, slots=2, prefill_chunk=4)
    running = batched.start(rng.integers(0, vocab, size=6).tolist(), max_tokens=12)
    joining = batched.join(rng.integers(0, vocab, size=30).tolist(), max_tokens=4)
    batched.step()
    batched.cancel(joining)
    assert batched.joining == [] and batched.free_slots() == 1 and joining.finished and joining.tokens == []
    later = rng.integers(0, vocab, size=7).tolist()
    second = batched.join(later, max_tokens=5)
    while not running.finished or not second.finished:
        batched.step()
    assert running.tokens == alone(loaded, running.prompt, max_tokens=12)
    assert second.tokens == alone(loaded, later, max_tokens=5)


def test_join_checks_its_request_and_the_free_slots() -> None:
    loaded = load_model(FIXTURES / "llama")
    batched = BatchedGenerator(loaded, slots=1, prefill_chunk=4)
    with pytest.raises(ValueError, match="max_tokens"):
        batched.join([1, 2], max_tokens=-1)
    batched.join([1, 2, 3], max_tokens=2)
    with pytest.raises(RuntimeError, match="all 1 sequence slots"):
        batched.join([1, 2], max_tokens=2)
    assert batched.decode() == []  # nothing decodes while the only sequence prefills
    ((sequence, token),) = batched.prefill()  # 3 tokens: one chunk
    assert batched.joining == [] and sequence.tokens == [token]
    assert batched.prefill() == [] and batched.decode() == [(sequence, sequence.tokens[1])] and sequence.finished
