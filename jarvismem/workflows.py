"""Workflows as a whole: list them (``jarvismem workflows``), delete one (``jarvismem delete``).

Listing reads the namespace's workflow index, each indexed ledger and, with blob
storage, the workflow folders (so a workflow shows even without its Redis keys).
Deleting removes a workflow from every tier this machine reaches (Redis keys, index
entry, blobs, staging, local outbox files; not recall entries nor Athena). Its Redis
keys go in one ``DEL`` (one hash slot), so the ledger and its exactly-once index vanish
together; a delete is not a fence: a write landing after it starts the workflow afresh
and the delete reports ``raced``. Docs: docs/cli.md.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jarvismem.backends.outbox import Outbox
from jarvismem.backends.outbox.format import sibling
from jarvismem.backends.redis import RedisBackend
from jarvismem.errors import BackendUnavailableError, InvalidIdError, WorkflowNotFoundError
from jarvismem.keys import validate_id
from jarvismem.memory import MemoryRuntime
from jarvismem.records import as_text
from jarvismem.tiers.episodic import INDEX_REFRESH_SECONDS, WorkflowIndex, ledger_stats

__all__ = [
    "DeletionReport",
    "WorkflowInfo",
    "delete_workflow",
    "list_workflows",
    "require_workflow",
    "workflow_exists",
]

# Companion files of an outbox data file (see jarvismem.backends.outbox.store).
_OUTBOX_SIDECARS = ("", ".cursor", ".dead", ".lock", ".deliver.lock")
# Ledger reads in flight at once while listing: enough to hide latency, few
# enough to leave the connection pool to everyone else.
_LIST_CONCURRENCY = 16


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """One row of ``jarvismem workflows``.

    ``turns``/``entries``: distinct turns logged and ledger entries held (None
    without Redis, or when Redis is the embedded stand-in, which cannot see the
    ledger of a workflow another process wrote); ``last_activity``: Unix time
    of the newest ledger entry, else of the index entry, else None;
    ``indexed``: in the Redis index;
    ``blobs``: has a folder in blob storage.
    """

    workflow_id: str
    turns: int | None
    entries: int | None
    last_activity: float | None
    indexed: bool
    blobs: bool

    def as_dict(self) -> dict[str, Any]:
        """The row as a JSON-able dict."""
        return asdict(self)


async def list_workflows(
    runtime: MemoryRuntime,
    *,
    rebuild: bool = False,
    include_blobs: bool = True,
    prune: bool = True,
) -> list[WorkflowInfo]:
    """Every workflow of the runtime's namespace, most recently active first.

    ``rebuild``: first add to the index every workflow whose ledger exists (a
    SCAN of the whole keyspace: for data written before the index existed or
    by an import). ``include_blobs``: also list workflows that have blobs only.
    Index entries whose ledger is gone and that are older than the ledger TTL
    are dropped from the index as they are found (``prune=False``: listed as
    they are, nothing written; the inspector's read).
    """
    ks = runtime.keyspace
    indexed: dict[str, int] = {}
    index = None if runtime.redis is None else WorkflowIndex(runtime.backend, ks)
    if index is not None:
        if rebuild:
            await index.rebuild()
        indexed = await index.entries()
    with_blobs: set[str] = set()
    if include_blobs and runtime.blob is not None:
        prefix = ks.workflows_blob_prefix()
        for path in await runtime.blob.list(prefix):
            head = path[len(prefix) :].partition("/")[0]
            try:
                with_blobs.add(validate_id(head, "workflow_id"))
            except InvalidIdError:
                continue
    names = sorted(set(indexed) | with_blobs)
    gate = asyncio.Semaphore(_LIST_CONCURRENCY)
    stale_before = (time.time() - runtime.settings.ttl_seconds - INDEX_REFRESH_SECONDS) * 1000

    async def row(workflow: str) -> WorkflowInfo | None:
        turns = entries = last_ms = None
        if runtime.redis is not None:
            async with gate:
                stats = await ledger_stats(runtime.backend, ks, workflow)
            turns, entries, last_ms = stats.turns, stats.entries, stats.last_ms
            score = indexed.get(workflow)
            if runtime.in_process and score is None and not entries:
                # The in-process stand-in cannot see other processes' ledgers:
                # unknown, not zero.
                turns = entries = None
            if last_ms is None and score is not None:
                if prune and not stats.turns and score < stale_before and index is not None:
                    # Its ledger expired (TTL): nothing left in Redis to list.
                    await index.remove(workflow)
                    if workflow not in with_blobs:
                        return None
                else:
                    last_ms = score
        return WorkflowInfo(
            workflow_id=workflow,
            turns=turns,
            entries=entries,
            last_activity=None if last_ms is None else last_ms / 1000,
            indexed=workflow in indexed,
            blobs=workflow in with_blobs,
        )

    rows = [r for r in await asyncio.gather(*(row(w) for w in names)) if r is not None]
    rows.sort(key=lambda r: (-(r.last_activity or 0.0), r.workflow_id))
    return rows


async def workflow_exists(runtime: MemoryRuntime, workflow_id: str) -> bool | None:
    """Whether ``workflow_id`` holds anything this machine can see; None: cannot tell.

    A workflow exists when any tier holds something of it: an entry in the
    workflow index, any Redis key of it (a checkpoint or spaces without a
    ledger count too), a blob under its folder (its Redis keys may have expired
    or live on another server), or a write queued in a local outbox (written
    while Redis was down, not yet delivered). Cheapest checks first; the SCAN of
    the keyspace runs only when nothing else found it. When Redis cannot be
    reached and neither blobs nor outboxes hold the workflow, the answer is
    None rather than False: an outage is not proof of absence.
    """
    workflow = validate_id(workflow_id, "workflow_id")
    ks = runtime.keyspace
    if await asyncio.to_thread(_outbox_files, runtime, workflow, sidecars=False):
        return True
    redis_down = blob_down = False
    backend = runtime.backend
    if backend is not None:
        what = f"look up workflow {workflow}"
        try:
            if await backend.call("zscore", ks.workflow_index(), workflow, what=what) is not None:
                return True
            if await backend.call("exists", ks.ledger(workflow), what=what):
                return True
        except BackendUnavailableError:
            redis_down = True
    if runtime.blob is not None:
        try:
            if await runtime.blob.list(ks.workflow_blob_prefix(workflow)):
                return True
        except BackendUnavailableError:
            blob_down = True
    if backend is not None and not redis_down:
        what = f"look up workflow {workflow}: scan"
        async for _key in backend.scan(ks.workflow_pattern(workflow), what=what):
            return True
    return None if redis_down or blob_down else False


@dataclass(slots=True)
class DeletionReport:
    """What a delete removed (or, for a dry run, would remove).

    ``redis_keys``: Redis keys; ``blobs``: blob paths; ``outbox_files``:
    local files (absolute) with ``outbox_pending`` queued records among them;
    ``indexed``: the workflow was in the index; ``raced``: a write recreated the
    ledger during the delete (see the module doc); ``dry_run``: nothing was removed.
    """

    workflow_id: str
    redis_keys: list[str] = field(default_factory=list)
    blobs: list[str] = field(default_factory=list)
    outbox_files: list[str] = field(default_factory=list)
    outbox_pending: int = 0
    indexed: bool = False
    raced: bool = False
    dry_run: bool = False

    @property
    def empty(self) -> bool:
        """True when the workflow held nothing anywhere."""
        return not (self.redis_keys or self.blobs or self.outbox_files or self.indexed)

    def as_dict(self) -> dict[str, Any]:
        """The report as a JSON-able dict."""
        return asdict(self)


async def delete_workflow(
    runtime: MemoryRuntime, workflow_id: str, *, dry_run: bool = False
) -> DeletionReport:
    """Remove ``workflow_id`` from every tier (see the module doc for what and how).

    Raises :class:`~jarvismem.errors.InvalidIdError` for an unusable id before
    anything is read, and the backends' errors when one fails part-way (run it
    again: every step is idempotent). Call it with no view of the workflow in
    use in this process: its queued writes would recreate what was deleted.
    """
    workflow = validate_id(workflow_id, "workflow_id")
    ks = runtime.keyspace
    report = DeletionReport(workflow_id=workflow, dry_run=dry_run)
    index = None if runtime.backend is None else WorkflowIndex(runtime.backend, ks)
    if runtime.backend is not None and index is not None:
        report.redis_keys = await _redis_keys(runtime.backend, runtime, workflow)
        report.indexed = workflow in await index.entries()
    if runtime.blob is not None:
        paths = await runtime.blob.list(ks.workflow_blob_prefix(workflow))
        paths += await runtime.blob.list(ks.staging_blob_prefix(workflow))
        report.blobs = sorted(set(paths))
    report.outbox_pending = await _count_pending(
        await asyncio.to_thread(_outbox_files, runtime, workflow, sidecars=False)
    )
    # Listed after counting: reading an outbox may create its lock files.
    outboxes = await asyncio.to_thread(_outbox_files, runtime, workflow)
    report.outbox_files = [str(p) for p in outboxes]
    if dry_run:
        return report
    if runtime.backend is not None and report.redis_keys:
        # One DEL: every key of the workflow shares its hash slot, so the ledger
        # and its exactly-once index disappear together, atomically.
        await runtime.backend.call("delete", *report.redis_keys, what=f"delete workflow {workflow}")
    if runtime.blob is not None:
        for path in report.blobs:
            await runtime.blob.delete(path)
    await asyncio.to_thread(_remove_files, outboxes)
    if runtime.backend is not None and index is not None:
        what = f"delete workflow {workflow}: check"
        report.raced = bool(await runtime.backend.call("exists", ks.ledger(workflow), what=what))
        if not report.raced:
            await index.remove(workflow)
    return report


async def _redis_keys(redis: RedisBackend, runtime: MemoryRuntime, workflow: str) -> list[str]:
    """Every Redis key of the workflow, the ones every workflow has named explicitly.

    The ledger and the turn index are always listed (not only when a SCAN saw
    them), so a single DEL removes both even if a first turn lands mid-delete.
    """
    ks = runtime.keyspace
    found = {ks.ledger(workflow), ks.turn_index(workflow)}
    what = f"delete workflow {workflow}: scan"
    for pattern in (ks.workflow_pattern(workflow), ks.staging_pattern(workflow)):
        async for raw in redis.scan(pattern, what=what):
            found.add(as_text(raw))
    exists = await asyncio.gather(*(redis.call("exists", key, what=what) for key in sorted(found)))
    return [key for key, n in zip(sorted(found), exists, strict=True) if n]


def _outbox_files(runtime: MemoryRuntime, workflow: str, *, sidecars: bool = True) -> list[Path]:
    """The workflow's outbox files of every kind and destination (with their sidecars)."""
    root = Path(runtime.settings.outbox_path)
    data_files = sorted(root.glob(runtime.keyspace.outbox_files_pattern(workflow)))
    if not sidecars:
        return data_files
    return [
        path
        for data in data_files
        for path in (sibling(data, suffix) for suffix in _OUTBOX_SIDECARS)
        if path.exists()
    ]


