"""The server's request lifecycle driven by the official `openai` client: the bounded queue (429), cancellation when
a client leaves (counted in the generator's decode steps), graceful shutdown (in process and by SIGTERM), the API
key, /health and /metrics (read with a parser of Prometheus' text format written here from its specification),
and the request checks that must answer 400 rather than 500 or minutes of CPU.

Texts are compared with the tokenizer's decoding of the generator's greedy tokens, computed in this process. A test
that needs a generation to last paces the generator's token iterator (`Paced`); every test ends in a few seconds."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kiln.tensor.llm.batching import Sequence
from kiln.tensor.llm.cli import main
from kiln.tensor.llm.server import LLMHTTPServer, ServerLimits, make_server, shut_down
from kiln.tensor.llm.session import ChatModel, load_chat_model

openai = pytest.importorskip("openai")
PROMPT = "The quick"  # greedy generation on the test model runs to the end of the context without a stop token


@pytest.fixture(scope="module")
def model(chat_model_dir: Path) -> ChatModel:
    loaded = load_chat_model(chat_model_dir)
    loaded.complete(loaded.encode_prompt("Hello"), max_tokens=2)  # compiles the steps once for the module
    return loaded


def greedy(model: ChatModel, prompt: str, max_tokens: int) -> tuple[str, list[int]]:
    tokens = list(model.generator.generate(model.encode_prompt(prompt), max_tokens=max_tokens,
                                           stop_ids=model.tokenizer.stop_ids))  # fmt: skip
    kept = [t for t in tokens if t not in model.tokenizer.stop_ids]
    return model.tokenizer.decode(kept, skip_special=True), tokens


class Paced:
    """Makes each decode step of the server's batched generator (`slots` sequence slots) take `delay` seconds more,
    and notes when the latest sequence to start has ended (`closed`)."""

    def __init__(self, model: ChatModel, monkeypatch: pytest.MonkeyPatch, delay: float, slots: int = 8) -> None:
        batched = model.batched(slots)
        self.closed = threading.Event()
        self.tokens = 0  # tokens the generator produced, all sequences together
        self.sequence: Sequence | None = None
        original_start, original_step, original_cancel = batched.start, batched.step, batched.cancel

        def start(*args: Any, **kwargs: Any) -> Sequence:
            sequence = original_start(*args, **kwargs)
            self.closed.clear()
            self.sequence, self.tokens = sequence, self.tokens + len(sequence.tokens)
            self._note()
            return sequence

        def step() -> list[tuple[Sequence, int]]:
            time.sleep(delay)
            produced = original_step()
            self.tokens += len(produced)
            self._note()
            return produced

        def cancel(sequence: Sequence) -> None:
            original_cancel(sequence)
            self._note()

        for name, replacement in (("start", start), ("step", step), ("cancel", cancel)):
            monkeypatch.setattr(batched, name, replacement)

    def _note(self) -> None:
        if self.sequence is not None and self.sequence.finished:
            self.closed.set()

    def decode_steps(self) -> int:
        """The decode steps of the latest sequence to start."""
        return 0 if self.sequence is None else self.sequence.stats.decode_tokens


@contextmanager
def running(model: ChatModel, **limits: Any) -> Iterator[tuple[LLMHTTPServer, Any]]:
    httpd, _ = make_server(model, port=0, limits=ServerLimits(**limits))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    key = limits.get("api_key") or "unused"
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key=key, max_retries=0,
                           timeout=10.0)  # fmt: skip
    try:
        yield httpd, client
    finally:
        shut_down(httpd, grace=1.0)
        thread.join(5.0)


def wait_until(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def get(httpd: LLMHTTPServer, path: str, key: str | None = None) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(f"http://127.0.0.1:{httpd.server_address[1]}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


# -- the prometheus text format (exposition format 0.0.4), parsed from its specification ------------------------------
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ ]+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def parse_prometheus(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples by (name, sorted labels); checks that each family's TYPE comes before its samples."""
    assert text.endswith("\n")
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    typed: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped") and name not in typed
            typed[name] = kind
            continue
        if line.startswith("#"):
            assert line.startswith("# HELP ")
            continue
        match = _SAMPLE.match(line)
        assert match, line
        name, labels_text, value = match.groups()
        labels = tuple(sorted((k, v.encode().decode("unicode_escape")) for k, v in _LABEL.findall(labels_text or "")))
        family = re.sub(r"_(bucket|sum|count)$", "", name) if typed.get(name) is None else name
        assert family in typed, f"sample {name} before its # TYPE"
        samples[(name, labels)] = float(value)
    return samples


