"""One base for the in-repo fake HTTP servers: a loopback lifecycle and request recording.

A fake subclasses :class:`FakeHttpServer` and implements :meth:`FakeHttpServer.handle`
(one :class:`Request` to a :class:`Response`, or ``None`` to answer nothing, as a hung
server would). The base binds on construction (``url`` is known before ``start``),
serves from a daemon thread, records every request, and on ``stop`` closes the kept-alive
connections too: a stopped server refuses, like a dead one, and can be started again.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

POLL_INTERVAL = 0.02
"""How often the serving thread checks for :meth:`FakeHttpServer.stop` (keeps teardown fast)."""


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request a fake received.

    ``path`` is without the query string, which is in ``query`` (first value of
    each name); ``headers`` have lower-case names; ``json`` is the parsed body,
    None when there was none or it was not JSON.
    """

    method: str
    path: str
    headers: dict[str, str]
    json: Any = None
    query: dict[str, str] = field(default_factory=dict)
    received_at: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class Request:
    """What :meth:`FakeHttpServer.handle` is given.

    ``target`` is the request target exactly as sent (path and query);
    ``json_error`` is true when there was a body and it was not JSON.
    """

    method: str
    target: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    json: Any
    json_error: bool


@dataclass(frozen=True, slots=True)
class Response:
    """What a fake answers: a status, a body and its type, and any extra headers."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, status: int, data: Any, headers: Mapping[str, str] | None = None) -> Response:
        """``data`` serialised as a JSON body."""
        return cls(status, json.dumps(data).encode(), headers=dict(headers or {}))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a hanging request must not block stop()
    # A real server listens with the OS's full backlog; the standard library's 5
    # would reset connections under a burst of clients.
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hang up on purpose in tests (timeouts, body limits): not an error.
        return


class FakeHttpServer:
    """A real HTTP server on loopback, serving from a background thread.

    Subclasses implement :meth:`handle`; ``methods`` lists the HTTP methods they
    serve (any other gets the standard library's 501); ``thread_name`` names the
    serving thread.
    """

    methods: tuple[str, ...] = ("GET", "POST")
    thread_name = "fake-http"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.stopping = threading.Event()
        """Set by :meth:`stop`: handlers that hold a request on purpose wait on it."""
        self._lock = threading.RLock()
        self._requests: list[RecordedRequest] = []
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None
        self._httpd: _Server | None = _Server((host, port), self._handler_class())
        self._port = int(self._httpd.server_address[1])

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (the same across a stop and a start)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://<host>:<port>``."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        """Serve in a daemon thread (rebinding the same port after a stop); returns self."""
        if self._thread is not None:
            return self
        self.stopping.clear()
        if self._httpd is None:
            self._httpd = _Server((self.host, self._port), self._handler_class())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL},
            name=self.thread_name,
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the port and every open connection, release held requests."""
        self.stopping.set()
        httpd, self._httpd = self._httpd, None
        thread, self._thread = self._thread, None
        if httpd is not None:
            if thread is not None:
                httpd.shutdown()
            httpd.server_close()
        # Kept-alive connections would otherwise go on being served by their
        # handler threads: a stopped server must refuse, like a dead one.
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_until_interrupted(self) -> None:
        """Serve until Ctrl-C (the fakes' ``python -m`` entry points)."""
        self.start()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    # --- recording ----------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._requests.clear()

    # --- what a fake implements ---------------------------------------------------------

    def handle(self, request: Request) -> Response | None:
        """The answer to ``request``; None sends nothing. Runs in a handler thread."""
        raise NotImplementedError

    def error_response(self, exc: Exception) -> Response:
        """The answer when :meth:`handle` raised (a bug in the fake must still answer)."""
        return Response.of_json(
            500, {"error": {"message": f"fake server error: {type(exc).__name__}"}}
        )

    # --- plumbing (handler threads) -----------------------------------------------------

    def _receive(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Request:
        parts = urlsplit(target)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        parsed: Any = None
        json_error = False
        if body:
            try:
                parsed = json.loads(body)
            except ValueError:
                json_error = True
        with self._lock:
            self._requests.append(
                RecordedRequest(method, parts.path, dict(headers), parsed, dict(query))
            )
        return Request(method, target, parts.path, query, headers, body, parsed, json_error)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes on a kept-alive connection:
            # with Nagle on, the body waits for the client's delayed ACK (~40 ms).
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server._connections.add(self.connection)

            def finish(self) -> None:
                with server._lock:
                    server._connections.discard(self.connection)
                super().finish()

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = server._receive(self.command, self.path, headers, raw)
                try:
                    response = server.handle(request)
                except Exception as exc:
                    response = server.error_response(exc)
                if response is None:
                    return
                try:
                    self.send_response(response.status)
                    self.send_header("Content-Type", response.content_type)
                    self.send_header("Content-Length", str(len(response.body)))
                    for name, value in response.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(response.body)
                except OSError:
                    pass  # the client went away (e.g. it timed out on a hang)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: tests assert on recorded requests instead

        for method in server.methods:
            setattr(Handler, f"do_{method}", Handler._serve)
        return Handler


__all__ = ["FakeHttpServer", "RecordedRequest", "Request", "Response"]
