"""Payloads, runtimes and fast fills shared by the scenarios."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.keys import KeySpace
from jarvismem.records import encode_fields, encode_record
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings, load_settings

_WORDS = (
    "the agent checks inventory before it plans route cache index result query tool call "
    "retry budget user asked ticket order invoice summary draft reply schedule meeting "
    "vector search returned three rows and the second one matches the customer request"
).split()

STEP = "step-1"


@dataclass(frozen=True, slots=True)
class Turn:
    """One realistic turn payload: ~250-char thought, short action, ~350-char result."""

    thought: str
    action: str
    result: str
    tokens: int


def _text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def make_turns(count: int = 64, seed: int = 7) -> list[Turn]:
    """``count`` distinct payloads, cycled by the scenarios (made once, outside timing)."""
    rng = random.Random(seed)
    return [
        Turn(
            thought=_text(rng, 250),
            action=f"search_orders(customer_id={rng.randint(1000, 9999)}, limit=5)",
            result=_text(rng, 350),
            tokens=rng.randint(80, 400),
        )
        for _ in range(count)
    ]


def ledger_entry(turn: Turn, turn_id: int, agent_id: str, ts: float) -> dict[str, Any]:
    """The ledger entry ``log_turn`` writes for ``turn`` (same fields, same sizes)."""
    return {
        "turn_id": str(turn_id),
        "step_id": STEP,
        "agent_id": agent_id,
        "ts": ts,
        "thought": turn.thought,
        "action": turn.action,
        "result": turn.result,
        "tokens": turn.tokens,
    }


def raw_xadd_fields(turn: Turn) -> dict[str, str]:
    """Field/value pairs of a raw XADD with the same payload size as a logged turn."""
    args = encode_fields(ledger_entry(turn, 123456, "agent-1", time.time()))
    return dict(zip(args[0::2], args[1::2], strict=True))


def bench_settings(namespace: str, tmp: Path, **overrides: Any) -> Settings:
    """Settings for a benchmark runtime: fresh namespace, tmp outbox, no .env file.

    Everything else is the default a user runs with (compaction on with the
    extractive summarizer, redaction on, ledger retention on); a scenario that
    reports a non-default row (``compaction_enabled=False``) says so in its name.
    """
    values: dict[str, Any] = {
        "jarvismem_namespace": namespace,
        "outbox_path": tmp / "outbox",
        "storage_base_path": tmp / "blobs",
        "_env_file": None,
    }
    values.update(overrides)
    return load_settings(**values)


def make_runtime(
    settings: Settings, redis: Any, blob: BlobStorage | None, athena: Any = None
) -> MemoryRuntime:
    """A runtime over the benchmark's shared clients (it does not close them)."""
    return MemoryRuntime(settings, redis=redis, blob=blob, athena=athena)


async def fill_ledger(
    redis: Any,
    keyspace: KeySpace,
    workflow_id: str,
    turns: list[Turn],
    count: int,
    max_len: int = 0,
    agents: int = 1,
) -> None:
    """Append ``count`` turns to the workflow's stream with pipelined XADDs.

    ``max_len`` > 0 trims as the ledger's retention does (``MAXLEN ~ max_len``), so
    a fill of a million turns leaves the stream a million turns of appends have
    left behind, not a million entries retention would never keep. ``agents``:
    turn ``i`` is logged by ``agent-{1 + i % agents}`` (1: every turn by ``agent-1``),
    so a filter on one agent matches one entry in ``agents``.
    """
    key = keyspace.ledger(workflow_id)
    batch = 2000
    ts = time.time()
    # The field/value pairs of the 64 payloads, encoded once: at a million
    # entries the encoding, not Redis, would otherwise be the fill's cost.
    encoded = []
    for n, turn in enumerate(turns):
        args = encode_fields(ledger_entry(turn, n, "agent-1", ts))
        encoded.append(dict(zip(args[0::2], args[1::2], strict=True)))
    trim = {"maxlen": max_len, "approximate": True} if max_len > 0 else {}
    for start in range(0, count, batch):
        async with redis.pipeline(transaction=False) as pipe:
            for i in range(start, min(count, start + batch)):
                fields = dict(encoded[i % len(encoded)])
                fields["turn_id"] = str(i)
                if agents > 1:
                    fields["agent_id"] = json.dumps(f"agent-{1 + i % agents}")  # as encode_fields
                pipe.xadd(key, fields, **trim)
            await pipe.execute()


