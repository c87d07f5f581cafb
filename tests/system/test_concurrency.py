"""Several processes on one workflow: nothing lost, nothing torn, no silent overwrite.

Writers are real OS processes (multiprocessing, spawn) against the real Redis
server and a shared blob store, as several kernels on one host would be.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from jarvismem.errors import CheckpointConflictError, LockNotAcquiredError
from jarvismem.keys import KeySpace
from jarvismem.records import parse_records
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings, load_settings
from jarvismem.testing.fake_llm import FakeLLMServer
from tests.conftest import AZURITE_CONNECTION_STRING, REAL_REDIS_URL, azurite_available

pytestmark = pytest.mark.integration

PROCESSES = 3
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    """One pool of spawned processes for the module (start-up costs ~0.5 s each)."""
    with ProcessPoolExecutor(PROCESSES, mp_context=multiprocessing.get_context("spawn")) as ex:
        yield ex


async def run_in_processes(
    pool: ProcessPoolExecutor, fn: Any, jobs: list[dict[str, Any]]
) -> list[Any]:
    futures = [asyncio.wrap_future(pool.submit(fn, job)) for job in jobs]
    return await asyncio.gather(*futures)


# --- what each process runs (top level, so spawn can import it) --------------------------------


def _settings(job: dict[str, Any]) -> Settings:
    return load_settings(
        _env_file=None,
        redis_url=job["redis_url"],
        jarvismem_namespace=job["namespace"],
        outbox_path=Path(job["root"]) / "outbox" / uuid.uuid4().hex,
        storage_backend=job.get("backend", "local"),
        storage_base_path=Path(job["root"]) / "blobs",
        azure_storage_connection_string=job.get("connection_string"),
        azure_storage_container=job.get("container", "jarvismem"),
        # "count": compaction on but never due, so its counters only ever grow.
        compaction_enabled=bool(job.get("count")),
        compaction_every_turns=10**9,
        compaction_token_threshold=10**12,
        llm_base_url=job.get("llm_url"),
        llm_max_retries=0,
        redis_connect_retries=0,
    )


def log_turns_job(job: dict[str, Any]) -> int:
    async def run() -> int:
        rt = await MemoryRuntime.from_env(_settings(job))
        mem = rt.memory(job["workflow"], "s1", "a1")
        for turn in job["turns"]:
            await mem.log_turn(turn, f"thought {turn} " + "x" * job["pad"], f"act {turn}", turn)
        degraded = any(
            w.degraded
            for w in (
                rt.workflow(job["workflow"]).redis_writer,
                rt.workflow(job["workflow"]).blob_writer,
            )
            if w
        )
        await rt.close()
        return -1 if degraded else len(job["turns"])

    return asyncio.run(run())


def increment_checkpoint_job(job: dict[str, Any]) -> int:
    """Read-modify-write a counter in the checkpoint ``job["n"]`` times; returns conflicts."""

    async def run() -> int:
        rt = await MemoryRuntime.from_env(_settings(job))
        mem = rt.memory(job["workflow"], "s1", "a1")
        conflicts = 0
        for _ in range(job["n"]):
            while True:
                record = await mem.load_checkpoint_record()
                count = json.loads(record.state)["count"] if record else 0
                rev = record.rev if record else 0
                try:
                    await mem.save_checkpoint(json.dumps({"count": count + 1}), expected_rev=rev)
                    break
                except CheckpointConflictError:
                    conflicts += 1
        await rt.close()
        return conflicts

    return asyncio.run(run())


def compact_job(job: dict[str, Any]) -> tuple[int, int]:
    """Log a few turns then try to compact, ``job["rounds"]`` times; (compacted, refused)."""

    async def run() -> tuple[int, int]:
        rt = await MemoryRuntime.from_env(_settings(job))
        mem = rt.memory(job["workflow"], "s1", job["agent"])
        done = refused = 0
        for r in range(job["rounds"]):
            for i in range(3):
                await mem.log_turn(f"{r}-{i}", f"{job['agent']} thought {r}-{i}", "act", "ok")
            try:
                result = await mem.compact_now()
                done += bool(result.get("compacted"))
            except LockNotAcquiredError:
                refused += 1
        await rt.close()
        return done, refused

    return asyncio.run(run())


# --- the tests ---------------------------------------------------------------------------------


def _job(keyspace: KeySpace, workflow_id: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "redis_url": REAL_REDIS_URL,
        "namespace": keyspace.namespace,
        "workflow": workflow_id,
        "root": str(tmp_path),
        **extra,
    }


# Serial: every write must land live within the tier timeout (no process may end
# degraded), a wall-clock bound that the parallel phase's load can stretch (one CI
# run saw a 2 s Redis write deadline pass; the turns were queued and replayed).
@pytest.mark.serial
@pytest.mark.parametrize("backend", ["local", "azure"])
async def test_processes_logging_into_one_ledger_and_one_scratchpad_lose_and_tear_nothing(
    pool: ProcessPoolExecutor,
    real_redis: Any,
    keyspace: KeySpace,
    workflow_id: str,
    tmp_path: Path,
    backend: str,
) -> None:
    extra: dict[str, Any] = {"backend": backend}
    if backend == "azure":
        if not azurite_available():
            pytest.skip("Azurite not reachable")
        extra |= {
            "connection_string": AZURITE_CONNECTION_STRING,
            "container": "conc" + uuid.uuid4().hex[:16],
        }
    per_process = 40
    jobs = [
        _job(
            keyspace,
            workflow_id,
            tmp_path,
            turns=[p * 1000 + i for i in range(per_process)],
            pad=3000,
            **extra,
        )
        for p in range(PROCESSES)
    ]
    assert await run_in_processes(pool, log_turns_job, jobs) == [per_process] * PROCESSES

    settings = _settings(jobs[0])
    rt = await MemoryRuntime.from_env(settings)
    mem = rt.memory(workflow_id, "s1", "a1")
    assert mem.episodic is not None and mem.working is not None
    history = await mem.episodic.full_history()
    expected = {str(t) for job in jobs for t in job["turns"]}
    ids = [e["turn_id"] for e in history]
    assert len(ids) == len(expected) and set(ids) == expected
    raw = await rt.blob.read(mem.working.path)  # type: ignore[union-attr]
    lines = [line for line in raw.split(b"\n") if line.strip()]
    records = parse_records(raw, source="test")
    assert len(records) == len(lines) == len(expected)  # no torn or interleaved line
    for record in records:
        turn = record["turn_id"]
        assert record["data"]["thought"] == f"thought {turn} " + "x" * 3000
        assert record["data"]["result"] == int(turn)
    await rt.close()


async def _counters_and_ledger(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> tuple[tuple[int, int], int, int]:
    """The compaction counters, the ledger's length and its entries' token sum."""
    from jarvismem.records import decode_entry, entry_tokens

    state = await real_redis.hgetall(keyspace.ltm_state(workflow_id))
    counters = (int(state.get(b"turns", 0)), int(state.get(b"tokens", 0)))
    rows = await real_redis.xrange(keyspace.ledger(workflow_id))
    tokens = sum(entry_tokens(decode_entry(sid, fields)) for sid, fields in rows)
    return counters, len(rows), tokens


async def test_processes_logging_the_same_turns_store_and_count_each_turn_once(
    pool: ProcessPoolExecutor,
    real_redis: Any,
    keyspace: KeySpace,
    workflow_id: str,
    tmp_path: Path,
) -> None:
    """Each stored turn once in the ledger, and once in the compaction counters: every
    process adds to them inside its append script, and a turn another process
    stored first adds nothing."""
    turns = list(range(1, 31))
    jobs = [
        _job(keyspace, workflow_id, tmp_path, turns=turns, pad=10, count=True)
        for _ in range(PROCESSES)
    ]
    await run_in_processes(pool, log_turns_job, jobs)
    rt = await MemoryRuntime.from_env(_settings(jobs[0]))
    ledger = rt.memory(workflow_id, "s1", "a1").episodic
    assert ledger is not None
    ids = [e["turn_id"] for e in await ledger.full_history()]
    assert sorted(ids, key=int) == [str(t) for t in turns]
    await rt.close()
    counters, stored, tokens = await _counters_and_ledger(real_redis, keyspace, workflow_id)
    assert counters == (stored, tokens) == (len(turns), tokens)


async def test_a_process_killed_while_logging_leaves_the_counters_equal_to_the_ledger(
    real_redis: Any, keyspace: KeySpace, workflow_id: str, tmp_path: Path
) -> None:
    """SIGKILL at any point: the count and the entry are one atomic script call, so
    the counters never hold a turn the ledger lacks, nor miss one it holds."""
    import os
    import sys

    job = _job(keyspace, workflow_id, tmp_path, turns=100_000, pad=50, count=True)
    code = (
        "import json, sys; from tests.system.test_concurrency import log_turns_job; "
        "job = json.loads(sys.argv[1]); job['turns'] = list(range(job['turns'])); "
        "log_turns_job(job)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    ledger = keyspace.ledger(workflow_id)
    # The second run re-logs the turns the first stored (duplicates count nothing)
    # and is killed further on.
    for kill_at in (30, 250):
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, json.dumps(job), cwd=REPO_ROOT, env=env
        )
        deadline = time.monotonic() + 60
        while await real_redis.xlen(ledger) < kill_at:
            assert time.monotonic() < deadline and child.returncode is None
            await asyncio.sleep(0.005)
        child.kill()
        await child.wait()
        # One MULTI/EXEC: an append the dead process sent just before dying may still
        # run between two separate reads; both counts come from one instant.
        async with real_redis.pipeline(transaction=True) as pipe:
            pipe.hget(keyspace.ltm_state(workflow_id), "turns")
            pipe.xlen(ledger)
            turns, length = await pipe.execute()
        assert int(turns) == length


async def test_concurrent_checkpoint_updates_with_revisions_lose_no_increment(
    pool: ProcessPoolExecutor,
    real_redis: Any,
    keyspace: KeySpace,
    workflow_id: str,
    tmp_path: Path,
) -> None:
    n = 15
    jobs = [_job(keyspace, workflow_id, tmp_path, n=n) for _ in range(PROCESSES)]
    await run_in_processes(pool, increment_checkpoint_job, jobs)
    rt = await MemoryRuntime.from_env(_settings(jobs[0]))
    record = await rt.memory(workflow_id, "s1", "a1").load_checkpoint_record()
    assert record is not None
    # A stale save applied silently would lose an increment here.
    assert json.loads(record.state)["count"] == n * PROCESSES
    assert record.rev == n * PROCESSES
    await rt.close()


async def test_a_save_based_on_a_stale_revision_from_another_process_is_rejected(
    real_redis: Any, keyspace: KeySpace, workflow_id: str, tmp_path: Path
) -> None:
    job = _job(keyspace, workflow_id, tmp_path)
    mine = await MemoryRuntime.from_env(_settings(job))
    theirs = await MemoryRuntime.from_env(_settings(job))
    a, b = mine.memory(workflow_id, "s1", "a1"), theirs.memory(workflow_id, "s1", "a1")
    base = await a.save_checkpoint("v1", expected_rev=0)
    assert base == 1
    assert await b.save_checkpoint("theirs", expected_rev=base) == 2
    with pytest.raises(CheckpointConflictError) as info:
        await a.save_checkpoint("mine, stale", expected_rev=base)
    assert (info.value.expected, info.value.actual) == (1, 2)
    assert await a.load_checkpoint() == "theirs"
    await mine.close()
    await theirs.close()


class OverlapRecorder:
    """An LLM responder that is slow and notes how many calls were in flight at once."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls = 0
        self.started = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        with self._lock:
            self.in_flight += 1
            self.calls += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.started.set()
        time.sleep(self.delay)
        with self._lock:
            self.in_flight -= 1
        return "summary so far: the agents worked."


