"""The server against careless and hostile HTTP clients, spoken to over raw sockets and http.client: a burst of
connections, half-sent requests, oversized and garbled bodies and headers, other methods, foreign Host headers.

Every answer must be an HTTP response whose body is OpenAI's error shape, read here with the standard library's
HTTP parser (the oracle for "a well-formed response"); every test is bounded by socket timeouts of a few seconds."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kiln.tensor.llm.server import LLMHTTPServer, ServerLimits, make_server, shut_down
from kiln.tensor.llm.session import ChatModel, load_chat_model

TIMEOUT = 5.0


@pytest.fixture(scope="module")
def model(chat_model_dir: Path) -> ChatModel:
    loaded = load_chat_model(chat_model_dir)
    loaded.complete(loaded.encode_prompt("Hello"), max_tokens=2)  # compiles the steps once for the module
    return loaded


@contextmanager
def running(model: ChatModel, **limits: Any) -> Iterator[LLMHTTPServer]:
    httpd, _ = make_server(model, port=0, limits=ServerLimits(**limits))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        shut_down(httpd, grace=1.0)
        thread.join(TIMEOUT)


@pytest.fixture(scope="module")
def server(model: ChatModel) -> Iterator[LLMHTTPServer]:
    with running(model, read_timeout=2.0) as httpd:
        yield httpd


def port_of(httpd: LLMHTTPServer) -> int:
    return int(httpd.server_address[1])


def exchange(port: int, data: bytes, method: str = "POST") -> tuple[int, http.client.HTTPResponse, Any]:
    """Sends `data` as is and parses the answer with http.client; (status, response, JSON body or None)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(data)
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        body = response.read()
    return response.status, response, (json.loads(body) if body else None)


def assert_openai_error(body: Any, code: str | None = None) -> None:
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["type"] in ("invalid_request_error", "server_error")
    if code is not None:
        assert body["error"]["code"] == code


def post_head(length: str | None, path: str = "/v1/completions", extra: str = "") -> bytes:
    header = "" if length is None else f"Content-Length: {length}\r\n"
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{header}{extra}\r\n".encode()


def test_fifty_simultaneous_connections_are_all_answered(server: LLMHTTPServer) -> None:
    port = port_of(server)
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) for _ in range(50)]  # all at once

    def ask(sock: socket.socket) -> int:
        with sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            response = http.client.HTTPResponse(sock, method="GET")
            response.begin()
            assert json.loads(response.read())["status"] == "ok"
            return response.status

    with ThreadPoolExecutor(max_workers=50) as pool:
        assert list(pool.map(ask, sockets)) == [200] * 50


def test_a_slow_drip_of_header_bytes_is_cut_at_the_read_deadline(model: ChatModel) -> None:
    with running(model, read_timeout=0.6) as httpd:
        port = port_of(httpd)
        clients = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) for _ in range(30)]
        for sock in clients:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        closed: set[int] = set()
        while len(closed) < len(clients) and time.monotonic() - started < 3.0:
            for index, sock in enumerate(clients):  # one byte each 0.1 s: a per-receive timeout would never fire
                if index not in closed:
                    try:
                        sock.sendall(b"X")
                        sock.settimeout(0.005)
                        if sock.recv(1) == b"":
                            closed.add(index)
                    except TimeoutError:
                        pass
                    except OSError:
                        closed.add(index)
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        assert len(closed) == len(clients) and elapsed < 2.0, (len(closed), elapsed)
        status, _, body = exchange(port, b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n", "GET")
        assert status == 200 and body["status"] == "ok"  # the server kept serving meanwhile
        deadline = time.monotonic() + 2.0
        while httpd.open_connections() and time.monotonic() < deadline:  # their threads are gone too
            time.sleep(0.02)
        assert httpd.open_connections() == 0
        for sock in clients:
            sock.close()


def test_a_body_that_stops_arriving_gets_408(model: ChatModel) -> None:
    with running(model, read_timeout=0.5) as httpd:
        started = time.monotonic()
        status, response, body = exchange(port_of(httpd), post_head("100") + b'{"model": ')
        assert status == 408 and 0.4 < time.monotonic() - started < 2.0
        assert_openai_error(body, "request_timeout")
        assert response.getheader("Connection") == "close"


def test_an_oversized_body_is_refused_unread_with_413(server: LLMHTTPServer) -> None:
    port = port_of(server)
    started = time.monotonic()
    status, _, body = exchange(port, post_head("100000000"))  # headers only: the body is never sent
    assert status == 413 and time.monotonic() - started < 1.0
    assert_openai_error(body, "request_too_large")
    assert "4194304" in body["error"]["message"]
    # a client that does send its 10 MB still reads the 413 (the server drains what arrives before it closes)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    prompt = json.dumps({"model": "m", "prompt": "x" * 10_000_000}).encode()
    connection.request("POST", "/v1/completions", prompt, {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 413
    assert_openai_error(json.loads(response.read()), "request_too_large")
    connection.close()


@pytest.mark.parametrize(
    ("length", "extra", "code"),
    [
        (None, "", "missing_content_length"),
        ("abc", "", "invalid_content_length"),
        ("-5", "", "invalid_content_length"),
        ("1_0", "", "invalid_content_length"),  # int() would take it
        ("+3", "", "invalid_content_length"),
        ("99999999999999999999999999999", "", "request_too_large"),
        ("2", "Content-Length: 3\r\n", "invalid_content_length"),  # two different lengths
        ("2", "Transfer-Encoding: chunked\r\n", "unsupported_transfer_encoding"),
    ],
)
def test_a_garbled_or_missing_content_length_is_answered(
    server: LLMHTTPServer, length: str | None, extra: str, code: str
) -> None:
    status, response, body = exchange(port_of(server), post_head(length, extra=extra) + b"{}")
    assert status == (413 if code == "request_too_large" else 400)
    assert response.getheader("Content-Type") == "application/json"
    assert_openai_error(body, code)


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * 200_000 + b"]" * 200_000,  # nested beyond the parser's recursion limit
        b'{"model": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}",
        b"{bad json",
        b'{"model": "\xff\xfe"}',  # not UTF-8
        b'{"seed": ' + b"9" * 5000 + b"}",  # more digits than Python converts
        b"",
    ],
)
def test_broken_or_deeply_nested_json_is_a_400(server: LLMHTTPServer, payload: bytes) -> None:
    status, _, body = exchange(port_of(server), post_head(str(len(payload))) + payload)
    assert status == 400
    assert_openai_error(body, "invalid_json")


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO", "HEAD"])
def test_other_methods_answer_405_in_json(server: LLMHTTPServer, method: str) -> None:
    request = f"{method} /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{{}}".encode()
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=TIMEOUT) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes: the request's body was not read
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405 ")
    status, response, _ = exchange(port_of(server), request, method)
    assert status == 405 and response.getheader("Allow") == "GET, POST"
    assert response.getheader("Content-Type") == "application/json"
    if method == "HEAD":
        assert body == b""  # a HEAD answer has headers only
    else:
        assert_openai_error(json.loads(body), "method_not_allowed")


