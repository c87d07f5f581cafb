"""The scenarios (S1-S8, and the reference comparison), their raw ``redis.asyncio``
baselines, and the runner.

Each scenario runs against the real Redis at ``--redis-url`` in a fresh
``JARVISMEM_NAMESPACE`` (deleted afterwards) and a temporary local blob root,
with the settings a user runs with (compaction on, redaction on, retention on);
a row with a non-default setting says so in its name. Baselines use the very
same client (same connection pool) in the same run, so the targets are ratios
that mean something on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.compaction import compaction_scenario
from benchmarks.fixtures import (
    FAKE_ATHENA_CODE,
    STEP,
    ChildServer,
    Turn,
    bench_settings,
    delete_namespace,
    fill_ledger,
    fill_scratchpad,
    make_runtime,
    make_turns,
    raw_xadd_fields,
    rss_bytes,
    scratchpad_bytes,
    write_local_scratchpad,
)
from benchmarks.floor import floor_scenario
from benchmarks.idle import idle_scenario
from benchmarks.otel import otel_scenario
from benchmarks.plots import write_plots
from benchmarks.reference import reference_scenario
from benchmarks.startup import startup_scenario
from benchmarks.stats import Target, bucket_series, latency_summary, render_report
from benchmarks.topology import main as topology_main
from benchmarks.ui import ui_scenario
from jarvismem.backends.blob.base import BlobStorage
from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.backends.llm.worker import default_worker
from jarvismem.keys import KeySpace
from jarvismem.memory import UnifiedMemory
from jarvismem.runtime import MemoryRuntime

AZURITE_CONNECTION_STRING = (
    # The emulator's well-known development account (public, not a secret).
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
    "KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
)

T = TypeVar("T")

SCENARIOS = ("S0", "S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "OTEL", "STARTUP", "UI")


@dataclass
class BenchConfig:
    """Sizes of one run. ``BenchConfig.quick()`` is the CI smoke size."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    quick: bool = False
    s1_turns: int = 20_000
    s1_off_turns: int = 5_000
    flat_window: int = 1_000
    series_bucket: int = 100
    s2_agent_counts: tuple[int, ...] = (1, 8, 32, 64)
    s2_target_counts: tuple[int, ...] = (32, 64)
    s2_workflows: int = 8
    s2_turns: int = 500
    s3_sizes: tuple[int, ...] = (100, 10_000, 100_000, 1_000_000)
    s3_reps: int = 200
    s4_turns: int = 2_000
    s5_turns: int = 100_000
    s5_retention: int = 10_000
    s6_turns: int = 1_000
    s6_agent_turns: int = 20
    s6_sizes: tuple[int, ...] = (100, 10_000)
    s6_reps: int = 30
    s7_turns: int = 5_000
    s7_sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    s7_llm_sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    s8_workflows: int = 10_000
    ref_s1_turns: int = 5_000
    ref_s2_agents: int = 32
    ref_s2_turns: int = 100
    ref_sweep_turns: int = 100
    ref_s3_reps: int = 50
    raw_seq_ops: int = 5_000
    otel_turns: int = 500
    otel_rounds: int = 12
    raw_conc_per_task: int = 200
    ui_entries: int = 1_000_000
    ui_reps: int = 30
    only: tuple[str, ...] = SCENARIOS
    with_reference: bool = False
    plots_dir: str | None = None
    azurite_connection_string: str = AZURITE_CONNECTION_STRING

    @classmethod
    def quick_config(cls, **overrides: Any) -> BenchConfig:
        """Small sizes: the whole run in well under 30 s."""
        values: dict[str, Any] = {
            "quick": True,
            "s1_turns": 1_000,
            "s1_off_turns": 500,
            "flat_window": 100,
            "series_bucket": 10,
            "s2_turns": 20,
            "s3_sizes": (100, 1_000, 5_000),
            "s3_reps": 30,
            "s4_turns": 200,
            "s5_turns": 2_000,
            "s5_retention": 1_000,
            "s6_turns": 100,
            "s6_agent_turns": 3,
            "s6_sizes": (100,),
            "s6_reps": 5,
            "s7_turns": 500,
            "s7_sizes": (200, 1_000),
            "s7_llm_sizes": (200, 1_000),
            "s8_workflows": 1_000,
            "ref_s1_turns": 500,
            "ref_s2_turns": 10,
            "ref_sweep_turns": 10,
            "ref_s3_reps": 10,
            "raw_seq_ops": 1_000,
            "otel_turns": 100,
            "otel_rounds": 3,
            "raw_conc_per_task": 20,
            "ui_entries": 20_000,
            "ui_reps": 10,
        }
        values.update(overrides)
        return cls(**values)


