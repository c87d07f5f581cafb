"""Entry vectors beside the BM25 index, and the texts still waiting for one.

Per recall scope a vector store keeps each entry's vector (with its embedder's name and
the entry as embedded) and the entries still to embed; :meth:`VectorStore.put` stores a
vector only while its entry is still the pending one, so a slow embedding never
overwrites a newer upsert. Queries are brute-force cosine (numpy) over an in-process
copy of the scope's vectors, which the Redis store validates with one ``GET`` of a
version counter. Docs: docs/recall.md ("Hybrid recall") and docs/architecture.md
("Recall index format").
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from jarvismem.backends.redis import RedisBackend
from jarvismem.backends.redis_connect import RedisClient
from jarvismem.errors import InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.recall.models import MemoryEntry

__all__ = ["InMemoryVectorStore", "RedisVectorStore", "VectorHit", "VectorStore"]

_SEP = "\x1f"  # unit separator: never in an embedder name; JSON escapes it in content


class VectorHit:
    """An entry found by vector search and its cosine similarity to the query.

    A search makes hits from the stored entry JSON and parses it only when asked
    (:attr:`entry`; :attr:`updated_at` reads one field): a recall ranks up to a
    hundred hits and returns ten, so most are never parsed in full.
    """

    __slots__ = ("_entry", "_json", "entry_id", "similarity")

    def __init__(
        self,
        entry: MemoryEntry | None,
        similarity: float,
        *,
        entry_id: str | None = None,
        entry_json: str | None = None,
    ) -> None:
        if entry is None and (entry_id is None or entry_json is None):
            raise ValueError("a VectorHit needs an entry, or an entry id and its JSON")
        self._entry = entry
        self._json = entry_json
        self.entry_id: str = entry.id if entry is not None else entry_id  # type: ignore[assignment]
        self.similarity = similarity

    @property
    def entry(self) -> MemoryEntry:
        """The entry (parsed from its stored JSON on first use)."""
        if self._entry is None:
            self._entry = MemoryEntry.model_validate_json(self._json or "")
        return self._entry

    @property
    def updated_at(self) -> int:
        """The entry's ``updated_at`` (without parsing the whole entry)."""
        if self._entry is not None:
            return self._entry.updated_at
        return int(json.loads(self._json or "{}")["updated_at"])

    def __repr__(self) -> str:
        return f"VectorHit({self.entry_id!r}, {self.similarity:.4f})"


@runtime_checkable
class VectorStore(Protocol):
    """Per-scope vectors and pending texts (see the module docstring)."""

    async def mark_pending(self, scope: str, entry: MemoryEntry) -> None:
        """Record ``entry`` as still to embed and drop its old vector."""
        ...

    async def pending(self, scope: str, limit: int) -> list[MemoryEntry]:
        """Up to ``limit`` entries of ``scope`` still to embed."""
        ...

    async def pending_scopes(self) -> list[str]:
        """Scopes that have (or recently had) entries still to embed."""
        ...

    async def settle_scope(self, scope: str) -> bool:
        """Unlist ``scope`` from :meth:`pending_scopes` if nothing is pending; True if so."""
        ...

    async def put(self, scope: str, entry: MemoryEntry, name: str, vector: Sequence[float]) -> bool:
        """Store ``entry``'s vector if ``entry`` is still the pending one; True if stored."""
        ...

    async def delete(self, scope: str, entry_id: str) -> None:
        """Forget an entry's vector and pending text."""
        ...

    async def search(
        self,
        scope: str,
        query: Sequence[float],
        name: str,
        limit: int,
        include: Sequence[str] = (),
        where: Mapping[str, str] | None = None,
    ) -> list[VectorHit]:
        """The ``limit`` entries of ``scope`` most similar to ``query`` (``name``'s vectors),
        most similar first, then the similarity of each id of ``include`` not among
        them that has a vector (so a fusion can weigh its lexical candidates too).

        ``where``: only entries whose metadata holds every ``key: value`` pair take
        part (a recall's ``filter``), so the ``limit`` best are the best that pass.
        """
        ...


