"""The long-lived runtime: owns connections and hands out cheap per-step views.

One :class:`MemoryRuntime` per process holds one Redis client (one pool), one
blob storage client, one Athena HTTP client, one summarizer, and the
per-workflow machinery shared by every view of that workflow (ledger, durable
writers with their outboxes, the compactor). ``runtime.memory(wf, step, agent)``
returns a :class:`~jarvismem.memory.UnifiedMemory` that costs a few object
allocations and no I/O.

``MemoryRuntime.from_env()`` builds everything from settings; with nothing
configured it runs on the embedded defaults (in-process Redis stand-in and a
local blob folder) and says so.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.backends.outbox import Outbox
from jarvismem.backends.redis import (
    connect_redis,
    create_redis,
    is_embedded,
    redis_destination,
)
from jarvismem.errors import BackendRejectedError, BackendUnavailableError
from jarvismem.keys import MAX_ID_LENGTH, KeySpace, destination_digest, validate_id
from jarvismem.redaction import Redactor, default_redactor, no_redaction
from jarvismem.settings import Settings, load_settings
from jarvismem.tiers.checkpoints import CheckpointStore
from jarvismem.tiers.durable import DurableWriter
from jarvismem.tiers.episodic import EpisodicLedger

if TYPE_CHECKING:
    from jarvismem.backends.athena import AthenaClient
    from jarvismem.backends.llm import Summarizer
    from jarvismem.memory import UnifiedMemory
    from jarvismem.recall.policy import MemoryPolicy
    from jarvismem.recall.stores import RecallStore
    from jarvismem.tiers.athena import AthenaMemory
    from jarvismem.tiers.compaction import Compactor
    from jarvismem.tiers.longterm import LongTermMemory

log = logging.getLogger(__name__)

RECENT_WORKFLOWS = 256
"""Workflow states kept alive after their last view is gone (LRU)."""

ATHENA_RECENT_AGENTS = 256
"""Agents whose Athena state (an open outbox file and a delivery task) stays live (LRU).

