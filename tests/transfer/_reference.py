"""The real reference package (``jarviscore-framework`` 3.0.0) in a venv of its own.

Temporary: the ``drop-in`` helper owns the shared ``tests/reference_env.py``; this
minimal copy keeps the migration test independent until the two are unified.

The reference pulls in ~200 MB of LLM SDKs and pins of its own, so it never goes
into jarvismem's environment: :func:`reference_python` creates (once, cached under
``<repo>/.cache/jarviscore-venv``, guarded by a file lock so that parallel test
processes build it once) a venv holding it and ``redis``, and returns its python.
Tests run small driver scripts with it as a subprocess, against the same real
Redis and blob folder, and compare what they print with what jarvismem reads.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_INTEGRATION

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".cache" / "jarviscore-venv"
REQUIREMENTS = ("jarviscore-framework==3.0.0", "redis")
_DONE = VENV / ".installed"


def _python() -> Path:
    return VENV / "bin" / "python"


def _build() -> None:
    """Create the venv and install the reference; raises CalledProcessError."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--clear", str(VENV)], check=True, capture_output=True
    )
    subprocess.run(
        [str(_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         *REQUIREMENTS],
        check=True,
        capture_output=True,
        timeout=900,
    )  # fmt: skip
    _DONE.write_text("\n".join(REQUIREMENTS) + "\n", encoding="utf-8")


def reference_python() -> Path:
    """The python of a venv holding the reference package (created on first use).

    A failed install fails the test in CI (``JARVISMEM_REQUIRE_INTEGRATION=1``)
    and skips it, saying why, elsewhere.
    """
    VENV.parent.mkdir(parents=True, exist_ok=True)
    lock_path = VENV.parent / "jarviscore-venv.lock"
    with open(lock_path, "w") as lock:
        # Another test process may be building it: wait, then reuse its work.
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            wanted = "\n".join(REQUIREMENTS) + "\n"
            if not (_DONE.is_file() and _DONE.read_text(encoding="utf-8") == wanted):
                _build()
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            tail = detail.decode(errors="replace").strip().splitlines()[-3:]
            reason = f"could not install {' '.join(REQUIREMENTS)}: {exc} {' '.join(tail)}"
            if REQUIRE_INTEGRATION:
                pytest.fail(reason)
            pytest.skip(reason)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return _python()


def run_reference(
    script: str, *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> str:
    """Run ``script`` with the reference venv's python in ``cwd`` (it may create
    ``.jarviscore/`` there); its stdout (fails the test on error)."""
    python = reference_python()
    proc = subprocess.run(
        [str(python), "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        # Its own environment: none of jarvismem's settings or PYTHONPATH leak in.
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"),
             **(env or {})},
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"reference driver failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout
