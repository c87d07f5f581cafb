"""Tier 3: long-term memory, a compressed summary of a workflow's distant past.

The summary lives in two places:

* Redis, hash :meth:`~jarvismem.keys.KeySpace.ltm_summary` with fields ``text``,
  ``from_id``, ``to_id``, ``turns``, ``updated_at``, ``summarizer``, under the
  workflow TTL: the fast copy;
* blob storage, :meth:`~jarvismem.keys.KeySpace.ltm_blob` (the text) and
  :meth:`~jarvismem.keys.KeySpace.ltm_meta_blob` (provenance JSON): the durable copy.

:meth:`LongTermMemory.save_summary` writes the blob first and Redis second, so
Redis never holds a summary the blob lacks. :meth:`LongTermMemory.load_summary`
reads Redis and falls back to the blob (repopulating Redis) when the key expired
or Redis was flushed.

Provenance says which ledger entries a summary covers (``from_id``..``to_id``,
stream ids) so compaction can be incremental. The meta blob carries a hash of the
text: if a crash fell between the two blob writes, the mismatch is detected and
the provenance is treated as unknown (the next compaction re-reads the ledger
rather than skipping entries).

A damaged blob (not UTF-8, meta not the expected JSON) is logged at WARNING and
treated as absent: reading memory never raises into the agent.

Every save carries a *generation* (``gen``, one more than the newest copy it
read, kept in both copies) and an operation id (``op``). Blob writes are
conditional on the versions read, so the blob pair has one linear history and
the generations follow it; the Redis write is one Lua script that refuses a
generation not newer than the stored one. :meth:`LongTermMemory.save_fenced`
(the compactor's save) adds its lock token and a forward-only ``to_id`` to the
script's conditions, so a compactor that outlived its lock, or whose base was
replaced by any other save, writes nothing. A script retried after its reply was
lost finds its own ``op`` and reports success.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from jarvismem.backends.blob.base import BlobStorage, BlobVersion
from jarvismem.backends.llm import Summarizer, as_summarizer, truncate
from jarvismem.backends.llm.worker import SummaryWorker, WorkerUnavailable
from jarvismem.backends.redis import RedisBackend
from jarvismem.defaults import COMPACTION_CHUNK_CHARS, SUMMARY_MAX_CHARS
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    BlobError,
    BlobNotFoundError,
    BlobPreconditionFailedError,
    InvalidPayloadError,
    PayloadTooLargeError,
)
from jarvismem.keys import KeySpace, validate_id
from jarvismem.resilience import Backoff

log = logging.getLogger(__name__)

MAX_SUMMARY_CHARS = 1_000_000
"""A summary longer than this is refused by :meth:`LongTermMemory.save_summary`."""

# The old name of defaults.SUMMARY_MAX_CHARS, still imported by a system test.

MAX_REDUCE_DEPTH = 8

BLOB_ABSENT_SECONDS = 5.0
"""How long a blob found without a summary is believed empty by reads that found
none in Redis either (every rehydrate bundle of a workflow not yet compacted would
otherwise look for the blob). A save writes the blob before Redis, so the only
summary this can hide is one whose save died between the two writes, or one
written by a process that reached the blob but not yet Redis: for at most this long.
A save through the same :class:`LongTermMemory` ends the bound at once."""

RENDER_SLICE_SECONDS = 0.0005
"""Longest stretch of rendering and redacting ledger entries :meth:`LongTermMemory.compress`
does on the event loop before it yields to it."""

# Entries rendered (and redacted) between two checks of the time slice.
_RENDER_BATCH = 4

SAVE_ATTEMPTS = 8
"""How often :meth:`LongTermMemory.save_summary` re-reads and retries when a
concurrent save changed the blob copy under it (each retry means another save won)."""

SAVE_BACKOFF = Backoff(base=0.002, cap=0.002 * 2 ** (SAVE_ATTEMPTS - 1), jitter="full")
"""Wait before a retried save: saves that keep invalidating each other's conditions
spread out instead of colliding again (the cap is the last retry's window)."""

# The one Redis write of a summary. KEYS: summary hash, lock key. ARGV: ttl
# seconds, op id, gen ('' = one more than the stored one), lock token ('' = no
# lock to check), to_id that must be strictly after the stored one ('' = no
# check), then field/value pairs. Returns {status, stored gen}: 'applied' (also
# when the stored op is ours: a retry after a lost reply), 'lock' (the lock is
# not ours), 'stale' (a save of this or a newer generation is already there),
# 'to_id' (the stored summary covers as far or further).
_SAVE_LUA = """
local stored = redis.call('HMGET', KEYS[1], 'gen', 'op', 'to_id')
local cur = tonumber(stored[1] or '0') or 0
if stored[2] == ARGV[2] then
  -- A write even here: a replicated save's WAIT must cover the copy it reports.
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  return {'applied', tostring(cur)}
end
if ARGV[4] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[4] then
  return {'lock', tostring(cur)}
end
local gen = cur + 1
if ARGV[3] ~= '' then
  gen = tonumber(ARGV[3])
  if gen <= cur then return {'stale', tostring(cur)} end
end
local function sid(s)
  local ms, seq = string.match(s or '', '^(%d+)-(%d+)$')
  if ms == nil then ms = string.match(s or '', '^(%d+)$'); seq = '0' end
  if ms == nil then return nil end
  return {tonumber(ms), tonumber(seq)}
end
if ARGV[5] ~= '' then
  local old = sid(stored[3])
  local new = sid(ARGV[5])
  if new == nil then return {'to_id', tostring(cur)} end
  if old ~= nil and (new[1] < old[1] or (new[1] == old[1] and new[2] <= old[2])) then
    return {'to_id', tostring(cur)}
  end
end
redis.call('HSET', KEYS[1], 'gen', gen, 'op', ARGV[2], unpack(ARGV, 6))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return {'applied', tostring(gen)}
"""

_FENCED_REASONS = {
    "lock": "fenced: the compactor lock is no longer ours (it expired or another compactor "
    "took it); the newer summary was kept",
    "stale": "fenced: a newer summary was saved since this one was started; it was kept",
    "to_id": "fenced: the stored summary already covers these ledger entries; it was kept",
    "blob": "fenced: the durable copy changed since this summary was started (a newer "
    "summary was saved); it was kept",
}

# Write the cached copy back only if nobody wrote a (newer) summary meanwhile.
# KEYS: summary hash. ARGV: ttl seconds, then field/value pairs.
_REPOPULATE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""


class SummaryProvenance(BaseModel):
    """Where a summary comes from: defined once, shared by every summary shape.

    ``from_id``/``to_id``: first and last ledger stream ids the summary covers
    (None when unknown); ``turns``: how many ledger entries went into it;
    ``updated_at``: epoch seconds of the save; ``summarizer``: which made it.
    """

    from_id: str | None = None
    to_id: str | None = None
    turns: int = 0
    updated_at: float | None = None
    summarizer: str | None = None


class SummaryRecord(SummaryProvenance):
    """A summary (``text``) and its provenance."""

    model_config = ConfigDict(frozen=True)

    text: str


class _Meta(SummaryProvenance):
    """Shape of the provenance blob (validated on read): the provenance plus the
    text's hash, the save's generation and its operation id."""

    model_config = ConfigDict(extra="ignore")

    text_sha256: str | None = None
    gen: int = 0
    op: str | None = None


@dataclass(frozen=True)
class SummaryBase:
    """What a fenced save builds on, read by :meth:`LongTermMemory.read_base`.

    ``record``: the newest copy (Redis or blob, by generation), None when there is
    no summary; ``gen``: the newest generation seen in either copy; ``text_version``/
    ``meta_version``: blob versions the conditional writes must still find (None:
    the blob must still be absent).
    """

    record: SummaryRecord | None
    gen: int
    text_version: BlobVersion | None
    meta_version: BlobVersion | None


@dataclass(frozen=True)
class SaveOutcome:
    """Result of :meth:`LongTermMemory.save_fenced`.

    ``saved``: the summary is in every configured copy; ``reason``: why not
    (starts with ``fenced:``); ``gen``: its generation when saved.
    """

    saved: bool
    reason: str = ""
    gen: int = 0


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fields(raw: Mapping[Any, Any]) -> dict[str, str]:
    """A Redis hash as text (raises ``UnicodeDecodeError`` on non-UTF-8 bytes)."""
    return {_text(k): _text(v) for k, v in raw.items()}


def _gen(value: Any) -> int:
    """A stored generation; 0 when absent or unreadable (older data has none)."""
    try:
        return max(0, int(_text(value))) if value is not None else 0
    except (ValueError, UnicodeDecodeError):
        return 0


def _field_text(value: Any) -> str:
    """A ledger field as one line of text (JSON for non-strings)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        try:
            value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):
            value = str(value)
    # One entry, one line: the summarizers work line by line.
    return " ".join(value.split())


def render_entry(entry: Mapping[str, Any]) -> str:
    """``[turn 3] thought → action = result`` (empty parts left out)."""
    turn = entry.get("turn_id", entry.get("id", "?"))
    thought = _field_text(entry.get("thought"))
    action = _field_text(entry.get("action"))
    result = _field_text(entry.get("result"))
    line = f"[turn {_field_text(turn)}]"
    if thought:
        line += f" {thought}"
    if action:
        line += f" → {action}"
    if result:
        line += f" = {result}"
    return line


def _chunks(lines: Sequence[str], chunk_chars: int) -> list[str]:
    """Pack lines into chunks of at most ``chunk_chars`` (long lines are split)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        pieces = [line[i : i + chunk_chars] for i in range(0, len(line), chunk_chars)] or [""]
        for piece in pieces:
            cost = len(piece) + (1 if current else 0)
            if current and size + cost > chunk_chars:
                chunks.append("\n".join(current))
                current, size = [], 0
                cost = len(piece)
            current.append(piece)
            size += cost
    if current:
        chunks.append("\n".join(current))
    return chunks


class LongTermMemory:
    """What happened long ago, in short: one rolling summary per workflow."""

    def __init__(
        self,
        redis: Any | None,
        blob: BlobStorage | None,
        keyspace: KeySpace,
        workflow_id: str,
        *,
        ttl_seconds: int,
        redactor: Callable[[str], str] | None = None,
    ) -> None:
        """``redis``: a :class:`RedisBackend` (or a ``redis.asyncio`` client) or None;
        ``blob``: durable storage or None; ``ttl_seconds``: expiry of the Redis copy;
        ``redactor``: applied to text before it is stored or sent to a summarizer.
        """
        self.redis = None if redis is None else RedisBackend.adopt(redis)
        self.blob = blob
        self.workflow_id = validate_id(workflow_id, "workflow_id")
        self.key = keyspace.ltm_summary(workflow_id)
        self.blob_path = keyspace.ltm_blob(workflow_id)
        self.meta_path = keyspace.ltm_meta_blob(workflow_id)
        self.ttl_seconds = int(ttl_seconds)
        self.redactor = redactor
        self._repopulate = None if self.redis is None else self.redis.script(_REPOPULATE_LUA)
        self._save = None if self.redis is None else self.redis.script(_SAVE_LUA)
        # Loop-clock time until which the blob is known to hold no summary
        # (see BLOB_ABSENT_SECONDS), and how many blob writes this object began.
        self._blob_absent_until = 0.0
        self._blob_writes = 0

    @property
    def active(self) -> bool:
        """Whether any backend is configured (both absent: every call is a no-op)."""
        return self.redis is not None or self.blob is not None

    # --- writes -----------------------------------------------------------------------

    async def save_summary(self, text: str, *, provenance: Mapping[str, Any] | None = None) -> None:
        """Store ``text`` as the workflow's summary (blob first, then Redis).

        Last writer wins: the save replaces whatever summary is stored, and any
        compaction that started before it is fenced out (it will not overwrite
        it). ``provenance``: optional ``from_id``, ``to_id`` (ledger stream ids),
        ``turns`` (entries covered) and ``summarizer`` (name). Raises
        ``InvalidPayloadError``/``PayloadTooLargeError`` before writing anything on
        bad input, ``BlobError`` if the durable write fails (Redis is then left
        untouched) and ``BackendUnavailableError``/``BackendRejectedError`` if the
        Redis write fails (the blob copy is then current).
        """
        record = self._build_record(text, provenance)
        op = secrets.token_hex(16)
        gen: int | None = None
        if self.blob is not None:
            gen = await self._write_blob_latest(record, op)
        if self.redis is None:
            return
        status = await self._write_redis(record, op, gen=gen)
        if status == "stale" and await self._blob_is_ours(op):
            # Redis is ahead of a blob copy that went back in time (restored or
            # replaced storage): this save is still the newest, so it goes on top.
            await self._write_redis(record, op, gen=None)
        # Otherwise 'stale' means a save after this one in the blob's order
        # already reached Redis: last writer wins, nothing to do.

    async def _blob_is_ours(self, op: str) -> bool:
        """Whether the blob pair still holds the save of ``op`` (nothing newer)."""
        if self.blob is None:
            return False
        raw = await self._blob_bytes(self.meta_path, strict=True)
        meta = self._parse_meta(raw) if raw is not None else None
        return meta is not None and meta.op == op

    async def save_fenced(
        self,
        text: str,
        *,
        provenance: Mapping[str, Any],
        base: SummaryBase,
        lock_key: str,
        token: str,
    ) -> SaveOutcome:
        """Save a summary built on ``base`` only if nothing newer was saved since.

        The compactor's save: the blob copies are written only if they still have
        the versions ``base`` read, and the Redis copy only if ``lock_key`` still
        holds ``token``, no save of a newer generation reached Redis, and
        ``provenance["to_id"]`` is strictly after the stored one. When a condition
        fails nothing more is written and the outcome says why (``fenced: ...``).
        Backend failures raise as for :meth:`save_summary`.
        """
        record = self._build_record(text, provenance)
        op = secrets.token_hex(16)
        gen = base.gen + 1
        if self.blob is not None:
            try:
                await self._write_blob_pair(record, op, gen, base.text_version, base.meta_version)
            except BlobPreconditionFailedError:
                return SaveOutcome(saved=False, reason=_FENCED_REASONS["blob"])
        if self.redis is not None:
            status = await self._write_redis(
                record, op, gen=gen, lock_key=lock_key, token=token, to_id=record.to_id or ""
            )
            if status != "applied":
                return SaveOutcome(saved=False, reason=_FENCED_REASONS[status])
        return SaveOutcome(saved=True, gen=gen)

    async def _write_blob_latest(self, record: SummaryRecord, op: str) -> int:
        """Write the blob pair on top of whatever is there now; returns its generation.

        Conditional on the versions just read, so concurrent saves get distinct,
        ordered generations; a lost race re-reads and tries again.
        """
        redis_gen: int | None = None
        for attempt in range(SAVE_ATTEMPTS):
            if attempt:
                await asyncio.sleep(SAVE_BACKOFF.delay(attempt))
            _, text_v, meta_v, meta = await self._blob_versions()
            blob_gen = meta.gen if meta is not None else 0
            if blob_gen == 0 and redis_gen is None:
                # A blob without a generation (new, damaged or older data): take
                # Redis's so this save orders after what Redis holds.
                redis_gen = await self._redis_gen()
            gen = max(redis_gen or 0, blob_gen) + 1
            try:
                await self._write_blob_pair(record, op, gen, text_v, meta_v)
            except BlobPreconditionFailedError:
                continue
            return gen
        raise BlobPreconditionFailedError(
            f"long-term summary of {self.workflow_id}: {SAVE_ATTEMPTS} concurrent saves "
            "won in a row; nothing of this one was kept"
        )

    async def _redis_gen(self) -> int:
        """Generation of the Redis copy (0 when absent or Redis fails: the blob decides)."""
        if self.redis is None:
            return 0
        try:
            what = f"long-term summary of {self.workflow_id}"
            raw = await self.redis.call("hget", self.key, "gen", what=what)
        except (BackendUnavailableError, BackendRejectedError):
            return 0
        return _gen(raw)

    async def _blob_versions(
        self,
    ) -> tuple[bytes | None, BlobVersion | None, BlobVersion | None, _Meta | None]:
        """Text bytes, text version, meta version and parsed meta (None: absent)."""
        assert self.blob is not None
        data: bytes | None = None
        text_v: BlobVersion | None = None
        meta_v: BlobVersion | None = None
        meta: _Meta | None = None
        try:
            data, text_v = await self.blob.read_versioned(self.blob_path)
        except BlobNotFoundError:
            pass
        try:
            raw, meta_v = await self.blob.read_versioned(self.meta_path)
        except BlobNotFoundError:
            pass
        else:
            meta = self._parse_meta(raw)
        return data, text_v, meta_v, meta

    async def _write_blob_pair(
        self,
        record: SummaryRecord,
        op: str,
        gen: int,
        text_version: BlobVersion | None,
        meta_version: BlobVersion | None,
    ) -> None:
        """Text, then meta, each only if it still has the version read before.

        Raises ``BlobPreconditionFailedError`` when another save changed either.
        A condition failing only because this very write landed and its reply was
        lost (the backend retried it) is recognised and not reported.
        """
        assert self.blob is not None
        # Reads stop believing the blob empty from here on.
        self._blob_writes += 1
        self._blob_absent_until = 0.0
        data = record.text.encode("utf-8")
        meta = _Meta(
            **record.model_dump(exclude={"text"}),
            text_sha256=_sha256(data),
            gen=gen,
            op=op,
        )
        try:
            await self.blob.write(
                self.blob_path, data, if_version=text_version, if_absent=text_version is None
            )
        except BlobPreconditionFailedError:
            if await self._blob_bytes(self.blob_path, strict=True) != data:
                raise
            # The same bytes are there (our retried write, or an identical text):
            # the meta's condition below decides.
        try:
            await self.blob.write(
                self.meta_path,
                meta.model_dump_json().encode("utf-8"),
                if_version=meta_version,
                if_absent=meta_version is None,
            )
        except BlobPreconditionFailedError:
            raw = await self._blob_bytes(self.meta_path, strict=True)
            current = self._parse_meta(raw) if raw is not None else None
            if current is None or current.op != op:
                raise

    async def _write_redis(
        self,
        record: SummaryRecord,
        op: str,
        *,
        gen: int | None,
        lock_key: str | None = None,
        token: str = "",
        to_id: str = "",
    ) -> str:
        """Run the save script; returns its status (``applied``, ``lock``, ``stale``, ``to_id``)."""
        assert self.redis is not None and self._save is not None
        args: list[Any] = [self.ttl_seconds, op, "" if gen is None else gen, token, to_id]
        for name, value in self._redis_fields(record).items():
            args += [name, value]
        # With replicated durability, acknowledged only once WAIT confirmed it.
        reply = await self.redis.run_script(
            self._save,
            [self.key, lock_key or self.key],
            args,
            what=f"long-term summary of {self.workflow_id} (Redis copy not saved; the blob "
            "copy, if configured, is current)",
        )
        return _text(reply[0])

    def _build_record(self, text: object, provenance: Mapping[str, Any] | None) -> SummaryRecord:
        if not isinstance(text, str):
            raise InvalidPayloadError(f"summary must be a string, got {type(text).__name__}")
        if len(text) > MAX_SUMMARY_CHARS:
            raise PayloadTooLargeError(
                f"summary is {len(text)} characters; the limit is {MAX_SUMMARY_CHARS}"
            )
        if self.redactor is not None:
            text = self.redactor(text)
        prov = dict(provenance or {})
        unknown = set(prov) - {"from_id", "to_id", "turns", "summarizer", "updated_at"}
        if unknown:
            raise InvalidPayloadError(f"unknown provenance fields: {sorted(unknown)}")
        try:
            return SummaryRecord(
                text=text,
                from_id=prov.get("from_id"),
                to_id=prov.get("to_id"),
                turns=int(prov.get("turns") or 0),
                updated_at=float(prov.get("updated_at") or time.time()),
                summarizer=prov.get("summarizer"),
            )
        except (ValidationError, TypeError, ValueError) as exc:
            raise InvalidPayloadError(f"invalid summary provenance: {exc}") from None

    @staticmethod
    def _redis_fields(record: SummaryRecord) -> dict[str, str]:
        return {
            "text": record.text,
            "from_id": record.from_id or "",
            "to_id": record.to_id or "",
            "turns": str(record.turns),
            "updated_at": repr(record.updated_at or 0.0),
            "summarizer": record.summarizer or "",
        }

    # --- reads --------------------------------------------------------------------------

    async def load_summary(self) -> str | None:
        """The summary text, or None when there is none (or it is unreadable)."""
        record = await self.load_summary_record()
        return None if record is None else record.text

    async def load_summary_record(self, *, strict: bool = False) -> SummaryRecord | None:
        """The summary with its provenance, or None when there is none.

        Redis first; on a miss the blob, which is then written back to Redis (with
        the TTL, and only if no newer summary appeared meanwhile). A damaged blob
        is logged and treated as absent. ``strict``: raise ``BackendUnavailableError``
        (or ``BackendRejectedError``) when a configured backend fails instead of
        reading past it, so an outage is never mistaken for "no summary yet".
        """
        if self.redis is None:
            return await self._record_after_redis(None, redis_failed=False, strict=strict)
        raw = await self._redis_raw(strict=strict)
        return await self._record_after_redis(raw, redis_failed=raw is None, strict=strict)

    async def _record_after_redis(
        self, raw: Mapping[Any, Any] | None, *, redis_failed: bool, strict: bool
    ) -> SummaryRecord | None:
        """The summary given what Redis answered: its copy, else the blob's (repopulated)."""
        if raw is not None:
            record = self._from_redis(raw)
            if record is not None:
                return record
        if self.blob is None:
            return None
        if not strict and time.monotonic() < self._blob_absent_until:
            # The blob had no summary a moment ago, and a save writes the blob
            # before Redis: while Redis has none either, nothing new can be
            # there unless a save died between its two writes, seen by the
            # end of the bound. Saves made through this object clear it.
            return None
        found = await self._read_blob(strict=strict)
        if found is None:
            return None
        record, meta = found
        if self.redis is not None and self._repopulate is not None and not redis_failed:
            fields = self._redis_fields(record)
            # The generation and op travel with the copy, so fencing still works
            # against a summary that came back from the blob.
            fields.update(gen=str(meta.gen if meta else 0), op=(meta.op if meta else None) or "")
            args: list[Any] = [self.ttl_seconds]
            for name, value in fields.items():
                args += [name, value]
            try:
                await self.redis.run_script(
                    self._repopulate,
                    [self.key],
                    args,
                    what=f"long-term summary of {self.workflow_id}: repopulate",
                    wait=False,  # a copy of the blob: lost, it is rebuilt from there
                )
            except (BackendUnavailableError, BackendRejectedError) as exc:
                log.warning("%s", exc)
        return record

    async def read_base(self) -> SummaryBase:
        """The newest summary and the versions a :meth:`save_fenced` must still find.

        Reads both copies (strictly: a backend failure raises). The copy of the
        higher generation is the base; on a tie Redis (the same save, read faster).
        A blob newer than Redis is a save that reached the blob but not Redis
        (crashed, or fenced after its blob write): building on it loses nothing.
        """
        redis_record: SummaryRecord | None = None
        redis_gen = 0
        if self.redis is not None:
            raw = await self._redis_raw(strict=True)
            redis_record = self._from_redis(raw or {})
            if redis_record is not None:
                redis_gen = _gen(_fields(raw or {}).get("gen"))
        if self.blob is None:
            return SummaryBase(redis_record, redis_gen, None, None)
        try:
            data, text_v, meta_v, meta = await self._blob_versions()
        except BlobError as exc:
            raise BackendUnavailableError(
                f"long-term summary of {self.workflow_id}: blob read failed ({type(exc).__name__})"
            ) from None
        blob_gen = meta.gen if meta is not None else 0
        record = redis_record
        if data is not None and (record is None or blob_gen > redis_gen):
            found = self._record_from_blob(data, meta)
            record = found[0] if found is not None else record
        return SummaryBase(record, max(redis_gen, blob_gen), text_v, meta_v)

    async def _redis_raw(self, *, strict: bool) -> Mapping[Any, Any] | None:
        """The Redis hash (empty when absent); None when Redis failed and not ``strict``."""
        assert self.redis is not None
        try:
            what = f"long-term summary of {self.workflow_id}: read"
            raw: Mapping[Any, Any] = await self.redis.call("hgetall", self.key, what=what)
        except (BackendUnavailableError, BackendRejectedError) as exc:
            if strict:
                raise
            log.warning("%s; trying the blob copy", exc)
            return None
        return raw

    def _from_redis(self, raw: Mapping[Any, Any]) -> SummaryRecord | None:
        if not raw:
            return None
        try:
            fields = _fields(raw)
        except UnicodeDecodeError:
            log.warning("long-term summary of %s: Redis copy is not UTF-8", self.workflow_id)
            return None
        if "text" not in fields:
            return None
        try:
            return SummaryRecord(
                text=fields["text"],
                from_id=fields.get("from_id") or None,
                to_id=fields.get("to_id") or None,
                turns=int(fields.get("turns") or 0),
                updated_at=float(fields["updated_at"]) if fields.get("updated_at") else None,
                summarizer=fields.get("summarizer") or None,
            )
        except (ValueError, ValidationError):
            # Provenance damaged (written by hand?): keep the text, forget the rest.
            log.warning("long-term summary of %s: Redis provenance unreadable", self.workflow_id)
            return SummaryRecord(text=fields["text"])

    async def _blob_bytes(
        self, path: str, *, strict: bool, absent_mark: bool = False
    ) -> bytes | None:
        """A blob's bytes; None when absent or, unless ``strict``, unreadable.

        ``absent_mark``: remember an absent blob for :data:`BLOB_ABSENT_SECONDS`.
        """
        assert self.blob is not None
        saves, started = self._blob_writes, time.monotonic()
        try:
            return await self.blob.read(path)
        except BlobNotFoundError:
            # Not when a save of this object began meanwhile: it may have landed.
            if absent_mark and saves == self._blob_writes:
                self._blob_absent_until = started + BLOB_ABSENT_SECONDS
            return None
        except BlobError as exc:
            if strict:
                raise BackendUnavailableError(
                    f"long-term summary of {self.workflow_id}: blob read failed "
                    f"({type(exc).__name__})"
                ) from None
            log.warning(
                "long-term summary of %s: blob %s read failed (%s)",
                self.workflow_id,
                path,
                type(exc).__name__,
            )
            return None

    async def _read_blob(self, *, strict: bool) -> tuple[SummaryRecord, _Meta | None] | None:
        """The blob copy and its meta (None when the meta is absent or damaged)."""
        data = await self._blob_bytes(self.blob_path, strict=strict, absent_mark=True)
        if data is None:
            return None
        raw = await self._blob_bytes(self.meta_path, strict=strict)
        meta = self._parse_meta(raw) if raw is not None else None
        return self._record_from_blob(data, meta)

    def _record_from_blob(
        self, data: bytes, meta: _Meta | None
    ) -> tuple[SummaryRecord, _Meta | None] | None:
        """The summary in blob ``data`` with provenance from ``meta`` if it matches."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            log.warning(
                "long-term summary of %s: blob %s is not UTF-8; ignoring it",
                self.workflow_id,
                self.blob_path,
            )
            return None
        if meta is None:
            return SummaryRecord(text=text), None
        if meta.text_sha256 is not None and meta.text_sha256 != _sha256(data):
            log.warning(
                "long-term summary of %s: provenance does not match the text "
                "(interrupted save?); treating it as unknown",
                self.workflow_id,
            )
            # The generation still counts: it orders this copy against Redis.
            return SummaryRecord(text=text), meta
        provenance = meta.model_dump(exclude={"text_sha256", "gen", "op"})
        return SummaryRecord(text=text, **provenance), meta

    def _parse_meta(self, raw: bytes) -> _Meta | None:
        try:
            return _Meta.model_validate_json(raw)
        except ValidationError:
            log.warning(
                "long-term summary of %s: provenance blob %s is not valid; ignoring it",
                self.workflow_id,
                self.meta_path,
            )
            return None

    # --- compression -----------------------------------------------------------------------

    async def compress(
        self,
        entries: Sequence[Mapping[str, Any]],
        llm: Summarizer | Any,
        max_tokens: int | None = None,
        *,
        previous: str | None = None,
        chunk_chars: int = COMPACTION_CHUNK_CHARS,
        max_chars: int = SUMMARY_MAX_CHARS,
    ) -> str:
        """Summarize ledger ``entries`` on top of ``previous`` with ``llm``.

        ``llm`` is a :class:`~jarvismem.backends.llm.Summarizer`, or an LLM client
        of JarvisCore's shape, ``async generate(prompt=, temperature=, max_tokens=)
        -> {"content": str, "tokens": {...}}`` (told apart by duck typing, see
        :func:`~jarvismem.backends.llm.as_summarizer`; anything else raises
        ``InvalidPayloadError``). ``max_tokens``, JarvisCore's output limit, bounds
        the summary to ``4 * max_tokens`` characters and, for a ``generate()``
        client, the ``max_tokens`` of every call.

        Entries are rendered one per line (:func:`render_entry`) and redacted. A
        summarizer with a context window (``bounded_input``, every LLM) never gets
        more than ``chunk_chars`` of new text plus the previous summary (itself cut
        to ``chunk_chars``) per call: larger input is map-reduced, each chunk
        summarized alone, then the partial summaries summarized again until they
        fit. The extractive summarizer (no window) gets the whole text in one call;
        with its worker process and a redactor the worker can rebuild, the
        redaction and the summary both run there, in one round trip. Returns at
        most ``max_chars`` characters. ``LLMError`` from the summarizer propagates
        (the caller keeps its old summary).
        """
        if chunk_chars < 100:
            raise InvalidPayloadError("chunk_chars must be >= 100")
        if max_chars < 1:
            raise InvalidPayloadError("max_chars must be >= 1")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise InvalidPayloadError(f"max_tokens must be a positive int, got {max_tokens!r}")
        llm = as_summarizer(llm, max_tokens=max_tokens)
        if max_tokens is not None:
            # ~4 characters per token: the summary JarvisCore's limit allows.
            max_chars = min(max_chars, 4 * max_tokens)
        if previous is not None:
            previous = truncate(previous, chunk_chars)
        if not entries:
            return truncate(previous or "", max_chars)
        bounded = getattr(llm, "bounded_input", True)
        worker = getattr(llm, "worker", None)
        names = getattr(self.redactor, "names", None)
        if (
            not bounded
            and isinstance(worker, SummaryWorker)
            and isinstance(names, tuple)
            and worker.available()
        ):
            lines = await self._render(entries, redact=False)
            try:
                summary = await worker.run(worker.summarize, lines, previous, max_chars, names)
                return truncate(summary, max_chars)
            except WorkerUnavailable as exc:
                # Nothing is lost: the same redaction and summary are computed here.
                log.warning("summary worker unavailable, compacting in-process: %s", exc)
        lines = await self._render(entries)
        text = await self._reduce(lines, llm, chunk_chars) if bounded else "\n".join(lines)
        summary = await llm.summarize(text, previous_summary=previous, max_chars=max_chars)
        return truncate(summary, max_chars)

    async def _render(
        self, entries: Sequence[Mapping[str, Any]], *, redact: bool = True
    ) -> list[str]:
        """The entries as lines, one per entry (redacted with ``redact``).

        Each line is redacted alone: a pattern that runs to the end of its text
        (a private key whose END line was truncated away) must not swallow the
        turns after it. The summary worker redacts the same lines with the same
        redactor, so both give the same lines. The work yields to the event loop
        whenever a slice of it took :data:`RENDER_SLICE_SECONDS`: a page of a
        thousand turns never holds up the kernel's tasks.
        """
        redactor = self.redactor if redact else None
        lines: list[str] = []
        await asyncio.sleep(0)  # a fresh turn of the loop: see the summarizer's slices
        slice_end = time.perf_counter() + RENDER_SLICE_SECONDS
        for start in range(0, len(entries), _RENDER_BATCH):
            batch = [render_entry(e) for e in entries[start : start + _RENDER_BATCH]]
            lines += batch if redactor is None else map(redactor, batch)
            if time.perf_counter() >= slice_end:
                await asyncio.sleep(0)
                slice_end = time.perf_counter() + RENDER_SLICE_SECONDS
        return lines

    async def _reduce(self, lines: list[str], llm: Summarizer, chunk_chars: int) -> str:
        """Map-reduce ``lines`` until they fit in one chunk; returns that text."""
        # Each partial gets a quarter of a chunk, so every level shrinks the text
        # at least about fourfold and the loop ends; the depth cap is a backstop.
        partial_chars = max(50, chunk_chars // 4)
        for _ in range(MAX_REDUCE_DEPTH):
            chunks = _chunks(lines, chunk_chars)
            if len(chunks) <= 1:
                return chunks[0] if chunks else ""
            partials = []
            for chunk in chunks:
                part = await llm.summarize(chunk, max_chars=partial_chars)
                partials.append(" ".join(truncate(part, partial_chars).split()))
            lines = partials
        return truncate("\n".join(lines), chunk_chars)


__all__ = [
    "LongTermMemory",
    "SaveOutcome",
    "SummaryBase",
    "SummaryProvenance",
    "SummaryRecord",
    "render_entry",
]
