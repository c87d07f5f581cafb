"""Tier 4: what the agent knows from earlier sessions, kept by the Athena service.

Writes (thoughts, actions, observations, interactions, task and meeting hooks)
never wait for Athena: each is redacted, tagged with an idempotency key,
stamped with its destination (tenant, user, agent, server) and appended to the
durable local :class:`Outbox` of that destination; one background task per
:class:`AthenaMemory` delivers the outbox in order (``delivery``). Reads
(context, search) go straight to the server (``reads``). One session per
(tenant, user, agent) is reused across runs (``session``).

This module composes those parts and owns the writes, the lifecycle and the
health report.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jarvismem import telemetry
from jarvismem.backends.outbox import Outbox
from jarvismem.backends.redis import RedisBackend
from jarvismem.backends.redis_connect import RedisClient
from jarvismem.defaults import SEARCH_LIMIT
from jarvismem.errors import (
    AthenaAuthError,
    AthenaBadRequestError,
    AthenaError,
    JarvisMemError,
)
from jarvismem.keys import KeySpace, validate_id
from jarvismem.redaction import Redactor, mask_url, no_redaction
from jarvismem.resilience import Backoff
from jarvismem.tiers.athena.circuit import DeliveryCircuit
from jarvismem.tiers.athena.config import CLOSE_GRACE_SECONDS, AthenaTierConfig
from jarvismem.tiers.athena.delivery import AthenaDelivery
from jarvismem.tiers.athena.gate import RequestGate
from jarvismem.tiers.athena.markers import DeliveryMarkers
from jarvismem.tiers.athena.reads import AthenaReads
from jarvismem.tiers.athena.session import AthenaSessions
from jarvismem.tiers.athena.status import TierStatus
from jarvismem.tiers.athena.writes import (
    TurnOrigin,
    conversation_record,
    event_record,
    turn_record,
)

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient

__all__ = ["AthenaMemory"]

_NO_ORIGIN = TurnOrigin()
"""A turn logged outside any workflow step, by the memory's own agent."""

log = logging.getLogger(__name__)


