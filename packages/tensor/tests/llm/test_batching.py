"""Continuous batching: sequences that join and leave a batched decode loop produce what each produces alone (the
batch-1 `Generator`, itself checked against transformers), and the recorded transformers tokens directly."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kiln.tensor.llm import load_model
from kiln.tensor.llm.batching import MIN_PREFIX_REUSE, BatchedGenerator, Sequence
from kiln.tensor.llm.generate import Generator
from kiln.tensor.llm.sampling import SamplingMode

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def run_all(batched: BatchedGenerator, requests: list[dict], join_at: list[int]) -> list[list[int]]:  # type: ignore[type-arg]
    """Runs `requests` through the batch, request i joining before step join_at[i] (waiting for a free slot)."""
    sequences: list[Sequence | None] = [None] * len(requests)
    step = 0
    while any(s is None or not s.finished for s in sequences):
        for index, request in enumerate(requests):
            if sequences[index] is None and join_at[index] <= step and batched.free_slots():
                sequences[index] = batched.start(**request)
        batched.step()
        step += 1
        assert step < 500
    return [s.tokens for s in sequences if s is not None]


def alone(generator: Generator, request: dict) -> list[int]:  # type: ignore[type-arg]
    generator.reset()
    options = dict(request)
    return list(generator.generate(options.pop("prompt_ids"), **options))


@pytest.mark.parametrize(("model", "file"), [("llama", "llama-q4_0.gguf"), ("qwen3", "qwen3-f32.gguf"),
                                             ("mixtral", "")])  # fmt: skip
def test_greedy_sequences_joining_and_leaving_equal_each_alone(model: str, file: str) -> None:
    loaded = load_model(FIXTURES / model / file)
    vocab, rng = loaded.config.vocab_size, np.random.default_rng(3)
    requests = [{"prompt_ids": rng.integers(0, vocab, size=n).tolist(), "max_tokens": m}
                for n, m in [(3, 9), (17, 4), (1, 12), (40, 7), (8, 1), (5, 15), (23, 6), (2, 10)]]  # fmt: skip
    expected = [alone(Generator(loaded), request) for request in requests]
    batched = BatchedGenerator(loaded, slots=3)
    got = run_all(batched, requests, join_at=[0, 0, 2, 3, 3, 5, 9, 9])
    assert got == expected
    # greedy steps only, one per width: the smallest power of two covering the highest running slot, or all 3
    assert set(batched.steps) <= {(SamplingMode(greedy=True), width) for width in (1, 2, 3)}


def test_transformers_tokens_from_a_slot_among_others() -> None:
    expected = np.load(FIXTURES / "llama" / "expected.npz")
    loaded = load_model(FIXTURES / "llama")
    batched = BatchedGenerator(loaded, slots=4)
    others = [{"prompt_ids": [5, 6, 7, 8, 9][: n + 1], "max_tokens": 20 + 5 * n} for n in range(3)]
    target = {"prompt_ids": expected["prompt"].tolist(), "max_tokens": 32}
    got = run_all(batched, [*others, target], join_at=[0, 1, 2, 4])
    assert got[-1] == expected["greedy"].tolist()


def test_seeded_sampling_per_slot_equals_each_alone() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    requests = [
        {"prompt_ids": [1, 5, 9], "max_tokens": 10, "temperature": 0.9, "top_k": 20, "seed": 1},
        {"prompt_ids": [2, 3], "max_tokens": 12, "temperature": 0.0},
        {"prompt_ids": [7, 8, 9, 10], "max_tokens": 8, "temperature": 1.3, "top_p": 0.8, "seed": 2},
        {"prompt_ids": [4], "max_tokens": 9, "temperature": 0.7, "seed": 3},
    ]
    expected = [alone(Generator(loaded), request) for request in requests]
    got = run_all(BatchedGenerator(loaded, slots=4), requests, join_at=[0, 0, 1, 2])
    assert got == expected


def test_slot_prefix_cache_and_free_slots_keep_their_rows() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    batched = BatchedGenerator(loaded, slots=2)
    first_prompt = [1, 30, 31, 32, 33, 34]
    # the other request decodes on in slot 1 while slot 0 is free: its steps must not touch slot 0's rows
    first, _ = run_all(batched, [{"prompt_ids": first_prompt, "max_tokens": 4},
                                 {"prompt_ids": [9, 8, 7], "max_tokens": 12}], join_at=[0, 0])  # fmt: skip
    second_prompt = [*first_prompt, *first, 50, 51]
    sequence = batched.start(second_prompt, max_tokens=5)
    assert sequence.slot == 0 and sequence.stats.cached_tokens == len(first_prompt) + len(first) - 1
    assert sequence.stats.prefill_tokens == len(second_prompt) - sequence.stats.cached_tokens
    while not sequence.finished:
        batched.step()
    assert sequence.tokens == alone(Generator(loaded), {"prompt_ids": second_prompt, "max_tokens": 5})


def test_full_slots_cancel_and_bad_requests() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    batched = BatchedGenerator(loaded, slots=2)
    a = batched.start([1, 2], max_tokens=50)
    assert (a.slot, batched.width()) == (0, 1)  # alone: a step of batch 1
    b = batched.start([3, 4], max_tokens=50)
    assert (b.slot, batched.width(), batched.free_slots()) == (1, 2, 0)
    with pytest.raises(RuntimeError, match="all 2 sequence slots are running"):
        batched.start([5], max_tokens=3)
    batched.step()
    batched.cancel(a)
    assert a.finished and batched.free_slots() == 1 and [s for s, _ in batched.step()] == [b]
    assert batched.width() == 2  # slot 1 is running, slot 0 free: its position writes no row
    assert batched.start([5], max_tokens=0).tokens == []
    with pytest.raises(ValueError, match="the prompt is empty"):
        batched.start([], max_tokens=3)
    with pytest.raises(ValueError, match="slots must be an int >= 1, got 0"):
        BatchedGenerator(loaded, slots=0)


def test_a_sequence_stops_at_the_end_of_the_context() -> None:
    loaded = load_model(FIXTURES / "qwen2", max_context=12)
    batched = BatchedGenerator(loaded, slots=2)
    long, short = batched.start(list(range(3, 13)), max_tokens=50), batched.start([3, 4], max_tokens=4)
    while not (long.finished and short.finished):
        batched.step()
    assert len(long.tokens) == 3 and long.position == 12  # 10 prompt rows + 2 fed tokens, the third not fed
    assert short.tokens == alone(Generator(loaded), {"prompt_ids": [3, 4], "max_tokens": 4})


def test_a_request_takes_a_higher_slot_only_for_a_long_cached_beginning() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q4_0.gguf")
    batched = BatchedGenerator(loaded, slots=4)
    short, long = [1, 2, 3, 4, 5], list(range(10, 10 + MIN_PREFIX_REUSE + 2))
    held = [batched.start(prompt, max_tokens=2) for prompt in ([7, 7], short, long)]
    batched.step()  # all three end: slots 0, 1, 2 hold their rows
    assert [sequence.slot for sequence in held] == [0, 1, 2] and batched.free_slots() == 4
    # 4 cached tokens in slot 1 are not worth a step of width 2: the lowest slot, prefilled whole
    again = batched.start([*short[:4], 99], max_tokens=1)
    assert (again.slot, again.stats.cached_tokens) == (0, 0)
    # the long beginning is: slot 2, its rows reused
    turn = batched.start([*long, 42, 43], max_tokens=3)
    assert (turn.slot, turn.stats.cached_tokens) == (2, len(long))
    while not turn.finished:
        batched.step()
    assert turn.tokens == alone(Generator(loaded), {"prompt_ids": [*long, 42, 43], "max_tokens": 3})
