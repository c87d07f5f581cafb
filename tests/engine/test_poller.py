"""The outbox poller: notices what other processes left, runs until cancelled."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jarvismem.engine.poller import poll_outboxes


class _Box:
    def __init__(self, stale: bool) -> None:
        self._stale = stale

    def stale(self) -> bool:
        return self._stale


class _Writer:
    """A durable writer as the poller sees it: an outbox, a degraded flag, notice()."""

    def __init__(self, name: str, *, stale: bool = False, degraded: bool = False) -> None:
        self.name = name
        self.outbox = _Box(stale)
        self.degraded = degraded
        self.noticed = 0

    async def notice(self) -> bool:
        self.noticed += 1
        if self.name == "broken":
            raise OSError("disk gone")
        return True


async def test_only_stale_or_degraded_writers_are_noticed_and_errors_do_not_stop_it() -> None:
    idle, stale, degraded, broken = (
        _Writer("idle"),
        _Writer("stale", stale=True),
        _Writer("degraded", degraded=True),
        _Writer("broken", stale=True),
    )
    writers: list[Any] = [idle, broken, stale, degraded]
    task = asyncio.ensure_future(poll_outboxes(lambda: list(writers), 0.01))
    while min(stale.noticed, degraded.noticed, broken.noticed) < 2:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    assert not task.done()
    assert idle.noticed == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
