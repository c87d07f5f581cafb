"""The one deliverer: in order, outages stop a pass, refusals are dead-lettered, one per file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.outbox.deliver import Deliverer, DeliveryPacing, RecordDestination
from jarvismem.errors import BackendRejectedError, BackendUnavailableError
from tests.backends.outbox.conftest import OpenOutbox, pending_ids


def dead_letters(outbox_path: Path) -> list[dict[str, Any]]:
    dead = outbox_path.with_name(outbox_path.name + ".dead")
    return [json.loads(line) for line in dead.read_text(encoding="utf-8").splitlines()]


async def test_a_pass_replays_in_order(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    for i in range(7):
        await ob.put({"i": i})
    got: list[int] = []

    async def send(rec: dict[str, Any]) -> None:
        got.append(rec["i"])

    deliverer = Deliverer(ob, send, name="test", pacing=DeliveryPacing(batch=3))
    assert await deliverer.run_once() == 7
    assert got == list(range(7))
    assert len(ob) == 0 and deliverer.delivered == 7


async def test_an_outage_stops_the_pass_and_keeps_that_record_and_the_rest(
    open_outbox: OpenOutbox,
) -> None:
    ob = open_outbox()
    for i in range(5):
        await ob.put({"i": i})

    async def send(rec: dict[str, Any]) -> None:
        if rec["i"] == 2:
            raise BackendUnavailableError("backend down")

    deliverer = Deliverer(ob, send, name="test")
    assert await deliverer.run_once() == 2
    assert await pending_ids(ob) == [2, 3, 4]
    assert isinstance(deliverer.last_error, BackendUnavailableError)


async def test_a_time_out_is_an_outage(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    await ob.put({"i": 0})

    async def send(rec: dict[str, Any]) -> None:
        raise TimeoutError("slow")

    deliverer = Deliverer(ob, send, name="test")
    assert await deliverer.run_once() == 0
    assert isinstance(deliverer.last_error, TimeoutError)
    assert await pending_ids(ob) == [0]


async def test_a_refusal_is_dead_lettered_with_its_reason_and_the_rest_carry_on(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    ob = open_outbox()
    for i in range(3):
        await ob.put({"i": i})
    got: list[int] = []
    told: list[tuple[int, str]] = []

    async def send(rec: dict[str, Any]) -> None:
        if rec["i"] == 1:
            raise BackendRejectedError("WRONGTYPE")
        got.append(rec["i"])

    deliverer = Deliverer(
        ob, send, name="test", on_refused=lambda rec, exc: told.append((rec["i"], repr(exc)))
    )
    assert await deliverer.run_once() == 3
    assert got == [0, 2] and deliverer.last_error is None
    (dead,) = dead_letters(outbox_path)
    assert dead["seq"] == 2 and dead["rec"] == {"i": 1}
    assert dead["reason"] == "BackendRejectedError: WRONGTYPE"
    assert ob.dead == 1 and deliverer.refused == 1
    assert told == [(1, "BackendRejectedError('WRONGTYPE')")]


async def test_a_record_stamped_for_another_destination_is_refused_never_applied(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    theirs = open_outbox(destination="aaaa")
    await theirs.put({"i": 0})
    await theirs.close()
    mine = open_outbox(destination="bbbb")
    await mine.put({"i": 1})
    got: list[int] = []

    async def send(rec: dict[str, Any]) -> None:
        got.append(rec["i"])

    assert await Deliverer(mine, send, name="test").run_once() == 2
    assert got == [1]
    (dead,) = dead_letters(outbox_path)
    assert dead["rec"] == {"i": 0} and "destination aaaa" in dead["reason"]
    assert mine.foreign == 1 and mine.dead == 1 and len(mine) == 0


async def test_a_record_that_says_it_goes_elsewhere_is_refused_never_applied(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    ob = open_outbox()
    await ob.put({"i": 0, "dest": "acme"})
    await ob.put({"i": 1, "dest": "globex"})
    got: list[int] = []

    async def send(rec: dict[str, Any]) -> None:
        got.append(rec["i"])

    deliverer = Deliverer(
        ob, send, name="test", destination=RecordDestination("globex", lambda r: r.get("dest"))
    )
    assert await deliverer.run_once() == 2
    assert got == [1]
    (dead,) = dead_letters(outbox_path)
    assert dead["reason"].startswith("MisdirectedRecordError") and "acme" in dead["reason"]


async def test_max_records_bounds_one_pass(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    for i in range(5):
        await ob.put({"i": i})
    sent: list[int] = []

    async def send(rec: dict[str, Any]) -> None:
        sent.append(rec["i"])

    deliverer = Deliverer(ob, send, name="test", pacing=DeliveryPacing(batch=2))
    assert await deliverer.run_once(max_records=3) == 3
    assert deliverer.last_error is None
    assert await pending_ids(ob) == [3, 4]
    assert deliverer.delivered == 3


async def test_a_cancelled_pass_acks_what_it_delivered(
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

    deliverer = Deliverer(ob, send, name="test", pacing=DeliveryPacing(ack_every=100))
    run = asyncio.ensure_future(deliverer.run_once())
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

    deliverer = Deliverer(mine, send, name="test")
    assert await deliverer.run_once() is None and sent == []  # the claim is theirs
    theirs.release_delivery()
    assert await deliverer.run_once() == 5 and sent == [0, 1, 2, 3, 4]
    assert theirs.try_claim_delivery()  # the deliverer released its claim after the pass
    theirs.release_delivery()
