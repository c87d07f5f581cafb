"""Recall entries in Redis with a BM25 inverted index: the embedded default store.

Per scope (namespace, agent, session-or-agent-wide) two hashes share one hash
tag, so they sit in one Redis Cluster slot and one Lua script updates both:

* ``keyspace.recall_entries(scope)``: entry id -> entry JSON;
* ``keyspace.recall_postings(scope)``: token -> JSON ``{entry id: term frequency}``,
  plus bookkeeping fields whose names cannot be tokens (tokens never hold
  ``_``): ``__n__`` (entry count), ``__sum__`` (total length),
  ``__dl__:<id>`` (an entry's length), ``__tk__:<id>`` (its tokens, so an
  upsert or delete can take it out of every posting it is in) and
  ``__recent__`` (the ids of the newest :data:`RECENT_KEPT` entries, most
  recently written first, separated by spaces, which ids never hold).

A recall reads only the postings of the query's tokens and the lengths of the
entries they name, then the top entries: three round trips, whatever the
number of entries in the scope. A query that matches nothing falls back to
the newest entries (the ranking rule of :mod:`jarvismem.recall.stores`): a
script reads them through ``__recent__`` on the server, two round trips in all.
Only when more are wanted than ``__recent__`` keeps, or for a scope written
before it existed, is the whole scope read (one HGETALL).
"""

from __future__ import annotations

import json
from typing import Any

from jarvismem.backends.redis import RedisClient, redis_errors
from jarvismem.defaults import RECALL_NAMESPACE
from jarvismem.errors import InvalidPayloadError
from jarvismem.keys import KeySpace, validate_id
from jarvismem.recall.bm25 import score_documents, term_frequencies, tokenize
from jarvismem.recall.models import MemoryEntry, RecallRequest, RecallResult, WriteRequest
from jarvismem.recall.stores import by_age, entry_from_write, newest, rank

RECENT_KEPT = 256
"""How many entry ids the ``__recent__`` field keeps, newest first."""

# KEYS[1] entries hash, KEYS[2] postings hash
# ARGV[1] "put" | "del"; ARGV[2] entry id; ARGV[3] entry JSON; ARGV[4] JSON {token: tf};
# ARGV[5] JSON [token, ...]; ARGV[6] entry length; ARGV[7] TTL ms ("0" = none)
# ARGV[8] how many ids __recent__ keeps
# Returns 1 if the entry existed before, else 0.
_INDEX_SCRIPT = """
local entries, postings, op, id = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
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
  while #recent > tonumber(ARGV[8]) do table.remove(recent) end
  if #recent > 0 then
    redis.call('HSET', postings, '__recent__', table.concat(recent, ' '))
  else
    redis.call('HDEL', postings, '__recent__')
  end
end
local old = redis.call('HGET', postings, '__tk__:' .. id)
if old then
  for _, tok in ipairs(cjson.decode(old)) do
    local raw = redis.call('HGET', postings, tok)
    if raw then
      local m = cjson.decode(raw)
      m[id] = nil
      if next(m) == nil then
        redis.call('HDEL', postings, tok)
      else
        redis.call('HSET', postings, tok, cjson.encode(m))
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
for tok, tf in pairs(cjson.decode(ARGV[4])) do
  local raw = redis.call('HGET', postings, tok)
  local m = {}
  if raw then m = cjson.decode(raw) end
  m[id] = tf
  redis.call('HSET', postings, tok, cjson.encode(m))
end
redis.call('HSET', postings, '__tk__:' .. id, ARGV[5], '__dl__:' .. id, ARGV[6])
redis.call('HINCRBY', postings, '__n__', 1)
redis.call('HINCRBY', postings, '__sum__', tonumber(ARGV[6]))
redis.call('HSET', entries, id, ARGV[3])
if ARGV[7] ~= '0' then
  redis.call('PEXPIRE', entries, ARGV[7])
  redis.call('PEXPIRE', postings, ARGV[7])
end
return existed
"""


# KEYS[1] entries hash, KEYS[2] postings hash; ARGV[1] how many.
# Returns the JSON of the newest ARGV[1] entries named by __recent__ (nil for a
# name without an entry), newest first; {} when there is no __recent__.
_NEWEST_SCRIPT = """
local raw = redis.call('HGET', KEYS[2], '__recent__')
if not raw then return {} end
local ids, want = {}, tonumber(ARGV[1])
for rid in string.gmatch(raw, '%S+') do
  if #ids >= want then break end
  table.insert(ids, rid)
end
if #ids == 0 then return {} end
return redis.call('HMGET', KEYS[1], unpack(ids))
"""


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


