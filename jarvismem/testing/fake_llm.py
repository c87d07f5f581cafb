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
parsed JSON); the lifecycle and the recording are the shared fake-server base's
(:mod:`jarvismem.testing._fake_server`). ``python -m jarvismem.testing.fake_llm
--port N`` serves until killed.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

from jarvismem.testing._fake_server import FakeHttpServer, RecordedRequest, Request, Response

Mode = Literal["ok", "error", "empty", "huge", "hang", "garbage"]
MODES: tuple[str, ...] = ("ok", "error", "empty", "huge", "hang", "garbage")

HANG_SECONDS = 300.0
"""How long mode ``hang`` holds a request at most (stop() releases it sooner)."""


def default_answer(messages: list[dict[str, Any]]) -> str:
    """``"SUMMARY: "`` + the first three non-empty lines of the last user message."""
    user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    lines = [line.strip() for line in str(user or "").splitlines() if line.strip()]
    return "SUMMARY: " + " | ".join(lines[:3])[:1000]


def _not_found() -> Response:
    return Response.of_json(404, {"error": {"message": "not found", "type": "not_found"}})


class FakeLLMServer(FakeHttpServer):
    """A real loopback HTTP server speaking the chat-completions wire format."""

    thread_name = "fake-llm"

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
        self._failures: list[tuple[int, float | None]] = []
        super().__init__(host=host, port=port)

    @property
    def url(self) -> str:
        """Base URL to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    # --- fault injection & inspection ---------------------------------------------------

    def fail_next(self, n: int, status: int = 500, retry_after: float | None = None) -> None:
        """The next ``n`` chat completions answer ``status`` (with ``Retry-After`` if given)."""
        with self._lock:
            self._failures.extend([(status, retry_after)] * n)

    def completion_requests(self) -> list[RecordedRequest]:
        """Recorded ``POST .../chat/completions`` requests, oldest first."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def reset(self) -> None:
        """Forget recorded requests and pending failures; back to mode ``ok``."""
        with self._lock:
            self.clear_requests()
            self._failures.clear()
            self.mode = "ok"

    # --- HTTP -----------------------------------------------------------------------------

    def handle(self, request: Request) -> Response | None:
        """Route on the request target as sent: ``/v1/models`` and ``/v1/chat/completions``."""
        route = request.target.rstrip("/")
        if request.method == "GET":
            if route != "/v1/models":
                return _not_found()
            data = [{"id": self.model, "object": "model", "owned_by": "jarvismem"}]
            return Response.of_json(200, {"object": "list", "data": data})
        if route != "/v1/chat/completions":
            return _not_found()
        return self._complete(request.json)

    def _complete(self, payload: Any) -> Response | None:
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
            mode = self.mode
        if failure is not None:
            status, retry_after = failure
            extra = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
            error = {"error": {"message": f"injected failure {status}", "type": "fake"}}
            return Response.of_json(status, error, extra)
        if mode == "hang":
            self.stopping.wait(timeout=HANG_SECONDS)
            return None
        if mode == "error":
            return Response.of_json(
                500, {"error": {"message": "fake server error", "type": "fake"}}
            )
        if mode == "garbage":
            return Response(200, b"<html>this is not json", "text/html")
        if not isinstance(payload, dict) or not isinstance(payload.get("messages"), list):
            return Response.of_json(
                400, {"error": {"message": "messages required", "type": "fake"}}
            )
        messages = payload["messages"]
        if mode == "empty":
            content = ""
        elif mode == "huge":
            content = "x" * self.huge_chars
        else:
            content = self.responder(messages)
        prompt_chars = sum(len(str(m.get("content", ""))) for m in messages)
        return Response.of_json(
            200,
            {
                "id": "chatcmpl-" + uuid.uuid4().hex[:24],
                "object": "chat.completion",
                "created": int(time.time()),
                "model": payload.get("model", self.model),
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
    server.serve_until_interrupted()


__all__ = ["MODES", "FakeLLMServer", "Mode", "RecordedRequest", "default_answer"]

if __name__ == "__main__":
    main()
