"""The local HTTP server: the page's static files and the JSON endpoints (stdlib `http.server`, one thread per
request). A trace that cannot be read still gets a server: every page and endpoint answers with the error.

A trace is untrusted input and the server is local: it listens on 127.0.0.1 unless told otherwise, answers only
requests whose `Host` names a loopback address (or the address it was told to bind) with its port, so a web page
cannot read it through DNS rebinding, and every response carries a Content-Security-Policy that allows only the
server's own script files (no inline script or style, no other origin) and `X-Content-Type-Options: nosniff`.
"""

from __future__ import annotations

import html
import json
import os
import re
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlparse

from kiln.viz.data import NotFound, VizData
from kiln.viz.trace_file import TraceFileError, load_files

__all__ = ["VizServer", "start_server"]

_STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
_STEP = re.compile(r"^/api/rewrite/(\d+)/step/(\d+)$")
_GROUP = re.compile(r"^/api/group/([A-Za-z0-9_]+)$")
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Sent with every response: the page runs only /static/*.js and reads only its own endpoints."""
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""The host names a request's `Host` header may give (with the server's port)."""
_WILDCARDS = ("", "0.0.0.0", "::")


def _static(name: str) -> bytes | None:
    folder = resources.files("kiln.viz") / "static"
    target = folder / name
    if "/" in name or name.startswith(".") or not target.is_file():
        return None
    return target.read_bytes()


def _error_page(message: str) -> bytes:
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>kiln.viz: error</title>"
        "<link rel='stylesheet' href='/static/style.css'></head>"
        "<body class='error-page'><h1>kiln.viz cannot show this trace</h1>"
        f"<pre id='load-error'>{html.escape(message, quote=True)}</pre></body></html>"
    ).encode()


class VizServer:
    """Loads the files once and serves them; `url` once started."""

    def __init__(self, paths: list[str | os.PathLike[str]], host: str = "127.0.0.1", port: int = 0) -> None:
        self.error: str | None = None
        self.data: VizData | None = None
        try:
            self.data = VizData(load_files(paths))
        except TraceFileError as error:
            self.error = str(error)
        if self.data is not None:  # intern the node table while the first page loads
            threading.Thread(target=lambda: self.data and self.data.store, name="kiln-viz-load", daemon=True).start()
        handler = _make_handler(self)
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        address = self.httpd.server_address
        self.host = address[0].decode() if isinstance(address[0], bytes) else str(address[0])
        self.port = int(address[1])
        self._thread: threading.Thread | None = None

    def accepts_host(self, host: str | None) -> bool:
        """Whether a request's `Host` header names this server: a loopback name (or the address it was bound to,
        when that is not a wildcard) with its port (the port may be left out only when it is 80)."""
        if host is None:
            return False
        bound = f"[{self.host}]" if ":" in self.host else self.host
        names = {*LOOPBACK_NAMES, *(() if self.host in _WILDCARDS else (bound,))}
        given = host.strip().lower()
        allowed = {f"{name}:{self.port}" for name in names} | (names if self.port == 80 else set())
        return given in allowed

    @property
    def url(self) -> str:
        """The page's address (a loopback one when the server listens on every address)."""
        host = "127.0.0.1" if self.host in _WILDCARDS else f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def serve_forever(self) -> None:
        """Serve in this thread until `shutdown` (or KeyboardInterrupt)."""
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> VizServer:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self.serve_forever, name="kiln-viz-server", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def answer(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for GET `path`."""
        route = unquote(urlparse(path).path)
        if route in ("/", "/index.html"):
            if self.error is not None:
                return HTTPStatus.INTERNAL_SERVER_ERROR, "text/html", _error_page(self.error)
            body = _static("index.html")
            assert body is not None, "kiln.viz is installed without its static files"
            return HTTPStatus.OK, "text/html", body
        if route == "/favicon.ico":
            return HTTPStatus.NO_CONTENT, "image/x-icon", b""
        if route.startswith("/static/"):
            name = route.removeprefix("/static/")
            body = _static(name)
            if body is None:
                return HTTPStatus.NOT_FOUND, "text/plain", f"no static file {name!r}".encode()
            return HTTPStatus.OK, _STATIC_TYPES.get(os.path.splitext(name)[1], "application/octet-stream"), body
        if route.startswith("/api/"):
            return self._api(route)
        return HTTPStatus.NOT_FOUND, "text/plain", f"no page {route!r}".encode()

    def _api(self, route: str) -> tuple[int, str, bytes]:
        if self.error is not None or self.data is None:
            return self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": self.error})
        data = self.data
        routes: dict[str, Callable[[], dict[str, Any]]] = {
            "/api/kernels": data.kernels,
            "/api/timeline": data.timeline,
            "/api/schedule": data.schedules,
            "/api/profile.json": data.chrome_trace,
        }
        try:
            if route in routes:
                return self._json(HTTPStatus.OK, routes[route]())
            if match := _GROUP.match(route):
                return self._json(HTTPStatus.OK, data.group(match.group(1)))
            if match := _STEP.match(route):
                return self._json(HTTPStatus.OK, data.step(int(match.group(1)), int(match.group(2))))
        except NotFound as missing:
            return self._json(HTTPStatus.NOT_FOUND, {"error": str(missing)})
        return self._json(HTTPStatus.NOT_FOUND, {"error": f"no endpoint {route!r}"})

    @staticmethod
    def _json(status: int, value: Any) -> tuple[int, str, bytes]:
        return status, "application/json", json.dumps(value, separators=(",", ":")).encode()


def _make_handler(server: VizServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def end_headers(self) -> None:  # every response, error pages of http.server included
            self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            super().end_headers()

        def do_GET(self) -> None:
            host = self.headers.get("Host")
            if not server.accepts_host(host):
                refusal = f"kiln.viz answers only requests for 127.0.0.1:{server.port} or localhost:{server.port}"
                self._send(HTTPStatus.MISDIRECTED_REQUEST, "text/plain", f"{refusal}, not Host {host!r}".encode())
                return
            try:
                status, kind, body = server.answer(self.path)
            except Exception as error:  # one bad request must not stop the server: answer it with the error
                status, kind = HTTPStatus.INTERNAL_SERVER_ERROR, "application/json"
                body = json.dumps({"error": f"{type(error).__name__}: {error}"}).encode()
            self._send(status, kind, body)

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", f"{kind}; charset=utf-8" if kind.startswith("text") else kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return  # the page went away (a reload, a closed tab) before the answer was sent

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: the terminal shows the URL, not every request

    return Handler


def start_server(paths: list[str | os.PathLike[str]], host: str = "127.0.0.1", port: int = 0) -> VizServer:
    """A server for `paths` running in a background thread (port 0: a free port)."""
    return VizServer(paths, host, port).start()
