"""What every view of one workflow shares inside a process.

A :class:`WorkflowState` holds the workflow's ledger, its durable writers (Redis
and blob, each with its outbox), its checkpoint stores, its long-term memory and
its compactor. It is given the clients and outboxes it uses; it never reaches
back into the engine that made it, so a state nobody uses is freed at once.
"""

from __future__ import annotations

from typing import Any

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.backends.llm import Summarizer
from jarvismem.backends.outbox import Outbox
from jarvismem.backends.redis import RedisBackend
from jarvismem.errors import BackendRejectedError
from jarvismem.keys import KeySpace
from jarvismem.payload import PayloadPolicy
from jarvismem.settings import Settings
from jarvismem.tiers.checkpoints import CheckpointStore
from jarvismem.tiers.compaction import CompactionPolicy, Compactor
from jarvismem.tiers.durable import NOT_NOW, DurableWriter, WriterPolicy
from jarvismem.tiers.episodic import EpisodicLedger
from jarvismem.tiers.longterm import LongTermMemory
from jarvismem.tiers.working import GoalIndex


class _RedisApplier:
    """Applies the Redis outbox records of one workflow (turns and checkpoints).

    Kept apart from :class:`WorkflowState` on purpose: the writer holds this
    object, not the state, so a state nobody uses is freed at once (no
    reference cycle through a bound method keeping its outboxes open).
    """

    def __init__(
        self,
        redis: RedisBackend,
        keyspace: KeySpace,
        settings: Settings,
        workflow_id: str,
        ledger: EpisodicLedger,
    ) -> None:
        self.redis = redis
        self.keyspace = keyspace
        self.settings = settings
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
            # "tokens": what the turn adds to the compaction counters (0 in records
            # queued before the ledger counted).
            return await self.ledger.append_encoded(
                record["args"], record["field"], record.get("tokens", 0)
            )
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

    async def turns(self, records: list[dict[str, Any]]) -> list[Any]:
        """A run of queued turns, replayed as one ledger script call (one round trip)."""
        return await self.ledger.append_encoded_many(
            [(r["args"], r["field"], r.get("tokens", 0)) for r in records]
        )


def _is_turn(record: dict[str, Any]) -> bool:
    """Turns replay in runs; a checkpoint keeps its place between them, alone."""
    return record.get("op") == "turn"


class _BlobApplier:
    """Applies the blob outbox records of one workflow (scratchpad appends)."""

    def __init__(self, blob: BlobStorage) -> None:
        self.blob = blob

    async def __call__(self, record: dict[str, Any]) -> bool:
        if record.get("op") != "append":
            raise BackendRejectedError(f"unknown outbox record op {record.get('op')!r}")
        await self.blob.append(record["path"], record["data"].encode("utf-8"))
        return True

    def now(self, record: dict[str, Any]) -> Any:
        """The append done at once when the storage can (local, into the page cache)."""
        append_now = getattr(self.blob, "append_now", None)
        if append_now is None or record.get("op") != "append":
            return NOT_NOW
        return True if append_now(record["path"], record["data"].encode("utf-8")) else NOT_NOW