def test_a_known_route_with_the_wrong_method_is_a_405(server: LLMHTTPServer) -> None:
    status, response, body = exchange(port_of(server), b"GET /v1/completions HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert status == 405 and response.getheader("Allow") == "POST"
    assert_openai_error(body, "method_not_allowed")
    status, response, body = exchange(port_of(server), post_head("2", path="/v1/models") + b"{}")
    assert status == 405 and response.getheader("Allow") == "GET"


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /health HTTP/1.1 extra words\r\n\r\n", 400),
        (b"GET /health HTTP/2.0\r\nHost: localhost\r\n\r\n", 505),
        (b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (b"GET /health HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 120 + b"\r\n", 431),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    ],
)
def test_malformed_request_lines_and_headers_answer_json(
    server: LLMHTTPServer, request_bytes: bytes, status: int
) -> None:
    got, response, body = exchange(port_of(server), request_bytes, "GET")
    assert got == status and response.getheader("Content-Type") == "application/json"
    assert_openai_error(body, "malformed_request")


def test_only_local_host_names_are_served_unless_allowed(server: LLMHTTPServer, model: ChatModel) -> None:
    port = port_of(server)

    def get(host: str) -> tuple[int, Any]:
        status, _, body = exchange(port, f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(), "GET")
        return status, body

    for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", "[::1]:8000", "LOCALHOST."):
        assert get(host)[0] == 200, host
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example"):
        status, body = get(host)  # what a page rebinding its own name to 127.0.0.1 sends
        assert status == 421, host
        assert_openai_error(body, "host_not_allowed")
    with running(model, allowed_hosts=("My.Lan",)) as httpd:
        request = b"GET /v1/models HTTP/1.1\r\nHost: my.lan:9000\r\n\r\n"
        assert exchange(port_of(httpd), request, "GET")[0] == 200
    with running(model, allowed_hosts=("*",)) as httpd:
        request = b"GET /v1/models HTTP/1.1\r\nHost: anything.example\r\n\r\n"
        assert exchange(port_of(httpd), request, "GET")[0] == 200


def test_a_client_resetting_mid_request_is_a_log_line(model: ChatModel, capfd: pytest.CaptureFixture[str]) -> None:
    lines: list[str] = []
    httpd, _ = make_server(model, port=0, log=lines.append)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        for partial in (b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n", post_head("500") + b'{"model"'):
            sock = socket.create_connection(("127.0.0.1", port_of(httpd)), timeout=TIMEOUT)
            sock.sendall(partial)
            time.sleep(0.1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # with linger 0: a reset, not an orderly close
        deadline = time.monotonic() + 2.0
        while httpd.open_connections() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert httpd.open_connections() == 0
        assert any("connection ended: ConnectionResetError" in line for line in lines), lines
        status, _, body = exchange(port_of(httpd), b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n", "GET")
        assert status == 200 and body["status"] == "ok"
    finally:
        shut_down(httpd, grace=1.0)
        thread.join(TIMEOUT)
    assert "Traceback" not in capfd.readouterr().err


def test_keep_alive_connection_serves_several_requests(server: LLMHTTPServer, model: ChatModel) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=TIMEOUT)
    for _ in range(3):
        connection.request("GET", "/v1/models")
        response = connection.getresponse()
        assert response.status == 200 and json.loads(response.read())["data"][0]["id"] == model.name
    body = json.dumps({"model": model.name, "prompt": "x", "seed": -1}).encode()
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 400
    assert_openai_error(json.loads(response.read()))
    connection.request("GET", "/health")  # the same connection still works after a refused request
    assert connection.getresponse().status == 200
    connection.close()
