"""`python -m kiln.tensor.llm serve --model PATH --port N`: an OpenAI-compatible HTTP server for one local model.

Endpoints: `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions`, `POST /v1/embeddings`, each
answered in the shapes of OpenAI's API (streaming as server-sent events `data: {...}` ending with `data: [DONE]`
when `"stream": true`), with `usage` counts; `GET /health` (200, or 503 while shutting down) and `GET /metrics`
(Prometheus text). Every refused request gets a JSON error in OpenAI's shape (`{"error": {"message", "type",
"param", "code"}}`), malformed HTTP included. The request logic lives in `kiln.tensor.llm.openai_api`
(`LLMServer`); this module is its transport.

The HTTP stack is the standard library's `ThreadingHTTPServer`, configured for careless or hostile clients
(`ServerLimits`): a listen backlog of 128, a cap on open connections (more wait in the backlog), a deadline for a
request's line and headers and another for its body (a client sending a byte now and then cannot hold a thread past
them), a body size limit (413, answered before the body is read), `Content-Length` required and checked, a `Host`
allow-list against DNS rebinding (the loopback names and the bound address, plus `--allow-host`) and an optional API
key (`Authorization: Bearer`). A thread per connection suits server-sent events (a handler writes its stream as the
text comes) and needs no dependency.

The worker decodes the running requests together (continuous batching, `--max-batch` of them) and asks each
connection after every decode step whether its client has left (its end of file is readable), freeing its slot if
so. `shut_down` (SIGINT or SIGTERM under `serve`) stops accepting, lets queued and
running generations finish for a grace period, fails what is left with a 503 (an error event in a stream), waits for
the responses to be written, and stops the worker.
"""

from __future__ import annotations

import hmac
import io
import json
import math
import select
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import closing, suppress
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from kiln.tensor.llm.openai_api import LLMServer, Request, RequestError, ServerLimits
from kiln.tensor.llm.paged_cache import DEFAULT_BLOCK_SIZE
from kiln.tensor.llm.request_format import RequestFormat
from kiln.tensor.llm.session import ChatModel

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["LLMHTTPServer", "LLMServer", "RequestError", "ServerLimits", "make_server", "serve", "shut_down"]

_ROUTES = {"/v1/models": "GET", "/health": "GET", "/metrics": "GET", "/v1/completions": "POST",
           "/v1/chat/completions": "POST", "/v1/embeddings": "POST"}  # fmt: skip
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


class _DeadlineReader(io.RawIOBase):
    """A connection's bytes for the handler's `rfile`, every receive waiting at most until `deadline`
    (time.monotonic()): a per-receive timeout alone would let a client that sends a byte now and then hold the
    connection forever."""

    def __init__(self, connection: socket.socket, on_data: Callable[[], None]) -> None:
        super().__init__()
        self.connection, self.on_data = connection, on_data
        self.deadline = math.inf

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the client did not send its request in time")
        self.connection.settimeout(None if remaining == math.inf else remaining)
        # the connection counts as busy before its bytes are taken: a shutdown closing idle connections (those not
        # busy with nothing to read) must never see it idle with its request already read
        if not _wait_readable(self.connection, remaining):
            raise TimeoutError("timed out")  # what the socket's own timeout raises
        self.on_data()
        return self.connection.recv_into(buffer)


def _readable(connection: socket.socket) -> bool:
    """Whether the connection has input (bytes or its end) waiting, without blocking."""
    return _wait_readable(connection, 0.0)


def _wait_readable(connection: socket.socket, seconds: float) -> bool:
    """Whether the connection has input (bytes or its end) waiting within `seconds` (inf: until it has)."""
    if hasattr(select, "poll"):  # no FD_SETSIZE limit
        poller = select.poll()
        poller.register(connection, select.POLLIN)
        return bool(poller.poll(None if seconds == math.inf else max(0, math.ceil(seconds * 1000))))
    return bool(select.select([connection], [], [], None if seconds == math.inf else seconds)[0])


