"""Import: write a validated export into a runtime's namespace, all or nothing.

1. **Validate** the whole file: a bad line writes nothing.
2. **Stage** every record through the tiers' own code under a staging key space
   (:meth:`~jarvismem.keys.KeySpace.staged`: same hash tag) and staging blobs.
3. **Switch** the Redis keys in one Lua script, writing a *pending* marker that names
   the blobs to move.
4. **Move the blobs**, then delete the marker; :func:`recover_import` finishes a move a
   crash interrupted (idempotent). One importer per workflow at a time.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from pathlib import Path
from typing import Any

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.backends.redis import RedisBackend
from jarvismem.errors import BackendRejectedError, BackendUnavailableError, BlobNotFoundError
from jarvismem.keys import KeySpace, validate_id
from jarvismem.records import as_text, encode_entry, encode_record, turn_identity
from jarvismem.redaction import redact_json_text, redact_value
from jarvismem.runtime import MemoryRuntime
from jarvismem.spaces.store import SpacesStore
from jarvismem.tiers.checkpoints import CheckpointStore
from jarvismem.tiers.episodic import WorkflowIndex
from jarvismem.tiers.longterm import LongTermMemory
from jarvismem.transfer.format import (
    MAX_BLOB_APPEND_BYTES,
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
from jarvismem.transfer.workflow import (
    live_blob_paths,
    workflow_is_empty,
    workflow_keys,
)

log = logging.getLogger(__name__)

BLOB_BATCH_BYTES = 1 << 20
"""Scratchpad records buffered before one blob append (a batch never passes it,
unless one record alone does; a record is at most ``MAX_BLOB_APPEND_BYTES``)."""

assert BLOB_BATCH_BYTES <= MAX_BLOB_APPEND_BYTES

# KEYS: the pending marker, then ARGV[1] old keys to delete, then ARGV[2]
# (staging, live) pairs. Every staging key is checked to exist before anything
# is written. ARGV[3]: the marker's JSON ('' = no blobs to move);
# ARGV[4]: its TTL in seconds. One script, so the switch is atomic: a reader sees
# the old workflow or the imported one, never a mix of keys.
_SWITCH_LUA = """
local n_old, n_pairs = tonumber(ARGV[1]), tonumber(ARGV[2])
-- Checked before the first write: a script that fails half-way keeps its writes.
for i = n_old + 2, n_old + 1 + 2 * n_pairs, 2 do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    return redis.error_reply('import staging key vanished (expired?): ' .. KEYS[i])
  end
end
for i = 2, n_old + 1 do redis.call('DEL', KEYS[i]) end
for i = n_old + 2, n_old + 1 + 2 * n_pairs, 2 do
  redis.call('RENAME', KEYS[i], KEYS[i + 1])
