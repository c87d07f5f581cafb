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
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from redis.exceptions import RedisError

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.backends.llm import Summarizer, truncate
from jarvismem.errors import (
    BackendUnavailableError,
    BlobError,
    BlobNotFoundError,
    InvalidPayloadError,
    PayloadTooLargeError,
)
from jarvismem.keys import KeySpace, validate_id

log = logging.getLogger(__name__)

MAX_SUMMARY_CHARS = 1_000_000
"""A summary longer than this is refused by :meth:`LongTermMemory.save_summary`."""

DEFAULT_SUMMARY_CHARS = 4000
"""Length bound of a summary produced by :meth:`LongTermMemory.compress`."""

MAX_REDUCE_DEPTH = 8

# Write the cached copy back only if nobody wrote a (newer) summary meanwhile.
# KEYS: summary hash. ARGV: ttl seconds, then field/value pairs.
_REPOPULATE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""


class SummaryRecord(BaseModel):
    """A summary and its provenance.

    ``from_id``/``to_id``: first and last ledger stream ids the summary covers
    (None when unknown); ``turns``: how many ledger entries went into it;
    ``updated_at``: epoch seconds of the save; ``summarizer``: which made it.
    """

    model_config = ConfigDict(frozen=True)

    text: str
    from_id: str | None = None
    to_id: str | None = None
    turns: int = 0
    updated_at: float | None = None
    summarizer: str | None = None


