"""The ``jarvismem`` CLI through its real entry point (``python -m jarvismem``).

Every command runs as a subprocess with a clean environment: Redis is a
loopback Redis-protocol server hosted by the test (or the real server), blobs
and the outbox live in ``tmp_path``, and ``--env-file /dev/null`` keeps any
developer ``.env`` out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.loopback_redis import LoopbackRedis
from jarvismem.cli import bench as bench_cmds
from jarvismem.cli import main as cli_main
from jarvismem.errors import (
    BackendUnavailableError,
    ConfigError,
    InvalidIdError,
    LockNotAcquiredError,
)
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from tests.conftest import (
    REAL_REDIS_URL,
    env_without_settings,
    real_redis_available,
    require_backend,
)


@dataclass
class Cli:
    """How to run the CLI against one isolated store."""

    env: dict[str, str]
    cwd: Path
    redis_url: str
    namespace: str

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "jarvismem", "--env-file", os.devnull, *args]

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            env=env or self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )

    async def arun(self, *args: str) -> subprocess.CompletedProcess[str]:
        # The loopback server runs in a thread, so a blocking wait here is safe;
        # to_thread keeps the test's event loop (and its clients) responsive.
        return await asyncio.to_thread(self.run, *args)

    def runtime_settings(self) -> Any:
        return load_settings(
            _env_file=None,
            redis_url=self.redis_url,
            storage_backend="local",
            storage_base_path=self.env["STORAGE_BASE_PATH"],
            outbox_path=self.cwd / "test-outbox",
            jarvismem_namespace=self.namespace,
        )


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = env_without_settings()
    env["STORAGE_BASE_PATH"] = str(tmp_path / "blobs")
    env["OUTBOX_PATH"] = str(tmp_path / "outbox")
    env["REDIS_CONNECT_RETRIES"] = "0"
    return env


@pytest.fixture(scope="module")
def loopback() -> Iterator[LoopbackRedis]:
    with LoopbackRedis() as server:
        yield server


def _make_cli(url: str, tmp_path: Path) -> Cli:
    namespace = "t" + uuid.uuid4().hex[:12]
    env = clean_env(tmp_path)
    env["REDIS_URL"] = url
    env["JARVISMEM_NAMESPACE"] = namespace
    return Cli(env=env, cwd=tmp_path, redis_url=url, namespace=namespace)


@pytest.fixture
def cli(loopback: LoopbackRedis, tmp_path: Path) -> Cli:
    """The CLI against the loopback server."""
    return _make_cli(loopback.url, tmp_path)


@pytest.fixture(params=["loopback", pytest.param("real", marks=pytest.mark.integration)])
def any_cli(request: pytest.FixtureRequest, loopback: LoopbackRedis, tmp_path: Path) -> Cli:
    """The CLI against the loopback server, then the real Redis server."""
    if request.param == "real":
        require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
        return _make_cli(REAL_REDIS_URL, tmp_path)
    return _make_cli(loopback.url, tmp_path)


@pytest.fixture
async def runtime(any_cli: Cli) -> AsyncIterator[MemoryRuntime]:
    """A runtime on the same store as ``any_cli`` (for seeding and checking)."""
    rt = await MemoryRuntime.from_env(any_cli.runtime_settings())
    yield rt
    if rt.redis is not None:
        keys = [k async for k in rt.redis.scan_iter(match=f"jm:{any_cli.namespace}:*")]
        if keys:
            await rt.redis.delete(*keys)
    await rt.close()


async def seed_turns(rt: MemoryRuntime, workflow: str, turns: range) -> None:
    mem = rt.memory(workflow, "s1", "a1")
    for t in turns:
        await mem.log_turn(t, f"thought {t}", f"action {t}", f"result {t}", tokens=5)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- global behaviour -------------------------------------------------------------------------


def test_version_and_help_exit_zero(cli: Cli) -> None:
    version = cli.run("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("jarvismem ")
    helped = cli.run("--help")
    assert helped.returncode == 0
    for command in ("demo", "status", "tail", "bundle", "compact", "export", "import", "init"):
        assert command in helped.stdout


def test_invalid_workflow_id_is_one_line_usage_error(cli: Cli) -> None:
    proc = cli.run("tail", "--workflow", "../etc")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jarvismem: error: workflow_id")


def test_missing_env_file_is_a_clear_error(cli: Cli, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "jarvismem", "--env-file", str(tmp_path / "nope.env"), "status"],
        env=cli.env,
        cwd=cli.cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip() == f"jarvismem: error: --env-file {tmp_path / 'nope.env'}: no such file"
    )


# --- how failures are reported (in-process: a command raising each kind of error) -------------


@pytest.fixture
def raising_command(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[BaseException], None]]:
    """Make ``jarvismem bench`` raise the given exception; restore logging after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    def install(exc: BaseException) -> None:
        async def fail(ctx: Any) -> int:
            raise exc

        monkeypatch.setattr(bench_cmds, "bench", fail)

    yield install
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (ConfigError("FOO must be set"), 2, "FOO must be set"),
        (InvalidIdError("workflow_id is bad"), 2, "workflow_id is bad"),
        (BackendUnavailableError("Redis down"), 1, "Redis down"),
        (LockNotAcquiredError(), 1, "LockNotAcquiredError"),
        (FileNotFoundError(2, "No such file", "out/x"), 1,
         "FileNotFoundError: [Errno 2] No such file: 'out/x'"),
        (RuntimeError("boom"), 1,
         "internal error: RuntimeError: boom (a bug; -vv shows the traceback)"),
    ],
)  # fmt: skip
def test_failures_are_one_line_classified_by_jarvismem_error_class(
    raising_command: Callable[[BaseException], None],
    capsys: pytest.CaptureFixture[str],
    exc: BaseException,
    code: int,
    line: str,
) -> None:
    raising_command(exc)
    assert cli_main(["--env-file", os.devnull, "bench"]) == code
    err = capsys.readouterr().err
    assert err.splitlines() == [f"jarvismem: error: {line}"]


