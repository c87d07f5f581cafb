"""HTTP client of the Athena MemOS service (wire format: the Athena API notes).

One :class:`httpx.AsyncClient` per :class:`AthenaClient`, reused for every call.
Credentials go to the configured base URL only (relative paths, no redirects
followed). Reads are retried on outages; session creation and event posts are not
idempotent on the server, so they are retried only when the request provably never
reached it. Why, in full: docs/athena.md, "Requests and retries".
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from jarvismem import telemetry
from jarvismem.backends.athena_models import (
    EVENT_TYPES,
    AthenaContext,
    AthenaHealth,
    AthenaSearchResult,
    EventType,
    MidTermChain,
    StmEvent,
)
from jarvismem.defaults import ATHENA_HTTP_TIMEOUT, SEARCH_LIMIT
from jarvismem.errors import (
    AthenaAuthError,
    AthenaBadRequestError,
    AthenaError,
    AthenaNotFoundError,
    AthenaServerError,
    AthenaUnavailableError,
    AthenaUnsupportedError,
    ConfigError,
    InvalidIdError,
    InvalidPayloadError,
)
from jarvismem.redaction import Redactor, configured_redactor, default_redactor, mask_url
from jarvismem.resilience import Backoff, retrying
from jarvismem.settings import Settings

__all__ = [
    "EVENT_TYPES",
    "AthenaClient",
    "AthenaContext",
    "AthenaHealth",
    "AthenaSearchResult",
    "EventType",
    "MidTermChain",
    "StmEvent",
]

log = telemetry.logger(__name__)


# Longest server message quoted in an exception (server text is untrusted).
_MAX_MESSAGE = 300

_M = TypeVar("_M", bound=BaseModel)
_RetryPolicy = Literal["read", "write"]

_MAX_BACKOFF = 2.0
"""Longest wait between two attempts of one request, s."""


class _FailedAttempt(Exception):
    """Carries an attempt's error through the retry loop with its verdict.

    Whether a failure may be repeated depends on what failed (a refused
    connection never reached the server) and on the route's policy, not on the
    error class the caller sees; the loop unwraps it before raising.
    """

    def __init__(self, error: AthenaError, *, retryable: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.retryable = retryable


def _check_str_map(value: dict[str, str] | None, what: str) -> dict[str, str]:
    """Athena accepts only string→string maps; refuse anything else before sending."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidPayloadError(
            f"{what} must be a dict of str to str, got {type(value).__name__}"
        )
    for key, val in value.items():
        if not isinstance(key, str) or not isinstance(val, str):
            raise InvalidPayloadError(
                f"{what} must map str to str; key {str(key)[:40]!r} has a "
                f"{type(val).__name__} value"
            )
    return dict(value)


