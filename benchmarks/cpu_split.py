"""CPU SPLIT: where a sequential turn's time goes, compaction on and off.

S1 (sequential ``log_turn``, the default configuration) reports turns per second;
this says who spends the CPU behind them. For each run it measures, per turn:

* wall time;
* CPU of the kernel's process (every thread: ``getrusage(RUSAGE_SELF)``);
* CPU of the Redis server (``INFO cpu``, so the server should serve this run only);
* CPU of the summarizer's child process (``/proc/<pid>/stat`` of this process's children).

Runs alternate compaction on and off, ``--runs`` each, and the medians are printed.
``--pin`` runs the measured loop with this process (and so its summarizer child)
on one CPU, which separates what compaction costs the loop itself from what the
child's CPU on the other core costs it by sharing the machine.

``python -m benchmarks.cpu_split [--turns N] [--runs K] [--pin] [--redis-url URL] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.fixtures import bench_settings, make_runtime, make_turns
from jarvismem.backends.blob.local import LocalBlobStorage

TURNS = 10_000
RUNS = 2
WARM_UP = 50


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's live children."""
    me, tick, total = os.getpid(), os.sysconf("SC_CLK_TCK"), 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _redis_cpu(redis: Any) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def one_run(redis: Any, turns: int, compaction: bool) -> dict[str, float]:
    """Per-turn microseconds of wall, kernel process, Redis and summarizer child CPU."""
    tmp = Path(tempfile.mkdtemp(prefix="jarvismem-cpu-"))
    samples = make_turns()
    settings = bench_settings("cpu" + uuid.uuid4().hex[:10], tmp, compaction_enabled=compaction)
    async with make_runtime(settings, redis, LocalBlobStorage(tmp / "blobs")) as rt:
        mem = rt.memory("cpu-split", "step-1", "agent-1")
        for i in range(10_000_000, 10_000_000 + WARM_UP):  # script loaded, files open
            t = samples[i % len(samples)]
            await mem.log_turn(i, t.thought, t.action, t.result, t.tokens)
        redis0, child0, self0 = await _redis_cpu(redis), _children_cpu(), _self_cpu()
        start = time.perf_counter()
        for i in range(turns):
            t = samples[i % len(samples)]
            await mem.log_turn(i, t.thought, t.action, t.result, t.tokens)
        wall = time.perf_counter() - start
        self1, child1, redis1 = _self_cpu(), _children_cpu(), await _redis_cpu(redis)
        keys = [k async for k in redis.scan_iter(match=f"*{settings.jarvismem_namespace}*")]
        if keys:
            await redis.unlink(*keys)
    per = 1e6 / turns
    return {
        "turns_per_s": turns / wall,
        "wall_us": wall * per,
        "kernel_cpu_us": (self1 - self0) * per,
        "redis_cpu_us": (redis1 - redis0) * per,
        "summarizer_cpu_us": (child1 - child0) * per,
    }


async def run(url: str, turns: int, runs: int) -> dict[str, dict[str, float]]:
    import redis.asyncio as aioredis

    redis = aioredis.Redis.from_url(url)
    got: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    try:
        for _ in range(runs):
            for mode in ("on", "off"):
                got[mode].append(await one_run(redis, turns, mode == "on"))
                print(f"[cpu_split] compaction {mode}: {got[mode][-1]}", file=sys.stderr)
    finally:
        await redis.aclose()
    return {
        mode: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        for mode, rows in got.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_split", description=__doc__)
    parser.add_argument("--turns", type=int, default=TURNS, help=f"turns per run ({TURNS})")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs per mode ({RUNS})")
    parser.add_argument("--pin", action="store_true", help="run on one CPU (taskset -c 0)")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    )
    parser.add_argument("--json", action="store_true", help="print the medians as JSON")
    args = parser.parse_args(argv)
    if args.pin and os.environ.get("_JARVISMEM_CPU_PINNED") != "1":
        # Re-run under taskset so the summarizer child inherits the one CPU too.
        env = {**os.environ, "_JARVISMEM_CPU_PINNED": "1"}
        command = ["taskset", "-c", "0", sys.executable, "-m", "benchmarks.cpu_split"]
        rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--pin"]
        return subprocess.call([*command, *rest, "--pin"], env=env)
    result = asyncio.run(run(args.redis_url, args.turns, args.runs))
    if args.json:
        print(json.dumps({"pinned": args.pin, "turns": args.turns, **result}, indent=2))
        return 0
    print(
        f"per turn, medians of {args.runs} runs of {args.turns:,} turns"
        f"{' on one CPU' if args.pin else ''}:"
    )
    print(
        f"{'compaction':<11}{'turns/s':>9}{'wall us':>9}{'kernel CPU':>12}"
        f"{'Redis CPU':>11}{'summarizer CPU':>16}"
    )
    for mode, row in result.items():
        print(
            f"{mode:<11}{row['turns_per_s']:>9,.0f}{row['wall_us']:>9.0f}"
            f"{row['kernel_cpu_us']:>12.0f}{row['redis_cpu_us']:>11.0f}"
            f"{row['summarizer_cpu_us']:>16.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
