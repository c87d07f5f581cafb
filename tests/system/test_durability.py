"""The durability core under attack: one deliverer, monotonic replay, no wedge, no leak.

Each test is the adversary's version of one promise in docs/reliability.md: a
second deliverer in the same process, a peer process's leftover outbox, a
record the backend refuses for good, a restart during an outage, a peer
holding the outbox lock, a reply lost after Redis applied the command. They
run against real Redis servers (the shared one, or a private ``redis-server``
that is stopped, paused or starved of memory) and real processes.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from jarvismem.backends.outbox import Outbox
from jarvismem.backends.redis_connect import create_redis
from jarvismem.errors import BackendUnavailableError, CheckpointConflictError
from jarvismem.keys import KeySpace
from jarvismem.memory import UnifiedMemory
from jarvismem.records import encode_fields
from jarvismem.runtime import Lifecycle, MemoryRuntime
from jarvismem.settings import load_settings
from jarvismem.tiers.checkpoints import CLOCK, new_op_id
from tests.harness.netfaults import LostReplyProxy
from tests.harness.redis_server import RedisServerProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


async def eventually(check: Any, what: str, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {limit:g}s")
        await asyncio.sleep(0.05)


def checkpoint_record(step: str, state: str, *, stamp: int | None = None) -> dict[str, Any]:
    """An outbox checkpoint record as ``save_checkpoint`` queues it."""
    return {
        "op": "checkpoint",
        "step": step,
        "state": state,
        "ts": time.time(),
        "stamp": CLOCK.next() if stamp is None else stamp,
        "opid": new_op_id(),
    }


def turn_record(step: str, agent: str, turn: str, text: str = "t") -> dict[str, Any]:
    """An outbox turn record as ``log_turn`` queues it."""
    entry = {
        "turn_id": turn,
        "step_id": step,
        "agent_id": agent,
        "ts": time.time(),
        "thought": text,
        "action": "a",
        "result": "r",
        "tokens": 0,
    }
    return {
        "op": "turn",
        "args": encode_fields(entry),
        "field": KeySpace.turn_field(step, agent, turn),
    }


# A peer process opens the workflow's Redis outbox the way its runtime would
# (same settings, without connecting to Redis), queues records and exits.
PEER_QUEUE = """
import asyncio, json, sys
from pathlib import Path
from jarvismem.backends.redis import create_redis
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
async def main(tmp, namespace, workflow_id, url, records):
    s = load_settings(_env_file=None, jarvismem_namespace=namespace,
                      redis_url=url, outbox_path=Path(tmp) / "outbox")
    box = MemoryRuntime(s, redis=create_redis(s)).outbox("redis", workflow_id)
    for record in records:
        await box.put(record)
    await box.close()
asyncio.run(main(*json.loads(sys.argv[1])))
"""


def queue_in_peer(
    tmp_path: Path, keyspace: KeySpace, workflow_id: str, url: str, records: list[dict[str, Any]]
) -> None:
    """Queue ``records`` from a separate Python process (a peer on this machine)."""
    args = json.dumps([str(tmp_path), keyspace.namespace, workflow_id, url, records])
    subprocess.run(
        [sys.executable, "-c", PEER_QUEUE, args],
        cwd=ROOT,
        env=dict(os.environ),
        check=True,
        timeout=60,
    )


# --- 1. one deliverer per outbox, also inside one process ------------------------------------


async def test_the_delivery_claim_is_not_reentrant(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.jsonl")
    twin = Outbox(tmp_path / "o.jsonl")  # another writer of the same path here
    assert box.try_claim_delivery()
    assert not box.try_claim_delivery()  # the holder itself cannot claim twice
    assert not twin.try_claim_delivery()
    twin.release_delivery()  # releasing a claim it does not hold changes nothing
    assert not twin.try_claim_delivery()
    box.release_delivery()
    assert twin.try_claim_delivery()
    twin.release_delivery()
    await box.close()
    await twin.close()


async def test_a_startup_replay_never_puts_an_old_checkpoint_over_a_newer_save(
    workflow_id: str,
    real_url: str,
    durable_runtime: Callable[..., Any],
) -> None:
    """A's queued (older) checkpoint and B's live save race at start-up: B's stays."""
    rt = durable_runtime(real_url)
    leftover = rt.outbox("redis", workflow_id)
    old = checkpoint_record("s1", '{"who": "A", "n": 1}')
    await leftover.put(old)  # A crashed with its save still queued
    b = rt.memory(workflow_id, "s1", "b")
    rev = await b.save_checkpoint('{"who": "B", "n": 2}')  # acknowledged after A's
    flushes = [asyncio.ensure_future(b.load_checkpoint()) for _ in range(3)]
    await asyncio.gather(*flushes)
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None and await writer.flush(timeout=10.0)
    stored = await rt.workflow(workflow_id).checkpoints("s1").load()
    assert stored is not None and json.loads(stored.state)["who"] == "B"
    assert rev is None or stored.rev >= rev
    # Replaying A's record again (a second deliverer, a crash before the ack) changes nothing.
    replay = (
        await rt.workflow(workflow_id)
        .checkpoints("s1")
        .save_validated(
            old["state"], ts=old["ts"], stamp=old["stamp"], op_id=new_op_id(), replay=True
        )
    )
    again = await rt.workflow(workflow_id).checkpoints("s1").load()
    assert again is not None and again.state == stored.state
    assert replay is None  # skipped: the stored revision is B's, never reported as A's


