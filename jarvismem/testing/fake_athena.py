"""An in-repo Athena server for tests, the CLI demo and benchmarks.

:class:`FakeAthenaServer` is a real HTTP server on loopback (a random free
port, a background thread) that speaks Athena's wire format exactly as
``ATHENA_API.md`` describes it: camelCase answers with every field present, the
same status codes and error bodies, 501 for the routes the real server does not
implement. It keeps memory per (tenant, user, agent) like the real one, lets
tests seed mid-term chains and long-term nodes, records every request, and can
inject faults (``fail_next``, ``mode``).

Run it standalone with ``python -m jarvismem.testing.fake_athena --port N``.
"""

from __future__ import annotations

import argparse
import math
import re
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from jarvismem.testing._fake_server import FakeHttpServer, RecordedRequest, Request, Response

__all__ = ["EMBEDDING_DIM", "FakeAthenaServer", "Mode", "RecordedRequest", "embed"]

Mode = Literal["ok", "error500", "hang", "garbage", "slow"]

STM_CAP = 10
EMBEDDING_DIM = 32
_EVENT_TYPES = frozenset({"message", "thought", "action", "observation"})
_TOKEN_RE = re.compile(r"\w+")
_CAMEL_RE = re.compile(r"(?<!^)(?=[A-Z])")

_SESSION_ROUTES = frozenset(
    {
        ("POST", ("events",)),
        ("POST", ("interactions",)),
        ("GET", ("context",)),
        ("POST", ("context", "search")),
    }
)

# gRPC status codes the gateway puts in error bodies.
_GRPC = {400: 3, 404: 5, 500: 13, 501: 12, 503: 14}


def embed(text: str) -> list[float]:
    """A tiny deterministic bag-of-words embedding (unit length, EMBEDDING_DIM wide)."""
    vec = [0.0] * EMBEDDING_DIM
    for token in _TOKEN_RE.findall(text.lower()):
        vec[zlib.crc32(token.encode()) % EMBEDDING_DIM] += 1.0
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec] if norm else vec


def _l2(a: list[float], b: list[float]) -> float:
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _snake(name: str) -> str:
    return _CAMEL_RE.sub("_", name).lower()


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Session:
    tenant: str
    user: str
    agent: str
    metadata: dict[str, str] = field(default_factory=dict)


