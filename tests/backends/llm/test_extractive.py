"""The extractive summarizer's module loads alone: what the worker process relies on
to stay small (the summarizer's behaviour is tested in test_summarizers.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from jarvismem.backends.llm import extractive, summarizers
from jarvismem.backends.llm.worker import CHILD_BOOT, _package_root

PROBE = CHILD_BOOT.replace(
    "from jarvismem.backends.llm.worker_child import main\nmain()",
    "from jarvismem.backends.llm.extractive import ExtractiveSummarizer\n"
    "import json\n"
    "heavy = sorted(m for m in ('httpx', 'pydantic', 'redis', 'jarvismem.settings')"
    " if m in sys.modules)\n"
    "summary = ExtractiveSummarizer().summarize_now('[turn 1] alone. ok.', max_chars=100)\n"
    "print(json.dumps([heavy, summary]))",
)


def test_the_module_loads_without_the_heavy_dependencies() -> None:
    assert PROBE != CHILD_BOOT  # the probe replaced the child's entry point
    out = subprocess.run(
        [sys.executable, "-c", PROBE, _package_root()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    heavy, summary = json.loads(out)
    assert heavy == []
    assert summary == "[turn 1] alone. ok."


def test_the_summarizers_module_still_exports_it() -> None:
    assert summarizers.ExtractiveSummarizer is extractive.ExtractiveSummarizer
    assert summarizers.SLICE_SECONDS == extractive.SLICE_SECONDS
    assert summarizers.omission_marker is extractive.omission_marker
