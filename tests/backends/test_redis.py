"""Redis backend: connections (URL schemes, TLS options, cluster, embedded default,
retries, pooling) and redis-py errors translated into jarvismem's at the edge."""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import sys
import tempfile
import tomllib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions as redis_exc
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection
from redis.backoff import NoBackoff

from jarvismem.backends.redis import (
    _CommandRetry,
    connect_redis,
    create_redis,
    is_in_process,
    is_transient_redis_error,
    mark_known_down,
    redis_errors,
    translate_redis_error,
)
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    ConfigError,
    InvalidPayloadError,
    JarvisMemError,
)
from jarvismem.keys import KeySpace
from jarvismem.settings import Settings, load_settings
from tests.conftest import (
    AUTH_PASSWORD,
    REAL_REDIS_URL,
    closed_port,
    real_redis_available,
    require_backend,
)

PASSWORD = "hunter2-do-not-log"


ROOT = Path(__file__).resolve().parents[2]


def make_settings(**overrides: Any) -> Settings:
    return load_settings(_env_file=None, **overrides)


def plain_client(settings: Settings) -> aioredis.Redis:
    """create_redis for a non-cluster URL, typed as the plain client it must be."""
    client = create_redis(settings)
    assert isinstance(client, aioredis.Redis)
    return client


# --- redis:// ---------------------------------------------------------------------------


async def test_redis_url_builds_a_plain_client_without_connecting() -> None:
    client = plain_client(make_settings(redis_url=f"redis://127.0.0.1:{closed_port()}/3"))
    try:
        assert isinstance(client, aioredis.Redis)
        assert not is_in_process(client)
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["host"] == "127.0.0.1" and kwargs["db"] == 3
        assert "ssl_cert_reqs" not in kwargs
    finally:
        await client.aclose()


async def test_pool_size_comes_from_settings() -> None:
    client = plain_client(
        make_settings(redis_url="redis://127.0.0.1:6379/0", redis_max_connections=7)
    )
    try:
        assert client.connection_pool.max_connections == 7
    finally:
        await client.aclose()


# --- rediss:// ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cert_reqs", "expected"),
    [("required", ssl.CERT_REQUIRED), ("optional", ssl.CERT_OPTIONAL), ("none", ssl.CERT_NONE)],
)
async def test_rediss_url_sets_tls_options(tmp_path: Path, cert_reqs: str, expected: int) -> None:
    settings = make_settings(
        redis_url="rediss://cache.example:6380/0",
        redis_ssl_cert_reqs=cert_reqs,
        redis_ssl_ca_certs=tmp_path / "ca.pem",
        redis_ssl_certfile=tmp_path / "client.crt",
        redis_ssl_keyfile=tmp_path / "client.key",
    )
    client = plain_client(settings)
    try:
        pool = client.connection_pool
        assert pool.connection_class is SSLConnection
        kwargs = pool.connection_kwargs
        assert kwargs["ssl_cert_reqs"] == expected
        assert kwargs["ssl_ca_certs"] == str(tmp_path / "ca.pem")
        assert kwargs["ssl_certfile"] == str(tmp_path / "client.crt")
        assert kwargs["ssl_keyfile"] == str(tmp_path / "client.key")
    finally:
        await client.aclose()


async def test_rediss_url_verifies_the_server_by_default() -> None:
    client = plain_client(make_settings(redis_url="rediss://cache.example:6380/0"))
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["ssl_cert_reqs"] == ssl.CERT_REQUIRED
        assert "ssl_certfile" not in kwargs and "ssl_keyfile" not in kwargs
    finally:
        await client.aclose()


# --- unix:// --------------------------------------------------------------------------------


