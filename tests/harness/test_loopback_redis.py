"""The loopback Redis-protocol server that child processes share (demo, CLI tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.harness.loopback_redis import LoopbackRedis


@pytest.fixture
def server() -> Iterator[LoopbackRedis]:
    with LoopbackRedis() as running:
        yield running


@pytest.fixture
def client(server: LoopbackRedis) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(server.url)
    yield conn
    conn.close()


def test_url_names_the_loopback_port(server: LoopbackRedis) -> None:
    assert server.port > 0
    assert server.url == f"redis://127.0.0.1:{server.port}/0"


def test_clients_share_one_store(server: LoopbackRedis, client: redis.Redis) -> None:
    client.set("k", "v")
    other = redis.Redis.from_url(server.url)
    try:
        assert other.get("k") == b"v"
    finally:
        other.close()


def test_keeps_the_connection_after_an_error_reply(client: redis.Redis) -> None:
    client.set("k", "v")
    with pytest.raises(redis.ResponseError):
        client.lpush("k", "x")
    script = client.register_script("return redis.call('GET', KEYS[1])")
    assert script(keys=["k"]) == b"v"  # EVALSHA -> NOSCRIPT -> SCRIPT LOAD, one connection
    assert client.client_id() == client.client_id()


def test_stop_closes_the_port() -> None:
    server = LoopbackRedis().start()
    url = server.url
    server.stop()
    conn = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        with pytest.raises(redis.ConnectionError):
            conn.ping()
    finally:
        conn.close()
