"""``python -m jarvismem.demo``: the entry point the demo starts its children with."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import env_without_settings


def test_it_runs_the_child_parser() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "jarvismem.demo", "child", "--turns", "2"],
        env=env_without_settings(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The child's own argument checks answer: --workflow is required.
    assert proc.returncode == 2
    assert "the following arguments are required: --workflow" in proc.stderr
    assert proc.stderr.startswith("usage: python -m jarvismem.demo child")