def encode_record(entry: MemoryEntry, name: str, vector: Sequence[float]) -> str:
    """A stored vector: embedder name, entry JSON and base64 of little-endian float32."""
    if not name or _SEP in name:
        raise InvalidPayloadError("an embedder name must be non-empty and hold no \\x1f")
    packed = np.asarray(vector, dtype="<f4").tobytes()
    return f"{name}{_SEP}{entry.model_dump_json()}{_SEP}{base64.b64encode(packed).decode()}"


def decode_record(raw: bytes | str) -> tuple[str, str, Any]:
    """``(name, entry JSON, float32 vector)`` of a stored record."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    name, entry_json, packed = text.split(_SEP)
    return name, entry_json, np.frombuffer(base64.b64decode(packed), dtype="<f4")


@dataclass
class _Matrix:
    """The vectors of one (scope, embedder) as rows of a growing float32 matrix."""

    version: int = 0
    ids: list[str] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)  # entry JSON, parsed only for hits
    # Each row's metadata, parsed from its JSON the first time a filtered search
    # looks at the row (None until then): filters cost nothing when unused.
    metadata: list[dict[str, str] | None] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    matrix: Any = None

    def set(self, entry_id: str, entry_json: str, vector: Any) -> None:
        vector = np.asarray(vector, dtype=np.float32)
        row = self.rows.get(entry_id)
        if row is None:
            row = len(self.ids)
            if self.matrix is None or self.matrix.shape[1] != vector.shape[0]:
                if self.ids:
                    raise InvalidPayloadError("vectors of one embedder differ in size")
                self.matrix = np.zeros((16, vector.shape[0]), dtype=np.float32)
            elif row >= self.matrix.shape[0]:  # grow by doubling: amortised O(1) appends
                grown = np.zeros((self.matrix.shape[0] * 2, self.matrix.shape[1]), np.float32)
                grown[:row] = self.matrix[:row]
                self.matrix = grown
            self.rows[entry_id] = row
            self.ids.append(entry_id)
            self.entries.append(entry_json)
            self.metadata.append(None)
        else:
            self.entries[row] = entry_json
            self.metadata[row] = None
        self.matrix[row] = vector

    def remove(self, entry_id: str) -> None:
        row = self.rows.pop(entry_id, None)
        if row is None:
            return
        last = len(self.ids) - 1
        if row != last:  # move the last row into the hole
            moved = self.ids[last]
            self.ids[row], self.entries[row] = moved, self.entries[last]
            self.metadata[row] = self.metadata[last]
            self.matrix[row] = self.matrix[last]
            self.rows[moved] = row
        self.ids.pop()
        self.entries.pop()
        self.metadata.pop()

    def passes(self, row: int, where: Mapping[str, str] | None) -> bool:
        """Whether row ``row``'s metadata holds every pair of ``where``."""
        if not where:
            return True
        metadata = self.metadata[row]
        if metadata is None:
            metadata = json.loads(self.entries[row]).get("metadata") or {}
            self.metadata[row] = metadata
        return all(metadata.get(key) == value for key, value in where.items())

    def search(
        self,
        query: Sequence[float],
        limit: int,
        include: Sequence[str] = (),
        where: Mapping[str, str] | None = None,
    ) -> list[VectorHit]:
        count = len(self.ids)
        if count == 0:
            return []
        q = np.asarray(query, dtype=np.float32)
        if q.shape[0] != self.matrix.shape[1]:
            raise InvalidPayloadError(
                f"query has {q.shape[0]} dimensions; the stored vectors have {self.matrix.shape[1]}"
            )
        sims = self.matrix[:count] @ q
        if limit <= 0:
            top: list[int] = []
        elif where:
            # The best rows that pass, most similar first: a full sort (10,000 rows:
            # well under a millisecond), then metadata read only until enough pass.
            top = []
            for i in np.argsort(-sims, kind="stable").tolist():
                if self.passes(i, where):
                    top.append(i)
                    if len(top) >= limit:
                        break
        elif count > limit:
            top = np.argpartition(-sims, limit - 1)[:limit].tolist()
        else:
            top = list(range(count))
        order = sorted(top, key=lambda i: (-float(sims[i]), self.ids[i]))
        chosen = set(order)
        for entry_id in include:
            row = self.rows.get(entry_id)
            if row is not None and row not in chosen and self.passes(row, where):
                chosen.add(row)
                order.append(row)
        return [
            VectorHit(None, float(sims[i]), entry_id=self.ids[i], entry_json=self.entries[i])
            for i in order
        ]