# --- 2. a leftover of another process is replayed by a process that has the workflow open ----


async def test_a_peer_processes_leftover_is_replayed_and_read_by_an_open_workflow(
    tmp_path: Path,
    keyspace: KeySpace,
    workflow_id: str,
    real_url: str,
    durable_runtime: Callable[..., Any],
) -> None:
    rt = durable_runtime(real_url)
    b = rt.memory(workflow_id, "s1", "b")
    await b.log_turn(1, "b thinks", "act", "ok")  # B has the workflow open, nothing queued
    assert await b.save_checkpoint('{"who": "B", "n": 1}') == 1
    # Another process (A) acknowledged turn 5 and an older checkpoint into the
    # same outbox and died before replaying them.
    stamp = CLOCK.next() - 10_000_000  # A's save was made 10 s before B's
    old = checkpoint_record("s1", '{"who": "A"}', stamp=stamp)
    queue_in_peer(tmp_path, keyspace, workflow_id, real_url, [turn_record("s1", "a", "5"), old])
    bundle = await b.rehydrate_bundle()
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["1", "5"]
    assert json.loads(bundle["checkpoint"])["who"] == "B"
    ledger = rt.workflow(workflow_id).ledger
    assert ledger is not None
    assert [e["turn_id"] for e in await ledger.full_history()] == ["1", "5"]
    stored = await rt.workflow(workflow_id).checkpoints("s1").load()
    assert stored is not None and json.loads(stored.state)["who"] == "B"


async def test_the_runtime_poll_replays_a_leftover_without_any_call(
    tmp_path: Path,
    keyspace: KeySpace,
    workflow_id: str,
    real_url: str,
    durable_runtime: Callable[..., Any],
) -> None:
    rt = durable_runtime(real_url)
    mem = rt.memory(workflow_id, "s1", "a")
    await mem.log_turn(1, "t", "a", "r")
    queue_in_peer(tmp_path, keyspace, workflow_id, real_url, [turn_record("s1", "a", "2")])
    ledger = rt.workflow(workflow_id).ledger
    assert ledger is not None

    async def replayed() -> bool:
        assert ledger is not None
        return await ledger.length() == 2

    await eventually(replayed, "the poll's replay of the peer's turn")


# --- 6. a record the backend refuses for good is dead-lettered, not a wedge -------------------


async def test_an_unappliable_record_is_dead_lettered_and_the_queue_moves_on(
    workflow_id: str,
    real_url: str,
    durable_runtime: Callable[..., Any],
) -> None:
    rt = durable_runtime(real_url)
    box = rt.outbox("redis", workflow_id)
    await box.put({"op": "no-such-op", "x": 1})
    mem = rt.memory(workflow_id, "s1", "a")
    for turn in range(1, 6):
        await mem.log_turn(turn, "t", "a", "r")
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None and await writer.flush(timeout=10.0)
    ledger = rt.workflow(workflow_id).ledger
    assert ledger is not None
    assert [e["turn_id"] for e in await ledger.full_history()] == ["1", "2", "3", "4", "5"]
    dead = [json.loads(line) for line in box.path.with_name(box.path.name + ".dead").open()]
    assert [d["rec"]["op"] for d in dead] == ["no-such-op"]
    assert "unknown outbox record op" in dead[0]["reason"]
    health = await mem.health()
    assert health["outboxes"][writer.name]["dead_lettered"] == 1
    assert any("refused by the backend for good" in r for r in health["reasons"])


