"""Tier 4: what the agent knows from earlier sessions, kept by the Athena service.

Writes (thoughts, actions, observations, interactions, task and meeting hooks)
never wait for Athena: each is redacted, tagged with an idempotency key,
stamped with its destination (tenant, user, agent, server) and appended to the
durable local :class:`Outbox` of that destination; one background task per
:class:`AthenaMemory` delivers the outbox in order, with exponential backoff
and a circuit breaker. Reads (context, search) go straight to the server.

Effectively-once delivery: the Athena server does not deduplicate, so before
sending an event the deliverer claims its idempotency key in Redis (``SET NX``
with a short lease), marks it sent afterwards (kept for the workflow TTL) and
releases the claim if the send failed. A turn's keys are derived from
(namespace, workflow, step, agent, turn, kind), so a re-logged turn, from any
view or process sharing Redis, is sent once. Without Redis (or while it is
down) delivery is at-least-once. A crash after a send and before its mark
sends that event again once the lease expires.

One Athena session per (tenant, user, agent) is reused across runs: its id is
cached in Redis, and a Redis lock makes sure concurrent first uses (tasks or
processes) create exactly one session.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import socket
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from redis.exceptions import RedisError

from jarvismem.backends.athena import EVENT_TYPES, AthenaClient
from jarvismem.backends.outbox import Outbox, OutboxDrainer
from jarvismem.backends.redis import RedisClient, redis_errors
from jarvismem.errors import (
    AthenaAuthError,
    AthenaBadRequestError,
    AthenaError,
    AthenaNotFoundError,
    AthenaUnsupportedError,
    BackendRejectedError,
    BackendUnavailableError,
    InvalidPayloadError,
    JarvisMemError,
)
from jarvismem.keys import KeySpace, validate_id
from jarvismem.redaction import Redactor, mask_url, no_redaction

__all__ = ["AthenaMemory", "CircuitState"]

log = logging.getLogger(__name__)

CircuitState = Literal["closed", "open", "half_open"]
_T = TypeVar("_T")

# Release the creation lock only if we still own it (it may have expired and moved on).
_CLAIMANT = f"{socket.gethostname()}:{os.getpid()}"
"""Who holds a delivery claim: this host and process (a claim is ``pending:<host>:<pid>:<id>``)."""


def _claimant_is_dead(claim: str) -> bool:
    """True for a claim taken on this host by a process that no longer exists."""
    parts = claim.split(":")
    if len(parts) != 4 or parts[0] != "pending" or parts[1] != socket.gethostname():
        return False  # another machine's claim: only its lease can end it
    try:
        pid = int(parts[2])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive (owned by another user)
    return False


_RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Without Redis: session ids cached per process, and one creation lock per key and loop.
_local_sessions: dict[str, str] = {}
# Inner maps hold their locks weakly: a lock nobody holds or waits for is
# dropped, so many agents over a process's life do not grow these maps.
_LockMap = weakref.WeakValueDictionary[Any, asyncio.Lock]
_local_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LockMap] = (
    weakref.WeakKeyDictionary()
)
# One delivery at a time per outbox path in this process (two memories of one agent
# share an outbox; both draining it would send records twice).
_drain_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LockMap] = (
    weakref.WeakKeyDictionary()
)


_write_slots: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, weakref.WeakKeyDictionary[AthenaClient, asyncio.Semaphore]
] = weakref.WeakKeyDictionary()


def _write_slot(client: AthenaClient) -> asyncio.Semaphore:
    slots = _write_slots.setdefault(asyncio.get_running_loop(), weakref.WeakKeyDictionary())
    slot = slots.get(client)
    if slot is None:
        slot = slots[client] = asyncio.Semaphore(ATHENA_CONCURRENT_WRITES)
    return slot


def _loop_lock(
    registry: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LockMap],
    key: Any,
) -> asyncio.Lock:
    locks = registry.setdefault(asyncio.get_running_loop(), weakref.WeakValueDictionary())
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

CLAIM_LEASE_SECONDS = 60.0
"""Lease of a delivery claim: longer than one send with its retries; a deliverer
that died mid-send delays that event's redelivery by at most this long."""

