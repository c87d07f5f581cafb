"""cli/inspect.py: the inspection commands (status, tail, bundle, compact, spaces)
end to end through ``python -m jarvismem``, then its helpers in process (argument
checks, outbox reasons, ``tail --follow``'s loop). Fixtures: tests/cli/conftest.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jarvismem.cli.inspect import _follow
from jarvismem.keys import KeySpace
from jarvismem.records import encode_entry
from jarvismem.runtime import MemoryRuntime
from jarvismem.ui.data import _outbox_reason
from tests.cli.conftest import Cli, seed_turns
from tests.conftest import AUTH_PASSWORD
from tests.harness.redis_server import free_port

# --- status -----------------------------------------------------------------------------------


def test_status_reports_each_backend_as_json_and_human(any_cli: Cli) -> None:
    proc = any_cli.run("status", "--json")
    assert proc.returncode == 0, proc.stderr
    health = json.loads(proc.stdout)
    redis = health["backends"]["redis"]
    assert redis["configured"] and redis["reachable"] and redis["backend"] == "redis"
    assert isinstance(redis["latency_ms"], float)
    assert health["backends"]["blob"]["backend"] == "local"
    assert health["backends"]["athena"] == {"configured": False}
    assert health["namespace"] == any_cli.namespace
    human = any_cli.run("status")
    assert human.returncode == 0
    assert "reachable" in human.stdout and "athena  not configured" in human.stdout


def test_status_with_unreachable_redis_fails_in_one_line_without_the_password(cli: Cli) -> None:
    env = dict(cli.env, REDIS_URL=f"redis://:hunter2secret@127.0.0.1:{free_port()}/0")
    for extra in ((), ("--json",)):
        proc = cli.run("status", *extra, env=env)
        assert proc.returncode == 1
        assert "Traceback" not in proc.stderr
        assert "hunter2secret" not in proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            "jarvismem: error: configured backend(s) not reachable: redis"
        ]
    health = json.loads(proc.stdout)
    assert health["backends"]["redis"]["reachable"] is False
    assert health["unreachable"] == ["redis"]


def test_tail_with_unreachable_redis_is_one_line_error(cli: Cli) -> None:
    env = dict(cli.env, REDIS_URL=f"redis://:pw-abcdef@127.0.0.1:{free_port()}/0")
    proc = cli.run("tail", "--workflow", "wf1", env=env)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "pw-abcdef" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("jarvismem: error: Redis at")


# --- tail and bundle --------------------------------------------------------------------------


async def test_tail_prints_the_last_entries(any_cli: Cli, runtime: MemoryRuntime) -> None:
    await seed_turns(runtime, "wf-tail", range(1, 4))
    proc = await any_cli.arun("tail", "--workflow", "wf-tail", "-n", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)  # one JSON document: an array
    assert [e["turn_id"] for e in entries] == ["2", "3"]
    assert entries[1]["thought"] == "thought 3" and entries[1]["tokens"] == 5
    human = await any_cli.arun("tail", "--workflow", "wf-tail")
    assert human.returncode == 0
    assert len(human.stdout.splitlines()) == 3 and "action 1" in human.stdout
    # A workflow that exists (a checkpoint) with an empty ledger.
    await runtime.memory("wf-none", "s1", "a1").save_checkpoint("{}")
    empty = await any_cli.arun("tail", "--workflow", "wf-none")
    assert empty.returncode == 0 and empty.stdout == "(ledger of wf-none is empty)\n"
    empty_json = await any_cli.arun("tail", "--workflow", "wf-none", "--json")
    assert empty_json.returncode == 0 and json.loads(empty_json.stdout) == []


async def test_tail_n_0_prints_no_entry_and_no_empty_note(cli: Cli) -> None:
    async with await MemoryRuntime.from_env(cli.runtime_settings()) as rt:
        await seed_turns(rt, "wf-six", range(1, 7))
    proc = await cli.arun("tail", "--workflow", "wf-six", "-n", "0")
    # Zero entries were asked for: none is shown, and the ledger is not empty.
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    as_json = await cli.arun("tail", "--workflow", "wf-six", "-n", "0", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == []


def test_a_negative_count_is_an_argument_error(cli: Cli) -> None:
    for args in (
        ("tail", "--workflow", "wf"),
        ("bundle", "--workflow", "wf", "--step", "s", "--agent", "a"),
    ):
        proc = cli.run(*args, "-n", "-1")
        assert proc.returncode == 2
        assert proc.stderr.splitlines()[-1] == (
            f"jarvismem {args[0]}: error: argument -n: expected a whole number >= 0, got '-1'"
        )


async def test_tail_follow_streams_a_turn_appended_after_it_started(
    any_cli: Cli, runtime: MemoryRuntime
) -> None:
    await seed_turns(runtime, "wf-follow", range(1, 2))
    proc = await asyncio.create_subprocess_exec(
        *any_cli.argv(
            "tail",
            "--workflow",
            "wf-follow",
            "-n",
            "1",
            "--follow",
            "--count",
            "1",
            "--max-wait",
            "30",
            "--json",
        ),
        env=any_cli.env,
        cwd=any_cli.cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        first = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert first["turn_id"] == "1"
        # tail now follows from turn 1's id, so turn 2 can only reach it by XREAD.
        await seed_turns(runtime, "wf-follow", range(2, 3))
        second = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert second["turn_id"] == "2" and second["thought"] == "thought 2"
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_tail_follow_stops_after_max_wait(any_cli: Cli, runtime: MemoryRuntime) -> None:
    await runtime.memory("wf-quiet", "s1", "a1").save_checkpoint("{}")
    proc = await any_cli.arun(
        "tail", "--workflow", "wf-quiet", "-n", "0", "--follow", "--max-wait", "0.3"
    )
    assert proc.returncode == 0 and proc.stdout == ""


async def test_bundle_shows_every_section(any_cli: Cli, runtime: MemoryRuntime) -> None:
    await seed_turns(runtime, "wf-b", range(1, 4))
    mem = runtime.memory("wf-b", "s1", "a1")
    await mem.save_checkpoint('{"next_turn": 4}')
    assert mem.working is not None
    await mem.working.write("finding", "the answer is 42", scope="goal")
    proc = await any_cli.arun(
        "bundle", "--workflow", "wf-b", "--step", "s1", "--agent", "a1", "-n", "2", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    bundle = json.loads(proc.stdout)
    assert bundle["checkpoint"] == '{"next_turn": 4}'
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["2", "3"]
    assert "the answer is 42" in bundle["scratchpad"]
    assert bundle["degraded"] == {}
    human = await any_cli.arun("bundle", "--workflow", "wf-b", "--step", "s1", "--agent", "a1")
    for section in (
        "== Long-term summary ==",
        "== Recent turns (3) ==",
        "== Checkpoint ==",
        "== Scratchpad ==",
        "== Degraded ==",
    ):
        assert section in human.stdout
    assert '{"next_turn": 4}' in human.stdout


# --- compact and spaces -----------------------------------------------------------------------


async def test_compact_folds_the_ledger_with_progress(cli: Cli) -> None:
    rt = await MemoryRuntime.from_env(
        cli.runtime_settings().model_copy(update={"compaction_enabled": False})
    )
    async with rt:
        await seed_turns(rt, "wf-c", range(1, 251))
    proc = await cli.arun("compact", "--workflow", "wf-c", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["compacted"] is True and result["entries"] == 250
    # The work left is not known up front: a count as it goes, "done" only after the save.
    assert proc.stderr.splitlines()[-1] == "compacting wf-c, ledger entries: 250 done"
    assert "/" not in proc.stderr
    again = await cli.arun("compact", "--workflow", "wf-c")
    assert again.returncode == 0 and "nothing saved" in again.stdout
    bundle = json.loads(
        (
            await cli.arun(
                "bundle", "--workflow", "wf-c", "--step", "s1", "--agent", "a1", "--json"
            )
        ).stdout
    )
    assert bundle["ltm_summary"] and "turn 250" in bundle["ltm_summary"]


async def test_spaces_shows_world_tasks_and_revisions(cli: Cli) -> None:
    rt = await MemoryRuntime.from_env(cli.runtime_settings())
    async with rt:
        spaces = rt.memory("wf-s", "s1", "a1").spaces
        assert spaces is not None
        await spaces.world_put("city", "Brest")
        task = await spaces.tasks_add("measure the tide")
        await spaces.tasks_add("write it down")
        await spaces.tasks_complete(task["id"])
        await spaces.put_space("notes", ["first"])
    proc = await cli.arun("spaces", "--workflow", "wf-s", "--agent", "a1", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["spaces"]["world"]["data"] == {"city": "Brest"}
    assert [t["status"] for t in data["spaces"]["tasks"]["data"]] == ["done", "open"]
    assert data["spaces"]["tasks"]["rev"] == 3 and data["spaces"]["notes"]["data"] == ["first"]
    human = (await cli.arun("spaces", "--workflow", "wf-s", "--agent", "a1")).stdout
    assert "[x] measure the tide" in human and "[ ] write it down" in human
    assert "city: Brest" in human and "notes (list, rev" in human


# --- status: what other processes left -----------------------------------------------------


async def test_status_shows_outboxes_other_processes_left(
    any_cli: Cli, runtime: MemoryRuntime
) -> None:
    # Another process on this machine (same OUTBOX_PATH as the CLI) left records.
    settings = any_cli.runtime_settings().model_copy(
        update={"outbox_path": Path(any_cli.env["OUTBOX_PATH"])}
    )
    box = MemoryRuntime(settings, redis=runtime.redis).outbox("redis", "wf-left")
    await box.put({"op": "turn", "args": [], "field": "x"})  # queued, not yet replayed
    await box.dead_letter(None, {"op": "bogus"}, "refused for good")
    await box.close()
    proc = any_cli.run("status", "--json")
    assert proc.returncode == 0, proc.stderr
    health = json.loads(proc.stdout)
    [left] = [b for b in health["local_outboxes"] if b["path"].endswith("wf-left.jsonl")]
    assert (left["pending"], left["dead_lettered"]) == (1, 1)
    assert not health["ok"]
    assert any("wf-left.jsonl: 1 queued, 1 dead-lettered" in r for r in health["reasons"])
    human = any_cli.run("status")
    assert "1 dead-lettered" in human.stdout


# --- helpers in process -------------------------------------------------------------------


class _Lines:
    """Stands in for the CLI's output: collects what ``line`` is given."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def line(self, entry: dict[str, Any], render: Any) -> None:
        assert callable(render)
        self.entries.append(entry)


