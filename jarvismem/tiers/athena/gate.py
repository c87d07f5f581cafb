"""The way every Athena write request of one memory goes out.

Session creations and deliveries pass the client's concurrency limit (shared
by every memory using that client), are counted while in flight (so closing
lets them finish instead of cancelling them mid-request), and are refused once
the memory is closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from jarvismem.tiers.athena.config import ATHENA_CONCURRENT_WRITES

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient

__all__ = ["RequestGate"]

_T = TypeVar("_T")


class RequestGate:
    """Write requests of one memory: limited per client, counted, stopped by :meth:`close`."""

    def __init__(self, client: AthenaClient, *, limit: int = ATHENA_CONCURRENT_WRITES) -> None:
        self._client = client
        self._limit = limit
        self.in_flight = 0
        """Requests sent and not yet answered."""
        self.closed = False
        """Set by the memory's close(): no new request starts."""

    def close(self) -> None:
        """Refuse every later request (those in flight finish)."""
        self.closed = True

    async def run(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """Run one write request; cancelled (nothing sent) if closed while waiting for a slot."""
        async with self._client.write_slots(self._limit):
            if self.closed:
                raise asyncio.CancelledError  # closed while waiting: nothing was sent
            self.in_flight += 1
            try:
                return await call()
            finally:
                self.in_flight -= 1
