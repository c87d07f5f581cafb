"""Export and import one workflow, every tier, as JSON lines.

The format (``jarvismem-export`` version 1), one UTF-8 JSON object per line:

* line 1, the header: ``{"format": "jarvismem-export", "version": 1,
  "workflow_id": ..., "namespace": ..., "exported_at": <epoch s>}``;
* then records, each with a ``"kind"``:

  - ``ledger``: ``{"kind", "id", "fields"}``: one stream entry with its
    original stream id and its decoded fields (a turn has ``turn_id``,
    ``step_id``, ``agent_id``, ``ts``, ``thought``, ``action``, ``result``,
    ``tokens``), oldest first;
  - ``summary``: ``{"kind", "text", "from_id", "to_id", "turns", "updated_at",
    "summarizer"}``: the long-term summary and its provenance;
  - ``checkpoint``: ``{"kind", "step_id", "state", "rev", "ts"}``;
  - ``scratchpad`` / ``goals``: ``{"kind", "step_id", "agent_id", "record"}``:
    one record of a working scratchpad / goal-findings blob, in file order;
  - ``spaces``: ``{"kind", "agent_id", "snapshot"}``: an agent's cognitive
    spaces as ``SpacesStore.snapshot()`` returns them.

Import validates the whole file before writing anything (an error names the
line), refuses a target workflow that already holds data unless asked to
replace it, and writes ledger entries with their original ids (XADD with an
explicit id) so that provenance ids and the exactly-once index stay valid.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import aiofiles
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.errors import BlobNotFoundError, JarvisMemError
from jarvismem.keys import KeySpace, validate_id
from jarvismem.runtime import MemoryRuntime
from jarvismem.tiers.episodic import encode_fields
from jarvismem.tiers.longterm import LongTermMemory
from jarvismem.tiers.working import encode_record, parse_records

FORMAT = "jarvismem-export"
VERSION = 1

Progress = Callable[[int, int], None]
"""``progress(done, total)``; ``total`` is an estimate (0 when unknown)."""

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_PAGE = 500
_BLOB_BATCH_BYTES = 1 << 20


class TransferError(JarvisMemError, ValueError):
    """An export file is malformed, or the import target is not empty."""


# --- the line format, as models -----------------------------------------------------------


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Header(_Line):
    """First line of an export."""

    format: Literal["jarvismem-export"]
    version: Literal[1]
    workflow_id: str
    namespace: str
    exported_at: float | None = None


class LedgerLine(_Line):
    """One ledger stream entry with its original id."""

    kind: Literal["ledger"]
    id: Annotated[str, Field(pattern=r"^\d+-\d+$")]
    fields: dict[str, Any]


class SummaryLine(_Line):
    """The long-term summary with its provenance."""

    kind: Literal["summary"]
    text: str
    from_id: str | None = None
    to_id: str | None = None
    turns: int = 0
    updated_at: float | None = None
    summarizer: str | None = None


class CheckpointLine(_Line):
    """One step's checkpoint with its revision."""

    kind: Literal["checkpoint"]
    step_id: str
    state: str
    rev: int = Field(ge=1)
    ts: float = 0.0


class BlobRecordLine(_Line):
    """One record of a scratchpad or goal-findings blob."""

    kind: Literal["scratchpad", "goals"]
    step_id: str
    agent_id: str
    record: dict[str, Any]


class SpacesLine(_Line):
    """One agent's cognitive spaces."""

    kind: Literal["spaces"]
    agent_id: str
    snapshot: dict[str, Any]


Record = Annotated[
    LedgerLine | SummaryLine | CheckpointLine | BlobRecordLine | SpacesLine,
    Field(discriminator="kind"),
]
_record_adapter: TypeAdapter[Record] = TypeAdapter(Record)


# --- reading what a workflow holds -----------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


async def _workflow_keys(rt: MemoryRuntime, workflow_id: str) -> list[str]:
    assert rt.redis is not None
    pattern = rt.keyspace.workflow_pattern(workflow_id)
    return sorted([_text(k) async for k in rt.redis.scan_iter(match=pattern, count=1000)])


def _suffix(rt: MemoryRuntime, workflow_id: str, key: str) -> str:
    prefix = rt.keyspace.workflow_pattern(workflow_id)[:-1]
    return key[len(prefix) :]


async def _blob_paths(blob: BlobStorage, keyspace: KeySpace, workflow_id: str) -> list[str]:
    paths: list[str] = []
    for prefix in (keyspace.scratchpad_prefix(workflow_id), keyspace.goals_prefix(workflow_id)):
        paths.extend(await blob.list(prefix))
    return paths


