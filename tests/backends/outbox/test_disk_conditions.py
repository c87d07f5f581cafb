"""Disk conditions under the outbox while Redis is down: ``log_turn`` never raises.

Each test drives real ``log_turn`` calls of a runtime whose Redis is a closed
loopback port (every write falls back to the outbox), then breaks the outbox's
disk in one way and checks the promise of the durable writer: the write is
dropped and counted (``health()`` shows it), nothing raises into the caller,
and the replay task stays alive (it logs, backs off and retries).

The full and read-only file systems are real ones: a 64 KiB tmpfs mounted for
the test (ENOSPC when it fills) and remounted read-only (EROFS). Running as
root, ``chmod`` would not stop a single write, so a mount is the only honest
read-only folder; where mounting is not permitted those tests are skipped.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.redis_connect import create_redis
from jarvismem.resilience import Backoff
from jarvismem.runtime import Lifecycle, MemoryRuntime
from jarvismem.settings import Settings
from tests.backends.outbox.conftest import append_raw
from tests.conftest import Factory
from tests.harness.redis_server import RedisServerProcess, free_port

TMPFS_SIZE = "64k"


def _run(*argv: str) -> bool:
    done = subprocess.run(argv, capture_output=True, check=False, timeout=30)
    return done.returncode == 0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A private 64 KiB tmpfs (skipped where mounting is not permitted); always unmounted."""
    where = tmp_path / "mnt"
    where.mkdir()
    if shutil.which("mount") is None or not _run(
        "mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(where)
    ):
        pytest.skip("mounting a tmpfs is not permitted here (needs root and CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        for _ in range(3):  # a read-only bind layer (bind_read_only), then the tmpfs
            if not where.is_mount():
                break
            if not _run("umount", str(where)):
                _run("umount", "-l", str(where))


def remount_read_only(where: Path) -> None:
    assert _run("mount", "-o", "remount,ro", str(where)), "remount read-only failed"


def bind_read_only(where: Path) -> None:
    """Lay a read-only bind mount over ``where`` while files there are open for writing.

    A remount refuses then (the outbox keeps its lock file open); new opens fail
    with EROFS while descriptors opened before keep working, as on a disk that
    turns read-only under a running process.
    """
    assert _run("mount", "--bind", str(where), str(where)), "bind mount failed"
    assert _run("mount", "-o", "remount,bind,ro", str(where)), "read-only bind remount failed"


@pytest.fixture
def down_runtime(make_settings: Factory, make_runtime: Factory) -> Callable[[Path], MemoryRuntime]:
    """``down_runtime(outbox_path)``: a runtime whose Redis (a closed port) never answers.

    Every runtime of a test gets the same address, so they share their outboxes.
    """
    redis_url = f"redis://127.0.0.1:{free_port()}/0"

    def build(outbox_path: Path) -> MemoryRuntime:
        settings: Settings = make_settings(
            redis_url=redis_url,
            storage_backend="none",
            outbox_path=outbox_path,
            tier_timeout_episodic=0.5,
            redis_connect_retries=0,
        )
        runtime: MemoryRuntime = make_runtime(
            settings=settings, redis=create_redis(settings), lifecycle=Lifecycle(owns_clients=True)
        )
        return runtime

    return build


def drain_task(workflow_id: str) -> asyncio.Task[Any]:
    """The replay task of the workflow's Redis outbox (there must be one)."""
    name = f"jarvismem-drain-redis[{workflow_id}]"
    tasks = [t for t in asyncio.all_tasks() if t.get_name() == name]
    assert len(tasks) == 1, f"expected one replay task, found {len(tasks)}"
    return tasks[0]


async def outbox_health(rt: MemoryRuntime, workflow_id: str) -> dict[str, Any]:
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None
    return writer.health()


def data_file(rt: MemoryRuntime, workflow_id: str) -> Path:
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None
    return writer.outbox.path


async def assert_survives(
    rt: MemoryRuntime,
    workflow_id: str,
    turns: range,
    caplog: pytest.LogCaptureFixture,
    result: str = "result",
) -> None:
    """Log ``turns`` (none may raise), each dropped and counted; the replay task lives on."""
    mem = rt.memory(workflow_id, "s1", "a1")
    before = (await outbox_health(rt, workflow_id))["dropped"]
    raised: list[str] = []
    for turn in turns:
        try:
            await mem.log_turn(turn, "thought", "action", result)
        except Exception as exc:
            raised.append(f"{type(exc).__name__}: {exc}")
    assert raised == [], f"{len(raised)} of {len(turns)} log_turn calls raised: {raised[:2]}"
    health = await outbox_health(rt, workflow_id)
    assert health["dropped"] - before == len(turns), health
    assert (await mem.health())["outboxes"][f"redis[{workflow_id}]"]["dropped"] == health["dropped"]
    # One ERROR for the burst of drops, not one per write.
    errors = [r for r in caplog.records if "could not queue a write" in r.getMessage()]
    assert len([r for r in errors if r.levelno >= logging.ERROR]) <= 1, len(errors)
    # Wake the replay task and let it meet the broken disk (a flush cuts its
    # backoff short); the very same task must still be running afterwards.
    task = drain_task(workflow_id)
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None
    await writer.flush(1.0, stop_at_failure=True)
    assert not task.done(), f"the replay task ended: {task.exception()!r}"
    assert drain_task(workflow_id) is task
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_a_torn_last_line_on_a_read_only_file_system_drops_and_counts(
    tmpfs: Path,
    down_runtime: Callable[[Path], MemoryRuntime],
    caplog: pytest.LogCaptureFixture,
) -> None:
    workflow_id = "wf-" + uuid.uuid4().hex[:8]
    first = down_runtime(tmpfs)
    mem = first.memory(workflow_id, "s1", "a1")
    for turn in range(1, 4):
        await mem.log_turn(turn, "thought", "action", "result")
    assert (await outbox_health(first, workflow_id))["pending"] == 3
    path = data_file(first, workflow_id)
    # That process dies mid-write (half a line left), and the file system goes
    # read-only (a remount needs no file open for writing: the process is gone).
    await first.close()
    append_raw(path, b'{"seq":99,"rec":{"op":"tu')
    remount_read_only(tmpfs)
    rt = down_runtime(tmpfs)
    with caplog.at_level(logging.WARNING):
        await assert_survives(rt, workflow_id, range(4, 24), caplog)
    # The three records read before the torn tail stay queued, undamaged.
    assert (await outbox_health(rt, workflow_id))["pending"] == 3
    await rt.close()  # before the tmpfs is unmounted


async def test_a_full_file_system_drops_and_counts_and_leaves_no_torn_line(
    tmpfs: Path,
    down_runtime: Callable[[Path], MemoryRuntime],
    caplog: pytest.LogCaptureFixture,
) -> None:
    workflow_id = "wf-" + uuid.uuid4().hex[:8]
    rt = down_runtime(tmpfs)
    mem = rt.memory(workflow_id, "s1", "a1")
    big = "r" * 1500  # a few dozen records fill 64 KiB
    torn_after: list[int] = []
    for turn in range(1, 81):
        await mem.log_turn(turn, "thought", "action", big)
        path = data_file(rt, workflow_id)
        if path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            torn_after.append(turn)
    health = await outbox_health(rt, workflow_id)
    assert health["dropped"] > 0, "the tmpfs never filled up"
    assert health["pending"] + health["dropped"] == 80
    # A write cut short by ENOSPC is taken back at once: the file holds whole lines only.
    assert torn_after == []
    with caplog.at_level(logging.WARNING):
        await assert_survives(rt, workflow_id, range(81, 91), caplog, result=big)


async def test_the_data_file_replaced_by_a_directory_drops_and_counts(
    tmp_path: Path,
    down_runtime: Callable[[Path], MemoryRuntime],
    caplog: pytest.LogCaptureFixture,
) -> None:
    workflow_id = "wf-" + uuid.uuid4().hex[:8]
    rt = down_runtime(tmp_path / "outbox")
    mem = rt.memory(workflow_id, "s1", "a1")
    for turn in range(1, 3):
        await mem.log_turn(turn, "thought", "action", "result")
    path = data_file(rt, workflow_id)
    path.unlink()
    path.mkdir()
    with caplog.at_level(logging.WARNING):
        await assert_survives(rt, workflow_id, range(3, 6), caplog)


async def test_the_folder_replaced_by_a_file_drops_counts_and_keeps_replaying(
    tmp_path: Path,
    down_runtime: Callable[[Path], MemoryRuntime],
    caplog: pytest.LogCaptureFixture,
) -> None:
    workflow_id = "wf-" + uuid.uuid4().hex[:8]
    rt = down_runtime(tmp_path / "outbox")
    mem = rt.memory(workflow_id, "s1", "a1")
    for turn in range(1, 3):
        await mem.log_turn(turn, "thought", "action", "result")
    folder = data_file(rt, workflow_id).parent
    shutil.rmtree(folder)
    folder.write_bytes(b"not a folder")
    with caplog.at_level(logging.WARNING):
        await assert_survives(rt, workflow_id, range(3, 6), caplog)
    # health() names the outbox's disk condition while it lasts.
    mem_health = await mem.health()
    assert mem_health["outboxes"][f"redis[{workflow_id}]"]["disk_error"], mem_health
    assert any("local outbox disk" in reason for reason in mem_health["reasons"]), mem_health


async def test_a_turn_the_read_only_disk_refuses_lands_behind_the_backlog_once_redis_takes_writes(
    tmpfs: Path,
    redis_server: RedisServerProcess,
    make_settings: Factory,
    make_runtime: Factory,
) -> None:
    import redis.asyncio as aioredis

    workflow_id = "wf-" + uuid.uuid4().hex[:8]
    settings = make_settings(redis_url=redis_server.url, storage_backend="none", outbox_path=tmpfs)
    rt: MemoryRuntime = make_runtime(
        settings=settings, redis=create_redis(settings), lifecycle=Lifecycle(owns_clients=True)
    )
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(1, "thought", "action", "result")  # live
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None
    # A replay backoff longer than the test: nothing but the new turn may end it.
    writer._backoff = Backoff(base=30.0, cap=60.0, jitter="none")
    admin = aioredis.Redis.from_url(redis_server.url)
    try:
        # Out of memory: Redis refuses writes (PING still answers); turns queue.
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", 1)
        for turn in range(2, 5):
            await mem.log_turn(turn, "thought", "action", "result")
        assert writer.health()["pending"] == 3
        await asyncio.sleep(0.5)  # the replay failed, retried once on the probe, backs off
        assert writer.health()["pending"] == 3
        # Redis takes writes again while the replay waits; the outbox disk turns read-only.
        await admin.config_set("maxmemory", 0)
    finally:
        await admin.aclose()
    bind_read_only(tmpfs)
    await mem.log_turn(5, "thought", "action", "result")
    # Acknowledged, so kept: behind the backlog, none dropped.
    assert writer.health()["dropped"] == 0
    ledger = rt.workflow(workflow_id).ledger
    assert ledger is not None
    assert [e["turn_id"] for e in await ledger.full_history()] == ["1", "2", "3", "4", "5"]
    await rt.close()  # before the tmpfs is unmounted
