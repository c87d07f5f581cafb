"""Athena delivery: ordered and durable through outages, circuit breaker, effectively once."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.outbox import Outbox
from jarvismem.keys import KeySpace
from jarvismem.resilience import Backoff
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena.delivery import DeliveryCircuit, DeliveryMarkers, _claimant_is_dead
from jarvismem.tiers.athena.gate import RequestGate
from tests.tiers.athena.conftest import AGENT, TENANT, USER, MakeMemory, contents, wait_for

# --- the circuit, on a hand-driven clock ---------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _circuit(clock: _Clock, threshold: int = 3, cooldown: float = 30.0) -> DeliveryCircuit:
    return DeliveryCircuit(
        failure_threshold=threshold,
        cooldown=cooldown,
        backoff=Backoff(base=0.5, cap=1.5, jitter="none"),
        clock=clock,
    )


def test_circuit_backs_off_exponentially_below_the_threshold() -> None:
    clock = _Clock()
    circuit = _circuit(clock, threshold=4)
    assert [circuit.record_failure() for _ in range(3)] == [0.5, 1.0, 1.5]  # capped
    assert circuit.state == "closed" and circuit.failures == 3
    assert circuit.wait() == pytest.approx(1.5)


def test_circuit_opens_at_the_threshold_for_the_cooldown() -> None:
    clock = _Clock()
    circuit = _circuit(clock, threshold=2, cooldown=30.0)
    circuit.record_failure()
    assert circuit.record_failure() is None
    assert circuit.state == "open" and circuit.reported_state() == "open"
    assert circuit.wait() == pytest.approx(30.0)
    clock.now += 30.0
    assert circuit.reported_state() == "half_open"


def test_failed_trial_reopens_and_success_closes() -> None:
    clock = _Clock()
    circuit = _circuit(clock, threshold=5, cooldown=10.0)
    circuit.half_open()
    assert circuit.record_failure() is None  # one failed trial is enough
    assert circuit.state == "open"
    circuit.half_open()
    assert circuit.record_success() is True
    assert circuit.is_closed and circuit.failures == 0
    assert circuit.record_success() is False  # nothing to recover from


def test_pause_delays_without_counting_a_failure() -> None:
    clock = _Clock()
    circuit = _circuit(clock)
    circuit.pause(7.0)
    assert circuit.wait() == pytest.approx(7.0) and circuit.failures == 0


# --- markers -------------------------------------------------------------------------------


# Above the largest pid_max Linux allows: no process has it.
_NO_SUCH_PID = 2**22 + 7
_DEST = KeySpace.athena_destination(TENANT, USER, AGENT, "http://athena.test")


def test_only_a_local_vanished_process_has_a_dead_claim() -> None:
    host = socket.gethostname()
    assert _claimant_is_dead(f"pending:{host}:{_NO_SUCH_PID}:x")
    assert not _claimant_is_dead(f"pending:{host}:{os.getpid()}:x")  # ourselves
    assert not _claimant_is_dead(f"pending:other-host:{_NO_SUCH_PID}:x")  # only its lease ends it
    assert not _claimant_is_dead("pending:dead-process")  # not a claim of ours


async def test_markers_claim_once_then_skip_once_sent(
    redis_client: Any, keyspace: KeySpace, client: Any
) -> None:
    markers = DeliveryMarkers(
        redis_client, keyspace, _DEST, dedupe_ttl=60, gate=RequestGate(client)
    )
    claim = await markers.claim("k1")
    assert claim and claim.startswith("pending:")
    await markers.mark_sent("k1", claim)
    assert await markers.claim("k1") is None


async def test_markers_without_redis_send_unclaimed(keyspace: KeySpace, client: Any) -> None:
    markers = DeliveryMarkers(None, keyspace, _DEST, dedupe_ttl=60, gate=RequestGate(client))
    assert await markers.claim("k1") == ""
    assert await markers.claim(None) == ""


async def test_released_claim_can_be_taken_again(
    redis_client: Any, keyspace: KeySpace, client: Any
) -> None:
    markers = DeliveryMarkers(
        redis_client, keyspace, _DEST, dedupe_ttl=60, gate=RequestGate(client)
    )
    first = await markers.claim("k1")
    assert first
    await markers.release("k1", first)
    second = await asyncio.wait_for(markers.claim("k1"), timeout=2.0)
    assert second and second != first


# --- the loop, against the fake server ----------------------------------------------------


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
    assert events[1]["metadata"]["tool"] == "search"
    assert events[3]["metadata"]["task_id"] == "task-1"


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
        await mem.record_turn("7", "think", "act", "saw", workflow_id="wf", step_id="s1")
        await mem.flush(timeout=5)
    assert contents(server) == ["think", "act", "saw"]
    assert second.health()["duplicates_skipped"] == 3
