"""The recall-store contract and the in-memory store.

A store keeps :class:`MemoryEntry` objects per scope (namespace, agent,
session-or-agent-wide) and answers relevance queries inside one scope only.
Implementations: :class:`InMemoryRecallStore` (here; same ranking as Redis),
:class:`jarvismem.recall.redis_store.RedisRecallStore` (the embedded default)
and :class:`jarvismem.recall.athena_store.AthenaRecallStore`. Check your own
with :mod:`jarvismem.testing.recall_conformance`.

The ranking rule of the two built-in (lexical) stores:

1. **Matches first.** Entries sharing at least one scoring word with the query
   (see :mod:`jarvismem.recall.bm25`) come back by BM25 score, highest first;
   ties go to the most recently written entry, then to the smaller id. Only
   matches are returned when there is at least one: a match is never padded
   with unrelated entries, which would crowd the prompt with noise on every
   turn.
2. **Newest when nothing matches.** A query that matches no entry of the scope
   (a greeting such as ``"hello"``, a query of stopwords only) returns the
   scope's ``limit`` most recently written entries, newest first, each with
   score ``0.0``, as the seed design's store does. So a fact such as "User
   prefers the name Alex." still reaches the prompt of a turn that never
   names it. A score of 0 marks such a fallback entry (a match always scores
   above 0).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from jarvismem.defaults import RECALL_NAMESPACE
from jarvismem.keys import KeySpace
from jarvismem.recall.bm25 import score_documents, term_frequencies, tokenize
from jarvismem.recall.models import MemoryEntry, RecallRequest, RecallResult, WriteRequest


@runtime_checkable
class RecallStore(Protocol):
    """What the runtime needs from a recall store."""

    async def recall(self, request: RecallRequest) -> list[RecallResult]:
        """At most ``request.limit`` entries of the request's scope, most relevant first.

        Scores are >= 0 and higher means more relevant. A lexical store returns
        only the matching entries when any match, else the newest entries of the
        scope with score 0 (the module's ranking rule); an empty scope gives [].
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
    if request.id is not None:
        fields["id"] = request.id
    return MemoryEntry.model_validate(fields)


def rank(
    scores: dict[str, float], entries: dict[str, MemoryEntry], limit: int
) -> list[RecallResult]:
    """Sort scored entries: score descending, then most recently updated, then id."""
    ordered = sorted(
        (i for i in scores if i in entries),
        key=lambda i: (-scores[i], -entries[i].updated_at, i),
    )
    return [RecallResult(entry=entries[i], score=scores[i]) for i in ordered[:limit]]


def newest(entries: Iterable[MemoryEntry], limit: int) -> list[RecallResult]:
    """The fallback of a query that matches nothing: the ``limit`` most recently
    written entries (``updated_at``, then id), newest first, each with score 0."""
    ordered = sorted(entries, key=lambda e: (-e.updated_at, e.id))
    return [RecallResult(entry=e, score=0.0) for e in ordered[:limit]]


def by_age(entries: Iterable[MemoryEntry]) -> list[MemoryEntry]:
    """Entries oldest first (creation time, then id): the order of ``list_entries``."""
    return sorted(entries, key=lambda e: (e.created_at, e.id))


class InMemoryRecallStore:
    """Entries in a dict, ranked with the same BM25 as the Redis store.

    Meant for tests and single-process runs: nothing survives the process.
    Recall scores every entry of the scope (no index), which is fine at that size.
    """

    def __init__(self) -> None:
        self._scopes: dict[str, dict[str, MemoryEntry]] = {}
        self._lock = asyncio.Lock()

    @staticmethod
    def _scope(namespace: str, agent_id: str, session_id: str | None) -> str:
        return KeySpace.recall_scope(namespace, agent_id, session_id)

    async def write(self, request: WriteRequest) -> MemoryEntry:
        """Store or upsert an entry; returns it."""
        async with self._lock:
            scope = self._scopes.setdefault(
                self._scope(request.namespace, request.agent_id, request.session_id), {}
            )
            previous = scope.get(request.id) if request.id is not None else None
            entry = entry_from_write(request, previous)
            scope[entry.id] = entry
            return entry

    async def recall(self, request: RecallRequest) -> list[RecallResult]:
        """BM25 over the scope's entries, recency breaking ties; the newest when nothing matches."""
        scope = self._scopes.get(
            self._scope(request.namespace, request.agent_id, request.session_id), {}
        )
        if not scope:
            return []
        postings: dict[str, dict[str, int]] = {}
        lengths: dict[str, int] = {}
        for entry in scope.values():
            tfs, length = term_frequencies(entry.content)
            lengths[entry.id] = length
            for token, tf in tfs.items():
                postings.setdefault(token, {})[entry.id] = tf
        avg = sum(lengths.values()) / len(lengths)
        scores = score_documents(tokenize(request.query), postings, lengths, len(scope), avg)
        if not scores:
            return newest(scope.values(), request.limit)
        return rank(scores, scope, request.limit)

    async def list_entries(
        self, agent_id: str, session_id: str | None = None, namespace: str = RECALL_NAMESPACE
    ) -> list[MemoryEntry]:
        """Every entry of one scope, oldest first."""
        return by_age(self._scopes.get(self._scope(namespace, agent_id, session_id), {}).values())

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
            scope = self._scopes.get(self._scope(namespace, agent_id, session_id), {})
            return scope.pop(entry_id, None) is not None