class InMemoryVectorStore:
    """Vectors and pending entries in dicts (tests and single-process runs)."""

    def __init__(self) -> None:
        self._pending: dict[str, dict[str, MemoryEntry]] = {}
        self._vectors: dict[str, dict[str, _Matrix]] = {}  # scope -> name -> matrix
        self._lock = asyncio.Lock()

    def _drop(self, scope: str, entry_id: str) -> None:
        for matrix in self._vectors.get(scope, {}).values():
            matrix.remove(entry_id)

    async def mark_pending(self, scope: str, entry: MemoryEntry) -> None:
        """Record ``entry`` as still to embed and drop its old vector."""
        async with self._lock:
            self._pending.setdefault(scope, {})[entry.id] = entry
            self._drop(scope, entry.id)

    async def pending(self, scope: str, limit: int) -> list[MemoryEntry]:
        """Up to ``limit`` entries of ``scope`` still to embed, oldest write first."""
        return list(self._pending.get(scope, {}).values())[:limit]

    async def pending_scopes(self) -> list[str]:
        """Scopes with entries still to embed."""
        return [s for s, p in self._pending.items() if p]

    async def settle_scope(self, scope: str) -> bool:
        """True when nothing of ``scope`` is pending."""
        return not self._pending.get(scope)

    async def put(self, scope: str, entry: MemoryEntry, name: str, vector: Sequence[float]) -> bool:
        """Store the vector if ``entry`` is still the pending one."""
        async with self._lock:
            pending = self._pending.get(scope, {})
            if pending.get(entry.id) != entry:
                return False
            del pending[entry.id]
            self._drop(scope, entry.id)
            matrix = self._vectors.setdefault(scope, {}).setdefault(name, _Matrix())
            matrix.set(entry.id, entry.model_dump_json(), vector)
            return True

    async def delete(self, scope: str, entry_id: str) -> None:
        """Forget an entry's vector and pending entry."""
        async with self._lock:
            self._pending.get(scope, {}).pop(entry_id, None)
            self._drop(scope, entry_id)

    async def search(
        self,
        scope: str,
        query: Sequence[float],
        name: str,
        limit: int,
        include: Sequence[str] = (),
        where: Mapping[str, str] | None = None,
    ) -> list[VectorHit]:
        """Brute-force cosine over ``scope``'s vectors made by ``name`` (+ ``include``),
        only entries passing ``where``."""
        matrix = self._vectors.get(scope, {}).get(name)
        return matrix.search(query, limit, include, where) if matrix is not None else []


# KEYS[1] vectors, KEYS[2] version, KEYS[3] pending; ARGV[1] id, ARGV[2] entry JSON
_MARK_SCRIPT = """
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
  return redis.call('INCR', KEYS[2])
end
return -1
"""

# KEYS as above; ARGV[1] id, ARGV[2] entry JSON embedded, ARGV[3] record.
# Stores only while the pending entry is the one embedded; returns the new version,
# or -1 when the entry changed (or was deleted) meanwhile.
_PUT_SCRIPT = """
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then return -1 end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return redis.call('INCR', KEYS[2])
"""