async def workflow_is_empty(rt: MemoryRuntime, workflow_id: str) -> bool:
    """Whether no tier holds anything of ``workflow_id`` in this runtime's namespace."""
    if rt.redis is not None and await _workflow_keys(rt, workflow_id):
        return False
    if rt.blob is not None:
        if await _blob_paths(rt.blob, rt.keyspace, workflow_id):
            return False
        if await rt.blob.exists(rt.keyspace.ltm_blob(workflow_id)):
            return False
    return True


def _split_blob_path(prefix: str, path: str) -> tuple[str, str]:
    step, _, agent_file = path[len(prefix) :].partition("/")
    return step, agent_file.removesuffix(".jsonl")


async def export_workflow(
    rt: MemoryRuntime, workflow_id: str, *, progress: Progress | None = None
) -> AsyncIterator[str]:
    """The export of ``workflow_id`` as lines (without newlines), header first.

    Reads page by page, so memory stays bounded by one page of the ledger and
    one blob. ``progress(done, total)`` counts ledger entries.
    """
    validate_id(workflow_id, "workflow_id")
    ks = rt.keyspace
    yield _dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "workflow_id": workflow_id,
            "namespace": ks.namespace,
            "exported_at": time.time(),
        }
    )
    keys = await _workflow_keys(rt, workflow_id) if rt.redis is not None else []

    # Ledger, oldest first, with original ids.
    state = rt.workflow(workflow_id)
    if state.ledger is not None:
        total = await state.ledger.length()
        done = 0
        async for entry in state.ledger.iter_history(page_size=_PAGE):
            sid = entry.pop("id")
            yield _dumps({"kind": "ledger", "id": sid, "fields": entry})
            done += 1
            if progress is not None and (done % 100 == 0 or done == total):
                progress(done, total)

    # Long-term summary (Redis, else the durable blob copy).
    ltm = state.ltm or LongTermMemory(
        rt.redis, rt.blob, ks, workflow_id, ttl_seconds=rt.settings.ttl_seconds
    )
    if ltm.active:
        record = await ltm.load_summary_record()
        if record is not None:
            yield _dumps({"kind": "summary", **record.model_dump()})

    # Checkpoints of every step.
    for key in keys:
        suffix = _suffix(rt, workflow_id, key)
        if not suffix.startswith("ckpt:"):
            continue
        step = suffix[len("ckpt:") :]
        checkpoint = await state.checkpoints(step).load()
        if checkpoint is not None:
            yield _dumps(
                {
                    "kind": "checkpoint",
                    "step_id": step,
                    "state": checkpoint.state,
                    "rev": checkpoint.rev,
                    "ts": checkpoint.ts,
                }
            )

    # Scratchpads and goal findings: raw records in file order.
    if rt.blob is not None:
        for kind, prefix in (
            ("scratchpad", ks.scratchpad_prefix(workflow_id)),
            ("goals", ks.goals_prefix(workflow_id)),
        ):
            for path in await rt.blob.list(prefix):
                step, agent = _split_blob_path(prefix, path)
                try:
                    raw = await rt.blob.read(path)
                except BlobNotFoundError:
                    continue
                for rec in parse_records(raw, source=path):
                    yield _dumps({"kind": kind, "step_id": step, "agent_id": agent, "record": rec})

    # Cognitive spaces, per agent.
    if rt.redis is not None:
        from jarvismem.spaces.store import SpacesStore

        for key in keys:
            suffix = _suffix(rt, workflow_id, key)
            if not suffix.startswith("spaces:"):
                continue
            agent = suffix[len("spaces:") :]
            store = SpacesStore(
                rt.redis, ks, workflow_id, agent, ttl_seconds=rt.settings.ttl_seconds
            )
            yield _dumps({"kind": "spaces", "agent_id": agent, "snapshot": await store.snapshot()})


# --- import --------------------------------------------------------------------------------------


def parse_header(line: str) -> Header:
    """The header line, or :class:`TransferError` naming line 1."""
    try:
        return Header.model_validate_json(line)
    except ValidationError as exc:
        raise TransferError(
            f"line 1: not a {FORMAT} version {VERSION} header: {_first_error(exc)}"
        ) from None


def parse_record(line: str, lineno: int) -> Record:
    """One record line, validated (ids included), or :class:`TransferError` naming the line."""
    try:
        rec = _record_adapter.validate_json(line)
    except ValidationError as exc:
        raise TransferError(f"line {lineno}: {_first_error(exc)}") from None
    try:
        if isinstance(rec, CheckpointLine):
            validate_id(rec.step_id, "step_id")
        elif isinstance(rec, BlobRecordLine):
            validate_id(rec.step_id, "step_id")
            validate_id(rec.agent_id, "agent_id")
            encode_record(rec.record)
        elif isinstance(rec, SpacesLine):
            validate_id(rec.agent_id, "agent_id")
            from jarvismem.spaces.models import MemoryContainer

            MemoryContainer.from_dict(rec.snapshot)
        elif isinstance(rec, LedgerLine):
            encode_fields(rec.fields)
    except (JarvisMemError, ValueError) as exc:
        raise TransferError(f"line {lineno}: {exc}") from None
    return rec


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else str(err["msg"])


