"""The two phases of scripts/test: serial tests leave the parallel run and run alone after.

Each case runs pytest on a small suite of its own, in a subprocess, with the hooks
of tests/conftest.py (through :mod:`tests.phases`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import phases

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import pytest
from tests import phases

@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    phases.configure(config)

def pytest_collection_modifyitems(config, items):
    phases.modify_items(config, items)

def pytest_ignore_collect(collection_path, config):
    return phases.ignore_collect(collection_path, config)
"""

MIXED = """
import os
import pytest

def test_plain():
    # What a subprocess of this test would inherit: not this run's phase.
    assert "JARVISMEM_TEST_PHASE" not in os.environ
    assert "JARVISMEM_SERIAL_LIST" not in os.environ

@pytest.mark.serial
def test_alone():
    pass
"""

# Importing it leaves a trace: the serial phase must not collect a file without serial tests.
UNMARKED = """
import pathlib
pathlib.Path(__file__).with_name("imported").touch()

def test_other():
    pass
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (tmp_path / "test_mixed.py").write_text(MIXED, encoding="utf-8")
    (tmp_path / "test_unmarked.py").write_text(UNMARKED, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    serial: alone\n", encoding="utf-8"
    )
    return tmp_path


def _run(
    suite: Path, phase: str | None, *args: str, xdist: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (phases.PHASE_ENV, phases.LIST_ENV)}
    env.update(PYTHONPATH=str(ROOT), JARVISMEM_SERIAL_LIST=str(suite / "serial.txt"))
    if phase is not None:
        env[phases.PHASE_ENV] = phase
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *(["-n", "2"] if xdist else ["-p", "no:xdist"]),
            "-v",
            *args,
        ],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _passed(proc: subprocess.CompletedProcess[str]) -> set[str]:
    return {line.split(" ")[0] for line in proc.stdout.splitlines() if " PASSED" in line}


def test_the_parallel_phase_leaves_out_the_serial_tests_and_lists_them(suite: Path) -> None:
    proc = _run(suite, "parallel")
    assert proc.returncode == 0, proc.stdout
    assert _passed(proc) == {"test_mixed.py::test_plain", "test_unmarked.py::test_other"}
    assert (suite / "serial.txt").read_text().split() == ["test_mixed.py::test_alone"]


def test_under_xdist_the_workers_leave_out_the_serial_tests_and_list_them(suite: Path) -> None:
    proc = _run(suite, "parallel", xdist=True)
    assert proc.returncode == 0, proc.stdout
    assert " 2 passed in " in proc.stdout
    assert "test_alone" not in proc.stdout
    assert (suite / "serial.txt").read_text().split() == ["test_mixed.py::test_alone"]


def test_the_serial_phase_runs_only_the_listed_files_serial_tests(suite: Path) -> None:
    assert _run(suite, "parallel").returncode == 0
    (suite / "imported").unlink()
    proc = _run(suite, "serial")
    assert proc.returncode == 0, proc.stdout
    assert _passed(proc) == {"test_mixed.py::test_alone"}
    assert not (suite / "imported").exists()


def test_a_selection_without_serial_tests_lists_none(suite: Path) -> None:
    proc = _run(suite, "parallel", "test_unmarked.py")
    assert proc.returncode == 0, proc.stdout
    assert (suite / "serial.txt").read_text() == ""


def test_without_a_phase_every_test_runs(suite: Path) -> None:
    proc = _run(suite, None)
    assert len(_passed(proc)) == 3, proc.stdout


def test_a_junit_report_of_each_phase_is_kept_not_overwritten(suite: Path) -> None:
    assert _run(suite, "parallel", "--junitxml=report.xml").returncode == 0
    proc = _run(suite, "serial", "--junitxml=report.xml")
    assert proc.returncode == 0, proc.stdout
    parallel = (suite / "report.xml").read_text()
    serial = (suite / "report.serial.xml").read_text()
    assert 'name="test_plain"' in parallel and 'name="test_alone"' not in parallel
    assert 'name="test_alone"' in serial and 'name="test_plain"' not in serial


def test_an_unknown_phase_is_a_usage_error(suite: Path) -> None:
    proc = _run(suite, "sideways")
    assert proc.returncode == 4
    assert "JARVISMEM_TEST_PHASE must be" in proc.stderr


def _config(tmp_path: Path, *args: str) -> Any:
    return SimpleNamespace(args=list(args), invocation_params=SimpleNamespace(dir=tmp_path))


def test_auto_workers_run_a_few_files_in_process_and_a_big_selection_on_three_per_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(phases.WORKERS_ENV, raising=False)
    monkeypatch.setattr(phases.os, "sched_getaffinity", lambda _pid: {0, 1})
    for i in range(40):
        (tmp_path / "big" / f"test_{i}.py").parent.mkdir(exist_ok=True)
        (tmp_path / "big" / f"test_{i}.py").touch()
    (tmp_path / "big" / "helper.py").touch()
    assert phases.auto_workers(_config(tmp_path, "big/test_1.py::test_x")) == 0
    assert phases.auto_workers(_config(tmp_path, *(f"big/test_{i}.py" for i in range(9)))) == 2
    assert phases.auto_workers(_config(tmp_path, "big")) == 6


def test_auto_workers_follow_the_variable_and_refuse_a_non_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(phases.WORKERS_ENV, "3")
    assert phases.auto_workers(_config(tmp_path)) == 3
    monkeypatch.setenv(phases.WORKERS_ENV, "many")
    with pytest.raises(pytest.UsageError, match="JARVISMEM_TEST_WORKERS must be a number"):
        phases.auto_workers(_config(tmp_path))


def test_the_suite_s_hooks_load_without_xdist() -> None:
    """The serial phase runs with -p no:xdist: xdist's hooks must be optional there."""
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider"),
            *("--collect-only", "-q", "tests/test_errors.py"),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