def test_an_error_line_never_shows_a_secret(
    raising_command: Callable[[BaseException], None], capsys: pytest.CaptureFixture[str]
) -> None:
    raising_command(RuntimeError("cannot reach redis://:hunter2secret@db:6379/0"))
    assert cli_main(["--env-file", os.devnull, "bench"]) == 1
    err = capsys.readouterr().err
    assert "hunter2secret" not in err and err.startswith("jarvismem: error: internal error:")


def test_vv_adds_the_traceback(
    raising_command: Callable[[BaseException], None], capsys: pytest.CaptureFixture[str]
) -> None:
    raising_command(RuntimeError("boom"))
    assert cli_main(["--env-file", os.devnull, "-vv", "bench"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().endswith("(a bug; -vv shows the traceback)")


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
    env = dict(cli.env, REDIS_URL=f"redis://:hunter2secret@127.0.0.1:{_free_port()}/0")
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
    env = dict(cli.env, REDIS_URL=f"redis://:pw-abcdef@127.0.0.1:{_free_port()}/0")
    proc = cli.run("tail", "--workflow", "wf1", env=env)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "pw-abcdef" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("jarvismem: error: Redis at")


# --- tail and bundle --------------------------------------------------------------------------


async def test_tail_prints_the_last_entries(any_cli: Cli, runtime: MemoryRuntime) -> None:
    await seed_turns(runtime, "wf-tail", range(1, 4))
    proc = await any_cli.arun("tail", "--workflow", "wf-tail", "-n", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    entries = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["turn_id"] for e in entries] == ["2", "3"]
    assert entries[1]["thought"] == "thought 3" and entries[1]["tokens"] == 5
    human = await any_cli.arun("tail", "--workflow", "wf-tail")
    assert human.returncode == 0
    assert len(human.stdout.splitlines()) == 3 and "action 1" in human.stdout
    empty = await any_cli.arun("tail", "--workflow", "wf-none")
    assert empty.returncode == 0 and "is empty" in empty.stdout


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


async def test_tail_follow_stops_after_max_wait(any_cli: Cli) -> None:
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
    assert "compacting wf-c: 250/250 (100%)" in proc.stderr
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


# --- export and import ------------------------------------------------------------------------


async def test_export_then_import_into_a_fresh_namespace(cli: Cli, tmp_path: Path) -> None:
    rt = await MemoryRuntime.from_env(cli.runtime_settings())
    async with rt:
        await seed_turns(rt, "wf-x", range(1, 6))
        await rt.memory("wf-x", "s1", "a1").save_checkpoint("state-5")
    export = await cli.arun("export", "--workflow", "wf-x", "-o", str(tmp_path / "wf.jsonl"))
    assert export.returncode == 0, export.stderr
    lines = (tmp_path / "wf.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "jarvismem-export" and header["workflow_id"] == "wf-x"
    kinds = [json.loads(line)["kind"] for line in lines[1:]]
    assert kinds.count("ledger") == 5 and "checkpoint" in kinds and "scratchpad" in kinds
    fresh = dict(cli.env, JARVISMEM_NAMESPACE="t" + uuid.uuid4().hex[:12])
    imported = cli.run("import", str(tmp_path / "wf.jsonl"), "--json", env=fresh)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["counts"]["ledger"] == 5
    tail = cli.run("tail", "--workflow", "wf-x", "--json", env=fresh)
    assert [json.loads(x)["turn_id"] for x in tail.stdout.splitlines()] == ["1", "2", "3", "4", "5"]
    refused = cli.run("import", str(tmp_path / "wf.jsonl"), env=fresh)
    assert refused.returncode == 1
    assert "already holds data; pass --force" in refused.stderr
    forced = cli.run("import", str(tmp_path / "wf.jsonl"), "--force", env=fresh)
    assert forced.returncode == 0, forced.stderr


def test_export_to_stdout_pipes_clean_jsonl(cli: Cli) -> None:
    proc = cli.run("export", "--workflow", "wf-empty")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["version"] == 1
    assert "exported 0 record(s)" in proc.stderr


def test_import_of_a_bad_file_names_the_line(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"format": "jarvismem-export", "version": 1, "workflow_id": "w", '
        '"namespace": "n"}\n{"kind": "ledger", "id": "1-0", "fields": {"a": 1}}\n'
        '{"kind": "mystery"}\n'
    )
    proc = cli.run("import", str(bad))
    assert proc.returncode == 1
    assert proc.stderr.startswith("jarvismem: error: line 3:")
    assert "Traceback" not in proc.stderr
    tail = cli.run("tail", "--workflow", "w")
    assert "is empty" in tail.stdout  # the valid line 2 was not written either


# --- init -------------------------------------------------------------------------------------


def test_init_writes_env_and_never_overwrites_without_force(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "conf" / ".env"
    args = (
        "init",
        "--non-interactive",
        "--output",
        str(target),
        "--redis-url",
        "redis://:initsecret@127.0.0.1:6379/0",
        "--athena-url",
        "http://127.0.0.1:8080",
    )
    proc = cli.run(*args)
    assert proc.returncode == 0, proc.stderr
    text = target.read_text()
    assert "REDIS_URL=redis://:initsecret@127.0.0.1:6379/0" in text
    assert "ATHENA_URL=http://127.0.0.1:8080" in text and "STORAGE_BACKEND=local" in text
    assert "initsecret" not in proc.stdout + proc.stderr
    assert "docker compose up -d" in proc.stdout and "--profile athena" in proc.stdout
    assert target.stat().st_mode & 0o077 == 0
    again = cli.run(*args)
    assert again.returncode == 2 and "already exists; pass --force" in again.stderr
    assert cli.run(*args, "--force").returncode == 0


def test_init_refuses_an_invalid_value_before_writing(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / ".env"
    proc = cli.run("init", "--non-interactive", "--output", str(target), "--redis-url", "http://x")
    assert proc.returncode == 2 and "REDIS_URL" in proc.stderr
    assert not target.exists()


# --- athena -----------------------------------------------------------------------------------


def test_context_without_athena_url_is_a_clear_error(cli: Cli) -> None:
    for cmd in (("context", "--agent", "a1"), ("search", "--agent", "a1", "--query", "q")):
        proc = cli.run(*cmd)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines()[-1] == (
            "jarvismem: error: Athena is not configured: set ATHENA_URL (see .env.example)"
        )


def test_context_and_search_use_the_agents_cached_session(cli: Cli) -> None:
    from jarvismem.testing.fake_athena import FakeAthenaServer

    with FakeAthenaServer() as athena:
        env = dict(cli.env, ATHENA_URL=athena.url)
        first = cli.run("context", "--agent", "a1", "--json", env=env)
        assert first.returncode == 0, first.stderr
        ctx = json.loads(first.stdout)
        assert ctx["agent_id"] == "a1" and ctx["short_term"] == []
        search = cli.run("search", "--agent", "a1", "--query", "tides", "--json", env=env)
        assert search.returncode == 0, search.stderr
        assert json.loads(search.stdout)["results"] == []
        human = cli.run("context", "--agent", "a1", env=env)
        assert "short-term events (0)" in human.stdout
        # Three commands, one session: the id is cached in Redis between processes.
        assert athena.sessions_created == 1


# --- bench ------------------------------------------------------------------------------------


def test_bench_outside_a_checkout_says_where_to_run_it(cli: Cli) -> None:
    proc = cli.run("bench")
    assert proc.returncode == 2
    assert "run `jarvismem bench` from the root of a jarvismem checkout" in proc.stderr


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
