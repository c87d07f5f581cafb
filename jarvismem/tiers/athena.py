"""Tier 4: what the agent knows from earlier sessions, kept by the Athena service.

Writes (thoughts, actions, observations, interactions, task and meeting hooks)
never wait for Athena: each is redacted, tagged with an idempotency key and
appended to a durable local :class:`Outbox`; one background task per
:class:`AthenaMemory` delivers the outbox in order, with exponential backoff
and a circuit breaker. Reads (context, search) go straight to the server.

One Athena session per (tenant, user, agent) is reused across runs: its id is
cached in Redis, and a Redis lock makes sure concurrent first uses (tasks or
processes) create exactly one session.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from redis.exceptions import RedisError

from jarvismem.backends.athena import EVENT_TYPES, AthenaClient
from jarvismem.backends.outbox import Outbox, OutboxDrainer
from jarvismem.backends.redis import RedisClient
from jarvismem.errors import (
    AthenaAuthError,
    AthenaBadRequestError,
    AthenaError,
    AthenaNotFoundError,
    AthenaUnsupportedError,
    InvalidPayloadError,
    JarvisMemError,
)
from jarvismem.keys import KeySpace, validate_id
from jarvismem.redaction import Redactor, mask_url, no_redaction

__all__ = ["AthenaMemory", "CircuitState"]

log = logging.getLogger(__name__)

CircuitState = Literal["closed", "open", "half_open"]

# Release the creation lock only if we still own it (it may have expired and moved on).
_RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Without Redis: session ids cached per process, and one creation lock per key and loop.
_local_sessions: dict[str, str] = {}
_local_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)
# One delivery at a time per outbox path in this process (two memories of one agent
# share an outbox; both draining it would send records twice).
_drain_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Path, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _loop_lock(
    registry: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, asyncio.Lock]],
    key: Any,
) -> asyncio.Lock:
    locks = registry.setdefault(asyncio.get_running_loop(), {})
    lock = locks.get(key)
    if lock is None:
        lock = locks[key] = asyncio.Lock()
    return lock


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


def _check_meta(metadata: dict[str, Any]) -> dict[str, str]:
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise InvalidPayloadError(
                f"metadata {key!r} must be a string (Athena accepts only string values), "
                f"got {type(value).__name__}"
            )
    return dict(metadata)


KERNEL_BUSY_GAP = 0.05
"""Seconds after a write during which delivery yields to the kernel (see _yield_to_kernel)."""


def turn_record(
    turn_id: str, thought: Any, action: Any, result: Any, redactor: Callable[[str], str]
) -> dict[str, Any] | None:
    """The outbox record of one turn (None when the turn has no text).

    Module-level so a caller can queue a turn in the agent's outbox before its
    AthenaMemory exists (the session is resolved at delivery).
    """
    events = []
    for etype, value in (("thought", thought), ("action", action), ("observation", result)):
        if value in (None, ""):
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        events.append(
            {
                "type": etype,
                "content": redactor(text),
                "metadata": {"turn_id": str(turn_id)},
                "idempotency_key": uuid.uuid4().hex,
            }
        )
    return {"kind": "events", "events": events} if events else None


class AthenaMemory:
    """The Athena tier of one agent. Build it with :meth:`create`.

    Attributes:
        session_id: the Athena session in use (may change if the server forgets it).
    """

    session_id: str

    @classmethod
    async def create(
        cls,
        agent_id: str,
        client: AthenaClient,
        redis_store: RedisClient | None = None,
        *,
        keyspace: KeySpace | None = None,
        tenant_id: str = "default",
        user_id: str = "jarvismem",
        outbox: Outbox | None = None,
        redactor: Callable[[str], str] | None = None,
        failure_threshold: int = 5,
        cooldown: float = 30.0,
        retry_base: float = 0.5,
        retry_cap: float = 30.0,
        session_lock_ttl: float = 30.0,
    ) -> AthenaMemory:
        """Resolve (or create once) the agent's session and start background delivery.

        Args:
            agent_id: the agent; with tenant and user it names the Athena session.
            client: the Athena client (shared; not closed by :meth:`close`).
            redis_store: caches the session id across processes; None caches it in
                this process only.
            keyspace: key namespace (default ``KeySpace()``).
            tenant_id, user_id: Athena tenant and user of the session.
            outbox: where pending writes wait; default a file under ``OUTBOX_PATH``.
            redactor: applied to every text before it is queued (default: none).
            failure_threshold: consecutive delivery failures that open the circuit.
            cooldown: seconds the circuit stays open before one trial delivery.
            retry_base, retry_cap: exponential backoff between failed deliveries, s.
            session_lock_ttl: expiry of the session-creation lock, s (a crashed
                creator cannot block others longer than this).

        If Athena cannot be reached now, the memory is still returned: writes
        queue in the outbox and the session is resolved on first delivery.
        Bad credentials or a refused request (4xx) are raised.
        """
        self = cls(
            agent_id,
            client,
            redis_store,
            keyspace=keyspace,
            tenant_id=tenant_id,
            user_id=user_id,
            outbox=outbox,
            redactor=redactor,
            failure_threshold=failure_threshold,
            cooldown=cooldown,
            retry_base=retry_base,
            retry_cap=retry_cap,
            session_lock_ttl=session_lock_ttl,
        )
        try:
            self.session_id = await self._ensure_session()
        except (AthenaAuthError, AthenaBadRequestError):
            await self._outbox.close()
            raise
        except AthenaError as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("Athena unreachable at start (%s); writes will queue", self._last_error)
        self._task = asyncio.get_running_loop().create_task(
            self._deliver_loop(), name=f"jarvismem-athena-{self._agent}"
        )
        if await self._outbox.load():
            self._wake.set()  # a previous run left writes behind
        return self

    def __init__(
        self,
        agent_id: str,
        client: AthenaClient,
        redis_store: RedisClient | None = None,
        *,
        keyspace: KeySpace | None = None,
        tenant_id: str = "default",
        user_id: str = "jarvismem",
        outbox: Outbox | None = None,
        redactor: Callable[[str], str] | None = None,
        failure_threshold: int = 5,
        cooldown: float = 30.0,
        retry_base: float = 0.5,
        retry_cap: float = 30.0,
        session_lock_ttl: float = 30.0,
    ) -> None:
        """Plain construction, no I/O to Athena; use :meth:`create`, which also
        resolves the session and starts delivery."""
        self._agent = validate_id(agent_id, "agent_id")
        self._tenant = validate_id(tenant_id, "tenant_id")
        self._user = validate_id(user_id, "user_id")
        self._client = client
        self._redis = redis_store
        self._keys = keyspace or KeySpace()
        self._session_key = self._keys.athena_session(self._tenant, self._user, self._agent)
        self._lock_key = self._keys.athena_session_lock(self._tenant, self._user, self._agent)
        self._redactor: Redactor = redactor or no_redaction
        self._lock_ttl_ms = max(1000, int(session_lock_ttl * 1000))
        self._failure_threshold = max(1, failure_threshold)
        self._cooldown = cooldown
        self._retry_base = retry_base
        self._retry_cap = retry_cap
        if outbox is None:
            outbox = self._default_outbox()
        self._outbox = outbox
        self._drainer = OutboxDrainer(outbox, self._send, batch=50)
        self._last_activity = 0.0
        self._flushing = False
        self._circuit: CircuitState = "closed"
        self._failures = 0
        self._open_until = 0.0
        self._next_attempt = 0.0
        self._last_error: str | None = None
        self._rejected = 0
        self._unsupported: set[str] = set()
        self._closed = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.session_id = ""  # resolved by create() or on first use

    def _default_outbox(self) -> Outbox:
        from jarvismem.settings import load_settings

        settings = load_settings()
        name = f"{self._tenant}.{self._user}.{self._agent}"
        if len(name) > 128:
            name = hashlib.sha256(name.encode()).hexdigest()
        rel = self._keys.outbox_file("athena", name)
        return Outbox(settings.outbox_path / rel, max_entries=settings.outbox_max_entries)

    # --- session ----------------------------------------------------------------------

    async def _ensure_session(self, stale: str | None = None) -> str:
        """The cached session id, or a new one made by exactly one creator.

        ``stale`` is an id the server no longer knows: a cache holding it counts
        as empty, and the new id replaces it only if nobody replaced it first.
        """
        if self._redis is None:
            return await self._ensure_local_session(stale)
        try:
            return await self._ensure_shared_session(self._redis, stale)
        except RedisError as exc:
            # Redis down: fall back to this process's cache rather than stall Athena.
            log.warning("Redis unavailable for the Athena session cache (%s)", type(exc).__name__)
            return await self._ensure_local_session(stale)

    async def _ensure_shared_session(self, redis: RedisClient, stale: str | None) -> str:
        cached = _text(await redis.get(self._session_key))
        if cached and cached != stale:
            return cached
        token = uuid.uuid4().hex
        delay = 0.02
        while True:
            if await redis.set(self._lock_key, token, nx=True, px=self._lock_ttl_ms):
                try:
                    cached = _text(await redis.get(self._session_key))
                    if cached and cached != stale:
                        return cached
                    session_id = await self._client.create_session(
                        self._tenant, self._user, self._agent
                    )
                    # No TTL: the session is reused for as long as the server knows it.
                    await redis.set(self._session_key, session_id)
                    log.info("Athena session created for agent %s", self._agent)
                    return session_id
                finally:
                    await redis.eval(_RELEASE_LOCK, 1, self._lock_key, token)
            # Someone else is creating it: wait for their id instead of making another.
            await asyncio.sleep(delay)
            delay = min(0.2, delay * 1.5)
            cached = _text(await redis.get(self._session_key))
            if cached and cached != stale:
                return cached

    async def _ensure_local_session(self, stale: str | None) -> str:
        async with _loop_lock(_local_locks, self._session_key):
            cached = _local_sessions.get(self._session_key)
            if cached and cached != stale:
                return cached
            session_id = await self._client.create_session(self._tenant, self._user, self._agent)
            _local_sessions[self._session_key] = session_id
            return session_id

    async def _renew_session(self, stale: str) -> str:
        log.warning("Athena forgot session of agent %s; using a new one", self._agent)
        self.session_id = await self._ensure_session(stale=stale)
        return self.session_id

    async def _current_session(self) -> str:
        """The session id, resolving it now if Athena was unreachable at start."""
        if not self.session_id:
            self.session_id = await self._ensure_session()
        return self.session_id

    # --- writes -------------------------------------------------------------------------

    async def record_thought(self, content: str, **metadata: str) -> None:
        """Queue a ``thought`` event."""
        await self._queue_event("thought", content, metadata)

    async def record_action(self, content: str, **metadata: str) -> None:
        """Queue an ``action`` event."""
        await self._queue_event("action", content, metadata)

    async def record_observation(self, content: str, **metadata: str) -> None:
        """Queue an ``observation`` event (remembered facts: lets Athena build memory)."""
        await self._queue_event("observation", content, metadata)

    async def record_interaction(
        self, user_message: str, agent_response: str | None = None
    ) -> None:
        """Queue one user message and, optionally, the agent's answer."""
        if not isinstance(user_message, str):
            raise InvalidPayloadError("user_message must be a string")
        if agent_response is not None and not isinstance(agent_response, str):
            raise InvalidPayloadError("agent_response must be a string or None")
        record: dict[str, Any] = {
            "kind": "interaction",
            "user_message": self._redactor(user_message),
            "agent_response": None if agent_response is None else self._redactor(agent_response),
            "idempotency_key": uuid.uuid4().hex,
        }
        await self._enqueue(record)

    async def on_task_assigned(self, task_id: str, description: str, **metadata: str) -> None:
        """Note that a task was assigned to the agent."""
        await self._queue_event(
            "action",
            f"Task {task_id} assigned: {description}",
            {**metadata, "event": "task_assigned", "task_id": task_id},
        )

    async def on_task_completed(self, task_id: str, result: str, **metadata: str) -> None:
        """Note that a task finished, with its result."""
        await self._queue_event(
            "observation",
            f"Task {task_id} completed: {result}",
            {**metadata, "event": "task_completed", "task_id": task_id},
        )

    async def on_task_deleted(self, task_id: str, **metadata: str) -> None:
        """Note that a task was removed."""
        await self._queue_event(
            "action",
            f"Task {task_id} deleted",
            {**metadata, "event": "task_deleted", "task_id": task_id},
        )

    async def on_meeting_noted(self, title: str, notes: str, **metadata: str) -> None:
        """Remember meeting notes."""
        await self._queue_event(
            "observation",
            f"Meeting {title}: {notes}",
            {**metadata, "event": "meeting_noted", "title": title},
        )

    async def on_hitl_resolved(self, request_id: str, decision: str, **metadata: str) -> None:
        """Remember a human-in-the-loop decision."""
        await self._queue_event(
            "observation",
            f"Human decision on {request_id}: {decision}",
            {**metadata, "event": "hitl_resolved", "request_id": request_id},
        )

    async def record_turn(
        self, turn_id: str, thought: Any, action: Any, result: Any, *, redacted: bool = False
    ) -> None:
        """Queue one kernel turn as thought, action and observation events.

        One outbox record for the three events: a single durable append on the
        ``log_turn`` path instead of three. Non-string values are sent as JSON.
        ``redacted``: the caller already redacted the values (``log_turn`` has).
        """
        redactor = no_redaction if redacted else self._redactor
        record = turn_record(turn_id, thought, action, result, redactor)
        if record is not None:
            await self._enqueue(record)

    async def _queue_event(self, etype: str, content: str, metadata: dict[str, Any]) -> None:
        if etype not in EVENT_TYPES:
            raise InvalidPayloadError(f"invalid event type {etype!r}")
        if not isinstance(content, str):
            raise InvalidPayloadError(f"content must be a string, got {type(content).__name__}")
        meta = {k: self._redactor(v) for k, v in _check_meta(metadata).items()}
        record = {
            "kind": "event",
            "type": etype,
            "content": self._redactor(content),
            "metadata": meta,
            "idempotency_key": uuid.uuid4().hex,
        }
        await self._enqueue(record)

    async def _yield_to_kernel(self) -> None:
        """Let the agent's own turns go first.

        Delivery shares the event loop with the kernel, and each record costs
        up to three HTTP requests of CPU. While the kernel is busy (a write in
        the last ``KERNEL_BUSY_GAP`` seconds) records go out at most one per
        gap; when it is idle, as fast as Athena answers. ``flush()`` does not wait.
        """
        if self._flushing:
            return
        if time.monotonic() - self._last_activity < KERNEL_BUSY_GAP:
            await asyncio.sleep(KERNEL_BUSY_GAP)

    async def _enqueue(self, record: dict[str, Any]) -> None:
        self._last_activity = time.monotonic()
        if self._closed:
            raise JarvisMemError("AthenaMemory is closed")
        if await self._outbox.put(record):
            self._wake.set()

    # --- delivery -----------------------------------------------------------------------

    async def _send(self, record: dict[str, Any]) -> None:
        """Deliver one outbox record; return normally to ack (or drop) it."""
        await self._yield_to_kernel()
        try:
            await self._post(await self._current_session(), record)
        except AthenaNotFoundError:
            await self._post(await self._renew_session(self.session_id), record)
        except AthenaAuthError:
            raise  # keep it: fixing the credentials makes it deliverable
        except (AthenaBadRequestError, AthenaUnsupportedError, InvalidPayloadError) as exc:
            # Retrying cannot fix it; dropping keeps the queue moving.
            self._rejected += 1
            self._last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("Athena refused a %s record; dropped it: %s", record.get("kind"), exc)

    async def _post(self, session_id: str, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        if kind == "event":
            await self._client.add_event(
                session_id,
                record["type"],
                record.get("content", ""),
                metadata=record.get("metadata") or {},
                idempotency_key=record.get("idempotency_key"),
            )
        elif kind == "events":
            # A redelivery after a crash mid-batch may repeat events already sent;
            # each carries its idempotency key in metadata for the server's logs.
            for event in record.get("events", []):
                await self._client.add_event(
                    session_id,
                    event["type"],
                    event.get("content", ""),
                    metadata=event.get("metadata") or {},
                    idempotency_key=event.get("idempotency_key"),
                )
        elif kind == "interaction":
            await self._client.add_interaction(
                session_id, record.get("user_message", ""), record.get("agent_response")
            )
        else:
            raise InvalidPayloadError(f"unknown outbox record kind {kind!r}")

    async def _drain(self, max_records: int | None = None) -> int:
        """One delivery run under the per-outbox lock; updates the circuit breaker."""
        async with _loop_lock(_drain_locks, self._outbox.path):
            delivered = await self._drainer.run_once(max_records)
            error = self._drainer.last_error
        if error is None:
            if self._circuit != "closed" or self._failures:
                log.warning("Athena delivery recovered; circuit closed")
            self._circuit, self._failures = "closed", 0
            return delivered
        self._failures += 1
        self._last_error = f"{type(error).__name__}: {error}"[:300]
        now = time.monotonic()
        if self._circuit == "half_open" or self._failures >= self._failure_threshold:
            if self._circuit != "open":
                log.warning(
                    "Athena circuit open after %d failures (%s); %d writes pending",
                    self._failures,
                    self._last_error,
                    len(self._outbox),
                )
            self._circuit = "open"
            self._open_until = now + self._cooldown
            self._next_attempt = self._open_until
        else:
            backoff = min(self._retry_cap, self._retry_base * 2 ** (self._failures - 1))
            self._next_attempt = now + backoff
            log.warning(
                "Athena delivery failed (%s); %d pending, retry in %.1fs",
                self._last_error,
                len(self._outbox),
                backoff,
            )
        return delivered

    def _circuit_closed(self) -> bool:
        return self._circuit == "closed"

    async def _deliver_loop(self) -> None:
        while not self._closed:
            wait = self._next_attempt - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # backoff / open circuit: writes keep queueing
                if self._circuit == "open":
                    self._circuit = "half_open"
                    # Half-open: one trial record decides.
                    await self._safe_drain(1)
                    if not self._circuit_closed():
                        continue
            if not len(self._outbox):
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._safe_drain(None)

    async def _safe_drain(self, max_records: int | None) -> None:
        try:
            await self._drain(max_records)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the loop must survive anything (disk full, a bug)
            self._last_error = f"{type(exc).__name__}: {exc}"[:300]
            self._next_attempt = time.monotonic() + self._retry_cap
            log.warning("Athena delivery loop error: %s", self._last_error)

    async def flush(self, timeout: float | None = None) -> int:
        """Try to deliver every pending write now; returns how many were delivered.

        Stops at the first failure (the rest stays queued) or after ``timeout``
        seconds (an interrupted record is delivered again later).
        """
        before = self._drainer.delivered
        self._flushing = True
        try:
            async with asyncio.timeout(timeout):
                await self._drain(None)
        except TimeoutError:
            pass
        finally:
            self._flushing = False
        return self._drainer.delivered - before

    # --- reads --------------------------------------------------------------------------

    async def get_memory_context(
        self, limit: int = 10, query: str | None = None, *, strict: bool = False
    ) -> dict[str, Any] | None:
        """The agent's Athena context, or None when unavailable or unsupported.

        Returns ``{"session_id", "short_term": [events, oldest first],
        "mid_term": [chains], "segments", "user_persona"}``. With ``strict``, an
        outage raises its AthenaError instead (the rehydrate bundle uses this to
        mark the tier degraded); "unsupported" (501) still returns None.
        """
        try:
            try:
                sid = await self._current_session()
                ctx = await self._client.get_context(sid, limit=limit, query=query)
            except AthenaNotFoundError:
                sid = await self._renew_session(self.session_id)
                ctx = await self._client.get_context(sid, limit=limit, query=query)
        except AthenaUnsupportedError:
            self._unsupported.add("context")
            return None
        except AthenaError as exc:
            self._note_read_error("context", exc)
            if strict:
                raise
            return None
        return {
            "session_id": self.session_id,
            "short_term": [e.to_dict() for e in ctx.stm_events],
            "mid_term": [c.to_dict() for c in ctx.relevant_pages],
            "segments": list(ctx.segments),
            "user_persona": ctx.user_persona,
        }

    async def search(self, query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Search Athena's memory; hits in the server's order, each with ``distance``
        (raw L2, lower is closer) and ``similarity`` (1/(1+distance), higher is closer).
        Returns [] when Athena is unavailable or does not support search."""
        try:
            try:
                sid = await self._current_session()
                hits = await self._client.search(sid, query, limit=limit)
            except AthenaNotFoundError:
                sid = await self._renew_session(self.session_id)
                hits = await self._client.search(sid, query, limit=limit)
        except AthenaUnsupportedError:
            self._unsupported.add("search")
            return []
        except AthenaBadRequestError:
            raise
        except AthenaError as exc:
            self._note_read_error("search", exc)
            return []
        return [h.to_dict() for h in hits]

    def _note_read_error(self, what: str, exc: AthenaError) -> None:
        self._last_error = f"{type(exc).__name__}: {exc}"[:300]
        log.warning("Athena %s read failed: %s", what, self._last_error)

    # --- status -------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Circuit state, pending/dropped counts and the last error (no secrets)."""
        circuit = self._circuit
        if circuit == "open" and time.monotonic() >= self._open_until:
            circuit = "half_open"
        return {
            "tier": "athena",
            "url": mask_url(self._client.base_url),
            "session_id": self.session_id,
            "circuit": circuit,
            "consecutive_failures": self._failures,
            "pending": len(self._outbox),
            "dropped": self._outbox.dropped,
            "rejected": self._rejected,
            "delivered": self._drainer.delivered,
            "unsupported": sorted(self._unsupported),
            "last_error": self._last_error,
        }

    async def close(self) -> None:
        """Stop background delivery and close the outbox (pending writes stay on disk)."""
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        await self._outbox.close()
