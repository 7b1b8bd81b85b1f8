"""The server prefills a joining prompt `ServerLimits.prefill_chunk` tokens per step, between the decode steps of the
running streams: a long prompt arriving does not stop them, and every answer equals its request run alone by the
batch-1 generator (the oracle of test_server_batching)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kiln.tensor.llm.batching import Sequence
from kiln.tensor.llm.server import ServerLimits, make_server, shut_down
from kiln.tensor.llm.session import ChatModel, load_chat_model

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "code", "range", "main"]


def post(url: str, body: dict[str, Any]) -> urllib.request.Request:
    return urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})


def alone(model: ChatModel, prompt: str, max_tokens: int) -> str:
    model.generator.reset()
    return model.complete(model.encode_prompt(prompt), max_tokens=max_tokens, temperature=0.0).text


def test_a_long_prompt_joins_between_the_steps_of_a_running_stream(chat_model_dir: Path) -> None:
    model = load_chat_model(chat_model_dir)
    limits = ServerLimits(max_batch=2, prefill_chunk=4)
    httpd, logic = make_server(model, port=0, limits=limits)
    batched = logic.batch
    assert batched.chunk == 4
    short, long = "the quick", " ".join(WORDS[k % len(WORDS)] for k in range(40))
    steps: list[tuple[bool, int]] = []  # per step: (the long prompt is prefilling, sequences decoding)
    joined = threading.Event()
    original_step = batched.step

    def step() -> list[tuple[Sequence, int]]:
        long_joining = any(len(sequence.prompt) > 12 for sequence, _ in batched.joining)
        steps.append((long_joining, len(batched.decoding)))
        if len(batched.active) == 2:
            joined.set()
        return original_step()

    batched.step = step  # type: ignore[method-assign]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1/completions"
    streamed: list[str] = []

    def stream() -> None:
        body = {"model": model.name, "prompt": short, "max_tokens": 40, "temperature": 0, "stream": True}
        with urllib.request.urlopen(post(url, body), timeout=60) as response:
            for line in response:
                text = line.decode().strip()
                if text.startswith("data: {"):
                    streamed.append(json.loads(text[6:])["choices"][0]["text"])

    try:
        streaming = threading.Thread(target=stream)
        streaming.start()
        while len(streamed) < 2 and streaming.is_alive():
            time.sleep(0.005)
        body = {"model": model.name, "prompt": long, "max_tokens": 5, "temperature": 0}
        with urllib.request.urlopen(post(url, body), timeout=60) as response:
            answer = json.loads(response.read())["choices"][0]["text"]
        streaming.join(60)
    finally:
        shut_down(httpd, grace=5.0)
        thread.join(5.0)
        del batched.step
    assert joined.is_set()
    prompt_tokens = len(model.encode_prompt(long))
    assert prompt_tokens > 12  # several chunks of 4
    # the long prompt was prefilled a chunk per step, the first of them beside a decode of the running stream
    interleaved = [decoding for long_joining, decoding in steps if long_joining]
    assert len(interleaved) >= prompt_tokens // 4 and interleaved[0] == 1
    assert "".join(streamed) == alone(model, short, 40)
    assert answer == alone(model, long, 5)


def test_the_prefill_chunk_limit_must_be_a_positive_integer() -> None:
    with pytest.raises(ValueError, match="prefill_chunk must be a positive integer, got 0"):
        ServerLimits(prefill_chunk=0)
