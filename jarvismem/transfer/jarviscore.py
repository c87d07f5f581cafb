"""Migration from JarvisCore (``jarviscore-framework`` 3.x): its memory, in jarvismem's layout.

Reads what JarvisCore's memory layer stores (its Redis ledgers, summaries and
checkpoints, its local scratchpad blobs), converts it into ``jarvismem-export`` records
and writes them with :func:`~jarvismem.transfer.importer.import_workflow`, so a
migration is validated, redacted and switched into place all or nothing, and a re-run
that would write what the target holds changes nothing. Where each thing goes, and how
types and ambiguous names are resolved: docs/migrating.md, "Migrating the data".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiofiles

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.backends.redis import RedisBackend
from jarvismem.backends.redis_connect import connect_redis
from jarvismem.defaults import NAMESPACE
from jarvismem.errors import (
    BlobNotFoundError,
    ConfigError,
    InvalidIdError,
    JarvisMemError,
)
from jarvismem.keys import KeySpace, validate_id, validate_turn_id
from jarvismem.records import TURN, TURN_FIELDS, as_text, compact_json, turn_identity
from jarvismem.redaction import mask_url, redact_json_text, redact_value
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings
from jarvismem.tiers.longterm import MAX_SUMMARY_CHARS
from jarvismem.transfer.exporter import export_workflow
from jarvismem.transfer.format import FORMAT, PAGE, VERSION, TransferError, dump_line
from jarvismem.transfer.importer import import_workflow
from jarvismem.transfer.validation import ExportChecker, parse_record
from jarvismem.transfer.workflow import workflow_is_empty

log = logging.getLogger(__name__)

ROLELESS_AGENT = "jarviscore"
"""Agent id of a scratchpad the reference wrote without a role (``{step}.md``)."""

SUMMARIZER = "jarviscore"
"""``summarizer`` of a migrated long-term summary."""

ATHENA_NOTE = (
    "Athena session ids (athena_session:*) are not carried: a JarvisCore session "
    "belongs to Athena user <agent> (or its scope), while jarvismem reads and "
    "searches as ATHENA_USER_ID.<namespace>; reusing the id would write into memory "
    "jarvismem never searches. What Athena holds stays on the Athena server."
)

_REF_TURN_FIELDS = frozenset({"turn_id", "ts", "thought", "action", "result", "tokens"})
_TURN_DATA = ("thought", "action", "result", "tokens")

MigrationProgress = Callable[[str, int, int], None]
"""``progress(label, done, total)``: ``label`` names the phase and workflow
(``reading wf-1``, ``writing wf-1``); ``total`` is 0 when unknown."""


class JarvisCoreLayout:
    """Key names and blob paths of the reference (foreign names: not jarvismem's own).

    Its keys carry no namespace; workflow ids are validated (jarvismem's rules)
    before they are put into a key or a SCAN pattern, so they hold no glob character.
    """

    LEDGERS = "ledgers:"
    LTM = "ltm:"
    CHECKPOINT = "checkpoint:"
    ATHENA_SESSIONS = "athena_session:*"
    WORKFLOWS_DIR = "workflows/"

    @staticmethod
    def ledger(workflow_id: str) -> str:
        """Stream of the workflow's ledger."""
        return f"ledgers:{workflow_id}"

    @staticmethod
    def ltm(workflow_id: str) -> str:
        """String key of the long-term summary."""
        return f"ltm:{workflow_id}"

    @staticmethod
    def checkpoint_prefix(workflow_id: str) -> str:
        """Prefix of the checkpoint keys of every step (``checkpoint:{wf}:{step}``)."""
        return f"checkpoint:{workflow_id}:"

    @staticmethod
    def scratchpad_prefix(workflow_id: str) -> str:
        """Folder of the workflow's scratchpads (``{step}_{role}.md``)."""
        return f"workflows/{workflow_id}/scratchpads/"

    @staticmethod
    def ltm_blob(workflow_id: str) -> str:
        """Durable copy of the summary."""
        return f"workflows/{workflow_id}/ltm/summary.txt"


@dataclass
class JarvisCoreSource:
    """Where a JarvisCore deployment keeps its memory: a Redis client and/or a blob store.

    ``redis`` is a ``redis.asyncio`` client (replies may be bytes or text);
    ``redis_label``/``blob_label`` say where they point (password masked).
    """

    redis: Any | None
    blob: BlobStorage | None
    redis_label: str | None = None
    blob_label: str | None = None
    owns_clients: bool = False
    backend: RedisBackend | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        # Read through jarvismem's seam: errors translated, the operation named.
        self.backend = None if self.redis is None else RedisBackend.adopt(self.redis)

    async def close(self) -> None:
        """Close the clients this source opened (never a caller's)."""
        if not self.owns_clients:
            return
        if self.redis is not None:
            await self.redis.aclose()
        if self.blob is not None:
            await self.blob.close()


@contextlib.asynccontextmanager
async def open_jarviscore_source(
    settings: Settings, *, redis_url: str | None = None, blob_path: Path | str | None = None
) -> AsyncIterator[JarvisCoreSource]:
    """Connect to a JarvisCore deployment's Redis (``redis_url``, default jarvismem's
    ``REDIS_URL``: the same server) and open its local blob folder ``blob_path``.

    Raises :class:`~jarvismem.errors.ConfigError` for a URL of another scheme, a
    folder that does not exist, or neither source; the Redis errors of
    :func:`~jarvismem.backends.redis.connect_redis` when it does not answer.
    """
    url = redis_url or settings.redis_url
    if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"--source-redis-url {mask_url(url)}: must start with redis://, rediss:// or unix://"
        )
    blob: BlobStorage | None = None
    if blob_path is not None:
        folder = Path(blob_path)
        if not await asyncio.to_thread(folder.is_dir):
            raise ConfigError(f"--source-blob {folder}: no such folder")
        blob = LocalBlobStorage(folder)
    if url is None and blob is None:
        raise ConfigError(
            "nothing to migrate from: give the JarvisCore Redis (--source-redis-url, or "
            "REDIS_URL when it is the same server) and/or its blob folder (--source-blob)"
        )
    redis = None
    if url is not None:
        # The source is read with jarvismem's own client (errors translated); one
        # connection attempt, as for every command at a prompt.
        source_settings = settings.model_copy(update={"redis_url": url, "redis_cluster": False})
        redis = await connect_redis(source_settings, retries=0)
    source = JarvisCoreSource(
        redis,
        blob,
        redis_label=mask_url(url) if url else None,
        blob_label=str(blob_path) if blob_path is not None else None,
        owns_clients=True,
    )
    try:
        yield source
    finally:
        await source.close()


# --- reading the source ------------------------------------------------------------------


async def _scan(redis: RedisBackend, pattern: str) -> list[str]:
    return sorted({as_text(k) async for k in redis.scan(pattern, what="JarvisCore scan")})


async def list_jarviscore_workflows(source: JarvisCoreSource) -> tuple[list[str], list[str]]:
    """``(workflow ids, unusable names)`` of every workflow the source holds memory of.

    A workflow is found by its ledger, summary, checkpoints or blobs. A name
    jarvismem cannot use as an id (say ``a b`` or ``x:y``) is listed apart.
    """
    names: set[str] = set()
    lay = JarvisCoreLayout
    if source.backend is not None:
        for prefix in (lay.LEDGERS, lay.LTM):
            names.update(k[len(prefix) :] for k in await _scan(source.backend, prefix + "*"))
        for key in await _scan(source.backend, lay.CHECKPOINT + "*"):
            # checkpoint:{wf}:{step}; a jarvismem id holds no ':', so the first one ends it.
            names.add(key[len(lay.CHECKPOINT) :].split(":", 1)[0])
    if source.blob is not None:
        for path in await source.blob.list(lay.WORKFLOWS_DIR):
            wf, _, rest = path[len(lay.WORKFLOWS_DIR) :].partition("/")
            if rest.startswith("scratchpads/") or rest == "ltm/summary.txt":
                names.add(wf)
    good, bad = [], []
    for name in sorted(names):
        try:
            good.append(validate_id(name, "workflow_id"))
        except InvalidIdError:
            bad.append(name)
    return good, bad


async def count_athena_sessions(source: JarvisCoreSource) -> int:
    """How many ``athena_session:*`` keys the source Redis holds."""
    if source.backend is None:
        return 0
    return len(await _scan(source.backend, JarvisCoreLayout.ATHENA_SESSIONS))


def split_scratchpad_name(name: str, known_steps: Iterable[str]) -> tuple[str, str, bool]:
    """``(step_id, agent_id, ambiguous)`` of a reference scratchpad file name (no ``.md``).

    The reference joins ``{step}_{role}`` (``{step}`` alone without a role), so a
    name with several ``_`` has several readings: one whose step has a
    checkpoint wins (the longest); else the last ``_`` splits it. ``ambiguous``
    says a choice was made without that evidence.
    """
    steps = set(known_steps)
    if name in steps:
        return name, ROLELESS_AGENT, False
    cuts = [i for i, ch in enumerate(name) if ch == "_"]
    known = [i for i in cuts if name[:i] in steps]
    if known:
        i = max(known)
        return name[:i], name[i + 1 :], False
    if not cuts:
        return name, ROLELESS_AGENT, False
    i = cuts[-1]
    return name[:i], name[i + 1 :], len(cuts) > 1


def _loads_or_text(raw: str) -> Any:
    """A ledger value the way the reference reads it: JSON when it parses, else the text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _turn_key(turn_id: Any, ts: Any) -> tuple[str, float] | None:
    """How a ledger turn and its scratchpad copy are matched: turn id and time stamp."""
    number = _number(ts)
    if number is None or isinstance(turn_id, bool) or not isinstance(turn_id, str | int):
        return None
    return str(turn_id), number


@dataclass
class _Blob:
    """One reference scratchpad, converted."""

    step_id: str
    agent_id: str
    records: list[dict[str, Any]]


@dataclass
class WorkflowPlan:
    """What migrating one workflow writes: an export file and what it holds."""

    workflow_id: str
    path: Path
    found: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    digest: dict[str, str] = field(default_factory=dict)

    def skip(self, kind: str, why: str) -> None:
        """Count a source item left out, with the reason as a warning."""
        self.skipped[kind] = self.skipped.get(kind, 0) + 1
        self.warnings.append(why)


class _PlanWriter:
    """Writes checked, redacted export records of one workflow to the plan's file."""

    def __init__(self, rt: MemoryRuntime, plan: WorkflowPlan, fh: Any) -> None:
        self.rt = rt
        self.plan = plan
        self.fh = fh
        self.checker = ExportChecker()
        self.lineno = 1
        self.digest = _Digest()
        self._redact = rt.redactor
        self._secret = rt.is_secret_key

    def redacted(self, rec: dict[str, Any]) -> dict[str, Any]:
        """``rec`` as the importer will store it (so a re-run compares equal)."""
        kind = rec["kind"]
        if kind == "ledger":
            return {**rec, "fields": redact_value(rec["fields"], self._redact, self._secret)}
        if kind in ("scratchpad", "goals"):
            return {**rec, "record": redact_value(rec["record"], self._redact, self._secret)}
        if kind == "summary":
            return {**rec, "text": self._redact(rec["text"])}
        if kind == "checkpoint" and self.rt.settings.redact_checkpoints:
            return {**rec, "state": redact_json_text(rec["state"], self._redact, self._secret)}
        return rec

    async def write(self, rec: dict[str, Any], what: str) -> bool:
        """Write ``rec`` if the importer would accept it; else skip it with a warning."""
        rec = self.redacted(rec)
        line = dump_line(rec)
        try:
            parsed = parse_record(
                line, self.lineno + 1, max_checkpoint_bytes=self.rt.settings.max_checkpoint_bytes
            )
            self.checker.check(parsed, self.lineno + 1)
        except TransferError as exc:
            reason = str(exc).split(": ", 1)[-1]
            self.plan.skip(rec["kind"], f"{what}: not migrated ({reason})")
            return False
        await self.fh.write(line + "\n")
        self.lineno += 1
        self.plan.counts[rec["kind"]] = self.plan.counts.get(rec["kind"], 0) + 1
        self.digest.add(rec)
        return True


class _Digest:
    """An order-aware fingerprint of a workflow's records, per ledger/step/blob.

    Two workflows with the same digest hold the same data as far as a migration
    writes it (a summary's ``updated_at``, set at import time, is left out).
    """

    def __init__(self) -> None:
        self._parts: dict[str, Any] = {}

    def add(self, rec: dict[str, Any]) -> None:
        kind = rec.get("kind")
        payload: Any
        if kind == "ledger":
            key, payload = "ledger", [rec["id"], rec["fields"]]
        elif kind == "summary":
            key, payload = "summary", [rec["text"], rec.get("summarizer")]
        elif kind == "checkpoint":
            key, payload = f"checkpoint/{rec['step_id']}", [rec["state"], rec["rev"]]
        elif kind in ("scratchpad", "goals"):
            key, payload = f"{kind}/{rec['step_id']}/{rec['agent_id']}", rec["record"]
        else:
            key, payload = f"{kind}/{rec.get('agent_id')}", rec
        h = self._parts.setdefault(key, hashlib.sha256())
        h.update(compact_json(payload).encode("utf-8", "surrogatepass") + b"\n")

    def result(self) -> dict[str, str]:
        """``{part: sha256}``, comparable between two digests."""
        return {key: h.hexdigest() for key, h in sorted(self._parts.items())}


async def target_digest(rt: MemoryRuntime, workflow_id: str) -> dict[str, str]:
    """The digest of what ``workflow_id`` holds in ``rt``'s namespace (read through export)."""
    digest = _Digest()
    first = True
    async for line in export_workflow(rt, workflow_id):
        if first:
            first = False
            continue
        digest.add(json.loads(line))
    return digest.result()


class _Reader:
    """Reads one workflow from the source and writes its plan."""

    def __init__(
        self,
        rt: MemoryRuntime,
        source: JarvisCoreSource,
        plan: WorkflowPlan,
        progress: MigrationProgress | None,
    ) -> None:
        self.rt = rt
        self.source = source
        self.plan = plan
        self.wf = plan.workflow_id
        self.progress = progress
        self.checkpoints: dict[str, str] = {}
        self.blobs: list[_Blob] = []
        # (turn_id, ts) -> (step, agent, turn data with its original types)
        self.turns: dict[tuple[str, float], tuple[str, str, dict[str, Any]]] = {}
        self.step_ts: dict[str, float] = {}

    async def read(self) -> None:
        if self.source.backend is not None:
            await self._read_checkpoints(self.source.backend)
        if self.source.blob is not None:
            await self._read_blobs(self.source.blob)
        async with aiofiles.open(self.plan.path, "w", encoding="utf-8") as fh:
            header = {
                "format": FORMAT,
                "version": VERSION,
                "workflow_id": self.wf,
                "namespace": self.rt.keyspace.namespace,
                "exported_at": None,
            }
            await fh.write(dump_line(header) + "\n")
            out = _PlanWriter(self.rt, self.plan, fh)
            if self.source.backend is not None:
                await self._write_ledger(self.source.backend, out)
            await self._write_summary(out)
            for step in sorted(self.checkpoints):
                rec = {
                    "kind": "checkpoint",
                    "step_id": step,
                    "state": self.checkpoints[step],
                    "rev": 1,
                    "ts": self.step_ts.get(step, 0.0),
                }
                await out.write(rec, f"checkpoint of step {step}")
            for kind in ("scratchpad", "goals"):
                for blob in self.blobs:
                    for record in blob.records:
                        if kind == "goals" and record.get("scope") != "goal":
                            continue
                        rec = {
                            "kind": kind,
                            "step_id": blob.step_id,
                            "agent_id": blob.agent_id,
                            "record": record,
                        }
                        await out.write(rec, f"{kind} record of {blob.step_id}/{blob.agent_id}")
        self.plan.digest = out.digest.result()

    async def _read_checkpoints(self, redis: RedisBackend) -> None:
        prefix = JarvisCoreLayout.checkpoint_prefix(self.wf)
        limit = self.rt.settings.max_checkpoint_bytes
        for key in await _scan(redis, prefix + "*"):
            self.plan.found = True
            step = key[len(prefix) :]
            try:
                validate_id(step, "step_id")
            except InvalidIdError as exc:
                self.plan.skip("checkpoint", f"checkpoint {key!r}: not migrated ({exc})")
                continue
            raw = await redis.call("get", key, what="JarvisCore checkpoint")
            if raw is None:
                continue  # expired since the scan
            try:
                state = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            except UnicodeDecodeError:
                self.plan.skip("checkpoint", f"checkpoint of step {step}: not UTF-8 text")
                continue
            if len(state.encode("utf-8", "surrogatepass")) > limit:
                self.plan.skip(
                    "checkpoint",
                    f"checkpoint of step {step}: larger than MAX_CHECKPOINT_BYTES ({limit})",
                )
                continue
            self.checkpoints[step] = state

    async def _read_blobs(self, blob: BlobStorage) -> None:
        prefix = JarvisCoreLayout.scratchpad_prefix(self.wf)
        for path in await blob.list(prefix):
            self.plan.found = True
            name = path[len(prefix) :]
            if "/" in name or not name.endswith(".md"):
                self.plan.skip("scratchpad", f"blob {path}: not a JarvisCore scratchpad name")
                continue
            step, agent, ambiguous = split_scratchpad_name(name[:-3], self.checkpoints)
            try:
                validate_id(step, "step_id")
                validate_id(agent, "agent_id")
            except InvalidIdError as exc:
                self.plan.skip("scratchpad", f"blob {path}: not migrated ({exc})")
                continue
            if ambiguous:
                self.plan.warnings.append(
                    f"blob {path}: read as step {step!r}, agent {agent!r} (the name has "
                    "several '_' and no checkpoint names the step)"
                )
            try:
                raw = await blob.read(path)
            except BlobNotFoundError:
                continue
            self.blobs.append(_Blob(step, agent, self._convert_blob(path, raw, step, agent)))

    def _convert_blob(self, path: str, raw: bytes, step: str, agent: str) -> list[dict[str, Any]]:
        """The reference's ``{"type", "scope", **data}`` lines as jarvismem records."""
        records: list[dict[str, Any]] = []
        last_ts = 0.0
        bad = 0
        for line in raw.split(b"\n"):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                bad += 1
                continue
            if not isinstance(entry, dict):
                bad += 1
                continue
            data = dict(entry)
            entry_type = data.pop("type", "note")
            scope = data.pop("scope", "step")
            key = _turn_key(data.get("turn_id"), data.get("ts"))
            if entry_type == TURN and key is not None and set(data) == _REF_TURN_FIELDS:
                ts = key[1]
                last_ts = ts
                turn = {name: data[name] for name in _TURN_DATA}
                self.turns.setdefault(key, (step, agent, turn))
                self.step_ts[step] = max(self.step_ts.get(step, 0.0), ts)
                records.append(
                    {"ts": ts, "type": TURN, "scope": "step", "turn_id": key[0], "data": turn}
                )
            else:
                records.append({"ts": last_ts, "type": entry_type, "scope": scope, "data": data})
        if bad:
            self.plan.skipped["scratchpad"] = self.plan.skipped.get("scratchpad", 0) + bad
            self.plan.warnings.append(f"blob {path}: {bad} unreadable line(s) not migrated")
        return records

    async def _write_ledger(self, redis: RedisBackend, out: _PlanWriter) -> None:
        key = JarvisCoreLayout.ledger(self.wf)
        total = int(await redis.call("xlen", key, what="JarvisCore ledger"))
        if total:
            self.plan.found = True
        label = f"reading {self.wf}"
        done = 0
        start = "-"
        unmatched = 0
        while True:
            rows = await redis.call(
                "xrange", key, min=start, max="+", count=PAGE, what="JarvisCore ledger"
            )
            for sid, fields in rows:
                stream_id = as_text(sid)
                entry = self._convert_entry(stream_id, fields)
                if entry is None:
                    continue
                if entry.pop("_unmatched", False):
                    unmatched += 1
                await self._write_entry(out, stream_id, entry)
                done += 1
                if self.progress is not None and (done % 100 == 0 or done == total):
                    self.progress(label, done, total)
            if len(rows) < PAGE:
                break
            start = f"({as_text(rows[-1][0])}"
        if unmatched:
            self.plan.warnings.append(
                f"{unmatched} turn(s) have no scratchpad copy: their step and agent are "
                "unknown, so they are kept in the ledger but not indexed exactly-once, and "
                "their thought/action/result keep the text the reference stored"
            )

    async def _write_entry(self, out: _PlanWriter, stream_id: str, fields: dict[str, Any]) -> None:
        rec = {"kind": "ledger", "id": stream_id, "fields": fields}
        identity = turn_identity(fields)
        if identity is not None:
            field_name = KeySpace.turn_field(*identity)
            if field_name in out.checker.turns:
                # The reference logs a turn id twice if asked; jarvismem's index holds
                # one entry per turn: the repeat stays, unindexed.
                fields = {k: v for k, v in fields.items() if k not in ("step_id", "agent_id")}
                rec["fields"] = fields
                out.plan.warnings.append(
                    f"ledger entry {stream_id}: turn {field_name} was logged before; kept "
                    "without step_id/agent_id (not indexed)"
                )
        await out.write(rec, f"ledger entry {stream_id}")

    def _convert_entry(self, stream_id: str, fields: Any) -> dict[str, Any] | None:
        try:
            raw = {as_text(k): as_text(v) for k, v in fields.items()}
        except UnicodeDecodeError:
            self.plan.skip("ledger", f"ledger entry {stream_id}: not UTF-8 text")
            return None
        if set(raw) != _REF_TURN_FIELDS:
            return {name: _loads_or_text(value) for name, value in raw.items()}
        # A log_turn entry: match its scratchpad copy by turn id and time stamp.
        ts = _loads_or_text(raw["ts"])
        match = self.turns.get(_turn_key(raw["turn_id"], ts) or ("", 0.0))
        entry: dict[str, Any] = {"turn_id": raw["turn_id"]}
        if match is not None:
            step, agent, data = match
            try:
                validate_turn_id(raw["turn_id"])
                entry["step_id"], entry["agent_id"] = step, agent
            except InvalidIdError:
                self.plan.warnings.append(
                    f"ledger entry {stream_id}: turn id {raw['turn_id'][:40]!r} is not a "
                    "jarvismem id; kept without step_id/agent_id (not indexed)"
                )
            entry["ts"] = ts
            entry.update(data)
        else:
            tokens = _loads_or_text(raw["tokens"])
            entry.update(
                ts=ts,
                thought=raw["thought"],
                action=raw["action"],
                result=raw["result"],
                tokens=tokens,
                _unmatched=True,
            )
        return {name: entry[name] for name in (*TURN_FIELDS, "_unmatched") if name in entry}

    async def _write_summary(self, out: _PlanWriter) -> None:
        text: str | None = None
        if self.source.backend is not None:
            key = JarvisCoreLayout.ltm(self.wf)
            raw = await self.source.backend.call("get", key, what="JarvisCore summary")
            if raw is not None:
                text = as_text(raw)
        if text is None and self.source.blob is not None:
            with contextlib.suppress(BlobNotFoundError):
                text = (await self.source.blob.read(JarvisCoreLayout.ltm_blob(self.wf))).decode(
                    "utf-8", "replace"
                )
        if text is None:
            return
        self.plan.found = True
        if not text:
            return  # the reference reads an empty summary as none
        if len(text) > MAX_SUMMARY_CHARS:
            self.plan.skip("summary", f"summary: {len(text)} characters, above {MAX_SUMMARY_CHARS}")
            return
        rec = {"kind": "summary", "text": text, "summarizer": SUMMARIZER}
        await out.write(rec, "summary")


# --- migrating ------------------------------------------------------------------------------


async def _same_folder(rt: MemoryRuntime, source: JarvisCoreSource) -> bool:
    """Whether the source blob folder is the target's own, in the default namespace,
    where the two layouts share paths (``workflows/<wf>/ltm/summary.txt``)."""
    if rt.keyspace.namespace != NAMESPACE:
        return False
    a, b = source.blob, rt.blob
    if not (isinstance(a, LocalBlobStorage) and isinstance(b, LocalBlobStorage)):
        return False
    ra, rb = await asyncio.gather(
        asyncio.to_thread(a.root.resolve), asyncio.to_thread(b.root.resolve)
    )
    return ra == rb


async def plan_workflow(
    rt: MemoryRuntime,
    source: JarvisCoreSource,
    workflow_id: str,
    path: Path,
    *,
    progress: MigrationProgress | None = None,
) -> WorkflowPlan:
    """Read ``workflow_id`` from the source and write what it becomes to ``path``
    (a ``jarvismem-export`` file). Writes nothing to the target."""
    plan = WorkflowPlan(validate_id(workflow_id, "workflow_id"), path)
    await _Reader(rt, source, plan, progress).read()
    return plan


async def migrate_workflow(
    rt: MemoryRuntime,
    source: JarvisCoreSource,
    workflow_id: str,
    *,
    dry_run: bool = False,
    force: bool = False,
    progress: MigrationProgress | None = None,
) -> dict[str, Any]:
    """Migrate one JarvisCore workflow into ``rt``'s namespace (same workflow id).

    Returns ``{"workflow_id", "status", "counts", "skipped", "warnings"}`` with
    ``status`` one of ``imported``, ``replaced``, ``unchanged`` (the target
    already holds exactly this data), ``empty`` (found, but nothing migratable),
    or with ``dry_run`` ``would import`` / ``would replace`` / ``unchanged``.
    Raises :class:`~jarvismem.transfer.format.TransferError` when the source holds
    nothing of the workflow, or the target holds other data and ``force`` is off.
    """
    wf = validate_id(workflow_id, "workflow_id")
    fd, name = await asyncio.to_thread(tempfile.mkstemp, prefix=f"jc-{wf}-", suffix=".jsonl")
    os.close(fd)
    path = Path(name)
    try:
        plan = await plan_workflow(rt, source, wf, path, progress=progress)
        if not plan.found:
            where = (
                " and ".join(x for x in (source.redis_label, source.blob_label) if x)
                or "the source"
            )
            raise TransferError(f"JarvisCore workflow {wf}: nothing found in {where}")
        records = sum(plan.counts.values())
        if await workflow_is_empty(rt, wf):
            status = "empty" if not records else "would import" if dry_run else "imported"
        elif await target_digest(rt, wf) == plan.digest:
            status = "unchanged"
        elif not force:
            raise TransferError(
                f"workflow {wf} in namespace {rt.keyspace.namespace} already holds other "
                "data (changed since an earlier migration, or another workflow of that "
                "name); pass --force to replace it with the JarvisCore data"
            )
        else:
            status = "would replace" if dry_run else "replaced"
        if status in ("imported", "replaced"):
            label = f"writing {wf}"

            def report(done: int, total: int) -> None:
                if progress is not None:
                    progress(label, done, total)

            await import_workflow(rt, path, workflow_id=wf, force=status == "replaced",
                                  progress=report)  # fmt: skip
        return {
            "workflow_id": wf,
            "status": status,
            "counts": dict(sorted(plan.counts.items())),
            "skipped": dict(sorted(plan.skipped.items())),
            "warnings": plan.warnings,
        }
    finally:
        await asyncio.to_thread(path.unlink, missing_ok=True)


async def migrate_from_jarviscore(
    rt: MemoryRuntime,
    source: JarvisCoreSource,
    workflows: Sequence[str] | None = None,
    *,
    dry_run: bool = False,
    force: bool = False,
    progress: MigrationProgress | None = None,
) -> dict[str, Any]:
    """Migrate ``workflows`` (None: every one the source holds) into ``rt``'s namespace.

    Named workflows must exist and be valid ids (else the error is raised before
    anything is written); with ``workflows=None`` a workflow that fails is
    reported (``"status": "failed"``, ``"error"``) and the others still migrate.
    Returns ``{"source", "namespace", "dry_run", "workflows": [...], "totals",
    "skipped", "athena_sessions", "warnings"}`` (see :func:`migrate_workflow`).
    """
    warnings: list[str] = []
    if source.blob is not None and await _same_folder(rt, source):
        raise ConfigError(
            "the JarvisCore blob folder is jarvismem's own STORAGE_BASE_PATH in the default "
            "namespace, where both keep workflows/<wf>/ltm/summary.txt and "
            "workflows/<wf>/scratchpads/: migrate into another --namespace, or point "
            "STORAGE_BASE_PATH elsewhere"
        )
    if source.blob is None:
        warnings.append(
            "no JarvisCore blob folder given (--source-blob): scratchpads are not migrated, "
            "and turns cannot be given their step and agent"
        )
    if source.redis is None:
        warnings.append("no JarvisCore Redis given: only scratchpads and summaries are migrated")
    explicit = workflows is not None
    if workflows is None:
        workflows, unusable = await list_jarviscore_workflows(source)
        for name in unusable:
            shown = name[:60].encode("unicode_escape").decode("ascii")
            warnings.append(f"workflow {shown!r}: not migrated (not a valid jarvismem id)")
    else:
        workflows = [validate_id(w, "workflow_id") for w in workflows]
    results: list[dict[str, Any]] = []
    for wf in workflows:
        try:
            results.append(
                await migrate_workflow(
                    rt, source, wf, dry_run=dry_run, force=force, progress=progress
                )
            )
        except JarvisMemError as exc:
            if explicit:
                raise
            results.append({"workflow_id": wf, "status": "failed", "error": str(exc)})
    sessions = await count_athena_sessions(source)
    if sessions:
        warnings.append(ATHENA_NOTE)
    totals: dict[str, int] = {}
    skipped: dict[str, int] = {}
    for r in results:
        if r["status"] in ("imported", "replaced", "would import", "would replace"):
            for kind, n in r.get("counts", {}).items():
                totals[kind] = totals.get(kind, 0) + n
        for kind, n in r.get("skipped", {}).items():
            skipped[kind] = skipped.get(kind, 0) + n
    return {
        "source": {"redis": source.redis_label, "blob": source.blob_label},
        "namespace": rt.keyspace.namespace,
        "dry_run": dry_run,
        "workflows": results,
        "totals": dict(sorted(totals.items())),
        "skipped": dict(sorted(skipped.items())),
        "athena_sessions": {"found": sessions, "migrated": 0},
        "warnings": warnings,
    }


__all__ = [
    "ATHENA_NOTE",
    "ROLELESS_AGENT",
    "SUMMARIZER",
    "JarvisCoreLayout",
    "JarvisCoreSource",
    "MigrationProgress",
    "WorkflowPlan",
    "count_athena_sessions",
    "list_jarviscore_workflows",
    "migrate_from_jarviscore",
    "migrate_workflow",
    "open_jarviscore_source",
    "plan_workflow",
    "split_scratchpad_name",
    "target_digest",
]
