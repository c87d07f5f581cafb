"""Fixtures of the CLI tests: every command runs as ``python -m jarvismem`` in a
clean environment against one isolated store (a loopback Redis-protocol server
hosted by the test, or the real server), with blobs and the outbox in ``tmp_path``
and ``--env-file /dev/null`` keeping any developer ``.env`` out.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from tests.conftest import (
    REAL_REDIS_URL,
    env_without_settings,
    real_redis_available,
    require_backend,
)
from tests.harness.loopback_redis import LoopbackRedis


@dataclass
class Cli:
    """How to run the CLI against one isolated store."""

    env: dict[str, str]
    cwd: Path
    redis_url: str
    namespace: str

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "jarvismem", "--env-file", os.devnull, *args]

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            env=env or self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )

    async def arun(self, *args: str) -> subprocess.CompletedProcess[str]:
        # The loopback server runs in a thread, so a blocking wait here is safe;
        # to_thread keeps the test's event loop (and its clients) responsive.
        return await asyncio.to_thread(self.run, *args)

    def runtime_settings(self) -> Any:
        return load_settings(
            _env_file=None,
            redis_url=self.redis_url,
            storage_backend="local",
            storage_base_path=self.env["STORAGE_BASE_PATH"],
            outbox_path=self.cwd / "test-outbox",
            jarvismem_namespace=self.namespace,
        )


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = env_without_settings()
    env["STORAGE_BASE_PATH"] = str(tmp_path / "blobs")
    env["OUTBOX_PATH"] = str(tmp_path / "outbox")
    env["REDIS_CONNECT_RETRIES"] = "0"
    return env


@pytest.fixture(scope="module")
def loopback() -> Iterator[LoopbackRedis]:
    with LoopbackRedis() as server:
        yield server


def _make_cli(url: str, tmp_path: Path) -> Cli:
    namespace = "t" + uuid.uuid4().hex[:12]
    env = clean_env(tmp_path)
    env["REDIS_URL"] = url
    env["JARVISMEM_NAMESPACE"] = namespace
    return Cli(env=env, cwd=tmp_path, redis_url=url, namespace=namespace)


@pytest.fixture
def cli(loopback: LoopbackRedis, tmp_path: Path) -> Cli:
    """The CLI against the loopback server."""
    return _make_cli(loopback.url, tmp_path)


@pytest.fixture(params=["loopback", pytest.param("real", marks=pytest.mark.integration)])
def any_cli(request: pytest.FixtureRequest, loopback: LoopbackRedis, tmp_path: Path) -> Cli:
    """The CLI against the loopback server, then the real Redis server."""
    if request.param == "real":
        require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
        return _make_cli(REAL_REDIS_URL, tmp_path)
    return _make_cli(loopback.url, tmp_path)


@pytest.fixture
async def runtime(any_cli: Cli) -> AsyncIterator[MemoryRuntime]:
    """A runtime on the same store as ``any_cli`` (for seeding and checking)."""
    rt = await MemoryRuntime.from_env(any_cli.runtime_settings())
    yield rt
    if rt.redis is not None:
        keys = [k async for k in rt.redis.scan_iter(match=f"jm:{any_cli.namespace}:*")]
        if keys:
            await rt.redis.delete(*keys)
    await rt.close()


async def seed_turns(rt: MemoryRuntime, workflow: str, turns: range) -> None:
    mem = rt.memory(workflow, "s1", "a1")
    for t in turns:
        await mem.log_turn(t, f"thought {t}", f"action {t}", f"result {t}", tokens=5)
