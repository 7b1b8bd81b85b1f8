"""A load test of the continuously batching server, driven by the official `openai` client (test-only dependency):
16 concurrent streaming clients with mixed prompt lengths and completion limits, a quarter of them leaving
mid-stream. Every completed response equals the same request run alone by the batch-1 generator (greedy, itself
checked against transformers), the requests did decode together, the memory the server holds stays bounded (no KV
cache, thread or job left behind), and the server keeps serving."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kiln.tensor.llm.batching import Sequence
from kiln.tensor.llm.server import LLMHTTPServer, ServerLimits, make_server, shut_down
from kiln.tensor.llm.session import ChatModel

openai = pytest.importorskip("openai")

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "and", "numbers", "12345", "code",
         "range", "def", "main", "return"]  # fmt: skip


@pytest.fixture
def server(model: ChatModel) -> Iterator[tuple[LLMHTTPServer, Any]]:
    httpd, _ = make_server(model, port=0, limits=ServerLimits(max_batch=8, max_queue=16))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="unused", max_retries=0,
                           timeout=60.0)  # fmt: skip
    try:
        yield httpd, client
    finally:
        shut_down(httpd, grace=5.0)
        thread.join(5.0)


def alone(model: ChatModel, ids: list[int], max_tokens: int) -> tuple[str, str]:
    """The oracle: the text and finish reason of the request run by itself (`ChatModel.complete`: the batch-1
    generator, no server)."""
    model.generator.reset()
    result = model.complete(ids, max_tokens=max_tokens, temperature=0.0)
    return result.text, result.finish_reason


def request(index: int) -> dict[str, Any]:
    """Client `index`'s request: a chat or a raw prompt of 1 to 19 words, 4 to 40 new tokens."""
    words = " ".join(WORDS[(index * 7 + k) % len(WORDS)] for k in range(1 + (index * 5) % 19))
    options: dict[str, Any] = {"max_tokens": 4 + (index * 9) % 37, "temperature": 0}
    if index % 2:
        return {**options, "messages": [{"role": "user", "content": words}]}
    return {**options, "prompt": words}


def expected_answer(model: ChatModel, body: dict[str, Any]) -> tuple[str, str]:
    """What the server must answer: the request alone, its new tokens capped at the room left in the context."""
    ids = model.encode_chat(body["messages"]) if "messages" in body else model.encode_prompt(body["prompt"])
    assert len(ids) < model.context_length
    return alone(model, ids, min(body["max_tokens"], model.context_length - len(ids)))


def test_sixteen_streaming_clients_some_leaving(model: ChatModel, server: tuple[LLMHTTPServer, Any]) -> None:
    httpd, client = server
    logic, batched = httpd.logic, model.batched(8)
    bodies = [request(i) for i in range(16)]
    leaving = {3, 6, 10, 13}  # these read two chunks, then close the stream
    expected = [expected_answer(model, body) for body in bodies]
    widths: list[int] = []  # how many sequences each decode step ran
    original_step = batched.step

    def step() -> list[tuple[Sequence, int]]:
        widths.append(len(batched.active))
        return original_step()

    batched.step = step  # type: ignore[method-assign]
    cache_bytes, threads_before = model.loaded.model.cache_bytes(), threading.active_count()
    start = threading.Barrier(16)

    def stream(index: int) -> tuple[str, str | None]:
        body = bodies[index]
        start.wait()
        if "messages" in body:
            chunks = client.chat.completions.create(model=model.name, stream=True, **body)
        else:
            chunks = client.completions.create(model=model.name, stream=True, **body)
        text, reason = "", None
        for count, chunk in enumerate(chunks):
            choice = chunk.choices[0]
            text += (choice.delta.content or "") if "messages" in body else choice.text
            reason = choice.finish_reason or reason
            if index in leaving and count == 2:
                chunks.close()
                return text, None
        return text, reason

    try:
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(stream, range(16)))
    finally:
        del batched.step
    for index, (text, reason) in enumerate(results):
        if index in leaving:
            assert expected[index][0].startswith(text), index
        else:
            assert (text, reason) == expected[index], index
    assert max(widths) >= 6  # they decoded together (at most 8 at once: the rest waited for slots)
    deadline = time.monotonic() + 5.0
    while (logic.pending or logic.running) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (logic.pending, logic.running, batched.free_slots(), logic.jobs.qsize()) == (0, 0, 8, 0)
    # bounded memory: the KV caches were allocated once, and no connection thread is left behind
    assert model.loaded.model.cache_bytes() == cache_bytes
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= threads_before
    # the server keeps serving, and the clients that stayed were counted as finished
    body = request(20)
    answer = client.completions.create(model=model.name, **body)
    assert (answer.choices[0].text, answer.choices[0].finish_reason) == expected_answer(model, body)
    finished = [reason for index, (_, reason) in enumerate(results) if index not in leaving]
    assert len(finished) == 12 and logic.served == 17


def test_a_client_leaving_frees_its_slot_within_a_step(model: ChatModel, server: tuple[LLMHTTPServer, Any]) -> None:
    _, client = server
    batched = model.batched(8)
    steps = 0
    original_step = batched.step

    def paced() -> list[tuple[Sequence, int]]:  # slow steps, so that a step count measures the reaction
        nonlocal steps
        time.sleep(0.05)
        steps += 1
        return original_step()

    batched.step = paced  # type: ignore[method-assign]
    try:
        chunks = client.completions.create(model=model.name, stream=True, prompt="the quick brown fox", max_tokens=80,
                                           temperature=0)  # fmt: skip
        iterator = iter(chunks)
        for _ in range(3):
            next(iterator)
        assert batched.free_slots() == 7
        chunks.close()
        steps_at_close = steps
        deadline = time.monotonic() + 5.0
        while batched.free_slots() < 8 and time.monotonic() < deadline:
            time.sleep(0.002)
        assert batched.free_slots() == 8 and steps - steps_at_close <= 2  # the step running then, and the next
        assert steps < 20
    finally:
        del batched.step
