"""An in-repo Athena server for tests, the CLI demo and benchmarks.

:class:`FakeAthenaServer` is a real HTTP server on loopback (a random free port, a
background thread) that behaves like Athena MemOS 0.1.x as the Athena API notes
describe it, including the parts a client would rather it did not do;
``tests/testing/test_fake_athena_contract.py`` checks every fact of those notes against
it over HTTP. Where the server's worker is not deterministic (short-term window,
chain formation, search), the fake's own rules and its faults are in docs/athena.md,
"The in-repo fake". Run it with ``python -m jarvismem.testing.fake_athena --port N``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import itertools
import math
import re
import uuid
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from jarvismem.testing._fake_server import FakeHttpServer, RecordedRequest, Request, Response

__all__ = [
    "EMBEDDING_DIM",
    "GRPC_CODE_FOR_STATUS",
    "HTTP_STATUS_FOR_GRPC",
    "MIN_USER_EVENTS",
    "STM_CAP",
    "STM_TTL_SECONDS",
    "SUMMARY_MAX_CHARS",
    "FakeAthenaServer",
    "Mode",
    "RecordedRequest",
    "embed",
    "keywords",
]

Mode = Literal["ok", "error500", "hang", "garbage", "slow", "datastore_down"]

STM_CAP = 10
"""Entries kept per short-term window (the server's ``STM_CACHE_MAX_TURNS``)."""
STM_TTL_SECONDS = 2 * 3600
"""How long a short-term entry lives."""
MIN_USER_EVENTS = 2
"""User entries the worker waits for before it groups a window into chains."""
SUMMARY_MAX_CHARS = 500
"""Bound on a formed chain's summary."""
EMBEDDING_DIM = 32
DEFAULT_CONTEXT_LIMIT = 10
DEFAULT_SEARCH_LIMIT = 5

HTTP_STATUS_FOR_GRPC = {
    2: 500,
    3: 400,
    4: 504,
    5: 404,
    8: 429,
    9: 400,
    12: 501,
    13: 500,
    14: 503,
    16: 401,
}
"""grpc-gateway's HTTP status for each gRPC code the server uses."""
GRPC_CODE_FOR_STATUS = {400: 3, 401: 16, 404: 5, 429: 8, 500: 13, 501: 12, 503: 14, 504: 4}
"""The gRPC code behind each status the gateway answers (for injected faults)."""

_EVENT_TYPES = frozenset({"message", "thought", "action", "observation"})
_TOKEN_RE = re.compile(r"\w+")
_CAMEL_RE = re.compile(r"(?<!^)(?=[A-Z])")
_STOP_WORDS = frozenset(
    "about also been could does from have into just like make need please should some "
    "than thanks that their them then there these they this what when where which will "
    "with would your".split()
)

# Request fields per route and their protobuf kinds; anything else is dropped.
_STR, _INT, _FLOAT, _MAP, _BYTES, _TIME = "string", "int32", "float", "map", "bytes", "timestamp"
_SESSION_FIELDS = {"tenant_id": _STR, "user_id": _STR, "agent_id": _STR, "metadata": _MAP}
_EVENT_FIELDS = {
    "type": _STR,
    "role": _STR,
    "content": _STR,
    "metadata": _MAP,
    "timestamp": _TIME,
    "payload": _BYTES,
    "mime_type": _STR,
}
_INTERACTION_FIELDS = {
    "user_message": _STR,
    "agent_response": _STR,
    "metadata": _MAP,
    "timestamp": _TIME,
}
_SEARCH_FIELDS = {"query": _STR, "limit": _INT, "similarity_threshold": _FLOAT, "filter": _MAP}
_CONTEXT_QUERY = {"limit": _INT, "query": _STR}

# (method, path after /api/v1 with "*" for the session id, handler or unimplemented RPC).
_ROUTES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("GET", ("health",), "_health"),
    ("POST", ("sessions",), "_create_session"),
    ("GET", ("sessions", "*"), "rpc:GetSession"),
    ("DELETE", ("sessions", "*"), "rpc:DeleteSession"),
    ("POST", ("sessions", "*", "events"), "_add_event"),
    ("POST", ("sessions", "*", "interactions"), "_add_interaction"),
    ("GET", ("sessions", "*", "context"), "_context"),
    ("POST", ("sessions", "*", "context", "search"), "_search"),
    ("GET", ("sessions", "*", "analysis", "topics"), "rpc:GetTopics"),
    ("GET", ("sessions", "*", "analysis", "heat"), "rpc:GetHeat"),
    ("GET", ("sessions", "*", "segments"), "rpc:GetSegments"),
    ("POST", ("admin", "analytics", "trigger"), "_trigger"),
)
_ROUTE_TABLE: dict[tuple[str, ...], dict[str, str]] = {}
for _method, _pattern, _target in _ROUTES:
    _ROUTE_TABLE.setdefault(_pattern, {})[_method] = _target


