"""The server over the paged KV pool (`ChatModel(kv_blocks=...)`), driven by the official `openai` client: the
second turn of a chat and a request sharing another's system prompt prefill only their new tokens
(`usage.prompt_tokens_details.cached_tokens`), and every answer equals the request run alone by the batch-1
generator; `serve` runs over a paged pool by default, sized as the slot layout's memory (`--kv-layout slots` keeps
a cache per request slot)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kiln.tensor.llm.paged_batching import PagedBatchedGenerator
from kiln.tensor.llm.server import ServerLimits, make_server, shut_down
from kiln.tensor.llm.session import ChatModel, load_chat_model

openai = pytest.importorskip("openai")

SYSTEM = "Answer about the fox."


@pytest.fixture(scope="module")
def paged(chat_model_dir: Path) -> ChatModel:
    return load_chat_model(chat_model_dir, kv_blocks=64)


@pytest.fixture(scope="module")
def client(paged: ChatModel) -> Iterator[Any]:
    httpd, _ = make_server(paged, port=0, limits=ServerLimits(max_batch=4, max_queue=8))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="unused", max_retries=0,
                        timeout=120.0)  # fmt: skip
    shut_down(httpd, grace=5.0)
    thread.join(5.0)


def alone(model: ChatModel, messages: list[dict[str, str]], max_tokens: int) -> str:
    """The oracle: the batch-1 generator with an empty cache."""
    model.generator.reset()
    return model.complete(model.encode_chat(messages), max_tokens=max_tokens, temperature=0.0).text


def test_the_second_turn_reuses_the_first_turns_blocks(paged: ChatModel, client: Any) -> None:
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "the fox"}]
    answer = client.chat.completions.create(model=paged.name, messages=first, max_tokens=6, temperature=0)
    assert answer.choices[0].message.content == alone(paged, first, 6)
    second = [*first, {"role": "assistant", "content": answer.choices[0].message.content},
              {"role": "user", "content": "a dog"}]  # fmt: skip
    reply = client.chat.completions.create(model=paged.name, messages=second, max_tokens=6, temperature=0)
    assert reply.choices[0].message.content == alone(paged, second, 6)
    cached, prompt = reply.usage.prompt_tokens_details.cached_tokens, reply.usage.prompt_tokens
    assert len(paged.encode_chat(first)) <= cached < prompt  # at least the first turn's prompt came from its blocks
    assert isinstance(paged.batched(4, 64), PagedBatchedGenerator)


def test_concurrent_requests_sharing_a_system_prompt(paged: ChatModel, client: Any) -> None:
    questions = ["numbers 12345", "def main", "return range", "the dog jumps"]
    conversations = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}] for q in questions]

    def ask(messages: list[dict[str, str]]) -> Any:
        return client.chat.completions.create(model=paged.name, messages=messages, max_tokens=8, temperature=0)

    answers = [ask(conversations[0])]  # its prefill writes the system prompt's blocks
    with ThreadPoolExecutor(3) as pool:
        answers += list(pool.map(ask, conversations[1:]))
    for messages, answer in zip(conversations, answers, strict=True):
        assert answer.choices[0].message.content == alone(paged, messages, 8)
    first = paged.encode_chat(conversations[0])
    for messages, answer in zip(conversations[1:], answers[1:], strict=True):
        ids = paged.encode_chat(messages)
        shared = next(i for i, (a, b) in enumerate(zip(first, ids, strict=False)) if a != b)
        assert shared > 10 and answer.usage.prompt_tokens_details.cached_tokens >= shared
    batched = paged.batched(4, 64)
    assert isinstance(batched, PagedBatchedGenerator) and batched.held_blocks() == [0]  # all blocks went back


def test_a_request_larger_than_the_whole_pool_is_a_400(chat_model_dir: Path) -> None:
    tiny = load_chat_model(chat_model_dir, kv_blocks=3)  # 3 blocks of 16 rows; one is the scratch block
    httpd, _ = make_server(tiny, port=0, limits=ServerLimits(max_batch=2, max_queue=4))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        small = openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="unused",
                              max_retries=0, timeout=120.0)  # fmt: skip
        messages = [{"role": "user", "content": "the quick brown fox jumps over the lazy dog " * 4}]
        with pytest.raises(openai.BadRequestError) as caught:
            small.chat.completions.create(model=tiny.name, messages=messages, max_tokens=40, temperature=0)
        assert "block" in str(caught.value)
        fits = small.chat.completions.create(model=tiny.name, messages=[{"role": "user", "content": "fox"}],
                                             max_tokens=3, temperature=0)  # fmt: skip
        assert fits.choices[0].message.content == alone(tiny, [{"role": "user", "content": "fox"}], 3)
    finally:
        shut_down(httpd, grace=5.0)
        thread.join(5.0)


def test_requests_arriving_together_share_their_system_prompt(paged: ChatModel, client: Any) -> None:
    system = "You answer in the voice of a patient old librarian, briefly."  # not cached by another test
    questions = ["numbers 12345", "def main", "return range", "the dog jumps"]
    conversations = [[{"role": "system", "content": system}, {"role": "user", "content": q}] for q in questions]
    with ThreadPoolExecutor(4) as pool:
        answers = list(
            pool.map(
                lambda messages: client.chat.completions.create(
                    model=paged.name, messages=messages, max_tokens=6, temperature=0
                ),
                conversations,
            )
        )
    for messages, answer in zip(conversations, answers, strict=True):
        assert answer.choices[0].message.content == alone(paged, messages, 6)
    first, *others = [paged.encode_chat(messages) for messages in conversations]
    shared = min(next(i for i, (a, b) in enumerate(zip(first, ids, strict=False)) if a != b) for ids in others)
    reused = sorted(answer.usage.prompt_tokens_details.cached_tokens for answer in answers)
    assert shared > 16 and all(count >= shared // 16 * 16 for count in reused[1:])  # all but the first took its blocks


def _serve_process(chat_model_dir: Path, *options: str) -> tuple[subprocess.Popen[str], str, str]:
    """`serve` in a child process: (the process, its URL, its KV cache line)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kiln.tensor.llm", "serve", "--model", str(chat_model_dir), "--port", "0", *options],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stderr is not None
    match = re.search(r"http://127\.0\.0\.1:(\d+)/v1", process.stderr.readline())
    assert match
    return process, f"http://127.0.0.1:{match.group(1)}/v1", process.stderr.readline().strip()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_serve_kv_layouts(paged: ChatModel, chat_model_dir: Path) -> None:
    conflicting = [sys.executable, "-m", "kiln.tensor.llm", "serve", "--model", str(chat_model_dir), "--kv-layout",
                   "slots", "--kv-blocks", "40"]  # fmt: skip
    refused = subprocess.run(conflicting, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--kv-blocks" in refused.stderr
    blocks = 8 * -(-paged.context_length // 16) + 8 + 1  # the default --max-batch 8 slots' rows, a copy each, scratch
    for options, line in (
        ((), f"KV cache: a paged pool of {blocks} blocks of 16 rows shared by the requests"),
        (("--kv-layout", "slots"), f"KV cache: 8 request slots of {paged.context_length} rows each"),
    ):
        process, url, shown = _serve_process(chat_model_dir, *options)
        try:
            assert shown == line
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120.0)
            messages = [{"role": "user", "content": "the quick brown"}]
            answer = client.chat.completions.create(model=paged.name, messages=messages, max_tokens=5, temperature=0)
            assert answer.choices[0].message.content == alone(paged, messages, 5)
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=60) == 0