class WorkflowState:
    """What every view of one workflow shares inside a process.

    A part exists only when its backends do: the ledger, checkpoints and Redis
    writer with Redis; the blob writer with blob storage; long-term memory and
    its compactor with both. ``redis_outbox``/``blob_outbox`` are required with
    their backend (the engine gives the process's one outbox per file). The
    keys live in the settings' namespace (``JARVISMEM_NAMESPACE``), the one
    the runtime's views use; ``policy`` is the runtime's payload policy
    (long-term memory redacts with its redactor).
    """

    def __init__(
        self,
        workflow_id: str,
        *,
        settings: Settings,
        redis: RedisBackend | Any = None,
        blob: BlobStorage | None = None,
        policy: PayloadPolicy,
        summarizer: Summarizer,
        redis_outbox: Outbox | None = None,
        blob_outbox: Outbox | None = None,
    ) -> None:
        self.workflow_id = workflow_id
        # The runtime's backend (a bare redis-py client gets one of its own).
        redis = None if redis is None else RedisBackend.adopt(redis)
        self.redis = redis
        self.ledger: EpisodicLedger | None = None
        self.redis_writer: DurableWriter | None = None
        self.blob_writer: DurableWriter | None = None
        self.ltm: LongTermMemory | None = None
        self.compactor: Compactor | None = None
        # The listing of the workflow's goal-findings blobs every view's scratchpad
        # shares (a finding written through one view shows in the others' bundles).
        self.goals: GoalIndex | None = None
        self._redis_applier: _RedisApplier | None = None
        s = settings
        keyspace = KeySpace(s.jarvismem_namespace)
        compaction = CompactionPolicy.from_settings(s)
        # Long-term memory needs both backends; its compactor runs when enabled.
        compacting = redis is not None and blob is not None and compaction.enabled
        if redis is not None:
            if redis_outbox is None:
                raise ValueError("a workflow with Redis needs its Redis outbox")
            self.ledger = EpisodicLedger(
                redis,
                keyspace,
                workflow_id,
                ttl_seconds=s.ttl_seconds,
                max_len=s.ledger_max_len,
                count_for_compaction=compacting,
            )
            self._redis_applier = _RedisApplier(redis, keyspace, s, workflow_id, self.ledger)
            self.redis_writer = self._new_redis_writer(redis_outbox, s)
        self._blob = blob
        self._settings = s
        if blob is not None:
            if blob_outbox is None:
                raise ValueError("a workflow with blob storage needs its blob outbox")
            self.blob_writer = self._new_blob_writer(blob, blob_outbox, s)
            self.goals = GoalIndex(blob, keyspace.goals_prefix(workflow_id))
        if redis is not None and blob is not None:
            self.ltm = LongTermMemory(
                redis,
                blob,
                keyspace,
                workflow_id,
                ttl_seconds=s.ttl_seconds,
                redactor=policy.redact,
            )
            assert self.ledger is not None
            self.compactor = Compactor(
                redis,
                self.ltm,
                self.ledger,
                summarizer,
                keyspace,
                workflow_id,
                compaction,
            )

    def _new_redis_writer(self, outbox: Outbox, s: Settings) -> DurableWriter:
        assert self._redis_applier is not None and self.redis is not None
        return DurableWriter(
            f"redis[{self.workflow_id}]",
            outbox,
            self._redis_applier,
            policy=WriterPolicy(timeout=s.tier_timeout_episodic),
            # The backend's one PING prober: replay resumes as soon as Redis answers
            # again, not when a backoff grown during the outage runs out.
            probe=self.redis.probe,
            # A backlog of turns drains in runs, one script call each, instead of one
            # round trip per turn while live writes queue behind it.
            apply_many=self._redis_applier.turns,
            batchable=_is_turn,
        )

    def _new_blob_writer(self, blob: BlobStorage, outbox: Outbox, s: Settings) -> DurableWriter:
        applier = _BlobApplier(blob)
        return DurableWriter(
            f"blob[{self.workflow_id}]",
            outbox,
            applier,
            policy=WriterPolicy(timeout=s.tier_timeout_working),
            apply_now=applier.now,
        )

    def replay_writer(self, kind: str, outbox: Outbox) -> DurableWriter:
        """A writer that replays ``outbox`` into this workflow's ``kind`` backend.

        Same appliers, timeout and batching as the workflow's own writer of
        that kind (so a replay is as idempotent as any other), for an outbox
        that is not the workflow's own: a leftover queued under another
        address of the same backend. The caller closes it.
        """
        if kind == "redis" and self._redis_applier is not None:
            return self._new_redis_writer(outbox, self._settings)
        if kind == "blob" and self._blob is not None:
            return self._new_blob_writer(self._blob, outbox, self._settings)
        raise ValueError(f"workflow {self.workflow_id} has no {kind} backend")

    @property
    def writers(self) -> tuple[DurableWriter, ...]:
        """The workflow's durable writers (Redis, blob), those that exist."""
        return tuple(w for w in (self.redis_writer, self.blob_writer) if w is not None)

    def checkpoints(self, step_id: str) -> CheckpointStore:
        """The checkpoint store of one step (needs Redis; one object per step)."""
        assert self._redis_applier is not None
        return self._redis_applier.checkpoint_store(step_id)

    async def durable_append(self, path: str, data: bytes) -> bool:
        """Append to a blob now, or queue it in order in the blob outbox."""
        assert self.blob_writer is not None
        record = {"op": "append", "path": path, "data": data.decode("utf-8")}
        return (await self.blob_writer.submit(record)) is not None

    async def close(self) -> None:
        """Close the writers (their outboxes stay on disk) and stop compaction."""
        for writer in self.writers:
            await writer.close()
        if self.compactor is not None:
            await self.compactor.aclose()
