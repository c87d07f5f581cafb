"""An OpenAI-compatible chat-completions server for tests, over real HTTP on loopback.

``FakeLLMServer`` runs a threaded HTTP server on ``127.0.0.1`` (random port) in a
background thread. It answers:

* ``POST /v1/chat/completions`` in the OpenAI response shape. The default answer is
  deterministic, built from the last user message: ``"SUMMARY: "`` followed by its
  first non-empty lines joined with ``" | "``, so tests can check what went in.
* ``GET /v1/models``.

Faults: :meth:`FakeLLMServer.fail_next` (the next *n* completions answer with a status
and optional ``Retry-After``) and :attr:`FakeLLMServer.mode`:

``ok``      normal answers;
``error``   every completion answers 500;
``empty``   ``content`` is ``""``;
``huge``    ``content`` is :attr:`FakeLLMServer.huge_chars` characters long;
``hang``    the server never answers (until it is stopped);
``garbage`` a 200 with a body that is not JSON.

Every request is recorded in :attr:`FakeLLMServer.requests` (method, path, headers,
parsed JSON). ``python -m jarvismem.testing.fake_llm --port N`` serves until killed.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Mode = Literal["ok", "error", "empty", "huge", "hang", "garbage"]
MODES: tuple[str, ...] = ("ok", "error", "empty", "huge", "hang", "garbage")


@dataclass
class RecordedRequest:
    """One request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any = None
    received_at: float = field(default_factory=time.time)


def default_answer(messages: list[dict[str, Any]]) -> str:
    """``"SUMMARY: "`` + the first three non-empty lines of the last user message."""
    user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    lines = [line.strip() for line in str(user or "").splitlines() if line.strip()]
    return "SUMMARY: " + " | ".join(lines[:3])[:1000]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hang up on purpose in tests (timeouts, body limits): not an error.
        return


class FakeLLMServer:
    """A real loopback HTTP server speaking the chat-completions wire format."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "fake-model",
        responder: Callable[[list[dict[str, Any]]], str] | None = None,
    ) -> None:
        """``port`` 0 picks a free port. ``responder`` overrides :func:`default_answer`."""
        self.model = model
        self.responder = responder or default_answer
        self.mode: str = "ok"
        self.huge_chars = 200_000
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._failures: list[tuple[int, float | None]] = []
        self._stopping = threading.Event()
        self._server = _QuietServer((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeLLMServer:
        """Serve in a daemon thread; returns self."""
        if self._thread is None:
            # A short poll interval keeps stop() (and test teardown) fast.
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.02},
                name="fake-llm",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release hanging requests."""
        self._stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- fault injection & inspection ---------------------------------------------------

    def fail_next(self, n: int, status: int = 500, retry_after: float | None = None) -> None:
        """The next ``n`` chat completions answer ``status`` (with ``Retry-After`` if given)."""
        with self._lock:
            self._failures.extend([(status, retry_after)] * n)

    def completion_requests(self) -> list[RecordedRequest]:
        """Recorded ``POST .../chat/completions`` requests, oldest first."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def reset(self) -> None:
        """Forget recorded requests and pending failures; back to mode ``ok``."""
        with self._lock:
            self.requests.clear()
            self._failures.clear()
            self.mode = "ok"

    # --- HTTP -----------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes on a kept-alive connection:
            # with Nagle on, the body waits for the client's delayed ACK (~40 ms).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
                return

            def _send(
                self,
                status: int,
                body: bytes,
                content_type: str = "application/json",
                extra: dict[str, str] | None = None,
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, data: Any, extra: dict[str, str] | None = None) -> None:
                self._send(status, json.dumps(data).encode(), extra=extra)

            def _record(self, payload: Any) -> None:
                with fake._lock:
                    fake.requests.append(
                        RecordedRequest(
                            method=self.command,
                            path=self.path,
                            headers={k.lower(): v for k, v in self.headers.items()},
                            json=payload,
                        )
                    )

            def do_GET(self) -> None:
                self._record(None)
                if self.path.rstrip("/") == "/v1/models":
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {"id": fake.model, "object": "model", "owned_by": "jarvismem"}
                            ],
                        },
                    )
                else:
                    self._json(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    payload: Any = json.loads(raw) if raw else None
                except ValueError:
                    payload = None
                self._record(payload)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._json(404, {"error": {"message": "not found", "type": "not_found"}})
                    return
                with fake._lock:
                    failure = fake._failures.pop(0) if fake._failures else None
                    mode = fake.mode
                if failure is not None:
                    status, retry_after = failure
                    extra = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
                    self._json(
                        status,
                        {"error": {"message": f"injected failure {status}", "type": "fake"}},
                        extra,
                    )
                    return
                if mode == "hang":
                    fake._stopping.wait(timeout=300)
                    return
                if mode == "error":
                    self._json(500, {"error": {"message": "fake server error", "type": "fake"}})
                    return
                if mode == "garbage":
                    self._send(200, b"<html>this is not json", "text/html")
                    return
                if not isinstance(payload, dict) or not isinstance(payload.get("messages"), list):
                    self._json(400, {"error": {"message": "messages required", "type": "fake"}})
                    return
                messages = payload["messages"]
                if mode == "empty":
                    content = ""
                elif mode == "huge":
                    content = "x" * fake.huge_chars
                else:
                    content = fake.responder(messages)
                prompt_chars = sum(len(str(m.get("content", ""))) for m in messages)
                self._json(
                    200,
                    {
                        "id": "chatcmpl-" + uuid.uuid4().hex[:24],
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": payload.get("model", fake.model),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt_chars // 4,
                            "completion_tokens": len(content) // 4,
                            "total_tokens": (prompt_chars + len(content)) // 4,
                        },
                    },
                )

        return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve a fake LLM on ``--port`` until interrupted."""
    parser = argparse.ArgumentParser(description="jarvismem fake OpenAI-compatible LLM")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", choices=MODES, default="ok")
    args = parser.parse_args(argv)
    server = FakeLLMServer(host=args.host, port=args.port)
    server.mode = args.mode
    print(f"fake LLM serving at http://{args.host}:{server.port}/v1", flush=True)
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._stopping.set()
        server._server.server_close()


if __name__ == "__main__":
    main()
