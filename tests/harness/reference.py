"""The reference package (``jarviscore-framework`` 3.0.0 from PyPI) in a venv of its own.

The compatibility and migration tests, and ``python -m benchmarks
--with-reference``, drive the reference in a subprocess: it pulls in LLM SDKs and
pins of its own, so it never goes into jarvismem's environment.

:func:`build_reference_venv` creates the venv once and returns its interpreter.
A file lock makes parallel processes (test workers, a benchmark beside a test
run) wait for one install instead of racing; a marker file written last means a
half-finished venv (an interrupted install) is rebuilt rather than trusted.
:func:`driver_env` is the environment a driver runs in: none of jarvismem's or
JarvisCore's settings, nor this interpreter's import path, leak into it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = [
    "REFERENCE_REQUIREMENTS",
    "ReferenceUnavailableError",
    "build_reference_venv",
    "driver_env",
]

REFERENCE_REQUIREMENTS = ("jarviscore-framework==3.0.0", "redis")
"""What the reference venv holds: the reference release and the Redis client it imports."""
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
    return recorded == _marker_text(requirements) and _venv_python(venv).is_file()


def _marker_text(requirements: tuple[str, ...]) -> str:
    return "\n".join(requirements) + "\n"


def _run(cmd: list[str], timeout: float) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ReferenceUnavailableError(f"{' '.join(cmd[:4])}… took over {timeout:g}s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise ReferenceUnavailableError(f"{' '.join(cmd[:4])}… exited {done.returncode}: {tail}")


def build_reference_venv(
    venv: Path, *, requirements: tuple[str, ...] = REFERENCE_REQUIREMENTS
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
            (venv / ".installed").write_text(_marker_text(requirements), encoding="utf-8")
            return python
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def driver_env(**extra: str) -> dict[str, str]:
    """A clean environment for a reference driver: only what a process needs to run."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env
