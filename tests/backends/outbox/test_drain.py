"""OutboxDrainer and deliver_pending: in order, stop at the first failure, one deliverer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.outbox.drain import OutboxDrainer, deliver_pending
from tests.backends.outbox.conftest import OpenOutbox, pending_ids


async def test_deliver_pending_replays_in_order(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    for i in range(7):
        await ob.put({"i": i})
    got: list[int] = []

    async def send(rec: dict[str, Any]) -> None:
        got.append(rec["i"])

    assert await deliver_pending(ob, send, batch=3) == 7
    assert got == list(range(7))
    assert len(ob) == 0


async def test_deliver_pending_stops_at_first_failure_and_keeps_rest(
    open_outbox: OpenOutbox, caplog: pytest.LogCaptureFixture
) -> None:
    ob = open_outbox()
    for i in range(5):
        await ob.put({"i": i})

    async def send(rec: dict[str, Any]) -> None:
        if rec["i"] == 2:
            raise ConnectionError("backend down")

    with caplog.at_level("WARNING", logger="jarvismem.backends.outbox"):
        assert await deliver_pending(ob, send) == 2
    assert await pending_ids(ob) == [2, 3, 4]
    assert any(
        "stopped after 2 records (ConnectionError)" in r.getMessage() for r in caplog.records
    )


async def test_drainer_exposes_the_error_that_stopped_it(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    await ob.put({"i": 0})

    async def send(rec: dict[str, Any]) -> None:
        raise TimeoutError("slow")

    drainer = OutboxDrainer(ob, send)
    assert await drainer.run_once() == 0
    assert isinstance(drainer.last_error, TimeoutError)


async def test_max_records_bounds_one_run(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    for i in range(5):
        await ob.put({"i": i})
    sent: list[int] = []

    async def send(rec: dict[str, Any]) -> None:
        sent.append(rec["i"])

    drainer = OutboxDrainer(ob, send, batch=2)
    assert await drainer.run_once(max_records=3) == 3
    assert drainer.last_error is None
    assert await pending_ids(ob) == [3, 4]
    assert drainer.delivered == 3


async def test_a_cancelled_run_acks_what_it_delivered(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    ob = open_outbox()
    for i in range(5):
        await ob.put({"i": i})
    stuck = asyncio.Event()

    async def send(rec: dict[str, Any]) -> None:
        if rec["i"] == 3:
            stuck.set()
            await asyncio.Event().wait()  # a backend that never answers

    drainer = OutboxDrainer(ob, send, ack_every=100)
    run = asyncio.ensure_future(drainer.run_once())
    await asyncio.wait_for(stuck.wait(), 5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await ob.close()
    reopened = open_outbox()  # what a restart would replay
    assert await pending_ids(reopened) == [3, 4]


async def test_one_deliverer_at_a_time_per_path(open_outbox: OpenOutbox) -> None:
    mine, theirs = open_outbox(), open_outbox()  # two descriptors: like two processes
    for i in range(5):
        await mine.put({"i": i})
    assert theirs.try_claim_delivery()
    sent: list[int] = []

    async def send(record: dict[str, Any]) -> None:
        sent.append(record["i"])

    drainer = OutboxDrainer(mine, send)
    assert await drainer.run_once() == 0 and sent == []
    theirs.release_delivery()
    assert await drainer.run_once() == 5 and sent == [0, 1, 2, 3, 4]
    assert theirs.try_claim_delivery()  # the drainer released its claim after the run
    theirs.release_delivery()
