"""The ``jarvismem`` CLI as a whole (``jarvismem.cli.main``): global options, exit
codes, and how failures are reported. Each command group has its own test file
beside this one; fixtures are in tests/cli/conftest.py.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.cli import bench as bench_cmds
from jarvismem.cli import main as cli_main
from jarvismem.errors import (
    BackendUnavailableError,
    ConfigError,
    InvalidIdError,
    LockNotAcquiredError,
)
from tests.cli.conftest import Cli

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
