"""AutoPipeline: coalescing, order, error isolation, outages, lone commands, lost scripts.

Nothing here is timed: coalescing is shown by counting round trips and loop
iterations, correctness by what lands in Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from jarvismem.backends.redis import AutoPipeline, RedisBackend
from jarvismem.backends.redis_connect import create_redis
from jarvismem.errors import BackendRejectedError, BackendUnavailableError
from jarvismem.keys import KeySpace
from jarvismem.settings import Settings
from tests.conftest import REAL_REDIS_URL
from tests.harness.netfaults import LostReplyProxy

# Appends ARGV[1] to the stream KEYS[1]; fails (WRONGTYPE) when KEYS[1] is not a stream.
ADD = "return redis.call('XADD', KEYS[1], '*', 'v', ARGV[1])"


async def loaded(redis: Any, source: str = ADD) -> Any:
    """The script registered and already on the server (no NOSCRIPT round trip to count)."""
    await redis.script_load(source)
    return redis.register_script(source)


async def values(redis: Any, key: str) -> list[str]:
    return [fields[b"v"].decode() for _, fields in await redis.xrange(key)]


async def test_commands_issued_while_one_is_in_flight_go_in_one_round_trip(
    redis_client: Any, keyspace: KeySpace
) -> None:
    script = await loaded(redis_client)
    key = keyspace.ledger("pipe-count")
    pipe = AutoPipeline(RedisBackend(redis_client))
    # All 64 calls start in the same loop iteration: the first goes out at
    # once, the other 63 queue behind it and go together.
    await asyncio.gather(*(pipe.evalsha(script, [key], [str(i)], "test") for i in range(64)))
    assert pipe.commands == 64
    assert pipe.round_trips == 2  # the lone one, then the other 63 together
    assert await values(redis_client, key) == [str(i) for i in range(64)]


async def test_a_lone_command_is_sent_in_its_callers_step_without_waiting(
    redis_client: Any, keyspace: KeySpace
) -> None:
    script = await loaded(redis_client)
    key = keyspace.ledger("pipe-lone")
    pipe = AutoPipeline(RedisBackend(redis_client))
    sent: list[int] = []
    iteration = [0]
    real = redis_client.execute_command

    async def spy(*args: Any, **kw: Any) -> Any:
        sent.append(iteration[0])
        return await real(*args, **kw)

    redis_client.execute_command = spy
    try:
        task = asyncio.ensure_future(pipe.evalsha(script, [key], ["x"], "test"))
        iteration[0] = 1  # the task's first step runs in the next loop iteration
        await asyncio.sleep(0)
        assert sent == [1]  # sent in that very step: no iteration spent waiting
        await task
    finally:
        del redis_client.execute_command
    assert pipe.round_trips == 1 and pipe.commands == 1


async def test_a_queued_batch_is_not_held_longer_than_one_iteration(
    redis_client: Any, keyspace: KeySpace
) -> None:
    script = await loaded(redis_client)
    key = keyspace.ledger("pipe-next")
    pipe = AutoPipeline(RedisBackend(redis_client))
    first = asyncio.ensure_future(pipe.evalsha(script, [key], ["a"], "test"))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(pipe.evalsha(script, [key], ["b"], "test"))
    await first
    # The batch holding "b" goes out on the iteration after the first reply:
    # two loop iterations later it is sent (its own round trip counted).
    for _ in range(2):
        await asyncio.sleep(0)
    assert pipe.round_trips == 2
    await second
    assert await values(redis_client, key) == ["a", "b"]


async def test_each_callers_commands_keep_their_order_and_the_stream_its_submission_order(
    redis_client: Any, keyspace: KeySpace
) -> None:
    script = await loaded(redis_client)
    key = keyspace.ledger("pipe-order")
    pipe = RedisBackend(redis_client).auto_pipeline()
    submitted: list[str] = []

    async def agent(a: int) -> None:
        for i in range(15):
            value = f"{a}:{i}"
            submitted.append(value)  # the order the calls are issued in
            await pipe.evalsha(script, [key], [value], "test")

    await asyncio.gather(*(agent(a) for a in range(32)))
    stored = await values(redis_client, key)
    assert stored == submitted
    assert pipe.round_trips < pipe.commands / 4  # coalesced, not one trip per command


async def test_a_command_error_fails_only_its_caller(redis_client: Any, keyspace: KeySpace) -> None:
    script = await loaded(redis_client)
    good, bad = keyspace.ledger("pipe-good"), keyspace.ledger("pipe-bad")
    await redis_client.set(bad, "not a stream")
    pipe = AutoPipeline(RedisBackend(redis_client))
    outcomes = await asyncio.gather(
        pipe.evalsha(script, [good], ["first"], "test"),
        *(pipe.evalsha(script, [good], [str(i)], "good") for i in range(5)),
        pipe.evalsha(script, [bad], ["x"], "the broken one"),
        *(pipe.evalsha(script, [good], [str(i)], "good") for i in range(5, 10)),
        return_exceptions=True,
    )
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failures) == 1 and isinstance(failures[0], BackendRejectedError)
    assert "the broken one" in str(failures[0])
    assert await values(redis_client, good) == ["first", *map(str, range(10))]
    assert pipe.round_trips == 2


@pytest.mark.integration
async def test_a_lost_script_is_loaded_again_for_lone_and_batched_commands(
    real_redis: Any, keyspace: KeySpace
) -> None:
    script = real_redis.register_script(ADD)
    key = keyspace.ledger("pipe-noscript")
    pipe = AutoPipeline(RedisBackend(real_redis))
    await real_redis.script_flush()
    await pipe.evalsha(script, [key], ["lone"], "test")
    await real_redis.script_flush()
    lone = asyncio.ensure_future(pipe.evalsha(script, [key], ["0"], "test"))
    await asyncio.sleep(0)
    await asyncio.gather(lone, *(pipe.evalsha(script, [key], [str(i)], "t") for i in range(1, 20)))
    assert await values(real_redis, key) == ["lone", *map(str, range(20))]


LossyFactory = Callable[[bool], Awaitable[tuple[Any, LostReplyProxy]]]


@pytest.fixture
async def make_lossy() -> AsyncIterator[LossyFactory]:
    """``await make_lossy(project)``: a client through a reply-losing proxy, built as the
    runtime builds it (``project=True``: with its command retries) or without retries."""
    made: list[tuple[Any, LostReplyProxy]] = []

    async def make(project: bool) -> tuple[Any, LostReplyProxy]:
        parts = urlsplit(REAL_REDIS_URL)
        proxy = await LostReplyProxy(parts.hostname or "127.0.0.1", parts.port or 6379).start()
        url = f"redis://127.0.0.1:{proxy.port}{parts.path or '/0'}"
        if project:
            client = create_redis(Settings(redis_url=url, _env_file=None))  # type: ignore[call-arg]
        else:
            client = aioredis.Redis.from_url(url, retry=Retry(NoBackoff(), 0))
        made.append((client, proxy))
        return client, proxy

    yield make
    for client, proxy in made:
        await client.aclose()
        await proxy.close()


@pytest.mark.integration
async def test_a_lost_connection_fails_every_caller_of_the_batch_with_its_own_error(
    real_redis: Any, make_lossy: LossyFactory, keyspace: KeySpace
) -> None:
    client, proxy = await make_lossy(False)  # without retries: the project client resends
    script = await loaded(client)
    key = keyspace.ledger("pipe-outage")
    pipe = AutoPipeline(RedisBackend(client))
    # The pipeline's reply is lost (its connection dies); the lone call before it is not.
    proxy.lose_next_reply(b"item-0-x")
    lone, *outcomes = await asyncio.gather(
        pipe.evalsha(script, [key], ["lone"], "test"),
        *(pipe.evalsha(script, [key], [f"item-{i}-x"], f"caller {i}") for i in range(10)),
        return_exceptions=True,
    )
    assert proxy.lost == 1 and not isinstance(lone, BaseException)
    assert all(isinstance(o, BackendUnavailableError) for o in outcomes), outcomes
    assert len({id(o) for o in outcomes}) == 10  # one error object per caller
    assert all(f"caller {i}" in str(o) for i, o in enumerate(outcomes))
    # The batch had reached the server before its reply was lost.
    assert (await values(real_redis, key))[:2] == ["lone", "item-0-x"]


@pytest.mark.integration
async def test_a_lost_pipeline_reply_is_retried_and_an_idempotent_script_lands_once(
    real_redis: Any, make_lossy: LossyFactory, keyspace: KeySpace
) -> None:
    client, proxy = await make_lossy(True)  # as the runtime builds it, with its retries
    # Idempotent by ARGV[1]: what the ledger's exactly-once script does with its index.
    script = client.register_script(
        "if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return 0 end "
        "redis.call('XADD', KEYS[1], '*', 'v', ARGV[1]) return 1"
    )
    key, seen = keyspace.ledger("pipe-retry"), keyspace.turn_index("pipe-retry")
    pipe = AutoPipeline(RedisBackend(client))
    proxy.lose_next_reply(b"item-0-x")
    # redis-py resends the pipeline on a new connection; the script skips what ran.
    await asyncio.gather(
        pipe.evalsha(script, [key, seen], ["lone"], "test"),
        *(pipe.evalsha(script, [key, seen], [f"item-{i}-x"], "test") for i in range(10)),
    )
    assert proxy.lost == 1
    assert await values(real_redis, key) == ["lone", *(f"item-{i}-x" for i in range(10))]


async def test_each_loop_gets_its_own_pipeline(redis_client: Any) -> None:
    backend = RedisBackend(redis_client)
    first = backend.auto_pipeline()
    assert backend.auto_pipeline() is first
    result: list[Any] = []

    def other_loop() -> None:
        async def get() -> None:
            result.append(backend.auto_pipeline())

        asyncio.run(get())

    await asyncio.to_thread(other_loop)
    assert result[0] is not first


@pytest.mark.integration
async def test_a_cluster_client_sends_each_call_on_its_own_and_lands_every_one(
    cluster_port: int, keyspace: KeySpace
) -> None:
    cluster = RedisCluster(host="127.0.0.1", port=cluster_port)
    # As the runtime does (its start-up PING): redis-py's lazy first initialize()
    # races when sixty commands start it at once.
    await cluster.initialize()
    keys = [keyspace.ledger(f"pipe-cluster-{i}") for i in range(6)]
    try:
        # Idempotent (a cluster client may resend a command after a timeout).
        script = cluster.register_script(
            "if redis.call('SADD', KEYS[1] .. ':seen', ARGV[1]) == 0 then return 0 end "
            "return redis.call('XADD', KEYS[1], '*', 'v', ARGV[1])"
        )
        pipe = RedisBackend(cluster).auto_pipeline()
        assert not isinstance(pipe, AutoPipeline)
        await asyncio.gather(
            *(pipe.evalsha(script, [keys[i % 6]], [str(i)], "t") for i in range(60))
        )
        for n, key in enumerate(keys):  # concurrent calls: no order between them here
            assert sorted(await values(cluster, key), key=int) == [str(i) for i in range(n, 60, 6)]
        assert pipe.round_trips == 60
    finally:
        for key in keys:
            await cluster.delete(key, key + ":seen")
        await cluster.aclose()


# --- replicated durability: one WAIT per round trip --------------------------------------------


@pytest.mark.integration
async def test_with_replicated_durability_each_round_trip_ends_with_one_wait(
    tmp_path: Any, keyspace: KeySpace
) -> None:
    from tests.ha_servers import replicated_pair

    script_src = "return redis.call('INCR', KEYS[1])"
    with replicated_pair(tmp_path) as (primary, replica):
        redis = aioredis.from_url(primary.url)
        backend = RedisBackend(redis)
        backend.set_durability("replicated", replicas=1, timeout_ms=300)
        try:
            script = redis.register_script(script_src)
            await redis.script_load(script_src)  # no NOSCRIPT round trip in the counts
            pipe = backend.auto_pipeline()
            key = f"jm:{keyspace.namespace}:pipe-wait"
            replies = await asyncio.gather(
                *(pipe.evalsha(script, [key], [], f"append {i}") for i in range(40))
            )
            assert sorted(replies) == list(range(1, 41))
            # Many appends, few round trips, and exactly one WAIT for each of them.
            assert pipe.round_trips < 40
            assert backend.durability_health()["waits"] == pipe.round_trips

            replica.pause()
            try:
                results = await asyncio.gather(
                    *(pipe.evalsha(script, [key], [], f"append {i}") for i in range(10)),
                    return_exceptions=True,
                )
            finally:
                replica.resume()
            assert all(isinstance(r, BackendUnavailableError) for r in results)
            assert all("not replicated" in str(r) for r in results)
            assert "append 3" in str(results[3])  # each caller's own operation is named
            assert int(await redis.get(key)) == 50  # they ran: a replay must be idempotent
        finally:
            await redis.aclose()
