"""Redis connections: URL schemes, TLS options, cluster, the in-process stand-in,
start-up retries, pooling, credentials and connection hints."""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import sys
import tempfile
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions as redis_exc
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection

from jarvismem.backends.redis_connect import (
    connect_redis,
    create_redis,
    is_in_process,
)
from jarvismem.errors import (
    BackendUnavailableError,
    ConfigError,
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
    from jarvismem.backends.redis_failures import is_auth_error

    assert is_auth_error(redis_exc.AuthenticationError("invalid password"))
    assert is_auth_error(redis_exc.ResponseError("NOAUTH Authentication required."))
    assert is_auth_error(redis_exc.ResponseError("WRONGPASS invalid username-password pair"))
    assert not is_auth_error(redis_exc.ConnectionError("Error 111 connecting"))
    assert not is_auth_error(redis_exc.ResponseError("WRONGTYPE Operation against a key"))