# -- tests ------------------------------------------------------------------------------------------------------------
def test_a_full_queue_answers_429_with_retry_after(model: ChatModel, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {n: greedy(model, PROMPT, n)[0] for n in (20, 5)}
    Paced(model, monkeypatch, 0.03, slots=1)
    with running(model, max_queue=1, max_batch=1) as (httpd, client), ThreadPoolExecutor(2) as pool:
        logic = httpd.logic
        first = pool.submit(lambda: client.completions.create(model=model.name, prompt=PROMPT, max_tokens=20,
                                                              temperature=0).choices[0].text)  # fmt: skip
        wait_until(lambda: logic.running == 1)
        second = pool.submit(lambda: client.completions.create(model=model.name, prompt=PROMPT, max_tokens=5,
                                                               temperature=0).choices[0].text)  # fmt: skip
        wait_until(lambda: logic.jobs.qsize() == 1)
        with pytest.raises(openai.RateLimitError) as refused:
            client.completions.create(model=model.name, prompt=PROMPT, max_tokens=5, temperature=0)
        assert int(refused.value.response.headers["Retry-After"]) >= 1
        assert refused.value.body["code"] == "queue_full"
        assert (first.result(10), second.result(10)) == (expected[20], expected[5])  # neither was dropped


def test_a_streaming_client_leaving_stops_the_generation(model: ChatModel, monkeypatch: pytest.MonkeyPatch) -> None:
    text, tokens = greedy(model, PROMPT, 60)
    decoder = model.tokenizer.stream(skip_special=True)
    silent, longest_silence = 0, 0  # the longest run of tokens that add no text (a cut UTF-8 character)
    for token in tokens:
        silent = 0 if decoder.push(token) else silent + 1
        longest_silence = max(longest_silence, silent)
    paced = Paced(model, monkeypatch, 0.04)
    with running(model) as (httpd, client):
        stream = client.completions.create(model=model.name, prompt=PROMPT, max_tokens=60, temperature=0, stream=True)
        received = "".join(next(iter(stream)).choices[0].text for _ in range(4))
        assert text.startswith(received)
        stream.close()
        steps_when_left = paced.decode_steps()
        assert paced.closed.wait(3.0)
        # the generation stops at the next piece of text: one step, plus the steps of text held back
        assert paced.decode_steps() - steps_when_left <= 1 + longest_silence
        assert paced.decode_steps() < 30
        metrics = parse_prometheus(get(httpd, "/metrics")[2])
        assert metrics[("kiln_llm_generations_total", (("outcome", "cancelled"),))] == 1
        answer = client.completions.create(model=model.name, prompt=PROMPT, max_tokens=6, temperature=0)
        assert answer.choices[0].text == greedy(model, PROMPT, 6)[0]  # and the server goes on serving


def test_a_waiting_client_leaving_stops_the_generation(model: ChatModel, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    paced = Paced(model, monkeypatch, 0.04)
    with running(model) as (httpd, _):
        body = json.dumps({"model": model.name, "prompt": PROMPT, "max_tokens": 60, "temperature": 0}).encode()
        with socket.create_connection(("127.0.0.1", int(httpd.server_address[1])), timeout=5) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))  # fmt: skip
            wait_until(lambda: paced.tokens >= 4)
        assert paced.closed.wait(3.0)
        assert paced.decode_steps() < 20  # of 59 the request asked for


def test_a_queued_request_whose_client_left_never_runs(model: ChatModel, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    expected = greedy(model, PROMPT, 15)[0]
    paced = Paced(model, monkeypatch, 0.03, slots=1)
    with running(model, max_batch=1) as (httpd, client), ThreadPoolExecutor(1) as pool:
        logic = httpd.logic
        first = pool.submit(lambda: client.completions.create(model=model.name, prompt=PROMPT, max_tokens=15,
                                                              temperature=0).choices[0].text)  # fmt: skip
        wait_until(lambda: logic.running == 1)
        body = json.dumps({"model": model.name, "prompt": "Hello", "max_tokens": 30, "temperature": 0}).encode()
        with socket.create_connection(("127.0.0.1", int(httpd.server_address[1])), timeout=5) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))  # fmt: skip
            wait_until(lambda: logic.jobs.qsize() == 1)
        tokens_before = paced.tokens
        assert first.result(10) == expected
        wait_until(lambda: logic.pending == 0)
        assert paced.tokens - tokens_before <= 15  # the first request's tokens only
        metrics = parse_prometheus(get(httpd, "/metrics")[2])
        assert metrics[("kiln_llm_generations_total", (("outcome", "cancelled"),))] == 1
        assert metrics[("kiln_llm_generations_total", (("outcome", "finished"),))] == 1


