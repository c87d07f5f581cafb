"""redis-py failures translated into jarvismem's errors, and the command retry that
skips retries while the server is known down."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions as redis_exc
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff

from jarvismem.backends.redis_connect import (
    connect_redis,
    create_redis,
    mark_known_down,
)
from jarvismem.backends.redis_failures import (
    CommandRetry,
    is_transient_redis_error,
    redis_errors,
    translate_redis_error,
)
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    InvalidPayloadError,
    JarvisMemError,
)
from jarvismem.keys import KeySpace
from jarvismem.settings import Settings, load_settings
from tests.conftest import (
    REAL_REDIS_URL,
    closed_port,
    real_redis_available,
    require_backend,
)


def make_settings(**overrides: Any) -> Settings:
    return load_settings(_env_file=None, **overrides)


# --- errors translated at the edge --------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (redis_exc.ConnectionError("Connection refused"), True),
        (redis_exc.TimeoutError("Timeout reading from socket"), True),
        (TimeoutError(), True),
        (ConnectionResetError(104, "reset"), True),
        (redis_exc.BusyLoadingError("LOADING Redis is loading the dataset"), True),
        (redis_exc.ResponseError("BUSY Redis is busy running a script"), True),
        (redis_exc.ResponseError("OOM command not allowed when used memory > 'maxmemory'"), True),
        (redis_exc.ReadOnlyError("READONLY You can't write against a read only replica"), True),
        (redis_exc.ResponseError("CLUSTERDOWN The cluster is down"), True),
        (redis_exc.NoScriptError("NOSCRIPT No matching script"), True),
        (redis_exc.ResponseError("MASTERDOWN Link with MASTER is down"), True),
        (redis_exc.ResponseError("NOREPLICAS Not enough good replicas to write."), True),
        (redis_exc.ResponseError("TRYAGAIN Multiple keys request during rehashing"), True),
        # redis-py's annotation of a refused command inside MULTI/EXEC or a pipeline
        (
            redis_exc.ResponseError(
                "Command # 1 (HSET jm:x state {} rev 3) of pipeline caused error: "
                "OOM command not allowed when used memory > 'maxmemory'."
            ),
            True,
        ),
        # Redis 6.2 wraps the error of a redis.call inside a script
        (
            redis_exc.ResponseError(
                "ERR Error running script (call to f_0123): @user_script:12: "
                "@user_script: 12: -OOM command not allowed when used memory > 'maxmemory'."
            ),
            True,
        ),
        (
            redis_exc.ResponseError(
                "Command # 2 (XADD k * a b) of pipeline caused error: "
                "WRONGTYPE Operation against a key holding the wrong kind"
            ),
            False,
        ),
        (
            redis_exc.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"),
            False,
        ),
        (redis_exc.ResponseError("ERR Error running script: user_script:1: bad"), False),
    ],
)
def test_redis_errors_become_transient_or_rejected(error: Exception, transient: bool) -> None:
    assert is_transient_redis_error(error) is transient
    translated = translate_redis_error(error, "ledger append")
    assert isinstance(translated, BackendUnavailableError if transient else BackendRejectedError)
    assert isinstance(translated, JarvisMemError)
    assert str(translated).startswith("ledger append: Redis ")
    assert type(error).__name__ in str(translated)


@pytest.mark.integration
async def test_out_of_memory_is_transient_on_every_path_it_comes_back_on(redis_server: Any) -> None:
    """A real server out of memory refuses writes on each path: all are outages."""
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        await client.config_set("maxmemory-policy", "noeviction")
        await client.config_set("maxmemory", 1)
        refusals: dict[str, BaseException] = {}
        try:
            await client.set("k", "v")
        except redis_exc.RedisError as exc:
            refusals["plain reply"] = exc
        try:
            await client.eval("return redis.call('SET', KEYS[1], 'v')", 1, "k")
        except redis_exc.RedisError as exc:
            refusals["script error reply"] = exc
        pcall = await client.eval(
            "local r = redis.pcall('SET', KEYS[1], 'v'); return r.err", 1, "k"
        )
        refusals["script's pcall text"] = redis_exc.ResponseError(pcall.decode())
        async with client.pipeline(transaction=False) as pipe:
            pipe.set("k", "v")
            pipe.get("k")
            replies = await pipe.execute(raise_on_error=False)
        assert isinstance(replies[0], BaseException)
        refusals["pipeline per-command reply"] = replies[0]
        try:
            async with client.pipeline(transaction=True) as pipe:
                pipe.set("k", "v")
                pipe.expire("k", 10)
                await pipe.execute()
        except redis_exc.RedisError as exc:
            refusals["MULTI/EXEC"] = exc
        assert len(refusals) == 5, sorted(refusals)
        for path, exc in refusals.items():
            assert is_transient_redis_error(exc), (path, exc)
            assert isinstance(translate_redis_error(exc, path), BackendUnavailableError), path
    finally:
        await client.config_set("maxmemory", 0)
        await client.aclose()


@pytest.mark.integration
async def test_a_wrong_key_type_on_a_real_server_is_a_rejection(
    real_redis: Any, keyspace: KeySpace
) -> None:
    key = keyspace.ledger("wf-wrongtype")
    await real_redis.set(key, "a string, not a stream")
    with pytest.raises(BackendRejectedError, match="ledger read: Redis refused it") as caught:
        async with redis_errors("ledger read"):
            await real_redis.xrange(key)
    # The original stays attached for debugging, but is not what callers catch.
    assert isinstance(caught.value.__cause__, redis_exc.ResponseError)


async def test_a_closed_port_is_unavailable(unreachable_redis: Any) -> None:
    with pytest.raises(BackendUnavailableError, match="ping: Redis unavailable"):
        async with redis_errors("ping"):
            await unreachable_redis.ping()


@pytest.mark.integration
async def test_a_stalled_call_past_its_timeout_is_unavailable(real_redis: Any) -> None:
    # BLPOP on an empty list blocks for 2 s: the 0.1 s bound must cut it short.
    with pytest.raises(BackendUnavailableError, match="pop: Redis unavailable"):
        async with redis_errors("pop", timeout=0.1):
            await real_redis.blpop(["jm:never-pushed:" + uuid.uuid4().hex], timeout=2)


async def test_jarvismem_errors_and_caller_bugs_pass_unchanged() -> None:
    with pytest.raises(InvalidPayloadError):
        async with redis_errors("save"):
            raise InvalidPayloadError("bad value")
    with pytest.raises(KeyError):
        async with redis_errors("save"):
            raise KeyError("a bug, not an outage")


@pytest.mark.integration
async def test_connect_refused_by_the_server_is_a_rejection_not_a_raw_error() -> None:
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    # A database index the server does not have: retrying would not help.
    settings = make_settings(redis_url=REAL_REDIS_URL.rsplit("/", 1)[0] + "/99999")
    with pytest.raises(BackendRejectedError, match="Redis connect"):
        await connect_redis(settings, retries=3)


# --- a server found down is not retried per command ----------------------------------------------


def _counting(fails: list[BaseException | None]) -> tuple[list[int], Any]:
    """A command that raises each of ``fails`` in turn (None: succeeds), counting attempts."""
    calls = [0]

    async def do() -> str:
        calls[0] += 1
        error = fails.pop(0) if fails else None
        if error is not None:
            raise error
        return "PONG"

    return calls, do


async def _noop_fail(error: Exception, failures: int) -> None:
    return None


async def test_after_a_command_failed_every_retry_the_next_ones_try_once_until_one_succeeds() -> (
    None
):
    retry = CommandRetry(NoBackoff(), 3)
    down = redis_exc.ConnectionError("Error 111 connecting")
    calls, do = _counting([down] * 4)
    with pytest.raises(redis_exc.ConnectionError):
        await retry.call_with_retry(do, _noop_fail, with_failure_count=True)
    assert calls == [4] and retry.known_down()  # the first command retried three times
    calls, do = _counting([down])
    with pytest.raises(redis_exc.ConnectionError):
        await retry.call_with_retry(do, _noop_fail, with_failure_count=True)
    assert calls == [1]  # known down: one attempt, no backoff
    calls, do = _counting([])
    assert await retry.call_with_retry(do, _noop_fail, with_failure_count=True) == "PONG"
    assert not retry.known_down()  # any success ends it: blips are retried again
    calls, do = _counting([down, down, None])
    assert await retry.call_with_retry(do, _noop_fail, with_failure_count=True) == "PONG"
    assert calls == [3] and not retry.known_down()


@pytest.mark.integration
async def test_a_cluster_client_never_lets_one_node_s_outage_skip_retries_on_the_others(
    cluster_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The "known down" window is one per client: on a cluster it would let one dead
    # node make commands to healthy nodes skip their retries. redis-py's cluster client
    # gives each node connection a retry of its own and never runs a keyed command,
    # script or pipeline through the client's retry (only MULTI/EXEC pipelines, which
    # no turn or checkpoint save uses), so the window cannot reach those commands.
    # Should a redis-py upgrade start doing so, this fails: make the window per node.
    consulted: list[int] = []
    real = CommandRetry.call_with_retry

    async def spy(self: CommandRetry, *args: Any, **kwargs: Any) -> Any:
        consulted.append(1)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(CommandRetry, "call_with_retry", spy)
    client = create_redis(
        make_settings(redis_url=f"redis://127.0.0.1:{cluster_port}/0", redis_cluster=True)
    )
    key = "{kd-" + uuid.uuid4().hex[:8] + "}:k"
    try:
        assert isinstance(client, RedisCluster) and isinstance(client.retry, CommandRetry)
        await client.set(key, "1", px=10_000)
        await client.eval("return redis.call('GET', KEYS[1])", 1, key)
        async with client.pipeline(transaction=False) as pipe:
            pipe.get(key)
            pipe.pexpire(key, 10_000)
            await pipe.execute()
        script = client.register_script("return redis.call('EXISTS', KEYS[1])")
        assert await script(keys=[key]) == 1
        assert consulted == []
    finally:
        await client.delete(key)
        await client.aclose()


async def test_a_connection_closed_under_a_command_is_an_outage_not_a_refusal() -> None:
    # Seen in the HA soak (replicated, cluster kill): redis-py closed a connection
    # another task was about to write to, and the turn, taken for a refusal, was
    # dead-lettered: an acknowledged turn lost.
    conn = aioredis.Connection(host="127.0.0.1", port=closed_port())
    conn._reader, conn._writer = object(), object()  # type: ignore[assignment]

    async def closed_meanwhile() -> None:  # another task disconnects during this await
        conn._reader = conn._writer = None

    conn.check_health = closed_meanwhile  # type: ignore[method-assign]
    with pytest.raises(AttributeError) as caught:
        await conn.send_packed_command(b"PING\r\n")
    assert is_transient_redis_error(caught.value)
    with pytest.raises(BackendUnavailableError, match="ledger of wf: append"):
        async with redis_errors("ledger of wf: append"):
            raise caught.value
    # Our own AttributeError (a bug) is not an outage.
    try:
        None.writelines  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as ours:
        assert not is_transient_redis_error(ours)


def test_a_slot_no_node_serves_yet_is_an_outage() -> None:
    assert is_transient_redis_error(redis_exc.SlotNotCoveredError("slot 7 is not covered"))


async def test_a_cluster_with_no_reachable_node_is_an_outage_not_a_raw_library_error() -> None:
    # redis-py raises RedisClusterException (outside RedisError) when no seed answers:
    # untranslated, it escaped the tiers instead of queueing the write.
    client = RedisCluster(host="127.0.0.1", port=closed_port())
    try:
        with pytest.raises(BackendUnavailableError, match="ledger of wf: append"):
            async with redis_errors("ledger of wf: append"):
                await client.set("jm:never", b"1")
    finally:
        await client.aclose()
    # Other cluster-client errors (a node that is not in cluster mode) stay refusals.
    assert not is_transient_redis_error(
        redis_exc.RedisClusterException("Cluster mode is not enabled on this node")
    )


async def test_refused_credentials_do_not_count_as_the_server_being_down() -> None:
    retry = CommandRetry(NoBackoff(), 3)
    calls, do = _counting([redis_exc.AuthenticationError("WRONGPASS invalid password")])
    with pytest.raises(redis_exc.AuthenticationError):
        await retry.call_with_retry(do, _noop_fail, with_failure_count=True)
    assert calls == [1] and not retry.known_down()


async def test_every_connection_of_a_client_shares_what_one_learnt_about_the_server() -> None:
    # redis-py deep-copies the retry into each connection it makes.
    client = create_redis(make_settings(redis_url=f"redis://127.0.0.1:{closed_port()}/0"))
    try:
        first = client.connection_pool.make_connection()
        second = client.connection_pool.make_connection()
        assert first.retry is not second.retry
        mark_known_down(client)  # what from_env does after a failed start-up PING
        assert first.retry.known_down() and second.retry.known_down()
    finally:
        await client.aclose()
