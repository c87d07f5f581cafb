"""Athena sessions: one per (tenant, user, agent), cached in Redis, renewed when forgotten."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.outbox import Outbox
from jarvismem.backends.redis import RedisBackend
from jarvismem.keys import KeySpace
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena.config import AthenaTierConfig
from jarvismem.tiers.athena.gate import RequestGate
from jarvismem.tiers.athena.session import AthenaSessions
from tests.conftest import REAL_REDIS_URL
from tests.tiers.athena.conftest import (
    AGENT,
    TENANT,
    USER,
    MakeMemory,
    ScriptedAthena,
    wait_for,
)

REPO = Path(__file__).resolve().parents[3]


def _sessions(client: AthenaClient, redis: Any, keyspace: KeySpace) -> AthenaSessions:
    return AthenaSessions(
        client,
        redis,
        keyspace,
        config=AthenaTierConfig(tenant_id=TENANT, user_id=USER, session_lock_ttl=30.0),
        agent_id=AGENT,
        gate=RequestGate(client),
    )


def _session_key(keyspace: KeySpace, server: FakeAthenaServer) -> str:
    return keyspace.athena_session(KeySpace.athena_destination(TENANT, USER, AGENT, server.url))


async def test_session_created_once_under_concurrent_creates(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any, tmp_path: Path
) -> None:
    memories = await asyncio.gather(
        *(make_memory(redis_client, outbox=Outbox(tmp_path / f"{i}.jsonl")) for i in range(20))
    )
    assert server.sessions_created == 1
    assert len({m.session_id for m in memories}) == 1


async def test_session_created_once_without_redis_in_one_process(
    server: FakeAthenaServer, make_memory: MakeMemory, tmp_path: Path
) -> None:
    # The memories share the client, which keeps the id and its creation lock.
    await asyncio.gather(
        *(make_memory(None, outbox=Outbox(tmp_path / f"{i}.jsonl")) for i in range(5))
    )
    assert server.sessions_created == 1


async def test_cached_session_reused_by_new_memory(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any, keyspace: KeySpace
) -> None:
    first = await make_memory(redis_client)
    await first.close()
    second = await make_memory(redis_client)
    assert second.session_id == first.session_id
    assert server.sessions_created == 1
    stored = await redis_client.get(_session_key(keyspace, server))
    assert stored.decode() == first.session_id


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    import redis.asyncio as aioredis
    from jarvismem.backends.athena import AthenaClient
    from jarvismem.backends.outbox import Outbox
    from jarvismem.keys import KeySpace
    from jarvismem.tiers.athena import AthenaMemory

    async def main(url, redis_url, ns, outbox):
        r = aioredis.Redis.from_url(redis_url)
        c = AthenaClient(url)
        m = await AthenaMemory.create("agent1", c, r, keyspace=KeySpace(ns), tenant_id="acme",
                                      user_id="alice", outbox=Outbox(Path(outbox)))
        print(m.session_id)
        await m.close(); await c.aclose(); await r.aclose()

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_session_created_once_across_two_processes(
    server: FakeAthenaServer, real_redis: Any, keyspace: KeySpace, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(i: int) -> subprocess.Popen[bytes]:
        args = [server.url, REAL_REDIS_URL, keyspace.namespace, str(tmp_path / f"p{i}.jsonl")]
        return subprocess.Popen(
            [sys.executable, "-c", _CHILD, *args], stdout=subprocess.PIPE, env=env
        )

    procs = [run(0), run(1)]
    outs = [await asyncio.to_thread(p.communicate, timeout=60) for p in procs]
    ids = {out.decode().strip() for out, _ in outs}
    assert all(p.returncode == 0 for p in procs)
    assert len(ids) == 1
    assert server.sessions_created == 1


async def test_forgotten_session_is_recreated_and_cache_replaced(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any, keyspace: KeySpace
) -> None:
    mem = await make_memory(redis_client)
    old = mem.session_id
    server.forget_session(old)
    await mem.record_thought("after restart of the server")
    await wait_for(lambda: len(server.events) == 1)
    assert mem.session_id != old
    assert server.events[0][0] == mem.session_id
    stored = await redis_client.get(_session_key(keyspace, server))
    assert stored.decode() == mem.session_id


async def test_unreachable_redis_falls_back_to_the_client_cache(
    server: FakeAthenaServer,
    client: AthenaClient,
    keyspace: KeySpace,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Nothing listens on port 1: every command fails to connect.
    down = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        sessions = _sessions(client, down, keyspace)
        first = await sessions.ensure()
        again = await _sessions(client, down, keyspace).ensure()
    finally:
        await down.aclose()
    assert first == again
    assert server.sessions_created == 1
    assert "Redis unavailable for the Athena session cache (ConnectionError)" in caplog.text


async def test_refusing_redis_falls_back_to_the_client_cache(
    server: FakeAthenaServer, client: AthenaClient, real_redis: Any, keyspace: KeySpace
) -> None:
    # A session key of the wrong type: every GET is refused (WRONGTYPE), which
    # must not stop the tier from getting a session.
    await real_redis.rpush(_session_key(keyspace, server), "not-an-id")
    sessions = _sessions(client, real_redis, keyspace)
    assert await sessions.current() == sessions.session_id != ""
    assert server.sessions_created == 1


async def test_sessions_through_a_redis_backend_share_the_id_cached_in_its_redis(
    server: FakeAthenaServer, client: AthenaClient, redis_client: Any, keyspace: KeySpace
) -> None:
    # What the runtime hands the tier: its RedisBackend, not a redis-py client.
    backend = RedisBackend.adopt(redis_client)
    first = await _sessions(client, backend, keyspace).current()
    assert (await redis_client.get(_session_key(keyspace, server))).decode() == first
    # A reader of the same backend finds it without creating one; a raw-client
    # holder of the same Redis (another process) finds the same id.
    assert await _sessions(client, backend, keyspace).lookup() == first
    assert await _sessions(client, redis_client, keyspace).current() == first
    assert server.sessions_created == 1


async def test_renew_replaces_only_the_stale_id(
    server: FakeAthenaServer, client: AthenaClient, redis_client: Any, keyspace: KeySpace
) -> None:
    sessions = _sessions(client, redis_client, keyspace)
    old = await sessions.current()
    fresh = await sessions.renew(old)
    assert fresh != old and sessions.session_id == fresh
    # Another holder of the same stale id finds the replacement instead of making a third.
    other = _sessions(client, redis_client, keyspace)
    assert await other.ensure(stale=old) == fresh
    assert server.sessions_created == 2


async def test_session_creation_refused_once_the_gate_closes(
    server: FakeAthenaServer, client: AthenaClient, keyspace: KeySpace
) -> None:
    gate = RequestGate(client)
    sessions = AthenaSessions(
        client,
        None,
        KeySpace("t" + os.urandom(6).hex()),
        config=AthenaTierConfig(tenant_id=TENANT, user_id=USER, session_lock_ttl=30.0),
        agent_id=AGENT,
        gate=gate,
    )
    gate.close()
    with pytest.raises(asyncio.CancelledError):
        await sessions.current()
    assert server.sessions_created == 0


async def _scripted_memory(
    make_memory: MakeMemory, scripted: ScriptedAthena, redis: Any
) -> tuple[AthenaClient, Any]:
    client = AthenaClient(scripted.url, timeout=2.0, max_retries=0, backoff=0.01)
    memory = await make_memory(redis, client=client, confirm_delay=0.01, failure_threshold=100)
    return client, memory


async def test_one_transient_404_does_not_replace_the_session(
    make_memory: MakeMemory, scripted: ScriptedAthena, redis_client: Any
) -> None:
    # The server answers 404 for a datastore hiccup on the session lookup too.
    client, mem = await _scripted_memory(make_memory, scripted, redis_client)
    try:
        assert scripted.sessions == ["s1"]
        scripted.script[("POST", "events")] = [404]
        await mem.record_thought("survives a hiccup")
        assert await mem.flush(timeout=5.0) == 1
        assert scripted.sessions == ["s1"] and mem.session_id == "s1"
        assert [(sid, ev["content"]) for sid, ev in scripted.events] == [
            ("s1", "survives a hiccup")
        ]
        scripted.script[("GET", "context")] = [404]
        assert await mem.get_memory_context() is not None
        assert scripted.sessions == ["s1"]
    finally:
        await client.aclose()


async def test_repeated_404s_while_the_server_is_degraded_keep_the_session(
    make_memory: MakeMemory, scripted: ScriptedAthena, redis_client: Any
) -> None:
    client, mem = await _scripted_memory(make_memory, scripted, redis_client)
    try:
        scripted.health_status = "degraded"
        scripted.script[("POST", "events")] = [404] * 1000  # until the datastore is back
        await mem.record_thought("kept for later")
        await wait_for(lambda: mem.health()["consecutive_failures"] >= 1)
        assert scripted.sessions == ["s1"]  # not replaced on an unhealthy server's 404s
        assert mem.health()["pending"] == 1
        assert scripted.calls("GET", "/api/v1/health") >= 1
        assert "not healthy" in (mem.health()["last_error"] or "")
        # Once the session lookups work again, the same session takes the record.
        scripted.script[("POST", "events")] = []
        await wait_for(lambda: len(scripted.events) == 1)
        assert scripted.events[0][0] == "s1" and scripted.sessions == ["s1"]
    finally:
        await mem.close()
        await client.aclose()


async def test_a_confirmed_lost_session_is_replaced_once(
    make_memory: MakeMemory, scripted: ScriptedAthena, redis_client: Any
) -> None:
    client, mem = await _scripted_memory(make_memory, scripted, redis_client)
    try:
        scripted.script[("POST", "events")] = [404, 404]
        await mem.record_thought("to the new session")
        assert await mem.flush(timeout=5.0) == 1
        assert scripted.sessions == ["s1", "s2"]
        assert scripted.events[0][0] == "s2"
    finally:
        await client.aclose()


async def test_sessions_carry_namespace_and_agent_metadata(
    server: FakeAthenaServer, make_memory: MakeMemory, keyspace: KeySpace, redis_client: Any
) -> None:
    await make_memory(redis_client)
    [create] = server.requests_to("POST", "/api/v1/sessions")
    assert create.json["metadata"] == {"namespace": keyspace.namespace, "agent": AGENT}


async def test_the_sessions_take_tenant_user_and_timings_from_the_tier_config(
    keyspace: KeySpace,
) -> None:
    client = AthenaClient("http://127.0.0.1:9")
    try:
        config = AthenaTierConfig(tenant_id="tn", user_id="us", session_lock_ttl=12.0)
        sessions = AthenaSessions(
            client, None, keyspace, config=config, agent_id="ag", gate=RequestGate(client)
        )
        assert sessions.agent_id == "ag"
        destination = KeySpace.athena_destination("tn", "us", "ag", "http://127.0.0.1:9")
        assert sessions._key == keyspace.athena_session(destination)
        assert sessions._lock_ttl_ms == 12_000
        assert sessions._confirm_delay == config.confirm_delay
    finally:
        await client.aclose()


async def _sessions_on_two_servers(
    server: FakeAthenaServer, client: AthenaClient, redis: Any, keyspace: KeySpace
) -> None:
    # Same tenant, user, agent and namespace: only the server differs.
    with FakeAthenaServer() as other_server:
        other = AthenaClient(other_server.url, timeout=2.0, max_retries=1, backoff=0.01)
        try:
            on_a = await _sessions(client, redis, keyspace).current()
            on_b = await _sessions(other, redis, keyspace).current()
            assert other_server.sessions_created == 1
            assert on_b != on_a and on_b in other_server.session_ids
            # Each server keeps its own: A's id is still the one used against A.
            assert await _sessions(client, redis, keyspace).current() == on_a
            assert server.sessions_created == 1
        finally:
            await other.aclose()


async def test_a_session_cached_in_redis_is_never_used_on_another_server(
    server: FakeAthenaServer, client: AthenaClient, redis_client: Any, keyspace: KeySpace
) -> None:
    await _sessions_on_two_servers(server, client, redis_client, keyspace)


async def test_a_session_cached_without_redis_is_never_used_on_another_server(
    server: FakeAthenaServer, client: AthenaClient, keyspace: KeySpace
) -> None:
    await _sessions_on_two_servers(server, client, None, keyspace)
