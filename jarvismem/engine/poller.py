"""The outbox poller: notices records other processes left in this process's outboxes.

A process that crashed, or another live process on the same machine, may leave
records in an outbox file this process has open. A writer notices them on its
own next write; for a writer that stays idle, a background task owned by the
runtime looks at every open outbox file now and then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from jarvismem.tiers.durable import DurableWriter

log = logging.getLogger(__name__)


def _stale_flags(writers: list[DurableWriter]) -> list[bool]:
    return [writer.outbox.stale() for writer in writers]


async def poll_outboxes(open_writers: Callable[[], list[DurableWriter]], interval: float) -> None:
    """Every ``interval`` s, notice records other processes left in our open outboxes.

    Runs until cancelled (the runtime that started it cancels it when closed).
    The ``stat`` calls run in one worker-thread hop per round, whatever the
    number of outboxes.
    """
    while True:
        await asyncio.sleep(interval)
        writers = open_writers()
        if not writers:
            continue
        stale = await asyncio.to_thread(_stale_flags, writers)
        for writer, changed in zip(writers, stale, strict=True):
            if changed or writer.degraded:
                try:
                    await writer.notice()
                except Exception as exc:  # a disk error here must not end the poller
                    log.warning("outbox poll of %s failed: %s", writer.name, exc)
