"""Athena delivery: ordered and durable through outages, behind the circuit, each turn once."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.outbox import Outbox
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena import TurnOrigin
from tests.tiers.athena.conftest import MakeMemory, ScriptedAthena, contents, wait_for


async def test_writes_delivered_in_order_with_idempotency_keys(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    await mem.record_thought("t0")
    await mem.record_action("a1", tool="search")
    await mem.record_observation("o2")
    await mem.on_task_assigned("task-1", "write report")
    await mem.record_interaction("hello", "hi")
    await wait_for(lambda: len(server.events) == 6)
    assert contents(server) == [
        "t0",
        "a1",
        "o2",
        "Task task-1 assigned: write report",
        "hello",
        "hi",
    ]
    events = [ev for _, ev in server.events]
    keys = [ev["metadata"]["idempotency_key"] for ev in events[:4]]
    assert len(set(keys)) == 4
    assert events[1]["metadata"]["meta.tool"] == "search"
    assert events[3]["metadata"]["meta.task_id"] == "task-1"
    # What the client sent: every event with its role (the agent's, the user's
    # message as "user"), the conversation as events (no interactions route).
    bodies = [r.json for r in server.requests_to("POST", "/events")]
    assert [b["role"] for b in bodies] == ["agent"] * 4 + ["user", "agent"]
    assert [b["type"] for b in bodies[4:]] == ["message", "message"]
    assert all(b["metadata"]["idempotency_key"] for b in bodies)
    assert all(b["metadata"]["occurred_at"].endswith("Z") for b in bodies)
    assert server.requests_to("POST", "/interactions") == []


async def test_writes_kept_in_outbox_during_outage_and_delivered_after(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client, failure_threshold=100)
    server.mode = "error500"
    for i in range(5):
        await mem.record_observation(f"fact {i}")
    await wait_for(lambda: mem.health()["consecutive_failures"] >= 2)
    assert mem.health()["pending"] == 5
    assert server.events == []
    server.mode = "ok"
    await wait_for(lambda: mem.health()["pending"] == 0)
    assert contents(server) == [f"fact {i}" for i in range(5)]


async def test_pending_writes_survive_close_and_are_sent_by_next_memory(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client, cooldown=60)
    server.mode = "error500"
    await mem.record_thought("left behind")
    await wait_for(lambda: mem.health()["consecutive_failures"] >= 1)
    await mem.close()
    server.mode = "ok"
    await make_memory(redis_client)
    await wait_for(lambda: len(server.events) == 1)
    assert contents(server) == ["left behind"]


async def test_circuit_opens_after_consecutive_failures(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client, failure_threshold=3, cooldown=60)
    server.mode = "error500"
    await mem.record_thought("x")
    await wait_for(lambda: mem.health()["circuit"] == "open")
    attempts = len(server.requests_to("POST", "/events"))
    assert attempts == 3
    await mem.record_thought("y")
    await asyncio.sleep(0.1)  # give a (wrong) closed-circuit loop the chance to retry
    assert len(server.requests_to("POST", "/events")) == attempts


async def test_circuit_half_opens_and_closes_after_cooldown(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client, failure_threshold=1, cooldown=0.2)
    server.mode = "error500"
    await mem.record_thought("x")
    await wait_for(lambda: mem.health()["consecutive_failures"] >= 1)
    server.mode = "ok"
    await wait_for(lambda: len(server.events) == 1)
    await wait_for(lambda: mem.health()["circuit"] == "closed")


async def test_flush_delivers_now_and_returns_count(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client, failure_threshold=1, cooldown=60)
    server.mode = "error500"
    await mem.record_thought("a")
    await wait_for(lambda: mem.health()["circuit"] == "open")
    await mem.record_thought("b")
    server.mode = "ok"
    assert await mem.flush(timeout=5) == 2
    assert contents(server) == ["a", "b"]
    assert mem.health()["circuit"] == "closed"


async def test_rejected_record_is_dropped_and_queue_moves_on(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    await mem.flush()
    server.fail_next(1, status=400)
    await mem.record_thought("refused")
    await mem.record_thought("accepted")
    await wait_for(lambda: len(server.events) == 1)
    assert contents(server) == ["accepted"]
    assert mem.health()["rejected"] == 1


async def test_turn_logged_twice_is_sent_once(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any, tmp_path: Path
) -> None:
    first = await make_memory(redis_client)
    second = await make_memory(redis_client, outbox=Outbox(tmp_path / "other.jsonl"))
    for mem in (first, second):
        await mem.record_turn("7", "think", "act", "saw", origin=TurnOrigin("wf", "s1"))
        await mem.flush(timeout=5)
    assert contents(server) == ["think", "act", "saw"]
    assert second.health()["duplicates_skipped"] == 3


async def test_501_on_the_events_route_is_unsupported_not_an_outage(
    make_memory: MakeMemory, scripted: ScriptedAthena, redis_client: Any
) -> None:
    client = AthenaClient(scripted.url, timeout=2.0, max_retries=2, backoff=0.01)
    try:
        mem = await make_memory(redis_client, client=client, failure_threshold=1)
        scripted.script[("POST", "events")] = [501]
        await mem.record_thought("this server cannot take it")
        await mem.record_thought("nor this one")
        await mem.flush(timeout=5.0)
        health = mem.health()
        assert scripted.calls("POST", "/events") == 2  # no retry of a 501
        assert health["circuit"] == "closed" and health["consecutive_failures"] == 0
        assert health["unsupported"] == ["events"]
        assert health["pending"] == 0 and health["rejected"] == 1
        assert [ev["content"] for _, ev in scripted.events] == ["nor this one"]
    finally:
        await client.aclose()


async def test_event_time_is_the_write_time_not_the_delivery_time(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client, failure_threshold=100)
    server.mode = "error500"
    await mem.record_observation("written during the outage")
    written = time.time()
    await asyncio.sleep(1.1)
    server.mode = "ok"
    await mem.flush(timeout=5.0)
    post = server.requests_to("POST", "/events")[-1]  # the delivery that succeeded
    stamp = post.json["metadata"]["occurred_at"]
    occurred = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    assert occurred <= written and post.received_at - occurred >= 1.0


def _dead_letters(outbox: Outbox) -> list[dict[str, Any]]:
    path = outbox.path.with_name(outbox.path.name + ".dead")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_a_refused_record_is_dead_lettered_with_its_reason_and_later_records_carry_on(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    await mem.flush()
    server.fail_next(1, status=422)  # a 4xx other than 401/403/429: refused for good
    await mem.record_thought("refused")
    await mem.record_thought("accepted")
    await wait_for(lambda: len(server.events) == 1)
    await wait_for(lambda: mem.health()["pending"] == 0)
    assert contents(server) == ["accepted"]
    (dead,) = _dead_letters(mem.outbox)
    assert dead["rec"]["content"] == "refused"
    assert dead["reason"].startswith("AthenaBadRequestError")
    assert mem.health()["dead_lettered"] == 1


async def test_a_record_for_another_destination_is_dead_lettered_never_sent(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any, tmp_path: Path
) -> None:
    shared = tmp_path / "one-file.jsonl"
    acme = await make_memory(redis_client, outbox=Outbox(shared))
    server.mode = "error500"
    await acme.record_thought("for acme only")
    await acme.close()
    server.mode = "ok"
    globex = await make_memory(redis_client, outbox=Outbox(shared), tenant_id="globex")
    await globex.flush(timeout=5)
    assert server.events == []
    (dead,) = _dead_letters(globex.outbox)
    assert dead["rec"]["content"] == "for acme only"
    assert dead["reason"].startswith("MisdirectedRecordError")
    assert globex.health()["dead_lettered"] == 1 and globex.health()["misdirected"] == 1
    assert not shared.with_name(shared.name + ".misdirected").exists()
