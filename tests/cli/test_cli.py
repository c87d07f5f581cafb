"""The ``jarvismem`` CLI as a whole (``jarvismem.cli.main``): global options, exit
codes, and how failures are reported. Each command group has its own test file
beside this one; fixtures are in tests/cli/conftest.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.cli import bench as bench_cmds
from jarvismem.cli import build_parser, command_parsers
from jarvismem.cli import main as cli_main
from jarvismem.errors import (
    BackendUnavailableError,
    ConfigError,
    InvalidIdError,
    LockNotAcquiredError,
)
from jarvismem.runtime import MemoryRuntime
from tests.cli.conftest import Cli, seed_turns
from tests.harness.redis_server import free_port

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


# --- parsing: unknown options, type errors, help text -----------------------------------------


def test_an_unknown_option_is_named_before_a_missing_required_one(cli: Cli) -> None:
    proc = cli.run("tail", "--workfow", "wf1")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "jarvismem tail: error: unrecognized argument: --workfow (did you mean --workflow?)"
    )
    assert "required" not in proc.stderr
    # A unique prefix stays accepted, as argparse accepts it; --opt=value too (the
    # command then runs, and refuses a workflow that holds nothing).
    accepted = cli.run("tail", "--work=wf1", "-n", "1")
    assert (accepted.returncode, accepted.stderr.split("(")[0].strip()) == (
        1,
        f"jarvismem: error: no workflow 'wf1' in namespace '{cli.namespace}'",
    )


def test_a_bad_count_says_what_was_expected(cli: Cli) -> None:
    proc = cli.run("tail", "--workflow", "wf1", "-n", "abc")
    assert proc.returncode == 2
    last = proc.stderr.splitlines()[-1]
    assert last == "jarvismem tail: error: argument -n: expected a whole number >= 0, got 'abc'"
    assert "_positive" not in proc.stderr


def test_every_command_and_every_option_has_help_text() -> None:
    parser = build_parser()
    commands = command_parsers(parser)
    assert "status" in commands and "completion" in commands
    for name, sub in {"jarvismem": parser, **commands}.items():
        if sub is not parser:
            assert sub.description, f"{name}: no description"
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions)
                continue
            assert action.help, f"{name} {action.option_strings or action.dest}: no help"


def test_configuration_errors_have_no_pydantic_prefix(cli: Cli) -> None:
    proc = cli.run("status", env=dict(cli.env, REDIS_URL="localhost:6379"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "jarvismem: error: invalid configuration: REDIS_URL: must start with redis://, "
        "rediss://, unix:// or redis+sentinel://, or be memory://"
    ]


# --- global --redis-url ---------------------------------------------------------------------


@pytest.mark.parametrize("where", ["before", "after"])
def test_global_redis_url_overrides_redis_url_before_or_after_the_command(
    cli: Cli, where: str
) -> None:
    env = dict(cli.env, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")  # nobody listens
    flag = ("--redis-url", cli.redis_url)
    args = (*flag, "status", "--json") if where == "before" else ("status", "--json", *flag)
    proc = cli.run(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["backends"]["redis"]["reachable"] is True


# --- output cut short and valid JSON ---------------------------------------------------------


def test_a_reader_that_went_away_ends_the_command_quietly_with_141(cli: Cli) -> None:
    async def seed() -> None:
        async with await MemoryRuntime.from_env(cli.runtime_settings()) as rt:
            await seed_turns(rt, "wf1", range(1, 2))

    asyncio.run(seed())
    for args in (("completion", "bash"), ("status",), ("export", "--workflow", "wf1")):
        read_end, write_end = os.pipe()
        os.close(read_end)  # `| head` that has already exited
        try:
            proc = subprocess.run(
                cli.argv(*args),
                env=cli.env,
                cwd=cli.cwd,
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
            )
        finally:
            os.close(write_end)
        assert (proc.returncode, proc.stderr) == (141, ""), args


async def test_every_json_output_is_one_valid_json_document(cli: Cli, tmp_path: Path) -> None:
    rt = await MemoryRuntime.from_env(cli.runtime_settings())
    async with rt:
        await seed_turns(rt, "wf-j", range(1, 3))
    runs = [
        ("status",),
        ("tail", "--workflow", "wf-j"),
        ("tail", "--workflow", "wf-nothing"),
        ("tail", "--workflow", "wf-j", "-n", "0"),
        ("bundle", "--workflow", "wf-j", "--step", "s1", "--agent", "a1"),
        ("bundle", "--workflow", "wf-nothing", "--step", "s1", "--agent", "a1"),
        ("spaces", "--workflow", "wf-nothing", "--agent", "a1"),
        ("compact", "--workflow", "wf-j"),
        ("compact", "--workflow", "wf-nothing"),
        ("completion", "bash"),
        ("init", "--non-interactive", "--output", str(tmp_path / "j.env")),
    ]
    for args in runs:
        proc = await cli.arun(*args, "--json")
        # An unknown workflow is refused (exit 1) with a JSON error object.
        assert proc.returncode == (1 if "wf-nothing" in args else 0), (args, proc.stderr)
        json.loads(proc.stdout)  # raises on anything but one JSON document