def test_outbox_reason_says_what_is_wrong() -> None:
    assert _outbox_reason({"path": "p", "error": "EACCES"}) == "outbox p: unreadable (EACCES)"
    assert _outbox_reason({"path": "p", "pending": 3}) == "outbox p: 3 queued"
    assert (
        _outbox_reason({"path": "p", "pending": 0, "dead_lettered": 2})
        == "outbox p: 0 queued, 2 dead-lettered"
    )


async def test_follow_decodes_new_entries_and_stops_at_count(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    key = keyspace.ledger(workflow_id)
    old = (await real_redis.xadd(key, encode_entry({"n": 0}))).decode()
    out = _Lines()
    follower = asyncio.create_task(
        _follow(SimpleNamespace(out=out), real_redis, key, old, max_wait=10.0, count=2)
    )
    await asyncio.sleep(0.05)
    for n in (1, 2, 3):
        await real_redis.xadd(key, encode_entry({"n": n, "text": f"é{n}"}))
    await asyncio.wait_for(follower, 10)
    assert [(e["n"], e["text"]) for e in out.entries] == [(1, "é1"), (2, "é2")]


async def test_follow_stops_after_max_wait_without_entries(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    out = _Lines()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await _follow(
        SimpleNamespace(out=out), real_redis, keyspace.ledger(workflow_id), "0-0", 0.2, None
    )
    assert out.entries == [] and loop.time() - started < 2.0


# --- what a new user meets ----------------------------------------------------------


def test_status_says_a_local_blob_folder_is_not_writable(cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")  # unwritable even as root: a file where a folder should be
    env = dict(cli.env, STORAGE_BASE_PATH=str(blocker / "blobs"))
    proc = cli.run("status", env=env)
    assert proc.returncode == 1
    assert "not writable: Not a directory (ENOTDIR)" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == (
        "jarvismem: error: configured backend(s) not writable: blob"
    )
    health = json.loads(cli.run("status", "--json", env=env).stdout)
    assert health["backends"]["blob"]["writable"] is False
    assert health["not_writable"] == ["blob"]


def test_status_write_check_proves_writes_on_every_backend(any_cli: Cli) -> None:
    proc = any_cli.run("status", "--write-check", "--json")
    assert proc.returncode == 0, proc.stderr
    backends = json.loads(proc.stdout)["backends"]
    assert backends["redis"]["writable"] is True and backends["blob"]["writable"] is True


def test_status_write_check_in_text_shows_each_step_of_each_backend(any_cli: Cli) -> None:
    # Before, text mode printed exactly what plain status prints: the check's
    # result was only in --json.
    plain = any_cli.run("status").stdout
    proc = any_cli.run("status", "--write-check")
    assert proc.returncode == 0, proc.stderr
    assert "write check" not in plain
    lines = proc.stdout.splitlines()
    checks = [line.strip() for line in lines if line.strip().startswith("write check:")]
    assert len(checks) == 2, proc.stdout
    assert all(re.fullmatch(r"write check: ok in [\d.]+ ms", c) for c in checks), checks
    for step in ("write", "read back", "clean up"):
        rows = [
            line.split() for line in lines if re.fullmatch(rf"\s+{step}\s+\S+\s+[\d.]+ ms", line)
        ]
        assert len(rows) == 2, f"{step}: {rows}"  # one per backend: redis, blob
        assert all(row[-3] == "ok" and row[-1] == "ms" for row in rows), rows


def test_status_write_check_in_text_names_the_failed_step_and_why(cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    env = dict(cli.env, STORAGE_BASE_PATH=str(blocker / "blobs"))
    proc = cli.run("status", "--write-check", env=env)
    assert proc.returncode == 1
    out = proc.stdout
    assert re.search(r"^\s+write check: FAILED at folder$", out, re.M), out
    assert re.search(r"^\s+folder\s+FAILED\s+.*Not a directory \(ENOTDIR\)$", out, re.M), out
    assert re.search(r"^\s+write\s+not run$", out, re.M), out
    assert re.search(r"^\s+clean up\s+not run$", out, re.M), out


def test_status_without_the_azure_extra_is_one_line_and_exit_2(cli: Cli) -> None:
    # sys.modules[name] = None makes every import of the Azure SDK fail, as when
    # the extra is not installed.
    code = (
        "import sys; sys.modules['azure'] = None; sys.modules['aiohttp'] = None\n"
        "from jarvismem.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = dict(
        cli.env,
        STORAGE_BACKEND="azure",
        AZURE_STORAGE_CONNECTION_STRING="UseDevelopmentStorage=true",
    )
    for command in ("status", "demo"):
        proc = subprocess.run(
            [sys.executable, "-c", code, "--env-file", os.devnull, command],
            env=env,
            cwd=cli.cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        errors = [line for line in proc.stderr.splitlines() if "error:" in line]
        assert errors == [
            "jarvismem: error: the azure extra is not installed: pip install 'jarvismem[azure]' "
            "(STORAGE_BACKEND=azure needs it)"
        ]


@pytest.mark.serial  # bounds a wall-clock time, which a loaded machine stretches
def test_read_commands_with_redis_down_fail_fast_in_one_line(cli: Cli) -> None:
    env = dict(cli.env, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    env.pop("REDIS_CONNECT_RETRIES")  # the default (5), as a new user has it
    started = time.monotonic()
    proc = cli.run("tail", "--workflow", "wf", env=env)
    # Before: 5 retry warnings over 7.7 s, then the error.
    assert time.monotonic() - started < 5
    assert proc.returncode == 1
    assert "retrying" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is redis-server running on 127.0.0.1:" in lines[0]


def test_read_commands_create_no_outbox_files(cli: Cli) -> None:
    outbox = Path(cli.env["OUTBOX_PATH"])
    for args in (
        ("tail", "--workflow", "never-written"),
        ("bundle", "--workflow", "never-written", "--step", "s", "--agent", "a"),
        ("spaces", "--workflow", "never-written", "--agent", "a"),
    ):
        proc = cli.run(*args)
        # Refused: the workflow holds nothing (and the refusal writes nothing either).
        assert proc.returncode == 1 and "no workflow 'never-written'" in proc.stderr
    # Before: each read left <outbox>/<ns>/redis-…/never-written.jsonl.lock behind.
    leftovers = [str(p.relative_to(outbox)) for p in outbox.rglob("*")] if outbox.exists() else []
    assert [p for p in leftovers if "never-written" in p] == []


@pytest.mark.serial  # bounds a wall-clock time, which a loaded machine stretches
@pytest.mark.integration
@pytest.mark.parametrize("command", ["status", "tail"])
@pytest.mark.parametrize("userinfo", ["", ":wrong-password@"], ids=["no-password", "wrong"])
def test_refused_credentials_are_one_true_line_at_once(
    cli: Cli, password_redis: Any, command: str, userinfo: str
) -> None:
    env = dict(cli.env, REDIS_URL=f"redis://{userinfo}127.0.0.1:{password_redis.port}/0")
    env.pop("REDIS_CONNECT_RETRIES")
    args = ("tail", "--workflow", "wf") if command == "tail" else ("status",)
    started = time.monotonic()
    proc = cli.run(*args, env=env)
    # Before: "timed out after 3s" (no password), or 5 retries and 7.7 s (wrong one).
    assert time.monotonic() - started < 5
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("jarvismem: error: Redis refused the credentials (NOAUTH/WRONGPASS)")
    assert "wrong-password" not in proc.stderr


@pytest.mark.integration
def test_the_right_password_is_masked_one_way_everywhere(cli: Cli, password_redis: Any) -> None:
    url = f"redis://:{AUTH_PASSWORD}@127.0.0.1:{password_redis.port}/0"
    proc = cli.run("status", env=dict(cli.env, REDIS_URL=url))
    assert proc.returncode == 0, proc.stderr
    assert f"redis://:[REDACTED]@127.0.0.1:{password_redis.port}/0" in proc.stdout
    assert AUTH_PASSWORD not in proc.stdout + proc.stderr


async def test_spaces_of_an_agent_that_has_none_says_so_and_is_stable(
    any_cli: Cli, runtime: MemoryRuntime
) -> None:
    await seed_turns(runtime, "wf-ghost", range(1, 2))  # the workflow exists; a1 has no spaces
    first = await any_cli.arun("spaces", "--workflow", "wf-ghost", "--agent", "a1")
    again = await any_cli.arun("spaces", "--workflow", "wf-ghost", "--agent", "a1")
    assert first.returncode == 0 and first.stdout == again.stdout
    assert first.stdout == "(no spaces for agent a1 in workflow wf-ghost)\n"
    as_json = await any_cli.arun("spaces", "--workflow", "wf-ghost", "--agent", "a1", "--json")
    assert json.loads(as_json.stdout) == {
        "workflow_id": "wf-ghost",
        "agent_id": "a1",
        "exists": False,
    }
