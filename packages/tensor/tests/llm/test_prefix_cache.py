"""The prefix cache: a prompt that begins with tokens already in the KV cache prefills only the rest, and generates
what a generator with an empty cache generates for the same prompt."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.llm import load_model
from kiln.tensor.llm.generate import Generator
from kiln.tensor.llm.server import make_server
from kiln.tensor.llm.session import ChatModel, load_chat_model

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def generator() -> Generator:
    return Generator(load_model(FIXTURES / "llama" / "llama-q4_0.gguf"))


def recomputed_greedy(prompt: list[int], count: int) -> list[int]:
    """The oracle: argmax of the last position of a cache-free pass over the whole sequence, a fresh model each time."""
    model = load_model(FIXTURES / "llama" / "llama-q4_0.gguf").model
    sequence, produced = list(prompt), []
    for _ in range(count):
        logits = model(Tensor(np.array([sequence], np.int32)), 0).numpy()[0, -1]
        model.reset()
        produced.append(int(np.argmax(logits)))
        sequence.append(produced[-1])
    return produced


def test_second_turn_prefills_only_the_new_tokens(generator: Generator) -> None:
    generator.reset()
    first_prompt = [1, 5, 9, 77, 12, 3]
    first = list(generator.generate(first_prompt, max_tokens=5))
    assert (generator.last_stats.cached_tokens, generator.last_stats.prefill_tokens) == (0, 6)
    # the next turn: the whole conversation so far, then new tokens
    second_prompt = first_prompt + first + [40, 41, 42]
    second = list(generator.generate(second_prompt, max_tokens=5))
    # the cache holds the first prompt and the first four answers (the fifth was sampled but never fed back)
    assert generator.last_stats.cached_tokens == len(first_prompt) + len(first) - 1
    assert generator.last_stats.prefill_tokens == len(second_prompt) - generator.last_stats.cached_tokens
    assert second == recomputed_greedy(second_prompt, 5)


def test_shared_beginning_then_a_different_prompt(generator: Generator) -> None:
    generator.reset()
    system = [1, 30, 31, 32, 33, 34, 35]
    list(generator.generate([*system, 50, 51], max_tokens=3))
    other = [*system, 60, 61, 62]
    got = list(generator.generate(other, max_tokens=4))
    assert (generator.last_stats.cached_tokens, generator.last_stats.prefill_tokens) == (len(system), 3)
    assert got == recomputed_greedy(other, 4)


def test_same_prompt_again_and_a_shorter_one(generator: Generator) -> None:
    generator.reset()
    prompt = [2, 8, 16, 32, 64, 100, 7]
    once = list(generator.generate(prompt, max_tokens=4))
    again = list(generator.generate(prompt, max_tokens=4))
    assert again == once and generator.last_stats.cached_tokens == len(prompt) - 1
    shorter = prompt[:4]
    got = list(generator.generate(shorter, max_tokens=3))
    # rows past the shorter prompt hold the longer one's values: never read, overwritten by the decode steps
    assert generator.last_stats.cached_tokens == 3 and got == recomputed_greedy(shorter, 3)


def test_reset_forgets_and_a_failed_prefill_reuses_nothing_past_it(generator: Generator) -> None:
    prompt = [1, 2, 3, 4, 5]
    list(generator.generate(prompt, max_tokens=2))
    generator.reset()
    assert generator.cached_tokens == []
    list(generator.generate(prompt, max_tokens=2))
    assert generator.last_stats.cached_tokens == 0
    with pytest.raises(ValueError, match="must start inside the prompt"):
        generator.prefill(prompt, Tensor(np.zeros(4, np.float32)), next(iter(generator.prefills)), len(prompt))


@pytest.fixture(scope="module")
def chat_server(chat_model_dir: pathlib.Path) -> Iterator[tuple[object, ChatModel]]:
    openai = pytest.importorskip("openai")
    model = load_chat_model(chat_model_dir)
    httpd, logic = make_server(model, port=0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="unused", max_retries=0)
    yield client, model
    httpd.shutdown()
    httpd.server_close()
    logic.close()


def test_chat_usage_reports_the_cached_prompt_tokens(chat_server: tuple[object, ChatModel]) -> None:
    client, model = chat_server
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
    first = client.chat.completions.create(model=model.name, messages=messages, max_tokens=6, temperature=0)  # type: ignore[attr-defined]
    turn = [
        *messages,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Again."},
    ]
    second = client.chat.completions.create(model=model.name, messages=turn, max_tokens=6, temperature=0)  # type: ignore[attr-defined]
    cached = second.usage.prompt_tokens_details.cached_tokens
    # at least the system prompt and the first question were reused; never the whole new prompt
    assert len(model.encode_chat(messages)) - 1 <= cached < second.usage.prompt_tokens
    assert second.usage.prompt_tokens == len(model.encode_chat(turn))