class FakeAthenaServer(FakeHttpServer):
    """A thread-safe fake of the Athena REST API on ``127.0.0.1``.

    Args:
        api_key: when set, every route except ``GET /health`` needs
            ``X-API-Key: <key>`` or ``Authorization: Bearer <key>`` (else 401).
        jwt_token: when set, ``X-JWT-Token: <token>`` / ``Authorization: JWT
            <token>`` is accepted as well (and required if no api_key is set).
        port: 0 picks a free port.
        hang_seconds: how long ``mode="hang"`` holds a request.
        slow_seconds: delay added by ``mode="slow"``.

    The lifecycle (``start``/``stop``, ``url``) and the recorded ``requests`` come
    from :class:`~jarvismem.testing._fake_server.FakeHttpServer`.
    """

    methods = ("GET", "POST", "DELETE", "PUT", "PATCH")
    thread_name = "fake-athena"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        jwt_token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        hang_seconds: float = 5.0,
        slow_seconds: float = 0.2,
    ) -> None:
        self.api_key = api_key
        self.jwt_token = jwt_token
        self.hang_seconds = hang_seconds
        self.slow_seconds = slow_seconds
        self.mode: Mode = "ok"
        self.status = "healthy"
        self.dependencies: dict[str, str] = {"redis": "healthy", "mongodb": "healthy"}
        self.sessions_created = 0
        self._fail_count = 0
        self._fail_status = 500
        self._sessions: dict[str, _Session] = {}
        self._stm: dict[tuple[str, str, str], deque[dict[str, Any]]] = {}
        self._chains: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._ltm: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._events: list[tuple[str, dict[str, Any]]] = []
        super().__init__(host=host, port=port)

    # --- seeding and fault injection ----------------------------------------------------

    def fail_next(self, n: int, status: int = 500) -> None:
        """Answer the next ``n`` requests (any route) with ``status`` and an error body."""
        with self._lock:
            self._fail_count = n
            self._fail_status = status

    def add_chain(
        self,
        tenant: str,
        user: str,
        topic: str,
        summary: str,
        *,
        embedding: list[float] | None = None,
        session_id: str = "",
        metadata: dict[str, str] | None = None,
    ) -> str:
        """Seed a mid-term chain for (tenant, user); returns its id."""
        chain = {
            "id": str(uuid.uuid4()),
            "sessionId": session_id,
            "topic": topic,
            "summary": summary,
            "timestamp": _now(),
            "embedding": list(embedding) if embedding is not None else embed(summary),
            "metadata": dict(metadata or {}),
        }
        with self._lock:
            self._chains.setdefault((tenant, user), []).append(chain)
        return str(chain["id"])

    def add_ltm_node(self, tenant: str, user: str, name: str, label: str) -> None:
        """Seed a long-term graph node; search returns it as ``"<name> [<Label>]"``."""
        with self._lock:
            self._ltm.setdefault((tenant, user), []).append((name, label))

    def forget_session(self, session_id: str) -> None:
        """Make a session unknown (its routes answer 404 from now on)."""
        with self._lock:
            self._sessions.pop(session_id, None)

    # --- inspection --------------------------------------------------------------------

    def requests_to(self, method: str, path_suffix: str) -> list[RecordedRequest]:
        """Recorded requests with this method whose path ends with ``path_suffix``."""
        return [r for r in self.requests if r.method == method and r.path.endswith(path_suffix)]

    @property
    def events(self) -> list[tuple[str, dict[str, Any]]]:
        """Every accepted event as (session id, wire event), unbounded, oldest first."""
        with self._lock:
            return [(sid, dict(ev)) for sid, ev in self._events]

    @property
    def session_ids(self) -> list[str]:
        """Ids of the sessions that exist."""
        with self._lock:
            return list(self._sessions)

    def session_tenants(self) -> dict[str, str]:
        """The tenant of each session that exists, by session id."""
        with self._lock:
            return {sid: session.tenant for sid, session in self._sessions.items()}

    def stm(self, tenant: str, user: str, agent: str) -> list[dict[str, Any]]:
        """The short-term window of (tenant, user, agent), oldest first."""
        with self._lock:
            return [dict(e) for e in self._stm.get((tenant, user, agent), ())]

    # --- request handling (called from handler threads) ---------------------------------

    def handle(self, request: Request) -> Response:
        """Athena's answer to one request (faults first, then auth, then the route)."""
        method, path, query, headers = request.method, request.path, request.query, request.headers
        body = request.json
        with self._lock:
            mode = self.mode
            fail = self._fail_count > 0
            if fail:
                self._fail_count -= 1
            fail_status = self._fail_status
        if fail:
            return _error(fail_status, "injected failure")
        if mode == "error500":
            return _error(500, "datastore unavailable")
        if mode == "hang":
            self.stopping.wait(self.hang_seconds)
            return _error(504, "hung request released")
        if mode == "garbage":
            return Response(200, b"<html>this is not json", "text/html")
        if mode == "slow":
            self.stopping.wait(self.slow_seconds)
        if path == "/health" and method == "GET":
            return _ok({"status": self.status, "timestamp": _now(), "service": "memory-os"})
        if not self._authorized(headers):
            payload = {
                "error": "authentication_failed",
                "message": "missing or invalid credentials",
            }
            return Response.of_json(401, payload)
        try:
            if request.json_error or (body is not None and not isinstance(body, dict)):
                raise _HttpError(400, "invalid JSON body")
            return _ok(self._route(method, path, query, _normalise(body or {})))
        except _HttpError as exc:
            return _error(exc.status, exc.message)

    def error_response(self, exc: Exception) -> Response:
        """A bug in the fake answers like the gateway's internal error."""
        return _error(500, f"fake server error: {type(exc).__name__}")

    def _authorized(self, headers: dict[str, str]) -> bool:
        if not self.api_key and not self.jwt_token:
            return True
        auth = headers.get("authorization", "")
        if self.api_key and (
            headers.get("x-api-key") == self.api_key or auth == f"Bearer {self.api_key}"
        ):
            return True
        return bool(
            self.jwt_token
            and (headers.get("x-jwt-token") == self.jwt_token or auth == f"JWT {self.jwt_token}")
        )

    def _route(
        self, method: str, path: str, query: dict[str, str], body: dict[str, Any]
    ) -> dict[str, Any]:
        segs = [s for s in path.split("/") if s]
        if segs[:2] != ["api", "v1"]:
            raise _HttpError(404, "Not Found")
        rest = segs[2:]
        if rest == ["health"] and method == "GET":
            with self._lock:
                return {
                    "status": self.status,
                    "dependencies": dict(self.dependencies),
                    "timestamp": _now(),
                }
        if rest == ["sessions"] and method == "POST":
            return self._create_session(body)
        if rest == ["admin", "analytics", "trigger"] and method == "POST":
            return {"success": True, "message": "analytics job triggered"}
        if len(rest) >= 2 and rest[0] == "sessions":
            sid, tail = rest[1], rest[2:]
            unimplemented = {
                ("GET", ()): "GetSession",
                ("DELETE", ()): "DeleteSession",
                ("GET", ("analysis", "topics")): "GetTopics",
                ("GET", ("analysis", "heat")): "GetHeat",
                ("GET", ("segments",)): "GetSegments",
            }
            name = unimplemented.get((method, tuple(tail)))
            if name is not None:
                raise _HttpError(501, f"method {name} not implemented")
            route = (method, tuple(tail))
            if route in _SESSION_ROUTES:
                self._session(sid)  # 404 for an unknown session on every session route
                if route == ("POST", ("events",)):
                    return self._add_event(sid, body)
                if route == ("POST", ("interactions",)):
                    return self._add_interaction(sid, body)
                if route == ("GET", ("context",)):
                    return self._context(sid, query)
                return self._search(sid, body)
        raise _HttpError(404, "Not Found")

    def _session(self, sid: str) -> _Session:
        with self._lock:
            session = self._sessions.get(sid)
        if session is None:
            raise _HttpError(404, f"session not found or invalid: {sid}")
        return session

    def _create_session(self, body: dict[str, Any]) -> dict[str, Any]:
        tenant, user = body.get("tenant_id"), body.get("user_id")
        if not isinstance(tenant, str) or not tenant:
            raise _HttpError(400, "tenant_id is required")
        if not isinstance(user, str) or not user:
            raise _HttpError(400, "user_id is required")
        agent = body.get("agent_id") or "default"
        if not isinstance(agent, str):
            raise _HttpError(400, "agent_id must be a string")
        metadata = _str_map(body.get("metadata"), "metadata")
        sid = str(uuid.uuid4())
        with self._lock:
            self._sessions[sid] = _Session(tenant, user, agent, metadata)
            self.sessions_created += 1
        return {"sessionId": sid, "createdAt": None}

    def _append(self, sid: str, event: dict[str, Any]) -> None:
        session = self._session(sid)
        key = (session.tenant, session.user, session.agent)
        with self._lock:
            self._stm.setdefault(key, deque(maxlen=STM_CAP)).append(event)
            self._events.append((sid, event))

    def _add_event(self, sid: str, body: dict[str, Any]) -> dict[str, Any]:
        etype = body.get("type")
        if etype not in _EVENT_TYPES:
            raise _HttpError(400, f"invalid event type: {etype if etype is not None else ''}")
        metadata = _str_map(body.get("metadata"), "metadata")
        payload, mime = body.get("payload"), body.get("mime_type")
        event = {
            "role": str(body.get("role") or "system"),
            "type": etype,
            "content": str(body.get("content") or ""),
            "timestamp": _now(),
            "metadata": metadata,
            "blobUri": f"blob://{uuid.uuid4()}" if payload else "",
            "blobMimeType": str(mime or "") if payload else "",
        }
        self._append(sid, event)
        return {"success": True, "eventId": ""}

    def _add_interaction(self, sid: str, body: dict[str, Any]) -> dict[str, Any]:
        user_message = body.get("user_message")
        if not isinstance(user_message, str):
            raise _HttpError(400, "user_message is required")
        base = {"timestamp": _now(), "metadata": {}, "blobUri": "", "blobMimeType": ""}
        self._append(sid, {**base, "role": "user", "type": "message", "content": user_message})
        response = body.get("agent_response")
        if isinstance(response, str) and response:
            self._append(sid, {**base, "role": "assistant", "type": "message", "content": response})
        return {"success": True, "interactionId": ""}

    def _context(self, sid: str, query: dict[str, str]) -> dict[str, Any]:
        session = self._session(sid)
        try:
            limit = int(query.get("limit", "0"))
        except ValueError:
            limit = 0
        if limit <= 0:
            limit = STM_CAP
        text = query.get("query")
        with self._lock:
            window = list(self._stm.get((session.tenant, session.user, session.agent), ()))
            chains = [
                c for c in self._chains.get((session.tenant, session.user), []) if c["summary"]
            ]
        stm = [dict(e) for e in window[-min(limit, STM_CAP) :]]
        if text:
            q = embed(text)
            ranked = sorted(chains, key=lambda c: _distance(q, c))
            pages = ranked[:limit]
        else:
            pages = list(reversed(chains))[:limit]
        return {
            "stmEvents": stm,
            "relevantPages": [dict(c) for c in pages],
            "segments": [],
            "userPersona": None,
            "ltpm": {"status": "not_implemented"},
        }

    def _search(self, sid: str, body: dict[str, Any]) -> dict[str, Any]:
        session = self._session(sid)
        text = body.get("query")
        if not isinstance(text, str) or not text:
            raise _HttpError(400, "query is required")
        limit = body.get("limit") or 5
        if not isinstance(limit, int) or limit <= 0:
            limit = 5
        wanted = _str_map(body.get("filter"), "filter")
        with self._lock:
            chains = list(self._chains.get((session.tenant, session.user), []))
            nodes = list(self._ltm.get((session.tenant, session.user), []))
        chains = [c for c in chains if all(c["metadata"].get(k) == v for k, v in wanted.items())]
        q = embed(text)
        nearest = {c["id"] for c in sorted(chains, key=lambda c: _distance(q, c))[:limit]}
        # Like the real server: the k nearest, in storage order (NOT sorted by distance).
        results = [
            {
                "content": c["summary"],
                "similarityScore": _distance(q, c),
                "sourceType": "cognitive_chain",
                "sourceId": c["id"],
                "timestamp": c["timestamp"],
            }
            for c in chains
            if c["id"] in nearest
        ]
        results += [
            {
                "content": f"{name} [{label}]",
                "similarityScore": 0,
                "sourceType": "ltm_node",
                "sourceId": f"{label}/{name}",
                "timestamp": "",
            }
            for name, label in nodes
        ]
        return {"results": results}


def _distance(query: list[float], chain: dict[str, Any]) -> float:
    emb = chain["embedding"]
    if len(emb) != len(query):
        emb = embed(chain["summary"])
    return _l2(query, emb)


def _normalise(body: dict[str, Any]) -> dict[str, Any]:
    """Accept camelCase or snake_case field names, like the gateway."""
    return {_snake(k) if isinstance(k, str) else k: v for k, v in body.items()}


def _str_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _HttpError(400, f"{what} must be a map of string to string")
    return dict(value)


def _ok(payload: dict[str, Any]) -> Response:
    return Response.of_json(200, payload)


def _error(status: int, message: str) -> Response:
    return Response.of_json(
        status, {"code": _GRPC.get(status, 2), "message": message, "details": []}
    )


def main(argv: list[str] | None = None) -> None:
    """Serve a fake Athena until interrupted."""
    parser = argparse.ArgumentParser(description="Serve a fake Athena MemOS on loopback.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--api-key", default=None, help="require this API key")
    args = parser.parse_args(argv)
    server = FakeAthenaServer(host=args.host, port=args.port, api_key=args.api_key)
    print(f"fake Athena listening on {server.url}", flush=True)
    server.serve_until_interrupted()


if __name__ == "__main__":
    main()
