"""RedisBackend: one object owns a client, its durability, probe and pipeline; its
methods raise jarvismem's errors only, naming the operation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from jarvismem.backends.redis import Durability, RedisBackend
from jarvismem.errors import BackendRejectedError, BackendUnavailableError
from jarvismem.keys import KeySpace
from jarvismem.settings import load_settings

# --- making one ------------------------------------------------------------------------------


def test_a_callers_client_is_adopted_as_is_and_takes_the_settings_level() -> None:
    client = aioredis.Redis(port=1)
    settings = load_settings(
        _env_file=None,
        redis_url="redis://127.0.0.1:1/0",
        redis_durability="replicated",
        redis_wait_replicas=2,
    )
    backend = RedisBackend.adopt(client, settings)
    assert backend.client is client
    assert backend.durability == Durability(replicas=2, timeout_ms=settings.redis_wait_timeout_ms)
    # Without settings (a tier or an integration given a bare client): primary.
    assert RedisBackend.adopt(client).durability is None


def test_a_backend_passed_in_is_used_as_is() -> None:
    backend = RedisBackend(aioredis.Redis(port=1))
    assert RedisBackend.adopt(backend) is backend
    assert RedisBackend.adopt(backend, load_settings(_env_file=None)) is backend


def test_the_backend_names_its_destination_without_a_secret() -> None:
    backend = RedisBackend(aioredis.from_url("redis://:hunter2@127.0.0.1:6390/2"))
    assert backend.destination == "redis:127.0.0.1:6390/2"
    assert not backend.in_process


# --- commands, errors translated ----------------------------------------------------------------


async def test_a_command_returns_the_clients_reply(redis_client: Any, keyspace: KeySpace) -> None:
    backend = RedisBackend(redis_client)
    key = keyspace.ledger("backend-call")
    await backend.call("set", key, "v", what="test set")
    assert await backend.call("get", key, what="test get") in (b"v", "v")


async def test_a_refused_command_is_a_rejection_naming_the_operation(
    redis_client: Any, keyspace: KeySpace
) -> None:
    backend = RedisBackend(redis_client)
    key = keyspace.ledger("backend-wrongtype")
    await redis_client.set(key, "not a stream")
    with pytest.raises(BackendRejectedError, match="ledger read"):
        await backend.call("xlen", key, what="ledger read")


async def test_an_unreachable_server_is_unavailable(unreachable_redis: Any) -> None:
    backend = RedisBackend(unreachable_redis)
    with pytest.raises(BackendUnavailableError, match="probe get"):
        await backend.call("get", "k", what="probe get")


@pytest.mark.integration
async def test_a_command_past_its_timeout_is_unavailable(real_redis: Any) -> None:
    backend = RedisBackend(real_redis)
    with pytest.raises(BackendUnavailableError, match="slow read"):
        await backend.call("blpop", ["jm:never-pushed"], 2, what="slow read", timeout=0.05)


async def test_a_pipeline_is_one_round_trip_with_replies_in_order(
    redis_client: Any, keyspace: KeySpace
) -> None:
    backend = RedisBackend(redis_client)
    key = keyspace.ledger("backend-pipe")

    def build(pipe: Any) -> None:
        pipe.hset(key, "a", "1")
        pipe.hincrby(key, "a", 2)
        pipe.hget(key, "a")

    replies = await backend.pipeline(build, what="test pipeline", transaction=True)
    assert replies[1:] == [3, b"3"] or replies[1:] == [3, "3"]


async def test_a_refusal_inside_a_pipeline_is_a_rejection(
    redis_client: Any, keyspace: KeySpace
) -> None:
    backend = RedisBackend(redis_client)
    key = keyspace.ledger("backend-pipe-bad")
    await redis_client.set(key, "x")
    with pytest.raises(BackendRejectedError, match="counters"):
        await backend.pipeline(lambda pipe: pipe.hincrby(key, "a", 1), what="counters")


async def test_scan_finds_the_matching_keys(redis_client: Any, keyspace: KeySpace) -> None:
    backend = RedisBackend(redis_client)
    keys = {keyspace.ledger(f"backend-scan-{i}") for i in range(3)}
    for key in keys:
        await redis_client.set(key, "1")
    found = {
        k.decode() if isinstance(k, bytes) else k
        async for k in backend.scan(keyspace.ledger_pattern(), what="scan")
    }
    assert keys <= found


async def test_a_guard_turns_its_expiry_into_unavailable() -> None:
    backend = RedisBackend(aioredis.Redis(port=1))
    with pytest.raises(BackendUnavailableError, match="several calls"):
        async with backend.guard("several calls", 0.01):
            await asyncio.sleep(1)


# --- scripts and durability ----------------------------------------------------------------------


@pytest.mark.integration
async def test_a_script_run_without_wait_is_not_held_to_the_replicas(
    real_redis: Any, keyspace: KeySpace
) -> None:
    # The shared test server has no replica: every WAIT falls short.
    backend = RedisBackend(real_redis)
    backend.set_durability("replicated", replicas=1, timeout_ms=10)
    script = backend.script("return redis.call('INCR', KEYS[1])")
    key = keyspace.ledger("backend-nowait")
    assert await backend.run_script(script, [key], [], what="lock", wait=False) == 1
    assert backend.durability_health()["waits"] == 0
    with pytest.raises(BackendUnavailableError, match="not replicated"):
        await backend.run_script(script, [key], [], what="write")
    assert backend.durability_health()["waits"] == 1


async def test_each_backend_has_one_recovery_probe(redis_client: Any) -> None:
    backend = RedisBackend(redis_client)
    assert backend.probe is backend.probe
    assert await backend.probe() is True


# --- batched reads ----------------------------------------------------------------------------


async def test_reads_started_in_a_batch_share_one_round_trip_each_with_its_own_outcome(
    redis_client: Any, keyspace: KeySpace
) -> None:
    backend = RedisBackend(redis_client)
    good, bad = keyspace.ledger("batch-good"), keyspace.ledger("batch-bad")
    await redis_client.set(good, "1")
    await redis_client.set(bad, "not a hash")
    pipelines: list[object] = []
    real = redis_client.pipeline

    def counting(*args: Any, **kwargs: Any) -> Any:
        pipelines.append(args)
        return real(*args, **kwargs)

    redis_client.pipeline = counting
    try:
        async with backend.batched_reads(5.0):
            got, refused = await asyncio.gather(
                backend.call("get", good, what="read good"),
                backend.call("hgetall", bad, what="read bad"),
                return_exceptions=True,
            )
        assert len(pipelines) == 1
        assert got in (b"1", "1")
        assert isinstance(refused, BackendRejectedError) and "read bad" in str(refused)
        # Outside the batch a call goes on its own, as a plain command.
        assert await backend.call("get", good, what="read good") in (b"1", "1")
        assert len(pipelines) == 1
    finally:
        del redis_client.pipeline


async def test_a_task_started_in_a_batch_sends_on_its_own_once_the_batch_is_over(
    redis_client: Any, keyspace: KeySpace
) -> None:
    # A background task born inside a bundle's read (an Athena delivery started on
    # first use) copies the context; after the block its commands must not ride the
    # bundle's batch, nor its round-trip deadline, for the rest of its life.
    backend = RedisBackend(redis_client)
    key = keyspace.ledger("batch-over")
    await redis_client.set(key, "v")
    pipelines: list[object] = []
    real = redis_client.pipeline

    def counting(*args: Any, **kwargs: Any) -> Any:
        pipelines.append(args)
        return real(*args, **kwargs)

    block_over = asyncio.Event()

    async def background() -> Any:
        await block_over.wait()
        return await backend.call("get", key, what="later")

    redis_client.pipeline = counting
    try:
        async with backend.batched_reads(5.0):
            task = asyncio.ensure_future(background())
        block_over.set()
        assert await task in (b"v", "v")
        assert pipelines == []  # a plain command, not a batch of one
    finally:
        del redis_client.pipeline


async def test_a_reader_that_gives_up_does_not_cancel_the_round_trip_of_the_others(
    redis_client: Any, keyspace: KeySpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = RedisBackend(redis_client)
    key = keyspace.ledger("batch-slow")
    await redis_client.set(key, "v")
    pipeline_cls = type(redis_client.pipeline(transaction=False))
    execute = pipeline_cls.execute

    async def slow_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.2)
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(pipeline_cls, "execute", slow_execute)
    async with backend.batched_reads(5.0):
        impatient, patient = await asyncio.gather(
            backend.call("get", key, what="impatient", timeout=0.01),
            backend.call("get", key, what="patient"),
            return_exceptions=True,
        )
    assert isinstance(impatient, BackendUnavailableError)
    assert patient in (b"v", "v")