def _peer_closed(connection: socket.socket) -> bool:
    """Whether the client has closed the connection (its end of file is readable), without blocking or consuming."""
    try:
        return _readable(connection) and connection.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):  # reset, or already closed here
        return True


class _Handler(BaseHTTPRequestHandler):
    """One connection's requests (HTTP/1.1 keep-alive); every answer, errors included, is JSON in OpenAI's shape."""

    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.0"  # so an unparsable request line still gets a status line and headers
    server: LLMHTTPServer

    def setup(self) -> None:
        super().setup()
        self.reader = _DeadlineReader(self.connection, lambda: self.server.set_busy(self.connection, True))
        self.rfile = io.BufferedReader(self.reader)
        self.body_pending = False  # a request body not read (yet): the connection cannot carry another request
        self.streaming = False  # the response is a stream whose headers were sent

    def handle_one_request(self) -> None:
        self.server.set_busy(self.connection, False)
        self.reader.deadline = time.monotonic() + self.server.limits.read_timeout
        super().handle_one_request()

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.command not in ("GET", "POST"):  # answered here: the base class would send 501 and HTML
            self.body_pending = True
            message = f"the method {self.command} is not allowed; this server answers GET and POST"
            self._send_error(RequestError(405, message, code="method_not_allowed", headers={"Allow": "GET, POST"}))
            return False
        return True

    def handle_expect_100(self) -> bool:
        return True  # `100 Continue` is sent once the body is known to be acceptable (`_read_body`)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's errors (malformed request line or headers, 414, 431) in OpenAI's shape, not HTML."""
        reason = message or HTTPStatus(code).phrase
        self.body_pending = True
        self._send_error(RequestError(int(code), f"malformed HTTP request: {reason}", code="malformed_request"))

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        route = self._route() if getattr(self, "path", None) else ""
        status = int(code) if isinstance(code, int) else 0
        self.server.logic.metrics.count_response(self.command or "-", route if route in _ROUTES else "other", status)
        super().log_request(code, size)

    def log_message(self, format: str, *args: Any) -> None:
        self.server.log(f"{self.address_string()} {format % args}")

    # -- writing ---------------------------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        self.connection.settimeout(self.server.limits.write_timeout)
        self.wfile.write(data)

    def _send(self, status: int, data: bytes, content_type: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if self.body_pending or self.server.closing:
            self.send_header("Connection", "close")  # also sets close_connection
        self.end_headers()
        if self.command != "HEAD":
            self._write(data)

    def _send_json(self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _send_error(self, error: RequestError) -> None:
        self._send_json(error.status, error.body(), error.headers)
        if self.body_pending:
            self.server.linger(self.connection)

    # -- routing ---------------------------------------------------------------------------------------------------
    def _route(self) -> str:
        return urlsplit(self.path).path.rstrip("/") or "/"

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        route = self._route()
        self.body_pending = self.command == "POST" or "Content-Length" in self.headers
        self.streaming = False
        try:
            self.server.admit(self.headers.get("Host"), self.headers.get("Authorization"), route)
            if route not in _ROUTES:
                raise RequestError(404, f"no route {self.command} {self.path:.200}", code="not_found")
            if self.command != _ROUTES[route]:
                raise RequestError(405, f"{route} answers {_ROUTES[route]}, not {self.command}",
                                   code="method_not_allowed", headers={"Allow": _ROUTES[route]})  # fmt: skip
            if route == "/v1/embeddings":
                self._embed()
            elif self.command == "POST":
                self._generate(route == "/v1/chat/completions")
            elif route == "/health":
                self._send_json(*self.server.logic.health())
            elif route == "/metrics":
                text = self.server.logic.metrics_text(self.server.open_connections())
                self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._send_json(200, self.server.logic.models())
        except RequestError as error:
            self._send_error(error)
        except OSError:  # the client left, or a write timed out: nothing more can be said on this connection
            self.close_connection = True
        except Exception as error:  # a bug: still an answer in OpenAI's shape, never a dropped connection
            self.server.log(f"internal error answering {self.command} {route}: {type(error).__name__}: {error}")
            failure = RequestError(500, f"internal error: {type(error).__name__}: {error}")
            self.body_pending = True
            if self.streaming:
                self._write(f"data: {json.dumps(failure.body())}\n\n".encode())
            else:
                self._send_error(failure)

    def _read_body(self) -> Any:
        """The request's JSON body, read within the size limit and the read deadline."""
        if "Transfer-Encoding" in self.headers:
            raise RequestError(400, "chunked request bodies are not supported; send Content-Length",
                               code="unsupported_transfer_encoding")  # fmt: skip
        lengths = {text.strip() for text in self.headers.get_all("Content-Length") or []}
        if not lengths:
            raise RequestError(400, "a request body needs a Content-Length header", code="missing_content_length")
        text = lengths.pop()
        if lengths or not (text.isascii() and text.isdigit()):
            raise RequestError(400, f"Content-Length must be one non-negative integer, got {text!r:.40}",
                               code="invalid_content_length")  # fmt: skip
        limit = self.server.limits.max_body_bytes
        length = int(text) if len(text) <= 18 else limit + 1
        if length > limit:
            raise RequestError(413, f"the request body has {text:.40} bytes; this server accepts at most {limit} "
                               "(--max-body-bytes)", code="request_too_large")  # fmt: skip
        if self.headers.get("Expect", "").lower() == "100-continue":
            self.send_response_only(100)
            self.end_headers()
        self.reader.deadline = time.monotonic() + self.server.limits.read_timeout
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            raise RequestError(408, f"the request body did not arrive within {self.server.limits.read_timeout} s",
                               code="request_timeout") from None  # fmt: skip
        if len(raw) < length:
            raise ConnectionResetError("the client closed the connection within the request body")
        self.body_pending = False
        try:
            return json.loads(raw)
        except RecursionError:
            raise RequestError(400, "the request body nests JSON too deeply", code="invalid_json") from None
        except ValueError as error:  # JSONDecodeError, invalid UTF-8, an integer of too many digits
            raise RequestError(400, f"the request body is not valid JSON: {error}", code="invalid_json") from None

    def _embed(self) -> None:
        logic = self.server.logic
        job = logic.prepare_embeddings(self._read_body())
        connection = self.connection
        job.client_gone = lambda: _peer_closed(connection)
        logic.enqueue(Request([job], False, False, RequestFormat()))
        self._send_json(200, logic.embeddings(job))

    def _generate(self, chat: bool) -> None:
        body = self._read_body()
        logic = self.server.logic
        request = logic.prepare(body, chat)
        connection = self.connection
        request.watch(lambda: _peer_closed(connection))
        logic.enqueue(request)
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        if not request.stream:
            self._send_json(200, logic.response(request, ident, created))
            return
        options = body.get("stream_options") or {}
        usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.streaming = True  # from here on, an error is an event of the stream
        with closing(logic.chunks(request, ident, created, usage)) as chunks:
            try:
                for item in chunks:
                    self._write(f"data: {json.dumps(item)}\n\n".encode())
            except RequestError as error:
                self._write(f"data: {json.dumps(error.body())}\n\n".encode())
        self._write(b"data: [DONE]\n\n")


class LLMHTTPServer(ThreadingHTTPServer):
    """The HTTP side of an `LLMServer`: a thread per connection, at most `max_connections` at once, the listen
    backlog and the `Host` and API-key checks of `limits`."""

    daemon_threads = True
    block_on_close = False  # `shut_down` waits for the connections with requests in flight, not for idle ones

    def __init__(self, address: tuple[str, int], logic: LLMServer, log: Callable[[str], None]) -> None:
        self.logic, self.limits, self.log = logic, logic.limits, log
        self.request_queue_size = self.limits.backlog
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.slots = threading.BoundedSemaphore(self.limits.max_connections)
        self.connections: dict[socket.socket, bool] = {}  # open connections -> whether a request is in progress
        self.unslotted: set[socket.socket] = set()  # connections served beyond the cap while shutting down
        self.connections_lock = threading.Lock()
        self.closing = False
        super().__init__(address, _Handler)
        bound = str(self.server_address[0])
        bound_name = f"[{bound}]" if ":" in bound else bound
        names = {name.lower() for name in self.limits.allowed_hosts}
        self.host_names = _LOOPBACK_NAMES | names | (set() if address[0] in _WILDCARDS else {bound_name.lower()})

    # -- connections -----------------------------------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        # At the cap the accepting thread waits (new clients queue in the backlog); once shutting down, a waiting
        # connection is served beyond the cap so that its request gets an answer (503), not a reset.
        slotted = self.slots.acquire(timeout=0.1)
        while not slotted and not self.closing:
            slotted = self.slots.acquire(timeout=0.1)
        with self.connections_lock:
            self.connections[request] = False
            if not slotted:
                self.unslotted.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: Any) -> None:
        with self.connections_lock:
            if self.connections.pop(request, None) is not None and request not in self.unslotted:
                self.slots.release()
            self.unslotted.discard(request)

    def set_busy(self, connection: socket.socket, busy: bool) -> None:
        with self.connections_lock:
            if connection in self.connections:
                self.connections[connection] = busy

    def open_connections(self) -> int:
        with self.connections_lock:
            return len(self.connections)

    def accept_waiting(self) -> None:
        """Accepts the connections left in the listen backlog once `serve_forever` has stopped, so their requests
        get an answer (a 503 for a generation) rather than a reset when the listening socket closes."""
        if self.socket.fileno() < 0:  # closed already (a second shut_down)
            return
        self.timeout = 0.0  # handle_request: accept one if one waits, never block
        for _ in range(self.limits.backlog):  # bounded: an accept that keeps failing must not spin forever
            if not _readable(self.socket):
                break
            self.handle_request()

    def close_idle_connections(self) -> None:
        """Ends the connections waiting for a request (keep-alive, or not yet sent one) with no input waiting."""
        # under the lock: a handler marks its connection busy (under the same lock) before it takes any byte
        with self.connections_lock:
            for connection, busy in self.connections.items():
                with suppress(OSError, ValueError):  # its handler may be closing it right now
                    if not busy and not _readable(connection):  # else a request (or the end) arrived: it answers
                        connection.shutdown(socket.SHUT_RDWR)

    def wait_for_connections(self, deadline: float) -> bool:
        """Waits until every connection has closed, or `deadline`; whether they all did."""
        while self.open_connections():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def linger(self, connection: socket.socket) -> None:
        """After an answer sent before the body was read (413, 400 ...): reads and drops what the client still sends
        for up to a second and 64 MiB, so it sees the answer instead of a reset from closing on unread data."""
        try:
            connection.shutdown(socket.SHUT_WR)
            deadline, received = time.monotonic() + 1.0, 0
            while received < 64 * 2**20 and (remaining := deadline - time.monotonic()) > 0:
                connection.settimeout(remaining)
                data = connection.recv(65536)
                if not data:
                    break
                received += len(data)
        except OSError:
            pass

    # -- admission -------------------------------------------------------------------------------------------------
    def admit(self, host: str | None, authorization: str | None, route: str) -> None:
        """Refuses a request whose `Host` is not served (421: DNS rebinding) or, with an API key set, that lacks it
        (401; /health is open)."""
        if host is not None and "*" not in self.host_names:
            name = host.strip().lower()
            name = name[: name.find("]") + 1] if name.startswith("[") else name.partition(":")[0]
            if name.rstrip(".") not in self.host_names:
                raise RequestError(421, f"this server does not answer for Host {host!r:.100}; it answers "
                                   f"{sorted(self.host_names)} (add names with --allow-host)",
                                   code="host_not_allowed")  # fmt: skip
        key = self.limits.api_key
        if key is None or route == "/health":
            return
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            reason = "no API key was given" if not authorization else "the API key is not correct"
            raise RequestError(401, f"{reason}: send 'Authorization: Bearer <key>' with the server's --api-key",
                               code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})  # fmt: skip

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # a client that reset or vanished mid-request: a line, not a traceback
            self.log(f"{client_address[0]} connection ended: {type(error).__name__}: {error}")
        else:
            super().handle_error(request, client_address)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self.serving = True
        try:
            super().serve_forever(poll_interval)
        finally:
            self.serving = False


