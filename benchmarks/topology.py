"""S1, S2 and S3 on a Redis topology of the benchmark's own: single, Sentinel, Cluster.

``python -m benchmarks --topology single|sentinel|cluster [--quick]`` starts the
topology on free loopback ports (tests/harness/ha.py; AOF ``always`` on every
data node, one replica per primary for Sentinel and Cluster), builds the runtime
the way a user does (``MemoryRuntime.from_env`` with ``REDIS_URL``, and
``REDIS_CLUSTER=true`` on a cluster), and prints one row per durability level:

* S1: sequential ``log_turn`` of one agent (p50, p99, turns/s);
* S2: 32 agents over 8 workflows, concurrently in one loop (turns/s, p99);
* S3: ``rehydrate_bundle`` p50 on a workflow of ``s3_size`` turns.

``replicated`` rows need ``REDIS_DURABILITY`` (the HA runtime); without it they are
left out with a note. ``single`` has no replica, so it runs ``primary`` only.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.fixtures import make_turns
from benchmarks.stats import latency_summary
from jarvismem.memory import UnifiedMemory
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from tests.harness.ha import ClusterBed, SentinelBed, durability_supported, sentinel_supported
from tests.harness.redis_server import RedisServerProcess

TOPOLOGIES = ("single", "sentinel", "cluster")
STEP = "s1"


@dataclass
class TopologyConfig:
    """Sizes of a topology run."""

    s1_turns: int = 5_000
    s2_agents: int = 32
    s2_workflows: int = 8
    s2_turns: int = 100
    s3_size: int = 2_000
    s3_reps: int = 100

    @classmethod
    def quick(cls) -> TopologyConfig:
        return cls(s1_turns=500, s2_turns=10, s3_size=200, s3_reps=20)


class _Bed:
    """The topology's servers and the URL settings of a runtime on them."""

    def __init__(self, topology: str, root: Path) -> None:
        self.topology = topology
        self.bed: Any
        if topology == "cluster":
            self.bed = ClusterBed(root / "bed")
        elif topology == "sentinel":
            self.bed = SentinelBed(root / "bed")
        else:
            self.bed = RedisServerProcess(root / "bed", appendfsync="always")

    def __enter__(self) -> _Bed:
        self.bed.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if isinstance(self.bed, RedisServerProcess):
            self.bed.kill()
        else:
            self.bed.stop()

    def settings(self) -> dict[str, Any]:
        if isinstance(self.bed, ClusterBed):
            return {"redis_url": self.bed.url(), "redis_cluster": True}
        return {"redis_url": self.bed.url}


def durabilities(topology: str) -> tuple[list[str], list[str]]:
    """(levels to run, notes on what is left out)."""
    if topology == "single":
        return ["primary"], ["single: no replica, so no replicated row"]
    if not durability_supported():
        return ["primary"], [f"{topology}: REDIS_DURABILITY unknown to this jarvismem: "
                             "no replicated row"]  # fmt: skip
    return ["primary", "replicated"], []


async def _log(mem: UnifiedMemory, turns: list[Any], start: int, count: int) -> list[float]:
    lat = []
    clock = time.perf_counter
    for i in range(start, start + count):
        t = turns[i % len(turns)]
        t0 = clock()
        await mem.log_turn(i, t.thought, t.action, t.result, t.tokens)
        lat.append(clock() - t0)
    return lat


