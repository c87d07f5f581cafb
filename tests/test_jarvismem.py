"""The package's front door: its public names, and what importing it costs.

``import jarvismem``, the facade's two classes and ``jarvismem --version`` load
only what they use: the clients of optional backends (numpy for the offline
embedder, httpx for Athena and the LLM, the Azure SDK, OpenTelemetry, the
LangGraph and MCP integrations) are imported when a configuration uses them.
Each check runs in a fresh interpreter, since this test process has long since
imported everything. Speed itself is measured by the ``startup`` benchmark row.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import jarvismem
from tests.conftest import env_without_settings, reap_embedded_servers

ROOT = Path(__file__).resolve().parent.parent

HEAVY_PREFIXES = (
    "numpy",
    "httpx",
    "azure",
    "opentelemetry",
    "langgraph",
    "mcp",
    "starlette",
)
"""Third-party packages that only an optional backend or integration needs."""

OPTIONAL_CLIENTS = (
    "jarvismem.backends.embeddings.minilm",
    "jarvismem.backends.embeddings.openai",
    "jarvismem.backends.athena",
    "jarvismem.backends.llm.client",
    "jarvismem.backends.blob.azure",
    "jarvismem.integrations.mcp",
    "jarvismem.integrations.langgraph",
)
"""jarvismem's own modules of optional backends: the embedders, Athena, the LLM client."""

DUMP_MODULES = "import json, sys; print(json.dumps(sorted(sys.modules)))"


def _heavy(modules: list[str], prefixes: tuple[str, ...] = HEAVY_PREFIXES) -> list[str]:
    """The loaded modules that are, or are under, one of ``prefixes``.

    redis-py (8.x) imports the OpenTelemetry SDK itself when it is installed
    (``redis.observability``), so OpenTelemetry is not counted against jarvismem
    once the Redis client is loaded; jarvismem's own use of it is confined to
    ``jarvismem.telemetry`` (tests/test_architecture.py).
    """
    if "redis.observability" in modules:
        prefixes = tuple(p for p in prefixes if p != "opentelemetry")
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def _loaded_after(code: str, *, cwd: Path = ROOT, env: dict[str, str] | None = None) -> list[str]:
    """``sys.modules`` of a fresh interpreter once it has run ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{DUMP_MODULES}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env_without_settings() if env is None else env,
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


# --- the public names --------------------------------------------------------------------


@pytest.mark.parametrize("name", jarvismem.__all__)
def test_every_public_name_imports_from_the_package(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from jarvismem import {name}", namespace)
    assert namespace[name] is getattr(jarvismem, name)


def test_dir_lists_every_public_name() -> None:
    assert set(jarvismem.__all__) <= set(dir(jarvismem))
    assert "__version__" in dir(jarvismem)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = jarvismem.no_such_name  # type: ignore[attr-defined]


def test_type_checkers_see_every_public_name() -> None:
    """Names resolved on first use are imported under TYPE_CHECKING too, so mypy
    and editors see each one's real type rather than the module ``__getattr__``."""
    tree = ast.parse((ROOT / "jarvismem" / "__init__.py").read_text(encoding="utf-8"))
    seen: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            seen.update(alias.asname or alias.name for alias in node.names)
    assert set(jarvismem.__all__) <= seen


# --- what importing costs -----------------------------------------------------------------


def test_importing_the_package_loads_no_optional_client() -> None:
    modules = _loaded_after("import jarvismem")
    assert _heavy(modules) == []
    assert _heavy(modules, OPTIONAL_CLIENTS) == []


def test_importing_the_facade_loads_no_optional_client() -> None:
    modules = _loaded_after("from jarvismem import MemoryRuntime, UnifiedMemory")
    assert _heavy(modules) == []
    assert _heavy(modules, OPTIONAL_CLIENTS) == []


def test_version_answers_before_any_command_module_is_imported() -> None:
    code = (
        "import contextlib, io\n"
        "from jarvismem.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    assert main(['--version']) == 0\n"
        f"assert out.getvalue().strip() == 'jarvismem {jarvismem.__version__}', out.getvalue()\n"
    )
    modules = _loaded_after(code)
    assert _heavy(modules) == []
    commands = [m for m in modules if m.startswith("jarvismem.cli.") and m != "jarvismem.cli._args"]
    assert commands == []


def test_version_of_the_module_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jarvismem", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env_without_settings(),
    )
    assert (done.returncode, done.stdout.strip()) == (0, f"jarvismem {jarvismem.__version__}")


def test_a_runtime_with_nothing_configured_loads_no_optional_client(tmp_path: Path) -> None:
    """REDIS_URL unset (the embedded server) and local blobs: no embedder, Athena or LLM."""
    from jarvismem.backends.redis_embedded import find_binary

    if find_binary() is None:
        pytest.skip("no redis-server binary for the embedded server")
    env = env_without_settings()
    env.pop("REDIS_URL")
    code = (
        "import asyncio\n"
        "from jarvismem import MemoryRuntime\n"
        "async def run():\n"
        "    runtime = await MemoryRuntime.from_env(require_redis=True)\n"
        "    async with runtime:\n"
        "        await runtime.memory('wf', 'step', 'agent').log_turn(1, 'think', 'act', 'done')\n"
        "asyncio.run(run())\n"
    )
    try:
        modules = _loaded_after(code, cwd=tmp_path, env=env)
    finally:
        reap_embedded_servers(tmp_path)
    assert "redis" in modules  # it did run on the embedded server
    assert _heavy(modules) == []
    assert _heavy(modules, OPTIONAL_CLIENTS) == []