@dataclass
class Report:
    """Everything a run produced, JSON-ready via :meth:`as_dict`."""

    config: dict[str, Any]
    measurements: dict[str, dict[str, float]] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Plot data: series name -> column name -> values (columns of equal length).
    series: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "measurements": self.measurements,
            "figures": self.figures,
            "ratios": self.ratios,
            # A quick run's sizes are too small for the targets: report, do not judge.
            "targets": [t.as_dict(judged=not self.config.get("quick")) for t in self.targets],
            "notes": self.notes,
            "series": self.series,
            "plots": self.plots,
        }


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


class Bench:
    """One run: shared Redis client, temporary folder, fresh namespace."""

    def __init__(self, cfg: BenchConfig, redis: Any, tmp: Path) -> None:
        self.cfg = cfg
        self.redis = redis
        self.tmp = tmp
        self.namespace = "bench" + uuid.uuid4().hex[:10]
        self.keyspace = KeySpace(self.namespace)
        self.turns: list[Turn] = make_turns()
        self.report = Report(
            config={k: v for k, v in asdict(cfg).items() if k != "azurite_connection_string"}
        )
        self._turn_seq = 0

    # --- helpers -----------------------------------------------------------------------

    def measure(self, name: str, latencies: list[float], wall: float) -> dict[str, float]:
        summary = latency_summary(latencies, wall)
        self.report.measurements[name] = summary
        return summary

    def runtime(
        self, blob: BlobStorage | None, athena: Any = None, **settings: Any
    ) -> MemoryRuntime:
        """A runtime in this run's namespace over the shared Redis client."""
        settings_ = bench_settings(self.namespace, self.tmp, **settings)
        return make_runtime(settings_, self.redis, blob, athena)

    def local_blob(self) -> LocalBlobStorage:
        return LocalBlobStorage(self.tmp / "blobs")

    async def log_sequential(self, mem: UnifiedMemory, count: int, start: int = 0) -> list[float]:
        """``count`` sequential log_turn calls; one latency per call."""
        turns = self.turns
        lat: list[float] = []
        clock = time.perf_counter
        for i in range(start, start + count):
            t = turns[i % len(turns)]
            t0 = clock()
            await mem.log_turn(i, t.thought, t.action, t.result, t.tokens)
            lat.append(clock() - t0)
        return lat

    async def log_concurrent(
        self, mems: list[UnifiedMemory], per_agent: int, start: int = 0
    ) -> tuple[list[float], float]:
        """Every view logs ``per_agent`` turns, all views concurrently in this loop."""
        lat: list[float] = []

        async def agent(mem: UnifiedMemory) -> None:
            lat.extend(await self.log_sequential(mem, per_agent, start))

        t0 = time.perf_counter()
        await asyncio.gather(*(agent(m) for m in mems))
        return lat, time.perf_counter() - t0

    async def timed(self, name: str, coro: Awaitable[T]) -> T:
        """Await ``coro``, recording its wall time (how long the run spends where)."""
        t0 = time.perf_counter()
        try:
            return await coro
        finally:
            self.report.figures[f"wall time of {name}, s"] = time.perf_counter() - t0
            print(f"[bench] {name} done in {time.perf_counter() - t0:.1f}s", file=sys.stderr)

    async def start_summary_worker(self) -> None:
        """Start the extractive summarizer's worker process before anything is timed.

        With the defaults (``COMPACTION_WORKER=process``) the first compaction of a
        process starts it (an interpreter and jarvismem's imports, under a second);
        until then no compaction runs, which would flatter the first turns of S1.
        Started here, like the pool warm-up of the baselines; its wall time is a figure.
        """
        if bench_settings(self.namespace, self.tmp).compaction_worker == "process":
            await asyncio.to_thread(default_worker().start)

    # --- raw baselines -------------------------------------------------------------------

    async def baselines(self) -> None:
        cfg = self.cfg
        fields = raw_xadd_fields(self.turns[0])
        key = self.keyspace.ledger("raw-seq")
        for _ in range(20):  # warm the pool and the key
            await self.redis.xadd(key, fields)
        lat: list[float] = []
        clock = time.perf_counter
        t_start = clock()
        for _ in range(cfg.raw_seq_ops):
            t0 = clock()
            await self.redis.xadd(key, fields)
            lat.append(clock() - t0)
        self.measure("raw sequential XADD", lat, clock() - t_start)

        await fill_ledger(self.redis, self.keyspace, "raw-rev", self.turns, 1000)
        rkey = self.keyspace.ledger("raw-rev")
        rev: list[float] = []
        t_start = clock()
        for _ in range(cfg.s3_reps):
            t0 = clock()
            await self.redis.xrevrange(rkey, count=10)
            rev.append(clock() - t0)
        self.measure("raw XREVRANGE COUNT 10", rev, clock() - t_start)

    async def raw_concurrent(self, tasks: int) -> dict[str, float]:
        """``tasks`` tasks doing sequential XADDs over the S2 workflows' keys, in this loop."""
        cfg = self.cfg
        fields = raw_xadd_fields(self.turns[0])
        keys = [self.keyspace.ledger(f"raw-conc-{w}") for w in range(cfg.s2_workflows)]
        clock = time.perf_counter
        conc: list[float] = []

        async def task(k: str) -> None:
            for _ in range(cfg.raw_conc_per_task):
                t0 = clock()
                await self.redis.xadd(k, fields)
                conc.append(clock() - t0)

        await asyncio.gather(*(self.redis.xadd(keys[i % len(keys)], fields) for i in range(tasks)))
        t_start = clock()
        await asyncio.gather(*(task(keys[i % len(keys)]) for i in range(tasks)))
        return self.measure(f"raw {tasks}-task concurrent XADD", conc, clock() - t_start)

    # --- S1 ------------------------------------------------------------------------------

    async def s1(
        self,
        blob: BlobStorage,
        label: str = "S1",
        turns: int | None = None,
        window: int | None = None,
        **settings: Any,
    ) -> dict[str, float]:
        count = turns or self.cfg.s1_turns
        win = min(window or self.cfg.flat_window, max(1, count // 2))
        async with self.runtime(blob, **settings) as rt:
            mem = rt.memory(_wf_name(label, "wf"), STEP, "agent-1")
            await self.log_sequential(mem, 20, start=10_000_000)  # warm-up: script, file
            t0 = time.perf_counter()
            lat = await self.log_sequential(mem, count)
            wall = time.perf_counter() - t0
            await self.note_compacted(rt, label, [mem.workflow_id], 20 + count)
        summary = self.measure(f"{label} sequential log_turn", lat, wall)
        first = statistics.median(lat[:win])
        last = statistics.median(lat[-win:])
        self.report.figures[f"{label} median first {win} turns, ms"] = first * 1e3
        self.report.figures[f"{label} median last {win} turns, ms"] = last * 1e3
        self.report.ratios[f"{label} last/first {win} median"] = _ratio(last, first)
        self.report.series[f"{label} per-turn latency"] = bucket_series(lat, self.cfg.series_bucket)
        return summary

    # --- S2 ------------------------------------------------------------------------------

    async def s2(
        self,
        blob: BlobStorage,
        label: str = "S2",
        per_agent: int | None = None,
        agents: int | None = None,
        **settings: Any,
    ) -> dict[str, float]:
        cfg = self.cfg
        n_agents = agents or max(cfg.s2_agent_counts)
        count = per_agent or cfg.s2_turns
        async with self.runtime(blob, **settings) as rt:
            mems = [
                rt.memory(_wf_name(label, f"wf{a % cfg.s2_workflows}"), STEP, f"agent-{a}")
                for a in range(n_agents)
            ]
            await self.log_concurrent(mems, 2, start=10_000_000)  # warm-up
            lat, wall = await self.log_concurrent(mems, count)
            workflows = sorted({m.workflow_id for m in mems})
            await self.note_compacted(rt, label, workflows, n_agents * (2 + count))
        return self.measure(f"{label} {n_agents} agents x {count} turns", lat, wall)

    async def note_compacted(
        self, rt: MemoryRuntime, label: str, workflows: list[str], logged: int
    ) -> None:
        """Report the share of the logged turns the summaries covered when the run ended.

        Compaction runs in the background: a run that outpaces it does less work per
        turn than one that keeps up, so its throughput is only comparable beside
        this share (100 % when every due compaction happened in the run).
        """
        if not rt.settings.compaction_enabled:
            return
        covered = 0
        for wf in workflows:
            ltm = rt.workflow(wf).ltm
            record = None if ltm is None else (await ltm.read_base()).record
            covered += record.turns if record is not None else 0
        self.report.figures[f"{label} turns compacted by the end of the run, %"] = (
            100.0 * covered / logged
        )

    async def s2_sweep(self, blob: BlobStorage) -> None:
        """Throughput for 1..64 agents, each beside a raw run with as many tasks."""
        cfg, rep = self.cfg, self.report
        counts = sorted(set(cfg.s2_agent_counts) | set(cfg.s2_target_counts))
        raw_tp: list[float] = []
        ours: list[float] = []
        for n in counts:
            raw = await self.raw_concurrent(n)
            got = await self.s2(blob, f"S2/{n}", agents=n)
            raw_tp.append(raw["ops_per_s"])
            ours.append(got["ops_per_s"])
            name = f"S2 {n} agents / raw {n}-task concurrent XADD throughput"
            rep.ratios[name] = _ratio(got["ops_per_s"], raw["ops_per_s"])
            if n in cfg.s2_target_counts:
                rep.targets.append(
                    Target(f"S2 {n} agents >= 1.0 x raw {n}-task concurrent XADD",
                           rep.ratios[name], 1.0, ">=")
                )  # fmt: skip
        rep.series["throughput vs agents"] = {
            "agents": [float(n) for n in counts],
            "raw redis.asyncio": raw_tp,
            "jarvismem": ours,
        }
        top = max(counts)
        off = await self.s2(blob, "S2/compaction off", agents=top, compaction_enabled=False)
        rep.ratios[f"S2 {top} agents, compaction off / raw concurrent XADD throughput"] = _ratio(
            off["ops_per_s"], raw_tp[counts.index(top)]
        )

    # --- S3 ------------------------------------------------------------------------------

    async def s3(
        self,
        blob: BlobStorage,
        label: str = "S3",
        sizes: tuple[int, ...] | None = None,
        reps: int | None = None,
        local_root: Path | None = None,
    ) -> dict[int, float]:
        p50s: dict[int, float] = {}
        n_reps = reps or self.cfg.s3_reps
        async with self.runtime(blob) as rt:
            # Retention on, as a user runs it: the fill trims as the ledger would.
            max_len = rt.settings.ledger_max_len
            for size in sizes or self.cfg.s3_sizes:
                wf = _wf_name(label, f"wf{size}")
                t0 = time.perf_counter()
                await fill_ledger(self.redis, self.keyspace, wf, self.turns, size, max_len)
                path = self.keyspace.scratchpad(wf, STEP, "agent-1")
                if local_root is not None:
                    await asyncio.to_thread(
                        write_local_scratchpad, local_root, path, self.turns, size
                    )
                else:
                    data = scratchpad_bytes(self.turns, size)
                    await fill_scratchpad(blob, path, data, 1 << 20)
                    del data
                self.report.figures[f"{label} fill time @ {size:,}, s"] = time.perf_counter() - t0
                mem = rt.memory(wf, STEP, "agent-1")
                bundle = await mem.rehydrate_bundle(ledger_tail=10)
                _check_bundle(bundle, size)
                # The raw round trip it is judged against, on the same stream and in
                # the same moments (one raw XREVRANGE before each rehydrate): a
                # baseline measured minutes earlier swung 0.16-0.29 ms between runs.
                key = self.keyspace.ledger(wf)
                lat: list[float] = []
                raw: list[float] = []
                raw_wall = 0.0
                clock = time.perf_counter
                t_start = clock()
                for _ in range(n_reps):
                    t0 = clock()
                    await self.redis.xrevrange(key, count=10)
                    t1 = clock()
                    await mem.rehydrate_bundle(ledger_tail=10)
                    lat.append(clock() - t1)
                    raw.append(t1 - t0)
                    raw_wall += t1 - t0
                summary = self.measure(
                    f"{label} rehydrate_bundle @ {size:,}", lat, clock() - t_start - raw_wall
                )
                self.measure(f"{label} raw XREVRANGE COUNT 10 @ {size:,}", raw, raw_wall)
                p50s[size] = summary["median_ms"]
                await self.redis.delete(self.keyspace.ledger(wf))
                if local_root is not None:
                    (local_root / path).unlink(missing_ok=True)
        return p50s

    # --- S4 ------------------------------------------------------------------------------

    async def s4(self, blob: BlobStorage) -> dict[str, float]:
        from jarvismem.backends.athena import AthenaClient

        async with ChildServer(FAKE_ATHENA_CODE, "fake Athena server") as url:
            client = AthenaClient(url)
            try:
                async with self.runtime(blob, athena=client) as rt:
                    mem = rt.memory("s4-wf", STEP, "agent-1")
                    athena = await rt.athena_memory("agent-1")  # session made before timing
                    await self.log_sequential(mem, 20, start=10_000_000)
                    t0 = time.perf_counter()
                    lat = await self.log_sequential(mem, self.cfg.s4_turns)
                    wall = time.perf_counter() - t0
                    if athena is not None:
                        await athena.flush(timeout=1 if self.cfg.quick else 10)
                        health = athena.health()
                        self.report.figures["S4 Athena writes still pending after flush"] = float(
                            health.get("pending", math.nan)
                        )
            finally:
                await client.aclose()
        return self.measure("S4 sequential log_turn, Athena on", lat, wall)

    # --- S5 ------------------------------------------------------------------------------

    async def s5(self, blob: BlobStorage) -> None:
        cfg = self.cfg
        node = await self.redis.config_get("stream-node-max-entries")
        slack = int(node.get("stream-node-max-entries", 100) or 100)
        scale = 100_000 / cfg.s5_turns
        for label, max_len in (
            ("unbounded", 0),
            (f"LEDGER_MAX_LEN={cfg.s5_retention}", cfg.s5_retention),
        ):
            wf = f"s5-{max_len}"
            async with self.runtime(blob, ledger_max_len=max_len) as rt:
                mems = [rt.memory(wf, STEP, f"agent-{a}") for a in range(16)]
                await self.log_concurrent(mems, 1, start=10_000_000)
                gc.collect()
                rss0 = rss_bytes()
                used0 = int((await self.redis.info("memory"))["used_memory"])
                key = self.keyspace.ledger(wf)
                max_xlen = 0
                stop = asyncio.Event()

                async def watch(key: str = key, stop: asyncio.Event = stop) -> None:
                    nonlocal max_xlen
                    while not stop.is_set():
                        max_xlen = max(max_xlen, int(await self.redis.xlen(key)))
                        await asyncio.sleep(0.02)

                watcher = asyncio.create_task(watch())
                per_agent = cfg.s5_turns // len(mems)
                _, wall = await self.log_concurrent(mems, per_agent)
                stop.set()
                await watcher
                max_xlen = max(max_xlen, int(await self.redis.xlen(key)))
                gc.collect()
                rss1 = rss_bytes()
                used1 = int((await self.redis.info("memory"))["used_memory"])
                stream_mem = int(await self.redis.memory_usage(key, samples=0) or 0)
                index_mem = int(
                    await self.redis.memory_usage(self.keyspace.turn_index(wf), samples=0) or 0
                )
            turns = per_agent * len(mems)
            mb = 1024 * 1024
            f = self.report.figures
            f[f"S5 {label}: RSS growth per 100k turns, MB"] = (rss1 - rss0) * scale / mb
            f[f"S5 {label}: Redis used_memory growth per 100k turns, MB"] = (
                (used1 - used0) * scale / mb
            )
            f[f"S5 {label}: ledger stream, MB"] = stream_mem / mb
            f[f"S5 {label}: exactly-once index hash, MB"] = index_mem / mb
            f[f"S5 {label}: max XLEN seen"] = float(max_xlen)
            f[f"S5 {label}: turns/s while filling"] = turns / wall
            growth = (rss1 - rss0) * scale / mb
            self.report.targets.append(
                Target(f"S5 {label}: RSS growth MB/100k turns", growth, 20.0, "<=")
            )
            if max_len:
                self.report.targets.append(
                    Target(
                        f"S5 {label}: max XLEN <= N + node slack ({slack})",
                        float(max_xlen),
                        float(max_len + slack),
                        "<=",
                    )
                )
            await self.redis.delete(key, self.keyspace.turn_index(wf))
            shutil.rmtree(self.tmp / "blobs" / self.keyspace._wf_dir(wf), ignore_errors=True)

    # --- S6 ------------------------------------------------------------------------------

    async def s6(self) -> None:
        cfg = self.cfg
        if not _port_open("127.0.0.1", 10000):
            self.report.notes.append(
                "S6 skipped: Azurite is not answering on 127.0.0.1:10000 (start it with "
                "`azurite-blob --blobHost 127.0.0.1 --blobPort 10000 --skipApiVersionCheck`)."
            )
            return
        from azure.storage.blob.aio import BlobServiceClient

        from jarvismem.backends.blob.azure import AzureBlobStorage

        container = "bench" + uuid.uuid4().hex[:16]
        blob = AzureBlobStorage(cfg.azurite_connection_string, container)
        try:
            await self.s1(blob, "S6/S1", cfg.s6_turns, window=max(1, cfg.s6_turns // 10))
            await self.s2(blob, "S6/S2", cfg.s6_agent_turns)
            await self.s3(blob, "S6/S3", cfg.s6_sizes, cfg.s6_reps)
        finally:
            await blob.close()
            async with BlobServiceClient.from_connection_string(
                cfg.azurite_connection_string
            ) as service:
                try:
                    await service.delete_container(container)
                except Exception as exc:  # a leftover container in the emulator is harmless
                    name = type(exc).__name__
                    self.report.notes.append(f"S6: could not delete container: {name}")

    # --- the run -------------------------------------------------------------------------

    async def run(self) -> Report:
        cfg, rep = self.cfg, self.report
        only = set(cfg.only)
        local = self.local_blob()
        try:
            await self.timed("baselines", self.baselines())
            await self.timed("summary worker start", self.start_summary_worker())
            m = rep.measurements
            raw_seq = m["raw sequential XADD"]
            raw_rev = m["raw XREVRANGE COUNT 10"]
            s1 = None
            floor: dict[str, dict[str, float]] = {}
            if "S0" in only:
                floor = await self.timed("S0", floor_scenario(self))
            if "S1" in only:
                s1 = await self.timed("S1", self.s1(local))
                if "sequential" in floor:
                    name = "S1 / S0 floor sequential throughput"
                    rep.ratios[name] = _ratio(s1["ops_per_s"], floor["sequential"]["ops_per_s"])
                    rep.targets.append(Target("S1 >= 0.8 x S0 floor", rep.ratios[name], 0.8, ">="))
                win = min(cfg.flat_window, max(1, cfg.s1_turns // 2))
                name = "S1 / raw sequential XADD throughput"
                rep.ratios[name] = _ratio(s1["ops_per_s"], raw_seq["ops_per_s"])
                rep.targets.append(Target("S1 >= 0.6 x raw sequential XADD", rep.ratios[name],
                                          0.6, ">="))  # fmt: skip
                rep.targets.append(
                    Target(f"S1 flat: last/first {win} median",
                           rep.ratios[f"S1 last/first {win} median"], 1.1, "<=")
                )  # fmt: skip
                off = await self.timed(
                    "S1 compaction off",
                    self.s1(local, "S1/compaction off", cfg.s1_off_turns,
                            compaction_enabled=False),
                )  # fmt: skip
                rep.ratios["S1 compaction off / raw sequential XADD throughput"] = _ratio(
                    off["ops_per_s"], raw_seq["ops_per_s"]
                )
            if "S2" in only:
                await self.timed("S2", self.s2_sweep(local))
                for n in cfg.s2_target_counts:
                    if str(n) in floor:
                        ours = m[f"S2/{n} {n} agents x {cfg.s2_turns} turns"]["ops_per_s"]
                        name = f"S2 {n} agents / S0 floor {n} agents pipelined throughput"
                        rep.ratios[name] = _ratio(ours, floor[str(n)]["ops_per_s"])
                        rep.targets.append(
                            Target(f"S2 {n} agents >= 0.8 x S0 floor", rep.ratios[name], 0.8, ">=")
                        )
            if "S3" in only:
                p50 = await self.timed("S3", self.s3(local, local_root=self.tmp / "blobs"))
                sizes = sorted(p50)
                for size in sizes:
                    name = f"S3 p50 @ {size:,} / raw XREVRANGE p50"
                    rep.ratios[name] = _ratio(p50[size], raw_rev["median_ms"])
                    # The target's ratio: to the raw XREVRANGE of the same stream,
                    # interleaved with the rehydrates (the line above: to the one
                    # measured with the baselines, kept for comparison).
                    same = f"S3 p50 @ {size:,} / interleaved raw XREVRANGE p50"
                    rep.ratios[same] = _ratio(
                        p50[size], m[f"S3 raw XREVRANGE COUNT 10 @ {size:,}"]["median_ms"]
                    )
                    rep.targets.append(
                        Target(f"S3 @ {size:,} <= 3 x raw XREVRANGE", rep.ratios[same], 3.0, "<=")
                    )
                name = f"S3 p50 @ {sizes[-1]:,} / p50 @ {sizes[0]:,}"
                rep.ratios[name] = _ratio(p50[sizes[-1]], p50[sizes[0]])
                rep.targets.append(
                    Target(f"S3 flat: @ {sizes[-1]:,} <= 1.3 x @ {sizes[0]:,}",
                           rep.ratios[name], 1.3, "<=")
                )  # fmt: skip
                rep.series["rehydrate p50 vs ledger size"] = {
                    "entries": [float(n) for n in sizes],
                    "jarvismem": [p50[n] for n in sizes],
                    "raw XREVRANGE": [raw_rev["median_ms"]] * len(sizes),
                }
            if "S4" in only:
                s4 = await self.timed("S4", self.s4(local))
                if s1 is not None:
                    rep.ratios["S4 p50 / S1 p50"] = _ratio(s4["median_ms"], s1["median_ms"])
                    rep.targets.append(
                        Target("S4 p50 <= 1.1 x S1 p50", rep.ratios["S4 p50 / S1 p50"], 1.1, "<=")
                    )
            if "S5" in only:
                await self.timed("S5", self.s5(local))
            if "S6" in only:
                await self.timed("S6", self.s6())
            if "S7" in only:
                await self.timed("S7", compaction_scenario(self, local))
            if "S8" in only:
                await self.timed("S8", idle_scenario(self, local))
            if "OTEL" in only:
                await self.timed("OTEL", otel_scenario(self, local))
            if "STARTUP" in only:
                await self.timed("STARTUP", startup_scenario(self))
            if "UI" in only:
                await self.timed("UI", ui_scenario(self, local))
            if cfg.with_reference:
                await self.timed("reference", reference_scenario(self, local))
        finally:
            await local.close()
            await delete_namespace(self.redis, self.namespace)
        if cfg.plots_dir:
            written, note = write_plots(rep.as_dict(), Path(cfg.plots_dir))
            rep.plots.extend(written)
            if note:
                rep.notes.append(note)
        return rep


def _wf_name(label: str, suffix: str) -> str:
    """A valid workflow id for a scenario label such as ``S6/S1``."""
    return label.lower().replace("/", "-").replace(" ", "-") + "-" + suffix


def _check_bundle(bundle: dict[str, Any], size: int) -> None:
    """The benchmark must measure a real bundle, not an empty or degraded one."""
    want = min(10, size)
    if len(bundle["recent_turns"]) != want or not bundle["scratchpad"] or bundle["degraded"]:
        raise RuntimeError(
            f"rehydrate_bundle at {size} returned an unexpected bundle: "
            f"{len(bundle['recent_turns'])} turns, degraded={bundle['degraded']}"
        )


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


async def run_suite(cfg: BenchConfig) -> Report:
    """Run the configured scenarios and return the report."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(cfg.redis_url, max_connections=64)
    tmp = Path(tempfile.mkdtemp(prefix="jarvismem-bench-"))
    try:
        await client.ping()
        return await Bench(cfg, client, tmp).run()
    finally:
        await client.aclose()
        shutil.rmtree(tmp, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of ``python -m benchmarks`` / ``jarvismem bench``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument(
        "--redis-url",
        # From the environment by default, so `jarvismem bench` need not put a URL
        # (which may hold a password) on a command line that `ps` shows.
        default=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0",
        help="a real Redis server (default: $REDIS_URL, else redis://127.0.0.1:6379/0); "
        "keys go to a fresh namespace",
    )
    p.add_argument("--quick", action="store_true", help="small sizes (CI smoke run, < 60 s)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--only",
        default=",".join(SCENARIOS),
        help="comma-separated scenarios to run (default all: %(default)s)",
    )
    p.add_argument(
        "--with-reference",
        action="store_true",
        help="also run S1/S2/S3 through the reference (jarviscore-framework 3.0.0, installed "
        "once into .cache/jarviscore-venv, never into this environment) and report the ratios",
    )
    p.add_argument(
        "--plots",
        metavar="DIR",
        default=None,
        help="write PNG plots into DIR (needs matplotlib: pip install -e '.[bench]')",
    )
    p.add_argument(
        "--topology",
        metavar="NAMES",
        default=None,
        help="instead of the suite: S1/S2/S3 on topologies started for the run, comma-"
        "separated among single, sentinel, cluster (AOF always; see benchmarks/topology.py)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (0 even when a target falls short)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    only = tuple(s.strip().upper() for s in args.only.split(",") if s.strip())
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.topology:
        return topology_main([t.strip() for t in args.topology.split(",")], args.quick)
    base = BenchConfig.quick_config() if args.quick else BenchConfig()
    base.redis_url = args.redis_url
    base.only = only
    base.with_reference = args.with_reference
    base.plots_dir = args.plots
    report = asyncio.run(run_suite(base)).as_dict()
    if args.json:
        print(json.dumps(report, indent=2, default=float))
    else:
        print(render_report(report))
    return 0
