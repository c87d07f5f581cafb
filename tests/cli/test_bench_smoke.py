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

from tests.conftest import REAL_REDIS_URL, real_redis_available, require_backend

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_MEASUREMENTS = (
    "raw sequential XADD",
    "raw 64-task concurrent XADD",
    "raw XREVRANGE COUNT 10",
    "S1 sequential log_turn",
    "S2 64 agents x 20 turns",
    "S3 rehydrate_bundle @ 100",
    "S3 rehydrate_bundle @ 5,000",
    "S4 sequential log_turn, Athena on",
)
EXPECTED_RATIOS = (
    "S1 / raw sequential XADD throughput",
    "S1 last/first 100 median",
    "S2 / raw concurrent XADD throughput",
    "S2 / S1 throughput",
    "S3 p50 @ 100 / raw XREVRANGE p50",
    "S3 p50 @ 5,000 / p50 @ 100",
    "S4 p50 / S1 p50",
)


@pytest.fixture(scope="module")
def quick_report() -> dict[str, Any]:
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", "--redis-url", REAL_REDIS_URL],
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
def test_every_target_reports_a_numeric_value_and_a_verdict(quick_report: dict[str, Any]) -> None:
    targets = quick_report["targets"]
    names = " ".join(t["name"] for t in targets)
    for scenario in ("S1", "S2", "S3", "S4", "S5"):
        assert scenario in names
    for target in targets:
        assert _numeric(target["value"]) and _numeric(target["limit"]), target
        assert isinstance(target["passed"], bool)


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