async def test_two_compactors_of_one_workflow_never_run_at_once_across_processes(
    pool: ProcessPoolExecutor,
    real_redis: Any,
    keyspace: KeySpace,
    workflow_id: str,
    tmp_path: Path,
) -> None:
    recorder = OverlapRecorder(delay=0.3)
    with FakeLLMServer(responder=recorder) as llm:
        jobs = [
            _job(keyspace, workflow_id, tmp_path, agent=f"a{p}", rounds=3, llm_url=llm.url)
            for p in range(PROCESSES)
        ]
        results = await run_in_processes(pool, compact_job, jobs)
    compacted = sum(done for done, _ in results)
    refused = sum(r for _, r in results)
    assert compacted >= 1 and compacted + refused <= 3 * PROCESSES
    assert recorder.calls >= compacted
    # One compaction makes one LLM call at a time here (small pages, one chunk), so a
    # second call in flight could only come from a second compactor.
    assert recorder.max_in_flight == 1


async def test_a_second_compactor_is_refused_while_the_first_holds_the_lock(
    real_redis: Any, keyspace: KeySpace, workflow_id: str, tmp_path: Path
) -> None:
    recorder = OverlapRecorder(delay=0.5)
    with FakeLLMServer(responder=recorder) as llm:
        job = _job(keyspace, workflow_id, tmp_path, llm_url=llm.url)
        first = await MemoryRuntime.from_env(_settings(job))
        second = await MemoryRuntime.from_env(_settings(job))
        mem1, mem2 = first.memory(workflow_id, "s1", "a1"), second.memory(workflow_id, "s1", "a1")
        await mem1.log_turn(1, "thought", "act", "ok")
        running = asyncio.ensure_future(mem1.compact_now())
        # Wait until the first compactor is inside its (slow) LLM call.
        assert await asyncio.to_thread(recorder.started.wait, 30)
        with pytest.raises(LockNotAcquiredError):
            await mem2.compact_now()
        assert (await running)["compacted"] is True
        assert recorder.max_in_flight == 1
        await first.close()
        await second.close()
