"""Recall through the Athena service: facts go in as ``observation`` events, recall is a search.

Athena answers a raw L2 distance and does not sort; this store scores hits
``1 / (1 + distance)`` and sorts them. Graph hits are left out unless asked for (they
ignore tenant, user and agent). What Athena cannot do (list, update, scope below the
user) is stated in docs/recall.md, "The Athena store".
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Protocol

from jarvismem.defaults import ATHENA_INCLUDE_GRAPH_HITS, RECALL_NAMESPACE, SEARCH_LIMIT
from jarvismem.errors import RecallError
from jarvismem.keys import KeySpace
from jarvismem.recall.models import MemoryEntry, RecallRequest, RecallResult, WriteRequest
from jarvismem.recall.stores import by_age, entry_from_write
from jarvismem.tiers.athena.reads import GRAPH_SOURCE


class AthenaSearchMemory(Protocol):
    """The part of :class:`jarvismem.tiers.athena.AthenaMemory` this store uses.

    An ``agent_id`` attribute, when present, names the only agent whose
    requests the store serves.
    """

    async def record_observation(self, content: str, **metadata: str) -> None:
        """Queue an ``observation`` event."""
        ...

    async def search(self, query: str, limit: int = SEARCH_LIMIT) -> list[dict[str, Any]]:
        """Hits with ``content``, ``similarity_score`` (raw L2), ``source_type``, ``source_id``."""
        ...


def similarity_from_distance(distance: float) -> float:
    """Map an L2 distance (lower = closer) to a similarity in (0, 1] (higher = closer)."""
    return 1.0 / (1.0 + max(0.0, float(distance)))


class AthenaRecallStore:
    """Recall store backed by one agent's :class:`AthenaMemory`.

    ``athena_memory``: the agent's Athena tier (or anything with the same
    ``record_observation``/``search``). Writes are queued by that tier's
    durable outbox, so they reach Athena even if it is briefly down.
    ``include_graph_hits``: keep ``ltm_node`` hits (see the module doc).
    """

    def __init__(
        self,
        athena_memory: AthenaSearchMemory,
        *,
        include_graph_hits: bool = ATHENA_INCLUDE_GRAPH_HITS,
    ) -> None:
        self._memory = athena_memory
        self._include_graph_hits = include_graph_hits
        self._written: dict[str, dict[str, MemoryEntry]] = {}
        self._lock = asyncio.Lock()

    def _check_agent(self, agent_id: str) -> None:
        owner = getattr(self._memory, "agent_id", None)
        if isinstance(owner, str) and owner != agent_id:
            raise RecallError(
                f"this Athena recall store belongs to agent {owner!r}, not {agent_id!r}"
            )

    async def write(self, request: WriteRequest) -> MemoryEntry:
        """Send the content as an ``observation`` event; returns the entry as recorded here."""
        self._check_agent(request.agent_id)
        scope_key = KeySpace.recall_scope(request.namespace, request.agent_id, request.session_id)
        async with self._lock:
            scope = self._written.setdefault(scope_key, {})
            previous = scope.get(request.id) if request.id is not None else None
            entry = entry_from_write(request, previous)
            labels = {
                **entry.metadata,
                "memory_id": entry.id,
                "namespace": entry.namespace,
                "session_id": entry.session_id or "",
            }
            await self._memory.record_observation(entry.content, **labels)
            scope[entry.id] = entry
        return entry

    async def recall(self, request: RecallRequest) -> list[RecallResult]:
        """Athena's search hits as results, closest first (similarity = 1/(1+distance)).

        ``request.min_score`` applies to the similarity; ``request.filter`` cannot
        (Athena does not keep this store's metadata) and raises :class:`RecallError`.
        There is no recency fill: Athena returns what it finds.
        """
        self._check_agent(request.agent_id)
        if request.filter:
            raise RecallError("the Athena recall store cannot filter on entry metadata")
        hits = await self._memory.search(request.query, limit=request.limit)
        scored: list[tuple[float, int, RecallResult]] = []
        for position, hit in enumerate(hits):
            content = str(hit.get("content") or "").strip()
            if not content:
                continue
            source_type = str(hit.get("source_type") or "")
            source_id = str(hit.get("source_id") or "")
            if source_type == GRAPH_SOURCE and not self._include_graph_hits:
                continue  # unscoped on the server: never presented as this agent's memory
            if source_type == GRAPH_SOURCE:
                score, distance = 0.0, ""
            else:
                raw = float(hit.get("similarity_score") or 0.0)
                score, distance = similarity_from_distance(raw), repr(raw)
            digest = hashlib.sha1(f"{source_type}\0{source_id}\0{content}".encode()).hexdigest()
            entry = MemoryEntry(
                id="ath_" + digest[:32],
                agent_id=request.agent_id,
                session_id=request.session_id,
                namespace=request.namespace,
                content=content,
                metadata={
                    "source": "athena",
                    "source_type": source_type,
                    "source_id": source_id,
                    "distance": distance,
                    "timestamp": str(hit.get("timestamp") or ""),
                },
            )
            if score < request.min_score:
                continue
            scored.append(
                (score, position, RecallResult(entry=entry, score=score, source="athena"))
            )
        # Higher similarity first; the server's order breaks ties (it is not sorted).
        scored.sort(key=lambda item: (-item[0], item[1]))
        return [result for _, _, result in scored[: request.limit]]

    async def list_entries(
        self, agent_id: str, session_id: str | None = None, namespace: str = RECALL_NAMESPACE
    ) -> list[MemoryEntry]:
        """Entries this store object wrote in this process (Athena cannot list), oldest first."""
        scope = self._written.get(KeySpace.recall_scope(namespace, agent_id, session_id), {})
        return by_age(scope.values())