@pytest.fixture
async def unix_redis() -> AsyncIterator[Path]:
    """A real redis-server listening only on a unix socket; yields the socket path."""
    if shutil.which("redis-server") is None:
        require_backend(False, "redis-server binary")
    # Socket paths are limited to ~107 bytes: pytest's tmp_path can be longer.
    workdir = Path(tempfile.mkdtemp(prefix="jm-redis-"))
    sock = workdir / "r.sock"
    proc = await asyncio.create_subprocess_exec(
        "redis-server",
        "--port", "0",
        "--unixsocket", str(sock),
        "--unixsocketperm", "700",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(workdir),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(200):
            if sock.exists() or proc.returncode is not None:
                break
            await asyncio.sleep(0.025)
        assert sock.exists(), "redis-server did not create its unix socket"
        yield sock
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.integration
async def test_unix_socket_url_reaches_a_real_server(unix_redis: Path, keyspace: KeySpace) -> None:
    settings = make_settings(redis_url=f"unix://{unix_redis}?db=0", redis_connect_retries=1)
    client = await connect_redis(settings)
    assert isinstance(client, aioredis.Redis)
    try:
        assert client.connection_pool.connection_class is UnixDomainSocketConnection
        assert await client.ping() is True
        key = keyspace.workflow_index()
        await client.set(key, "over a socket")
        assert await client.get(key) == b"over a socket"
    finally:
        await client.aclose()


# --- cluster ----------------------------------------------------------------------------------


async def test_cluster_mode_builds_a_cluster_client_without_connecting() -> None:
    settings = make_settings(redis_url=f"redis://127.0.0.1:{closed_port()}", redis_cluster=True)
    client = create_redis(settings)
    assert isinstance(client, RedisCluster)
    # Nothing listens there: building the client must not have tried to connect.
    assert client.get_nodes() == []


async def test_a_cluster_whose_seed_is_down_at_start_up_is_unavailable_with_a_hint() -> None:
    port = closed_port()
    settings = make_settings(
        redis_url=f"redis://127.0.0.1:{port}", redis_cluster=True, redis_connect_retries=0
    )
    with pytest.raises(
        BackendUnavailableError, match=f"is redis-server running on 127.0.0.1:{port}"
    ):
        await connect_redis(settings)


def test_cluster_mode_refuses_a_unix_socket_at_start_up() -> None:
    with pytest.raises(ConfigError, match="REDIS_CLUSTER"):
        make_settings(redis_url="unix:///tmp/r.sock", redis_cluster=True)
    # A settings object built around validation still cannot reach the client.
    settings = make_settings(redis_url="redis://127.0.0.1:1/0", redis_cluster=True)
    settings = settings.model_copy(update={"redis_url": "unix:///tmp/r.sock"})
    with pytest.raises(ConfigError, match="REDIS_CLUSTER"):
        create_redis(settings)


# --- the in-process stand-in (memory://) ------------------------------------------------------


def test_the_stand_in_without_fakeredis_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fakeredis is the `memory` extra, not a dependency of every install.
    monkeypatch.setitem(sys.modules, "fakeredis", None)  # `import fakeredis` raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'jarvismem\[memory\]'"):
        create_redis(make_settings())


def test_fakeredis_is_an_extra_not_a_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("fakeredis")]
    assert any(d.startswith("fakeredis") for d in project["optional-dependencies"]["memory"])


async def test_memory_url_gives_the_in_process_stand_in() -> None:
    client = create_redis(make_settings())
    assert is_in_process(client)
    assert await client.ping() is True
    await client.aclose()


async def test_in_process_clients_share_one_process_wide_server(keyspace: KeySpace) -> None:
    key = keyspace.workflow_index()
    first, second = create_redis(make_settings()), create_redis(make_settings())
    try:
        await first.set(key, "shared")
        assert await second.get(key) == b"shared"
    finally:
        await first.delete(key)
        await first.aclose()
        await second.aclose()


async def test_connect_redis_returns_the_in_process_stand_in_without_retrying(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="jarvismem.backends.redis"):
        client = await connect_redis(make_settings(redis_connect_retries=0))
    assert is_in_process(client)
    assert not any("retrying" in r.getMessage() for r in caplog.records)
    await client.aclose()


# --- connect_redis ------------------------------------------------------------------------------


async def test_connect_redis_gives_up_with_the_password_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = closed_port()
    settings = make_settings(
        redis_url=f"redis://app:{PASSWORD}@127.0.0.1:{port}/0", redis_connect_retries=2
    )
    with caplog.at_level(logging.WARNING, logger="jarvismem.backends.redis"):
        with pytest.raises(BackendUnavailableError) as info:
            await connect_redis(settings)
    message = str(info.value)
    assert PASSWORD not in message and PASSWORD not in repr(info.value)
    assert f"redis://app:[REDACTED]@127.0.0.1:{port}/0" in message
    assert "3 attempts" in message
    assert info.value.__cause__ is None


async def test_connect_redis_logs_each_retry_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = make_settings(
        redis_url=f"redis://:{PASSWORD}@127.0.0.1:{closed_port()}/0", redis_connect_retries=1
    )
    with caplog.at_level(logging.WARNING, logger="jarvismem.backends.redis"):
        with pytest.raises(BackendUnavailableError):
            await connect_redis(settings)
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 1
    assert all(PASSWORD not in line for line in caplog.text.splitlines())


@pytest.mark.integration
async def test_connect_redis_returns_a_client_that_answers() -> None:
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    client = await connect_redis(make_settings(redis_url=REAL_REDIS_URL))
    try:
        assert await client.ping() is True
    finally:
        await client.aclose()


# --- pooling ---------------------------------------------------------------------------------