def _check_text(value: object, what: str, *, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise InvalidPayloadError(f"{what} must be a string, got {type(value).__name__}")
    if not allow_empty and not value:
        raise InvalidPayloadError(f"{what} must not be empty")
    return value


def _check_session_id(session_id: object) -> str:
    """A session id goes into the URL path: refuse anything that could change the route."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidIdError("session_id must be a non-empty string")
    if len(session_id) > 128 or not all(c.isalnum() or c in "-_." for c in session_id):
        raise InvalidIdError("session_id may hold only letters, digits, '-', '_' and '.'")
    if session_id.strip(".") == "":
        raise InvalidIdError("session_id must not be made of dots")
    return session_id


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidPayloadError(f"limit must be a positive int, got {limit!r}")
    return limit


def _server_message(response: httpx.Response) -> tuple[str, int | None]:
    """The error text and gRPC code of an error body, tolerating any shape."""
    try:
        body = response.json()
    except ValueError:
        return "(no JSON error body)", None
    if not isinstance(body, dict):
        return "(unexpected error body)", None
    message = body.get("message") or body.get("error") or ""
    code = body.get("code")
    text = str(message)[:_MAX_MESSAGE] if message else "(no message)"
    return text, code if isinstance(code, int) and not isinstance(code, bool) else None


class _LoopState:
    """The client's asyncio primitives on one event loop (each serves the loop it was made on)."""

    __slots__ = ("loop", "session_locks", "write_slots")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.write_slots: asyncio.Semaphore | None = None
        self.session_locks: dict[str, asyncio.Lock] = {}


class AthenaClient:
    """Async client of one Athena server.

    Besides the HTTP pool it holds what every memory using it shares: the bound
    on concurrent write requests (:meth:`write_slots`) and the session ids it
    created, for use without Redis (:meth:`known_session`). Both belong to the
    client because both belong to its server and its pool.

    Args:
        base_url: ``http(s)://host[:port]`` of the server (no trailing path needed).
        api_key: sent as ``X-API-Key`` on authenticated routes.
        jwt_token: sent as ``X-JWT-Token`` on authenticated routes.
        timeout: seconds per HTTP request (connect, read, write, pool each).
        max_retries: extra attempts for a retryable failure (see module doc).
        transport: an httpx transport to use instead of the network (tests).
        backoff: first retry delay in seconds; doubles per attempt (capped at 2 s),
            with jitter so many clients do not retry in lock-step.
        redactor: applied to every query text before it is sent (``get_context``,
            ``search``), so a secret a user typed never leaves the process, whoever
            the caller is; :meth:`from_settings` uses the configured one.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        jwt_token: str | None = None,
        timeout: float = ATHENA_HTTP_TIMEOUT,
        max_retries: int = 2,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff: float = 0.1,
        redactor: Redactor = default_redactor,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError("ATHENA_URL must start with http:// or https://")
        if timeout <= 0:
            raise ConfigError("Athena timeout must be > 0 seconds")
        if max_retries < 0:
            raise ConfigError("Athena max_retries must be >= 0")
        self._base_url = base_url.rstrip("/")
        self._redact = redactor
        self._max_retries = max_retries
        # Equal jitter: many clients hit by one outage do not retry in lock-step.
        self._retry_backoff = Backoff(base=max(0.0, backoff), cap=_MAX_BACKOFF, jitter="equal")
        self._auth: dict[str, str] = {}
        if api_key:
            self._auth["X-API-Key"] = api_key
        if jwt_token:
            self._auth["X-JWT-Token"] = jwt_token
        self._http = httpx.AsyncClient(
            base_url=self._base_url,
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            transport=transport,
            headers={"Accept": "application/json", "User-Agent": "jarvismem-athena/0.1"},
        )
        self._loop_state: _LoopState | None = None
        self._sessions: dict[str, str] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> AthenaClient:
        """A client for ``ATHENA_URL`` with the configured key, token and timeout."""
        if not settings.athena_url:
            raise ConfigError("ATHENA_URL is not set")
        return cls(
            settings.athena_url,
            api_key=settings.athena_api_key.get_secret_value() if settings.athena_api_key else None,
            jwt_token=(
                settings.athena_jwt_token.get_secret_value() if settings.athena_jwt_token else None
            ),
            timeout=settings.athena_http_timeout,
            redactor=configured_redactor(settings.redaction_enabled, settings.redaction_key_names),
        )

    @property
    def base_url(self) -> str:
        """The server's base URL (as configured, without a trailing slash)."""
        return self._base_url

    @property
    def is_closed(self) -> bool:
        """True after :meth:`aclose`."""
        return self._http.is_closed

    # --- state shared by the memories using this client ---------------------------------

    def _on_loop(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loop_state
        if state is None or state.loop is not loop:
            # A client used from a new loop (asyncio.run again): fresh primitives.
            state = self._loop_state = _LoopState(loop)
        return state

    def write_slots(self, limit: int) -> asyncio.Semaphore:
        """The bound on this client's concurrent write requests (``limit`` sets it when made).

        One for every memory using the client: the limit protects the server
        and the pool, which they share.
        """
        state = self._on_loop()
        if state.write_slots is None:
            state.write_slots = asyncio.Semaphore(limit)
        return state.write_slots

    def session_lock(self, key: str) -> asyncio.Lock:
        """The lock under which one session (named by ``key``) is created without Redis."""
        locks = self._on_loop().session_locks
        lock = locks.get(key)
        if lock is None:
            lock = locks[key] = asyncio.Lock()
        return lock

    def known_session(self, key: str) -> str | None:
        """The session id remembered under ``key`` by :meth:`remember_session`, if any."""
        return self._sessions.get(key)

    def remember_session(self, key: str, session_id: str) -> None:
        """Keep ``session_id`` under ``key`` for every memory using this client (no Redis)."""
        self._sessions[key] = session_id

    def __repr__(self) -> str:
        return f"AthenaClient({mask_url(self._base_url)!r}, auth={bool(self._auth)})"

    # --- endpoints -------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """``GET /health`` (never authenticated): ``{"status", "timestamp", "service"}``."""
        return await self._call("GET", "/health", policy="read", auth=False)

    async def health_detailed(self) -> AthenaHealth:
        """``GET /api/v1/health``: overall status and each dependency's status."""
        body = await self._call("GET", "/api/v1/health", policy="read")
        return self._parse(AthenaHealth, body, "/api/v1/health")

    async def create_session(
        self,
        tenant_id: str,
        user_id: str,
        agent_id: str = "default",
        metadata: dict[str, str] | None = None,
    ) -> str:
        """Create a session and return its id. Every call creates a NEW session."""
        payload = {
            "tenant_id": _check_text(tenant_id, "tenant_id", allow_empty=False),
            "user_id": _check_text(user_id, "user_id", allow_empty=False),
            "agent_id": _check_text(agent_id, "agent_id", allow_empty=False),
            "metadata": _check_str_map(metadata, "metadata"),
        }
        body = await self._call("POST", "/api/v1/sessions", json_body=payload, policy="write")
        session_id = body.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            raise AthenaUnavailableError("Athena POST /api/v1/sessions: answer has no sessionId")
        return session_id

    async def add_event(
        self,
        session_id: str,
        type: EventType,
        content: str,
        *,
        role: str = "agent",
        metadata: dict[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        """Append one event to the session's short-term window.

        ``role`` is always sent: the server's default (``system``) is neither
        the user (whose messages make mid-term memory form) nor the agent.
        ``idempotency_key`` travels as metadata ``idempotency_key`` (the server
        drops unknown top-level fields); it lets readers spot a duplicate.
        """
        sid = _check_session_id(session_id)
        if type not in EVENT_TYPES:
            raise InvalidPayloadError(
                f"event type must be one of {sorted(EVENT_TYPES)}, got {str(type)[:40]!r}"
            )
        meta = _check_str_map(metadata, "metadata")
        if idempotency_key is not None:
            meta["idempotency_key"] = _check_text(idempotency_key, "idempotency_key")
        payload = {
            "type": type,
            "role": _check_text(role, "role", allow_empty=False),
            "content": _check_text(content, "content"),
            "metadata": meta,
        }
        await self._call(
            "POST", f"/api/v1/sessions/{sid}/events", json_body=payload, policy="write"
        )

    async def add_interaction(
        self, session_id: str, user_message: str, agent_response: str | None = None
    ) -> None:
        """Record one user message and, optionally, the agent's answer."""
        sid = _check_session_id(session_id)
        payload: dict[str, Any] = {"user_message": _check_text(user_message, "user_message")}
        if agent_response is not None:
            payload["agent_response"] = _check_text(agent_response, "agent_response")
        await self._call(
            "POST", f"/api/v1/sessions/{sid}/interactions", json_body=payload, policy="write"
        )

    async def get_context(
        self, session_id: str, *, limit: int = 10, query: str | None = None
    ) -> AthenaContext:
        """Short-term events (oldest first, at most 10) and mid-term chains of the session."""
        sid = _check_session_id(session_id)
        params: dict[str, str | int] = {"limit": _check_limit(limit)}
        if query is not None:
            params["query"] = self._redact(_check_text(query, "query"))
        path = f"/api/v1/sessions/{sid}/context"
        body = await self._call("GET", path, params=params, policy="read")
        return self._parse(AthenaContext, body, path)

    async def search(
        self,
        session_id: str,
        query: str,
        *,
        limit: int = SEARCH_LIMIT,
        filter: dict[str, str] | None = None,
    ) -> list[AthenaSearchResult]:
        """Vector search over the session's chains (plus long-term nodes).

        Results come in the server's order, which is NOT sorted; each carries a
        raw L2 distance (lower is closer) in ``similarity_score``.
        """
        sid = _check_session_id(session_id)
        payload: dict[str, Any] = {
            "query": self._redact(_check_text(query, "query", allow_empty=False)),
            "limit": _check_limit(limit),
        }
        if filter is not None:
            payload["filter"] = _check_str_map(filter, "filter")
        path = f"/api/v1/sessions/{sid}/context/search"
        body = await self._call("POST", path, json_body=payload, policy="read")
        results = body.get("results")
        if results is None:
            return []
        if not isinstance(results, list):
            raise AthenaUnavailableError(f"Athena POST {path}: 'results' is not a list")
        return [self._parse(AthenaSearchResult, item, path) for item in results]

    async def trigger_analytics(self) -> None:
        """Ask the server to run its analytics job now."""
        await self._call("POST", "/api/v1/admin/analytics/trigger", json_body={}, policy="write")

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """``GET /api/v1/sessions/{id}``; today's servers answer 501 → AthenaUnsupportedError."""
        sid = _check_session_id(session_id)
        return await self._call("GET", f"/api/v1/sessions/{sid}", policy="read")

    async def aclose(self) -> None:
        """Close the connection pool. The client cannot be used afterwards."""
        await self._http.aclose()

    async def __aenter__(self) -> AthenaClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- transport, errors, retries ---------------------------------------------------

    @staticmethod
    def _parse(model: type[_M], body: Any, path: str) -> _M:
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            # Name the fields, never echo values (they may hold user content).
            fields = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})[:5]
            raise AthenaUnavailableError(
                f"Athena {path}: malformed answer (fields: {', '.join(fields) or '?'})"
            ) from None

    @telemetry.athena_request
    async def _call(
        self,
        method: str,
        path: str,
        *,
        policy: _RetryPolicy,
        json_body: dict[str, Any] | None = None,
        params: dict[str, str | int] | None = None,
        auth: bool = True,
    ) -> dict[str, Any]:
        """One request with the endpoint's retry policy (see the module doc)."""

        def log_retry(exc: BaseException, attempt: int, delay: float) -> None:
            error = exc.error if isinstance(exc, _FailedAttempt) else exc
            telemetry.note("jarvismem.athena.retries", attempt)
            log.info(
                "Athena %s %s failed (%s); retry %d/%d in %.2fs",
                method,
                path,
                error,
                attempt,
                self._max_retries,
                delay,
            )

        try:
            async for attempt in retrying(
                attempts=self._max_retries + 1,
                backoff=self._retry_backoff,
                retry_if=lambda exc: isinstance(exc, _FailedAttempt) and exc.retryable,
                on_retry=log_retry,
            ):
                with attempt:
                    return await self._attempt(method, path, policy, json_body, params, auth)
        except _FailedAttempt as failed:
            raise failed.error from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _attempt(
        self,
        method: str,
        path: str,
        policy: _RetryPolicy,
        json_body: dict[str, Any] | None,
        params: dict[str, str | int] | None,
        auth: bool,
    ) -> dict[str, Any]:
        """One attempt; a failure that may be worth repeating comes out as :class:`_FailedAttempt`.

        Other errors (4xx, 501) pass through: repeating them cannot help.
        """
        read = policy == "read"
        try:
            return await self._once(method, path, json_body, params, auth)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            # The request never reached the server: safe to repeat for any route.
            error = f"Athena {method} {path}: cannot connect ({type(exc).__name__})"
            raise _FailedAttempt(AthenaUnavailableError(error), retryable=True) from None
        except httpx.TimeoutException as exc:
            error = f"Athena {method} {path}: timed out ({type(exc).__name__})"
            raise _FailedAttempt(AthenaUnavailableError(error), retryable=read) from None
        except httpx.TransportError as exc:
            error = f"Athena {method} {path}: network error ({type(exc).__name__})"
            raise _FailedAttempt(AthenaUnavailableError(error), retryable=read) from None
        except (AthenaServerError, AthenaUnavailableError) as exc:
            # 5xx / 429 / malformed bodies: repeat only what cannot change state.
            raise _FailedAttempt(exc, retryable=read) from None

    async def _once(
        self,
        method: str,
        path: str,
        json_body: dict[str, Any] | None,
        params: dict[str, str | int] | None,
        auth: bool,
    ) -> dict[str, Any]:
        response = await self._http.request(
            method,
            path,
            json=json_body,
            params=params,
            headers=self._auth if auth else None,
        )
        status = response.status_code
        if status == 200:
            try:
                body = response.json()
            except (ValueError, UnicodeDecodeError):
                raise AthenaUnavailableError(
                    f"Athena {method} {path}: answer is not JSON", status=status
                ) from None
            if not isinstance(body, dict):
                raise AthenaUnavailableError(
                    f"Athena {method} {path}: answer is not a JSON object", status=status
                )
            return body
        message, code = _server_message(response)
        where = f"Athena {method} {path}: HTTP {status}"
        if 300 <= status < 400:
            # Never followed: the Location could be another host and we carry credentials.
            raise AthenaUnavailableError(f"{where}: redirect not followed", status=status)
        if status in (401, 403):
            raise AthenaAuthError(f"{where}: credentials refused: {message}", status=status)
        if status == 404:
            raise AthenaNotFoundError(f"{where}: {message}", status=status, code=code)
        if status == 429:
            raise AthenaUnavailableError(f"{where}: rate limited", status=status, code=code)
        if 400 <= status < 500:
            raise AthenaBadRequestError(f"{where}: {message}", status=status, code=code)
        if status == 501:
            raise AthenaUnsupportedError(
                f"{where}: not supported by this server: {message}", status=status, code=code
            )
        if status >= 500:
            raise AthenaServerError(f"{where}: {message}", status=status, code=code)
        raise AthenaUnavailableError(f"{where}: unexpected status", status=status)