class AthenaMemory:
    """The Athena tier of one agent. Build it with :meth:`create` (or construct and :meth:`start`).

    Tunables come in one :class:`AthenaTierConfig` (``config``); the keyword
    ``**overrides`` replace single fields of it (``tenant_id="acme"``,
    ``retry_base=0.01``...), an unknown name raises ``TypeError``.
    """

    _start_task: asyncio.Task[AthenaMemory] | None

    @classmethod
    async def create(cls, *args: Any, strict: bool = True, **kwargs: Any) -> AthenaMemory:
        """Build the memory (arguments as for the constructor), resolve (or create
        once) the agent's session and start background delivery.

        ``strict``: raise bad credentials or a refused session (4xx). Without it
        they are kept in ``health()`` and retried with backoff while writes stay
        queued (what ``log_turn`` needs: a rotated key must not lose writes).

        If Athena cannot be reached now, the memory is still returned: writes
        queue in the outbox and the session is resolved on first delivery. If
        creation fails, an outbox the memory owns is closed.
        """
        self = cls(*args, **kwargs)
        try:
            await self._resolve_at_start(strict)
        except BaseException:
            if self._owns_outbox:
                await self._outbox.close()
            raise
        self._delivery.start()
        return self

    def __init__(
        self,
        agent_id: str,
        client: AthenaClient,
        redis_store: RedisBackend | RedisClient | None = None,
        *,
        keyspace: KeySpace | None = None,
        config: AthenaTierConfig | None = None,
        outbox: Outbox | None = None,
        redactor: Callable[[str], str] | None = None,
        owns_outbox: bool = False,
        **overrides: Any,
    ) -> None:
        """Plain construction, no I/O to Athena; use :meth:`create` (or :meth:`start`),
        which also resolves the session and starts delivery.

        Args:
            agent_id: the agent; with tenant and user it names the Athena session.
            client: the Athena client (shared; not closed by :meth:`close`).
            redis_store: caches the session id across processes and deduplicates
                deliveries: the runtime's :class:`RedisBackend`, or a redis-py
                client (adopted); None caches the id in this process only.
            keyspace: key namespace (default ``KeySpace()``).
            config: the tier's tunables (default ``AthenaTierConfig()``).
            outbox: where pending writes wait; default a file under
                ``config.outbox_dir``.
            redactor: applied to every text before it is queued (default: none).
            owns_outbox: a failed :meth:`create` closes the outbox (the default
                one always; a given one only when the caller hands it over).
            overrides: single fields of ``config``.

        A public constructor (and :meth:`create`'s arguments): its keyword
        arguments stay as they are rather than move into a config object.
        """
        cfg = (config or AthenaTierConfig()).replace(**overrides)
        self.config = cfg
        self._agent = validate_id(agent_id, "agent_id")
        tenant = validate_id(cfg.tenant_id, "tenant_id")
        user = validate_id(cfg.user_id, "user_id")
        self._client = client
        self._keys = keyspace or KeySpace()
        # Where every record of this memory is bound to go; records carry it and
        # one stamped for another destination is dead-lettered, never sent here.
        self._dest = KeySpace.athena_destination(tenant, user, self._agent, client.base_url)
        self._redactor: Redactor = redactor or no_redaction
        self._owns_outbox = owns_outbox or outbox is None
        if outbox is None:
            outbox = Outbox(
                cfg.outbox_dir / self._keys.athena_outbox_file(self._dest),
                max_entries=cfg.outbox_max_entries,
                max_bytes=cfg.outbox_max_bytes,
                fsync=cfg.outbox_fsync,
            )
        self._outbox = outbox
        self._status = TierStatus()
        self._gate = RequestGate(client)
        # One backend for the session cache and the delivery markers.
        redis = None if redis_store is None else RedisBackend.adopt(redis_store)
        self._sessions = AthenaSessions(
            client,
            redis,
            self._keys,
            config=cfg,
            agent_id=self._agent,
            gate=self._gate,
            # Chains inherit it: search(filter={"namespace": ...}) scopes by it.
            metadata={"namespace": self._keys.namespace, "agent": self._agent},
        )
        self._delivery = AthenaDelivery(
            destination=self._dest,
            outbox=outbox,
            client=client,
            sessions=self._sessions,
            markers=DeliveryMarkers(
                redis, self._keys, self._dest, dedupe_ttl=cfg.dedupe_ttl, gate=self._gate
            ),
            circuit=DeliveryCircuit(
                failure_threshold=cfg.failure_threshold,
                cooldown=cfg.cooldown,
                # One deliverer per outbox: nothing to spread, so no jitter.
                backoff=Backoff(base=cfg.retry_base, cap=cfg.retry_cap, jitter="none"),
            ),
            gate=self._gate,
            status=self._status,
        )
        self._reads = AthenaReads(
            client, self._sessions, self._status, include_graph_hits=cfg.include_graph_hits
        )
        self._disk_burst = 0
        self._wrote = False
        self._start_task = None

    @property
    def agent_id(self) -> str:
        """The agent this memory belongs to (the Athena ``agent_id`` of its session)."""
        return self._agent

    @property
    def session_id(self) -> str:
        """The Athena session in use ("" until resolved; may change if the server forgets it)."""
        return self._sessions.session_id

    @property
    def _closed(self) -> bool:
        return self._gate.closed

    @property
    def outbox(self) -> Outbox:
        """The durable outbox of this memory's destination."""
        return self._outbox

    @property
    def destination(self) -> str:
        """``tenant/user/agent/server-hash``: where this memory's records go."""
        return self._dest

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> asyncio.Task[AthenaMemory]:
        """Look up the cached session and deliver in the background; no I/O before returning.

        Unlike :meth:`create`, it creates a session only when there is
        something to send (a write was queued, or the outbox holds records), so
        an agent that is only read (``jarvismem context``) leaves no session on
        the server. The returned task completes (with this memory) once that is
        over; it never fails because of Athena. Writes may be queued at once.
        """
        if self._start_task is None:

            async def opened() -> AthenaMemory:
                try:
                    if not await self._sessions.lookup() and (self._wrote or len(self._outbox)):
                        await self._resolve_at_start(strict=False)
                except Exception as exc:  # a bug or a Redis oddity must not stop delivery
                    self._status.note(exc)
                    log.warning("Athena start of agent %s failed: %s", self._agent, exc)
                if not self._closed:
                    self._delivery.start()
                return self

            self._start_task = asyncio.get_running_loop().create_task(
                opened(), name=f"jarvismem-athena-start-{self._agent}"
            )
        return self._start_task

    async def _resolve_at_start(self, strict: bool) -> None:
        try:
            await self._sessions.current()
        except (AthenaAuthError, AthenaBadRequestError) as exc:
            if strict:
                raise
            self._delivery.count_failure(exc)
            log.warning(
                "Athena refused the session of agent %s (%s); writes stay queued",
                self._agent,
                self._status.last_error,
            )
        except AthenaError as exc:
            log.warning(
                "Athena unreachable at start (%s); writes will queue", self._status.note(exc)
            )

    async def flush(self, timeout: float | None = None) -> int:
        """Try to deliver every pending write now; returns how many were delivered.

        Stops at the first failure (the rest stays queued) or after ``timeout``
        seconds (an interrupted record is delivered again later).
        """
        return await self._delivery.flush(timeout)

    async def close(self, *, grace: float = CLOSE_GRACE_SECONDS) -> None:
        """Stop background delivery and close the outbox (pending writes stay on disk).

        A send in flight may finish first (up to ``grace`` seconds): cancelling
        it mid-request could deliver it and still replay it later (a duplicate).
        """
        if self._closed:
            return
        self._gate.close()
        tasks: list[asyncio.Task[Any]] = [t for t in (self._start_task, self._delivery.task) if t]
        for task in tasks:
            if task.done():
                continue
            if self._gate.in_flight and grace > 0:
                # A request in flight ends by itself (the client's timeouts bound
                # it); the task then stops at the next record or event.
                await asyncio.wait({task}, timeout=grace)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._delivery.task = None
        try:
            await self._outbox.close()
        except OSError as exc:  # a broken disk must not break shutdown
            log.warning("Athena outbox %s: close failed: %s", self._outbox.path.name, exc)

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
        self,
        user_message: str | None,
        agent_response: str | None = None,
        *,
        turn_id: str | int | None = None,
        workflow_id: str | None = None,
        step_id: str | None = None,
        redacted: bool = False,
    ) -> None:
        """Queue a user message (role ``user``) and the agent's answer (role ``agent``).

        Sent as two ``message`` events, not an Athena interaction (the server
        drops an interaction's metadata, so its idempotency key and time). With
        ``turn_id`` (and ``workflow_id``, ``step_id``) the events' keys come
        from the turn: the same message recorded twice for one turn is sent once.
        ``redacted``: the caller already redacted the texts.
        """
        record = conversation_record(
            self._keys,
            user_message,
            agent_response,
            no_redaction if redacted else self._redactor,
            workflow_id=workflow_id,
            step_id=step_id,
            agent_id=self._agent,
            turn_id=turn_id,
        )
        if record is not None:
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
        origin: TurnOrigin = _NO_ORIGIN,
        user_message: str | None = None,
    ) -> bool:
        """Queue one kernel turn: the user's message, if any (a ``message`` event with
        role ``user``, what makes Athena form mid-term memory), then thought,
        action and observation events (role ``agent``).

        One outbox record for the three events: a single durable append on the
        ``log_turn`` path instead of three. Non-string values are sent as JSON.
        ``redacted``: the caller already redacted the values (``log_turn`` has).
        ``origin`` (workflow, step and agent; the agent by default this
        memory's) identifies the turn: logging it again gives the same
        idempotency keys, so Athena gets each event once. Returns False when the record was
        dropped (outbox full or the local disk failing; counted in ``health()``).
        """
        record = turn_record(
            self._keys,
            turn_id,
            (thought, action, result),
            no_redaction if redacted else self._redactor,
            workflow_id=origin.workflow_id,
            step_id=origin.step_id,
            agent_id=self._agent if origin.agent_id is None else origin.agent_id,
            user_message=user_message,
        )
        return True if record is None else await self._enqueue(record)

    async def _queue_event(self, etype: str, content: str, metadata: dict[str, Any]) -> None:
        await self._enqueue(event_record(etype, content, metadata, self._redactor))

    async def _enqueue(self, record: dict[str, Any]) -> bool:
        self._wrote = True  # the session is needed: start() may create it
        self._delivery.note_write()
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
            self._delivery.wake()
        else:
            telemetry.outbox_dropped("athena")  # the outbox is full: this record was not kept
        return accepted

    def _disk_failed(self, exc: OSError) -> None:
        """A local disk error (ENOSPC, EACCES, EROFS...): count a drop, warn once per burst.

        Athena is best effort: the turn is in the ledger already, so losing its
        Athena copy must not fail ``log_turn``.
        """
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self._outbox.dropped += 1
        telemetry.outbox_dropped("athena")
        self._disk_burst += 1
        self._status.note_text(f"OSError({code}): {exc.strerror or exc}")
        if self._disk_burst == 1:
            log.warning(
                "Athena outbox %s cannot be written (%s, errno %s: %s); dropping Athena "
                "records until it can",
                self._outbox.path.name,
                code,
                exc.errno,
                exc.strerror,
            )

    # --- reads --------------------------------------------------------------------------

    async def get_memory_context(
        self, limit: int = 10, query: str | None = None, *, strict: bool = False
    ) -> dict[str, Any] | None:
        """The agent's Athena context, or None when unavailable or unsupported.

        See :meth:`AthenaReads.get_memory_context`.
        """
        return await self._reads.get_memory_context(limit, query, strict=strict)

    async def search(
        self, query: str, limit: int = SEARCH_LIMIT, *, filter: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Search Athena's memory; hits with ``distance`` and ``similarity``.

        See :meth:`AthenaReads.search`.
        """
        return await self._reads.search(query, limit, filter=filter)

    # --- status -------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Circuit state, pending/dropped/dead-lettered counts and the last error (no secrets)."""
        status = self._status
        circuit = self._delivery.circuit
        return {
            "tier": "athena",
            "url": mask_url(self._client.base_url),
            "session_id": self.session_id,
            "circuit": circuit.reported_state(),
            "consecutive_failures": circuit.failures,
            "pending": len(self._outbox),
            "dropped": self._outbox.dropped,
            # Refused for good, kept in the outbox's .dead file (persisted, every process).
            "dead_lettered": self._outbox.dead,
            "rejected": status.rejected,
            "misdirected": status.misdirected,
            "duplicates_skipped": status.duplicates_skipped,
            "delivered": self._delivery.delivered,
            "unsupported": sorted(status.unsupported),
            "last_error": status.last_error,
        }
