"""Transient refusals and superseded saves, against real Redis servers.

A refusal that passes (out of memory, loading, read-only during a failover,
short of replicas) must queue and replay, never dead-letter an acknowledged
write, whichever path it comes back on: a plain reply, a script's error reply,
a per-command reply of a replayed run. And a save that did not write must never
report a revision another save wrote.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from jarvismem.errors import BackendRejectedError, BackendUnavailableError
from jarvismem.keys import KeySpace
from jarvismem.records import encode_fields
from jarvismem.runtime import MemoryRuntime
from jarvismem.tiers.checkpoints import CLOCK
from tests.harness.redis_server import RedisServerProcess

pytestmark = pytest.mark.integration

OOM = ["--maxmemory", "1", "--maxmemory-policy", "noeviction"]


def _turn(step: str, agent: str, turn: str) -> tuple[list[str], str, int]:
    entry = {"turn_id": turn, "step_id": step, "agent_id": agent, "ts": time.time()}
    return encode_fields(entry), KeySpace.turn_field(step, agent, turn), 0


async def test_a_replayed_run_refused_for_memory_is_an_outage_not_a_refusal(
    workflow_id: str, redis_server: RedisServerProcess, durable_runtime: Callable[..., Any]
) -> None:
    rt: MemoryRuntime = durable_runtime(redis_server.url, storage_backend="none")
    ledger = rt.workflow(workflow_id).ledger
    assert ledger is not None
    admin = aioredis.Redis.from_url(redis_server.url)
    try:
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", 1)
        # The run's script reports the XADD's OOM as its per-turn reply.
        outcomes = await ledger.append_encoded_many([_turn("s1", "a", str(n)) for n in range(3)])
        assert all(isinstance(o, BackendUnavailableError) for o in outcomes), outcomes
        assert not any(isinstance(o, BackendRejectedError) for o in outcomes)
    finally:
        await admin.config_set("maxmemory", 0)
        await admin.aclose()
    assert await ledger.length() == 0


async def test_an_oom_window_after_a_restart_dead_letters_no_acknowledged_turn(
    workflow_id: str, redis_server: RedisServerProcess, durable_runtime: Callable[..., Any]
) -> None:
    rt: MemoryRuntime = durable_runtime(redis_server.url, storage_backend="none")
    mem = rt.memory(workflow_id, "s1", "a")
    await mem.log_turn("0", "t", "a", "r")
    redis_server.kill()
    for n in range(1, 21):  # acknowledged: queued in the outbox
        await mem.log_turn(str(n), "t", "a", "r")
    # Back from its AOF, but out of memory from its first command: the replay
    # meets OOM on the batched path, and new turns meet it on the live path.
    redis_server.extra_args += OOM
    redis_server.start()
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None
    assert not await writer.flush(timeout=1.5)
    for n in range(21, 26):
        await mem.log_turn(str(n), "t", "a", "r")
    assert writer.health()["dead_lettered"] == 0
    admin = aioredis.Redis.from_url(redis_server.url)
    await admin.config_set("maxmemory", 0)
    await admin.aclose()
    assert await writer.flush(timeout=20.0)
    assert writer.health()["dead_lettered"] == 0
    # The kernel re-logs a turn after a crash: still one copy of each.
    await mem.log_turn("7", "t", "a", "r")
    ledger = rt.workflow(workflow_id).ledger
    assert ledger is not None
    turns = [e["turn_id"] for e in await ledger.tail(100)]
    assert turns == [str(n) for n in range(26)]


# --- a revision means one write ------------------------------------------------------------


@pytest.fixture
def no_shared_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The saves of this test do not learn each other's stamps, as separate processes
    on machines whose clocks disagree would not (the worst case for ordering)."""
    monkeypatch.setattr(CLOCK, "observe", lambda stamp: None)


