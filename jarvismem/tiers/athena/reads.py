"""Reads from Athena (the agent's context, search): straight to the server, never queued.

A read never creates a session: an agent with none cached gets an empty
answer. A session the server answers 404 for is replaced only once its loss is
confirmed (:meth:`AthenaSessions.call`) and the read repeated; an outage or an
endpoint the server lacks gives an empty answer (noted in ``health()``), so a
read never fails a turn unless the caller asks for ``strict``.

Long-term graph hits (``source_type == "ltm_node"``) are dropped from search
results unless ``include_graph_hits``: the server's graph lookup ignores
tenant, user and agent, so they may be another tenant's data.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from jarvismem.defaults import SEARCH_LIMIT
from jarvismem.errors import (
    AthenaBadRequestError,
    AthenaError,
    AthenaNotFoundError,
    AthenaUnsupportedError,
)
from jarvismem.tiers.athena.session import AthenaSessions
from jarvismem.tiers.athena.status import TierStatus

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient

__all__ = ["GRAPH_SOURCE", "AthenaReads", "empty_context"]

log = logging.getLogger(__name__)

GRAPH_SOURCE = "ltm_node"
"""``source_type`` of a long-term graph hit (not scoped by tenant, user or agent)."""


def empty_context() -> dict[str, Any]:
    """The context of an agent with no session yet (nothing was ever sent for it)."""
    return {
        "session_id": "",
        "short_term": [],
        "mid_term": [],
        "segments": [],
        "user_persona": None,
    }


class AthenaReads:
    """Context and search reads of one agent's session."""

    def __init__(
        self,
        client: AthenaClient,
        sessions: AthenaSessions,
        status: TierStatus,
        *,
        include_graph_hits: bool = False,
    ) -> None:
        self._client = client
        self._sessions = sessions
        self._status = status
        self._include_graph_hits = include_graph_hits

    async def get_memory_context(
        self, limit: int = 10, query: str | None = None, *, strict: bool = False
    ) -> dict[str, Any] | None:
        """The agent's Athena context, or None when unavailable or unsupported.

        Returns ``{"session_id", "short_term": [events, oldest first],
        "mid_term": [chains], "segments", "user_persona"}`` (all empty, with
        ``session_id`` "", for an agent that has no session). ``query`` ranks
        the mid-term chains against it (a vector search on the server); without
        it they are the newest. With ``strict``, an outage raises its
        AthenaError instead (the rehydrate bundle uses this to mark the tier
        degraded); "unsupported" (501) still returns None.
        """
        try:
            sid = await self._sessions.lookup()
            if not sid:
                await self._reachable()
                return empty_context()
            ctx = await self._sessions.call(
                lambda s: self._client.get_context(s, limit=limit, query=query), sid
            )
        except AthenaUnsupportedError:
            self._status.unsupported.add("context")
            return None
        except AthenaError as exc:
            self._note("context", exc)
            if strict:
                raise
            return None
        return {
            "session_id": self._sessions.session_id,
            "short_term": [e.to_dict() for e in ctx.stm_events],
            "mid_term": [c.to_dict() for c in ctx.relevant_pages],
            "segments": list(ctx.segments),
            "user_persona": ctx.user_persona,
        }

    async def search(
        self, query: str, limit: int = SEARCH_LIMIT, *, filter: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Search Athena's memory; hits in the server's order, each with ``distance``
        (raw L2, lower is closer) and ``similarity`` (1/(1+distance), higher is closer).

        ``filter`` matches session metadata (``namespace``, ``agent``); the
        server applies it after its top-``limit`` search, so it may return fewer.
        Returns [] for an agent with no session, when Athena is unavailable or
        does not support search; a query the server refuses (400) is raised.
        """
        try:
            sid = await self._sessions.lookup()
            if not sid:
                await self._reachable()
                return []
            hits = await self._sessions.call(
                lambda s: self._client.search(s, query, limit=limit, filter=filter), sid
            )
        except AthenaUnsupportedError:
            self._status.unsupported.add("search")
            return []
        except AthenaBadRequestError:
            raise
        except AthenaError as exc:
            self._note("search", exc)
            return []
        return [
            h.to_dict() for h in hits if self._include_graph_hits or h.source_type != GRAPH_SOURCE
        ]

    async def _reachable(self) -> None:
        """Raise the AthenaError of an unreachable server or refused credentials
        (``GET /api/v1/health``, authenticated like every read).

        With no session there is nothing to read, but "empty" must not hide an
        outage or a rotated key: the bundle marks the tier degraded and the CLI
        says why.
        """
        try:
            await self._client.health_detailed()
        except (AthenaUnsupportedError, AthenaNotFoundError):
            pass  # a server without /health: nothing says it is down

    def _note(self, what: str, exc: AthenaError) -> None:
        log.warning("Athena %s read failed: %s", what, self._status.note(exc))
