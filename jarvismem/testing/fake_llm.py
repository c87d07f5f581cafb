"""An OpenAI-compatible chat-completions and embeddings server for tests, over real HTTP.

:class:`FakeLLMServer` answers ``POST /v1/chat/completions``, ``POST /v1/embeddings``
and ``GET /v1/models`` in the OpenAI wire format, deterministically so tests can predict
what comes back: a completion is ``"SUMMARY: "`` and the last user message's first
non-empty lines joined by ``" | "``; an embedding is :func:`hashed_embedding` (a hashed
bag of words: texts sharing words are close). It records every request and injects
faults (see the class). ``python -m jarvismem.testing.fake_llm --port N`` serves until
killed.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import math
import re
import struct
import time
import uuid
from collections.abc import Callable, Mapping
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


EMBEDDING_DIMENSIONS = 64
"""Length of the fake's vectors when a request names no ``dimensions``."""

_WORD_RE = re.compile(r"[^\W_]+")


def hashed_embedding(
    text: str, dimensions: int = EMBEDDING_DIMENSIONS, aliases: Mapping[str, str] | None = None
) -> list[float]:
    """A deterministic, L2-normalised hashed bag of lower-cased words of ``text``.

    Each word adds +1 or -1 (by a hash bit) to one of ``dimensions`` buckets, so
    texts sharing words have a positive cosine and texts sharing none are near
    0. A text without a word maps to the first unit vector. ``aliases`` maps a
    word to the word it is hashed as, so a test can give two different words one
    meaning (``{"automobile": "car", "sedan": "car"}``).
    """
    vector = [0.0] * dimensions
    for word in _WORD_RE.findall(text.lower()):
        if aliases:
            word = aliases.get(word, word)
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dimensions
        vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        vector[0] = 1.0
        return vector
    return [v / norm for v in vector]


def _bad_request(message: str) -> Response:
    return Response.of_json(400, {"error": {"message": message, "type": "invalid_request_error"}})


def _not_found() -> Response:
    return Response.of_json(404, {"error": {"message": "not found", "type": "not_found"}})


class FakeLLMServer(FakeHttpServer):
    """A real loopback HTTP server speaking the chat-completions wire format.

    Faults: :meth:`fail_next` (the next *n* completions, or embeddings with
    ``endpoint="embeddings"``, answer a status and an optional ``Retry-After``) and
    :attr:`mode`: ``ok``; ``error`` (every request answers 500); ``empty`` (``content``
    is ``""``, an embeddings answer has no ``data``); ``huge`` (``content`` is
    :attr:`huge_chars` long); ``hang`` (no answer until stopped); ``garbage`` (a 200
    whose body is not JSON).
    """

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
        self.embedding_dimensions = EMBEDDING_DIMENSIONS
        # Words embedded as another word (see hashed_embedding): "meaning" for tests.
        self.embedding_aliases: dict[str, str] = {}
        self._failures: list[tuple[int, float | None]] = []
        self._embedding_failures: list[tuple[int, float | None]] = []
        super().__init__(host=host, port=port)

    @property
    def url(self) -> str:
        """Base URL to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    # --- fault injection & inspection ---------------------------------------------------

    def fail_next(
        self,
        n: int,
        status: int = 500,
        retry_after: float | None = None,
        *,
        endpoint: Literal["chat", "embeddings"] = "chat",
    ) -> None:
        """The next ``n`` requests to ``endpoint`` answer ``status`` (+ ``Retry-After``)."""
        with self._lock:
            queue = self._failures if endpoint == "chat" else self._embedding_failures
            queue.extend([(status, retry_after)] * n)

    def completion_requests(self) -> list[RecordedRequest]:
        """Recorded ``POST .../chat/completions`` requests, oldest first."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def embedding_requests(self) -> list[RecordedRequest]:
        """Recorded ``POST .../embeddings`` requests, oldest first."""
        return [r for r in self.requests if r.path.endswith("/embeddings")]

    def reset(self) -> None:
        """Forget recorded requests and pending failures; back to mode ``ok``."""
        with self._lock:
            self.clear_requests()
            self._failures.clear()
            self._embedding_failures.clear()
            self.mode = "ok"

    # --- HTTP -----------------------------------------------------------------------------

    def handle(self, request: Request) -> Response | None:
        """Route on the request target as sent: ``/v1/models``, ``/v1/chat/completions``
        and ``/v1/embeddings``."""
        route = request.target.rstrip("/")
        if request.method == "GET":
            if route != "/v1/models":
                return _not_found()
            data = [{"id": self.model, "object": "model", "owned_by": "jarvismem"}]
            return Response.of_json(200, {"object": "list", "data": data})
        if route == "/v1/embeddings":
            return self._embed(request.json)
        if route != "/v1/chat/completions":
            return _not_found()
        return self._complete(request.json)

    def _fault(self, queue: list[tuple[int, float | None]]) -> tuple[bool, Response | None]:
        """``(True, answer)`` when an injected failure or a fault mode answers this request."""
        with self._lock:
            failure = queue.pop(0) if queue else None
            mode = self.mode
        if failure is not None:
            status, retry_after = failure
            extra = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
            error = {"error": {"message": f"injected failure {status}", "type": "fake"}}
            return True, Response.of_json(status, error, extra)
        if mode == "hang":
            self.stopping.wait(timeout=HANG_SECONDS)
            return True, None
        if mode == "error":
            error = {"error": {"message": "fake server error", "type": "fake"}}
            return True, Response.of_json(500, error)
        if mode == "garbage":
            return True, Response(200, b"<html>this is not json", "text/html")
        return False, None

    def _embed(self, payload: Any) -> Response | None:
        faulted, answer = self._fault(self._embedding_failures)
        if faulted:
            return answer
        if not isinstance(payload, dict):
            return _bad_request("a JSON object body is required")
        texts = payload.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if (
            not isinstance(texts, list)
            or not texts
            or not all(isinstance(t, str) and t for t in texts)
        ):
            return _bad_request("input must be a non-empty string or list of non-empty strings")
        dimensions = payload.get("dimensions", self.embedding_dimensions)
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
            return _bad_request("dimensions must be a positive integer")
        encoding = payload.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            return _bad_request("encoding_format must be 'float' or 'base64'")
        data: list[dict[str, Any]] = []
        if self.mode != "empty":
            for index, text in enumerate(texts):
                vector = hashed_embedding(text, dimensions, self.embedding_aliases)
                embedding: Any = vector
                if encoding == "base64":
                    packed = struct.pack(f"<{len(vector)}f", *vector)
                    embedding = base64.b64encode(packed).decode("ascii")
                data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(len(t) for t in texts) // 4
        return Response.of_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": payload.get("model", self.model),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _complete(self, payload: Any) -> Response | None:
        faulted, answer = self._fault(self._failures)
        if faulted:
            return answer
        mode = self.mode
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


__all__ = [
    "EMBEDDING_DIMENSIONS",
    "MODES",
    "FakeLLMServer",
    "Mode",
    "RecordedRequest",
    "default_answer",
    "hashed_embedding",
]

if __name__ == "__main__":
    main()
