"""examples/langgraph_resume.py runs as a subprocess, so the README's LangGraph story cannot rot.

(The other examples are run by tests/system/test_examples.py; this one needs the
langgraph extra, like every test of this folder.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import env_without_settings

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langgraph_resume.py"


def _run(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = env_without_settings()
    clean.update(env)
    return subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=clean,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _check(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "child said 'finished node 3'; killed it with SIGKILL",
        "checkpoint after the kill: ['node 1', 'node 2', 'node 3'], next: ['node4']",
        "resumed and ran: ['node 4', 'node 5']",
        "recalled: ['prefers oat milk coffee, no sugar']",
        "verified",
    ]


def test_the_graph_resumes_after_sigkill_with_nothing_configured(
    tmp_path: Path, embedded_folder: Path
) -> None:
    # REDIS_URL unset: the embedded server in tmp_path/.jarvismem/redis (killed afterwards
    # by the embedded_folder fixture, which reaps every server under tmp_path).
    _check(_run(tmp_path, REDIS_URL=""))


@pytest.mark.integration
def test_the_graph_resumes_after_sigkill_on_a_real_redis(tmp_path: Path, redis_server: Any) -> None:
    _check(_run(tmp_path, REDIS_URL=redis_server.url))