async def test_a_live_write_redis_refuses_for_good_is_dead_lettered_not_raised(
    keyspace: KeySpace,
    workflow_id: str,
    real_url: str,
    durable_runtime: Callable[..., Any],
) -> None:
    rt = durable_runtime(real_url)
    assert rt.redis is not None
    await rt.redis.set(keyspace.ledger(workflow_id), "not a stream")  # WRONGTYPE for XADD
    mem = rt.memory(workflow_id, "s1", "a")
    await mem.log_turn(1, "t", "a", "r")  # refused for good: kept aside, never raised
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None and not writer.degraded
    assert writer.outbox.dead == 1
    await rt.redis.delete(keyspace.ledger(workflow_id))
    await mem.log_turn(2, "t", "a", "r")  # the next turn is not stuck behind it
    ledger = rt.workflow(workflow_id).ledger
    assert ledger is not None and [e["turn_id"] for e in await ledger.full_history()] == ["2"]


# --- 7. / 12. the outbox's fsync and byte budget ------------------------------------------------


def test_outbox_fsync_follows_storage_fsync_unless_set(tmp_path: Path) -> None:
    base = {"_env_file": None, "outbox_path": tmp_path}
    assert load_settings(**base, storage_fsync_appends=True).outbox_fsync_effective
    assert not load_settings(**base).outbox_fsync_effective
    assert not load_settings(
        **base, storage_fsync_appends=True, outbox_fsync=False
    ).outbox_fsync_effective
    rt = MemoryRuntime(load_settings(**base, storage_fsync_appends=True), redis=None)
    assert rt.outbox("redis", "wf").fsync


