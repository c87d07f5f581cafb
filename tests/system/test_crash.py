"""Crash suite: SIGKILL the agent and redis-server at random points; nothing acked is lost.

The harness itself lives in ``tests.harness.crash`` (also ``python -m
tests.harness.crash``); here it runs with a CI-sized budget, and its verifier
is shown to notice a lost turn, a duplicate and a damaged summary.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import require_backend
from tests.harness.crash import (
    AGENT,
    STEP,
    WORKFLOW,
    CrashConfig,
    CrashReport,
    RedisServerProcess,
    _Acks,
    _child_settings,
    parse_summary,
    run_crash_harness,
    summary_text,
    verify,
)

pytestmark = pytest.mark.integration

CI_KILLS = int(os.environ.get("JARVISMEM_CRASH_KILLS", "24"))


def _need_redis_server() -> None:
    require_backend(shutil.which("redis-server") is not None, "the redis-server binary")


def test_random_sigkills_of_agent_and_redis_lose_no_acknowledged_turn(tmp_path: Path) -> None:
    _need_redis_server()
    report = run_crash_harness(CrashConfig(kills=CI_KILLS, seed=20240611, workdir=tmp_path))
    assert report.problems == []
    assert report.kills >= CI_KILLS
    assert report.redis_kills > 0 and report.child_kills > 0
    assert report.lost_turns == 0 and report.duplicate_turns == 0
    # Every acknowledged turn once, plus at most the turn in flight at the final kill.
    assert report.unacked_in_flight <= 1
    assert report.ledger_entries == report.turns_acked + report.unacked_in_flight
    assert report.checkpoint_ok and report.summary_ok
    assert report.scratchpad_skipped_lines == report.torn_tails_injected > 0


def test_a_summary_cut_anywhere_is_not_taken_for_a_whole_one() -> None:
    text = summary_text(42)
    assert parse_summary(text) == 42
    for cut in (1, len(text) // 2, len(text) - 1):
        assert parse_summary(text[:cut]) is None


async def _verify_with(tmp_path: Path, acks: _Acks, prepare: str) -> CrashReport:
    from jarvismem.runtime import MemoryRuntime

    with RedisServerProcess(tmp_path / "redis") as server:
        rt = await MemoryRuntime.from_env(_child_settings(server.url, tmp_path))
        mem = rt.memory(WORKFLOW, STEP, AGENT)
        assert mem.episodic is not None and mem.ltm is not None
        if prepare == "duplicate":
            for _ in range(2):
                await mem.episodic.append(
                    {
                        "turn_id": "1",
                        "thought": "thinking about step 1",
                        "action": "act-1",
                        "result": "result of turn 1",
                    }
                )
        if prepare == "stray":
            for turn in (1, 2, 5):  # 1 acked, 2 in flight at the last kill, 5 from nowhere
                await mem.episodic.append(
                    {
                        "turn_id": str(turn),
                        "thought": f"thinking about step {turn}",
                        "action": f"act-{turn}",
                        "result": f"result of turn {turn}",
                    }
                )
        if prepare == "damaged-summary":
            await mem.ltm.save_summary(summary_text(7)[:-5])
        await rt.close()
        report = CrashReport()
        await verify(server.url, tmp_path, acks, report)
    return report


async def test_the_verifier_reports_an_acknowledged_turn_missing_from_the_ledger(
    tmp_path: Path,
) -> None:
    _need_redis_server()
    acks = _Acks()
    acks.feed("ACK 1")
    report = await _verify_with(tmp_path, acks, "nothing")
    assert report.lost_turns == 1 and not report.ok


async def test_the_verifier_reports_a_duplicated_turn(tmp_path: Path) -> None:
    _need_redis_server()
    report = await _verify_with(tmp_path, _Acks(), "duplicate")
    assert report.duplicate_turns == 1 and not report.ok


async def test_the_verifier_allows_only_the_last_in_flight_turn_unacknowledged(
    tmp_path: Path,
) -> None:
    _need_redis_server()
    acks = _Acks()
    acks.feed("ACK 1")
    report = await _verify_with(tmp_path, acks, "stray")
    assert report.unacked_in_flight == 2 and not report.ok
    assert any("besides the last: [5]" in p for p in report.problems)


async def test_the_verifier_reports_a_partial_summary(tmp_path: Path) -> None:
    _need_redis_server()
    acks = _Acks()
    acks.feed("SUM 7")
    report = await _verify_with(tmp_path, acks, "damaged-summary")
    assert not report.summary_ok and not report.ok


def test_the_cli_prints_the_figures_as_json(tmp_path: Path) -> None:
    _need_redis_server()
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.harness.crash",
            "--kills",
            "2",
            "--seed",
            "3",
            "--json",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    figures = json.loads(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
    assert figures["ok"] is True and figures["kills"] >= 2 and figures["lost_turns"] == 0