end
if ARGV[3] ~= '' then redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[4]) end
return n_pairs
"""


class RecordWriter:
    """Writes validated records of one workflow, batching round trips.

    Ledger entries go out ``PAGE`` at a time in one pipeline; consecutive records
    of one blob go out as one append of up to ``BLOB_BATCH_BYTES``. Call
    :meth:`finish` after the last :meth:`add`.
    """

    def __init__(
        self, rt: MemoryRuntime, workflow_id: str, *, keyspace: KeySpace | None = None
    ) -> None:
        self.rt = rt
        self.workflow_id = workflow_id
        # The import writes under a staging key space (see the module doc).
        self.ks = keyspace or rt.keyspace
        self.ttl = rt.settings.ttl_seconds
        self.counts: dict[str, int] = {}
        self._ledger: list[LedgerLine] = []
        self._blob_path: str | None = None
        self._blob_buf: list[bytes] = []
        self._blob_size = 0
        # An export file may come from anyone: what it holds is redacted like
        # any write (strings, dict keys, values under secret-named keys).
        self._redact = rt.redactor
        self._is_secret = rt.is_secret_key
        self._policy = rt.payload_policy

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _need_redis(self, kind: str) -> RedisBackend:
        if self.rt.backend is None:
            raise TransferError(f"the export holds {kind} records but Redis is not configured")
        return self.rt.backend

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
            data = encode_record(redact_value(rec.record, self._redact, self._is_secret))
            # Flush before the batch would pass the limit, so that no append is
            # larger than the larger of a batch and one (validated) record.
            if path != self._blob_path or self._blob_size + len(data) > BLOB_BATCH_BYTES:
                await self._flush_blob()
                self._blob_path = path
            self._blob_buf.append(data)
            self._blob_size += len(data)
        elif isinstance(rec, SummaryLine):
            ltm = LongTermMemory(
                self.rt.backend, self.rt.blob, self.ks, self.workflow_id, ttl_seconds=self.ttl
            )
            prov = rec.model_dump(exclude={"kind", "text"})
            await ltm.save_summary(self._redact(rec.text), provenance=prov)
        elif isinstance(rec, CheckpointLine):
            checkpoints = CheckpointStore(
                self._need_redis("checkpoint"),
                self.ks,
                self.workflow_id,
                rec.step_id,
                ttl_seconds=self.ttl,
                max_bytes=self.rt.settings.max_checkpoint_bytes,
            )
            state = rec.state
            if self.rt.settings.redact_checkpoints:
                state = redact_json_text(state, self._redact, self._is_secret)
            # The revision is kept, so a kernel's expected_rev stays meaningful.
            await checkpoints.restore(state, rec.rev, rec.ts)
        elif isinstance(rec, SpacesLine):
            store = SpacesStore(
                self._need_redis("spaces"),
                self.ks,
                self.workflow_id,
                rec.agent_id,
                ttl_seconds=self.ttl,
                policy=self._policy,
            )
            await store.restore(rec.snapshot)

    async def _flush_ledger(self) -> None:
        if not self._ledger:
            return
        redis = self._need_redis("ledger")
        stream = self.ks.ledger(self.workflow_id)
        index = self.ks.turn_index(self.workflow_id)

        def build(pipe: Any) -> None:
            for rec in self._ledger:
                fields = redact_value(rec.fields, self._redact, self._is_secret)
                pipe.xadd(stream, encode_entry(fields), id=rec.id)
                identity = turn_identity(rec.fields)
                if identity is not None:
                    # Rebuild the exactly-once index: a re-run turn stays a duplicate.
                    pipe.hset(index, KeySpace.turn_field(*identity), rec.id)
            pipe.expire(stream, self.ttl)
            pipe.expire(index, self.ttl)

        # One round trip; a refusal or an outage is a jarvismem error.
        await redis.pipeline(build, what="import ledger")
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
    """Import the export at ``path`` into ``rt``'s namespace, all or nothing.

    ``workflow_id``: import under this id (default: the header's). ``force``:
    replace a target workflow that already holds data (its data stays until the
    atomic switch); without it a non-empty target raises :class:`TransferError`.
    The whole file is validated first, then staged, then switched into place (see
    the module doc): a bad file, or a failure before the switch, leaves the
    target as it was, and importing again works. Returns ``{"workflow_id",
    "source_workflow_id", "source_namespace", "records", "counts": {kind: n}}``.
    """
    limit = rt.settings.max_checkpoint_bytes
    header, total = await validate_export(path, max_checkpoint_bytes=limit)
    target = validate_id(workflow_id or header.workflow_id, "workflow_id")
    await recover_import(rt, target)
    if not force and not await workflow_is_empty(rt, target):
        raise TransferError(
            f"workflow {target} in namespace {rt.keyspace.namespace} already holds data; "
            "pass --force to replace it"
        )
    token = secrets.token_hex(8)
    staged = rt.keyspace.staged(token)
    writer = RecordWriter(rt, target, keyspace=staged)
    done = 0
    switching = False
    try:
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
        if not force and not await workflow_is_empty(rt, target):
            raise TransferError(
                f"workflow {target} in namespace {rt.keyspace.namespace} received data "
                "while it was being imported; nothing was imported"
            )
        switching = True
        await _switch(rt, target, staged, replace=force)
    except BaseException:
        # Before the switch nothing live changed: drop what was staged. (A crash
        # leaves it to recover_import, which the next import runs first.) An
        # error in the switch itself may come after the script ran (a lost
        # reply), and then the staging blobs are the marker's: they are dropped
        # only while staging keys remain, which proves the (atomic) script did not run.
        if not switching or await _switch_did_not_run(rt, target, staged):
            await _discard_staging(rt, target, staged)
        raise
    await recover_import(rt, target)
    await _index(rt, target)
    return {
        "workflow_id": target,
        "namespace": rt.keyspace.namespace,
        "source_workflow_id": header.workflow_id,
        "source_namespace": header.namespace,
        "records": done,
        "counts": writer.counts,
    }


async def _index(rt: MemoryRuntime, target: str) -> None:
    """List the imported workflow in the namespace's workflow index (``jarvismem workflows``).

    The data is already in place, so a failure here does not fail the import:
    ``jarvismem workflows --rebuild`` finds the workflow from its ledger later.
    """
    if rt.redis is None:
        return
    try:
        await WorkflowIndex(rt.backend, rt.keyspace).add(target, int(time.time() * 1000))
    except (BackendUnavailableError, BackendRejectedError) as exc:
        log.warning(
            "imported %s but could not index it (%s); `workflows --rebuild` will", target, exc
        )


async def _staged_keys(rt: MemoryRuntime, pattern: str) -> list[str]:
    assert rt.backend is not None
    return sorted([as_text(k) async for k in rt.backend.scan(pattern, what="import scan")])


async def _switch(rt: MemoryRuntime, target: str, staged: KeySpace, *, replace: bool) -> None:
    """Step 3 of the module doc: one Lua script deletes the old keys (``replace``),
    renames every staging key into place and leaves the pending-blob marker."""
    ks = rt.keyspace
    blobs: list[str] = []
    if rt.blob is not None:
        blobs = await rt.blob.list(staged.staging_blob_prefix(target))
    if rt.backend is None:
        if blobs:
            await _move_blobs(rt, target, staged, [staged.unstaged_path(target, p) for p in blobs])
        return
    pairs: list[str] = []
    for key in await _staged_keys(rt, staged.staging_pattern(target)):
        pairs += [key, staged.unstaged_key(target, key)]
    old = await workflow_keys(rt, target) if replace else []
    marker = ""
    if blobs or (replace and rt.blob is not None):
        marker = json.dumps(
            {"token": staged.staging, "paths": [staged.unstaged_path(target, p) for p in blobs]}
        )
    await rt.backend.run_script(
        rt.backend.script(_SWITCH_LUA),
        [ks.import_pending(target), *old, *pairs],
        [len(old), len(pairs) // 2, marker, rt.settings.ttl_seconds],
        what="import switch",
        wait=False,
    )


async def recover_import(rt: MemoryRuntime, workflow_id: str) -> None:
    """Finish or clean up an earlier import of ``workflow_id`` that did not complete.

    A pending marker (keys switched, blobs not all moved) is completed from
    the marker; staging keys and blobs left by an import that failed or crashed
    before its switch are deleted. Idempotent; run by every import first.
    """
    ks = rt.keyspace
    backend = rt.backend
    if backend is not None:
        what = "import recover"
        raw = await backend.call("get", ks.import_pending(workflow_id), what=what)
        if raw is not None:
            pending = json.loads(as_text(raw))
            staged = ks.staged(pending["token"])
            await _move_blobs(rt, workflow_id, staged, list(pending["paths"]))
            await backend.call("delete", ks.import_pending(workflow_id), what=what)
        leftovers = await _staged_keys(rt, ks.staging_pattern(workflow_id))
        if leftovers:
            await backend.call("delete", *leftovers, what=what)
    if rt.blob is not None:
        for path in await rt.blob.list(ks.staging_blob_prefix(workflow_id)):
            await rt.blob.delete(path)


async def _move_blobs(rt: MemoryRuntime, target: str, staged: KeySpace, paths: list[str]) -> None:
    """Step 4: the live blobs become exactly ``paths``, copied from their staging twins.

    Safe to run again after a crash: a path whose staging copy is gone was
    already moved (staging copies are deleted only after every path is copied).
    """
    blob = rt.blob
    if blob is None:
        return
    keep = set(paths)
    for path in await live_blob_paths(blob, rt.keyspace, target):
        if path not in keep:
            await blob.delete(path)
    appended = (rt.keyspace.scratchpad_prefix(target), rt.keyspace.goals_prefix(target))
    for path in paths:
        source = staged.staged_path(target, path)
        try:
            data = await blob.read(source)
        except BlobNotFoundError:
            continue
        if path.startswith(appended):
            # Scratchpads must stay append blobs (Azure refuses to append to a
            # block blob, which write() makes): rebuilt by appends, from empty,
            # so that running this again after a crash cannot duplicate records.
            await blob.delete(path)
            for chunk in append_chunks(data, BLOB_BATCH_BYTES):
                await blob.append(path, chunk)
        else:
            await blob.write(path, data)
    for path in paths:
        await blob.delete(staged.staged_path(target, path))


def append_chunks(data: bytes, limit: int) -> list[bytes]:
    """``data`` (newline-led JSONL records) cut between records into appends of at most
    ``limit`` bytes (a record longer than that alone in its chunk); joined, they are ``data``."""
    chunks: list[bytes] = []
    buf: list[bytes] = []
    size = 0
    for i, part in enumerate(data.split(b"\n")):
        piece = part if i == 0 else b"\n" + part
        if not piece:
            continue
        if buf and size + len(piece) > limit:
            chunks.append(b"".join(buf))
            buf, size = [], 0
        buf.append(piece)
        size += len(piece)
    if buf:
        chunks.append(b"".join(buf))
    return chunks


async def _switch_did_not_run(rt: MemoryRuntime, target: str, staged: KeySpace) -> bool:
    """Whether staging keys of this attempt remain (the switch renames all or none)."""
    if rt.redis is None:
        return False
    try:
        return bool(await _staged_keys(rt, staged.staging_pattern(target)))
    except Exception:
        return False  # unknown: leave everything to recover_import


async def _discard_staging(rt: MemoryRuntime, target: str, staged: KeySpace) -> None:
    """Delete this attempt's staging keys and blobs (best effort: recover_import retries)."""
    try:
        if rt.backend is not None:
            keys = await _staged_keys(rt, staged.staging_pattern(target))
            if keys:
                await rt.backend.call("delete", *keys, what="import discard")
        if rt.blob is not None:
            for path in await rt.blob.list(staged.staging_blob_prefix(target)):
                await rt.blob.delete(path)
    except Exception as exc:
        # The original error matters more; the next import's recover_import cleans up.
        log.warning("import of %s: staging not discarded (%s); the next import will", target, exc)
