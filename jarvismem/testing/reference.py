"""The reference package (``jarviscore-framework`` 3.0.0 from PyPI) in a venv of its own.

Copied from ``tests/reference_env.py`` of the drop-in work (same API) so that the
benchmark (``benchmarks/reference.py``) can build the venv too; the lead unifies the
two. The benchmark calls :func:`build_reference_venv` (it raises rather than skips).

Tests that compare jarvismem with the real reference, or feed jarvismem data the
reference wrote, drive it in a subprocess: the package pulls in LLM SDKs and pins
of its own, so it never goes into jarvismem's environment.

:func:`reference_python` creates the venv once, under ``<repo>/.cache/jarviscore-venv``
(git-ignored), and returns its interpreter. A file lock makes parallel test
processes (pytest-xdist, two checkouts' CI jobs) wait for one install instead of
racing; a marker file written last means a half-finished venv (an interrupted
install) is rebuilt rather than trusted. When the install fails the calling test
is skipped with pip's reason, or failed under ``JARVISMEM_REQUIRE_INTEGRATION=1``
(CI), like every other integration backend (``tests.conftest.require_backend``).

:func:`run_reference` runs a driver script with that interpreter and returns the
JSON it prints on its last stdout line.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

# The checkout holding this package (``<repo>/jarvismem/testing/reference.py``).
ROOT = Path(__file__).resolve().parents[2]
REQUIRE_INTEGRATION = os.environ.get("JARVISMEM_REQUIRE_INTEGRATION") == "1"
REFERENCE_REQUIREMENTS = ("jarviscore-framework==3.0.0", "redis")
"""What the reference venv holds: the reference release and the Redis client it imports."""
VENV_DIR = ROOT / ".cache" / "jarviscore-venv"
INSTALL_TIMEOUT = 900.0
"""Seconds one install may take (about a minute on a warm pip cache, more on a cold one)."""


class ReferenceUnavailableError(RuntimeError):
    """The reference venv could not be made (the reason is pip's or venv's last words)."""


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _installed(venv: Path, requirements: tuple[str, ...]) -> bool:
    """Whether a finished install of exactly ``requirements`` is in ``venv``."""
    try:
        recorded = (venv / ".installed").read_text(encoding="utf-8")
    except OSError:
        return False
    return recorded == "\n".join(requirements) and _venv_python(venv).is_file()


def _run(cmd: list[str], timeout: float) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ReferenceUnavailableError(f"{' '.join(cmd[:4])}… took over {timeout:g}s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise ReferenceUnavailableError(f"{' '.join(cmd[:4])}… exited {done.returncode}: {tail}")


def build_reference_venv(
    venv: Path = VENV_DIR, *, requirements: tuple[str, ...] = REFERENCE_REQUIREMENTS
) -> Path:
    """Create ``venv`` with ``requirements`` unless a finished one is there; its python.

    Raises :class:`ReferenceUnavailableError` with the reason when it cannot.
    Safe to call from many processes at once (one installs, the others wait).
    """
    if _installed(venv, requirements):
        return _venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "a+", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _installed(venv, requirements):  # another process finished it meanwhile
                return _venv_python(venv)
            # Whatever is there is unfinished or of other requirements: start clean.
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)], 120.0)
            python = _venv_python(venv)
            _run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                    "-q",
                    *requirements,
                ],
                INSTALL_TIMEOUT,
            )
            _run([str(python), "-c", "import jarviscore.memory, redis"], 120.0)
            # Written last: its presence means the install completed.
            (venv / ".installed").write_text("\n".join(requirements), encoding="utf-8")
            return python
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@cache
def _reference_python_or_reason() -> Path | str:
    try:
        return build_reference_venv()
    except (ReferenceUnavailableError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"


def reference_python() -> Path:
    """The interpreter of the reference venv (made on first use, cached on disk).

    Skips the calling test when the venv cannot be made, or fails it under
    ``JARVISMEM_REQUIRE_INTEGRATION=1``, naming the reason.
    """
    found = _reference_python_or_reason()
    if isinstance(found, Path):
        return found
    what = f"the reference package ({REFERENCE_REQUIREMENTS[0]}) could not be installed: {found}"
    if REQUIRE_INTEGRATION:
        pytest.fail(f"{what} (JARVISMEM_REQUIRE_INTEGRATION=1)")
    pytest.skip(what)


def run_reference(script: str, argument: Any, *, cwd: Path, timeout: float = 120.0) -> Any:
    """Run ``script`` (Python source) with the reference interpreter; its JSON answer.

    ``argument`` is passed as JSON in ``argv[1]``. The script runs in ``cwd`` (the
    reference writes runtime files relative to it) with an environment free of
    jarvismem and JarvisCore settings, and must print one JSON document on its
    last stdout line. A failing script fails the test with its stderr.
    """
    python = reference_python()
    env = {
        key: value
        for key, value in os.environ.items()
        if key in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run(
        [str(python), "-c", script, json.dumps(argument)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"reference driver exited {done.returncode}:\n{done.stderr[-4000:]}")
    lines = done.stdout.strip().splitlines()
    if not lines:
        pytest.fail(f"reference driver printed nothing:\n{done.stderr[-4000:]}")
    return json.loads(lines[-1])
