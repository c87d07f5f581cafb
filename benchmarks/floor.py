"""S0: the floor — what one turn costs this design in Python with nothing else.

A turn of the default configuration is, at bottom, one call of the ledger's Lua
append script (deduplicated XADD + index + compaction counters) and one line appended to the
scratchpad's file. S0 does exactly that, driven straight from ``redis.asyncio``
and ``os.write`` on an ``O_APPEND`` descriptor: no redaction, no payload checks,
no outbox, no tiers, no telemetry. It is the best a Python process can do with
this design, so S1 and S2 are reported as ratios to it.

Sequential: one turn after another. Concurrent (N agents): N tasks, their script
calls coalesced into one pipeline per event-loop pass, as the defaults'
auto-pipeline does; file appends inline.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.fixtures import ledger_entry
from jarvismem.keys import KeySpace
from jarvismem.records import encode_fields, entry_tokens

# The very script the ledger runs per turn (KEYS: ledger, index, compaction counters;
# ARGV: index field, ttl, maxlen, tokens, field/value pairs): the floor must pay what
# the design pays.
from jarvismem.tiers.episodic import _APPEND_LUA

if TYPE_CHECKING:
    from benchmarks.suite import Bench

TTL_SECONDS = 7 * 24 * 3600


class _Coalescer:
    """One pipeline per loop pass for the script calls tasks issue meanwhile."""

    def __init__(self, redis: Any, sha: str) -> None:
        self.redis = redis
        self.sha = sha
        self.pending: list[tuple[list[str], list[str], asyncio.Future[Any]]] = []
        self.scheduled = False

    def call(self, keys: list[str], args: list[str]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.pending.append((keys, args, fut))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(lambda: asyncio.ensure_future(self._flush()))
        return fut

    async def _flush(self) -> None:
        batch, self.pending, self.scheduled = self.pending, [], False
        pipe = self.redis.pipeline(transaction=False)
        for keys, args, _ in batch:
            pipe.evalsha(self.sha, len(keys), *keys, *args)
        replies = await pipe.execute()
        for (_, _, fut), reply in zip(batch, replies, strict=True):
            fut.set_result(reply)


def _turn_args(bench: Bench, i: int, agent: str) -> tuple[list[str], int, bytes]:
    """The script's field/value pairs, the turn's tokens and its scratchpad line."""
    t = bench.turns[i % len(bench.turns)]
    entry = ledger_entry(t, i, agent, time.time())
    fields = encode_fields(entry)
    line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
    return fields, entry_tokens(entry), line


async def s0(bench: Bench, agents: int | None, turns: int) -> dict[str, float]:
    """Sequential (``agents=None``) or ``agents`` concurrent agents, ``turns`` each."""
    redis = bench.redis
    ks: KeySpace = bench.keyspace
    sha = await redis.script_load(_APPEND_LUA)
    folder = Path(bench.tmp) / "floor"
    folder.mkdir(parents=True, exist_ok=True)
    label = "S0 floor sequential" if agents is None else f"S0 floor {agents} agents pipelined"
    clock = time.perf_counter
    lat: list[float] = []
    coalescer = _Coalescer(redis, sha)

    async def agent(a: int, count: int, start: int) -> None:
        wf = f"floor-{'seq' if agents is None else agents}-wf{a % bench.cfg.s2_workflows}"
        keys = [ks.ledger(wf), ks.turn_index(wf), ks.ltm_state(wf)]
        fd = os.open(folder / f"{wf}-agent-{a}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for i in range(start, start + count):
                fields, tokens, line = _turn_args(bench, i, f"agent-{a}")
                args = [f"s:agent-{a}:{i}", str(TTL_SECONDS), "0", str(tokens), *fields]
                t0 = clock()
                if agents is None:
                    await redis.evalsha(sha, len(keys), *keys, *args)
                else:
                    await coalescer.call(keys, args)
                os.write(fd, line)
                lat.append(clock() - t0)
        finally:
            os.close(fd)

    n = 1 if agents is None else agents
    await asyncio.gather(*(agent(a, 2, 10_000_000) for a in range(n)))  # warm-up
    lat.clear()
    t_start = clock()
    await asyncio.gather(*(agent(a, turns, 0) for a in range(n)))
    return bench.measure(label, lat, clock() - t_start)


async def floor_scenario(bench: Bench) -> dict[str, dict[str, float]]:
    """S0 sequential and at each S2 target agent count; keyed "sequential" / "32"..."""
    cfg = bench.cfg
    rows = {"sequential": await s0(bench, None, cfg.s1_off_turns)}
    for n in cfg.s2_target_counts:
        rows[str(n)] = await s0(bench, n, cfg.s2_turns)
    raw = bench.report.measurements["raw sequential XADD"]["ops_per_s"]
    bench.report.ratios["S0 floor sequential / raw sequential XADD throughput"] = (
        rows["sequential"]["ops_per_s"] / raw if raw else float("nan")
    )
    return rows