class _Meta(BaseModel):
    """Shape of the provenance blob (validated on read)."""

    model_config = ConfigDict(extra="ignore")

    from_id: str | None = None
    to_id: str | None = None
    turns: int = 0
    updated_at: float | None = None
    summarizer: str | None = None
    text_sha256: str | None = None


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


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
        """``redis``: a ``redis.asyncio`` client or None; ``blob``: durable storage or
        None; ``ttl_seconds``: expiry of the Redis copy; ``redactor``: applied to
        text before it is stored or sent to a summarizer.
        """
        self.redis = redis
        self.blob = blob
        self.workflow_id = validate_id(workflow_id, "workflow_id")
        self.key = keyspace.ltm_summary(workflow_id)
        self.blob_path = keyspace.ltm_blob(workflow_id)
        self.meta_path = keyspace.ltm_meta_blob(workflow_id)
        self.ttl_seconds = int(ttl_seconds)
        self.redactor = redactor
        self._repopulate = redis.register_script(_REPOPULATE_LUA) if redis is not None else None

    @property
    def active(self) -> bool:
        """Whether any backend is configured (both absent: every call is a no-op)."""
        return self.redis is not None or self.blob is not None

    # --- writes -----------------------------------------------------------------------

    async def save_summary(self, text: str, *, provenance: Mapping[str, Any] | None = None) -> None:
        """Store ``text`` as the workflow's summary (blob first, then Redis).

        ``provenance``: optional ``from_id``, ``to_id`` (ledger stream ids),
        ``turns`` (entries covered) and ``summarizer`` (name). Raises
        ``InvalidPayloadError``/``PayloadTooLargeError`` before writing anything on
        bad input, ``BlobError`` if the durable write fails (Redis is then left
        untouched) and ``BackendUnavailableError`` if the Redis write fails.
        """
        record = self._build_record(text, provenance)
        if self.blob is not None:
            meta = _Meta(
                **record.model_dump(exclude={"text"}),
                text_sha256=hashlib.sha256(record.text.encode("utf-8")).hexdigest(),
            )
            await self.blob.write(self.blob_path, record.text.encode("utf-8"))
            await self.blob.write(self.meta_path, meta.model_dump_json().encode("utf-8"))
        if self.redis is not None:
            try:
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.hset(self.key, mapping=self._redis_fields(record))
                    pipe.expire(self.key, self.ttl_seconds)
                    await pipe.execute()
            except (RedisError, OSError) as exc:
                raise BackendUnavailableError(
                    f"long-term summary of {self.workflow_id} not cached in Redis "
                    f"({type(exc).__name__}); the blob copy is current"
                ) from None

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
        when a configured backend fails instead of reading past it (the compactor
        uses this so an outage is never mistaken for "no summary yet").
        """
        redis_failed = False
        if self.redis is not None:
            try:
                raw = await self.redis.hgetall(self.key)
            except (RedisError, OSError) as exc:
                if strict:
                    raise BackendUnavailableError(
                        f"long-term summary of {self.workflow_id}: Redis failed "
                        f"({type(exc).__name__})"
                    ) from None
                log.warning(
                    "long-term summary of %s: Redis read failed (%s); trying the blob copy",
                    self.workflow_id,
                    type(exc).__name__,
                )
                redis_failed = True
            else:
                record = self._from_redis(raw)
                if record is not None:
                    return record
        if self.blob is None:
            return None
        record = await self._read_blob(strict=strict)
        if record is not None and self._repopulate is not None and not redis_failed:
            try:
                fields = self._redis_fields(record)
                args: list[Any] = [self.ttl_seconds]
                for name, value in fields.items():
                    args += [name, value]
                await self._repopulate(keys=[self.key], args=args)
            except (RedisError, OSError) as exc:
                log.warning(
                    "long-term summary of %s: could not repopulate Redis (%s)",
                    self.workflow_id,
                    type(exc).__name__,
                )
        return record

    def _from_redis(self, raw: Mapping[Any, Any]) -> SummaryRecord | None:
        if not raw:
            return None
        try:
            fields = {_text(k): _text(v) for k, v in raw.items()}
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

    async def _blob_bytes(self, path: str, *, strict: bool) -> bytes | None:
        """A blob's bytes; None when absent or, unless ``strict``, unreadable."""
        assert self.blob is not None
        try:
            return await self.blob.read(path)
        except BlobNotFoundError:
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

    async def _read_blob(self, *, strict: bool) -> SummaryRecord | None:
        data = await self._blob_bytes(self.blob_path, strict=strict)
        if data is None:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            log.warning(
                "long-term summary of %s: blob %s is not UTF-8; ignoring it",
                self.workflow_id,
                self.blob_path,
            )
            return None
        meta = await self._read_meta(text, strict=strict)
        if meta is None:
            return SummaryRecord(text=text)
        return SummaryRecord(text=text, **meta.model_dump(exclude={"text_sha256"}))

    async def _read_meta(self, text: str, *, strict: bool) -> _Meta | None:
        raw = await self._blob_bytes(self.meta_path, strict=strict)
        if raw is None:
            return None
        try:
            meta = _Meta.model_validate_json(raw)
        except ValidationError:
            log.warning(
                "long-term summary of %s: provenance blob %s is not valid; ignoring it",
                self.workflow_id,
                self.meta_path,
            )
            return None
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if meta.text_sha256 is not None and meta.text_sha256 != digest:
            log.warning(
                "long-term summary of %s: provenance does not match the text "
                "(interrupted save?); treating it as unknown",
                self.workflow_id,
            )
            return None
        return meta

    # --- compression -----------------------------------------------------------------------

    async def compress(
        self,
        entries: Sequence[Mapping[str, Any]],
        llm: Summarizer,
        *,
        previous: str | None = None,
        chunk_chars: int = 12_000,
        max_chars: int = DEFAULT_SUMMARY_CHARS,
    ) -> str:
        """Summarize ledger ``entries`` on top of ``previous`` with ``llm``.

        Entries are rendered one per line (:func:`render_entry`) and redacted. No
        summarizer call ever gets more than ``chunk_chars`` of new text plus the
        previous summary (itself cut to ``chunk_chars``): larger input is
        map-reduced, each chunk summarized alone, then the partial summaries
        summarized again until they fit. Returns at most ``max_chars`` characters.
        ``LLMError`` from the summarizer propagates (the caller keeps its old summary).
        """
        if chunk_chars < 100:
            raise InvalidPayloadError("chunk_chars must be >= 100")
        if max_chars < 1:
            raise InvalidPayloadError("max_chars must be >= 1")
        lines = [render_entry(entry) for entry in entries]
        text = "\n".join(lines)
        if self.redactor is not None:
            text = self.redactor(text)
            lines = text.split("\n")
        if previous is not None:
            previous = truncate(previous, chunk_chars)
        if not text.strip():
            return truncate(previous or "", max_chars)
        text = await self._reduce(lines, llm, chunk_chars)
        summary = await llm.summarize(text, previous_summary=previous, max_chars=max_chars)
        return truncate(summary, max_chars)

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


__all__ = ["DEFAULT_SUMMARY_CHARS", "LongTermMemory", "SummaryRecord", "render_entry"]
