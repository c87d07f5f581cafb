"""The harness's own redis-server: starts, dies like a crash, hangs, restarts from its AOF."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.harness.redis_server import RedisServerProcess, free_port

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs the redis-server binary"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServerProcess]:
    with RedisServerProcess(tmp_path / "redis") as srv:
        yield srv


def _client(srv: RedisServerProcess) -> redis.Redis:
    return redis.Redis.from_url(srv.url, socket_timeout=1.0)


def test_free_port_is_bindable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))


def test_the_command_line_follows_the_options(tmp_path: Path) -> None:
    aof = RedisServerProcess(tmp_path, port=1234, appendfsync="everysec").command()
    assert aof[aof.index("--port") + 1] == "1234"
    assert aof[aof.index("--appendfsync") + 1] == "everysec"
    bare = RedisServerProcess(tmp_path, persistence=False, extra_args=["--maxmemory", "1mb"])
    words = bare.command()
    assert words[words.index("--appendonly") + 1] == "no" and words[-2:] == ["--maxmemory", "1mb"]


def test_a_killed_server_restarts_with_what_its_aof_held(server: RedisServerProcess) -> None:
    with _client(server) as client:
        client.set("k", "v")
    server.kill()
    assert not server.running
    with pytest.raises(redis.ConnectionError), _client(server) as client:
        client.ping()
    server.start()
    with _client(server) as client:
        assert client.get("k") == b"v"


def test_a_paused_server_holds_the_port_but_answers_nothing(server: RedisServerProcess) -> None:
    server.pause()
    try:
        with pytest.raises(redis.TimeoutError), _client(server) as client:
            client.ping()
    finally:
        server.resume()
    with _client(server) as client:
        assert client.ping()


def test_kill_of_a_paused_server_does_not_hang(server: RedisServerProcess) -> None:
    server.pause()
    server.kill()
    assert not server.running


def test_a_port_taken_before_the_first_start_moves_the_server(tmp_path: Path) -> None:
    """Another process may take the picked port before redis-server binds it."""
    import socket

    from tests.harness.redis_server import RedisServerProcess

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    server = RedisServerProcess(tmp_path / "r", persistence=False)
    server.port = taken  # as if free_port() had raced with the squatter
    try:
        server.start()
        assert server.port != taken
        assert server.url.endswith(f":{server.port}/0")
    finally:
        server.kill()
        squatter.close()


def test_a_port_given_by_the_caller_is_never_moved(tmp_path: Path) -> None:
    import socket

    import pytest

    from tests.harness.redis_server import RedisServerProcess

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    server = RedisServerProcess(tmp_path / "r", port=taken, persistence=False)
    try:
        with pytest.raises(RuntimeError, match="exited"):
            server.start()
    finally:
        server.kill()
        squatter.close()
