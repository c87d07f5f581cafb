"""The reference package for tests: its venv (``tests.harness.reference``) under
``<repo>/.cache/jarviscore-venv`` (git-ignored), skipped or failed like every other
integration backend when it cannot be installed.

:func:`run_reference` runs a driver script and returns the JSON it prints on its
last stdout line; :func:`run_reference_text` returns its whole stdout.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REQUIRE_INTEGRATION
from tests.harness.reference import (
    REFERENCE_REQUIREMENTS,
    ReferenceUnavailableError,
    build_reference_venv,
    driver_env,
)

ROOT = Path(__file__).resolve().parent.parent
VENV_DIR = ROOT / ".cache" / "jarviscore-venv"


@cache
def _reference_python_or_reason() -> Path | str:
    try:
        return build_reference_venv(VENV_DIR)
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


def run_reference_text(
    script: str,
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> str:
    """Run ``script`` (Python source) with the reference interpreter in ``cwd`` (the
    reference writes runtime files relative to it); its stdout. A failing script
    fails the test with its stderr."""
    done = subprocess.run(
        [str(reference_python()), "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=driver_env(**(env or {})),
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"reference driver exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done.stdout


def run_reference(script: str, argument: Any, *, cwd: Path, timeout: float = 120.0) -> Any:
    """Run ``script`` with ``argument`` as JSON in ``argv[1]``; the JSON document it
    prints on its last stdout line."""
    out = run_reference_text(script, json.dumps(argument), cwd=cwd, timeout=timeout)
    lines = out.strip().splitlines()
    if not lines:
        pytest.fail("reference driver printed nothing")
    return json.loads(lines[-1])
