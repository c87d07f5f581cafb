"""Real replicated Redis for the durability and Sentinel tests: a primary, a replica, sentinels.

Each set is a test's own (free loopback ports, its tmp folder), started in a
second or two, and killed after the test. No persistence: the tests are about
replication and failover, not the disk.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis as sync_redis

from tests.harness.redis_server import RedisServerProcess, free_port

SERVICE = "hasvc"
"""The service name the sentinels of :func:`sentinel_set` monitor."""


def require_redis_server() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("needs the redis-server binary")


def _primary(directory: Path) -> RedisServerProcess:
    # No 5 s wait before a full sync (the default diskless delay): replicas join at once.
    return RedisServerProcess(
        directory, persistence=False, extra_args=["--repl-diskless-sync-delay", "0"]
    )


def _replica(directory: Path, primary: RedisServerProcess) -> RedisServerProcess:
    return RedisServerProcess(
        directory,
        persistence=False,
        extra_args=[
            "--replicaof",
            "127.0.0.1",
            str(primary.port),
            "--repl-diskless-sync-delay",
            "0",
        ],
    )


def wait_in_sync(primary_port: int, replicas: int = 1, timeout: float = 15.0) -> None:
    """Until ``replicas`` replicas acknowledge a write on the primary."""
    client = sync_redis.Redis(port=primary_port)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            client.set("ha-sync-probe", "1")
            if int(client.execute_command("WAIT", replicas, 200)) >= replicas:
                return
        raise AssertionError(f"{replicas} replica(s) of :{primary_port} did not sync in time")
    finally:
        client.close()


@contextmanager
def replicated_pair(tmp_path: Path) -> Iterator[tuple[RedisServerProcess, RedisServerProcess]]:
    """A primary and one replica in sync: ``(primary, replica)``."""
    require_redis_server()
    primary = _primary(tmp_path / "primary")
    replica = _replica(tmp_path / "replica", primary)
    try:
        primary.start()
        replica.start()
        wait_in_sync(primary.port)
        yield primary, replica
    finally:
        replica.kill()
        primary.kill()


class Sentinel:
    """One ``redis-server --sentinel`` process with its own config file."""

    def __init__(self, directory: Path, primary_port: int) -> None:
        self.directory = directory
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.conf = directory / "sentinel.conf"
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {directory}\n"
            f"logfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server") or "redis-server"
        self.proc = subprocess.Popen(
            [binary, str(self.conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = sync_redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                try:
                    if client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE):
                        return
                except sync_redis.RedisError:
                    pass
                time.sleep(0.05)
        finally:
            client.close()
        raise AssertionError("the sentinel did not start")

    def primary_port(self) -> int:
        """The port of the primary this sentinel names now."""
        client = sync_redis.Redis(port=self.port)
        try:
            _host, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            return int(port)
        finally:
            client.close()

    def failover(self, old_primary: int, timeout: float = 20.0) -> int:
        """``SENTINEL FAILOVER`` and wait until the replica is the primary; its port."""
        client = sync_redis.Redis(port=self.port)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                try:
                    client.execute_command("SENTINEL", "FAILOVER", SERVICE)
                    break
                except sync_redis.ResponseError:
                    # NOGOODSLAVE: the sentinel has not discovered the replica yet.
                    time.sleep(0.2)
            while time.monotonic() < deadline:
                port = self.primary_port()
                if port != old_primary and _is_primary(port):
                    return port
                time.sleep(0.05)
        finally:
            client.close()
        raise AssertionError("the failover did not complete in time")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _is_primary(port: int) -> bool:
    client = sync_redis.Redis(port=port)
    try:
        return client.info("replication").get("role") == "master"
    except sync_redis.RedisError:
        return False
    finally:
        client.close()


@contextmanager
def sentinel_set(
    tmp_path: Path,
) -> Iterator[tuple[RedisServerProcess, RedisServerProcess, Sentinel]]:
    """A primary, its replica and one sentinel (quorum 1) watching :data:`SERVICE`."""
    with replicated_pair(tmp_path) as (primary, replica):
        sentinel = Sentinel(tmp_path / "sentinel", primary.port)
        try:
            sentinel.start()
            yield primary, replica, sentinel
        finally:
            sentinel.kill()
