"""The recall benchmark on a slice of the real LoCoMo dev file (the CI run).

``python -m benchmarks.recall --slice 1:40 --json`` (one conversation, its first 40
questions) on every store, against the real Redis: every figure of every row must
be present and numeric. No thresholds: quality is judged on full runs
(docs/recall.md), not here. The data file is not in the repository (its licence
forbids it): it is looked for as ``$JARVISMEM_LOCOMO``, beside the checkout
(``../shared/data/locomo-dev.json``) or in ``/work/shared/data``; without it the
test is skipped, saying where it looked.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.recall_data import CANDIDATES, ENV_VAR, DataError, default_data_path
from tests.conftest import REAL_REDIS_URL, real_redis_available, require_backend

ROOT = Path(__file__).resolve().parents[2]
KS = (1, 3, 5, 10, 20)
CATEGORIES = ("overall", "multi-hop", "temporal", "open-domain", "single-hop")
ROWS = ("jarvismem memory lexical", "jarvismem redis lexical", "textbook BM25 (rank-bm25)")


def _data_file() -> Path:
    try:
        return default_data_path(None)
    except DataError:
        where = ", ".join([f"${ENV_VAR}", *(str(p) for p in CANDIDATES)])
        pytest.skip(f"LoCoMo dev file not found (looked at {where}); its licence keeps it out")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = _data_file()
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    plots = tmp_path_factory.mktemp("recall-plots")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.recall",
            "--data",
            str(data),
            "--slice",
            "1:40",
            "--stores",
            "memory,redis",
            "--json",
            "--plot",
            str(plots),
            "--redis-url",
            REAL_REDIS_URL,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    parsed: dict[str, Any] = json.loads(proc.stdout)
    return parsed


def _numeric(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _row(report: dict[str, Any], name: str) -> dict[str, Any]:
    rows = {r["name"]: r for r in report["rows"]}
    assert name in rows, sorted(rows)
    row = rows[name]
    if name.startswith("textbook") and importlib.util.find_spec("rank_bm25") is None:
        # CI installs the dev extra only; the baseline needs the bench extra.
        assert not row["available"] and "rank-bm25 is not installed" in row["note"]
        pytest.skip("rank-bm25 not installed: the baseline row says so")
    assert row["available"], row.get("note")
    return row


@pytest.mark.integration
def test_the_slice_is_one_conversation_and_forty_questions(report: dict[str, Any]) -> None:
    assert (report["conversations"], report["questions"]) == (1, 40)
    assert report["entries"] > 0 and report["ks"] == list(KS)


@pytest.mark.integration
@pytest.mark.parametrize("name", ROWS)
def test_every_row_has_every_score_per_category(report: dict[str, Any], name: str) -> None:
    scores = _row(report, name)["scores"]
    for category in CATEGORIES:
        if category == "overall" or category in scores:
            figures = scores[category]
            for key in [*(f"R@{k}" for k in KS), *(f"Hit@{k}" for k in KS), "MRR"]:
                assert _numeric(figures[key]) and 0 <= figures[key] <= 1, (category, key)
    assert scores["overall"]["questions"] == 40
    assert sum(scores[c]["questions"] for c in CATEGORIES[1:] if c in scores) == 40


@pytest.mark.integration
@pytest.mark.parametrize("name", ROWS)
def test_every_row_has_latency_build_time_and_memory(report: dict[str, Any], name: str) -> None:
    row = _row(report, name)
    assert row["latency"]["queries"] == 40
    latency = row["latency"]
    for figure in (latency["p50_ms"], latency["p99_ms"], row["build"]["seconds"]):
        assert _numeric(figure) and figure > 0
    assert _numeric(latency["cpu_p50_ms"]) and latency["cpu_p50_ms"] >= 0
    assert row["build"]["entries"] == report["entries"]
    assert _numeric(row["memory"]["bytes"]) and row["memory"]["bytes"] > 0


@pytest.mark.integration
async def test_the_redis_row_leaves_no_key_behind(report: dict[str, Any]) -> None:
    import redis.asyncio as aioredis

    namespace = _row(report, "jarvismem redis lexical")["namespace"]
    client: Any = aioredis.Redis.from_url(REAL_REDIS_URL)
    try:
        left = [k async for k in client.scan_iter(match=f"jm:{namespace}:*", count=1000)]
    finally:
        await client.aclose()
    assert left == []


@pytest.mark.integration
def test_the_plots_are_written_or_the_report_says_why(report: dict[str, Any]) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        assert report["plots"] == []
        assert any("matplotlib is not installed" in n for n in report["notes"])
    else:
        assert [Path(p).name for p in report["plots"]] == [
            "recall-at-k.png",
            "recall-at-k-by-category.png",
        ]
        for path in report["plots"]:
            assert Path(path).read_bytes().startswith(b"\x89PNG")
