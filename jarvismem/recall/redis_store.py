"""Recall entries in Redis with a BM25 inverted index: the embedded default store.

Per scope, an entries hash and a postings hash share one hash tag (one Cluster slot),
so one Lua script updates both; postings are packed and chunked so a write stays cheap
however large the scope, and a recall takes three round trips. A scope whose index
signature (``__v__``) differs from this store's is rebuilt from its entries before it is
read or written, never mixed. The format: docs/architecture.md, "Recall index format".
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping
from typing import Any

from jarvismem.backends.redis import RedisBackend
from jarvismem.backends.redis_connect import RedisClient
from jarvismem.defaults import RECALL_INDEXED_METADATA, RECALL_NAMESPACE
from jarvismem.errors import InvalidPayloadError, RecallError
from jarvismem.keys import KeySpace, validate_id
from jarvismem.recall.bm25 import (
    INDEX_VERSION,
    TF_CAP,
    pack,
    score_documents,
    term_frequencies,
    tokenize,
)
from jarvismem.recall.models import MemoryEntry, RecallRequest, RecallResult, WriteRequest
from jarvismem.recall.stores import (
    by_age,
    check_indexed_metadata,
    entry_from_write,
    entry_tokens,
    newest,
    passes,
    rank,
)

RECENT_KEPT = 256
"""How many entry ids the ``__recent__`` field keeps, newest first."""

LAYOUT = "chunked3"
"""The postings layout of this module; part of the index signature."""

CHUNK_BYTES = 8192
"""A posting chunk takes no more postings once it is this long (about 180 postings):
the most a write copies per token."""

_STALE = -1
_REBUILD_ATTEMPTS = 5
_FILTER_BATCH = 64

# KEYS[1] entries hash, KEYS[2] postings hash
# ARGV[1] "put" | "del"; ARGV[2] entry id; ARGV[3] entry JSON;
# ARGV[4] "token tf code token tf code ..." (code: bm25.pack(tf, length));
# ARGV[5] entry length; ARGV[6] TTL ms ("0" = none);
# ARGV[7] how many ids __recent__ keeps; ARGV[8] the index signature;
# ARGV[9] the size at which a posting chunk is full, bytes
# Returns 1 if the entry existed before, 0 if not, -1 (nothing done) when the
# scope's index was made with another signature and must be rebuilt first.
_INDEX_SCRIPT = """
local entries, postings, op, id = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local version = redis.call('HGET', postings, '__v__')
if version ~= ARGV[8] then
  if version or redis.call('EXISTS', entries) == 1 then return -1 end
  if op == 'del' then return 0 end
  redis.call('DEL', postings)
  redis.call('HSET', postings, '__v__', ARGV[8])
end
local existed = redis.call('HEXISTS', entries, id)
-- The recency list without this id; a put puts it first below.
local recent = {}
local raw_recent = redis.call('HGET', postings, '__recent__')
if raw_recent then
  for rid in string.gmatch(raw_recent, '%S+') do
    if rid ~= id then table.insert(recent, rid) end
  end
end
local function save_recent()
  while #recent > tonumber(ARGV[7]) do table.remove(recent) end
  if #recent > 0 then
    redis.call('HSET', postings, '__recent__', table.concat(recent, ' '))
  else
    redis.call('HDEL', postings, '__recent__')
  end