# KEYS as above; ARGV[1] id. Returns the new version, or -1 when no vector was there.
_DELETE_SCRIPT = """
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
  return redis.call('INCR', KEYS[2])
end
return -1
"""

# KEYS[1] vectors, KEYS[2] version: the version and every record, read atomically.
_LOAD_SCRIPT = """
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}
"""


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


class RedisVectorStore:
    """Vectors in plain Redis hashes beside the scope's BM25 index (docs/architecture.md).

    ``keyspace``: the tenant's key maker (the same one as the recall store's).
    Redis failures raise :class:`~jarvismem.errors.BackendUnavailableError` or
    :class:`~jarvismem.errors.BackendRejectedError`. ``timeout``: deadline of a
    search, in seconds (None: none), as the recall store's reads have, so a stalled
    Redis fails a hybrid recall instead of holding it for the whole stall.
    """

    def __init__(
        self, redis: RedisClient | RedisBackend, keyspace: KeySpace, *, timeout: float | None = None
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise InvalidPayloadError("timeout must be positive or None")
        self._backend = RedisBackend.adopt(redis)
        self._redis = self._backend.client
        self._keyspace = keyspace
        self._timeout = timeout
        self._mark = self._redis.register_script(_MARK_SCRIPT)
        self._put = self._redis.register_script(_PUT_SCRIPT)
        self._delete = self._redis.register_script(_DELETE_SCRIPT)
        self._load = self._redis.register_script(_LOAD_SCRIPT)
        # scope -> (version read, {embedder name: matrix}); every name of a scope
        # shares the scope's version.
        self._cache: dict[str, tuple[int, dict[str, _Matrix]]] = {}

    def keys(self, scope: str) -> list[str]:
        """``[vectors, version, pending]`` keys of ``scope``."""
        ks = self._keyspace
        return [
            ks.recall_vectors(scope),
            ks.recall_vectors_version(scope),
            ks.recall_embed_pending(scope),
        ]

    def _changed(self, scope: str, version: int) -> dict[str, _Matrix] | None:
        """The cache of ``scope`` moved to ``version`` if it was just before it, else dropped."""
        cached = self._cache.get(scope)
        if version < 0:
            return cached[1] if cached is not None else None
        if cached is not None and cached[0] == version - 1:
            self._cache[scope] = (version, cached[1])
            return cached[1]
        # Another process changed the scope too: reload on the next search.
        self._cache.pop(scope, None)
        return None

    async def _script(self, script: Any, scope: str, args: list[Any], what: str) -> Any:
        # Derived data (embeddings): not held to the replicas, like the recall index.
        return await self._backend.run_script(script, self.keys(scope), args, what=what, wait=False)

    async def mark_pending(self, scope: str, entry: MemoryEntry) -> None:
        """Record ``entry`` as still to embed (and its scope as pending); drop its old vector."""
        what = "recall embed mark"
        version = int(
            await self._script(self._mark, scope, [entry.id, entry.model_dump_json()], what)
        )
        registry = self._keyspace.recall_embed_pending_scopes()
        await self._backend.call("sadd", registry, scope, what=what)
        matrices = self._changed(scope, version)
        if matrices is not None:
            for matrix in matrices.values():
                matrix.remove(entry.id)

    async def pending(self, scope: str, limit: int) -> list[MemoryEntry]:
        """Up to ``limit`` entries of ``scope`` still to embed (HSCAN order)."""
        found: list[MemoryEntry] = []
        async with self._backend.guard("recall embed pending"):
            async for _, raw in self._redis.hscan_iter(self.keys(scope)[2], count=limit):
                found.append(MemoryEntry.model_validate_json(raw))
                if len(found) >= limit:
                    break
        return found

    async def pending_scopes(self) -> list[str]:
        """Scopes listed as having entries still to embed (malformed names skipped)."""
        registry = self._keyspace.recall_embed_pending_scopes()
        raw = await self._backend.call("smembers", registry, what="recall embed scopes")
        scopes = []
        for value in raw:
            try:
                scopes.append(KeySpace.scope_of_recall_key(_text(value)))
            except ValueError:
                continue
        return sorted(scopes)

    async def settle_scope(self, scope: str) -> bool:
        """Unlist ``scope`` when nothing is pending (re-listed if a write raced in)."""
        registry = self._keyspace.recall_embed_pending_scopes()
        pending_key = self.keys(scope)[2]
        call, what = self._backend.call, "recall embed settle"
        if await call("hlen", pending_key, what=what):
            return False
        await call("srem", registry, scope, what=what)
        # A write between the HLEN and the SREM listed the scope again before
        # we removed it: put it back so a restart still drains it.
        if await call("hlen", pending_key, what=what):
            await call("sadd", registry, scope, what=what)
            return False
        return True

    async def put(self, scope: str, entry: MemoryEntry, name: str, vector: Sequence[float]) -> bool:
        """Store the vector if ``entry`` is still the pending one; True if stored."""
        entry_json = entry.model_dump_json()
        record = encode_record(entry, name, vector)
        args = [entry.id, entry_json, record]
        version = int(await self._script(self._put, scope, args, "recall embed put"))
        if version < 0:
            return False
        matrices = self._changed(scope, version)
        if matrices is not None:
            for other in matrices.values():
                other.remove(entry.id)
            matrices.setdefault(name, _Matrix()).set(entry.id, entry_json, vector)
        return True

    async def delete(self, scope: str, entry_id: str) -> None:
        """Forget an entry's vector and pending entry."""
        version = int(await self._script(self._delete, scope, [entry_id], "recall embed delete"))
        matrices = self._changed(scope, version)
        if matrices is not None:
            for matrix in matrices.values():
                matrix.remove(entry_id)

    async def search(
        self,
        scope: str,
        query: Sequence[float],
        name: str,
        limit: int,
        include: Sequence[str] = (),
        where: Mapping[str, str] | None = None,
    ) -> list[VectorHit]:
        """Brute-force cosine over ``scope``'s vectors made by ``name`` (+ ``include``),
        only entries passing ``where``.

        One ``GET`` of the version when the cache is current; the whole scope
        (one script) when another process changed it.
        """
        vectors_key, version_key, _ = self.keys(scope)
        cached = self._cache.get(scope)
        async with self._backend.guard("recall vector search", self._timeout):
            if cached is not None:
                current = int(await self._redis.get(version_key) or 0)
                if current != cached[0]:
                    cached = None
            if cached is None:
                raw_version, flat = await self._load(keys=[vectors_key, version_key])
                matrices: dict[str, _Matrix] = {}
                for i in range(0, len(flat), 2):
                    record_name, entry_json, vector = decode_record(flat[i + 1])
                    matrices.setdefault(record_name, _Matrix()).set(
                        _text(flat[i]), entry_json, vector
                    )
                cached = (int(raw_version), matrices)
                self._cache[scope] = cached
        matrix = cached[1].get(name)
        if matrix is None:
            return []
        return await _search_off_loop(matrix, query, limit, include, where)


_SEARCH_INLINE_ROWS = 20_000
"""Up to this many vectors a search runs on the event loop (well under a millisecond
for 384 dimensions); a larger scope's matrix product runs in a worker thread."""


async def _search_off_loop(
    matrix: _Matrix,
    query: Sequence[float],
    limit: int,
    include: Sequence[str],
    where: Mapping[str, str] | None,
) -> list[VectorHit]:
    if len(matrix.ids) <= _SEARCH_INLINE_ROWS:
        return matrix.search(query, limit, include, where)
    return await asyncio.to_thread(matrix.search, query, limit, include, where)
