"""Delivery: replay an outbox in order through a ``send`` callable.

Delivery is at-least-once: a crash between a successful send and its ``ack``
replays that record. One deliverer at a time per path on the machine: a
drainer that cannot take the outbox's delivery claim lets the holder deliver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from jarvismem import telemetry
from jarvismem.backends.outbox.store import Outbox
from jarvismem.defaults import OUTBOX_CLAIM_POLL_SECONDS

__all__ = ["OutboxDrainer", "Send", "deliver_pending"]

log = telemetry.logger(__name__)

Send = Callable[[dict[str, Any]], Awaitable[None]]


class OutboxDrainer:
    """Replays an outbox in order through ``send``, stopping at the first failure.

    Delivered records are acked every ``ack_every`` records and whenever a run
    stops, so a crash replays at most ``ack_every`` records (at-least-once).
    ``last_error`` holds the exception that stopped the last run (None when it
    emptied the outbox or reached its limit). ``name``: the outbox's name in
    telemetry (its depth gauge and delivery spans).
    """

    def __init__(
        self,
        outbox: Outbox,
        send: Send,
        *,
        batch: int = 100,
        ack_every: int = 10,
        name: str = "outbox",
    ) -> None:
        self.outbox = outbox
        self.send = send
        self.batch = max(1, batch)
        self.ack_every = max(1, ack_every)
        self.name = name
        self.delivered = 0
        self.last_error: BaseException | None = None
        telemetry.watch_outbox(outbox, name)

    @telemetry.outbox_delivery(lambda drainer: str(drainer.name))
    async def run_once(self, max_records: int | None = None) -> int:
        """Deliver pending records until empty, a failure, or ``max_records``.

        Returns how many were delivered in this run.
        """
        self.last_error = None
        if not self.outbox.try_claim_delivery():
            # Another deliverer is replaying this file right now: let it.
            await asyncio.sleep(OUTBOX_CLAIM_POLL_SECONDS)
            await self.outbox.refresh()
            return 0
        try:
            return await self._run_claimed(max_records)
        finally:
            self.outbox.release_delivery()

    async def _run_claimed(self, max_records: int | None) -> int:
        done = 0
        while max_records is None or done < max_records:
            want = self.batch if max_records is None else min(self.batch, max_records - done)
            pending = await self.outbox.peek(want)
            if not pending:
                break
            unacked: int | None = None
            try:
                for seq, record in pending:
                    try:
                        await self.send(record)
                    except Exception as exc:
                        self.last_error = exc
                        return done
                    unacked = seq
                    done += 1
                    self.delivered += 1
                    if done % self.ack_every == 0:
                        await self.outbox.ack(seq)
                        unacked = None
            finally:
                # Acks are a file write each: one per ``ack_every`` records, and
                # always before returning, even on a failure or a cancellation.
                if unacked is not None:
                    await self.outbox.ack(unacked)
        return done


async def deliver_pending(outbox: Outbox, send: Send, *, batch: int = 100) -> int:
    """Replay ``outbox`` in order through ``send``; stop at the first failure.

    The failed record and everything after it stay pending. Returns how many
    records were delivered.
    """
    drainer = OutboxDrainer(outbox, send, batch=batch)
    delivered = await drainer.run_once()
    if drainer.last_error is not None:
        log.warning(
            "outbox %s: delivery stopped after %d records (%s)",
            outbox.path.name,
            delivered,
            type(drainer.last_error).__name__,
        )
    return delivered
