"""Durability levels: a replicated write is acknowledged only once WAIT confirmed its replicas.

Real processes: a primary and a replica of the test's own (tests/ha_servers.py);
a replica stopped with SIGSTOP cannot acknowledge anything, which is how a
shortfall is made. One Redis Cluster test uses the suite's shared cluster
(no replicas there: the WAIT is routed to the key's node and reports 0).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from jarvismem.backends.redis import Durability, RedisBackend
from jarvismem.backends.redis_connect import create_redis, in_process_redis, redis_destination
from jarvismem.errors import BackendUnavailableError, ConfigError
from jarvismem.keys import KeySpace
from jarvismem.memory import UnifiedMemory
from jarvismem.recall.redis_store import RedisRecallStore
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from tests.conftest import wait_for
from tests.ha_servers import (
    _primary,
    _replica,
    replicated_pair,
    require_redis_server,
    wait_in_sync,
)
from tests.harness.redis_server import RedisServerProcess

pytestmark = pytest.mark.integration

# KEYS[1]: a counter. Returns its new value.
_INCR = "return redis.call('INCR', KEYS[1])"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RedisServerProcess, RedisServerProcess]]:
    with replicated_pair(tmp_path) as servers:
        yield servers


@pytest.fixture
async def client(
    pair: tuple[RedisServerProcess, RedisServerProcess],
) -> AsyncIterator[RedisBackend]:
    backend = RedisBackend(aioredis.from_url(pair[0].url))
    backend.set_durability("replicated", replicas=1, timeout_ms=300)
    yield backend
    await backend.aclose()


# --- the level ------------------------------------------------------------------------------------


def test_a_backend_is_primary_unless_told_otherwise() -> None:
    backend = RedisBackend(aioredis.Redis())
    assert backend.durability is None
    assert backend.durability_health() == {"level": "primary"}
    backend.set_durability("replicated", replicas=2, timeout_ms=50)
    assert backend.durability is not None
    backend.set_durability("primary")
    assert backend.durability is None


@pytest.mark.parametrize(
    ("level", "replicas", "timeout_ms"),
    [("quorum", 1, 10), ("replicated", 0, 10), ("replicated", 1, 0)],
)
def test_a_bad_level_is_refused(level: str, replicas: int, timeout_ms: int) -> None:
    with pytest.raises(ValueError):
        RedisBackend(aioredis.Redis()).set_durability(
            level, replicas=replicas, timeout_ms=timeout_ms
        )


def test_the_backend_built_from_settings_carries_the_level() -> None:
    settings = load_settings(
        _env_file=None,
        redis_url="redis://127.0.0.1:1/0",
        redis_durability="replicated",
        redis_wait_replicas=2,
        redis_wait_timeout_ms=250,
    )
    backend = RedisBackend.create(settings)
    assert backend.durability_health() | {"waits": 0} == {
        "level": "replicated",
        "replicas": 2,
        "wait_timeout_ms": 250,
        "waits": 0,
        "shortfalls": 0,
        "last_shortfall": None,
    }


def test_replicated_on_the_embedded_stand_in_is_a_config_error() -> None:
    # Settings refuse it at load; a Settings built around that check still cannot get a client.
    settings = load_settings(_env_file=None).model_copy(update={"redis_durability": "replicated"})
    with pytest.raises(ConfigError, match="the in-process stand-in have none"):
        create_redis(settings)


# --- one script and its WAIT --------------------------------------------------------------------


async def test_a_replicated_write_returns_once_the_replica_has_it(
    client: RedisBackend, keyspace: KeySpace
) -> None:
    script = client.script(_INCR)
    key = f"jm:{keyspace.namespace}:ha:counter"
    assert await client.run_script(script, [key], [], what="counter") == 1
    assert client.durability_health()["waits"] == 1
    assert client.durability_health()["shortfalls"] == 0


async def test_a_write_the_replica_did_not_confirm_raises_unavailable_and_is_reported(
    client: RedisBackend, pair: tuple[RedisServerProcess, RedisServerProcess], keyspace: KeySpace
) -> None:
    script = client.script(_INCR)
    key = f"jm:{keyspace.namespace}:ha:counter"
    pair[1].pause()
    try:
        with pytest.raises(BackendUnavailableError, match=r"not replicated .*0 of 1 replicas"):
            await client.run_script(script, [key], [], what="counter")
    finally:
        pair[1].resume()
    # It landed on the primary all the same (a replay must be idempotent).
    assert int(await client.client.get(key)) == 1
    health = client.durability_health()
    assert health["shortfalls"] == 1
    assert health["last_shortfall"]["what"] == "counter"
    assert (health["last_shortfall"]["wanted"], health["last_shortfall"]["got"]) == (1, 0)


async def test_a_script_the_server_lost_is_loaded_again(
    client: RedisBackend, keyspace: KeySpace
) -> None:
    script = client.script(_INCR)
    key = f"jm:{keyspace.namespace}:ha:counter"
    await client.client.script_flush()
    assert await client.run_script(script, [key], [], what="counter") == 1
    assert client.durability_health()["shortfalls"] == 0


async def test_primary_level_runs_the_script_without_wait_even_with_a_dead_replica(
    pair: tuple[RedisServerProcess, RedisServerProcess], keyspace: KeySpace
) -> None:
    backend = RedisBackend(aioredis.from_url(pair[0].url))
    try:
        pair[1].kill()
        script = backend.script(_INCR)
        key = f"jm:{keyspace.namespace}:ha:c"
        assert await backend.run_script(script, [key], [], what="counter") == 1
    finally:
        await backend.aclose()


# --- the whole path: log_turn, outbox, replay ----------------------------------------------------


def _settings(
    tmp_path: Path, url: str, keyspace: KeySpace, level: str, *, wait_ms: int = 300
) -> Any:
    return load_settings(
        _env_file=None,
        redis_url=url,
        redis_durability=level,
        redis_wait_timeout_ms=wait_ms,
        jarvismem_namespace=keyspace.namespace,
        outbox_path=tmp_path / "outbox",
        storage_base_path=tmp_path / "blobs",
        compaction_enabled=False,
    )


async def test_a_turn_not_replicated_is_queued_then_replayed_exactly_once(
    tmp_path: Path, pair: tuple[RedisServerProcess, RedisServerProcess], keyspace: KeySpace
) -> None:
    primary, replica = pair
    runtime = await MemoryRuntime.from_env(_settings(tmp_path, primary.url, keyspace, "replicated"))
    try:
        memory = runtime.memory("wf-ha", "s1", "a1")
        await memory.log_turn(1, "t", "a", "r")
        writer = runtime.workflow("wf-ha").redis_writer
        assert writer.health()["pending"] == 0

        replica.pause()
        try:
            await memory.log_turn(2, "t", "a", "r")  # does not raise
            assert writer.health()["pending"] == 1
            redis_health = (await runtime.health())["backends"]["redis"]
            assert redis_health["durability"]["shortfalls"] >= 1
            assert "shortfall" in redis_health["status"]
        finally:
            replica.resume()

        await wait_for(lambda: writer.health()["pending"] == 0, timeout=15)
        ledger = runtime.workflow("wf-ha").ledger
        turns = [entry["turn_id"] for entry in await ledger.full_history()]
        assert turns == ["1", "2"]  # the turn had landed; its replay added nothing
    finally:
        await runtime.close()


async def test_primary_level_is_unaffected_by_a_dead_replica(
    tmp_path: Path, pair: tuple[RedisServerProcess, RedisServerProcess], keyspace: KeySpace
) -> None:
    primary, replica = pair
    replica.kill()
    runtime = await MemoryRuntime.from_env(_settings(tmp_path, primary.url, keyspace, "primary"))
    try:
        memory = runtime.memory("wf-ha", "s1", "a1")
        await memory.log_turn(1, "t", "a", "r")
        assert runtime.workflow("wf-ha").redis_writer.health()["pending"] == 0
        assert (await runtime.health())["backends"]["redis"]["durability"] == {"level": "primary"}
    finally:
        await runtime.close()


# --- Redis Cluster: the WAIT goes to the key's node ---------------------------------------------


async def test_on_a_cluster_the_wait_goes_to_the_node_that_took_the_write(
    cluster: Any, keyspace: KeySpace
) -> None:
    # The shared test cluster has no replicas: WAIT answers 0 from the key's own node,
    # so the write lands there and the shortfall is reported (not a routing error).
    backend = RedisBackend(cluster)
    backend.set_durability("replicated", replicas=1, timeout_ms=50)
    try:
        script = backend.script(_INCR)
        for i in range(6):  # keys spread over every node's slots
            key = f"jm:{keyspace.namespace}:ha:{{slot{i}}}"
            with pytest.raises(BackendUnavailableError, match="0 of 1 replicas"):
                await backend.run_script(script, [key], [], what="counter")
            assert int(await cluster.get(key)) == 1
    finally:
        await cluster.delete(*[f"jm:{keyspace.namespace}:ha:{{slot{i}}}" for i in range(6)])


def test_the_destination_of_a_plain_client_is_its_address() -> None:
    assert redis_destination(aioredis.from_url("redis://127.0.0.1:6390/2")) == (
        "redis:127.0.0.1:6390/2"
    )


# --- every construction path adopts the settings' level ----------------------------------------


async def test_the_drop_in_view_on_a_callers_client_follows_replicated_settings(
    tmp_path: Path, pair: tuple[RedisServerProcess, RedisServerProcess], keyspace: KeySpace
) -> None:
    primary, replica = pair
    client = aioredis.from_url(primary.url)
    settings = _settings(tmp_path, primary.url, keyspace, "replicated")
    memory = UnifiedMemory("wf-drop", "s1", "a1", redis_store=client, settings=settings)
    try:
        health = await memory.health()
        assert health["backends"]["redis"]["durability"]["level"] == "replicated"
        replica.pause()
        try:
            await memory.log_turn(1, "t", "a", "r")  # queued, not acknowledged
            assert memory.runtime.workflow("wf-drop").redis_writer.health()["pending"] == 1
        finally:
            replica.resume()
    finally:
        await memory.close()
        await client.aclose()


def test_an_engine_on_a_callers_client_takes_the_settings_level(keyspace: KeySpace) -> None:
    settings = load_settings(
        _env_file=None,
        redis_url="redis://127.0.0.1:1/0",
        redis_durability="replicated",
        redis_wait_replicas=2,
        redis_wait_timeout_ms=250,
        jarvismem_namespace=keyspace.namespace,
    )
    client = aioredis.Redis(port=1)
    runtime = MemoryRuntime(settings, redis=client)
    assert runtime.redis is client
    assert runtime.backend is not None
    assert runtime.backend.durability == Durability(replicas=2, timeout_ms=250)


def test_a_backend_whose_level_disagrees_with_the_settings_is_refused(keyspace: KeySpace) -> None:
    primary_settings = load_settings(_env_file=None, redis_url="redis://127.0.0.1:1/0")
    backend = RedisBackend(aioredis.Redis(port=1))
    backend.set_durability("replicated", replicas=1, timeout_ms=100)
    with pytest.raises(ConfigError, match="REDIS_DURABILITY=primary"):
        MemoryRuntime(primary_settings, redis=backend)
    other = primary_settings.model_copy(
        update={"redis_durability": "replicated", "redis_wait_replicas": 2}
    )
    with pytest.raises(ConfigError, match="REDIS_WAIT_REPLICAS=2"):
        MemoryRuntime(other, redis=backend)
    # Nothing was changed on the refused backend.
    assert backend.durability == Durability(replicas=1, timeout_ms=100)


def test_a_backend_whose_level_agrees_is_used_as_is(keyspace: KeySpace) -> None:
    settings = load_settings(
        _env_file=None, redis_url="redis://127.0.0.1:1/0", redis_durability="replicated"
    )
    backend = RedisBackend.create(settings)
    runtime = MemoryRuntime(settings, redis=backend)
    assert runtime.backend is backend
    assert runtime.redis is backend.client


def test_replicated_settings_on_an_embedded_client_are_refused() -> None:
    settings = load_settings(
        _env_file=None, redis_url="redis://127.0.0.1:1/0", redis_durability="replicated"
    )
    with pytest.raises(ConfigError, match="the in-process stand-in has none"):
        MemoryRuntime(settings, redis=in_process_redis())


# --- recall facts and both LangGraph integrations wait too ---------------------------------------


def _graph(saver: Any) -> Any:
    graph_mod = pytest.importorskip("langgraph.graph")

    async def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    graph = graph_mod.StateGraph(dict)
    graph.add_node("step", step)
    graph.add_edge(graph_mod.START, "step")
    graph.add_edge("step", graph_mod.END)
    return graph.compile(checkpointer=saver)


async def _surfaces(runtime: MemoryRuntime) -> tuple[Any, Any, Any]:
    lg = pytest.importorskip("jarvismem.integrations.langgraph")
    memory = runtime.memory("wf-surf", "s1", "a1")
    return (
        memory,
        lg.JarvisMemStore.from_runtime(runtime),
        _graph(lg.JarvisMemSaver.from_runtime(runtime)),
    )


async def test_facts_store_items_and_graph_checkpoints_are_not_acknowledged_unreplicated(
    tmp_path: Path, pair: tuple[RedisServerProcess, RedisServerProcess], keyspace: KeySpace
) -> None:
    primary, replica = pair
    runtime = await MemoryRuntime.from_env(_settings(tmp_path, primary.url, keyspace, "replicated"))
    try:
        memory, store, graph = await _surfaces(runtime)
        replica.pause()
        try:
            with pytest.raises(BackendUnavailableError, match="not replicated"):
                await memory.remember("the deploy key rotates on mondays")
            with pytest.raises(BackendUnavailableError, match="not replicated"):
                await store.aput(("users", "u1"), "k1", {"fact": "likes tea"})
            with pytest.raises(BackendUnavailableError, match="not replicated"):
                await graph.ainvoke(
                    {"n": 0}, {"configurable": {"thread_id": "t1"}}, durability="sync"
                )
            # Deletes too: one lost in a failover would bring the data back.
            with pytest.raises(BackendUnavailableError, match="not replicated"):
                await store.adelete(("users", "u1"), "k1")
            with pytest.raises(BackendUnavailableError, match="not replicated"):
                await graph.checkpointer.adelete_thread("t1")
        finally:
            replica.resume()
    finally:
        await runtime.close()


async def test_facts_store_items_and_graph_checkpoints_are_on_the_replica_when_acknowledged(
    tmp_path: Path, pair: tuple[RedisServerProcess, RedisServerProcess], keyspace: KeySpace
) -> None:
    from jarvismem.integrations.langgraph.store import _member

    primary, replica = pair
    # A loaded test machine may take a while to confirm; that is not what is tested here.
    settings = _settings(tmp_path, primary.url, keyspace, "replicated", wait_ms=1500)
    runtime = await MemoryRuntime.from_env(settings)
    on_replica = aioredis.from_url(replica.url)
    try:
        memory, store, graph = await _surfaces(runtime)
        entry = await memory.remember("the deploy key rotates on mondays")
        await store.aput(("users", "u1"), "k1", {"fact": "likes tea"})
        await graph.ainvoke({"n": 0}, {"configurable": {"thread_id": "t1"}}, durability="sync")
        before = runtime.backend.durability_health()["waits"]
        assert before >= 3
        assert runtime.backend.durability_health()["shortfalls"] == 0

        # WAIT returned: the replica holds each of them now (no polling).
        entries_key, _ = RedisRecallStore(on_replica, keyspace).keys(
            entry.namespace, entry.agent_id, entry.session_id
        )
        assert await on_replica.hexists(entries_key, entry.id)
        items = keyspace.lg_store_items("default")
        assert await on_replica.hexists(items, _member(("users", "u1"), "k1"))
        assert await on_replica.exists(*keyspace.lg_thread_keys("t1")) >= 1
        assert await on_replica.zscore(keyspace.lg_threads(), "t1") is not None
    finally:
        await on_replica.aclose()
        await runtime.close()


# --- a primary without its replica ----------------------------------------------------------------


async def test_a_primary_without_a_replica_shows_it_in_health_until_one_attaches(
    tmp_path: Path, keyspace: KeySpace
) -> None:
    require_redis_server()
    primary = _primary(tmp_path / "primary")
    replica = _replica(tmp_path / "replica", primary)
    primary.start()
    try:
        settings = _settings(tmp_path, primary.url, keyspace, "replicated")
        runtime = await MemoryRuntime.from_env(settings)
        try:
            memory = runtime.memory("wf-alone", "s1", "a1")
            before = time.time()
            await memory.log_turn(1, "t", "a", "r")
            await memory.log_turn(2, "t", "a", "r")
            writer = runtime.workflow("wf-alone").redis_writer
            assert writer.health()["pending"] == 2

            health = await runtime.health()
            redis_health = health["backends"]["redis"]
            durability = redis_health["durability"]
            assert durability["state"] == "no replica: writes queued"
            assert durability["connected_replicas"] == 0
            assert durability["queued"] == 2
            assert before <= durability["since"] <= time.time()
            assert "no replica: writes queued (2 queued since " in redis_health["status"]
            assert not health["ok"]
            assert any(r.startswith("redis: no replica: writes queued") for r in health["reasons"])

            replica.start()
            wait_in_sync(primary.port)
            await wait_for(lambda: writer.health()["pending"] == 0, timeout=15)
            health = await runtime.health()
            durability = health["backends"]["redis"]["durability"]
            assert durability["state"] == "ok"
            assert durability["connected_replicas"] == 1
            assert durability["queued"] == 0
            assert durability["since"] is None
            assert health["ok"], health["reasons"]
        finally:
            await runtime.close()
    finally:
        replica.kill()
        primary.kill()
