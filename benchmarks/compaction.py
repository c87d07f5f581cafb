"""S7: long-term compaction — event-loop lag while it runs, and its cost per turn.

Two questions, both with the default settings otherwise:

- **Does compaction stall the kernel?** A :class:`~benchmarks.fixtures.LoopLagMonitor`
  (a task sleeping 1 ms, recording how late it wakes) runs during a sequential
  ``log_turn`` run with background compaction on (the default) and, for
  comparison, off; and during a forced compaction (``compact_now``) of N turns.
  Target: p99 lag <= 2 ms.
- **Is compaction O(N)?** ``compact_now`` over a ledger of N turns (filled with
  pipelined raw XADDs in the documented format, retention on), reported as µs per
  turn compacted, for the extractive summarizer (the default) and for an LLM
  summarizer against the loopback fake LLM, run in a child process so its
  threads do not share our GIL.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import TYPE_CHECKING, Any

from benchmarks.fixtures import FAKE_LLM_CODE, STEP, ChildServer, LoopLagMonitor, fill_ledger
from benchmarks.stats import Target, lag_summary
from jarvismem.backends.blob.base import BlobStorage

if TYPE_CHECKING:
    from benchmarks.suite import Bench

LAG_LIMIT_MS = 2.0
"""Target: p99 event-loop lag while a compaction runs, in ms."""

LINEAR_LIMIT = 1.5
"""Target: µs per turn at the largest N at most this times µs per turn at the smallest."""


async def compaction_scenario(bench: Bench, blob: BlobStorage) -> None:
    """Run S7 and record its figures, ratios and targets in ``bench.report``."""
    await _lag_during_s1(bench, blob)
    await _forced(bench, blob, "extractive", bench.cfg.s7_sizes)
    async with ChildServer(FAKE_LLM_CODE, "fake LLM server") as url:
        await _forced(
            bench,
            blob,
            "fake LLM",
            bench.cfg.s7_llm_sizes,
            llm_base_url=url,
            llm_api_key="bench-not-a-secret",
        )


def _record_lag(bench: Bench, label: str, lags: list[float]) -> dict[str, float]:
    summary = lag_summary(lags)
    figures = bench.report.figures
    for key in ("p50_ms", "p99_ms", "max_ms"):
        figures[f"S7 loop lag {key.split('_')[0]} {label}, ms"] = summary[key]
    figures[f"S7 loop lag samples {label}"] = summary["samples"]
    return summary


async def _lag_during_s1(bench: Bench, blob: BlobStorage) -> None:
    turns = bench.cfg.s7_turns
    for compaction in (True, False):
        label = f"during S1 x {turns:,}, compaction {'on' if compaction else 'off'}"
        async with bench.runtime(blob, compaction_enabled=compaction) as rt:
            mem = rt.memory(f"s7-s1-{'on' if compaction else 'off'}", STEP, "agent-1")
            await bench.log_sequential(mem, 20, start=10_000_000)
            async with LoopLagMonitor() as monitor:
                t0 = time.perf_counter()
                lat = await bench.log_sequential(mem, turns)
                wall = time.perf_counter() - t0
        bench.measure(f"S7 sequential log_turn with lag monitor, compaction "
                      f"{'on' if compaction else 'off'}", lat, wall)  # fmt: skip
        summary = _record_lag(bench, label, monitor.lags)
        if compaction:
            bench.report.targets.append(
                Target(f"S7 loop lag p99 {label} <= {LAG_LIMIT_MS:g} ms",
                       summary["p99_ms"], LAG_LIMIT_MS, "<=")
            )  # fmt: skip


async def _forced(
    bench: Bench, blob: BlobStorage, kind: str, sizes: tuple[int, ...], **settings: Any
) -> None:
    """``compact_now`` over ledgers of each size; µs per turn and the loop lag meanwhile."""
    report = bench.report
    per_turn: dict[int, float] = {}
    slug = kind.replace(" ", "-").lower()
    # Background compaction off: only the forced run compacts, so its cost is all
    # that is timed (compact_now runs whatever the setting).
    async with bench.runtime(blob, compaction_enabled=False, **settings) as rt:
        try:
            max_len = rt.settings.ledger_max_len
            for size in sizes:
                wf = f"s7-{slug}-{size}"
                await fill_ledger(bench.redis, bench.keyspace, wf, bench.turns, size, max_len)
                mem = rt.memory(wf, STEP, "agent-1")
                async with LoopLagMonitor() as monitor:
                    t0 = time.perf_counter()
                    result = await mem.compact_now()
                    wall = time.perf_counter() - t0
                entries = int(result.get("entries") or 0)
                if not result.get("compacted") or entries <= 0:
                    report.notes.append(
                        f"S7 {kind} compaction of {size:,} turns compacted nothing: "
                        f"{result.get('reason')!r}"
                    )
                per_turn[size] = wall / entries * 1e6 if entries > 0 else math.nan
                report.figures[f"S7 compaction, {kind}: µs per turn @ {size:,}"] = per_turn[size]
                report.figures[f"S7 compaction, {kind}: wall @ {size:,}, s"] = wall
                report.figures[f"S7 compaction, {kind}: entries compacted @ {size:,}"] = float(
                    entries
                )
                label = f"during {kind} compaction of {size:,}"
                lag = _record_lag(bench, label, monitor.lags)
                if size == max(sizes):
                    report.targets.append(
                        Target(f"S7 loop lag p99 {label} <= {LAG_LIMIT_MS:g} ms",
                               lag["p99_ms"], LAG_LIMIT_MS, "<=")
                    )  # fmt: skip
                await bench.redis.delete(bench.keyspace.ledger(wf))
        finally:
            aclose = getattr(rt.summarizer, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
    small, large = min(sizes), max(sizes)
    name = f"S7 {kind} µs per turn @ {large:,} / @ {small:,}"
    report.ratios[name] = per_turn[large] / per_turn[small] if per_turn[small] > 0 else math.nan
    report.targets.append(
        Target(f"S7 {kind} compaction O(N): µs/turn @ {large:,} <= {LINEAR_LIMIT:g} x "
               f"@ {small:,}", report.ratios[name], LINEAR_LIMIT, "<=")
    )  # fmt: skip
