"""The outbox poller: notices what other processes left, ends with its engine."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

from jarvismem.engine.poller import PolledEngine, poll_outboxes


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


class _Engine:
    def __init__(self, writers: list[Any]) -> None:
        self.writers = writers
        self.closed = False

    def open_writers(self) -> list[Any]:
        return list(self.writers)


def _ref(engine: _Engine) -> weakref.ref[PolledEngine]:
    return weakref.ref(engine)  # type: ignore[arg-type]


async def test_only_stale_or_degraded_writers_are_noticed_and_errors_do_not_stop_it() -> None:
    idle, stale, degraded, broken = (
        _Writer("idle"),
        _Writer("stale", stale=True),
        _Writer("degraded", degraded=True),
        _Writer("broken", stale=True),
    )
    engine = _Engine([idle, broken, stale, degraded])
    task = asyncio.ensure_future(poll_outboxes(_ref(engine), 0.01))
    await asyncio.sleep(0.1)
    assert not task.done()
    assert idle.noticed == 0
    assert stale.noticed >= 2 and degraded.noticed >= 2 and broken.noticed >= 2
    engine.closed = True
    await asyncio.wait_for(task, 1.0)


async def test_the_poller_ends_when_its_engine_is_freed() -> None:
    engine = _Engine([])
    task = asyncio.ensure_future(poll_outboxes(_ref(engine), 0.01))
    await asyncio.sleep(0.03)
    del engine
    gc.collect()
    await asyncio.wait_for(task, 1.0)