The least recently used agent past this bound has its AthenaMemory closed; the
records it had not delivered stay in its outbox file and a background sweeper
delivers them (one agent at a time), or its next use does.
"""


_default_settings: Settings | None = None


def default_settings() -> Settings:
    """Settings from the environment, read once per process."""
    global _default_settings
    if _default_settings is None:
        _default_settings = load_settings()
    return _default_settings


_shared_summarizers: dict[int, tuple[Settings, Summarizer]] = {}


def _create_summarizer(settings: Settings) -> Summarizer:
    from jarvismem.backends.llm import create_summarizer

    return create_summarizer(settings)


def shared_summarizer(settings: Settings) -> Summarizer:
    """One summarizer (and so one LLM HTTP client) per settings object per process.

    Views built directly from clients (``UnifiedMemory(wf, step, agent, redis, blob)``)
    use it, so creating a view per step never creates an HTTP client per step.
    """
    cached = _shared_summarizers.get(id(settings))
    if cached is None or cached[0] is not settings:
        cached = (settings, _create_summarizer(settings))
        _shared_summarizers[id(settings)] = cached
    return cached[1]


class _RedisApplier:
    """Applies the Redis outbox records of one workflow (turns and checkpoints).

    Kept apart from :class:`WorkflowState` on purpose: the writer holds this
    object, not the state, so a state nobody uses is freed at once (no
    reference cycle through a bound method keeping its outboxes open).
    """

    def __init__(self, runtime: MemoryRuntime, workflow_id: str, ledger: EpisodicLedger) -> None:
        self.redis = runtime.redis
        self.keyspace = runtime.keyspace
        self.settings = runtime.settings
        self.workflow_id = workflow_id
        self.ledger = ledger
        self.checkpoints: dict[str, CheckpointStore] = {}

    def checkpoint_store(self, step_id: str) -> CheckpointStore:
        store = self.checkpoints.get(step_id)
        if store is None:
            store = CheckpointStore(
                self.redis,
                self.keyspace,
                self.workflow_id,
                step_id,
                ttl_seconds=self.settings.ttl_seconds,
                max_bytes=self.settings.max_checkpoint_bytes,
            )
            self.checkpoints[step_id] = store
        return store

    async def __call__(self, record: dict[str, Any]) -> Any:
        op = record.get("op")
        if op == "turn":
            return await self.ledger.append_encoded(record["args"], record["field"])
        if op == "checkpoint":
            # Replayed and live-queued saves alike: idempotent by op id, and
            # skipped when a newer save is stored (monotonic).
            return await self.checkpoint_store(record["step"]).save_validated(
                record["state"],
                ts=record["ts"],
                stamp=record.get("stamp") or int(float(record["ts"]) * 1_000_000),
                op_id=record.get("opid") or f"legacy-{record['ts']!r}",
                replay=True,
            )
        raise BackendRejectedError(f"unknown outbox record op {op!r}")


class _BlobApplier:
    """Applies the blob outbox records of one workflow (scratchpad appends)."""

    def __init__(self, blob: BlobStorage) -> None:
        self.blob = blob

    async def __call__(self, record: dict[str, Any]) -> bool:
        if record.get("op") != "append":
            raise BackendRejectedError(f"unknown outbox record op {record.get('op')!r}")
        await self.blob.append(record["path"], record["data"].encode("utf-8"))
        return True


class WorkflowState:
    """What every view of one workflow shares inside a process."""

    def __init__(self, runtime: MemoryRuntime, workflow_id: str) -> None:
        self.runtime = runtime
        self.workflow_id = workflow_id
        rt = runtime
        self.ledger: EpisodicLedger | None = None
        self.redis_writer: DurableWriter | None = None
        self.blob_writer: DurableWriter | None = None
        self.ltm: LongTermMemory | None = None
        self.compactor: Compactor | None = None
        self._redis_applier: _RedisApplier | None = None
        s = rt.settings
        if rt.redis is not None:
            self.ledger = EpisodicLedger(
                rt.redis,
                rt.keyspace,
                workflow_id,
                ttl_seconds=s.ttl_seconds,
                max_len=s.ledger_max_len,
            )
            self._redis_applier = _RedisApplier(rt, workflow_id, self.ledger)
            self.redis_writer = DurableWriter(
                f"redis[{workflow_id}]",
                rt.outbox("redis", workflow_id),
                self._redis_applier,
                timeout=s.tier_timeout_episodic,
            )
        if rt.blob is not None:
            self.blob_writer = DurableWriter(
                f"blob[{workflow_id}]",
                rt.outbox("blob", workflow_id),
                _BlobApplier(rt.blob),
                timeout=s.tier_timeout_working,
            )
        if rt.redis is not None and rt.blob is not None:
            from jarvismem.tiers.compaction import CompactionPolicy, Compactor
            from jarvismem.tiers.longterm import LongTermMemory

            self.ltm = LongTermMemory(
                rt.redis,
                rt.blob,
                rt.keyspace,
                workflow_id,
                ttl_seconds=s.ttl_seconds,
                redactor=rt.redactor,
            )
            assert self.ledger is not None
            self.compactor = Compactor(
                rt.redis,
                self.ltm,
                self.ledger,
                rt.summarizer,
                rt.keyspace,
                workflow_id,
                CompactionPolicy.from_settings(s),
            )

    @property
    def writers(self) -> tuple[DurableWriter, ...]:
        """The workflow's durable writers (Redis, blob), those that exist."""
        return tuple(w for w in (self.redis_writer, self.blob_writer) if w is not None)

    def checkpoints(self, step_id: str) -> CheckpointStore:
        assert self._redis_applier is not None
        return self._redis_applier.checkpoint_store(step_id)

    async def durable_append(self, path: str, data: bytes) -> bool:
        """Append to a blob now, or queue it in order in the blob outbox."""
        assert self.blob_writer is not None
        record = {"op": "append", "path": path, "data": data.decode("utf-8")}
        return (await self.blob_writer.submit(record)) is not None

    async def close(self) -> None:
        for writer in self.writers:
            await writer.close()
        if self.compactor is not None:
            await self.compactor.aclose()