def test_a_failing_generation_is_a_500_and_the_worker_goes_on(
    model: ChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> list[tuple[Sequence, int]]:  # the prefill's token came back; the first decode step fails
        raise RuntimeError("the device was lost")

    monkeypatch.setattr(model.batched(), "step", broken)
    with running(model) as (httpd, client):
        with pytest.raises(openai.InternalServerError, match="the device was lost"):
            client.completions.create(model=model.name, prompt=PROMPT, max_tokens=5, temperature=0)
        stream = client.chat.completions.create(model=model.name, messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=5, stream=True)  # fmt: skip
        with pytest.raises(openai.APIError, match="the device was lost"):
            for _ in stream:
                pass
        monkeypatch.undo()
        answer = client.completions.create(model=model.name, prompt=PROMPT, max_tokens=3, temperature=0)
        assert answer.choices[0].text == greedy(model, PROMPT, 3)[0]
        metrics = parse_prometheus(get(httpd, "/metrics")[2])
        assert metrics[("kiln_llm_generations_total", (("outcome", "failed"),))] == 2


def test_bad_seeds_are_400s(model: ChatModel) -> None:
    with running(model) as (_, client):
        for seed in (-1, 2**64, -(2**70)):
            with pytest.raises(openai.BadRequestError, match="seed"):
                client.completions.create(model=model.name, prompt="Hi", max_tokens=2, seed=seed)
        texts = {client.completions.create(model=model.name, prompt="Hi", max_tokens=4, temperature=0.8,
                                           seed=2**63 - 1).choices[0].text for _ in range(2)}  # fmt: skip
        assert len(texts) == 1  # the largest seed is served, and seeds the sampler


def test_a_long_prompt_is_refused_before_tokenizing(model: ChatModel, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    encode_prompt, encode_chat = model.encode_prompt, model.encode_chat
    monkeypatch.setattr(model, "encode_prompt", lambda text: calls.append("prompt") or encode_prompt(text))
    monkeypatch.setattr(model, "encode_chat", lambda *a, **k: calls.append("chat") or encode_chat(*a, **k))
    big = "word " * 600_000  # 3 MB, under the body limit
    with running(model) as (_, client):
        started = time.monotonic()
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model=model.name, prompt=big, max_tokens=1)
        assert refused.value.body["code"] == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=model.name, messages=[{"role": "user", "content": big}])
        assert refused.value.body["code"] == "context_length_exceeded"
        assert calls == [] and time.monotonic() - started < 2.0
        with pytest.raises(openai.BadRequestError) as refused:  # too many tokens, few bytes: counted after tokenizing
            client.completions.create(model=model.name, prompt="word " * 200, max_tokens=1)
        assert refused.value.body["code"] == "context_length_exceeded" and calls == ["prompt"]


def test_api_key(model: ChatModel) -> None:
    with running(model, api_key="s3cret") as (httpd, client):
        assert [m.id for m in client.models.list()] == [model.name]
        answer = client.completions.create(model=model.name, prompt=PROMPT, max_tokens=3, temperature=0)
        assert answer.choices[0].text == greedy(model, PROMPT, 3)[0]
        wrong = client.with_options(api_key="guess")
        with pytest.raises(openai.AuthenticationError) as refused:
            wrong.completions.create(model=model.name, prompt=PROMPT, max_tokens=3)
        assert refused.value.body["code"] == "invalid_api_key"
        assert refused.value.response.headers["WWW-Authenticate"] == "Bearer"
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        assert get(httpd, "/health")[0] == 200  # open, for probes
        assert get(httpd, "/metrics")[0] == 401 and get(httpd, "/metrics", "s3cret")[0] == 200