def scratchpad_bytes(turns: list[Turn], count: int, first: int = 0) -> bytes:
    """``count`` turn records (ids from ``first``) in the documented scratchpad format
    (see tiers/working.py)."""
    ts = time.time()
    parts = []
    for i in range(first, first + count):
        turn = turns[i % len(turns)]
        parts.append(
            encode_record(
                {
                    "ts": ts + i * 1e-3,
                    "type": "turn",
                    "scope": "step",
                    "turn_id": str(i),
                    "data": {
                        "thought": turn.thought,
                        "action": turn.action,
                        "result": turn.result,
                        "tokens": turn.tokens,
                    },
                }
            )
        )
    return b"".join(parts)


async def fill_scratchpad(blob: BlobStorage, path: str, data: bytes, chunk: int) -> None:
    """Write the scratchpad through the backend in ``chunk``-byte appends (record-aligned)."""
    start = 0
    while start < len(data):
        end = min(len(data), start + chunk)
        if end < len(data):
            cut = data.rfind(b"\n", start + 1, end)
            end = cut if cut > start else end
        await blob.append(path, data[start:end])
        start = end


def write_local_scratchpad(root: Path, path: str, turns: list[Turn], count: int) -> None:
    """Write a local scratchpad of ``count`` records directly (run in a thread).

    Written in slices of 10,000 records, so a million-turn scratchpad (~800 MB)
    never sits in memory whole.
    """
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    step = 10_000
    with open(target, "wb") as fh:
        for start in range(0, count, step):
            fh.write(scratchpad_bytes(turns, min(step, count - start), first=start))


async def delete_namespace(redis: Any, namespace: str) -> int:
    """Delete every key of ``namespace``; returns how many."""
    deleted = 0
    batch: list[Any] = []
    async for key in redis.scan_iter(match=f"jm:{namespace}:*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            deleted += await redis.delete(*batch)
            batch.clear()
    if batch:
        deleted += await redis.delete(*batch)
    return deleted


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


class LoopLagMonitor:
    """How late the event loop wakes a task that sleeps 1 ms, while something else runs.

    Each overshoot (time slept minus 1 ms) is how long the loop was busy with
    other callbacks (or the process waited for a CPU): a compaction step that
    holds the loop for 20 ms shows as a 20 ms overshoot. Use as ``async with``.
    """

    PERIOD = 0.001

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        clock = time.perf_counter
        while True:
            t0 = clock()
            await asyncio.sleep(self.PERIOD)
            self.lags.append(max(0.0, clock() - t0 - self.PERIOD))

    async def __aenter__(self) -> LoopLagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        await asyncio.sleep(0)  # started before the measured work begins
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass


class ChildServer:
    """A loopback fake server in a child process (its threads do not share our GIL).

    ``code`` must print the server's base URL as the last word of its first stdout
    line and serve until its stdin closes or it gets SIGINT.
    """

    def __init__(self, code: str, name: str) -> None:
        self.code = code
        self.name = name

    async def __aenter__(self) -> str:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            self.code,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        if not line:
            raise RuntimeError(f"the {self.name} did not start")
        return line.decode().split()[-1]

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


FAKE_ATHENA_CODE = (
    "import sys\n"
    "from jarvismem.testing.fake_athena import FakeAthenaServer\n"
    "s = FakeAthenaServer().start()\n"
    "print(s.url, flush=True)\n"
    "sys.stdin.read()\n"
    "s.stop()\n"
)

# The fake LLM records every request; the compaction runs make thousands, so the
# record is cleared as it goes (a reply does not depend on it).
FAKE_LLM_CODE = (
    "import sys, threading, time\n"
    "from jarvismem.testing.fake_llm import FakeLLMServer\n"
    "s = FakeLLMServer().start()\n"
    "print(s.url, flush=True)\n"
    "def trim():\n"
    "    while True:\n"
    "        time.sleep(1.0)\n"
    "        s.clear_requests()\n"
    "threading.Thread(target=trim, daemon=True).start()\n"
    "sys.stdin.read()\n"
    "s.stop()\n"
)