@pytest.mark.integration
async def test_concurrent_commands_share_one_bounded_pool(keyspace: KeySpace) -> None:
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    client = plain_client(make_settings(redis_url=REAL_REDIS_URL, redis_max_connections=3))
    pool = client.connection_pool
    try:
        # Each BLPOP holds its connection ~50 ms, so 30 of them overlap: past the
        # limit they must wait for a free connection, not fail or open more.
        keys = [f"{keyspace.workflow_index()}:{i}" for i in range(30)]
        results = await asyncio.gather(*(client.blpop([k], timeout=0.05) for k in keys))
        assert results == [None] * 30
        assert client.connection_pool is pool
        created = len(pool._available_connections) + len(pool._in_use_connections)
        assert 1 <= created <= 3
    finally:
        await client.aclose()


@pytest.mark.integration
async def test_closing_the_client_closes_its_pool() -> None:
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    client = plain_client(make_settings(redis_url=REAL_REDIS_URL))
    await client.ping()
    pool = client.connection_pool
    await client.aclose()
    assert all(not conn.is_connected for conn in pool._available_connections)


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


# --- credentials and connection hints --------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("userinfo", ["", ":wrong-password@"], ids=["no-password", "wrong"])
async def test_refused_credentials_fail_fast_without_retries(
    password_redis: Any, userinfo: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://{userinfo}127.0.0.1:{password_redis.port}/0"
    settings = make_settings(redis_url=url, redis_connect_retries=5)
    started = asyncio.get_running_loop().time()
    with caplog.at_level(logging.WARNING, logger="jarvismem.backends.redis"):
        with pytest.raises(ConfigError) as info:
            await connect_redis(settings)
    # Before: AuthenticationError is a ConnectionError to redis-py, so it was
    # retried 5 times (7.7 s) or, without a password, reported as a timeout.
    assert asyncio.get_running_loop().time() - started < 1.5
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    message = str(info.value)
    assert message.startswith("Redis refused the credentials (NOAUTH/WRONGPASS)")
    assert "wrong-password" not in message
    expected = "is wrong" if userinfo else "requires a password and REDIS_URL has none"
    assert expected in message


@pytest.mark.integration
async def test_a_command_refused_for_credentials_is_not_retried(password_redis: Any) -> None:
    client = create_redis(make_settings(redis_url=password_redis.url))
    try:
        started = asyncio.get_running_loop().time()
        with pytest.raises(redis_exc.AuthenticationError):
            await client.ping()
        # The command retry (3 retries with backoff) skips credential refusals.
        assert asyncio.get_running_loop().time() - started < 0.3
    finally:
        await client.aclose()


@pytest.mark.integration
async def test_the_right_password_connects(password_redis: Any) -> None:
    url = f"redis://:{AUTH_PASSWORD}@127.0.0.1:{password_redis.port}/0"
    client = await connect_redis(make_settings(redis_url=url))
    try:
        assert await client.ping()
    finally:
        await client.aclose()


async def test_a_refused_connection_asks_whether_redis_server_runs() -> None:
    port = closed_port()
    settings = make_settings(redis_url=f"redis://127.0.0.1:{port}/0", redis_connect_retries=0)
    with pytest.raises(BackendUnavailableError) as info:
        await connect_redis(settings)
    message = str(info.value)
    assert f"is redis-server running on 127.0.0.1:{port}?" in message
    # REDIS_CONNECT_RETRIES counts retries after the first attempt, and says so.
    assert "after 1 attempt (REDIS_CONNECT_RETRIES=0)" in message


def test_auth_error_classification() -> None:
    from jarvismem.backends.redis import is_auth_error

    assert is_auth_error(redis_exc.AuthenticationError("invalid password"))
    assert is_auth_error(redis_exc.ResponseError("NOAUTH Authentication required."))
    assert is_auth_error(redis_exc.ResponseError("WRONGPASS invalid username-password pair"))
    assert not is_auth_error(redis_exc.ConnectionError("Error 111 connecting"))
    assert not is_auth_error(redis_exc.ResponseError("WRONGTYPE Operation against a key"))


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
    retry = _CommandRetry(NoBackoff(), 3)
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
    real = _CommandRetry.call_with_retry

    async def spy(self: _CommandRetry, *args: Any, **kwargs: Any) -> Any:
        consulted.append(1)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(_CommandRetry, "call_with_retry", spy)
    client = create_redis(
        make_settings(redis_url=f"redis://127.0.0.1:{cluster_port}/0", redis_cluster=True)
    )
    key = "{kd-" + uuid.uuid4().hex[:8] + "}:k"
    try:
        assert isinstance(client, RedisCluster) and isinstance(client.retry, _CommandRetry)
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
    retry = _CommandRetry(NoBackoff(), 3)
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
