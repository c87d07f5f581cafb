"""Athena state per agent: the id sent to Athena, the LRU bound, the sweeper."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.redis import RedisBackend
from jarvismem.engine.athena_agents import SWEEP_BACKOFF, AthenaAgents, AthenaFactory
from jarvismem.keys import MAX_ID_LENGTH, KeySpace
from jarvismem.redaction import no_redaction
from jarvismem.resilience import Backoff
from jarvismem.settings import Settings
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena import TurnOrigin
from tests.conftest import wait_for


@pytest.fixture
async def client(athena_server: FakeAthenaServer) -> AsyncIterator[AthenaClient]:
    async with AthenaClient(athena_server.url, timeout=2.0) as c:
        yield c


def _factory(
    client: AthenaClient, settings: Settings, namespace: str | None = None
) -> AthenaFactory:
    return AthenaFactory(
        client,
        None,
        keyspace=KeySpace(namespace or settings.jarvismem_namespace),
        settings=settings,
        redactor=no_redaction,
    )


def test_the_namespace_and_optionally_the_agent_go_into_the_athena_user_id(
    settings: Settings,
) -> None:
    # The server isolates mid-term memory by (tenant, user), not by agent.
    client = AthenaClient("http://athena.test")
    base = settings.athena_user_id
    assert _factory(client, settings, "default").user_id("a1") == f"{base}.default"
    assert _factory(client, settings, "acme").user_id("a1") == f"{base}.acme"
    assert _factory(client, settings, "acme").agent_id("a1") == "a1"
    isolated = settings.model_copy(update={"athena_isolate_agents": True})
    assert _factory(client, isolated, "acme").user_id("a1") == f"{base}.acme.a1"
    long_id = "a" * MAX_ID_LENGTH
    digest = _factory(client, isolated, "acme").user_id(long_id)
    assert digest.startswith("u-") and len(digest) <= MAX_ID_LENGTH
    assert digest == _factory(client, isolated, "acme").user_id(long_id)  # stable


async def test_two_namespaces_get_sessions_of_different_users(
    settings: Settings, client: AthenaClient, athena_server: FakeAthenaServer
) -> None:
    made = []
    for namespace in ("ns-a", "ns-b"):
        memory = _factory(client, settings, namespace)("a1")
        await memory.record_thought("hello")
        await memory.flush()
        made.append(memory)
        await memory.close()
    bodies = [r.json for r in athena_server.requests_to("POST", "/api/v1/sessions")]
    assert [b["user_id"] for b in bodies] == [
        f"{settings.athena_user_id}.ns-a",
        f"{settings.athena_user_id}.ns-b",
    ]
    assert {b["agent_id"] for b in bodies} == {"a1"}
    assert [b["metadata"]["namespace"] for b in bodies] == ["ns-a", "ns-b"]


def test_each_tenant_and_server_has_its_own_outbox_file(settings: Settings) -> None:
    here = _factory(AthenaClient("http://athena.test"), settings)
    there = _factory(AthenaClient("http://other.test"), settings)
    other_tenant = _factory(
        AthenaClient("http://athena.test"), settings.model_copy(update={"athena_tenant_id": "t2"})
    )
    paths = {f.outbox("a1").path for f in (here, there, other_tenant)}
    assert len(paths) == 3
    assert here.outbox("a1").path == here.outbox("a1").path


async def test_past_the_bound_the_least_recently_used_agent_is_retired(
    settings: Settings, client: AthenaClient
) -> None:
    agents = AthenaAgents(_factory(client, settings), max_live=2)
    first = await agents.get("a0")
    await agents.get("a1")
    agents.get_nowait("a0")  # a0 used again: a1 is now the oldest
    agents.get_nowait("a2")
    assert agents.live("a1") is None and agents.live("a0") is first
    await wait_for(lambda: not agents.retiring)
    await wait_for(lambda: len(agents.started()) == 2)
    assert {agent for agent, _ in agents.started()} == {"a0", "a2"}
    await agents.close()


async def test_records_an_evicted_agent_left_are_swept_once_athena_answers(
    settings: Settings, client: AthenaClient, athena_server: FakeAthenaServer
) -> None:
    fast = Backoff(base=0.02, cap=0.1, jitter="none")
    agents = AthenaAgents(_factory(client, settings), max_live=1, sweep_backoff=fast)
    athena_server.mode = "error500"
    evicted = agents.get_nowait("a0")
    await evicted.record_turn(1, "t", "a", "r", origin=TurnOrigin("wf", "s1", "a0"))
    agents.get_nowait("a1")  # a0 retired with its turn still queued
    await wait_for(lambda: not agents.retiring)
    assert agents.live("a0") is None
    athena_server.mode = "ok"
    await wait_for(lambda: len(athena_server.events) >= 3)
    await wait_for(lambda: not agents._unsent)
    await agents.close()


def test_the_sweeper_backs_off_from_one_to_thirty_seconds() -> None:
    delays = [SWEEP_BACKOFF.delay(n) for n in range(8)]
    assert delays[:3] == [1.0, 2.0, 4.0]
    assert delays[-1] == 30.0 and max(delays) == 30.0


async def test_an_agents_memory_takes_the_tier_config_from_the_settings(
    settings: Settings,
) -> None:
    tuned = settings.model_copy(
        update={"athena_tenant_id": "acme", "athena_user_id": "ops", "redis_context_ttl_days": 2}
    )
    memory = _factory(AthenaClient("http://athena.test"), tuned)("a1")
    try:
        cfg = memory.config
        user = f"ops.{tuned.jarvismem_namespace}"
        assert (cfg.tenant_id, cfg.user_id, cfg.dedupe_ttl) == ("acme", user, 2 * 86_400)
        assert cfg.outbox_dir == tuned.outbox_path
        assert memory.outbox.path.is_relative_to(tuned.outbox_path)
    finally:
        await memory.close()


async def test_an_agents_memory_caches_its_session_through_the_runtimes_redis_backend(
    settings: Settings,
    client: AthenaClient,
    athena_server: FakeAthenaServer,
    redis_client: Any,
    keyspace: KeySpace,
) -> None:
    # The runtime hands the factory its RedisBackend (one seam for every tier).
    factory = AthenaFactory(
        client,
        RedisBackend.adopt(redis_client),
        keyspace=keyspace,
        settings=settings,
        redactor=no_redaction,
    )
    first = factory("a1")
    try:
        await first.record_thought("hello")
        await first.flush()
    finally:
        await first.close()
    destination = KeySpace.athena_destination(
        factory.config.tenant_id, factory.user_id("a1"), "a1", client.base_url
    )
    cached = await redis_client.get(keyspace.athena_session(destination))
    assert cached is not None and cached.decode() == first.session_id
    again = factory("a1")
    try:
        await again.record_thought("again")
        await again.flush()
        assert again.session_id == first.session_id
    finally:
        await again.close()
    assert len(athena_server.requests_to("POST", "/api/v1/sessions")) == 1
