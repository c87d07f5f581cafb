"""The recall-store contract and the in-memory store.

A store keeps :class:`MemoryEntry` objects per scope (namespace, agent,
session-or-agent-wide) and answers relevance queries inside one scope only.
:class:`InMemoryRecallStore` ranks exactly as
:class:`~jarvismem.recall.redis_store.RedisRecallStore` does (filter, BM25 matches,
recency fill at score 0, ``min_score``: docs/recall.md, "Ranking rule"); check your own
store with :mod:`jarvismem.testing.recall_conformance`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Iterable, Mapping
from typing import Protocol, runtime_checkable

from jarvismem.defaults import RECALL_INDEXED_METADATA, RECALL_NAMESPACE
from jarvismem.keys import KeySpace
from jarvismem.recall.bm25 import (
    TF_CAP,
    document_tokens,
    pack,
    score_documents,
    term_frequencies,
    tokenize,
)
from jarvismem.recall.models import MemoryEntry, RecallRequest, RecallResult, WriteRequest


@runtime_checkable
class RecallStore(Protocol):
    """What the runtime needs from a recall store."""

    async def recall(self, request: RecallRequest) -> list[RecallResult]:
        """At most ``request.limit`` entries of the request's scope, most relevant first.

        Scores are >= 0 and higher means more relevant. A lexical store returns
        the matches, then fills up to ``limit`` with the newest entries that do not
        match, with score 0, unless ``min_score`` > 0 (the module's ranking
        rule); only entries passing ``request.filter`` are returned; an empty
        scope gives [].
        """
        ...

    async def write(self, request: WriteRequest) -> MemoryEntry:
        """Store an entry (an upsert when ``request.id`` names an existing one); returns it."""
        ...

    async def list_entries(
        self, agent_id: str, session_id: str | None = None, namespace: str = RECALL_NAMESPACE
    ) -> list[MemoryEntry]:
        """Every entry of one scope, oldest first."""
        ...


@runtime_checkable
class DeletableRecallStore(RecallStore, Protocol):
    """A store that can also forget one entry."""

    async def delete(
        self,
        entry_id: str,
        *,
        agent_id: str,
        session_id: str | None = None,
        namespace: str = RECALL_NAMESPACE,
    ) -> bool:
        """Remove an entry; returns whether it existed."""
        ...


_last_ms = 0


def now_ms() -> int:
    """Epoch milliseconds, strictly increasing within this process.

    Entries written one after the other then always list in write order, even
    inside one millisecond (the clock is nudged forward by at most a few ms).
    """
    global _last_ms
    _last_ms = max(time.time_ns() // 1_000_000, _last_ms + 1)
    return _last_ms


def entry_from_write(request: WriteRequest, previous: MemoryEntry | None) -> MemoryEntry:
    """The entry a write produces: an upsert keeps the original ``created_at``."""
    now = now_ms()
    fields = {
        "agent_id": request.agent_id,
        "session_id": request.session_id,
        "namespace": request.namespace,
        "content": request.content,
        "metadata": dict(request.metadata),
        "created_at": previous.created_at if previous is not None else now,
        "updated_at": max(now, previous.updated_at) if previous is not None else now,
    }
    # An edit does not move when the fact happened, unless the write says so.
    if request.occurred_at is not None:
        fields["occurred_at"] = request.occurred_at
    elif previous is not None:
        fields["occurred_at"] = previous.occurred_at
    if request.id is not None:
        fields["id"] = request.id
    return MemoryEntry.model_validate(fields)


def rank(
    scores: Mapping[str, float], entries: Mapping[str, MemoryEntry], limit: int
) -> list[RecallResult]:
    """Sort scored entries: score descending, then most recently updated, then id."""
    ordered = sorted(
        (i for i in scores if i in entries),
        key=lambda i: (-scores[i], -entries[i].updated_at, i),
    )
    return [
        RecallResult(entry=entries[i], score=scores[i], source="lexical") for i in ordered[:limit]
    ]


def newest(entries: Iterable[MemoryEntry], limit: int) -> list[RecallResult]:
    """The ``limit`` most recently written entries (``updated_at``, then id), newest
    first, each with score 0: the recency fill."""
    ordered = sorted(entries, key=lambda e: (-e.updated_at, e.id))
    return [RecallResult(entry=e, score=0.0, source="recency") for e in ordered[:limit]]


def passes(entry: MemoryEntry, wanted: Mapping[str, str] | None) -> bool:
    """Whether ``entry``'s metadata holds every ``key: value`` pair of ``wanted``."""
    if not wanted:
        return True
    metadata = entry.metadata
    return all(metadata.get(key) == value for key, value in wanted.items())


def entry_tokens(entry: MemoryEntry, indexed_metadata: Collection[str]) -> list[str]:
    """The scoring tokens a lexical store indexes for ``entry``."""
    return document_tokens(
        entry.content,
        occurred_at=entry.occurred_at,
        metadata=entry.metadata,
        indexed_metadata=indexed_metadata,
    )


def check_indexed_metadata(keys: Iterable[str]) -> tuple[str, ...]:
    """The metadata keys a store indexes, sorted; ``ValueError`` for a non-string or
    blank key (a typo would otherwise silently index nothing)."""
    checked = set()
    for key in keys:
        if not isinstance(key, str) or not key.strip():
            raise ValueError("indexed metadata keys must be non-empty strings")
        checked.add(key.strip())
    return tuple(sorted(checked))