class RedisRecallStore:
    """Recall store on a ``redis.asyncio`` client (plain, cluster or fakeredis).

    ``keyspace``: the tenant's key maker. ``ttl_seconds``: expiry of a scope's
    keys, refreshed on every write (``None`` = keep forever). Redis failures
    raise :class:`~jarvismem.errors.BackendUnavailableError` or
    :class:`~jarvismem.errors.BackendRejectedError`, never redis-py's errors.
    """

    def __init__(
        self, redis: RedisClient, keyspace: KeySpace, ttl_seconds: int | None = None
    ) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise InvalidPayloadError("ttl_seconds must be positive or None")
        self._redis = redis
        self._keyspace = keyspace
        self._ttl_ms = "0" if ttl_seconds is None else str(int(ttl_seconds) * 1000)
        self._script = redis.register_script(_INDEX_SCRIPT)
        self._newest_script = redis.register_script(_NEWEST_SCRIPT)

    def keys(self, namespace: str, agent_id: str, session_id: str | None) -> tuple[str, str]:
        """``(entries key, postings key)`` of one scope."""
        scope = KeySpace.recall_scope(namespace, agent_id, session_id)
        return self._keyspace.recall_entries(scope), self._keyspace.recall_postings(scope)

    async def write(self, request: WriteRequest) -> MemoryEntry:
        """Store or upsert an entry and re-index it atomically; returns it."""
        async with redis_errors("recall write"):
            return await self._write(request)

    async def _write(self, request: WriteRequest) -> MemoryEntry:
        entries_key, postings_key = self.keys(
            request.namespace, request.agent_id, request.session_id
        )
        previous = None
        if request.id is not None:
            raw = await self._redis.hget(entries_key, request.id)
            if raw is not None:
                previous = MemoryEntry.model_validate_json(raw)
        entry = entry_from_write(request, previous)
        tfs, length = term_frequencies(entry.content)
        await self._script(
            keys=[entries_key, postings_key],
            args=[
                "put",
                entry.id,
                entry.model_dump_json(),
                json.dumps(tfs),
                json.dumps(sorted(tfs)),
                length,
                self._ttl_ms,
                RECENT_KEPT,
            ],
        )
        return entry

    async def recall(self, request: RecallRequest) -> list[RecallResult]:
        """BM25 over the scope's index, recency breaking ties; the newest when nothing matches."""
        async with redis_errors("recall"):
            return await self._recall(request)

    async def _recall(self, request: RecallRequest) -> list[RecallResult]:
        tokens = list(dict.fromkeys(tokenize(request.query)))
        entries_key, postings_key = self.keys(
            request.namespace, request.agent_id, request.session_id
        )
        raw = await self._redis.hmget(postings_key, [*tokens, "__n__", "__sum__"])
        *raw_postings, raw_n, raw_sum = raw
        postings: dict[str, dict[str, int]] = {}
        for token, value in zip(tokens, raw_postings, strict=True):
            if value is not None:
                postings[token] = json.loads(value)
        candidates = list(dict.fromkeys(i for docs in postings.values() for i in docs))
        doc_count = int(raw_n or 0)
        if not candidates:
            return await self._newest(entries_key, postings_key, doc_count, request.limit)
        avg = int(raw_sum or 0) / doc_count if doc_count > 0 else 1.0
        raw_lengths = await self._redis.hmget(postings_key, [f"__dl__:{i}" for i in candidates])
        lengths = {i: int(v) for i, v in zip(candidates, raw_lengths, strict=True) if v is not None}
        scores = score_documents(tokens, postings, lengths, max(doc_count, 1), avg)
        # Fetch the top `limit` plus anything tied with the last of them, so that
        # the recency tie-break below sees every tied entry.
        ordered = sorted(scores, key=lambda i: -scores[i])
        cut = scores[ordered[min(request.limit, len(ordered)) - 1]]
        wanted = [i for i in ordered if scores[i] >= cut]
        raw_entries = await self._redis.hmget(entries_key, wanted)
        found = {
            i: MemoryEntry.model_validate_json(v)
            for i, v in zip(wanted, raw_entries, strict=True)
            if v is not None
        }
        return rank(scores, found, request.limit)

    async def _newest(
        self, entries_key: str, postings_key: str, doc_count: int, limit: int
    ) -> list[RecallResult]:
        """The fallback of a query that matches nothing: the newest ``limit`` entries."""
        if doc_count <= 0:
            return []
        wanted = min(limit, doc_count)
        raw = await self._newest_script(keys=[entries_key, postings_key], args=[wanted])
        found = [MemoryEntry.model_validate_json(v) for v in raw if v is not None]
        if len(found) == wanted:
            return newest(found, limit)
        # More wanted than __recent__ keeps, or a scope indexed before it existed.
        everything: dict[Any, Any] = await self._redis.hgetall(entries_key)
        return newest((MemoryEntry.model_validate_json(v) for v in everything.values()), limit)

    async def list_entries(
        self, agent_id: str, session_id: str | None = None, namespace: str = RECALL_NAMESPACE
    ) -> list[MemoryEntry]:
        """Every entry of one scope, oldest first (one HGETALL)."""
        entries_key, _ = self.keys(namespace, agent_id, session_id)
        async with redis_errors("recall list_entries"):
            raw: dict[Any, Any] = await self._redis.hgetall(entries_key)
        entries = [MemoryEntry.model_validate_json(v) for v in raw.values()]
        return by_age(entries)

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
        async with redis_errors("recall delete"):
            existed = await self._script(
                keys=[entries_key, postings_key],
                args=["del", entry_id, "", "{}", "[]", 0, self._ttl_ms, RECENT_KEPT],
            )
        return bool(int(existed))
