"""`max_context`: the KV cache's size (load_model, the CLI and the server), its default, and generation stopping
at it."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from kiln.tensor.llm import load_model
from kiln.tensor.llm.generate import Generator
from kiln.tensor.llm.model import Transformer
from kiln.tensor.llm.server import make_server
from kiln.tensor.llm.session import load_chat_model

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("max_context", [16, 40])
def test_cache_bytes_follow_max_context(max_context: int) -> None:
    loaded = load_model(FIXTURES / "qwen2", max_context=max_context)
    config = loaded.config
    list(Generator(loaded).generate([3, 4, 5], max_tokens=2))
    # float32 key and value caches per layer, (1, kv_heads, max_context, head_dim) each
    expected = config.n_layers * 2 * config.n_kv_heads * max_context * config.head_dim * 4
    assert loaded.model.cache_bytes() == expected
    assert all(key.shape[2] == max_context for key, _ in loaded.model.caches)


def test_default_is_the_trained_context_capped_at_4096() -> None:
    loaded = load_model(FIXTURES / "qwen2")
    assert loaded.config.context_length == 128 and loaded.model.max_context == 128
    long = dataclasses.replace(loaded.config, context_length=131072)  # a Llama 3.2-style 128k context
    assert Transformer(long, loaded.model.weights).max_context == 4096
    assert Transformer(long, loaded.model.weights, 9000).max_context == 9000
    for bad in (0, -4, 129, 2.5):
        with pytest.raises(ValueError, match=rf"max_context must be an int in \[1, 128\].*got {bad}"):
            load_model(FIXTURES / "qwen2", max_context=bad)  # type: ignore[arg-type]


def test_generation_stops_at_max_context_and_long_prompts_raise() -> None:
    small = Generator(load_model(FIXTURES / "qwen2", max_context=12))
    prompt = [3, 4, 5, 6, 7]
    got = list(small.generate(prompt, max_tokens=100))
    # positions 5..11 are decoded: the prefill's token and one per cached position left, then the cache is full
    assert len(got) == 12 - len(prompt) + 1 and small.position == 12
    # the same tokens as a model whose cache has room to spare (attention never reads past the position)
    assert list(Generator(load_model(FIXTURES / "qwen2")).generate(prompt, max_tokens=len(got))) == got
    with pytest.raises(ValueError, match="the prompt has 13 tokens, more than the context length 12"):
        small.generate([1] * 13, max_tokens=1)
    assert len(list(small.generate([1] * 12, max_tokens=5))) == 1  # a full prompt: only the prefill's token


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_server_reports_length_at_max_context(chat_model_dir: pathlib.Path) -> None:
    model = load_chat_model(chat_model_dir, max_context=10)
    assert model.context_length == 10
    prompt_tokens = len(model.encode_prompt("The quick"))
    httpd, logic = make_server(model, port=0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1/completions"
        request = {"model": model.name, "prompt": "The quick", "max_tokens": 50, "temperature": 0}
        status, body = _post(url, request)
        assert status == 200 and body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == 10 - prompt_tokens
        status, body = _post(url, {**request, "prompt": "word " * 12})
        assert status == 400 and body["error"]["code"] == "context_length_exceeded"
        assert "context length is 10" in body["error"]["message"]
    finally:
        httpd.shutdown()
        httpd.server_close()
        logic.close()


def test_cli_max_context(chat_model_dir: pathlib.Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "kiln.tensor.llm", "--model", str(chat_model_dir), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300)

    done = cli("--prompt", "word " * 12, "--max-context", "8")
    assert done.returncode == 1 and "the model's context is 8" in done.stderr
    done = cli("--prompt", "x", "--max-context", "97")
    assert done.returncode == 1 and "max_context must be an int in [1, 96]" in done.stderr
    assert cli("--prompt", "x", "--max-context", "0").returncode == 2