def by_age(entries: Iterable[MemoryEntry]) -> list[MemoryEntry]:
    """Entries oldest first (creation time, then id): the order of ``list_entries``."""
    return sorted(entries, key=lambda e: (e.created_at, e.id))


class _ScopeIndex:
    """One scope's entries and their BM25 postings, kept up to date on every write."""

    def __init__(self) -> None:
        # Entries in write order: an upsert moves its entry to the end, and
        # updated_at only grows (now_ms), so the end holds the newest.
        self.entries: dict[str, MemoryEntry] = {}
        self.tokens: dict[str, list[str]] = {}
        self.lengths: dict[str, int] = {}
        self.total_length = 0
        self.postings: dict[str, dict[str, int]] = {}
        # Per token, the highest term frequency it ever had while it had postings:
        # an upper bound, as the Redis store keeps it (deletes do not lower it).
        self.tf_max: dict[str, int] = {}

    def put(self, entry: MemoryEntry, tokens: list[str]) -> None:
        self.remove(entry.id)
        tfs, length = term_frequencies(tokens)
        self.entries[entry.id] = entry
        self.tokens[entry.id] = list(tfs)
        self.lengths[entry.id] = length
        self.total_length += length
        for token, tf in tfs.items():
            self.postings.setdefault(token, {})[entry.id] = pack(tf, length)
            self.tf_max[token] = max(self.tf_max.get(token, 0), min(tf, TF_CAP))

    def remove(self, entry_id: str) -> bool:
        if self.entries.pop(entry_id, None) is None:
            return False
        for token in self.tokens.pop(entry_id):
            docs = self.postings[token]
            del docs[entry_id]
            if not docs:
                del self.postings[token]
                del self.tf_max[token]
        self.total_length -= self.lengths.pop(entry_id)
        return True

    def recall(self, request: RecallRequest) -> list[RecallResult]:
        if not self.entries:
            return []
        wanted = request.filter
        scores = score_documents(
            tokenize(request.query),
            self.postings,
            len(self.entries),
            self.total_length / len(self.entries),
            # Pruning needs every scored document to be a candidate: not with a filter.
            top=None if wanted else request.limit,
            tf_max=self.tf_max,
        )
        matched = {
            i: s
            for i, s in scores.items()
            if s >= request.min_score and passes(self.entries[i], wanted)
        }
        results = rank(matched, self.entries, request.limit)
        if len(results) < request.limit and request.min_score <= 0:
            fill: list[RecallResult] = []
            for entry in reversed(self.entries.values()):
                if len(results) + len(fill) >= request.limit:
                    break
                if entry.id not in scores and passes(entry, wanted):
                    fill.append(RecallResult(entry=entry, score=0.0, source="recency"))
            results.extend(fill)
        return results


class InMemoryRecallStore:
    """Entries in a dict, ranked with the same BM25 as the Redis store.

    Meant for tests and single-process runs: nothing survives the process.
    Each scope keeps an inverted index (postings, entry lengths) updated on every
    write and delete, so a recall reads only the postings of the query's tokens.
    ``indexed_metadata``: metadata keys whose values are searchable like content.
    """

    def __init__(self, *, indexed_metadata: Iterable[str] = RECALL_INDEXED_METADATA) -> None:
        self._indexed_metadata = check_indexed_metadata(indexed_metadata)
        self._scopes: dict[str, _ScopeIndex] = {}
        self._lock = asyncio.Lock()

    @staticmethod
    def _scope(namespace: str, agent_id: str, session_id: str | None) -> str:
        return KeySpace.recall_scope(namespace, agent_id, session_id)

    async def write(self, request: WriteRequest) -> MemoryEntry:
        """Store or upsert an entry and index it; returns it."""
        async with self._lock:
            scope = self._scopes.setdefault(
                self._scope(request.namespace, request.agent_id, request.session_id),
                _ScopeIndex(),
            )
            previous = scope.entries.get(request.id) if request.id is not None else None
            entry = entry_from_write(request, previous)
            scope.put(entry, entry_tokens(entry, self._indexed_metadata))
            return entry

    async def recall(self, request: RecallRequest) -> list[RecallResult]:
        """BM25 over the scope's index, recency breaking ties, then the recency fill."""
        scope = self._scopes.get(
            self._scope(request.namespace, request.agent_id, request.session_id)
        )
        return [] if scope is None else scope.recall(request)

    async def list_entries(
        self, agent_id: str, session_id: str | None = None, namespace: str = RECALL_NAMESPACE
    ) -> list[MemoryEntry]:
        """Every entry of one scope, oldest first."""
        scope = self._scopes.get(self._scope(namespace, agent_id, session_id))
        return [] if scope is None else by_age(scope.entries.values())

    async def delete(
        self,
        entry_id: str,
        *,
        agent_id: str,
        session_id: str | None = None,
        namespace: str = RECALL_NAMESPACE,
    ) -> bool:
        """Forget one entry; returns whether it existed."""
        async with self._lock:
            scope = self._scopes.get(self._scope(namespace, agent_id, session_id))
            return scope is not None and scope.remove(entry_id)
