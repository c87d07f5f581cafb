"""Outages: Redis, Azurite and Athena go away mid-run; the kernel loop never notices.

Each backend here is our own process on its own loopback port (a private
``redis-server``, a private Azurite, the fake Athena), so stopping it disturbs
no other test. Writes made during an outage land in the durable local outbox and
are replayed in order after recovery; ``health()`` says degraded meanwhile and
recovered after; a full outbox drops and counts, with a warning.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.redis_connect import create_redis
from jarvismem.memory import UnifiedMemory
from jarvismem.runtime import Lifecycle, MemoryRuntime
from jarvismem.settings import Settings
from jarvismem.testing.fake_athena import FakeAthenaServer
from tests.conftest import AZURITE_CONNECTION_STRING, Factory, require_backend
from tests.harness.redis_server import RedisServerProcess, free_port

pytestmark = pytest.mark.integration

OUTAGE_SECONDS = float(os.environ.get("JARVISMEM_OUTAGE_SECONDS", "0"))

# Installed by scripts/services (which .ci/run and scripts/test call).
AZURITE_BINARIES = (
    Path(__file__).resolve().parents[2] / ".cache/azurite/node_modules/.bin/azurite-blob",
)


async def eventually(check: Callable[[], Awaitable[bool]], what: str, limit: float = 30.0) -> None:
    """Wait (bounded) until ``check`` is true; the limit only guards against a hang."""
    deadline = time.monotonic() + limit
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {limit:g}s")
        await asyncio.sleep(0.05)


@pytest.fixture
def outage_settings(make_settings: Factory) -> Callable[..., Settings]:
    """``outage_settings(**overrides)``: the test's settings with short tier timeouts, no
    connect retries and no blob storage unless a test passes one."""

    def build(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "storage_backend": "none",
            "tier_timeout_episodic": 0.5,
            "tier_timeout_working": 1.0,
            "tier_timeout_checkpoint": 0.5,
            "tier_timeout_athena": 0.5,
            "redis_connect_retries": 0,
        }
        values.update(overrides)
        settings: Settings = make_settings(**values)
        return settings

    return build


# --- Redis ------------------------------------------------------------------------------------


@pytest.fixture
def redis_runtime(make_runtime: Factory) -> Callable[[Settings], MemoryRuntime]:
    """``redis_runtime(settings)``: a runtime owning a client of ``settings.redis_url``,
    closed after the test."""

    def build(settings: Settings) -> MemoryRuntime:
        runtime: MemoryRuntime = make_runtime(
            settings=settings, redis=create_redis(settings), lifecycle=Lifecycle(owns_clients=True)
        )
        return runtime

    return build


async def ledger_turns(mem: UnifiedMemory) -> list[str]:
    assert mem.episodic is not None
    return [e["turn_id"] for e in await mem.episodic.full_history()]


def outage(server: RedisServerProcess, how: str) -> None:
    if how == "killed":
        server.kill()
    else:
        server.pause()


def recover(server: RedisServerProcess, how: str) -> None:
    if how == "killed":
        server.start()  # from its AOF
    else:
        server.resume()


@pytest.mark.parametrize("how", ["killed", "sigstopped"])
async def test_turns_logged_while_redis_is_down_are_replayed_in_order_after_recovery(
    workflow_id: str,
    redis_server: RedisServerProcess,
    caplog: pytest.LogCaptureFixture,
    outage_settings: Factory,
    redis_runtime: Factory,
    how: str,
) -> None:
    settings = outage_settings(redis_url=redis_server.url)
    rt = redis_runtime(settings)
    mem = rt.memory(workflow_id, "s1", "a1")
    for turn in range(1, 4):
        await mem.log_turn(turn, f"t{turn}", "a", "r")
    assert (await mem.health())["ok"]

    outage(redis_server, how)
    last = 9
    for turn in range(4, 10):
        await mem.log_turn(turn, f"t{turn}", "a", "r")  # never raises
    # scripts/soak keeps the server down longer (JARVISMEM_OUTAGE_SECONDS), turns flowing.
    until = time.monotonic() + OUTAGE_SECONDS
    while time.monotonic() < until:
        last += 1
        await mem.log_turn(last, f"t{last}", "a", "r")
        await asyncio.sleep(0.01)
    assert await mem.save_checkpoint(f'{{"after": {last}}}') is None  # queued, not lost
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None and writer.degraded
    health = await mem.health()
    assert health["degraded"] and not health["ok"]
    assert health["backends"]["redis"]["reachable"] is False
    assert health["outboxes"][writer.name]["pending"] == last - 3 + 1
    assert any("unavailable" in r.getMessage() for r in caplog.records)

    recover(redis_server, how)

    async def drained() -> bool:
        return not writer.degraded

    await eventually(drained, "outbox replay after Redis came back", limit=60 + OUTAGE_SECONDS)
    assert await ledger_turns(mem) == [str(t) for t in range(1, last + 1)]
    assert await mem.load_checkpoint() == f'{{"after": {last}}}'
    health = await mem.health()
    assert health["ok"] and not health["degraded"]
    assert health["outboxes"][writer.name]["replayed"] == last - 3 + 1
    print(
        f"\nOUTAGE redis {how}: {OUTAGE_SECONDS:g}s down, {last - 3} turns queued, "
        f"{last - 3 + 1} records replayed in order, 0 lost, 0 duplicates"
    )


async def test_a_full_outbox_drops_counts_warns_and_reports_in_health(
    tmp_path: Path,
    workflow_id: str,
    redis_server: RedisServerProcess,
    caplog: pytest.LogCaptureFixture,
    outage_settings: Factory,
    redis_runtime: Factory,
) -> None:
    settings = outage_settings(redis_url=redis_server.url, outbox_max_entries=4)
    rt = redis_runtime(settings)
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(1, "t", "a", "r")
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None

    async def landed() -> bool:
        # Under load turn 1's first round trip (connect, script load) may outlast
        # the 0.5 s tier timeout and queue; the counts below need it in Redis.
        return not writer.degraded and await ledger_turns(mem) == ["1"]

    await eventually(landed, "turn 1 in Redis before the kill")
    redis_server.kill()
    for turn in range(2, 12):
        await mem.log_turn(turn, "t", "a", "r")  # 4 queued, 6 dropped, none raises
    health = await mem.health()
    box = health["outboxes"][writer.name]
    assert (box["pending"], box["dropped"]) == (4, 6)
    assert any("dropped (outbox full" in reason for reason in health["reasons"])
    assert any("is full" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)

    redis_server.start()

    async def drained() -> bool:
        return not writer.degraded

    await eventually(drained, "outbox replay")
    assert await ledger_turns(mem) == ["1", "2", "3", "4", "5"]
    health = await mem.health()
    # The loss stays visible after recovery: dropped writes are not forgotten.
    assert health["outboxes"][writer.name]["dropped"] == 6
    assert health["degraded"]


# --- Azurite ----------------------------------------------------------------------------------


class AzuriteProcess:
    """A private Azurite blob service: own port, own data folder, restartable."""

    def __init__(self, binary: Path, location: Path) -> None:
        self.binary = binary
        self.location = location
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connection_string(self) -> str:
        return AZURITE_CONNECTION_STRING.replace("127.0.0.1:10000", f"127.0.0.1:{self.port}")

    def start(self) -> None:
        import socket

        self.proc = subprocess.Popen(
            [
                str(self.binary),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                str(self.location),
                "--skipApiVersionCheck",
                "--loose",
                "--silent",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("private Azurite did not start")

    def stop(self) -> None:
        # SIGTERM, not SIGKILL: Azurite keeps its metadata in memory and saves it
        # on shutdown; a killed emulator forgets containers, a real service does not.
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


@pytest.fixture
def azurite(tmp_path: Path) -> Iterator[AzuriteProcess]:
    binary = next((b for b in AZURITE_BINARIES if os.access(b, os.X_OK)), None)
    require_backend(binary is not None, "the azurite-blob binary")
    assert binary is not None
    proc = AzuriteProcess(binary, tmp_path / "azurite")
    proc.start()
    yield proc
    proc.stop()


async def test_scratchpad_appends_made_while_azurite_is_down_are_replayed_in_order(
    workflow_id: str,
    azurite: AzuriteProcess,
    outage_settings: Factory,
    make_runtime: Factory,
) -> None:
    from jarvismem.backends.blob.azure import AzureBlobStorage

    settings = outage_settings()
    blob = AzureBlobStorage(azurite.connection_string, "outage" + uuid.uuid4().hex[:12])
    rt = make_runtime(settings=settings, blob=blob, lifecycle=Lifecycle(owns_clients=True))
    mem = rt.memory(workflow_id, "s1", "a1")
    assert mem.working is not None
    for turn in range(1, 4):
        await mem.log_turn(turn, f"thought {turn}", "a", "r")

    azurite.stop()
    for turn in range(4, 8):
        await mem.log_turn(turn, f"thought {turn}", "a", "r")  # never raises
    writer = rt.workflow(workflow_id).blob_writer
    assert writer is not None and writer.degraded
    health = await mem.health()
    assert health["degraded"] and health["backends"]["blob"]["reachable"] is False

    azurite.start()

    async def drained() -> bool:
        return not writer.degraded

    await eventually(drained, "scratchpad replay after Azurite came back")
    records = await mem.working.read_all()
    first_seen = list(dict.fromkeys(r["turn_id"] for r in records))
    assert first_seen == [str(t) for t in range(1, 8)]
    assert (await mem.health())["ok"]


# --- Athena -----------------------------------------------------------------------------------


@pytest.fixture
async def athena_server(
    make_athena_client: Factory, make_runtime: Factory
) -> AsyncIterator[FakeAthenaServer]:
    # Set up after the client and runtime factories so that it stops before they
    # close: stopping releases a hung request, which closing the runtime would
    # otherwise wait out (the 20 s HTTP timeout of the "hang" case).
    server = FakeAthenaServer(hang_seconds=30, slow_seconds=3).start()
    yield server
    server.stop()


FAULTS = ["error500", "timeout", "hang", "refused"]


@pytest.mark.parametrize("fault", FAULTS)
async def test_an_athena_fault_never_stops_log_turn_and_is_marked_degraded_in_the_bundle(
    workflow_id: str,
    real_redis: Any,
    athena_server: FakeAthenaServer,
    outage_settings: Factory,
    make_athena_client: Factory,
    make_runtime: Factory,
    fault: str,
) -> None:
    # "timeout": each request is slower than the client's HTTP timeout; "hang": the
    # request outlives everything, only the tier timeout ends the wait.
    http_timeout = 0.3 if fault == "timeout" else 20.0
    settings = outage_settings()
    client = make_athena_client(athena_server.url, timeout=http_timeout, max_retries=0)
    rt = make_runtime(settings=settings, redis=real_redis, athena=client)
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(1, "t1", "a", "r")
    assert await rt.athena_memory("a1") is not None

    if fault == "refused":
        athena_server.stop()
    else:
        athena_server.mode = {"error500": "error500", "timeout": "slow", "hang": "hang"}[fault]  # type: ignore[assignment]
    for turn in range(2, 6):
        await mem.log_turn(turn, f"t{turn}", "a", "r")

    # The guard is far above the tier timeout; it only turns a hang into a failure.
    async with asyncio.timeout(settings.tier_timeout_athena + 10):
        bundle = await mem.rehydrate_bundle(ledger_tail=10)
    assert "athena" in bundle["degraded"]
    assert bundle["athena_context"] is None
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["1", "2", "3", "4", "5"]
    assert set(bundle["degraded"]) == {"athena"}
    athena_server.mode = "ok"
