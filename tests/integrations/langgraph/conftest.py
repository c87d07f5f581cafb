"""The LangGraph tests need the ``langgraph`` extra; CI must have it, so there it is required.

Locally, without the extra, this folder is not collected (``pip install -e '.[langgraph]'``).
"""

from __future__ import annotations

import importlib.util

from tests.conftest import REQUIRE_INTEGRATION

HAVE_LANGGRAPH = all(
    importlib.util.find_spec(name) is not None
    for name in ("langgraph", "langgraph.checkpoint.conformance")
)

if not HAVE_LANGGRAPH:
    if REQUIRE_INTEGRATION:
        raise ImportError(
            "the langgraph extra is required (JARVISMEM_REQUIRE_INTEGRATION=1): "
            "pip install -e '.[langgraph]'"
        )
    collect_ignore_glob = ["test_*.py"]