def embed(text: str) -> list[float]:
    """A tiny deterministic bag-of-words embedding (unit length, EMBEDDING_DIM wide)."""
    vec = [0.0] * EMBEDDING_DIM
    for token in _TOKEN_RE.findall(text.lower()):
        vec[zlib.crc32(token.encode()) % EMBEDDING_DIM] += 1.0
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec] if norm else vec


def keywords(text: str) -> list[str]:
    """The topic signature of a user message: its distinct keywords, first seen first."""
    seen: dict[str, None] = {}
    for token in _TOKEN_RE.findall(text.lower()):
        if len(token) >= 4 and not token.isdigit() and token not in _STOP_WORDS:
            seen.setdefault(token, None)
    return list(seen)


def _squared_l2(a: list[float], b: list[float]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _snake(name: str) -> str:
    return _CAMEL_RE.sub("_", name).lower()


def _system_now() -> datetime:
    return datetime.now(UTC)


class _Status(Exception):
    """A gRPC status the handler returns; the gateway turns it into an HTTP answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Session:
    tenant: str
    user: str
    agent: str
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class _Entry:
    """One short-term entry: its wire form, when it arrived, whether a chain took it."""

    session_id: str
    wire: dict[str, Any]
    at: datetime
    consumed: bool = False


@dataclass
class _Chain:
    id: str
    tenant: str
    user: str
    topic: str
    summary: str
    embedding: list[float]
    metadata: dict[str, str]
    updated: datetime
    seq: int
    keywords: list[str] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    workflow_id: str = ""
    seeded: bool = False

    def page(self) -> dict[str, Any]:
        """The chain as ``relevantPages`` carries it (the server's own blanks included)."""
        return {
            "id": self.id,
            "sessionId": self.id,
            "topic": self.topic,
            "summary": self.summary,
            "timestamp": _rfc3339(self.updated),
            "embedding": [],
            "metadata": {},
        }


@dataclass(frozen=True)
class _Fault:
    status: int
    body: dict[str, Any]


class FakeAthenaServer(FakeHttpServer):
    """A thread-safe fake of the Athena REST API on ``127.0.0.1`` (rules: docs/athena.md).

    Args:
        api_key: when set, every route except ``GET /health`` needs
            ``X-API-Key: <key>`` or ``Authorization: Bearer <key>`` (else 401).
        jwt_token: when set, ``X-JWT-Token: <token>`` or ``Authorization: JWT
            <token>`` is needed as well; with both set, both are required.
        port: 0 picks a free port.
        hang_seconds: how long ``mode="hang"`` holds a request.
        slow_seconds: delay added by ``mode="slow"``.
        clock: the server's clock (aware datetimes); :meth:`advance` shifts it.

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
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.api_key = api_key
        self.jwt_token = jwt_token
        self.hang_seconds = hang_seconds
        self.slow_seconds = slow_seconds
        self.clock = clock or _system_now
        self.mode: Mode = "ok"
        self.status = "healthy"
        self.dependencies: dict[str, str] = {"redis": "healthy", "mongodb": "healthy"}
        self.auto_form = True
        """Form chains on every append; False leaves it to the analytics trigger."""
        self.sessions_created = 0
        self._offset = timedelta()
        self._faults: deque[_Fault] = deque()
        self._lookup_failures: deque[str] = deque()
        self._seq = itertools.count()
        self._sessions: dict[str, _Session] = {}
        self._stm: dict[tuple[str, str, str], list[_Entry]] = {}
        self._chains: dict[tuple[str, str], list[_Chain]] = {}
        self._open: dict[tuple[str, str, tuple[tuple[str, str], ...]], _Chain] = {}
        self._workflows: dict[tuple[str, str, str], _Chain] = {}
        self._ltm: list[tuple[str, str]] = []
        self._events: list[tuple[str, dict[str, Any]]] = []
        super().__init__(host=host, port=port)

    # --- time ---------------------------------------------------------------------------

    def now(self) -> datetime:
        """The server's current time (``clock`` plus every :meth:`advance`)."""
        return self.clock() + self._offset

    def advance(self, seconds: float) -> None:
        """Move the server's clock forward (short-term entries expire with it)."""
        with self._lock:
            self._offset += timedelta(seconds=seconds)

    # --- seeding and fault injection ----------------------------------------------------

    def fail_next(self, n: int, status: int = 500, message: str = "injected failure") -> None:
        """Answer the next ``n`` requests (any route) with ``status``, as the server would.

        The body is the gateway's error for the gRPC code behind ``status``
        (:data:`GRPC_CODE_FOR_STATUS`; 2 "Unknown" for a status it never
        produces); 401 is gin's auth failure body. Replaces pending faults.
        """
        if status == 401:
            body: dict[str, Any] = {"error": "authentication_failed", "message": message}
        else:
            body = _status_body(GRPC_CODE_FOR_STATUS.get(status, 2), message)
        with self._lock:
            self._faults = deque(_Fault(status, body) for _ in range(n))

    def fail_next_grpc(self, n: int, code: int, message: str = "injected failure") -> None:
        """Answer the next ``n`` requests with gRPC ``code`` mapped as the gateway maps it."""
        status = HTTP_STATUS_FOR_GRPC.get(code, 500)
        with self._lock:
            self._faults = deque(_Fault(status, _status_body(code, message)) for _ in range(n))

    def fail_session_lookup(
        self, n: int = 1, error: str = "datastore error: connection reset by peer"
    ) -> None:
        """Fail the next ``n`` lookups of existing sessions the way Athena reports it.

        Athena answers any datastore error on a session lookup with 404
        "session not found or invalid: <error>", exactly like an unknown session.
        """
        with self._lock:
            self._lookup_failures.extend([error] * n)

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
        """Seed a mid-term chain for (tenant, user); returns its id.

        ``embedding`` (default :func:`embed` of ``summary``) is what the vector
        search uses; ``metadata`` is what a search ``filter`` matches. Neither is
        sent back: like the server, ``relevantPages`` carry ``embedding: []``,
        ``metadata: {}`` and ``sessionId`` equal to the id (``session_id`` is
        accepted for compatibility and ignored).
        """
        del session_id
        with self._lock:
            chain = _Chain(
                id=str(uuid.uuid4()),
                tenant=tenant,
                user=user,
                topic=topic,
                summary=summary,
                embedding=list(embedding) if embedding is not None else embed(summary),
                metadata=dict(metadata or {}),
                updated=self.now(),
                seq=next(self._seq),
                seeded=True,
            )
            self._chains.setdefault((tenant, user), []).append(chain)
        return chain.id

    def add_ltm_node(self, tenant: str, user: str, name: str, label: str) -> None:
        """Seed a long-term graph node; every search returns it as ``"<name> [<Label>]"``.

        ``tenant`` and ``user`` are ignored: the server's long-term lookup is not
        scoped, so a node shows up in every tenant's searches.
        """
        del tenant, user
        with self._lock:
            self._ltm.append((name, label))

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
        """Every accepted short-term entry as (session id, wire entry), unbounded, oldest first.

        An interaction adds two (the user's, then the agent's if it had one);
        an observation that replaced an earlier entry is listed as well.
        """
        with self._lock:
            return [(sid, _copy(ev)) for sid, ev in self._events]

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
        """The live short-term window of (tenant, user, agent), oldest first."""
        with self._lock:
            return [_copy(e.wire) for e in self._window((tenant, user, agent))]

    def chains(self, tenant: str, user: str) -> list[dict[str, Any]]:
        """The (tenant, user)'s chains, oldest first, with what the wire never shows.

        Each: ``id``, ``topic``, ``summary``, ``timestamp``, ``metadata``,
        ``embedding``, ``workflowId`` (``""`` if none), ``seeded``.
        """
        with self._lock:
            return [
                {
                    "id": c.id,
                    "topic": c.topic,
                    "summary": c.summary,
                    "timestamp": _rfc3339(c.updated),
                    "metadata": dict(c.metadata),
                    "embedding": list(c.embedding),
                    "workflowId": c.workflow_id,
                    "seeded": c.seeded,
                }
                for c in self._chains.get((tenant, user), [])
            ]

    # --- request handling (called from handler threads) ---------------------------------

    def handle(self, request: Request) -> Response:
        """Athena's answer to one request (faults first, then auth, then the route)."""
        with self._lock:
            mode = self.mode
            fault = self._faults.popleft() if self._faults else None
        if fault is not None:
            return Response.of_json(fault.status, fault.body)
        if mode == "error500":
            return _status_response(13, "datastore unavailable")
        if mode == "hang":
            self.stopping.wait(self.hang_seconds)
            return _status_response(4, "context deadline exceeded")
        if mode == "garbage":
            return Response(200, b"<html>this is not json", "text/html")
        if mode == "slow":
            self.stopping.wait(self.slow_seconds)
        if request.path == "/health" and request.method == "GET":
            # gin's own liveness route: outside the auth middleware and the datastores.
            body = {
                "status": self.status,
                "timestamp": _rfc3339(self.now()),
                "service": "memory-os",
            }
            return Response.of_json(200, body)
        refusal = self._auth_refusal(request.headers)
        if refusal is not None:
            return Response.of_json(401, {"error": "authentication_failed", "message": refusal})
        try:
            with self._lock:
                payload = self._route(request)
        except _Status as status:
            return _status_response(status.code, status.message)
        # The payload holds copies only: encoding it needs no lock.
        return Response.of_json(200, payload)

    def error_response(self, exc: Exception) -> Response:
        """A bug in the fake answers like the gateway's internal error."""
        return _status_response(13, f"fake server error: {type(exc).__name__}")

    def _auth_refusal(self, headers: dict[str, str]) -> str | None:
        auth = headers.get("authorization", "")
        if self.api_key and not (
            _same(headers.get("x-api-key"), self.api_key) or _same(auth, f"Bearer {self.api_key}")
        ):
            return "missing or invalid API key"
        if self.jwt_token and not (
            _same(headers.get("x-jwt-token"), self.jwt_token)
            or _same(auth, f"JWT {self.jwt_token}")
        ):
            return "missing or invalid JWT token"
        return None

    def _route(self, request: Request) -> dict[str, Any]:
        parts = request.path.split("/")[1:]
        if parts[:2] != ["api", "v1"]:
            raise _Status(5, "Not Found")
        rest = parts[2:]
        # The session id is the only variable segment of Athena's routes.
        shape = tuple(
            "*" if i == 1 and rest[0] == "sessions" and seg else seg for i, seg in enumerate(rest)
        )
        methods = _ROUTE_TABLE.get(shape)
        if methods is None:
            raise _Status(5, "Not Found")
        target = methods.get(request.method)
        if target is None:
            # grpc-gateway: a path some route has, with another method, is a routing
            # 405, which it reports as codes.Unimplemented -> HTTP 501.
            raise _Status(12, "Method Not Allowed")
        if target.startswith("rpc:"):
            raise _Status(12, f"method {target[4:]} not implemented")
        if request.json_error or (request.json is not None and not isinstance(request.json, dict)):
            raise _Status(3, "invalid JSON body: expected an object")
        body = request.json or {}
        handler: Callable[[list[str], dict[str, Any], dict[str, str]], dict[str, Any]]
        handler = getattr(self, target)
        return handler(rest, body, request.query)

    # --- routes (called with the lock held) ---------------------------------------------

    def _health(
        self, rest: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> dict[str, Any]:
        dependencies = dict(self.dependencies)
        status = self.status
        if self.mode == "datastore_down":
            dependencies["mongodb"] = "unhealthy: server selection timeout"
            status = "degraded"
        return {"status": status, "dependencies": dependencies, "timestamp": _rfc3339(self.now())}

    def _create_session(
        self, rest: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> dict[str, Any]:
        fields = _decode(body, _SESSION_FIELDS)
        tenant, user = fields.get("tenant_id", ""), fields.get("user_id", "")
        if not tenant:
            raise _Status(3, "tenant_id is required")
        if not user:
            raise _Status(3, "user_id is required")
        if self.mode == "datastore_down":
            raise _Status(13, "failed to create session: datastore unavailable")
        sid = str(uuid.uuid4())
        agent = fields.get("agent_id") or "default"
        self._sessions[sid] = _Session(tenant, user, agent, fields.get("metadata", {}))
        self.sessions_created += 1
        return {"sessionId": sid, "createdAt": None}

    def _add_event(
        self, rest: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> dict[str, Any]:
        fields = _decode(body, _EVENT_FIELDS)
        sid = rest[1]
        session = self._session(sid)
        etype = fields.get("type", "")
        if etype not in _EVENT_TYPES:
            raise _Status(3, f"invalid event type: {etype}")
        metadata: dict[str, str] = fields.get("metadata", {})
        has_payload = bool(fields.get("payload"))
        wire = self._wire(
            fields.get("role") or "system",
            etype,
            fields.get("content", ""),
            metadata,
            fields.get("mime_type", "") if has_payload else "",
        )
        self._append(sid, session, wire)
        self._maybe_form(session)
        return {"success": True, "eventId": ""}

    def _add_interaction(
        self, rest: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> dict[str, Any]:
        fields = _decode(body, _INTERACTION_FIELDS)
        sid = rest[1]
        session = self._session(sid)
        # The server keeps neither the interaction's metadata nor its timestamp.
        self._append(sid, session, self._wire("user", "message", fields.get("user_message", "")))
        response = fields.get("agent_response", "")
        if response:
            self._append(sid, session, self._wire("agent", "message", response))
        self._maybe_form(session)
        return {"success": True, "interactionId": ""}

    def _context(
        self, rest: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> dict[str, Any]:
        params = _decode(dict(query), _CONTEXT_QUERY, where="query parameter")
        session = self._session(rest[1])
        limit = params.get("limit", 0)
        if limit <= 0:
            limit = DEFAULT_CONTEXT_LIMIT
        window = self._window((session.tenant, session.user, session.agent))
        stm = [_copy(e.wire) for e in window[-min(limit, STM_CAP) :]]
        chains = [c for c in self._chains.get((session.tenant, session.user), []) if c.summary]
        text = params.get("query", "")
        if text:
            pages = _nearest(chains, embed(text), limit)
        else:
            pages = sorted(chains, key=lambda c: (c.updated, c.seq), reverse=True)[:limit]
        return {
            "stmEvents": stm,
            "relevantPages": [c.page() for c in pages],
            "segments": [],
            "userPersona": None,
            "ltpm": {"status": "not_implemented"},
        }

    def _search(
        self, rest: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> dict[str, Any]:
        fields = _decode(body, _SEARCH_FIELDS)
        session = self._session(rest[1])
        text = fields.get("query", "")
        if not text:
            raise _Status(3, "query is required")
        limit = fields.get("limit", 0)
        if limit <= 0:
            limit = DEFAULT_SEARCH_LIMIT
        wanted: dict[str, str] = fields.get("filter", {})
        q = embed(text)
        chains = [c for c in self._chains.get((session.tenant, session.user), []) if c.summary]
        # Top-k first, filter after: a filtered search can come back short or empty.
        hits = [
            c
            for c in _nearest(chains, q, limit)
            if all(c.metadata.get(k) == v for k, v in wanted.items())
        ]
        results: list[dict[str, Any]] = [
            {
                "content": c.summary,
                "similarityScore": _distance(q, c),
                "sourceType": "cognitive_chain",
                "sourceId": c.id,
                "timestamp": _rfc3339(c.updated),
            }
            for c in hits
        ]
        results += [
            {
                "content": f"{name} [{label}]",
                "similarityScore": 0,
                "sourceType": "ltm_node",
                "sourceId": f"{label}/{name}",
                "timestamp": None,
            }
            for name, label in self._ltm
        ]
        return {"results": results}

    def _trigger(
        self, rest: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> dict[str, Any]:
        for key in list(self._stm):
            self._form(key)
        return {"success": True, "message": "analytics job triggered"}

    # --- short-term window and chain formation (lock held) ------------------------------

    def _session(self, sid: str) -> _Session:
        session = self._sessions.get(sid)
        if session is not None and self._lookup_failures:
            raise _Status(5, f"session not found or invalid: {self._lookup_failures.popleft()}")
        if session is not None and self.mode == "datastore_down":
            raise _Status(5, "session not found or invalid: datastore unavailable")
        if session is None:
            raise _Status(5, f"session not found or invalid: no session with id {sid}")
        return session

    def _wire(
        self,
        role: str,
        etype: str,
        content: str,
        metadata: dict[str, str] | None = None,
        mime: str = "",
    ) -> dict[str, Any]:
        return {
            "role": role,
            "type": etype,
            "content": content,
            "timestamp": _rfc3339(self.now()),
            "metadata": dict(metadata or {}),
            "blobUri": "",
            "blobMimeType": mime,
        }

    def _window(self, key: tuple[str, str, str]) -> list[_Entry]:
        """The live entries of a window, expired ones dropped."""
        window = self._stm.get(key)
        if not window:
            return []
        cutoff = self.now() - timedelta(seconds=STM_TTL_SECONDS)
        window[:] = [e for e in window if e.at > cutoff]
        return window

    def _append(self, sid: str, session: _Session, wire: dict[str, Any]) -> None:
        key = (session.tenant, session.user, session.agent)
        window = self._window(key)
        self._stm[key] = window
        entry = _Entry(sid, wire, self.now())
        self._events.append((sid, wire))
        execution = wire["metadata"].get("execution_id")
        if wire["type"] == "observation" and execution:
            step = wire["metadata"].get("step_id", "")
            for i in range(len(window) - 1, -1, -1):
                meta = window[i].wire["metadata"]
                if meta.get("execution_id") == execution and meta.get("step_id", "") == step:
                    window[i] = entry
                    return
        window.append(entry)
        del window[:-STM_CAP]

    def _maybe_form(self, session: _Session) -> None:
        if self.auto_form:
            self._form((session.tenant, session.user, session.agent))

    def _form(self, key: tuple[str, str, str]) -> None:
        """Group a window's unconsolidated entries into chains (docs/athena.md, the fake)."""
        pending = [e for e in self._window(key) if not e.consumed]
        if sum(1 for e in pending if e.wire["role"] == "user") < MIN_USER_EVENTS:
            return
        tenant, user, _agent = key
        waiting: dict[tuple[tuple[str, str], ...], list[_Entry]] = {}
        for entry in pending:
            session = self._sessions.get(entry.session_id)
            metadata = dict(session.metadata) if session is not None else {}
            meta_key = tuple(sorted(metadata.items()))
            workflow = entry.wire["metadata"].get("workflow_id", "")
            if workflow:
                chain = self._workflows.get((tenant, user, workflow))
                if chain is None:
                    chain = self._new_chain(tenant, user, metadata, workflow)
                    self._workflows[(tenant, user, workflow)] = chain
                self._grow(chain, [entry])
                continue
            open_chain = self._open.get((tenant, user, meta_key))
            if entry.wire["role"] != "user":
                if open_chain is None:
                    waiting.setdefault(meta_key, []).append(entry)
                else:
                    self._grow(open_chain, [entry])
                continue
            signature = keywords(entry.wire["content"])
            topic_changed = bool(
                open_chain is not None
                and signature
                and open_chain.keywords
                and not set(signature) & set(open_chain.keywords)
            )
            if open_chain is None or topic_changed:
                open_chain = self._new_chain(tenant, user, metadata, "")
                self._open[(tenant, user, meta_key)] = open_chain
            self._grow(open_chain, [*waiting.pop(meta_key, []), entry])
        # Entries still waiting saw no user entry of their session metadata in this
        # pass: they stay unconsolidated for the next one.

    def _new_chain(self, tenant: str, user: str, metadata: dict[str, str], workflow: str) -> _Chain:
        chain = _Chain(
            id=str(uuid.uuid4()),
            tenant=tenant,
            user=user,
            topic="",
            summary="",
            embedding=[],
            metadata=metadata,
            updated=self.now(),
            seq=next(self._seq),
            workflow_id=workflow,
        )
        self._chains.setdefault((tenant, user), []).append(chain)
        return chain

    def _grow(self, chain: _Chain, entries: list[_Entry]) -> None:
        before = chain.summary
        for entry in entries:
            entry.consumed = True
            content = str(entry.wire["content"])
            if entry.wire["role"] == "user":
                chain.keywords += [k for k in keywords(content) if k not in chain.keywords]
            # Past the bound more content cannot change the summary: a long chain
            # grows in O(1) instead of re-joining everything it ever held.
            if content and len(chain.summary) < SUMMARY_MAX_CHARS:
                chain.contents.append(content)
                summary = " | ".join(chain.contents)
                if len(summary) > SUMMARY_MAX_CHARS:
                    summary = summary[: SUMMARY_MAX_CHARS - 1] + "…"
                chain.summary = summary
        if chain.summary != before or not chain.embedding:
            chain.embedding = embed(chain.summary)
        fallback = f"workflow {chain.workflow_id}" if chain.workflow_id else "general"
        chain.topic = " ".join(chain.keywords[:3]) or fallback
        chain.updated = self.now()
        chain.seq = next(self._seq)


def _nearest(chains: list[_Chain], query: list[float], k: int) -> list[_Chain]:
    """The vector search: the ``k`` chains nearest ``query``, nearest first."""
    order = sorted(range(len(chains)), key=lambda i: (_distance(query, chains[i]), i))
    return [chains[i] for i in order[:k]]


def _distance(query: list[float], chain: _Chain) -> float:
    emb = chain.embedding
    if len(emb) != len(query):
        emb = embed(chain.summary)
    return _squared_l2(query, emb)


def _same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def _copy(wire: dict[str, Any]) -> dict[str, Any]:
    return {**wire, "metadata": dict(wire["metadata"])}


def _decode(raw: dict[str, Any], schema: dict[str, str], *, where: str = "field") -> dict[str, Any]:
    """A request's known fields, checked like protojson (snake_case or camelCase names)."""
    fields: dict[str, Any] = {}
    for name, value in raw.items():
        key = _snake(name) if isinstance(name, str) else name
        kind = schema.get(key)
        if kind is None or value is None:
            continue  # unknown fields are dropped; null is the zero value
        fields[key] = _check(key, kind, value, where)
    return fields


def _check(name: str, kind: str, value: Any, where: str) -> Any:
    bad = _Status(3, f"invalid value for {kind} {where} {name}: {value!r}")
    if kind == _STR:
        if not isinstance(value, str):
            raise bad
        return value
    if kind == _INT:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        raise bad
    if kind == _FLOAT:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise bad
        try:
            return float(value)
        except ValueError:
            raise bad from None
    if kind == _MAP:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise _Status(3, f"{name} must be a map of string to string")
        return dict(value)
    if kind == _BYTES:
        if not isinstance(value, str):
            raise bad
        padded = value + "=" * (-len(value) % 4)
        try:
            altchars = b"-_" if ("-" in value or "_" in value) else None
            return base64.b64decode(padded, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            raise bad from None
    # _TIME: RFC 3339 with an offset, as google.protobuf.Timestamp's JSON form requires.
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) and "T" in value else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise bad
    return moment


def _status_body(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "details": []}


def _status_response(code: int, message: str) -> Response:
    return Response.of_json(HTTP_STATUS_FOR_GRPC.get(code, 500), _status_body(code, message))


def main(argv: list[str] | None = None) -> None:
    """Serve a fake Athena until interrupted."""
    parser = argparse.ArgumentParser(description="Serve a fake Athena MemOS on loopback.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--api-key", default=None, help="require this API key")
    parser.add_argument("--jwt-token", default=None, help="require this JWT as well")
    args = parser.parse_args(argv)
    server = FakeAthenaServer(
        host=args.host, port=args.port, api_key=args.api_key, jwt_token=args.jwt_token
    )
    print(f"fake Athena listening on {server.url}", flush=True)
    server.serve_until_interrupted()


if __name__ == "__main__":
    main()
