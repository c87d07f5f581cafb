"""Payloads, runtimes and fast fills shared by the scenarios."""

from __future__ import annotations

import os
import random
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

    Compaction is off unless asked for: it runs off the hot path by design and
    would add background Redis load that is not what a scenario measures.
    """
    values: dict[str, Any] = {
        "jarvismem_namespace": namespace,
        "outbox_path": tmp / "outbox",
        "storage_base_path": tmp / "blobs",
        "compaction_enabled": False,
        "_env_file": None,
    }
    values.update(overrides)
    return load_settings(**values)


def make_runtime(
    settings: Settings, redis: Any, blob: BlobStorage | None, athena: Any = None
) -> MemoryRuntime:
    """A runtime over the benchmark's shared clients (it does not close them)."""
    return MemoryRuntime(settings, redis=redis, blob=blob, athena=athena, owns_clients=False)


async def fill_ledger(
    redis: Any, keyspace: KeySpace, workflow_id: str, turns: list[Turn], count: int
) -> None:
    """Append ``count`` turns to the workflow's stream with pipelined XADDs."""
    key = keyspace.ledger(workflow_id)
    batch = 2000
    ts = time.time()
    for start in range(0, count, batch):
        async with redis.pipeline(transaction=False) as pipe:
            for i in range(start, min(count, start + batch)):
                entry = ledger_entry(turns[i % len(turns)], i, "agent-1", ts + i * 1e-3)
                args = encode_fields(entry)
                pipe.xadd(key, dict(zip(args[0::2], args[1::2], strict=True)))
            await pipe.execute()


def scratchpad_bytes(turns: list[Turn], count: int) -> bytes:
    """``count`` turn records in the documented scratchpad format (see tiers/working.py)."""
    ts = time.time()
    parts = []
    for i in range(count):
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


def write_local_scratchpad(root: Path, path: str, data: bytes) -> None:
    """Write a local scratchpad file directly (run in a thread)."""
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


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