def make_server(model: ChatModel, host: str = "127.0.0.1", port: int = 8000,
                log: Callable[[str], None] = lambda line: None,
                limits: ServerLimits | None = None) -> tuple[LLMHTTPServer, LLMServer]:  # fmt: skip
    """An HTTP server for `model` bound to (host, port) (port 0: any free port), not yet serving."""
    logic = LLMServer(model, limits)
    try:
        httpd = LLMHTTPServer((host, port), logic, log)
    except BaseException:
        logic.close()
        raise
    return httpd, logic


def shut_down(httpd: LLMHTTPServer, grace: float | None = None) -> bool:
    """Stops a serving `httpd` gracefully: no new connections or generations, the queued and running ones go on
    for `grace` seconds (default `limits.shutdown_grace`) and then fail with 503, every response is written (within
    `limits.write_timeout` more), and the worker stops. Returns whether every generation finished."""
    logic = httpd.logic
    deadline = time.monotonic() + (logic.limits.shutdown_grace if grace is None else grace)
    logic.stop_accepting()
    httpd.closing = True
    if getattr(httpd, "serving", False):
        httpd.shutdown()
    httpd.accept_waiting()
    httpd.server_close()
    httpd.close_idle_connections()
    finished = logic.drain(deadline)
    if not finished:
        logic.abort()
    httpd.wait_for_connections(time.monotonic() + logic.limits.write_timeout)
    logic.close(timeout=logic.limits.write_timeout)
    return finished