async def _read_lines(path: Path) -> AsyncIterator[tuple[int, str]]:
    async with aiofiles.open(path, encoding="utf-8") as fh:
        lineno = 0
        async for raw in fh:
            lineno += 1
            line = raw.strip()
            if line:
                yield lineno, line


async def validate_export(path: Path) -> tuple[Header, int]:
    """Check every line of the file at ``path``; returns the header and the record count."""
    header: Header | None = None
    count = 0
    try:
        async for lineno, line in _read_lines(path):
            if header is None:
                if lineno != 1:
                    raise TransferError("line 1: the header must be the first line")
                header = parse_header(line)
                continue
            parse_record(line, lineno)
            count += 1
    except UnicodeDecodeError:
        raise TransferError(f"{path}: not UTF-8 text") from None
    if header is None:
        raise TransferError(f"{path}: empty file, no {FORMAT} header")
    return header, count


async def clear_workflow(rt: MemoryRuntime, workflow_id: str) -> None:
    """Delete every key and blob of ``workflow_id`` (import ``--force``)."""
    if rt.redis is not None:
        keys = await _workflow_keys(rt, workflow_id)
        if keys:
            await rt.redis.delete(*keys)
    if rt.blob is not None:
        for path in await _blob_paths(rt.blob, rt.keyspace, workflow_id):
            await rt.blob.delete(path)
        for path in (rt.keyspace.ltm_blob(workflow_id), rt.keyspace.ltm_meta_blob(workflow_id)):
            await rt.blob.delete(path)


class _Importer:
    """Writes validated records of one workflow, batching round trips."""

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
        self._count(rec.kind)
        if isinstance(rec, LedgerLine):
            self._ledger.append(rec)
            if len(self._ledger) >= _PAGE:
                await self._flush_ledger()
        elif isinstance(rec, BlobRecordLine):
            blob_kind = self.ks.scratchpad if rec.kind == "scratchpad" else self.ks.goals
            path = blob_kind(self.workflow_id, rec.step_id, rec.agent_id)
            if path != self._blob_path or self._blob_size >= _BLOB_BATCH_BYTES:
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
            redis = self._need_redis("checkpoint")
            key = self.ks.checkpoint(self.workflow_id, rec.step_id)
            # The revision is kept, so a kernel's expected_rev stays meaningful.
            async with redis.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping={"state": rec.state, "rev": rec.rev, "ts": repr(rec.ts)})
                pipe.expire(key, self.ttl)
                await pipe.execute()
        elif isinstance(rec, SpacesLine):
            from jarvismem.spaces.store import SpacesStore

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
                args = encode_fields(rec.fields)
                pipe.xadd(stream, dict(zip(args[::2], args[1::2], strict=True)), id=rec.id)
                f = rec.fields
                if all(isinstance(f.get(k), str | int) for k in ("step_id", "agent_id", "turn_id")):
                    # Rebuild the exactly-once index: a re-run turn stays a duplicate.
                    field = KeySpace.turn_field(
                        str(f["step_id"]), str(f["agent_id"]), str(f["turn_id"])
                    )
                    pipe.hset(index, field, rec.id)
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
    header, total = await validate_export(path)
    target = validate_id(workflow_id or header.workflow_id, "workflow_id")
    if not await workflow_is_empty(rt, target):
        if not force:
            raise TransferError(
                f"workflow {target} in namespace {rt.keyspace.namespace} already holds data; "
                "pass --force to replace it"
            )
        await clear_workflow(rt, target)
    importer = _Importer(rt, target)
    done = 0
    first = True
    async for lineno, line in _read_lines(path):
        if first:
            first = False
            continue
        rec = parse_record(line, lineno)
        await importer.add(rec)
        done += 1
        if progress is not None and (done % 100 == 0 or done == total):
            progress(done, total)
    await importer.finish()
    return {
        "workflow_id": target,
        "namespace": rt.keyspace.namespace,
        "source_workflow_id": header.workflow_id,
        "source_namespace": header.namespace,
        "records": done,
        "counts": importer.counts,
    }


__all__ = [
    "FORMAT",
    "VERSION",
    "Header",
    "TransferError",
    "clear_workflow",
    "export_workflow",
    "import_workflow",
    "parse_header",
    "parse_record",
    "validate_export",
    "workflow_is_empty",
]