def test_health(model: ChatModel) -> None:
    with running(model) as (httpd, client):
        status, kind, text = get(httpd, "/health")
        assert status == 200 and kind == "application/json"
        assert json.loads(text) == {"status": "ok", "model": model.name, "queued": 0, "running": 0}
        httpd.logic.stop_accepting()
        status, _, text = get(httpd, "/health")
        assert status == 503 and json.loads(text)["status"] == "unavailable"
        with pytest.raises(openai.InternalServerError) as refused:
            client.completions.create(model=model.name, prompt=PROMPT, max_tokens=3)
        assert refused.value.status_code == 503 and refused.value.body["code"] == "server_shutting_down"


def test_metrics(model: ChatModel) -> None:
    with running(model) as (httpd, client):
        answers = [client.completions.create(model=model.name, prompt=p, max_tokens=4, temperature=0)
                   for p in ("one", "two", "three")]  # fmt: skip
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model=model.name, prompt="x", seed=-3)
        status, kind, text = get(httpd, "/metrics")
        assert status == 200 and kind == "text/plain; version=0.0.4; charset=utf-8"
    samples = parse_prometheus(text)

    def value(name: str, **labels: str) -> float:
        return samples[(f"kiln_llm_{name}", tuple(sorted(labels.items())))]

    assert value("requests_total", method="POST", route="/v1/completions", code="200") == 3
    assert value("requests_total", method="POST", route="/v1/completions", code="400") == 1
    assert value("prompt_tokens_total") == sum(a.usage.prompt_tokens for a in answers)
    assert value("completion_tokens_total") == sum(a.usage.completion_tokens for a in answers)
    assert value("generations_total", outcome="finished") == 3 and value("generations_total", outcome="failed") == 0
    assert value("queue_depth") == 0 and value("running") == 0 and value("open_connections") >= 1
    buckets = sorted((float(dict(labels)["le"]), count) for (name, labels), count in samples.items()
                     if name == "kiln_llm_request_duration_seconds_bucket")  # fmt: skip
    counts = [count for _, count in buckets]
    assert counts == sorted(counts) and buckets[-1] == (float("inf"), 3)
    assert value("request_duration_seconds_count") == 3 and value("request_duration_seconds_sum") > 0


@pytest.mark.parametrize("grace", [10.0, 0.3])
def test_graceful_shutdown_finishes_or_fails_each_request(
    model: ChatModel, monkeypatch: pytest.MonkeyPatch, grace: float
) -> None:
    expected = {n: greedy(model, PROMPT, n)[0] for n in (30, 5)}
    Paced(model, monkeypatch, 0.03, slots=1)
    with running(model, max_batch=1) as (httpd, client), ThreadPoolExecutor(3) as pool:
        port, logic = int(httpd.server_address[1]), httpd.logic
        stream = client.completions.create(model=model.name, prompt=PROMPT, max_tokens=30, temperature=0, stream=True)
        chunks = iter(stream)
        first = next(chunks).choices[0].text
        queued = pool.submit(lambda: client.completions.create(model=model.name, prompt=PROMPT, max_tokens=5,
                                                               temperature=0).choices[0].text)  # fmt: skip
        wait_until(lambda: logic.jobs.qsize() == 1)
        started = time.monotonic()
        stopping = pool.submit(shut_down, httpd, grace)
        wait_until(lambda: not logic.accepting)
        if grace > 1:
            assert first + "".join(chunk.choices[0].text for chunk in chunks) == expected[30]
            assert queued.result(10) == expected[5]
            assert stopping.result(10) is True
        else:
            with pytest.raises(openai.APIError, match="shut down before the generation finished"):
                for _ in chunks:
                    pass
            with pytest.raises(openai.InternalServerError) as failed:
                queued.result(10)
            assert failed.value.status_code == 503
            assert stopping.result(10) is False and time.monotonic() - started < 3.0
        assert not logic.worker.is_alive()
        with pytest.raises(openai.APIConnectionError):  # the listening socket is closed
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0).models.list()


