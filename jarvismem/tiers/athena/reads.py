"""Reads from Athena (the agent's context, search): straight to the server, never queued.

A session the server forgot is renewed once and the read repeated; an outage
or an endpoint the server lacks gives an empty answer (noted in ``health()``),
so a read never fails a turn unless the caller asks for ``strict``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from jarvismem.backends.athena import AthenaClient
from jarvismem.defaults import SEARCH_LIMIT
from jarvismem.errors import (
    AthenaBadRequestError,
    AthenaError,
    AthenaNotFoundError,
    AthenaUnsupportedError,
)
from jarvismem.tiers.athena.session import AthenaSessions
from jarvismem.tiers.athena.status import TierStatus

__all__ = ["AthenaReads"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class AthenaReads:
    """Context and search reads of one agent's session."""

    def __init__(self, client: AthenaClient, sessions: AthenaSessions, status: TierStatus) -> None:
        self._client = client
        self._sessions = sessions
        self._status = status

    async def _in_session(self, read: Callable[[str], Awaitable[_T]]) -> _T:
        """``read(session_id)``, once more in a new session if the server forgot this one."""
        try:
            return await read(await self._sessions.current())
        except AthenaNotFoundError:
            return await read(await self._sessions.renew(self._sessions.session_id))

    async def get_memory_context(
        self, limit: int = 10, query: str | None = None, *, strict: bool = False
    ) -> dict[str, Any] | None:
        """The agent's Athena context, or None when unavailable or unsupported.

        Returns ``{"session_id", "short_term": [events, oldest first],
        "mid_term": [chains], "segments", "user_persona"}``. With ``strict``, an
        outage raises its AthenaError instead (the rehydrate bundle uses this to
        mark the tier degraded); "unsupported" (501) still returns None.
        """
        try:
            ctx = await self._in_session(
                lambda sid: self._client.get_context(sid, limit=limit, query=query)
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

    async def search(self, query: str, limit: int = SEARCH_LIMIT) -> list[dict[str, Any]]:
        """Search Athena's memory; hits in the server's order, each with ``distance``
        (raw L2, lower is closer) and ``similarity`` (1/(1+distance), higher is closer).
        Returns [] when Athena is unavailable or does not support search; a query
        the server refuses (400) is raised."""
        try:
            hits = await self._in_session(lambda sid: self._client.search(sid, query, limit=limit))
        except AthenaUnsupportedError:
            self._status.unsupported.add("search")
            return []
        except AthenaBadRequestError:
            raise
        except AthenaError as exc:
            self._note("search", exc)
            return []
        return [h.to_dict() for h in hits]

    def _note(self, what: str, exc: AthenaError) -> None:
        log.warning("Athena %s read failed: %s", what, self._status.note(exc))