end
local old = redis.call('HGET', postings, '__tk__:' .. id)
if old then
  local needle = ' ' .. id .. ' '
  -- __tk__ names each token with the chunk holding this entry's posting.
  for tok, n in string.gmatch(old, '(%S+) (%d+)') do
    local field = tok .. '#' .. n
    local raw = redis.call('HGET', postings, field)
    if raw then
      local first = string.find(raw, needle, 1, true)
      if first then
        local _, last = string.find(raw, '^ %S+ %+%d+', first)
        raw = string.sub(raw, 1, first - 1) .. string.sub(raw, last + 1)
        if raw == '' then
          redis.call('HDEL', postings, field)
        else
          redis.call('HSET', postings, field, raw)
        end
      end
    end
    local head = redis.call('HGET', postings, tok)
    if head then
      local bound, chunks, df = string.match(head, '(%d+) (%d+) (%d+)')
      if tonumber(df) <= 1 then
        redis.call('HDEL', postings, tok)
      else
        redis.call('HSET', postings, tok, bound .. ' ' .. chunks .. ' ' .. (tonumber(df) - 1))
      end
    end
  end
  local dl = tonumber(redis.call('HGET', postings, '__dl__:' .. id) or '0')
  redis.call('HINCRBY', postings, '__n__', -1)
  redis.call('HINCRBY', postings, '__sum__', -dl)
  redis.call('HDEL', postings, '__tk__:' .. id, '__dl__:' .. id)
end
if op == 'del' then
  redis.call('HDEL', entries, id)
  save_recent()
  return existed
end
table.insert(recent, 1, id)
save_recent()
local tokens = {}
local chunk_bytes = tonumber(ARGV[9])
for tok, tf, code in string.gmatch(ARGV[4], '(%S+) (%d+) (%d+)') do
  local bound, chunks, df = 0, 1, 0
  local head = redis.call('HGET', postings, tok)
  if head then
    local b, c, d = string.match(head, '(%d+) (%d+) (%d+)')
    bound, chunks, df = tonumber(b), tonumber(c), tonumber(d)
  end
  -- Append to the last chunk; a full one starts the next, so a write copies at
  -- most one chunk per token however common the token is.
  local raw = redis.call('HGET', postings, tok .. '#' .. chunks) or ''
  if #raw >= chunk_bytes then
    chunks = chunks + 1
    raw = ''
  end
  redis.call('HSET', postings,
    tok .. '#' .. chunks, raw .. ' ' .. id .. ' +' .. code,
    tok, math.max(bound, tonumber(tf)) .. ' ' .. chunks .. ' ' .. (df + 1))
  table.insert(tokens, tok .. ' ' .. chunks)
end
redis.call('HSET', postings, '__tk__:' .. id, table.concat(tokens, ' '), '__dl__:' .. id, ARGV[5])
redis.call('HINCRBY', postings, '__n__', 1)
redis.call('HINCRBY', postings, '__sum__', tonumber(ARGV[5]))
redis.call('HSET', entries, id, ARGV[3])
if ARGV[6] ~= '0' then
  redis.call('PEXPIRE', entries, ARGV[6])
  redis.call('PEXPIRE', postings, ARGV[6])
end
return existed
"""

# KEYS[1] entries hash, KEYS[2] postings hash
# ARGV[1] the index signature; ARGV[2] m; ARGV[3 .. 2 + 2m] the entries the index
# was built from (id, JSON); then field, value pairs of the whole postings hash.
# Returns 2 when the index already has the signature (someone else rebuilt it),
# 0 when the entries are not those given (they changed meanwhile: read again),
# 1 when the index was replaced.
_REBUILD_SCRIPT = """
local entries, postings = KEYS[1], KEYS[2]
if redis.call('HGET', postings, '__v__') == ARGV[1] then return 2 end
local m = tonumber(ARGV[2])
local seen = {}
for i = 3, 2 + 2 * m, 2 do seen[ARGV[i]] = ARGV[i + 1] end
local stored = redis.call('HGETALL', entries)
if #stored ~= 2 * m then return 0 end
for i = 1, #stored, 2 do
  if seen[stored[i]] ~= stored[i + 1] then return 0 end