MARKER_TIMEOUT = 2.0
"""Seconds a claim or mark may take before delivery goes on without it (at-least-once)."""

CLOSE_GRACE_SECONDS = 60.0
"""How long close() lets an Athena request in flight finish. Requests are never
cancelled mid-flight: that could deliver an event and still replay it, and a
cancelled request can leave a dead connection in the HTTP pool for good."""

ATHENA_CONCURRENT_WRITES = 32
"""Session creations and deliveries in flight per client (below the HTTP pool's
100 connections, so a write never queues inside the pool; waiting for this
limit can be cancelled safely, waiting inside the pool cannot)."""

DEFAULT_DEDUPE_TTL = 7 * 86_400
"""How long a sent-marker is kept, s (the runtime passes the workflow TTL)."""

_SENT = "sent"


class AthenaMemory:
    """The Athena tier of one agent. Build it with :meth:`create`.

    Attributes:
        session_id: the Athena session in use (may change if the server forgets it).
    """

    session_id: str
    _task: asyncio.Task[None] | None
    _start_task: asyncio.Task[AthenaMemory] | None
    _last_error: str | None
    _closed: bool
    _wake: asyncio.Event

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
        dedupe_ttl: int = DEFAULT_DEDUPE_TTL,
        strict: bool = True,
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
            dedupe_ttl: how long Redis remembers that an event was sent, s.
            strict: raise bad credentials or a refused session (4xx). Without
                it they are kept in ``health()`` and retried with backoff while
                writes stay queued (what ``log_turn`` needs: a rotated key must
                not lose writes).

        If Athena cannot be reached now, the memory is still returned: writes
        queue in the outbox and the session is resolved on first delivery.
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
            dedupe_ttl=dedupe_ttl,
            owns_outbox=outbox is None,
        )
        try:
            await self._resolve_at_start(strict)
        except BaseException:
            if self._owns_outbox:
                await self._outbox.close()
            raise
        self._start_delivery()
        return self

    def start(self) -> asyncio.Task[AthenaMemory]:
        """Resolve the session and deliver in the background; no I/O before returning.

        The returned task completes (with this memory) once the first session
        attempt is over; it never fails because of Athena (errors go to
        :meth:`health` and are retried). Writes may be queued at once.
        """
        if self._start_task is None:

            async def opened() -> AthenaMemory:
                try:
                    await self._resolve_at_start(strict=False)
                except Exception as exc:  # a bug or a Redis oddity must not stop delivery
                    self._last_error = f"{type(exc).__name__}: {exc}"[:300]
                    log.warning("Athena start of agent %s failed: %s", self._agent, exc)
                if not self._closed:
                    self._start_delivery()
                return self

            self._start_task = asyncio.get_running_loop().create_task(
                opened(), name=f"jarvismem-athena-start-{self._agent}"
            )
        return self._start_task

    async def _resolve_at_start(self, strict: bool) -> None:
        try:
            self.session_id = await self._ensure_session()
        except (AthenaAuthError, AthenaBadRequestError) as exc:
            if strict:
                raise
            self._count_failure(exc)
            log.warning(
                "Athena refused the session of agent %s (%s); writes stay queued",
                self._agent,
                self._last_error,
            )
        except AthenaError as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("Athena unreachable at start (%s); writes will queue", self._last_error)

    def _start_delivery(self) -> None:
        if self._task is not None or self._closed:
            return
        self._task = asyncio.get_running_loop().create_task(
            self._deliver_loop(), name=f"jarvismem-athena-{self._agent}"
        )

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
        dedupe_ttl: int = DEFAULT_DEDUPE_TTL,
        owns_outbox: bool = False,
    ) -> None:
        """Plain construction, no I/O to Athena; use :meth:`create` (or :meth:`start`),
        which also resolves the session and starts delivery.

        ``owns_outbox``: a failed :meth:`create` closes the outbox (the default
        one always; a given one only when the caller hands it over).
        """
        self._agent = validate_id(agent_id, "agent_id")
        self._tenant = validate_id(tenant_id, "tenant_id")
        self._user = validate_id(user_id, "user_id")
        self._client = client
        self._redis = redis_store
        self._keys = keyspace or KeySpace()
        # Where every record of this memory is bound to go; records carry it and
        # one stamped for another destination is never sent here.
        self._dest = KeySpace.athena_destination(
            self._tenant, self._user, self._agent, client.base_url
        )
        self._dedupe_ttl = max(1, int(dedupe_ttl))
        self._session_key = self._keys.athena_session(self._tenant, self._user, self._agent)
        self._lock_key = self._keys.athena_session_lock(self._tenant, self._user, self._agent)
        self._redactor: Redactor = redactor or no_redaction
        self._lock_ttl_ms = max(1000, int(session_lock_ttl * 1000))
        self._failure_threshold = max(1, failure_threshold)
        self._cooldown = cooldown
        self._retry_base = retry_base
        self._retry_cap = retry_cap
        self._owns_outbox = owns_outbox or outbox is None
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
        self._last_error = None
        self._rejected = 0
        self._unsupported: set[str] = set()
        self._misdirected = 0
        self._duplicates_skipped = 0
        self._disk_burst = 0
        self._marker_warned = False
        self._in_http = 0
        self._closed = False
        self._wake = asyncio.Event()
        self._task = None
        self._start_task = None
        self.session_id = ""  # resolved by create() or on first use

    def _default_outbox(self) -> Outbox:
        from jarvismem.settings import load_settings

        settings = load_settings()
        rel = self._keys.athena_outbox_file(self._dest)
        return Outbox(
            settings.outbox_path / rel,
            max_entries=settings.outbox_max_entries,
            max_bytes=settings.outbox_max_bytes,
            fsync=settings.outbox_fsync_effective,
        )

    @property
    def outbox(self) -> Outbox:
        """The durable outbox of this memory's destination."""
        return self._outbox

    @property
    def destination(self) -> str:
        """``tenant/user/agent/server-hash``: where this memory's records go."""
        return self._dest

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
                    session_id = await self._http(
                        lambda: self._client.create_session(self._tenant, self._user, self._agent)
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
            session_id = await self._http(
                lambda: self._client.create_session(self._tenant, self._user, self._agent)
            )
            _local_sessions[self._session_key] = session_id
            return session_id

    async def _http(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """One write request (session creation or delivery) under the client's slot limit.

        Counted in ``_in_http`` so :meth:`close` lets it finish instead of cancelling it.
        """
        async with _write_slot(self._client):
            if self._closed:
                raise asyncio.CancelledError  # closed while waiting for a slot: nothing sent
            self._in_http += 1
            try:
                return await call()
            finally:
                self._in_http -= 1

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
        self,
        turn_id: str | int,
        thought: Any,
        action: Any,
        result: Any,
        *,
        redacted: bool = False,
        workflow_id: str | None = None,
        step_id: str | None = None,
        agent_id: str | None = None,
    ) -> bool:
        """Queue one kernel turn as thought, action and observation events.

        One outbox record for the three events: a single durable append on the
        ``log_turn`` path instead of three. Non-string values are sent as JSON.
        ``redacted``: the caller already redacted the values (``log_turn`` has).
        ``workflow_id``, ``step_id``, ``agent_id`` (default: this memory's
        agent) identify the turn: logging it again gives the same idempotency
        keys, so Athena gets each event once. Returns False when the record was
        dropped (outbox full or the local disk failing; counted in ``health()``).
        """
        redactor = no_redaction if redacted else self._redactor
        turn = str(turn_id)
        agent = self._agent if agent_id is None else agent_id
        events = []
        for etype, value in (("thought", thought), ("action", action), ("observation", result)):
            if value in (None, ""):
                continue
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            events.append(
                {
                    "type": etype,
                    "content": redactor(text),
                    "metadata": {"turn_id": turn},
                    "idempotency_key": self._keys.athena_event_key(
                        workflow_id, step_id, agent, turn, etype
                    ),
                }
            )
        if not events:
            return True
        return await self._enqueue({"kind": "events", "events": events})

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

    async def _enqueue(self, record: dict[str, Any]) -> bool:
        self._last_activity = time.monotonic()
        if self._closed:
            raise JarvisMemError("AthenaMemory is closed")
        record["dest"] = self._dest
        try:
            accepted = await self._outbox.put(record)
        except OSError as exc:
            self._disk_failed(exc)
            return False
        if self._disk_burst:
            log.warning(
                "Athena outbox %s accepts records again; %d dropped",
                self._outbox.path.name,
                self._disk_burst,
            )
            self._disk_burst = 0
        if accepted:
            self._wake.set()
        return accepted

    def _disk_failed(self, exc: OSError) -> None:
        """A local disk error (ENOSPC, EACCES, EROFS...): count a drop, warn once per burst.

        Athena is best effort: the turn is in the ledger already, so losing its
        Athena copy must not fail ``log_turn``.
        """
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self._outbox.dropped += 1
        self._disk_burst += 1
        self._last_error = f"OSError({code}): {exc.strerror or exc}"[:300]
        if self._disk_burst == 1:
            log.warning(
                "Athena outbox %s cannot be written (%s, errno %s: %s); dropping Athena "
                "records until it can",
                self._outbox.path.name,
                code,
                exc.errno,
                exc.strerror,
            )

    # --- delivery -----------------------------------------------------------------------

    async def _send(self, record: dict[str, Any]) -> None:
        """Deliver one outbox record; return normally to ack (or drop) it."""
        if self._closed:
            # Stop at a record boundary: the record stays queued for the next run.
            raise asyncio.CancelledError
        if record.get("dest") != self._dest:
            await self._misdirect(record)
            return
        await self._yield_to_kernel()
        await self._send_to_session(record)

    async def _send_to_session(self, record: dict[str, Any]) -> None:
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
            await self._once(record.get("idempotency_key"), self._event_post(session_id, record))
        elif kind == "events":
            # Each event is claimed on its own: a redelivery after a failure (or
            # a crash) mid-record skips the events already sent.
            for event in record.get("events", []):
                await self._once(event.get("idempotency_key"), self._event_post(session_id, event))
        elif kind == "interaction":
            await self._once(
                record.get("idempotency_key"),
                lambda: self._client.add_interaction(
                    session_id, record.get("user_message", ""), record.get("agent_response")
                ),
            )
        else:
            raise InvalidPayloadError(f"unknown outbox record kind {kind!r}")

    def _event_post(self, session_id: str, event: dict[str, Any]) -> Callable[[], Awaitable[None]]:
        return lambda: self._client.add_event(
            session_id,
            event["type"],
            event.get("content", ""),
            metadata=event.get("metadata") or {},
            idempotency_key=event.get("idempotency_key"),
        )

    async def _once(self, key: Any, post: Callable[[], Awaitable[None]]) -> None:
        """Send one event unless it was sent already: claim its key, send, mark it sent."""
        if self._closed:
            raise asyncio.CancelledError  # stop between events; the record stays queued
        claim = await self._claim(key if isinstance(key, str) else None)
        if claim is None:
            self._duplicates_skipped += 1
            return
        try:
            await self._http(post)
        except BaseException:
            # Not sent (or not known to be): let a retry, here or elsewhere, send it.
            await self._marker_op("release", self._release, key, claim)
            raise
        await self._marker_op("mark", self._mark_sent, key, claim)

    async def _claim(self, key: str | None) -> str | None:
        """A claim token ("" = no Redis: send without one), or None when already sent.

        A claim held by another deliverer (another process delivering its own
        copy of the turn) is waited for: it ends sent, released, or expired.
        """
        if key is None or self._redis is None:
            return ""
        redis = self._redis
        marker = self._keys.athena_sent(self._dest, key)
        token = f"pending:{_CLAIMANT}:{uuid.uuid4().hex}"
        delay = 0.05
        while True:
            try:
                async with redis_errors("Athena delivery claim", MARKER_TIMEOUT):
                    if await redis.set(marker, token, nx=True, px=int(CLAIM_LEASE_SECONDS * 1000)):
                        return token
                    current = _text(await redis.get(marker))
            except (BackendUnavailableError, BackendRejectedError) as exc:
                self._marker_failed(exc)
                return ""
            if current == _SENT:
                return None
            if current is not None and _claimant_is_dead(current):
                # Its deliverer was killed on this machine mid-send: the event may
                # or may not have reached Athena; waiting out the lease would only
                # stall the queue. Take the claim over (compare-and-delete first).
                await self._marker_op("takeover", self._release, key, current)
                continue
            if current is not None:
                if self._closed:
                    raise asyncio.CancelledError
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)

    async def _mark_sent(self, key: str, claim: str) -> None:
        if claim:
            assert self._redis is not None
            marker = self._keys.athena_sent(self._dest, key)
            await self._redis.set(marker, _SENT, ex=self._dedupe_ttl)

    async def _release(self, key: str, claim: str) -> None:
        if claim:
            assert self._redis is not None
            marker = self._keys.athena_sent(self._dest, key)
            await self._redis.eval(_RELEASE_LOCK, 1, marker, claim)

    async def _marker_op(
        self, what: str, op: Callable[[str, str], Awaitable[None]], key: str, claim: str
    ) -> None:
        # Best effort: a lost mark only means the lease expires and a later copy
        # of the turn may be sent again (at-least-once), never a lost event.
        try:
            async with redis_errors(f"Athena delivery {what}", MARKER_TIMEOUT):
                await op(key, claim)
        except (BackendUnavailableError, BackendRejectedError) as exc:
            self._marker_failed(exc)

    def _marker_failed(self, exc: Exception) -> None:
        if not self._marker_warned:
            self._marker_warned = True
            log.warning(
                "Athena delivery markers unavailable (%s); delivery is at-least-once meanwhile",
                exc,
            )

    async def _misdirect(self, record: dict[str, Any]) -> None:
        """A record stamped for another destination: never sent here; set aside and counted."""
        self._misdirected += 1
        dead = self._outbox.path.with_name(self._outbox.path.name + ".misdirected")
        log.warning(
            "Athena outbox %s holds a record for another destination; not sent to %s, "
            "moved to %s (%d so far)",
            self._outbox.path.name,
            self._dest,
            dead.name,
            self._misdirected,
        )
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        try:
            await asyncio.to_thread(_append_line, dead, line)
        except OSError as exc:
            log.warning("could not keep the misdirected record: %s", exc)

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
        self._count_failure(error)
        return delivered

    def _count_failure(self, error: BaseException) -> None:
        """One more consecutive failure: back off, or open the circuit."""
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

    def _circuit_closed(self) -> bool:
        return self._circuit == "closed"

    async def _deliver_loop(self) -> None:
        try:
            await self._outbox.load()  # what a previous run left counts as pending
        except OSError as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("Athena outbox %s unreadable: %s", self._outbox.path.name, exc)
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
            "misdirected": self._misdirected,
            "duplicates_skipped": self._duplicates_skipped,
            "delivered": self._drainer.delivered,
            "unsupported": sorted(self._unsupported),
            "last_error": self._last_error,
        }

    async def close(self, *, grace: float = CLOSE_GRACE_SECONDS) -> None:
        """Stop background delivery and close the outbox (pending writes stay on disk).

        A send in flight may finish first (up to ``grace`` seconds): cancelling
        it mid-request could deliver it and still replay it later (a duplicate).
        """
        if self._closed:
            return
        self._closed = True
        tasks: list[asyncio.Task[Any]] = [t for t in (self._start_task, self._task) if t]
        for task in tasks:
            if task.done():
                continue
            if self._in_http and grace > 0:
                # A request in flight ends by itself (the client's timeouts bound
                # it); the task then stops at the next record or event.
                await asyncio.wait({task}, timeout=grace)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._task = None
        try:
            await self._outbox.close()
        except OSError as exc:  # a broken disk must not break shutdown
            log.warning("Athena outbox %s: close failed: %s", self._outbox.path.name, exc)


def _append_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
