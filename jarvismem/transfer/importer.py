"""Import: write a validated export into a runtime's namespace.

The whole file is validated first (:func:`~jarvismem.transfer.validation.validate_export`),
so a bad line writes nothing. Ledger entries keep their original stream ids
(XADD with an explicit id), so provenance ids and the exactly-once index stay valid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.keys import KeySpace, validate_id
from jarvismem.records import encode_entry, encode_record, turn_identity
from jarvismem.runtime import MemoryRuntime
from jarvismem.spaces.store import SpacesStore
from jarvismem.tiers.checkpoints import CheckpointStore
from jarvismem.tiers.longterm import LongTermMemory
from jarvismem.transfer.format import (
    PAGE,
    BlobRecordLine,
    CheckpointLine,
    LedgerLine,
    Progress,
    Record,
    SpacesLine,
    SummaryLine,
    TransferError,
)
from jarvismem.transfer.validation import parse_record, read_lines, validate_export
from jarvismem.transfer.workflow import clear_workflow, workflow_is_empty

BLOB_BATCH_BYTES = 1 << 20
"""Scratchpad records buffered before one blob append."""


class RecordWriter:
    """Writes validated records of one workflow, batching round trips.

    Ledger entries go out ``PAGE`` at a time in one pipeline; consecutive records
    of one blob go out as one append of up to ``BLOB_BATCH_BYTES``. Call
    :meth:`finish` after the last :meth:`add`.
    """

    def __init__(self, rt: MemoryRuntime, workflow_id: str) -> None:
        self.rt = rt
        self.workflow_id = workflow_id
        self.ks = rt.keyspace
        self.ttl = rt.settings.ttl_seconds
        self.counts: dict[str, int] = {}
        self._ledger: list[LedgerLine] = []
        self._blob_path: str | None = None
        self._blob_buf: list[bytes] = []
        self._blob_size = 0

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _need_redis(self, kind: str) -> Any:
        if self.rt.redis is None:
            raise TransferError(f"the export holds {kind} records but Redis is not configured")
        return self.rt.redis

    def _need_blob(self, kind: str) -> BlobStorage:
        if self.rt.blob is None:
            raise TransferError(f"the export holds {kind} records but blob storage is 'none'")
        return self.rt.blob

    async def add(self, rec: Record) -> None:
        """Write (or buffer) one record."""
        self._count(rec.kind)
        if isinstance(rec, LedgerLine):
            self._ledger.append(rec)
            if len(self._ledger) >= PAGE:
                await self._flush_ledger()
        elif isinstance(rec, BlobRecordLine):
            blob_kind = self.ks.scratchpad if rec.kind == "scratchpad" else self.ks.goals
            path = blob_kind(self.workflow_id, rec.step_id, rec.agent_id)
            if path != self._blob_path or self._blob_size >= BLOB_BATCH_BYTES:
                await self._flush_blob()
                self._blob_path = path
            data = encode_record(rec.record)
            self._blob_buf.append(data)
            self._blob_size += len(data)
        elif isinstance(rec, SummaryLine):
            ltm = LongTermMemory(
                self.rt.redis, self.rt.blob, self.ks, self.workflow_id, ttl_seconds=self.ttl
            )
            prov = rec.model_dump(exclude={"kind", "text"})
            await ltm.save_summary(rec.text, provenance=prov)
        elif isinstance(rec, CheckpointLine):
            checkpoints = CheckpointStore(
                self._need_redis("checkpoint"),
                self.ks,
                self.workflow_id,
                rec.step_id,
                ttl_seconds=self.ttl,
                max_bytes=self.rt.settings.max_checkpoint_bytes,
            )
            # The revision is kept, so a kernel's expected_rev stays meaningful.
            await checkpoints.restore(rec.state, rec.rev, rec.ts)
        elif isinstance(rec, SpacesLine):
            store = SpacesStore(
                self._need_redis("spaces"),
                self.ks,
                self.workflow_id,
                rec.agent_id,
                ttl_seconds=self.ttl,
            )
            await store.restore(rec.snapshot)

    async def _flush_ledger(self) -> None:
        if not self._ledger:
            return
        redis = self._need_redis("ledger")
        stream = self.ks.ledger(self.workflow_id)
        index = self.ks.turn_index(self.workflow_id)
        async with redis.pipeline(transaction=False) as pipe:
            for rec in self._ledger:
                pipe.xadd(stream, encode_entry(rec.fields), id=rec.id)
                identity = turn_identity(rec.fields)
                if identity is not None:
                    # Rebuild the exactly-once index: a re-run turn stays a duplicate.
                    pipe.hset(index, KeySpace.turn_field(*identity), rec.id)
            pipe.expire(stream, self.ttl)
            pipe.expire(index, self.ttl)
            await pipe.execute()
        self._ledger.clear()

    async def _flush_blob(self) -> None:
        if self._blob_path is not None and self._blob_buf:
            blob = self._need_blob("scratchpad")
            await blob.append(self._blob_path, b"".join(self._blob_buf))
        self._blob_buf, self._blob_size = [], 0

    async def finish(self) -> None:
        """Write whatever is still buffered."""
        await self._flush_ledger()
        await self._flush_blob()


async def import_workflow(
    rt: MemoryRuntime,
    path: Path,
    *,
    workflow_id: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Import the export at ``path`` into ``rt``'s namespace.

    ``workflow_id``: import under this id (default: the header's). ``force``:
    replace a target workflow that already holds data (it is cleared first);
    without it a non-empty target raises :class:`TransferError`. The whole
    file is validated first, so a bad line writes nothing. Returns
    ``{"workflow_id", "source_workflow_id", "source_namespace", "records",
    "counts": {kind: n}}``.
    """
    limit = rt.settings.max_checkpoint_bytes
    header, total = await validate_export(path, max_checkpoint_bytes=limit)
    target = validate_id(workflow_id or header.workflow_id, "workflow_id")
    if not await workflow_is_empty(rt, target):
        if not force:
            raise TransferError(
                f"workflow {target} in namespace {rt.keyspace.namespace} already holds data; "
                "pass --force to replace it"
            )
        await clear_workflow(rt, target)
    writer = RecordWriter(rt, target)
    done = 0
    first = True
    async for lineno, line in read_lines(path):
        if first:
            first = False
            continue
        rec = parse_record(line, lineno, max_checkpoint_bytes=limit)
        await writer.add(rec)
        done += 1
        if progress is not None and (done % 100 == 0 or done == total):
            progress(done, total)
    await writer.finish()
    return {
        "workflow_id": target,
        "namespace": rt.keyspace.namespace,
        "source_workflow_id": header.workflow_id,
        "source_namespace": header.namespace,
        "records": done,
        "counts": writer.counts,
    }