async def _count_pending(files: list[Path]) -> int:
    """Records queued and not yet delivered in the outbox data files."""
    total = 0
    for path in files:
        if path.suffix != ".jsonl":
            continue
        box = Outbox(path)
        try:
            total += await box.load()
        finally:
            await box.close()
    return total


def _remove_files(files: list[Path]) -> None:
    for path in files:
        path.unlink(missing_ok=True)


async def require_workflow(rt: MemoryRuntime, workflow_id: str) -> str:
    """``workflow_id`` validated, or :class:`WorkflowNotFoundError` when it names nothing.

    The one check of every command that reads or writes a single workflow
    (``tail``, ``bundle``, ``spaces``, ``export``, ``compact``): a mistyped id
    is refused before anything is written, with the close ids of the
    namespace's workflow index as suggestions. What counts as existing is
    :func:`jarvismem.workflows.workflow_exists`'s (Redis keys, blobs, queued
    writes); when that cannot be told (a backend down), the command goes on
    and meets the outage itself.
    """
    workflow = validate_id(workflow_id, "workflow_id")
    if await workflow_exists(rt, workflow) is not False:
        return workflow
    known: list[str] = []
    if rt.redis is not None:
        known = list(await WorkflowIndex(rt.backend, rt.keyspace).entries())
    close = difflib.get_close_matches(workflow, known, n=3, cutoff=0.6)
    raise WorkflowNotFoundError(workflow, rt.keyspace.namespace, tuple(close))
