"""``jarvismem demo`` end to end: a child is SIGKILLed mid-turn, resumed, and verified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jarvismem.cli.demo import kill_point
from jarvismem.demo.child import user_message
from jarvismem.testing.fake_athena import FakeAthenaServer
from tests.cli.conftest import Cli
from tests.conftest import env_without_settings
from tests.harness.redis_server import free_port


def _nothing_configured() -> dict[str, str]:
    """A user's environment: no jarvismem setting at all (the embedded server)."""
    env = env_without_settings()
    del env["REDIS_URL"]
    return env


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
        env=_nothing_configured(),
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
    assert summary["redis"]["embedded_server"]
    # The --tmp server was stopped with its folder: nothing left running.
    socket = Path(summary["redis"]["url"].removeprefix("unix://").split("?")[0])
    assert socket.name == "redis.sock" and not socket.parent.exists()
    assert summary["summary"]["turns"] == 10
    # --tmp leaves nothing in the working directory.
    assert not (tmp_path / ".jarvismem").exists()


def test_demo_human_output_names_the_embedded_server_and_passes(tmp_path: Path) -> None:
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
        env=_nothing_configured(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "the embedded Redis server, persistent" in out and "SIGKILL sent to pid" in out
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
        "jarvismem: error: --kill-after 3: must be at least 1 and less than --turns (3)"
    )


def test_demo_kill_point_defaults_to_two_thirds_of_the_turns(cli: Cli) -> None:
    # The old fixed default (8) made `--turns 5` a usage error.
    proc = cli.run("demo", "--tmp", "--json", "--turns", "5")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ok"] is True and summary["killed_child"]["acknowledged"] == [1, 2, 3]
    assert kill_point(12, None) == 8 and kill_point(2, None) == 1 and kill_point(3, None) == 2


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--turns", "1"), "--turns 1: the demo needs at least 2 turns"),
        (("--turns", "5", "--kill-after", "5"), "--kill-after 5: must be at least 1 and less"),
        (("--turns", "5", "--kill-after", "0"), "--kill-after 0: must be at least 1 and less"),
    ],
)
def test_demo_refuses_a_combination_that_cannot_run_naming_the_flag(
    cli: Cli, args: tuple[str, ...], line: str
) -> None:
    proc = cli.run("demo", "--tmp", *args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"jarvismem: error: {line}")
    assert len(proc.stderr.splitlines()) == 1


def test_rerunning_a_finished_demo_workflow_says_so_and_how_to_start_anew(cli: Cli) -> None:
    first = cli.run("demo", "--tmp", "--json", "--turns", "3", "--workflow", "wf-twice")
    assert first.returncode == 0, first.stderr
    again = cli.run("demo", "--tmp", "--turns", "3", "--workflow", "wf-twice")
    assert again.returncode == 2
    assert again.stderr.splitlines() == [
        "jarvismem: error: workflow wf-twice already ran the demo (its checkpoint says turn 3 "
        "is done; 3 ledger entries): pass a new --workflow, or leave --workflow out for a "
        "fresh demo-<random> one"
    ]


def test_a_failing_child_is_one_line_with_its_reason_and_no_traceback(cli: Cli) -> None:
    # Parent and children reach Redis through a URL nobody listens on.
    env = dict(cli.env, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    proc = cli.run("demo", "--tmp", "--turns", "3", env=env)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("jarvismem: error: demo failed: child exited with 1: ")
    assert "Unavailable" in lines[0] and lines[0].endswith("(-v shows the child's stderr)")
    assert "Traceback" not in proc.stderr and 'File "' not in proc.stderr
    verbose = cli.run("-v", "demo", "--tmp", "--turns", "3", env=env)
    assert 'File "' in verbose.stderr  # the child's traceback, under -v only
    assert verbose.stderr.splitlines()[-1].startswith("jarvismem: error: demo failed:")


def test_with_athena_the_recovered_run_sees_the_crashed_runs_conversation_as_mid_term_memory(
    cli: Cli, athena_server: FakeAthenaServer
) -> None:
    env = dict(cli.env, ATHENA_URL=athena_server.url)
    proc = cli.run("demo", "--json", "--turns", "6", "--workflow", "wf-athena-demo", env=env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    # The bundle the resumed child read: chains formed from the killed child's user
    # messages (turns 1-4 were acknowledged before the kill), not only its own events.
    ctx = summary["bundle"]["athena_context"]
    assert ctx is not None, summary["bundle"]["degraded"]
    chains = " ".join(chain["summary"] for chain in ctx["mid_term"])
    for turn in (1, 2, 3, 4):
        assert user_message(turn) in chains
    # After the demo, the CLI's read path finds the agent's session and its chains.
    context = cli.run("context", "--agent", "kernel", "--json", env=env)
    assert context.returncode == 0, context.stderr
    after = json.loads(context.stdout)
    assert after["mid_term"] and user_message(1) in after["mid_term"][0]["summary"]
    assert user_message(6) in [event["content"] for event in after["short_term"]]
    search = cli.run("search", "--agent", "kernel", "--query", "harmonics", "--json", env=env)
    assert search.returncode == 0, search.stderr
    assert json.loads(search.stdout), "a search of the run's topic finds its chains"
