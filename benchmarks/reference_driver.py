"""Drives the reference (``jarviscore-framework`` 3.0.0) through the benchmark workloads.

Run by ``benchmarks/reference.py`` with the interpreter of the reference's own venv
(``.cache/jarviscore-venv``): it imports jarviscore and redis only, never jarvismem
or the rest of ``benchmarks`` (it is run as a file, not as a module of the package).

Reads one JSON document on stdin (the Redis URL travels here, not on a command
line ``ps`` shows): ``redis_url``, ``blob_root``, ``prefix`` (of every workflow id,
so the keys it writes can be deleted afterwards), ``turns`` (payloads:
thought/action/result/tokens), ``s1_turns``, ``s2_agents``, ``s2_turns``,
``sweep`` (agent counts), ``sweep_turns``, ``workflows`` (per agent count, at
most), ``s3_reps``. Prints one JSON document: per workload the per-call latencies
in seconds and the wall time.

The workloads are the ones jarvismem runs in the same benchmark: sequential
``log_turn`` into one workflow; N agents logging concurrently in one event loop
(agent ``a`` in workflow ``a % workflows``); ``rehydrate_bundle(ledger_tail=10)`` of
the sequential workflow afterwards (its ledger and scratchpad as the turns left them).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import redis
from jarviscore.memory.unified import UnifiedMemory
from jarviscore.storage.local import LocalBlobStorage
from jarviscore.storage.redis_store import RedisContextStore

STEP = "step-1"


async def log_sequential(mem: Any, turns: list[dict[str, Any]], count: int) -> list[float]:
    lat: list[float] = []
    clock = time.perf_counter
    for i in range(count):
        t = turns[i % len(turns)]
        t0 = clock()
        await mem.log_turn(str(i), t["thought"], t["action"], t["result"], t["tokens"])
        lat.append(clock() - t0)
    return lat


async def concurrent(
    make: Any, turns: list[dict[str, Any]], agents: int, per_agent: int, workflows: int, tag: str
) -> dict[str, Any]:
    mems = [make(f"{tag}-wf{a % workflows}", f"agent-{a}") for a in range(agents)]
    lat: list[float] = []

    async def agent(mem: Any) -> None:
        lat.extend(await log_sequential(mem, turns, per_agent))

    t0 = time.perf_counter()
    await asyncio.gather(*(agent(m) for m in mems))
    return {"lat": lat, "wall": time.perf_counter() - t0}


async def main() -> dict[str, Any]:
    args = json.loads(sys.stdin.read())
    client = redis.Redis.from_url(args["redis_url"], decode_responses=True)
    store = RedisContextStore(client=client)
    blob = LocalBlobStorage(args["blob_root"])
    prefix = args["prefix"]
    turns = args["turns"]

    def make(workflow: str, agent: str) -> Any:
        return UnifiedMemory(f"{prefix}-{workflow}", STEP, agent, redis_store=store,
                             blob_storage=blob)  # fmt: skip

    out: dict[str, Any] = {}
    try:
        seq = make("s1", "agent-1")
        t0 = time.perf_counter()
        lat = await log_sequential(seq, turns, args["s1_turns"])
        out["S1"] = {"lat": lat, "wall": time.perf_counter() - t0}

        out["S2"] = await concurrent(
            make, turns, args["s2_agents"], args["s2_turns"], args["workflows"], "s2"
        )
        out["sweep"] = {}
        for n in args["sweep"]:
            got = await concurrent(
                make, turns, n, args["sweep_turns"], min(n, args["workflows"]), f"sweep{n}"
            )
            out["sweep"][str(n)] = got

        bundle = await seq.rehydrate_bundle(ledger_tail=10)
        if len(bundle["recent_turns"]) != min(10, args["s1_turns"]):
            raise RuntimeError(f"unexpected bundle: {len(bundle['recent_turns'])} turns")
        lat = []
        clock = time.perf_counter
        t_start = clock()
        for _ in range(args["s3_reps"]):
            t0 = clock()
            await seq.rehydrate_bundle(ledger_tail=10)
            lat.append(clock() - t0)
        out["S3"] = {"lat": lat, "wall": clock() - t_start}
    finally:
        # Its keys are not namespaced (ledgers:<wf>, ltm:<wf>, checkpoint:<wf>:...):
        # every workflow id starts with our prefix.
        doomed = list(client.scan_iter(match=f"*{prefix}-*", count=1000))
        for start in range(0, len(doomed), 500):
            client.delete(*doomed[start : start + 500])
        client.close()
    return out


if __name__ == "__main__":
    result = asyncio.run(main())
    print(json.dumps(result))