class MemoryRuntime:
    """Owns backends for a process and hands out :class:`UnifiedMemory` views."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        redis: Any = None,
        blob: BlobStorage | None = None,
        athena: AthenaClient | None = None,
        summarizer: Summarizer | None = None,
        redactor: Redactor | None = None,
        recall_store: RecallStore | None = None,
        policy: MemoryPolicy | None = None,
        owns_clients: bool = False,
    ) -> None:
        self.settings = settings or default_settings()
        self.keyspace = KeySpace(self.settings.jarvismem_namespace)
        self.redis = redis
        self.blob = blob
        self.athena = athena
        if summarizer is None:
            summarizer = (
                _create_summarizer(self.settings)
                if owns_clients
                else shared_summarizer(self.settings)
            )
        self.summarizer = summarizer
        if redactor is None:
            redactor = default_redactor if self.settings.redaction_enabled else no_redaction
        self.redactor = redactor
        if recall_store is None and redis is not None:
            from jarvismem.recall.redis_store import RedisRecallStore

            # The embedded default: BM25 over an inverted index in Redis.
            recall_store = RedisRecallStore(redis, self.keyspace)
        self.recall_store = recall_store
        if policy is None:
            from jarvismem.recall.policy import MemoryPolicy

            policy = MemoryPolicy()
        self.policy = policy
        self.owns_clients = owns_clients
        # Per-workflow state lives while a view, a draining writer or a running
        # compaction uses it, plus the RECENT_WORKFLOWS most recently used ones:
        # a long-lived runtime serving many workflows does not grow without bound.
        self._workflows: weakref.WeakValueDictionary[str, WorkflowState] = (
            weakref.WeakValueDictionary()
        )
        self._recent: OrderedDict[str, WorkflowState] = OrderedDict()
        self._outboxes: weakref.WeakValueDictionary[tuple[str, str], Outbox] = (
            weakref.WeakValueDictionary()
        )
        # Athena state per agent, bounded by ATHENA_RECENT_AGENTS (LRU): the start
        # task of each live AthenaMemory (done once its session was tried) and
        # the memory itself, usable before that.
        self._athena_memories: OrderedDict[str, asyncio.Task[AthenaMemory]] = OrderedDict()
        self._athena_live: dict[str, AthenaMemory] = {}
        self._poller: asyncio.Task[None] | None = None
        # Evicted agents that left records behind, for the sweeper; retirements
        # and the sweeper run as tasks kept here until done.
        self._athena_unsent: set[str] = set()
        self._athena_tasks: set[asyncio.Task[None]] = set()
        self._athena_sweeper: asyncio.Task[None] | None = None
        self._athena_sweeping = False
        self._closed = False

    # --- construction ---------------------------------------------------------------------

    @classmethod
    async def from_env(
        cls, settings: Settings | None = None, *, require_redis: bool = False, **overrides: Any
    ) -> MemoryRuntime:
        """Build and connect every configured backend from settings/environment.

        A configured Redis that does not answer at start-up does not stop the
        runtime: it starts degraded (one WARNING), writes queue in the local
        outbox, reads serve what the outbox holds, and everything replays once
        Redis answers (the client reconnects on its own). ``require_redis=True``
        instead waits ``REDIS_CONNECT_RETRIES`` attempts and raises
        :class:`~jarvismem.errors.BackendUnavailableError` (tools that can do
        nothing without Redis).
        """
        if settings is None:
            settings = load_settings(**overrides) if overrides else default_settings()
        try:
            # Logs once when it is the embedded stand-in.
            redis = await connect_redis(settings, retries=None if require_redis else 0)
        except BackendUnavailableError as exc:
            if require_redis:
                raise
            log.warning(
                "%s; starting degraded: writes queue in the local outbox and replay "
                "when Redis answers",
                exc,
            )
            redis = create_redis(settings)
        from jarvismem.backends.blob import create_blob_storage

        blob = create_blob_storage(settings)
        athena = None
        if settings.athena_url:
            from jarvismem.backends.athena import AthenaClient

            athena = AthenaClient.from_settings(settings)
        return cls(settings, redis=redis, blob=blob, athena=athena, owns_clients=True)

    @property
    def embedded(self) -> bool:
        """True when Redis is the ephemeral in-process stand-in."""
        return self.redis is not None and is_embedded(self.redis)

    def memory(self, workflow_id: str, step_id: str, agent_id: str) -> UnifiedMemory:
        """A cheap per-(workflow, step, agent) view; no I/O."""
        from jarvismem.memory import UnifiedMemory

        return UnifiedMemory(workflow_id, step_id, agent_id, runtime=self)

    # --- shared per-workflow machinery ----------------------------------------------------

    def workflow(self, workflow_id: str) -> WorkflowState:
        """The shared state of a workflow (created on first use)."""
        state = self._workflows.get(workflow_id)
        if state is None:
            validate_id(workflow_id, "workflow_id")
            state = WorkflowState(self, workflow_id)
            self._workflows[workflow_id] = state
        self._recent[workflow_id] = state
        self._recent.move_to_end(workflow_id)
        if len(self._recent) > RECENT_WORKFLOWS:
            self._recent.popitem(last=False)
        return state

    def destination(self, kind: str) -> str | None:
        """Digest of the backend a kind of outbox delivers to (names its files)."""
        if kind == "redis" and self.redis is not None:
            return destination_digest("redis", redis_destination(self.redis))
        if kind == "blob" and self.blob is not None:
            where = getattr(self.blob, "destination", None) or self.blob.name
            return destination_digest("blob", str(where))
        return None

    def outbox(self, kind: str, workflow_id: str) -> Outbox:
        """The process's outbox object for ``kind`` records of a workflow (no I/O).

        Redis and blob outboxes are keyed by the digest of their backend's
        address, so records queued for one server can only replay into it.
        """
        key = (kind, workflow_id)
        box = self._outboxes.get(key)
        if box is None:
            s = self.settings
            dst = self.destination(kind)
            root = Path(s.outbox_path)
            box = Outbox(
                root / self.keyspace.outbox_file(kind, workflow_id, dst),
                max_entries=s.outbox_max_entries,
                max_bytes=s.outbox_max_bytes,
                fsync=s.outbox_fsync_effective,
                destination=dst,
                # Before outboxes were keyed by destination, this was the file.
                legacy_path=root / self.keyspace.outbox_file(kind, workflow_id),
            )
            self._outboxes[key] = box
        return box

    async def athena_memory(self, agent_id: str) -> AthenaMemory | None:
        """The agent's AthenaMemory (one cached session per tenant/user/agent).

        Waits for the first session attempt; Athena errors (even refused
        credentials) are not raised but kept in its ``health()`` and retried.
        """
        memory = self.athena_memory_nowait(agent_id)
        task = self._athena_memories.get(agent_id)
        if task is not None and not task.done():
            await asyncio.wait({task})
        return memory

    def athena_outbox(self, agent_id: str) -> Outbox:
        """The durable outbox of the agent's Athena destination.

        One file per (tenant, user, Athena agent id, server): records queued for
        one tenant or server are never replayed into another's session. The live
        AthenaMemory's outbox when there is one, else a new Outbox (caller owns it).
        """
        memory = self._athena_live.get(agent_id)
        if memory is not None:
            return memory.outbox
        if self.athena is None:
            from jarvismem.errors import ConfigError

            raise ConfigError("Athena is not configured: set ATHENA_URL")
        s = self.settings
        destination = KeySpace.athena_destination(
            s.athena_tenant_id,
            s.athena_user_id,
            self.athena_agent_id(agent_id),
            self.athena.base_url,
        )
        path = Path(s.outbox_path) / self.keyspace.athena_outbox_file(destination)
        # Bounded in bytes too: a turn may carry ~1 MB of text, so a count
        # alone would let an Athena outage fill the disk.
        return Outbox(
            path,
            max_entries=s.outbox_max_entries,
            max_bytes=s.outbox_max_bytes,
            fsync=s.outbox_fsync_effective,
        )

    def _new_athena(self, agent_id: str) -> AthenaMemory:
        from jarvismem.tiers.athena import AthenaMemory

        assert self.athena is not None
        return AthenaMemory(
            self.athena_agent_id(agent_id),
            self.athena,
            self.redis,
            keyspace=self.keyspace,
            tenant_id=self.settings.athena_tenant_id,
            user_id=self.settings.athena_user_id,
            outbox=self.athena_outbox(agent_id),
            owns_outbox=True,
            redactor=self.redactor,
            dedupe_ttl=self.settings.ttl_seconds,
        )

    def athena_agent_id(self, agent_id: str) -> str:
        """The agent id sent to Athena: namespaced outside the default namespace.

        Athena keys memory by (tenant, user, agent). Prefixing the namespace
        keeps two namespaces apart even when they share ``ATHENA_TENANT_ID``;
        an over-long combination is replaced by a stable digest.
        """
        ns = self.keyspace.namespace
        if ns == "default":
            return agent_id
        combined = f"{ns}.{agent_id}"
        if len(combined) <= MAX_ID_LENGTH:
            return combined
        return "ns-" + hashlib.sha256(combined.encode()).hexdigest()[:40]

    def athena_memory_nowait(self, agent_id: str) -> AthenaMemory | None:
        """The agent's AthenaMemory, created (no I/O to Athena) and started if needed.

        None when Athena is not configured.
        Writes may be queued at once; the session is resolved in the background.
        """
        if self.athena is None:
            return None
        memory = self._athena_live.get(agent_id)
        if memory is not None:
            self._athena_memories.move_to_end(agent_id)
            return memory
        validate_id(agent_id, "agent_id")
        # No I/O here: the outbox is read by the delivery task, and a disk
        # error on a write is counted by AthenaMemory (never raised).
        memory = self._new_athena(agent_id)
        self._athena_live[agent_id] = memory
        self._athena_memories[agent_id] = memory.start()
        while len(self._athena_memories) > ATHENA_RECENT_AGENTS:
            old, _ = self._athena_memories.popitem(last=False)
            self._athena_task(self._retire_athena(old, self._athena_live.pop(old)))
        return memory

    async def athena_memory_for_write(self, agent_id: str) -> AthenaMemory | None:
        """:meth:`athena_memory_nowait` for a write path (``log_turn``).

        While evicted agents are being closed it yields to the event loop once:
        a tight loop of writes that never waits (small local appends) would
        otherwise never let them run, and their open files would pile up.
        """
        memory = self.athena_memory_nowait(agent_id)
        if self._athena_tasks:
            await asyncio.sleep(0)
        return memory

    def _athena_task(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._athena_tasks.add(task)
        task.add_done_callback(self._athena_tasks.discard)
        task.add_done_callback(_log_task_failure)

    async def _retire_athena(self, agent_id: str, memory: AthenaMemory) -> None:
        """Close an evicted agent's Athena state; leftover records go to the sweeper."""
        # An evicted memory with a request in flight lets it finish: at most
        # ATHENA_CONCURRENT_WRITES of them at once, so open files stay bounded.
        await memory.close()
        if len(memory.outbox) and not self._closed:
            self._athena_unsent.add(agent_id)
            if self._athena_sweeper is None or self._athena_sweeper.done():
                self._athena_sweeper = asyncio.ensure_future(self._sweep_athena())
                self._athena_sweeper.add_done_callback(_log_task_failure)

    async def _sweep_athena(self) -> None:
        """Deliver what evicted agents left behind, one agent at a time (bounded files).

        An agent that is live again is its own memory's business. While Athena
        fails, passes back off up to 30 s; records stay on disk meanwhile.
        """
        delay = 1.0
        while self._athena_unsent and not self._closed:
            progress = False
            for agent_id in list(self._athena_unsent):
                if self._closed:
                    return
                if agent_id in self._athena_live:
                    self._athena_unsent.discard(agent_id)
                    continue
                try:
                    memory = self._new_athena(agent_id)
                except OSError as exc:
                    log.warning("Athena sweep of agent %s: %s", agent_id, exc)
                    continue
                self._athena_sweeping = True
                try:
                    # No timeout: the client's own bounds each request, and a
                    # flush cut by a timeout would cancel a request in flight.
                    await memory.flush()
                except Exception as exc:  # keep sweeping the others
                    log.warning("Athena sweep of agent %s failed: %s", agent_id, exc)
                finally:
                    self._athena_sweeping = False
                    await memory.close()
                if not len(memory.outbox):
                    self._athena_unsent.discard(agent_id)
                    progress = True
                elif memory.health()["consecutive_failures"]:
                    break  # Athena is failing: back off rather than try every agent
            if self._athena_unsent:
                await asyncio.sleep(0 if progress else delay)
                delay = 1.0 if progress else min(30.0, delay * 2)

    def ensure_background(self) -> None:
        """Start the outbox poller on the running loop (first awaited call; cheap after).

        The runtime's constructor cannot start it (it may run outside a loop,
        as the drop-in ``UnifiedMemory(...)`` constructor does).
        """
        if self._poller is None and not self._closed:
            self._poller = asyncio.get_running_loop().create_task(
                _poll_outboxes(weakref.ref(self), self.settings.outbox_poll_seconds),
                name="jarvismem-outbox-poll",
            )

    def open_writers(self) -> list[DurableWriter]:
        """The durable writers of every workflow state alive in this process."""
        return [w for state in list(self._workflows.values()) for w in state.writers]

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        task.add_done_callback(_log_task_failure)

    # --- lifecycle ------------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """Reachability and latency of every backend, plus outbox state."""
        from jarvismem.health import runtime_health

        return await runtime_health(self)

    async def close(self) -> None:
        """Drain what can be drained, then close writers and owned clients."""
        if self._closed:
            return
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
        states = list(self._workflows.values())
        for state in states:
            for writer in state.writers:
                if writer.degraded:
                    await writer.flush(timeout=2.0)
        sweeper = self._athena_sweeper
        if sweeper is not None:
            if self._athena_sweeping:
                # Mid-flush: a request in flight is let finish (never cancelled);
                # the sweeper stops after it (it checks _closed).
                from jarvismem.tiers.athena import CLOSE_GRACE_SECONDS

                await asyncio.wait({sweeper}, timeout=CLOSE_GRACE_SECONDS)
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
        await asyncio.gather(*(memory.close() for memory in list(self._athena_live.values())))
        if self._athena_tasks:
            await asyncio.gather(*self._athena_tasks, return_exceptions=True)
        for state in states:
            await state.close()
        for box in list(self._outboxes.values()):
            await box.close()
        self._recent.clear()
        if self.owns_clients:
            if self.athena is not None:
                await self.athena.aclose()
            if self.blob is not None:
                await self.blob.close()
            if self.redis is not None:
                await self.redis.aclose()
            aclose = getattr(self.summarizer, "aclose", None)
            if aclose is not None:
                await aclose()

    async def __aenter__(self) -> MemoryRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _stale_flags(writers: list[DurableWriter]) -> list[bool]:
    return [writer.outbox.stale() for writer in writers]


async def _poll_outboxes(ref: weakref.ref[MemoryRuntime], interval: float) -> None:
    """Every ``interval`` s, notice records other processes left in our open outboxes.

    Holds the runtime only weakly between rounds, so a runtime nobody closes
    (a drop-in view's private one) is still freed. The ``stat`` calls run in
    one worker-thread hop per round, whatever the number of outboxes.
    """
    while True:
        await asyncio.sleep(interval)
        rt = ref()
        if rt is None or rt._closed:
            return
        writers = rt.open_writers()
        del rt
        if not writers:
            continue
        stale = await asyncio.to_thread(_stale_flags, writers)
        for writer, changed in zip(writers, stale, strict=True):
            if changed or writer.degraded:
                try:
                    await writer.notice()
                except Exception as exc:  # a disk error here must not end the poller
                    log.warning("outbox poll of %s failed: %s", writer.name, exc)
        del writers


def _log_task_failure(task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.warning("background task failed: %s: %s", type(exc).__name__, exc)
