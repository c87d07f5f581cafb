"""jarvismem.integrations itself needs no extra: each framework's adapter is a subpackage."""

from __future__ import annotations

import subprocess
import sys


def test_the_package_imports_without_any_framework() -> None:
    # In a fresh interpreter: importing the package must not pull in
    # LangGraph (or any other framework) until its subpackage is imported.
    code = (
        "import sys, jarvismem.integrations\n"
        "frameworks = ('langgraph', 'langchain_core')\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in frameworks]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
