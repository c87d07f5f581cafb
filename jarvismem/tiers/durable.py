"""Writes that survive a backend outage: try the backend, else a durable local outbox.

A :class:`DurableWriter` sits in front of one backend for one workflow. While
the backend answers and nothing is pending, a write goes straight through. When
a write fails for a backend reason (connection refused, timeout, service
error), it is appended to the outbox on local disk instead, and every later
write joins the queue behind it, so the backend receives them **in order**. A
background task replays the outbox with backoff until it is empty.

Replays must be idempotent or order-safe: turns are deduplicated by the
ledger's exactly-once index, checkpoints and blob appends are applied in the
order they were made.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jarvismem.backends.outbox import Outbox
from jarvismem.errors import BackendUnavailableError, BlobError, JarvisMemError

log = logging.getLogger(__name__)

Apply = Callable[[dict[str, Any]], Awaitable[None]]


def is_backend_failure(exc: BaseException) -> bool:
    """True for failures of a backend (to be retried later), False for caller bugs.

    jarvismem's own input errors (InvalidIdError, PayloadTooLarge, …) are
    caller bugs and must surface; everything else raised by a client library
    (connection errors, timeouts, service errors, OS errors) is an outage.
    """
    if isinstance(exc, JarvisMemError):
        return isinstance(exc, BackendUnavailableError | BlobError) and not isinstance(
            exc, ValueError
        )
    return isinstance(exc, Exception) and not isinstance(exc, TypeError | AssertionError)


class DurableWriter:
    """Write-through with a durable, ordered, bounded fallback queue."""

    def __init__(
        self,
        name: str,
        outbox: Outbox,
        apply: Apply,
        *,
        timeout: float,
        max_backoff: float = 5.0,
    ) -> None:
        self.name = name
        self.outbox = outbox
        self._apply = apply
        self.timeout = timeout
        self.max_backoff = max_backoff
        self._drainer: asyncio.Task[None] | None = None
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.replayed = 0
        self._closed = False

    @property
    def degraded(self) -> bool:
        """True while writes are queued locally instead of reaching the backend."""
        return len(self.outbox) > 0

    async def submit(self, record: dict[str, Any]) -> bool:
        """Apply ``record`` now, or queue it durably. Returns True if applied now.

        Never raises for a backend failure; a full outbox drops the record,
        which the outbox counts and reports (``dropped``).
        """
        if not self.degraded:
            try:
                # asyncio.timeout, not wait_for: no extra task on the hot path.
                async with asyncio.timeout(self.timeout):
                    await self._apply(record)
                return True
            except Exception as exc:
                if not is_backend_failure(exc):
                    raise
                self._note_failure(exc)
        await self.outbox.put(record)
        self._ensure_drainer()
        return False

    def _note_failure(self, exc: BaseException) -> None:
        first = self.last_error is None
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        self.last_error_at = time.time()
        if first or not self.degraded:
            log.warning(
                "%s unavailable (%s); queueing writes in the local outbox",
                self.name,
                type(exc).__name__,
            )

    def _ensure_drainer(self) -> None:
        if self._closed or (self._drainer is not None and not self._drainer.done()):
            return
        self._drainer = asyncio.get_running_loop().create_task(
            self._drain_loop(), name=f"jarvismem-drain-{self.name}"
        )

    def start(self) -> None:
        """Replay anything a previous process left in the outbox."""
        if self.degraded:
            self._ensure_drainer()

    async def drain_once(self, batch: int = 200) -> int:
        """Replay up to ``batch`` queued records in order; stop at the first failure.

        Returns how many were delivered. Raises the backend error that stopped it.
        """
        if not self.outbox.try_claim_delivery():
            # Another process (or runtime) is replaying this outbox: wait for it
            # rather than send its records a second time, possibly out of order.
            await self.outbox.refresh()
            raise BackendUnavailableError(f"{self.name}: another process is replaying the outbox")
        delivered = 0
        last_seq: int | None = None
        try:
            pending = await self.outbox.peek(batch)
            for seq, record in pending:
                async with asyncio.timeout(self.timeout):
                    await self._apply(record)
                last_seq = seq
                delivered += 1
        finally:
            if last_seq is not None:
                await self.outbox.ack(last_seq)
                self.replayed += delivered
            self.outbox.release_delivery()
        return delivered

    async def _drain_loop(self) -> None:
        delay = 0.05
        while not self._closed and self.degraded:
            try:
                await self.drain_once()
                delay = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not is_backend_failure(exc):
                    # A record the backend can never accept: drop it rather than
                    # wedge the queue behind it, and say so.
                    log.error("%s: dropping an unreplayable outbox record: %s", self.name, exc)
                    head = await self.outbox.peek(1)
                    if head:
                        await self.outbox.ack(head[0][0])
                        self.outbox.dropped += 1
                    continue
                self._note_failure(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
        if not self.degraded and self.last_error is not None:
            log.warning(
                "%s recovered; outbox replayed (%d records so far)", self.name, self.replayed
            )
            self.last_error = None

    async def flush(self, timeout: float) -> bool:
        """Try to empty the outbox within ``timeout`` seconds; True if empty."""
        deadline = time.monotonic() + timeout
        while self.degraded and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(self.drain_once(), max(0.01, deadline - time.monotonic()))
            except Exception:
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        return not self.degraded

    def health(self) -> dict[str, Any]:
        """Pending, dropped and replayed counts and the last error (no secrets)."""
        return {
            "pending": len(self.outbox),
            "dropped": self.outbox.dropped,
            "replayed": self.replayed,
            "degraded": self.degraded,
            "last_error": self.last_error,
        }

    async def close(self) -> None:
        self._closed = True
        if self._drainer is not None:
            self._drainer.cancel()
            try:
                await self._drainer
            except (asyncio.CancelledError, Exception):
                pass
        await self.outbox.close()