async def test_turns_queued_with_fsync_on_are_fsynced(
    workflow_id: str,
    redis_server: RedisServerProcess,
    monkeypatch: pytest.MonkeyPatch,
    durable_runtime: Callable[..., Any],
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    rt = durable_runtime(redis_server.url, storage_fsync_appends=True)
    mem = rt.memory(workflow_id, "s1", "a")
    redis_server.kill()
    before = len(synced)
    await mem.log_turn(1, "t", "a", "r")
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None and writer.degraded
    assert len(synced) > before


async def test_outbox_byte_budget_drops_and_counts(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.jsonl", max_bytes=2_000)
    results = [await box.put({"blob": "x" * 500}) for _ in range(6)]
    assert results.count(True) == 3 and results[3:] == [False, False, False]
    assert box.dropped == 3 and box.pending_bytes <= 2_000
    await box.close()


async def test_a_local_disk_error_in_the_outbox_never_reaches_log_turn(
    workflow_id: str,
    redis_server: RedisServerProcess,
    durable_runtime: Callable[..., Any],
) -> None:
    rt = durable_runtime(redis_server.url, storage_backend="none")
    mem = rt.memory(workflow_id, "s1", "a")
    await mem.log_turn(1, "t", "a", "r")
    redis_server.kill()
    outbox_dir = rt.outbox("redis", workflow_id).path.parent
    outbox_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(outbox_dir)
    outbox_dir.write_text("a file where the outbox folder was")  # every write: ENOTDIR
    await mem.log_turn(2, "t", "a", "r")  # Redis down and the disk refuses: counted
    health = await mem.health()
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None
    assert health["outboxes"][writer.name]["dropped"] >= 1


# --- 8. outboxes keyed by destination ---------------------------------------------------------


async def test_records_queued_for_one_redis_never_replay_into_another(
    workflow_id: str,
    real_url: str,
    durable_runtime: Callable[..., Any],
) -> None:
    rt0 = durable_runtime(real_url)
    rt1 = durable_runtime(real_url.rsplit("/", 1)[0] + "/1")
    box0, box1 = rt0.outbox("redis", workflow_id), rt1.outbox("redis", workflow_id)
    assert box0.path != box1.path and box0.destination != box1.destination
    await box1.put(checkpoint_record("s1", '{"db": 1}'))
    assert await rt0.memory(workflow_id, "s1", "a").load_checkpoint() is None
    # A file copied into the other destination's place is recognised and not delivered.
    await rt1.close()
    box0.path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(box1.path, box0.path)
    mem0 = rt0.memory(workflow_id, "s1", "a")
    assert await mem0.load_checkpoint() is None
    assert box0.foreign == 1 and len(box0) == 0
    await rt0.close()


# --- 10. / 11. no blocking on the loop, bounded file descriptors ----------------------------------


async def test_views_and_writes_never_wait_on_a_peers_outbox_lock_on_the_loop(
    workflow_id: str,
    redis_server: RedisServerProcess,
    durable_runtime: Callable[..., Any],
) -> None:
    rt = durable_runtime(redis_server.url, storage_backend="none")
    box = rt.outbox("redis", workflow_id)
    for n in range(2_000):  # a large leftover
        await box.put(checkpoint_record("s9", f'{{"n": {n}}}'))
    lock = box.path.with_name(box.path.name + ".lock")
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a peer holds the outbox lock
    redis_server.kill()
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0.005)

    ticking = asyncio.ensure_future(ticker())
    mem = rt.memory(workflow_id, "s1", "a")  # construction: no I/O at all
    turn = asyncio.ensure_future(mem.log_turn(1, "t", "a", "r"))
    await asyncio.sleep(0.3)
    assert not turn.done()  # waiting for the peer's lock...
    assert ticks >= 10  # ...in a worker thread: the loop kept running

    def release() -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    threading.Timer(0.0, release).start()
    await asyncio.wait_for(turn, 10.0)
    stop = True
    await ticking


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_many_workflows_do_not_leak_file_descriptors(
    real_url: str,
    durable_runtime: Callable[..., Any],
) -> None:
    rt = durable_runtime(real_url)
    await rt.memory("warm-up", "s1", "a").log_turn(1, "t", "a", "r")
    before = _open_fds()
    for n in range(700):
        mem = rt.memory(f"wf-{n}", "s1", "a")
        await mem.log_turn(1, "t", "a", "r")
        await mem.save_checkpoint('{"n": 1}')
    assert _open_fds() - before < 64


# --- 13. / 14. restart during an outage ------------------------------------------------------


async def test_a_restart_during_an_outage_reads_its_own_queued_writes(
    workflow_id: str,
    redis_server: RedisServerProcess,
    durable_settings: Callable[..., Any],
) -> None:
    settings = durable_settings(redis_server.url)
    first = await MemoryRuntime.from_env(settings)
    mem = first.memory(workflow_id, "s1", "a")
    await mem.log_turn(1, "t1", "a", "r")
    await mem.save_checkpoint('{"turn": 1}')
    redis_server.kill()
    for turn in (2, 3):
        await mem.log_turn(turn, f"t{turn}", "a", "r")
    assert await mem.save_checkpoint('{"turn": 3}') is None  # queued
    # The kernel crashes and restarts while Redis is still down.
    await first.close()
    again = await MemoryRuntime.from_env(settings)  # starts degraded, does not raise
    view = again.memory(workflow_id, "s1", "a")
    assert await view.load_checkpoint() == '{"turn": 3}'
    bundle = await view.rehydrate_bundle()
    assert bundle["checkpoint"] == '{"turn": 3}'
    assert [t["turn_id"] for t in bundle["recent_turns"]][-2:] == ["2", "3"]
    assert "redis_outbox" in bundle["degraded"]
    redis_server.start()  # from its AOF
    writer = again.workflow(workflow_id).redis_writer
    assert writer is not None and await writer.flush(timeout=20.0)
    assert [t["turn_id"] for t in (await view.rehydrate_bundle())["recent_turns"]] == [
        "1",
        "2",
        "3",
    ]
    assert await view.load_checkpoint() == '{"turn": 3}'
    await again.close()


def test_the_drop_in_constructor_works_outside_a_loop_with_a_leftover(
    workflow_id: str,
    real_url: str,
    durable_settings: Callable[..., Any],
) -> None:
    settings = durable_settings(real_url)
    box = MemoryRuntime(settings, redis=None).outbox("redis", workflow_id)
    client = create_redis(settings)
    real_box = MemoryRuntime(settings, redis=client).outbox("redis", workflow_id)
    asyncio.run(_put(real_box, checkpoint_record("s1", '{"left": "over"}')))
    del box
    runtime = MemoryRuntime(settings, redis=client)
    mem = UnifiedMemory(workflow_id, "s1", "a", runtime=runtime)  # no running loop: fine

    async def first_call() -> str | None:
        try:
            return await mem.load_checkpoint()
        finally:
            await runtime.close()
            await client.aclose()

    assert asyncio.run(first_call()) == '{"left": "over"}'


async def _put(box: Outbox, record: dict[str, Any]) -> None:
    await box.put(record)
    await box.close()


async def test_from_env_starts_degraded_when_redis_is_down(
    workflow_id: str,
    redis_server: RedisServerProcess,
    durable_settings: Callable[..., Any],
) -> None:
    settings = durable_settings(redis_server.url)
    redis_server.kill()
    rt = await MemoryRuntime.from_env(settings)
    mem = rt.memory(workflow_id, "s1", "a")
    await mem.log_turn(1, "t", "a", "r")
    redis_server.start()
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None and await writer.flush(timeout=20.0)
    ledger = rt.workflow(workflow_id).ledger
    assert ledger is not None and await ledger.length() == 1
    with pytest.raises(BackendUnavailableError):
        redis_server.kill()
        await MemoryRuntime.from_env(settings, require_redis=True)
    await rt.close()


# --- 15. / 16. conditional saves: translated errors, bounded waits, idempotent retries ---------


async def test_conditional_saves_raise_jarvismem_errors_for_every_redis_failure(
    workflow_id: str,
    redis_server: RedisServerProcess,
    durable_runtime: Callable[..., Any],
) -> None:
    rt = durable_runtime(redis_server.url, storage_backend="none")
    mem = rt.memory(workflow_id, "s1", "a")
    assert await mem.save_checkpoint('{"n": 1}', expected_rev=0) == 1
    admin = aioredis.Redis.from_url(redis_server.url)
    await admin.config_set("maxmemory", 1)
    await admin.config_set("maxmemory-policy", "noeviction")
    with pytest.raises(BackendUnavailableError):  # OOM, not redis' OutOfMemoryError
        await mem.save_checkpoint('{"n": 2}', expected_rev=1)
    await admin.config_set("maxmemory", 0)
    await admin.aclose()
    redis_server.pause()  # a stalled server: the save is bounded by its timeout
    try:
        with pytest.raises(BackendUnavailableError):
            await asyncio.wait_for(mem.save_checkpoint('{"n": 2}', expected_rev=1), 10.0)
    finally:
        redis_server.resume()
    redis_server.kill()
    with pytest.raises(BackendUnavailableError):
        await mem.save_checkpoint('{"n": 2}', expected_rev=1)


async def test_a_conditional_save_whose_reply_was_lost_is_not_a_conflict(
    workflow_id: str,
    real_url: str,
    durable_settings: Callable[..., Any],
) -> None:
    async with LostReplyProxy("127.0.0.1", 6379) as proxy:
        settings = durable_settings(f"redis://127.0.0.1:{proxy.port}/0", tier_timeout_episodic=5.0)
        rt = MemoryRuntime(
            settings, redis=create_redis(settings), lifecycle=Lifecycle(owns_clients=True)
        )
        mem = rt.memory(workflow_id, "s1", "a")
        assert await mem.save_checkpoint('{"n": 1}', expected_rev=0) == 1
        proxy.lose_next_reply(b"EVALSHA")
        # Applied by Redis, reply lost, resent by the client: still our one save.
        assert await mem.save_checkpoint('{"n": 2}', expected_rev=1) == 2
        assert proxy.lost == 1
        stored = await rt.workflow(workflow_id).checkpoints("s1").load()
        assert stored is not None and (stored.state, stored.rev) == ('{"n": 2}', 2)
        with pytest.raises(CheckpointConflictError):  # a real conflict is still one
            await mem.save_checkpoint('{"n": 3}', expected_rev=1)
        await rt.close()


async def test_an_unconditional_save_resent_after_a_newer_one_changes_nothing(
    workflow_id: str,
    real_url: str,
    durable_runtime: Callable[..., Any],
) -> None:
    rt = durable_runtime(real_url)
    store = rt.workflow(workflow_id).checkpoints("s1")
    op = uuid.uuid4().hex
    first = await store.save_validated('{"n": 1}', op_id=op)
    await store.save_validated('{"n": 2}')
    assert await store.save_validated('{"n": 1}', op_id=op) == first  # a retry: a no-op
    stored = await store.load()
    assert stored is not None and stored.state == '{"n": 2}' and stored.rev == 2


async def test_an_outbox_left_by_an_earlier_version_is_adopted_and_replayed(
    keyspace: KeySpace,
    workflow_id: str,
    real_url: str,
    durable_settings: Callable[..., Any],
) -> None:
    settings = durable_settings(real_url)
    legacy = Path(settings.outbox_path) / keyspace.outbox_file("redis", workflow_id)
    old = Outbox(legacy)  # the file layout before outboxes were keyed by destination
    for turn in ("1", "2"):
        await old.put(turn_record("s1", "a", turn))
    await old.ack((await old.peek(1))[0][0])  # turn 1 was delivered before the upgrade
    await old.close()
    rt = MemoryRuntime(
        settings, redis=create_redis(settings), lifecycle=Lifecycle(owns_clients=True)
    )
    bundle = await rt.memory(workflow_id, "s1", "a").rehydrate_bundle()
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["2"]
    assert not legacy.exists() and rt.outbox("redis", workflow_id).path.exists()
    await rt.close()
