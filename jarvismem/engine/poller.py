"""The outbox poller: notices records other processes left in this process's outboxes.

A process that crashed, or another live process on the same machine, may leave
records in an outbox file this process has open. Nothing would wake our writer
for them, so a background task looks at every open outbox file now and then.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Protocol

from jarvismem.tiers.durable import DurableWriter

log = logging.getLogger(__name__)


class PolledEngine(Protocol):
    """What the poller needs of the engine it serves."""

    @property
    def closed(self) -> bool:
        """True once the engine is closed (the poller then ends)."""
        ...

    def open_writers(self) -> list[DurableWriter]:
        """The durable writers alive in the process now."""
        ...


def _stale_flags(writers: list[DurableWriter]) -> list[bool]:
    return [writer.outbox.stale() for writer in writers]


async def poll_outboxes(ref: weakref.ref[PolledEngine], interval: float) -> None:
    """Every ``interval`` s, notice records other processes left in our open outboxes.

    Holds the engine only weakly between rounds, so an engine nobody closes
    (a drop-in view's private one) is still freed. The ``stat`` calls run in
    one worker-thread hop per round, whatever the number of outboxes.
    """
    while True:
        await asyncio.sleep(interval)
        engine = ref()
        if engine is None or engine.closed:
            return
        writers = engine.open_writers()
        del engine
        if not writers:
            continue
        stale = await asyncio.to_thread(_stale_flags, writers)
        for writer, changed in zip(writers, stale, strict=True):
            if changed or writer.degraded:
                try:
                    await writer.notice()
                except Exception as exc:  # a disk error here must not end the poller
                    log.warning("outbox poll of %s failed: %s", writer.name, exc)
        del writers
