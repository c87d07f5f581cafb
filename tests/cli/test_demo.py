"""``jarvismem demo`` end to end: a child is SIGKILLed mid-turn, resumed, and verified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import env_without_settings


def test_demo_kills_a_child_and_verifies_every_turn_once(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jarvismem",
            "--env-file",
            os.devnull,
            "demo",
            "--tmp",
            "--json",
            "--turns",
            "10",
            "--kill-after",
            "6",
        ],
        env=env_without_settings(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ok"] is True
    killed = summary["killed_child"]
    assert killed["signal"] == "SIGKILL" and killed["exit_status"] == -9
    assert killed["acknowledged"] == [1, 2, 3, 4, 5, 6] and killed["inflight_turn"] == 7
    # Resumed from the checkpoint; only the unacknowledged turn ran twice.
    assert summary["resumed"]["next_turn"] == 7 and summary["resumed"]["reruns"] == [7]
    assert summary["resumed"]["acknowledged"] == [7, 8, 9, 10]
    ledger = summary["ledger"]
    assert ledger["entries"] == 10
    assert ledger["turn_ids"] == [str(t) for t in range(1, 11)]
    assert ledger["duplicates"] == [] and ledger["missing"] == []
    # The bundle the resumed child saw: the in-flight turn is in it, the checkpoint is not past it.
    bundle = summary["bundle"]
    assert json.loads(bundle["checkpoint"])["next_turn"] == 7
    assert bundle["recent_turns"][-1]["turn_id"] == "7"
    assert summary["redis"]["embedded_loopback"] and summary["redis"]["ephemeral"]
    assert summary["summary"]["turns"] == 10
    # --tmp leaves nothing in the working directory.
    assert not (tmp_path / ".jarvismem").exists()


def test_demo_human_output_says_the_store_is_ephemeral_and_passes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jarvismem",
            "--env-file",
            os.devnull,
            "demo",
            "--tmp",
            "--turns",
            "4",
            "--kill-after",
            "2",
        ],
        env=env_without_settings(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "EPHEMERAL" in out and "SIGKILL sent to pid" in out
    for section in (
        "== Long-term summary ==",
        "== Recent turns",
        "== Checkpoint ==",
        "== Scratchpad ==",
        "== Degraded ==",
    ):
        assert section in out
    assert "turn  3 re-run" in out
    assert out.rstrip().endswith("PASS: every turn 1..N is in the ledger exactly once")


def test_demo_rejects_a_kill_point_outside_the_run(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jarvismem",
            "--env-file",
            os.devnull,
            "demo",
            "--tmp",
            "--turns",
            "3",
            "--kill-after",
            "3",
        ],
        env=env_without_settings(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "jarvismem: error: --kill-after must be at least 1 and less than --turns"
    )
