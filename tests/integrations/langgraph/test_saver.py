"""JarvisMemSaver: LangGraph's own conformance suite, the key layout, exactly-once, TTL.

The conformance suite (``langgraph-checkpoint-conformance``) runs on fakeredis (the
fast layer), the real server, the embedded server (what ``REDIS_URL`` unset runs) and
the local 3-master Redis Cluster: a cluster refuses
a script whose keys are in different slots, so passing there proves every thread
script stays in its thread's slot.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.serde.types import ERROR
from redis.asyncio.cluster import RedisCluster
from redis.cluster import key_slot

from jarvismem.errors import ConfigError, InvalidIdError
from jarvismem.integrations.langgraph import JarvisMemSaver
from jarvismem.keys import KeySpace

# --- LangGraph's conformance suite ------------------------------------------------------


async def _conformance(client: Any, namespaces: list[str]) -> None:
    @checkpointer_test(name="JarvisMemSaver")
    async def factory() -> AsyncIterator[JarvisMemSaver]:
        # The suite reuses thread ids ("thread-0") between capabilities: a fresh
        # namespace per capability keeps them apart.
        namespace = "lg" + uuid.uuid4().hex[:12]
        namespaces.append(namespace)
        yield JarvisMemSaver(client, KeySpace(namespace), ttl_seconds=600)

    report = await validate(factory)
    failures = {cap: r.failures for cap, r in report.results.items() if r.failures}
    assert not failures, failures
    assert report.passed_all_base()
    # Every extended capability is implemented, detected and passed too.
    assert {c.value for c in ALL_CAPABILITIES} == {
        cap for cap, r in report.results.items() if r.detected and r.passed
    }


async def test_conformance_on_fakeredis(fake_redis: Any) -> None:
    await _conformance(fake_redis, [])


@pytest.mark.integration
async def test_conformance_on_a_real_redis(real_redis: Any, namespaces: set[str]) -> None:
    used: list[str] = []
    try:
        await _conformance(real_redis, used)
    finally:
        namespaces.update(used)  # real_redis deletes their keys after the test


@pytest.mark.integration
async def test_conformance_on_the_embedded_server(embedded_server_url: str) -> None:
    client = aioredis.Redis.from_url(embedded_server_url)
    try:
        await _conformance(client, [])  # the session's own server: nothing to clean
    finally:
        await client.aclose()


@pytest.mark.integration
async def test_conformance_on_a_redis_cluster(cluster: RedisCluster) -> None:
    used: list[str] = []
    try:
        await _conformance(cluster, used)
    finally:
        for namespace in used:
            keys = await cluster.keys(f"jm:{namespace}:*", target_nodes=RedisCluster.PRIMARIES)
            for key in keys:
                await cluster.delete(key)


# --- layout ------------------------------------------------------------------------------


@pytest.fixture
async def saver(fake_redis: Any, keyspace: KeySpace) -> JarvisMemSaver:
    return JarvisMemSaver(fake_redis, keyspace)


async def _put(saver: JarvisMemSaver, thread_id: str, ns: str = "", **md: Any) -> Any:
    checkpoint = generate_checkpoint(channel_values={"x": "v"}, channel_versions={"x": 1})
    return await saver.aput(
        generate_config(thread_id, checkpoint_ns=ns), checkpoint, generate_metadata(**md), {"x": 1}
    )


async def _keys(client: Any) -> list[str]:
    return sorted(k.decode() for k in await client.keys("*"))


async def test_every_key_of_a_thread_shares_one_cluster_slot(
    saver: JarvisMemSaver, fake_redis: Any
) -> None:
    thread = "user:42 {tricky} *thread*"
    stored = await _put(saver, thread, ns="child:1", run_id="run-1")
    await saver.aput_writes(stored, [("ch", "v")], "task-1")
    thread_keys = [k for k in await _keys(fake_redis) if ":{lg:" in k]
    assert len(thread_keys) == 6
    assert len({key_slot(k.encode()) for k in thread_keys}) == 1
    # The id is escaped: no brace moves the hash tag, no glob character widens a SCAN.
    assert all("{lg:user%3A42%20%7Btricky%7D%20%2Athread%2A}" in k for k in thread_keys)


async def test_threads_that_differ_only_by_escaping_do_not_share_keys(
    saver: JarvisMemSaver,
) -> None:
    await _put(saver, "a b")
    assert await saver.aget_tuple(generate_config("a%20b")) is None
    assert await saver.aget_tuple(generate_config("a b")) is not None


async def test_bad_ids_are_refused_with_a_clear_error(saver: JarvisMemSaver) -> None:
    with pytest.raises(InvalidIdError, match="thread_id"):
        await _put(saver, "a\x00b")
    with pytest.raises(InvalidIdError, match="checkpoint_ns"):
        await _put(saver, "t", ns="x\x00y")
    config = {"configurable": {"thread_id": "", "checkpoint_ns": ""}}
    with pytest.raises(InvalidIdError, match="thread_id must not be empty"):
        await saver.aput(config, generate_checkpoint(), generate_metadata(), {})


def test_a_client_that_decodes_responses_is_refused() -> None:
    import fakeredis

    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    with pytest.raises(ConfigError, match="decode_responses=False"):
        JarvisMemSaver(client, KeySpace())


# --- exactly once --------------------------------------------------------------------------


async def test_a_resent_put_stores_one_checkpoint(saver: JarvisMemSaver) -> None:
    config = generate_config("t1")
    checkpoint = generate_checkpoint(channel_values={"x": "v"}, channel_versions={"x": 1})
    for _ in range(3):  # a retry after a lost reply sends the very same call again
        await saver.aput(config, checkpoint, generate_metadata(), {"x": 1})
    listed = [t async for t in saver.alist(generate_config("t1"))]
    assert [t.checkpoint["id"] for t in listed] == [checkpoint["id"]]


async def test_a_resent_write_is_stored_once_and_the_first_value_wins(
    saver: JarvisMemSaver,
) -> None:
    stored = await _put(saver, "t1")
    await saver.aput_writes(stored, [("ch", "first")], "task-1")
    await saver.aput_writes(stored, [("ch", "again")], "task-1")
    tup = await saver.aget_tuple(stored)
    assert tup is not None and tup.pending_writes == [("task-1", "ch", "first")]


async def test_a_special_write_is_replaced(saver: JarvisMemSaver) -> None:
    stored = await _put(saver, "t1")
    await saver.aput_writes(stored, [(ERROR, "first failure")], "task-1")
    await saver.aput_writes(stored, [(ERROR, "second failure")], "task-1")
    tup = await saver.aget_tuple(stored)
    assert tup is not None and tup.pending_writes == [("task-1", ERROR, "second failure")]


async def test_pending_writes_come_in_task_path_order(saver: JarvisMemSaver) -> None:
    stored = await _put(saver, "t1")
    await saver.aput_writes(stored, [("ch", "b")], "task-b", task_path="~2")
    await saver.aput_writes(stored, [("ch", "a1"), ("ch", "a2")], "task-a", task_path="~1")
    tup = await saver.aget_tuple(stored)
    assert tup is not None and [w[2] for w in tup.pending_writes or []] == ["a1", "a2", "b"]


# --- retention, indexes ---------------------------------------------------------------------


async def test_every_key_of_a_thread_expires_after_the_ttl(
    fake_redis: Any, keyspace: KeySpace
) -> None:
    saver = JarvisMemSaver(fake_redis, keyspace, ttl_seconds=90)
    stored = await _put(saver, "t1", run_id="r1")
    written = [k for k in keyspace.lg_thread_keys("t1") if await fake_redis.exists(k)]
    assert len(written) == 4  # checkpoints, records, blobs, runs
    for key in written:
        assert 0 < await fake_redis.pttl(key) <= 90_000, key
    await saver.aput_writes(stored, [("ch", "v")], "task-1")
    for key in keyspace.lg_thread_keys("t1"):
        assert 0 < await fake_redis.pttl(key) <= 90_000, key
    assert 0 < await fake_redis.pttl(keyspace.lg_run_threads("r1")) <= 90_000


async def test_without_a_ttl_nothing_expires(saver: JarvisMemSaver, fake_redis: Any) -> None:
    await _put(saver, "t1")
    assert {await fake_redis.pttl(k) for k in await fake_redis.keys("*")} == {-1}


def test_a_ttl_must_be_positive(fake_redis: Any) -> None:
    with pytest.raises(ConfigError, match="ttl_seconds"):
        JarvisMemSaver(fake_redis, KeySpace(), ttl_seconds=0)


async def test_listing_without_a_config_covers_every_thread(saver: JarvisMemSaver) -> None:
    for thread in ("t1", "t2", "t3"):
        await _put(saver, thread)
    await saver.adelete_thread("t2")
    listed = [t.config["configurable"]["thread_id"] async for t in saver.alist(None)]
    assert sorted(listed) == ["t1", "t3"]


async def test_listing_pages_through_many_checkpoints(saver: JarvisMemSaver) -> None:
    parent = None
    ids = []
    for step in range(150):  # more than two pages
        config = generate_config("t1")
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        checkpoint = generate_checkpoint()
        parent = await saver.aput(config, checkpoint, generate_metadata(step=step), {})
        ids.append(checkpoint["id"])
    listed = [t.checkpoint["id"] async for t in saver.alist(generate_config("t1"))]
    assert listed == ids[::-1]
    odd = [t async for t in saver.alist(generate_config("t1"), filter={"step": 149})]
    assert [t.metadata["step"] for t in odd] == [149]


async def test_prune_drops_the_values_only_pruned_checkpoints_used(
    saver: JarvisMemSaver, fake_redis: Any, keyspace: KeySpace
) -> None:
    first = await saver.aput(
        generate_config("t1"),
        generate_checkpoint(channel_values={"x": "old"}, channel_versions={"x": 1}),
        generate_metadata(),
        {"x": 1},
    )
    config = generate_config("t1")
    config["configurable"]["checkpoint_id"] = first["configurable"]["checkpoint_id"]
    latest = await saver.aput(
        config,
        generate_checkpoint(channel_values={"x": "new"}, channel_versions={"x": 2}),
        generate_metadata(),
        {"x": 2},
    )
    assert await fake_redis.hlen(keyspace.lg_blobs("t1")) == 2
    await saver.aprune(["t1"])
    assert await fake_redis.hlen(keyspace.lg_blobs("t1")) == 1
    tup = await saver.aget_tuple(latest)
    assert tup is not None and tup.checkpoint["channel_values"] == {"x": "new"}


async def test_an_unknown_prune_strategy_is_refused(saver: JarvisMemSaver) -> None:
    with pytest.raises(ValueError, match="unknown prune strategy"):
        await saver.aprune(["t1"], strategy="keep_some")


# --- sync methods -----------------------------------------------------------------------------


async def test_sync_methods_refuse_the_event_loop_thread(saver: JarvisMemSaver) -> None:
    with pytest.raises(asyncio.InvalidStateError, match="is async"):
        saver.get_tuple(generate_config("t1"))


async def test_sync_methods_serve_other_threads(saver: JarvisMemSaver) -> None:
    await _put(saver, "t1")
    got: list[CheckpointTuple | None] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def work() -> None:
        got.append(saver.get_tuple(generate_config("t1")))
        loop.call_soon_threadsafe(done.set)

    threading.Thread(target=work).start()
    await asyncio.wait_for(done.wait(), 30)  # the loop stays free to run the worker's call
    assert got and got[0] is not None and got[0].checkpoint["channel_values"] == {"x": "v"}


# --- from a runtime ---------------------------------------------------------------------------


async def test_from_runtime_uses_its_client_namespace_and_retention(
    fake_redis: Any, keyspace: KeySpace, make_runtime: Any
) -> None:
    runtime = make_runtime(redis=fake_redis)
    saver = JarvisMemSaver.from_runtime(runtime)
    await _put(saver, "t1")
    key = keyspace.lg_checkpoints("t1")
    assert await fake_redis.exists(key)
    assert 0 < await fake_redis.pttl(key) <= runtime.settings.ttl_seconds * 1000


async def test_from_runtime_without_redis_is_a_config_error(make_runtime: Any) -> None:
    runtime = make_runtime(redis=None)
    with pytest.raises(ConfigError, match="needs Redis"):
        JarvisMemSaver.from_runtime(runtime)
