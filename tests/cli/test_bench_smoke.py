"""Smoke test of the benchmark suite: ``python -m benchmarks --quick --json`` runs end to end.

No timing assertions: only that every scenario, baseline, ratio and target is
reported with a numeric value, so a broken scenario cannot hide in CI.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REAL_REDIS_URL, once_per_run, real_redis_available, require_backend

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_MEASUREMENTS = (
    "raw sequential XADD",
    "raw 1-task concurrent XADD",
    "raw 8-task concurrent XADD",
    "raw 32-task concurrent XADD",
    "raw 64-task concurrent XADD",
    "raw XREVRANGE COUNT 10",
    "S0 floor sequential",
    "S0 floor 32 agents pipelined",
    "S0 floor 64 agents pipelined",
    "S1 sequential log_turn",
    "S1/compaction off sequential log_turn",
    "S2/1 1 agents x 20 turns",
    "S2/8 8 agents x 20 turns",
    "S2/32 32 agents x 20 turns",
    "S2/64 64 agents x 20 turns",
    "S2/compaction off 64 agents x 20 turns",
    "S3 rehydrate_bundle @ 100",
    "S3 rehydrate_bundle @ 5,000",
    "S3 raw XREVRANGE COUNT 10 @ 100",
    "S3 raw XREVRANGE COUNT 10 @ 5,000",
    "S4 sequential log_turn, Athena on",
    "S7 sequential log_turn with lag monitor, compaction on",
    "S7 sequential log_turn with lag monitor, compaction off",
    "S1 with OTel off (as without the extra) sequential log_turn",
    "S1 with OTel API, no SDK configured sequential log_turn",
    "S1 with OTel SDK installed, no exporter sequential log_turn",
)
EXPECTED_RATIOS = (
    "S0 floor sequential / raw sequential XADD throughput",
    "S1 / S0 floor sequential throughput",
    "S2 32 agents / S0 floor 32 agents pipelined throughput",
    "S2 64 agents / S0 floor 64 agents pipelined throughput",
    "S1 / raw sequential XADD throughput",
    "S1 last/first 100 median",
    "S1 compaction off / raw sequential XADD throughput",
    "S2 32 agents / raw 32-task concurrent XADD throughput",
    "S2 64 agents / raw 64-task concurrent XADD throughput",
    "S2 64 agents, compaction off / raw concurrent XADD throughput",
    "S3 p50 @ 100 / raw XREVRANGE p50",
    "S3 p50 @ 100 / interleaved raw XREVRANGE p50",
    "S3 p50 @ 5,000 / p50 @ 100",
    "S4 p50 / S1 p50",
    "S7 extractive µs per turn @ 1,000 / @ 200",
    "S7 fake LLM µs per turn @ 1,000 / @ 200",
)
EXPECTED_FIGURES = (
    "wall time of summary worker start, s",
    "S7 loop lag p99 during S1 x 500, compaction on, ms",
    "S7 loop lag p99 during extractive compaction of 1,000, ms",
    "S7 loop lag p99 during fake LLM compaction of 1,000, ms",
    "S7 compaction, extractive: µs per turn @ 200",
    "S7 compaction, extractive: µs per turn @ 1,000",
    "S7 compaction, fake LLM: µs per turn @ 200",
    "S7 compaction, fake LLM: µs per turn @ 1,000",
    "S8 RSS per idle workflow (1 agent) @ 1,000 workflows, KB",
    "S8 RSS per further idle agent @ 1,000 workflows, KB",
    "STARTUP python -c pass, median of 5, s",
    "STARTUP import jarvismem, median of 5, s",
    "STARTUP jarvismem --version, median of 5, s",
    "STARTUP modules loaded after import jarvismem",
    "STARTUP numpy loaded by import jarvismem (1 yes, 0 no)",
    "STARTUP httpx loaded by import jarvismem (1 yes, 0 no)",
)
EXPECTED_SERIES = (
    "throughput vs agents",
    "rehydrate p50 vs ledger size",
    "S1 per-turn latency",
    "S1/compaction off per-turn latency",
)


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    # Once per run, not once per xdist worker that gets one of these tests: the
    # quick suite takes tens of seconds and loads the machine while it runs.
    report: dict[str, Any] = once_per_run(tmp_path_factory, "bench-quick", _run_quick_suite)
    return report


def _run_quick_suite(folder: Path) -> dict[str, Any]:
    plots = folder / "plots"
    plots.mkdir(exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--json",
            "--redis-url",
            REAL_REDIS_URL,
            "--plots",
            str(plots),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def _numeric(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.mark.integration
@pytest.mark.parametrize("name", EXPECTED_MEASUREMENTS)
def test_every_measurement_has_numeric_median_p99_and_throughput(
    quick_report: dict[str, Any], name: str
) -> None:
    figures = quick_report["measurements"][name]
    for field in ("ops", "median_ms", "p99_ms", "ops_per_s"):
        assert _numeric(figures[field]), (name, field, figures[field])
    assert figures["ops"] > 0


@pytest.mark.integration
@pytest.mark.parametrize("name", EXPECTED_RATIOS)
def test_every_ratio_is_present_and_numeric(quick_report: dict[str, Any], name: str) -> None:
    assert _numeric(quick_report["ratios"][name]), quick_report["ratios"].get(name)


@pytest.mark.integration
def test_every_target_reports_a_numeric_value_and_no_quick_verdict(
    quick_report: dict[str, Any],
) -> None:
    targets = quick_report["targets"]
    names = " ".join(t["name"] for t in targets)
    for scenario in ("S1", "S2", "S3", "S4", "S5", "S7", "S8", "STARTUP"):
        assert scenario in names
    for target in targets:
        assert _numeric(target["value"]) and _numeric(target["limit"]), target
        # Targets are set for full-size runs: a quick run reports, never judges.
        assert target["judged"] is False and target["passed"] is None, target


@pytest.mark.integration
@pytest.mark.parametrize("name", EXPECTED_FIGURES)
def test_every_new_scenario_figure_is_present_and_numeric(
    quick_report: dict[str, Any], name: str
) -> None:
    assert _numeric(quick_report["figures"][name]), quick_report["figures"].get(name)


@pytest.mark.integration
def test_every_figure_ratio_and_series_point_is_numeric(quick_report: dict[str, Any]) -> None:
    for group in ("figures", "ratios"):
        for name, value in quick_report[group].items():
            assert _numeric(value), (group, name, value)
    for name in EXPECTED_SERIES:
        assert name in quick_report["series"], name
    for name, columns in quick_report["series"].items():
        lengths = {len(values) for values in columns.values()}
        assert len(lengths) == 1 and lengths != {0}, (name, lengths)
        for column, values in columns.items():
            assert all(_numeric(v) for v in values), (name, column)


@pytest.mark.integration
def test_throughput_plot_data_covers_1_to_64_agents(quick_report: dict[str, Any]) -> None:
    data = quick_report["series"]["throughput vs agents"]
    assert data["agents"] == [1.0, 8.0, 32.0, 64.0]
    assert set(data) >= {"raw redis.asyncio", "jarvismem"}


@pytest.mark.integration
def test_plots_are_written_or_the_report_says_why(quick_report: dict[str, Any]) -> None:
    if quick_report["plots"]:
        assert len(quick_report["plots"]) == 3
        for path in quick_report["plots"]:
            assert Path(path).read_bytes().startswith(b"\x89PNG")
    else:
        assert any("matplotlib is not installed" in n for n in quick_report["notes"])


@pytest.mark.integration
def test_memory_scenario_reports_rss_and_redis_growth_with_and_without_retention(
    quick_report: dict[str, Any],
) -> None:
    s5 = {k: v for k, v in quick_report["figures"].items() if k.startswith("S5 ")}
    for label in ("unbounded", "LEDGER_MAX_LEN=1000"):
        for what in (
            "RSS growth per 100k turns, MB",
            "Redis used_memory growth per 100k turns, MB",
            "max XLEN seen",
        ):
            assert _numeric(s5[f"S5 {label}: {what}"])


@pytest.mark.integration
def test_azurite_scenario_is_measured_or_skipped_with_a_note(quick_report: dict[str, Any]) -> None:
    s6 = [k for k in quick_report["measurements"] if k.startswith("S6/")]
    skipped = any(n.startswith("S6 skipped") for n in quick_report["notes"])
    assert s6 or skipped
    for name in s6:
        assert _numeric(quick_report["measurements"][name]["median_ms"])


def test_the_langgraph_bench_gives_no_verdict_on_a_quick_run() -> None:
    """A quick run's 100 operations say nothing of a full-size target: no yes/no."""
    from benchmarks.langgraph import render
    from benchmarks.stats import Target

    row = {"ops_per_s": 1.0, "median_ms": 1.0, "p99_ms": 1.0}
    report = {
        "ops": 100,
        "rows": {"jarvismem @ 10": {"aput": row, "aget_tuple": row}},
        "ratios": {"aput jarvismem/raw": 0.1},
        "targets": [Target("aput >= 0.5x raw", 0.1, 0.5, ">=")],
        "notes": [],
    }
    quick = render(report, judged=False)
    assert "| aput >= 0.5x raw | 0.10 | (target judged at full size) |" in quick
    assert "targets are judged at full size only" in quick
    assert "| no |" in render(report)  # a full run still judges
