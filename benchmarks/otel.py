"""OTEL: the cost of OpenTelemetry on S1 (sequential ``log_turn``), three ways, in one process.

* **off**: jarvismem's telemetry switched off (``telemetry.set_enabled(False)``),
  exactly the code path of an install without the ``[otel]`` extra;
* **API, no SDK**: the extra installed and nothing configured (the API's
  proxy, i.e. its no-op tracer and meter): what an application that never set
  up OpenTelemetry pays;
* **SDK, no exporter**: an SDK ``TracerProvider`` and ``MeterProvider`` with no
  span processor, no exporter and no metric reader: every span is recorded
  (attributes built) and then dropped, every instrument is updated.

The three take turns on one view of one runtime (S1's settings: compaction on,
redaction on), in chunks of ``otel_turns`` turns, the order rotated every round
so no mode always runs first: on a shared machine, load drifts over seconds, and
chunks that alternate see the same drift where one long run per mode would not.
The target is on the median of the per-round throughput ratios.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from benchmarks.fixtures import STEP
from benchmarks.stats import Target
from jarvismem import telemetry
from jarvismem.backends.blob.base import BlobStorage

if TYPE_CHECKING:
    from benchmarks.suite import Bench

MODES = ("off", "api", "sdk")
LABELS = {
    "off": "S1 with OTel off (as without the extra)",
    "api": "S1 with OTel API, no SDK configured",
    "sdk": "S1 with OTel SDK installed, no exporter",
}
TARGET = 0.95  # SDK without exporter: at most 5 % fewer turns/s than without OTel


def _sdk_providers() -> tuple[Any, Any] | None:
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return None
    return TracerProvider(), MeterProvider()


def _use(mode: str, sdk: tuple[Any, Any] | None) -> None:
    if mode == "off":
        telemetry.set_enabled(False)
        return
    telemetry.set_enabled(True)
    if mode == "sdk" and sdk is not None:
        telemetry.use_providers(*sdk)
    else:
        telemetry.use_providers()  # the global (proxy, no-op) providers


async def otel_scenario(bench: Bench, blob: BlobStorage) -> None:
    """Run the OTEL rows and record them in ``bench.report``."""
    cfg, rep = bench.cfg, bench.report
    if not telemetry.AVAILABLE:
        rep.notes.append("OTEL skipped: opentelemetry-api is not installed (pip install '.[otel]')")
        return
    sdk = _sdk_providers()
    modes = MODES if sdk is not None else MODES[:2]
    if sdk is None:
        rep.notes.append("OTEL: opentelemetry-sdk is not installed; the SDK row is left out")
    turns = cfg.otel_turns
    rounds = cfg.otel_rounds
    latencies: dict[str, list[float]] = {m: [] for m in modes}
    walls: dict[str, float] = dict.fromkeys(modes, 0.0)
    per_round: dict[str, list[float]] = {m: [] for m in modes}
    # This process's CPU per turn (the Redis server's is not in it): steadier than
    # wall time on a shared machine, and the larger share for the same overhead.
    cpu_per_turn: dict[str, list[float]] = {m: [] for m in modes}
    try:
        async with bench.runtime(blob) as rt:
            mem = rt.memory("otel-wf", STEP, "agent-1")
            await bench.log_sequential(mem, 20, start=10_000_000)  # warm-up: script, file
            done = 0
            for r in range(rounds):
                order = modes[r % len(modes) :] + modes[: r % len(modes)]
                for mode in order:
                    _use(mode, sdk)
                    cpu0 = time.process_time()
                    t0 = time.perf_counter()
                    lat = await bench.log_sequential(mem, turns, start=done)
                    wall = time.perf_counter() - t0
                    cpu = time.process_time() - cpu0
                    done += turns
                    latencies[mode] += lat
                    walls[mode] += wall
                    per_round[mode].append(turns / wall)
                    cpu_per_turn[mode].append(cpu / turns * 1e6)
    finally:
        telemetry.set_enabled(True)
        telemetry.use_providers()
        if sdk is not None:
            sdk[0].shutdown()
            sdk[1].shutdown()
    for mode in modes:
        bench.measure(f"{LABELS[mode]} sequential log_turn", latencies[mode], walls[mode])
        rep.figures[f"OTEL {mode}: client CPU per turn, µs (median of rounds)"] = statistics.median(
            cpu_per_turn[mode]
        )
    for mode in modes[1:]:
        ratios = [a / b for a, b in zip(per_round[mode], per_round["off"], strict=True)]
        name = f"{LABELS[mode]} / OTel off throughput (median of {rounds} rounds)"
        rep.ratios[name] = statistics.median(ratios)
        rep.figures[f"OTEL {mode}: per-round throughput ratios, min"] = min(ratios)
        rep.figures[f"OTEL {mode}: per-round throughput ratios, max"] = max(ratios)
        rep.ratios[f"OTEL {mode} / off client CPU per turn (median of {rounds} rounds)"] = (
            statistics.median(
                a / b for a, b in zip(cpu_per_turn[mode], cpu_per_turn["off"], strict=True)
            )
        )
        if mode == "sdk":
            rep.targets.append(
                Target(
                    f"OTEL: SDK without exporter >= {TARGET} x off", rep.ratios[name], TARGET, ">="
                )
            )
