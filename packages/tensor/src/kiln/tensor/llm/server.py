"""`python -m kiln.tensor.llm serve --model PATH --port N`: an OpenAI-compatible HTTP server for one local model.

Endpoints: `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions`, each answered in the shapes of
OpenAI's API (streaming as server-sent events `data: {...}` ending with `data: [DONE]` when `"stream": true`), with
`usage` counts. Malformed requests get a 4xx JSON error in OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`): invalid JSON, a missing or wrong field, an unknown model (404),
negative `max_tokens`, a prompt longer than the context. Connections are served by threads, but generation runs
on one worker thread that takes requests from a queue in arrival order, so requests are handled one at a time and
none is dropped. Ctrl-C (SIGINT) stops accepting, lets the worker finish, and exits cleanly.
"""

from __future__ import annotations

import argparse
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kiln.tensor.llm.arguments import context_argument
from kiln.tensor.llm.chat_template import validate_messages
from kiln.tensor.llm.session import ChatModel, Completion, load_chat_model

__all__ = ["LLMServer", "RequestError", "make_server", "serve_main"]

_DONE = object()  # the end of a job's output stream


class RequestError(Exception):
    """A request that cannot be served: the HTTP status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass
class _Job:
    """One generation request waiting for (or being served by) the worker; its output arrives on `out`."""

    prompt_ids: list[int]
    options: dict[str, Any]
    out: queue.Queue[Any] = field(default_factory=queue.Queue)
    result: Completion = field(default_factory=Completion)


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(400, f"'{name}' must be a number in [{low}, {high}], got {value!r}", name)
    return float(value)


class LLMServer:
    """The request logic, independent of HTTP: validation, the job queue and the worker, response bodies."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.served = 0
        self.worker = threading.Thread(target=self._work, name="kiln-llm-worker", daemon=True)
        self.worker.start()

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                for delta in self.model.stream_text(job.prompt_ids, job.result, **job.options):
                    job.out.put(delta)
            except Exception as error:  # reported to the waiting request, the worker goes on with the next job
                job.out.put(error)
            self.served += 1
            job.out.put(_DONE)

    def close(self) -> None:
        """Lets the worker finish the queued jobs, then stops it."""
        self.jobs.put(None)
        self.worker.join(timeout=60)

    def models(self) -> dict[str, Any]:
        created = int(time.time())
        return {"object": "list", "data": [{"id": self.model.name, "object": "model", "created": created,
                                            "owned_by": "kiln"}]}  # fmt: skip

    # -- requests ------------------------------------------------------------------------------------------------
    def prepare(self, body: Any, chat: bool) -> tuple[_Job, bool]:
        """Validates a request body; the queued-to-be job and whether the client asked for a stream."""
        if not isinstance(body, dict):
            raise RequestError(400, f"the request body must be a JSON object, got {type(body).__name__}")
        model = body.get("model")
        if not isinstance(model, str):
            raise RequestError(400, "'model' is required (a string)", "model")
        if model != self.model.name:
            raise RequestError(404, f"the model {model!r} does not exist; this server has {self.model.name!r}",
                               "model", "model_not_found")  # fmt: skip
        if chat:
            try:
                prompt_ids = self.model.encode_chat(validate_messages(body.get("messages")))
            except ValueError as error:
                raise RequestError(400, str(error), "messages") from None
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str) or not prompt:
                raise RequestError(400, f"'prompt' must be a non-empty string, got {prompt!r:.80}", "prompt")
            prompt_ids = self.model.encode_prompt(prompt)
        room = self.model.context_length - len(prompt_ids)
        if room <= 0:
            raise RequestError(400, f"the prompt has {len(prompt_ids)} tokens; the model's context length is "
                               f"{self.model.context_length}", "messages" if chat else "prompt",
                               "context_length_exceeded")  # fmt: skip
        limit_name = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
        max_tokens = body.get(limit_name, None if chat else 16)
        if max_tokens is None:
            max_tokens = room
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise RequestError(400, f"'{limit_name}' must be a non-negative integer, got {max_tokens!r}", limit_name)
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 4:
            raise RequestError(400, f"'stop' must be a string or a list of up to 4 strings, got {stop!r:.80}", "stop")
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise RequestError(400, f"'seed' must be an integer, got {seed!r}", "seed")
        options = {
            "max_tokens": min(max_tokens, room),
            "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
            "top_p": _number(body, "top_p", 1.0, 1e-9, 1.0),
            "top_k": 0,
            "seed": seed,
            "stop": stop,
        }
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise RequestError(400, f"'stream' must be true or false, got {stream!r}", "stream")
        return _Job(prompt_ids, options), stream

    def submit(self, job: _Job) -> Iterator[str]:
        """Queues `job` and yields its text deltas as the worker produces them (raises what the worker raised)."""
        self.jobs.put(job)
        while (item := job.out.get()) is not _DONE:
            if isinstance(item, Exception):
                raise item
            yield item

    def usage(self, result: Completion) -> dict[str, int]:
        return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                "total_tokens": result.prompt_tokens + result.completion_tokens}  # fmt: skip

    def response(self, job: _Job, chat: bool, ident: str, created: int) -> dict[str, Any]:
        """The non-streaming response body (after the whole generation)."""
        text = "".join(self.submit(job))
        result = job.result
        if chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": result.finish_reason, "logprobs": None}  # fmt: skip
        else:
            choice = {"index": 0, "text": text, "finish_reason": result.finish_reason, "logprobs": None}
        return {"id": ident, "object": "chat.completion" if chat else "text_completion", "created": created,
                "model": self.model.name, "choices": [choice], "usage": self.usage(result)}  # fmt: skip

    def chunks(self, job: _Job, chat: bool, ident: str, created: int, usage: bool) -> Iterator[dict[str, Any]]:
        """The streaming response's chunks: the text deltas, then one with the finish reason (and usage)."""
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(delta: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
            if chat:
                content: dict[str, Any] = {} if delta is None else {"content": delta}
                if first:
                    content = {"role": "assistant", "content": ""}
                choice: dict[str, Any] = {"index": 0, "delta": content, "finish_reason": finish, "logprobs": None}
            else:
                choice = {"index": 0, "text": delta or "", "finish_reason": finish, "logprobs": None}
            return {"id": ident, "object": kind, "created": created, "model": self.model.name, "choices": [choice]}

        if chat:
            yield chunk(None, None, first=True)
        for delta in self.submit(job):
            yield chunk(delta, None)
        yield chunk(None, job.result.finish_reason)
        if usage:
            yield {"id": ident, "object": kind, "created": created, "model": self.model.name, "choices": [],
                   "usage": self.usage(job.result)}  # fmt: skip


def _handler(server: LLMServer, log: Callable[[str], None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log(f"{self.address_string()} {format % args}")

        def _send_json(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send_json(200, server.models())
            else:
                self._send_json(404, RequestError(404, f"no route GET {self.path}", code="not_found").body())

        def do_POST(self) -> None:
            route = self.path.rstrip("/")
            if route not in ("/v1/completions", "/v1/chat/completions"):
                self._send_json(404, RequestError(404, f"no route POST {self.path}", code="not_found").body())
                return
            chat = route == "/v1/chat/completions"
            try:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as error:
                    raise RequestError(400, f"the request body is not valid JSON: {error}") from None
                job, stream = server.prepare(body, chat)
            except RequestError as error:
                self._send_json(error.status, error.body())
                return
            ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
            created = int(time.time())
            if not stream:
                try:
                    self._send_json(200, server.response(job, chat, ident, created))
                except Exception as error:
                    self._send_json(500, RequestError(500, f"generation failed: {error}").body())
                return
            options = body.get("stream_options") or {}
            usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for item in server.chunks(job, chat, ident, created, usage):
                    self.wfile.write(f"data: {json.dumps(item)}\n\n".encode())
                    self.wfile.flush()
            except Exception as error:
                failure = RequestError(500, f"generation failed: {error}").body()
                self.wfile.write(f"data: {json.dumps(failure)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


def make_server(model: ChatModel, host: str = "127.0.0.1", port: int = 8000,
                log: Callable[[str], None] = lambda line: None) -> tuple[ThreadingHTTPServer, LLMServer]:  # fmt: skip
    """An HTTP server for `model` bound to (host, port) (port 0: any free port), not yet serving."""
    logic = LLMServer(model)
    httpd = ThreadingHTTPServer((host, port), _handler(logic, log))
    httpd.daemon_threads = True
    return httpd, logic


def serve_main(argv: Sequence[str]) -> int:
    """`python -m kiln.tensor.llm serve ...`; returns the exit status."""
    import sys

    parser = argparse.ArgumentParser(prog="python -m kiln.tensor.llm serve", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a .gguf file, or a folder with config.json + *.safetensors")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0 = any free one)")
    context_argument(parser)
    args = parser.parse_args(argv)
    try:
        model = load_chat_model(args.model, max_context=args.max_context)
    except (FileNotFoundError, ValueError, OSError) as error:
        print(f"error: cannot load the model: {error}", file=sys.stderr)
        return 1
    try:
        httpd, logic = make_server(model, args.host, args.port, lambda line: print(line, file=sys.stderr))
    except OSError as error:
        print(f"error: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 1
    host, port = str(httpd.server_address[0]), int(httpd.server_address[1])
    print(f"serving {model.name!r} on http://{host}:{port}/v1 (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        print("shutting down", file=sys.stderr, flush=True)
    finally:
        httpd.server_close()
        logic.close()
    return 0