end
redis.call('DEL', postings)
local first = 3 + 2 * m
local chunk = 1000
for i = first, #ARGV, chunk do
  redis.call('HSET', postings, unpack(ARGV, i, math.min(i + chunk - 1, #ARGV)))
end
local ttl = redis.call('PTTL', entries)
if ttl > 0 then redis.call('PEXPIRE', postings, ttl) end
return 1
"""


class _Postings:
    """Postings read for one query: token -> {entry id: packed code}, and tf bounds."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, str]] = {}
        self.tf_max: dict[str, int] = {}


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


def index_signature(indexed_metadata: Iterable[str]) -> str:
    """What an index must have been built with to be read as is."""
    return f"{INDEX_VERSION}/{LAYOUT}/{json.dumps(sorted(indexed_metadata))}"


def build_index(entries: Iterable[MemoryEntry], indexed_metadata: Iterable[str]) -> dict[str, str]:
    """Every field of a scope's postings hash for ``entries`` (the rebuild's payload)."""
    keys = check_indexed_metadata(indexed_metadata)
    chunks: dict[str, list[str]] = {}  # token -> its chunks, the last one open
    tf_max: dict[str, int] = {}
    df: dict[str, int] = {}
    fields: dict[str, str] = {}
    total = 0
    # Oldest first, the order in which writes append to a posting.
    ordered = sorted(entries, key=lambda e: (e.updated_at, e.id))
    for entry in ordered:
        tfs, length = term_frequencies(entry_tokens(entry, keys))
        total += length
        where = []
        for token, tf in tfs.items():
            posting = f" {entry.id} +{pack(tf, length)}"
            open_chunks = chunks.setdefault(token, [""])
            if len(open_chunks[-1]) >= CHUNK_BYTES:
                open_chunks.append("")
            open_chunks[-1] += posting
            where.append(f"{token} {len(open_chunks)}")
            tf_max[token] = max(tf_max.get(token, 0), min(tf, TF_CAP))
            df[token] = df.get(token, 0) + 1
        fields[f"__tk__:{entry.id}"] = " ".join(where)
        fields[f"__dl__:{entry.id}"] = str(length)
    for token, parts in chunks.items():
        fields[token] = f"{tf_max[token]} {len(parts)} {df[token]}"
        for n, part in enumerate(parts, start=1):
            fields[f"{token}#{n}"] = part
    fields["__v__"] = index_signature(keys)
    fields["__n__"] = str(len(ordered))
    fields["__sum__"] = str(total)
    if ordered:
        newest_first = sorted(ordered, key=lambda e: (-e.updated_at, e.id))
        fields["__recent__"] = " ".join(e.id for e in newest_first[:RECENT_KEPT])
    return fields


class RedisRecallStore:
    """Recall store on a ``redis.asyncio`` client (plain, cluster or fakeredis).

    ``keyspace``: the tenant's key maker. ``ttl_seconds``: expiry of a scope's
    keys, refreshed on every write (``None`` = keep forever).
    ``indexed_metadata``: metadata keys whose values are searchable like content
    (changing them rebuilds each scope's index when it is next used).
    ``timeout``: deadline of a read (:meth:`recall`, :meth:`list_entries`), in
    seconds; the engine gives it ``TIER_TIMEOUT_EPISODIC``, as to the ledger's reads,
    so a stalled Redis fails a recall as it fails them (``None``: no deadline).
    Writes have none: one cut short could still apply. Redis failures, and a read
    past its deadline, raise :class:`~jarvismem.errors.BackendUnavailableError` or
    :class:`~jarvismem.errors.BackendRejectedError`, never redis-py's errors.
    """

    def __init__(
        self,
        redis: RedisClient | RedisBackend,
        keyspace: KeySpace,
        ttl_seconds: int | None = None,
        *,
        indexed_metadata: Iterable[str] = RECALL_INDEXED_METADATA,
        timeout: float | None = None,
    ) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise InvalidPayloadError("ttl_seconds must be positive or None")
        if timeout is not None and not timeout > 0:
            raise InvalidPayloadError("timeout must be positive or None")
        self._timeout = timeout
        self._backend = RedisBackend.adopt(redis)
        self._redis = self._backend.client
        self._keyspace = keyspace
        self._ttl_ms = "0" if ttl_seconds is None else str(int(ttl_seconds) * 1000)
        self._indexed_metadata = check_indexed_metadata(indexed_metadata)
        self._signature = index_signature(self._indexed_metadata)
        self._script = self._redis.register_script(_INDEX_SCRIPT)
        self._rebuild_script = self._redis.register_script(_REBUILD_SCRIPT)

    def keys(self, namespace: str, agent_id: str, session_id: str | None) -> tuple[str, str]:
        """``(entries key, postings key)`` of one scope."""
        scope = KeySpace.recall_scope(namespace, agent_id, session_id)
        return self._keyspace.recall_entries(scope), self._keyspace.recall_postings(scope)

    # --- writing ----------------------------------------------------------------------------

    async def write(self, request: WriteRequest) -> MemoryEntry:
        """Store or upsert an entry and re-index it atomically; returns it."""
        async with self._backend.guard("recall write"):
            return await self._write(request)

    async def _write(self, request: WriteRequest) -> MemoryEntry:
        entries_key, postings_key = self.keys(
            request.namespace, request.agent_id, request.session_id
        )
        for _ in range(_REBUILD_ATTEMPTS):
            previous = None
            if request.id is not None:
                raw = await self._redis.hget(entries_key, request.id)
                if raw is not None:
                    previous = MemoryEntry.model_validate_json(raw)
            entry = entry_from_write(request, previous)
            tfs, length = term_frequencies(entry_tokens(entry, self._indexed_metadata))
            # With replicated durability, acknowledged only once WAIT confirmed it.
            done = await self._backend.run_script(
                self._script,
                [entries_key, postings_key],
                [
                    "put",
                    entry.id,
                    entry.model_dump_json(),
                    " ".join(
                        f"{token} {min(tf, TF_CAP)} {pack(tf, length)}" for token, tf in tfs.items()
                    ),
                    length,
                    self._ttl_ms,
                    RECENT_KEPT,
                    self._signature,
                    CHUNK_BYTES,
                ],
                what="recall write",
            )
            if int(done) != _STALE:
                return entry
            await self._rebuild(entries_key, postings_key)
        raise RecallError("the recall index kept changing while it was being rebuilt")

    async def delete(
        self,
        entry_id: str,
        *,
        agent_id: str,
        session_id: str | None = None,
        namespace: str = RECALL_NAMESPACE,
    ) -> bool:
        """Forget one entry and take it out of the index; returns whether it existed."""
        validate_id(entry_id, "entry id")
        entries_key, postings_key = self.keys(namespace, agent_id, session_id)
        async with self._backend.guard("recall delete"):
            for _ in range(_REBUILD_ATTEMPTS):
                existed = await self._backend.run_script(
                    self._script,
                    [entries_key, postings_key],
                    [
                        "del",
                        entry_id,
                        "",
                        "",
                        0,
                        self._ttl_ms,
                        RECENT_KEPT,
                        self._signature,
                        CHUNK_BYTES,
                    ],
                    what="recall delete",
                )
                if int(existed) != _STALE:
                    return bool(int(existed))
                await self._rebuild(entries_key, postings_key)
        raise RecallError("the recall index kept changing while it was being rebuilt")

    # --- index upgrades ---------------------------------------------------------------------

    async def reindex(
        self, agent_id: str, session_id: str | None = None, namespace: str = RECALL_NAMESPACE
    ) -> int:
        """Rebuild one scope's index from its entries, whatever its signature; returns
        how many entries it holds. Recall and write do this on their own when they meet
        an index of another version; this is for doing it ahead of time."""
        entries_key, postings_key = self.keys(namespace, agent_id, session_id)
        async with self._backend.guard("recall reindex"):
            return await self._rebuild(entries_key, postings_key, force=True)

    async def _rebuild(self, entries_key: str, postings_key: str, *, force: bool = False) -> int:
        """Replace the scope's index with one built here from its entries.

        Safe against concurrent writers: the script replaces the index only if the
        entries are exactly those it was built from, and leaves alone an index that
        another process already rebuilt to this signature.
        """
        signature = "" if force else self._signature
        for _ in range(_REBUILD_ATTEMPTS):
            raw: dict[Any, Any] = await self._redis.hgetall(entries_key)
            pairs = [(_text(k), _text(v)) for k, v in raw.items()]
            entries = [MemoryEntry.model_validate_json(v) for _, v in pairs]
            fields = build_index(entries, self._indexed_metadata)
            args: list[str | int] = [signature, len(pairs)]
            for key, value in pairs:
                args += [key, value]
            for key, value in fields.items():
                args += [key, value]
            # Not waited for replicas (REDIS_DURABILITY=replicated): the index is derived
            # from the entries, and one lost in a failover has the old signature, so it is
            # rebuilt again when next met; a wait here would fail recalls while a replica is away.
            done = int(await self._rebuild_script(keys=[entries_key, postings_key], args=args))
            if done in (1, 2):
                return len(pairs)
        raise RecallError("the recall index kept changing while it was being rebuilt")

    # --- recall -----------------------------------------------------------------------------

    async def recall(self, request: RecallRequest) -> list[RecallResult]:
        """BM25 over the scope's index, recency breaking ties, then the recency fill."""
        async with self._backend.guard("recall", self._timeout):
            return await self._recall(request)

    async def _recall(self, request: RecallRequest) -> list[RecallResult]:
        tokens = list(dict.fromkeys(tokenize(request.query)))
        entries_key, postings_key = self.keys(
            request.namespace, request.agent_id, request.session_id
        )
        for _ in range(_REBUILD_ATTEMPTS):
            raw = await self._redis.hmget(postings_key, [*tokens, "__n__", "__sum__", "__v__"])
            *raw_heads, raw_n, raw_sum, raw_version = raw
            if raw_version is not None and _text(raw_version) == self._signature:
                break
            if raw_version is None and not await self._redis.exists(entries_key):
                return []  # an empty scope
            await self._rebuild(entries_key, postings_key)
        else:
            raise RecallError("the recall index kept changing while it was being rebuilt")
        doc_count = int(raw_n or 0)
        if doc_count <= 0:
            return []
        postings = await self._postings(postings_key, tokens, raw_heads)
        wanted = request.filter
        scores = score_documents(
            tokens,
            postings.docs,
            doc_count,
            int(raw_sum or 0) / doc_count,
            # Pruning needs every scored document to be a candidate: not with a filter.
            top=None if wanted else request.limit,
            tf_max=postings.tf_max,
        )
        matched = {i: s for i, s in scores.items() if s >= request.min_score}
        if wanted:
            results = await self._filtered_matches(entries_key, matched, request)
        else:
            results = await self._top_matches(entries_key, matched, request.limit)
        if len(results) < request.limit and request.min_score <= 0:
            results += await self._fill(
                entries_key, postings_key, scores, request.limit - len(results), wanted, doc_count
            )
        return results

    async def _postings(
        self, postings_key: str, tokens: list[str], raw_heads: list[Any]
    ) -> _Postings:
        """The postings of the query's tokens: every chunk named by their heads, in
        one HMGET. Codes stay strings: score_documents converts only those it reads."""
        found = _Postings()
        fields: list[str] = []
        counts: list[tuple[str, int]] = []
        for token, head in zip(tokens, raw_heads, strict=True):
            if head is None:
                continue
            bound, last, _ = _text(head).split()
            found.tf_max[token] = int(bound)
            fields += [f"{token}#{n}" for n in range(1, int(last) + 1)]
            counts.append((token, int(last)))
        if not fields:
            return found
        raw = await self._redis.hmget(postings_key, fields)
        start = 0
        for token, chunks in counts:
            # One decode of the joined bytes (a client may also answer in str).
            texts = [
                c if isinstance(c, bytes) else c.encode()
                for c in raw[start : start + chunks]
                if c is not None
            ]
            start += chunks
            parts = b"".join(texts).decode().split()
            if parts:
                found.docs[token] = dict(zip(parts[0::2], parts[1::2], strict=True))
        return found

    async def _entries(self, entries_key: str, ids: list[str]) -> dict[str, MemoryEntry]:
        if not ids:
            return {}
        raw = await self._redis.hmget(entries_key, ids)
        return {
            i: MemoryEntry.model_validate_json(v)
            for i, v in zip(ids, raw, strict=True)
            if v is not None
        }

    async def _top_matches(
        self, entries_key: str, scores: Mapping[str, float], limit: int
    ) -> list[RecallResult]:
        if not scores:
            return []
        # The top `limit` plus anything tied with the last of them, so that the
        # recency tie-break sees every tied entry.
        cut = heapq.nlargest(limit, scores.values())[-1]
        found = await self._entries(entries_key, [i for i, s in scores.items() if s >= cut])
        return rank(scores, found, limit)

    async def _filtered_matches(
        self, entries_key: str, scores: Mapping[str, float], request: RecallRequest
    ) -> list[RecallResult]:
        """Matches passing the filter: entries read in score order until ``limit`` pass
        and the next score is below the last passing one (ties all seen)."""
        ordered = sorted(scores, key=lambda i: -scores[i])
        kept: dict[str, MemoryEntry] = {}
        for start in range(0, len(ordered), _FILTER_BATCH):
            if len(kept) >= request.limit:
                last = sorted((scores[i] for i in kept), reverse=True)[request.limit - 1]
                if scores[ordered[start]] < last:
                    break
            batch = await self._entries(entries_key, ordered[start : start + _FILTER_BATCH])
            kept.update((i, e) for i, e in batch.items() if passes(e, request.filter))
        return rank(scores, kept, request.limit)

    async def _fill(
        self,
        entries_key: str,
        postings_key: str,
        matched: Mapping[str, float],
        wanted: int,
        filter_: Mapping[str, str] | None,
        doc_count: int,
    ) -> list[RecallResult]:
        """The recency fill: the ``wanted`` newest entries that match nothing."""
        raw_recent = await self._redis.hget(postings_key, "__recent__")
        recent = [] if raw_recent is None else _text(raw_recent).split()
        fill: list[MemoryEntry] = []
        candidates = [i for i in recent if i not in matched]
        for start in range(0, len(candidates), max(wanted, _FILTER_BATCH)):
            batch = candidates[start : start + max(wanted, _FILTER_BATCH)]
            found = await self._entries(entries_key, batch)
            fill += [found[i] for i in batch if i in found and passes(found[i], filter_)]
            if len(fill) >= wanted:
                return newest(fill, wanted)
        if len(recent) >= doc_count:
            return newest(fill, wanted)
        # More wanted than __recent__ keeps: read the whole scope.
        everything: dict[Any, Any] = await self._redis.hgetall(entries_key)
        rest = (MemoryEntry.model_validate_json(v) for v in everything.values())
        return newest((e for e in rest if e.id not in matched and passes(e, filter_)), wanted)

    async def list_entries(
        self, agent_id: str, session_id: str | None = None, namespace: str = RECALL_NAMESPACE
    ) -> list[MemoryEntry]:
        """Every entry of one scope, oldest first (one HGETALL)."""
        entries_key, _ = self.keys(namespace, agent_id, session_id)
        raw: dict[Any, Any] = await self._backend.call(
            "hgetall", entries_key, what="recall list_entries", timeout=self._timeout
        )
        entries = [MemoryEntry.model_validate_json(v) for v in raw.values()]
        return by_age(entries)