async def measure(fields: dict[str, Any], cfg: TopologyConfig) -> dict[str, float]:
    """S1, S2, S3 through one runtime built from ``fields``; the row's figures."""
    turns = make_turns()
    row: dict[str, float] = {}
    rt = await MemoryRuntime.from_env(load_settings(_env_file=None, **fields), require_redis=True)
    try:
        mem = rt.memory("s1-wf", STEP, "agent-1")
        await _log(mem, turns, 10_000_000, 20)  # warm-up: scripts loaded, files open
        t0 = time.perf_counter()
        s1 = latency_summary(await _log(mem, turns, 0, cfg.s1_turns), time.perf_counter() - t0)
        row.update(s1_p50_ms=s1["median_ms"], s1_p99_ms=s1["p99_ms"], s1_ops=s1["ops_per_s"])

        mems = [
            rt.memory(f"s2-wf{a % cfg.s2_workflows}", STEP, f"agent-{a}")
            for a in range(cfg.s2_agents)
        ]
        await asyncio.gather(*(_log(m, turns, 10_000_000, 2) for m in mems))
        t0 = time.perf_counter()
        parts = await asyncio.gather(*(_log(m, turns, 0, cfg.s2_turns) for m in mems))
        s2 = latency_summary([x for p in parts for x in p], time.perf_counter() - t0)
        row.update(s2_p99_ms=s2["p99_ms"], s2_ops=s2["ops_per_s"])

        reader = rt.memory("s3-wf", STEP, "agent-1")
        # Filled through log_turn (the topology decides where the keys go).
        await asyncio.gather(
            *(_log(rt.memory("s3-wf", STEP, f"filler-{k}"), turns, 0, cfg.s3_size // 8)
              for k in range(8))
        )  # fmt: skip
        await reader.rehydrate_bundle(ledger_tail=10)
        lat = []
        for _ in range(cfg.s3_reps):
            t0 = time.perf_counter()
            bundle = await reader.rehydrate_bundle(ledger_tail=10)
            lat.append(time.perf_counter() - t0)
            if bundle["degraded"]:
                raise RuntimeError(f"a degraded bundle was measured: {bundle['degraded']}")
        row["s3_p50_ms"] = statistics.median(lat) * 1e3
    finally:
        await rt.close()
    return row


COLUMNS = (
    ("s1_p50_ms", "S1 p50 ms", "{:.2f}"),
    ("s1_p99_ms", "S1 p99 ms", "{:.2f}"),
    ("s1_ops", "S1 turns/s", "{:,.0f}"),
    ("s2_ops", "S2 32 agents turns/s", "{:,.0f}"),
    ("s2_p99_ms", "S2 p99 ms", "{:.1f}"),
    ("s3_p50_ms", "S3 p50 ms", "{:.2f}"),
)


def render(rows: list[tuple[str, str, dict[str, float]]], notes: list[str]) -> str:
    head = ["topology", "durability", *(title for _, title, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for topology, durability, row in rows:
        cells = [fmt.format(row[key]) for key, _, fmt in COLUMNS]
        lines.append("| " + " | ".join([topology, durability, *cells]) + " |")
    return "\n".join(lines + [f"note: {n}" for n in notes])


def run_topologies(topologies: list[str], quick: bool) -> tuple[list[Any], list[str]]:
    cfg = TopologyConfig.quick() if quick else TopologyConfig()
    rows: list[tuple[str, str, dict[str, float]]] = []
    notes: list[str] = []
    for topology in topologies:
        if topology == "sentinel" and not sentinel_supported():
            notes.append("sentinel: redis+sentinel:// unknown to this jarvismem: left out")
            continue
        levels, left_out = durabilities(topology)
        notes += left_out
        root = Path(tempfile.mkdtemp(prefix="jarvismem-bench-ha-"))
        try:
            with _Bed(topology, root) as bed:
                for level in levels:
                    fields = {
                        **bed.settings(),
                        "jarvismem_namespace": "bench" + uuid.uuid4().hex[:10],
                        "outbox_path": root / "outbox",
                        "storage_base_path": root / "blobs",
                    }
                    if level == "replicated":
                        fields["redis_durability"] = "replicated"
                    rows.append((topology, level, asyncio.run(measure(fields, cfg))))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return rows, notes


def main(topologies: list[str], quick: bool) -> int:
    unknown = sorted(set(topologies) - set(TOPOLOGIES))
    if unknown:
        print(f"unknown topology: {', '.join(unknown)} (one of {', '.join(TOPOLOGIES)})")
        return 2
    rows, notes = run_topologies(topologies, quick)
    print(render(rows, notes))
    return 0