def test_requests_not_yet_read_at_shutdown_get_a_503(model: ChatModel, monkeypatch: pytest.MonkeyPatch) -> None:
    import http.client
    import socket

    expected = greedy(model, PROMPT, 20)[0]
    Paced(model, monkeypatch, 0.03)
    with running(model, max_connections=1) as (httpd, client), ThreadPoolExecutor(2) as pool:
        port, logic = int(httpd.server_address[1]), httpd.logic
        stream = client.completions.create(model=model.name, prompt=PROMPT, max_tokens=20, temperature=0, stream=True)
        chunks = iter(stream)
        first = next(chunks).choices[0].text  # this connection holds the one slot
        body = json.dumps({"model": model.name, "prompt": "Hi", "max_tokens": 3}).encode()
        waiting = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        for sock in waiting:  # accepted but not served (the first), or still in the listen backlog (the second)
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))  # fmt: skip
        time.sleep(0.2)
        stopping = pool.submit(shut_down, httpd, 10.0)
        assert first + "".join(chunk.choices[0].text for chunk in chunks) == expected
        for sock in waiting:
            with sock:
                response = http.client.HTTPResponse(sock, method="POST")
                response.begin()
                assert response.status == 503
                assert json.loads(response.read())["error"]["code"] == "server_shutting_down"
        assert stopping.result(10) is True and not logic.worker.is_alive()


@pytest.mark.skipif(sys.platform == "win32", reason="signals to a child process are POSIX")
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_lets_requests_in_flight_finish(model: ChatModel, chat_model_dir: Path, signal_number: int) -> None:
    prompts = ["one", "two", "three", "four"]
    expected = [greedy(model, p, 12)[0] for p in prompts]
    process = subprocess.Popen(
        [sys.executable, "-m", "kiln.tensor.llm", "serve", "--model", str(chat_model_dir), "--port", "0",
         "--host", "0.0.0.0"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stderr is not None
    try:
        warning = process.stderr.readline()
        assert warning.startswith("warning: listening on every network interface"), warning
        line = process.stderr.readline()
        match = re.search(r"http://0\.0\.0\.0:(\d+)/v1", line)
        assert match, line
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{match.group(1)}/v1", api_key="x", max_retries=0)

        def ask(prompt: str) -> str:
            answer = client.completions.create(model=model.name, prompt=prompt, max_tokens=12, temperature=0)
            return str(answer.choices[0].text)

        def received() -> float:  # requests the server has queued, is running or has finished
            with urllib.request.urlopen(f"http://127.0.0.1:{match.group(1)}/metrics", timeout=5) as response:
                samples = parse_prometheus(response.read().decode())
            finished = samples[("kiln_llm_generations_total", (("outcome", "finished"),))]
            return samples[("kiln_llm_queue_depth", ())] + samples[("kiln_llm_running", ())] + finished

        with ThreadPoolExecutor(len(prompts)) as pool:
            answers = [pool.submit(ask, prompt) for prompt in prompts]
            wait_until(lambda: received() == len(prompts), 30.0)  # the first one compiles the model's steps
            assert not all(answer.done() for answer in answers)  # some are in flight as the signal comes
            process.send_signal(signal_number)
            assert [answer.result(60) for answer in answers] == expected
        assert process.wait(timeout=60) == 0
        rest = process.stderr.read()
        assert "shutting down" in rest and "stopped" in rest
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(
    "options",
    [["--max-queue", "0"], ["--read-timeout", "-1"], ["--shutdown-grace", "inf"], ["--max-body-bytes", "x"],
     ["--prefill-chunk", "0"]],
)  # fmt: skip
def test_serve_refuses_bad_limits(options: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--model", "unused", *options])
    assert exited.value.code == 2 and options[0] in capsys.readouterr().err


def test_serve_refuses_an_empty_api_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--model", "unused", "--api-key", " "]) == 2
    assert "--api-key" in capsys.readouterr().err


def test_serve_passes_the_limits_on(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import kiln.tensor.llm.cli as cli

    made: list[ServerLimits] = []

    def recording(**fields: Any) -> ServerLimits:
        made.append(ServerLimits(**fields))
        return made[-1]

    def missing(*args: Any, **kwargs: Any) -> ChatModel:
        raise FileNotFoundError("no model here")

    monkeypatch.setattr(cli, "ServerLimits", recording)
    monkeypatch.setattr(cli, "load_chat_model", missing)
    assert main(["serve", "--model", "unused", "--prefill-chunk", "16", "--max-batch", "3"]) == 1
    assert "no model here" in capsys.readouterr().err
    assert made[-1].prefill_chunk == 16 and made[-1].max_batch == 3  # (made[0]: the parser's defaults)
    assert ServerLimits().prefill_chunk == 64  # the option's default is the library's