async def test_a_superseded_save_reports_no_revision(
    workflow_id: str, real_url: str, durable_runtime: Callable[..., Any], no_shared_clock: None
) -> None:
    rt: MemoryRuntime = durable_runtime(real_url)
    mem = rt.memory(workflow_id, "s1", "a")
    assert await mem.save_checkpoint('{"n": 1}') == 1
    store = rt.workflow(workflow_id).checkpoints("s1")
    # Another process, whose save is stamped after ours would be (its clock is
    # ahead, or it took its stamp later and landed first), stores revision 2.
    ahead = (time.time_ns() // 1000) + 10_000_000
    assert await store.save_validated('{"other": 2}', expected_rev=1, stamp=ahead) == 2
    # Ours is older than what is stored: skipped. It must not claim revision 2.
    assert await mem.save_checkpoint('{"n": 3}') is None
    stored = await store.load()
    assert stored is not None and (stored.state, stored.rev) == ('{"other": 2}', 2)


async def test_concurrent_saves_never_share_a_revision(
    workflow_id: str, real_url: str, durable_runtime: Callable[..., Any], no_shared_clock: None
) -> None:
    # Two runtimes (two "processes") on one step: conditional and unconditional
    # saves interleaved; every revision returned belongs to exactly one save.
    a: MemoryRuntime = durable_runtime(real_url)
    b: MemoryRuntime = durable_runtime(real_url)
    mem_a, mem_b = a.memory(workflow_id, "s1", "a"), b.memory(workflow_id, "s1", "b")
    store_b = b.workflow(workflow_id).checkpoints("s1")
    acknowledged: dict[int, str] = {}

    async def unconditional(mem: Any, tag: str) -> None:
        for n in range(30):
            state = f'{{"{tag}": {n}}}'
            rev = await mem.save_checkpoint(state)
            if rev is not None:
                assert acknowledged.setdefault(rev, state) == state, (rev, state)

    async def ahead_writer() -> None:
        for n in range(30):
            stored = await store_b.load()
            rev0 = stored.rev if stored else 0
            state = f'{{"c": {n}}}'
            stamp = (time.time_ns() // 1000) + 5_000_000  # a peer whose clock is ahead
            try:
                rev = await store_b.save_validated(state, expected_rev=rev0, stamp=stamp)
            except Exception:
                continue
            assert acknowledged.setdefault(rev, state) == state, (rev, state)
            await asyncio.sleep(0)

    await asyncio.gather(unconditional(mem_a, "a"), unconditional(mem_b, "b"), ahead_writer())
    assert acknowledged


# --- a refused blob write never wedges the scratchpad ----------------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of the test's own (root may mount here): a real read-only file system."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def remount(where: Path, mode: str) -> None:
    """Make the tmpfs read-only (``ro``) or writable again (``rw``); a quick, local syscall."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(where)], check=True)


async def test_a_scratchpad_on_a_read_only_file_system_dead_letters_and_never_wedges(
    workflow_id: str, real_url: str, durable_settings: Callable[..., Any], tmpfs: Path
) -> None:
    rt = await MemoryRuntime.from_env(durable_settings(real_url, storage_base_path=tmpfs / "blobs"))
    mem = rt.memory(workflow_id, "s1", "a")
    await mem.log_turn("1", "t", "a", "r")
    remount(tmpfs, "ro")
    for n in range(2, 5):  # EROFS: refused, and it would be refused again
        await mem.log_turn(str(n), "t", "a", "r")
    writer = rt.workflow(workflow_id).blob_writer
    assert writer is not None
    health = writer.health()
    assert health["dead_lettered"] == 3 and not writer.degraded, health
    remount(tmpfs, "rw")
    await mem.log_turn("5", "t", "a", "r")  # nothing queued ahead of it: straight through
    assert not writer.degraded and writer.health()["dead_lettered"] == 3
    ledger = rt.workflow(workflow_id).ledger
    assert ledger is not None and await ledger.length() == 5  # the ledger never noticed
    await rt.close()
