"""Continuous batching over the paged KV pool (kiln.tensor.llm.paged_batching): every sequence produces what it
produces alone (the batch-1 `Generator`, itself checked against transformers) or the recorded transformers tokens,
while prompts share their blocks, sliding layers give theirs back and a full pool refuses a request cleanly."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kiln.tensor.llm import load_model
from kiln.tensor.llm.batching import BatchedGenerator, Sequence
from kiln.tensor.llm.generate import Generator
from kiln.tensor.llm.kv_pool import KVPoolExhausted
from kiln.tensor.llm.paged_batching import PagedBatchedGenerator
from kiln.tensor.llm.weights import LoadedModel

from .test_batching import run_all

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def alone(loaded: LoadedModel, prompt: list[int], max_tokens: int) -> list[int]:
    return list(Generator(loaded).generate(prompt, max_tokens=max_tokens))


def finish(batched: BatchedGenerator, *sequences: Sequence) -> None:
    while not all(sequence.finished for sequence in sequences):
        batched.step()


@pytest.mark.parametrize(("model", "file"), [("llama", "llama-q4_0.gguf"), ("qwen3", "qwen3-f32.gguf")])
def test_greedy_sequences_joining_and_leaving_equal_each_alone(model: str, file: str) -> None:
    loaded = load_model(FIXTURES / model / file)
    vocab, rng = loaded.config.vocab_size, np.random.default_rng(3)
    requests = [{"prompt_ids": rng.integers(0, vocab, size=n).tolist(), "max_tokens": m}
                for n, m in [(3, 9), (17, 4), (1, 12), (40, 7), (8, 1), (5, 15), (23, 6), (2, 10)]]  # fmt: skip
    expected = [alone(loaded, request["prompt_ids"], request["max_tokens"]) for request in requests]
    batched = PagedBatchedGenerator(loaded, slots=3, prefill_chunk=16, kv_blocks=40, block_size=4)
    got = run_all(batched, requests, join_at=[0, 0, 2, 3, 3, 5, 9, 9])
    assert got == expected
    assert batched.held_blocks() == [0]  # every sequence ended: its blocks went back
    assert set(batched.steps) == set()  # only the paged steps ran
    assert {width for _, width, _ in batched.paged_steps} <= {1, 2, 3}


def test_seeded_sampling_and_logprobs_equal_each_alone() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    requests = [
        {"prompt_ids": [1, 5, 9], "max_tokens": 10, "temperature": 0.9, "top_k": 20, "seed": 1},
        {"prompt_ids": [2, 3], "max_tokens": 12, "temperature": 0.0, "logprobs": 2},
        {"prompt_ids": [7, 8, 9, 10], "max_tokens": 8, "temperature": 1.3, "top_p": 0.8, "seed": 2},
        {"prompt_ids": [1, 5, 9, 4], "max_tokens": 9, "temperature": 0.7, "seed": 3},
    ]
    expected = []
    for request in requests:
        options = {key: value for key, value in request.items() if key not in ("prompt_ids", "logprobs")}
        expected.append(list(Generator(loaded).generate(request["prompt_ids"], **options)))  # type: ignore[arg-type]
    batched = PagedBatchedGenerator(loaded, slots=4, prefill_chunk=8, kv_blocks=32, block_size=4)
    got = run_all(batched, requests, join_at=[0, 0, 1, 2])
    assert got == expected


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "mistral_sw", "deepseek2"])
def test_transformers_tokens_among_other_sequences(family: str) -> None:
    """Sliding windows (their own pool, released behind the window), Gemma 3's local rotary and MLA's latent rows
    through the paged pool, against the tokens transformers recorded."""
    expected = np.load(FIXTURES / family / "expected.npz")
    batched = PagedBatchedGenerator(load_model(FIXTURES / family), slots=3, prefill_chunk=8, kv_blocks=24, block_size=4)
    others = [{"prompt_ids": [5, 6, 7, 8, 9, 10, 11][: 3 + 2 * n], "max_tokens": 14 + n} for n in range(2)]
    target = {"prompt_ids": expected["prompt"].tolist(), "max_tokens": len(expected["greedy"])}
    got = run_all(batched, [*others, target], join_at=[0, 1, 2])
    assert got[-1] == expected["greedy"].tolist()


def test_two_requests_sharing_a_system_prompt_store_it_once() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    system = list(range(10, 30))  # 20 tokens: 5 blocks of 4
    first_prompt, second_prompt = [*system, 40, 41], [*system, 50, 51, 52]
    batched = PagedBatchedGenerator(loaded, slots=2, prefill_chunk=16, kv_blocks=40, block_size=4)
    first = batched.start(first_prompt, max_tokens=3)
    assert batched.held_blocks() == [6]  # 22 prompt tokens
    second = batched.start(second_prompt, max_tokens=3)
    assert (second.stats.cached_tokens, second.stats.prefill_tokens) == (len(system), 3)
    assert second.slot == 1  # another slot than the one that holds the system prompt's rows
    assert batched.held_blocks() == [5 + 1 + 1]  # the system prompt's 5 blocks once, then a block each
    finish(batched, first, second)
    assert first.tokens == alone(loaded, first_prompt, 3)
    assert second.tokens == alone(loaded, second_prompt, 3)


def test_requests_arriving_together_compute_their_shared_prompt_once() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    system = list(range(10, 30))  # 20 tokens: 5 blocks of 4, prefilled by the first in chunks of 8
    prompts = [[*system, 40, 41], [*system, 50, 51, 52], [*system, 60], [7, 8, 9]]
    batched = PagedBatchedGenerator(loaded, slots=4, prefill_chunk=8, kv_blocks=40, block_size=4)
    sequences = [batched.join(prompt, max_tokens=4) for prompt in prompts]
    assert batched.waiting == sequences[1:]  # the others wait for the first's system prompt blocks (FIFO)
    finish(batched, *sequences)
    stats = [(sequence.stats.cached_tokens, sequence.stats.prefill_tokens) for sequence in sequences]
    assert stats == [(0, 22), (20, 3), (20, 1), (0, 3)]
    for sequence, prompt in zip(sequences, prompts, strict=True):
        assert sequence.tokens == alone(loaded, prompt, 4)
    assert batched.held_blocks() == [0]


def test_the_second_turn_prefills_only_the_new_tokens() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    batched = PagedBatchedGenerator(loaded, slots=2, prefill_chunk=8, kv_blocks=40, block_size=4)
    prompt = [1, 5, 9, 77, 12, 3, 8]
    first = batched.start(prompt, max_tokens=6)
    finish(batched, first)
    turn = [*prompt, *first.tokens, 40, 41, 42]
    filler = batched.start([99, 98, 97], max_tokens=4)  # slot 0 is taken: the next turn lands in slot 1
    second = batched.start(turn, max_tokens=5)
    assert second.slot == 1
    # the cache holds the prompt and the first five answers (the sixth was sampled but never fed back)
    assert (second.stats.cached_tokens, second.stats.prefill_tokens) == (len(prompt) + 5, 4)
    finish(batched, filler, second)
    assert second.tokens == alone(loaded, turn, 5)


def test_a_sliding_window_models_second_turn_reuses_the_blocks_its_window_sees() -> None:
    """Mistral with a window of 5 on every layer: the next turn takes the cached blocks its window still sees (the
    earlier ones were released) and prefills only its new tokens, producing what it produces alone."""
    loaded = load_model(FIXTURES / "mistral_sw")
    batched = PagedBatchedGenerator(loaded, slots=2, prefill_chunk=4, kv_blocks=64, block_size=2)
    prompt = [5, 6, 7, 8, 9, 10, 11, 12, 13]
    first = batched.start(prompt, max_tokens=6)
    finish(batched, first)
    turn = [*prompt, *first.tokens, 40, 41, 42]
    second = batched.start(turn, max_tokens=5)
    # the cache holds the prompt and the first five answers (the sixth was sampled but never fed back)
    assert (second.stats.cached_tokens, second.stats.prefill_tokens) == (len(prompt) + 5, 4)
    finish(batched, second)
    assert second.tokens == alone(loaded, turn, 5)


def test_a_pool_smaller_than_the_demand_queues_or_refuses() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    batched = PagedBatchedGenerator(loaded, slots=4, prefill_chunk=8, kv_blocks=9, block_size=4)  # 8 blocks
    running = batched.start([3, 4, 5, 6, 7], max_tokens=15)  # 20 positions: 5 blocks promised
    waiting = batched.start([8, 9, 10], max_tokens=13)  # 16 positions: 4 blocks, 3 are free
    assert batched.waiting == [waiting] and waiting.tokens == [] and waiting.slot == -1
    assert batched.free_slots() == 2  # one slot taken, one kept for the waiting request
    with pytest.raises(KVPoolExhausted, match=r"may need 43 positions of KV memory, more than the paged pool holds "
                                              r"\(8 blocks of 4 rows\)"):  # fmt: skip
        batched.start([1, 2, 3], max_tokens=40)
    assert batched.free_slots() == 2 and batched.waiting == [waiting]  # the refusal took nothing
    steps = 0
    while not running.finished:
        batched.step()
        steps += 1
        assert waiting.tokens == [] or running.finished
    finish(batched, waiting)
    assert running.tokens == alone(loaded, [3, 4, 5, 6, 7], 15)
    assert waiting.tokens == alone(loaded, [8, 9, 10], 13)
    assert batched.held_blocks() == [0] and batched.waiting == []


def test_sliding_window_layers_free_their_blocks() -> None:
    """Mistral with a window of 5 on every layer: a long generation holds the blocks its window spans only."""
    loaded = load_model(FIXTURES / "mistral_sw")
    assert loaded.config.sliding_window == 5
    batched = PagedBatchedGenerator(loaded, slots=2, prefill_chunk=4, kv_blocks=64, block_size=2)
    prompt = [5, 6, 7, 8, 9, 10, 11, 12, 13]
    sequence = batched.start(prompt, max_tokens=30)
    most_held = 0
    while not sequence.finished:
        batched.step()
        most_held = max(most_held, *batched.held_blocks())
    assert sequence.tokens == alone(loaded, prompt, 30)
    # 38 positions fill 19 blocks of 2; the window (5 keys) and a chunk (4 rows) span at most 5 of them
    assert most_held <= 5
    assert batched.cache.groups[0].pool.blocks <= 2 * 5 + 1  # the sliding pool is sized to the windows
