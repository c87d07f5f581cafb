"""DeliveryMarkers: claim an event's key, mark it sent, release it; dead claimants."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest
import redis.asyncio as aioredis

from jarvismem.backends.redis import RedisBackend
from jarvismem.keys import KeySpace
from jarvismem.tiers.athena import markers as markers_module
from jarvismem.tiers.athena.gate import RequestGate
from jarvismem.tiers.athena.markers import DeliveryMarkers, _claimant_is_dead
from tests.tiers.athena.conftest import AGENT, TENANT, USER

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


async def test_claim_of_a_dead_local_process_is_taken_over_at_once(
    redis_client: Any, keyspace: KeySpace, client: Any
) -> None:
    marker = keyspace.athena_sent(_DEST, "k1")
    # Its lease has a minute left, yet its owner is gone: no need to wait it out.
    await redis_client.set(marker, f"pending:{socket.gethostname()}:{_NO_SUCH_PID}:x", px=60_000)
    markers = DeliveryMarkers(
        redis_client, keyspace, _DEST, dedupe_ttl=60, gate=RequestGate(client)
    )
    claim = await asyncio.wait_for(markers.claim("k1"), timeout=2.0)
    assert claim and claim.startswith(f"pending:{socket.gethostname()}:{os.getpid()}:")


async def test_claim_waits_for_a_live_claimant_and_skips_what_it_sent(
    redis_client: Any, keyspace: KeySpace, client: Any
) -> None:
    gate = RequestGate(client)
    other = DeliveryMarkers(redis_client, keyspace, _DEST, dedupe_ttl=60, gate=gate)
    mine = DeliveryMarkers(redis_client, keyspace, _DEST, dedupe_ttl=60, gate=gate)
    held = await other.claim("k1")
    assert held
    waiting = asyncio.create_task(mine.claim("k1"))
    await asyncio.sleep(0.2)
    assert not waiting.done()  # another deliverer is sending it right now
    await other.mark_sent("k1", held)
    assert await asyncio.wait_for(waiting, timeout=3.0) is None


async def test_unreachable_redis_means_sending_without_a_claim(
    keyspace: KeySpace, client: Any
) -> None:
    down = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        markers = DeliveryMarkers(down, keyspace, _DEST, dedupe_ttl=60, gate=RequestGate(client))
        assert await markers.claim("k1") == ""  # at-least-once while Redis is away
        await markers.release("k1", "pending:h:1:x")  # best effort: logged, not raised
        await markers.mark_sent("k1", "pending:h:1:x")
    finally:
        await down.aclose()


async def test_markers_work_through_a_redis_backend(
    redis_client: Any, keyspace: KeySpace, client: Any
) -> None:
    # What the runtime hands the tier: its RedisBackend, not a redis-py client.
    backend = RedisBackend.adopt(redis_client)
    markers = DeliveryMarkers(backend, keyspace, _DEST, dedupe_ttl=60, gate=RequestGate(client))
    first = await markers.claim("k1")
    assert first and first.startswith("pending:")
    await markers.release("k1", first)
    second = await asyncio.wait_for(markers.claim("k1"), timeout=2.0)
    assert second and second != first
    await markers.mark_sent("k1", second)
    assert await markers.claim("k1") is None
    ttl = await redis_client.ttl(keyspace.athena_sent(_DEST, "k1"))
    assert 0 < ttl <= 60  # kept for the dedupe TTL, not the claim lease


async def test_a_redis_that_never_answers_costs_each_marker_at_most_marker_timeout(
    keyspace: KeySpace, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server that accepts connections and never replies: only MARKER_TIMEOUT
    # ends a claim, a mark or a release (redis-py has no socket timeout here).
    monkeypatch.setattr(markers_module, "MARKER_TIMEOUT", 0.2)
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    mute = aioredis.Redis(host="127.0.0.1", port=port)
    try:
        markers = DeliveryMarkers(
            RedisBackend.adopt(mute), keyspace, _DEST, dedupe_ttl=60, gate=RequestGate(client)
        )
        async with asyncio.timeout(5.0):  # far above 3 x 0.2 s; a hang fails here
            assert await markers.claim("k1") == ""  # delivery goes on, at-least-once
            await markers.mark_sent("k1", "pending:h:1:x")
            await markers.release("k1", "pending:h:1:x")
    finally:
        await mute.aclose()
        silent.close()
