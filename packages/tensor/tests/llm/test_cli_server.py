"""`python -m kiln.tensor.llm` (one-shot and chat) and the OpenAI-compatible server, end to end on a tiny model.

The oracle for the text is the tokenizer's decoding of the generator's greedy tokens, computed in this process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kiln.tensor.llm.server import make_server
from kiln.tensor.llm.session import ChatModel


def greedy_text(model: ChatModel, ids: list[int], max_tokens: int) -> tuple[str, int]:
    tokens = []
    for token in model.generator.generate(ids, max_tokens=max_tokens, stop_ids=model.tokenizer.stop_ids):
        tokens.append(token)
    kept = [t for t in tokens if t not in model.tokenizer.stop_ids]
    return model.tokenizer.decode(kept, skip_special=True), len(tokens)


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiln.tensor.llm", *args], input=stdin, capture_output=True, text=True, timeout=300
    )


def test_one_shot_prompt(model: ChatModel, chat_model_dir: Path) -> None:
    expected, _ = greedy_text(model, model.encode_prompt("Hello world"), 6)
    done = run_cli("--model", str(chat_model_dir), "--prompt", "Hello world", "--max-tokens", "6")
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected + "\n"
    assert re.search(r"prefill \d+ tokens, [0-9.]+ tok/s; decode \d+ tokens, [0-9.]+ tok/s", done.stderr)


def test_chat_prompt_and_interactive_session(model: ChatModel, chat_model_dir: Path) -> None:
    ids = model.encode_chat([{"role": "user", "content": "Hi"}])
    assert model.tokenizer.decode(ids[:1]) == "<|begin_of_text|>" and ids.count(ids[0]) == 1
    expected, _ = greedy_text(model, ids, 4)
    done = run_cli("--model", str(chat_model_dir), "--prompt", "Hi", "--chat", "--max-tokens", "4")
    assert done.returncode == 0 and done.stdout == expected + "\n"
    session = run_cli("--model", str(chat_model_dir), "--max-tokens", "3", stdin="Hi\n\n")
    assert session.returncode == 0 and "chat format jinja template from tokenizer_config.json" in session.stderr
    assert session.stdout.startswith("> " + greedy_text(model, ids, 3)[0])


def test_missing_model_and_bad_options(tmp_path: Path) -> None:
    done = run_cli("--model", str(tmp_path / "nowhere.gguf"), "--prompt", "x")
    assert done.returncode == 1 and "nowhere.gguf" in done.stderr
    (tmp_path / "broken.gguf").write_bytes(b"GGUF not really")
    done = run_cli("--model", str(tmp_path / "broken.gguf"), "--prompt", "x")
    assert done.returncode == 1 and "broken.gguf" in done.stderr
    assert run_cli("--model", "m", "--max-tokens", "-3").returncode == 2


@pytest.fixture(scope="module")
def server(model: ChatModel) -> Iterator[str]:
    httpd, logic = make_server(model, port=0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    logic.close()


def post(url: str, body: Any, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    if text.startswith("data: "):
        events = [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        return status, [json.loads(event) for event in events[:-1]]
    return status, json.loads(text)


def test_models_endpoint(server: str, model: ChatModel) -> None:
    with urllib.request.urlopen(server + "/v1/models", timeout=60) as response:
        body = json.loads(response.read())
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == [model.name]


def test_completion_plain_and_streamed(server: str, model: ChatModel) -> None:
    expected, produced = greedy_text(model, model.encode_prompt("The quick"), 5)
    request = {"model": model.name, "prompt": "The quick", "max_tokens": 5, "temperature": 0}
    status, body = post(server + "/v1/completions", request)
    assert status == 200 and body["object"] == "text_completion"
    assert body["choices"][0]["text"] == expected and body["choices"][0]["finish_reason"] in ("length", "stop")
    prompt_tokens = len(model.encode_prompt("The quick"))
    assert body["usage"]["prompt_tokens"] == prompt_tokens and body["usage"]["completion_tokens"] == produced
    status, again = post(server + "/v1/completions", request)
    # the same prompt again takes the sequence slot that holds it: all but its last token are reused
    assert again["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": produced,
                              "total_tokens": prompt_tokens + produced,
                              "prompt_tokens_details": {"cached_tokens": prompt_tokens - 1}}  # fmt: skip
    assert again["choices"][0]["text"] == expected
    status, chunks = post(server + "/v1/completions", {**request, "stream": True})
    assert status == 200 and "".join(c["choices"][0]["text"] for c in chunks) == expected
    assert chunks[-1]["choices"][0]["finish_reason"] == body["choices"][0]["finish_reason"]


def test_chat_completion_plain_and_streamed(server: str, model: ChatModel) -> None:
    messages = [{"role": "user", "content": "Name a colour."}]
    expected, produced = greedy_text(model, model.encode_chat(messages), 6)
    request = {"model": model.name, "messages": messages, "max_tokens": 6, "temperature": 0}
    status, body = post(server + "/v1/chat/completions", request)
    assert status == 200 and body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": expected}
    assert body["usage"]["completion_tokens"] == produced
    request = {**request, "stream": True, "stream_options": {"include_usage": True}}
    status, chunks = post(server + "/v1/chat/completions", request)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == expected and chunks[-1]["usage"]["completion_tokens"] == produced


def test_stop_strings_cut_the_text(server: str, model: ChatModel) -> None:
    full, _ = greedy_text(model, model.encode_prompt("Hello"), 12)
    stop = full[3:5] if len(full) >= 5 else None
    if not stop:
        pytest.skip("the random model produced too little text")
    request = {"model": model.name, "prompt": "Hello", "max_tokens": 12, "temperature": 0, "stop": [stop]}
    status, body = post(server + "/v1/completions", request)
    assert status == 200 and body["choices"][0]["text"] == full[: full.index(stop)]
    assert body["choices"][0]["finish_reason"] == "stop"
    status, chunks = post(server + "/v1/completions", {**request, "stream": True})
    assert "".join(c["choices"][0]["text"] for c in chunks) == full[: full.index(stop)]


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/completions", None, 400, None),  # invalid JSON
        ("/v1/completions", {"model": "other", "prompt": "x"}, 404, "model"),
        ("/v1/completions", {"prompt": "x"}, 400, "model"),
        ("/v1/completions", {"model": "MODEL", "prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
        ("/v1/completions", {"model": "MODEL", "prompt": "word " * 200}, 400, "prompt"),
        ("/v1/completions", {"model": "MODEL", "prompt": "x", "temperature": "hot"}, 400, "temperature"),
        ("/v1/chat/completions", {"model": "MODEL", "messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"model": "MODEL", "messages": [{"role": "user"}]}, 400, "messages"),
        ("/v1/nothing", {}, 404, None),
    ],
)
def test_errors(server: str, model: ChatModel, path: str, body: Any, status: int, param: str | None) -> None:
    if isinstance(body, dict) and body.get("model") == "MODEL":
        body = {**body, "model": model.name}
    got, answer = post(server + path, body, raw=b"{bad json" if body is None else None)
    assert got == status
    assert set(answer["error"]) == {"message", "type", "param", "code"} and answer["error"]["param"] == param


def test_concurrent_requests_are_queued_not_dropped(server: str, model: ChatModel) -> None:
    prompts = ["one", "two", "three", "four"]
    expected = {p: greedy_text(model, model.encode_prompt(p), 3)[0] for p in prompts}
    answers: dict[str, str] = {}

    def ask(prompt: str) -> None:
        _, body = post(server + "/v1/completions", {"model": model.name, "prompt": prompt, "max_tokens": 3,
                                                    "temperature": 0})  # fmt: skip
        answers[prompt] = body["choices"][0]["text"]

    threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert answers == expected


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_serve_command_shuts_down_cleanly_on_ctrl_c(chat_model_dir: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "kiln.tensor.llm", "serve", "--model", str(chat_model_dir), "--port", "0"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stderr is not None
    line = process.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
    assert match, line
    with urllib.request.urlopen(f"http://127.0.0.1:{match.group(1)}/v1/models", timeout=60) as response:
        assert response.status == 200
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    assert "shutting down" in process.stderr.read()


def test_serve_command_over_a_paged_kv_pool(model: ChatModel, chat_model_dir: Path) -> None:
    assert run_cli("serve", "--model", str(chat_model_dir), "--kv-blocks", "0").returncode == 2
    process = subprocess.Popen(
        [sys.executable, "-m", "kiln.tensor.llm", "serve", "--model", str(chat_model_dir), "--port", "0",
         "--kv-blocks", "40"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stderr is not None
    try:
        match = re.search(r"http://127\.0\.0\.1:(\d+)/v1", process.stderr.readline())
        assert match
        body = {"model": model.name, "prompt": "the quick brown", "max_tokens": 5, "temperature": 0}
        status, answer = post(f"http://127.0.0.1:{match.group(1)}/v1/completions", body)
        expected, _ = greedy_text(model, model.encode_prompt("the quick brown"), 5)
        assert status == 200 and answer["choices"][0]["text"] == expected
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