def serve(model: ChatModel, host: str = "127.0.0.1", port: int = 8000, limits: ServerLimits | None = None,
          err: TextIO = sys.stderr) -> int:  # fmt: skip
    """Serves `model` until SIGINT or SIGTERM, then shuts down gracefully (a second signal exits at once); returns
    the exit status (1: cannot listen)."""
    try:
        httpd, logic = make_server(model, host, port, lambda line: print(line, file=err, flush=True), limits)
    except OSError as error:
        print(f"error: cannot listen on {host}:{port}: {error}", file=err)
        return 1
    if host in _WILDCARDS:
        print(f"warning: listening on every network interface ({host!r}): anyone who can reach this machine can use "
              "the model" + ("" if logic.limits.api_key else "; consider --api-key"), file=err)  # fmt: skip
    address, bound_port = str(httpd.server_address[0]), int(httpd.server_address[1])
    shown = f"[{address}]" if ":" in address else address
    print(f"serving {model.name!r} on http://{shown}:{bound_port}/v1 (Ctrl-C to stop)", file=err, flush=True)
    if model.kv_blocks:
        layout = f"a paged pool of {model.kv_blocks} blocks of {DEFAULT_BLOCK_SIZE} rows shared by the requests"
    else:
        layout = f"{logic.limits.max_batch} request slots of {model.context_length} rows each"
    print(f"KV cache: {layout}", file=err, flush=True)
    stop = threading.Event()

    def on_signal(number: int, frame: FrameType | None) -> None:
        stop.set()

    signals = [signal.SIGINT, signal.SIGTERM]
    previous = {number: signal.signal(number, on_signal) for number in signals}
    accepting = threading.Thread(target=httpd.serve_forever, name="kiln-llm-accept", daemon=True)
    accepting.start()
    try:
        while not stop.wait(0.5) and accepting.is_alive():
            pass
        for number in signals:  # a second Ctrl-C interrupts the graceful shutdown
            signal.signal(number, signal.default_int_handler if number == signal.SIGINT else previous[number])
        print("shutting down: finishing the requests in flight (Ctrl-C again to stop now)", file=err, flush=True)
        finished = shut_down(httpd)
        print("stopped" + ("" if finished else " (unfinished generations were failed with 503)"), file=err, flush=True)
    except KeyboardInterrupt:
        print("stopped without finishing the requests in flight", file=err, flush=True)
        return 130
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 0
