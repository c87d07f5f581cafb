"""The package's shape: layers import downward only, no cycles, no backend
library above ``backends/``, internal imports at module top, a pinned public surface.

The layer table below is the rule ARCHITECTURE.md draws; a new module must be
placed in it (an unplaced module fails the test), so the picture stays true.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jarvismem"

# Lowest first. A module may import from its own layer or below, never above.
# Entries are module names or prefixes ending in ".".
LAYERS: list[tuple[str, ...]] = [
    ("jarvismem.errors", "jarvismem.defaults", "jarvismem.resilience", "jarvismem.telemetry"),
    ("jarvismem.keys", "jarvismem.redaction", "jarvismem.payload"),
    ("jarvismem.settings",),
    ("jarvismem.backends", "jarvismem.backends."),
    ("jarvismem.records",),
    ("jarvismem.tiers", "jarvismem.tiers.", "jarvismem.spaces", "jarvismem.spaces.",
     "jarvismem.recall", "jarvismem.recall."),
    ("jarvismem.engine", "jarvismem.engine."),
    ("jarvismem.bundle", "jarvismem.health", "jarvismem.render"),
    ("jarvismem.memory",),
    ("jarvismem.runtime", "jarvismem.workflows"),
    ("jarvismem", "jarvismem.transfer", "jarvismem.transfer.", "jarvismem.demo",
     "jarvismem.demo.", "jarvismem.testing", "jarvismem.testing.",
     "jarvismem.integrations", "jarvismem.integrations."),
    ("jarvismem.cli", "jarvismem.cli.", "jarvismem.ui", "jarvismem.ui.", "jarvismem.__main__"),
]  # fmt: skip

# Backend client libraries: only backends/ speaks to them (and translates their
# errors into jarvismem.errors); everything above sees jarvismem's types only.
BACKEND_LIBRARIES = ("redis", "httpx", "azure", "aiohttp", "fakeredis", "hiredis")
MAY_IMPORT_BACKEND_LIBRARIES = ("jarvismem.backends",)

# Optional extras may be imported where they are used (absent without the extra),
# and so may the one module that needs them: importing it must fail with an
# install hint only when Azure is configured.
# The in-process Redis stand-in (fakeredis, ~65 modules; the `memory` extra) is
# needed only for REDIS_URL=memory://, so it is loaded on first use too.
# The MCP server module needs the mcp extra: `jarvismem mcp` imports it when run, so
# the rest of the CLI works without the extra (and the command says how to install it).
OPTIONAL_EXTRAS = (
    "azure",
    "aiohttp",
    "jarvismem.backends.blob.azure",
    "fakeredis",
    "mcp",
    "jarvismem.integrations.mcp",
    "opentelemetry",
    "uvicorn",
    "starlette",
    "jinja2",
    "jarvismem.integrations.asgi",
    "jarvismem.ui.app",
)

# Start-up cost (docs/performance.md, "Start-up"): the client of an optional backend,
# and what only it needs, is imported where a configuration chooses it, so that
# `import jarvismem` and a runtime that configures no embedder, Athena or LLM do
# not load numpy and httpx.
LOADED_ON_FIRST_USE = (
    "numpy",
    "httpx",
    "jarvismem.backends.athena",
    "jarvismem.backends.embeddings.minilm",
    "jarvismem.backends.embeddings.openai",
    "jarvismem.backends.llm.client",
    "jarvismem.recall.hybrid",
    "jarvismem.recall.vectors",
)
# Entry points that defer every import: the package resolves its public names on
# first use (PEP 562, with TYPE_CHECKING imports for type checkers), and the CLI
# answers --version before it imports its commands and the runtime.
DEFERRING_MODULES = ("jarvismem", "jarvismem.cli")

# The [otel] extra: only jarvismem.telemetry imports it (a no-op without it), so
# every other module stays importable and cheap when it is absent.
TELEMETRY_LIBRARIES = ("opentelemetry",)
MAY_IMPORT_TELEMETRY_LIBRARIES = ("jarvismem.telemetry",)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {
    _module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts
}


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    is_pkg = MODULES[module].name == "__init__.py"
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> list[tuple[str, ast.stmt, bool]]:
    """(imported module, node, at module top) for every import in ``module``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    top = set(map(id, tree.body))
    found: list[tuple[str, ast.stmt, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node, id(node) in top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                # ``from pkg import submodule`` depends on the submodule itself.
                found.append((sub if sub in MODULES else target, node, id(node) in top))
    return found


def _internal_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _, _ in _imports(module):
            if target in MODULES and target != module:
                graph[module].add(target)
    return graph


def _layer(module: str) -> int:
    for index, entries in enumerate(LAYERS):
        for entry in entries:
            if module == entry or (entry.endswith(".") and module.startswith(entry)):
                return index
    raise AssertionError(f"{module} is in no layer: place it in LAYERS (and ARCHITECTURE.md)")


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in _internal_graph().items()
        for target in sorted(targets)
        if _layer(target) > _layer(module)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycle() -> None:
    graph = _internal_graph()
    # Tarjan's strongly connected components; any component of 2+ is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_backend_libraries_stay_in_backends() -> None:
    leaks = [
        f"{module} imports {target}"
        for module in MODULES
        if not module.startswith(MAY_IMPORT_BACKEND_LIBRARIES)
        for target, _, _ in _imports(module)
        if target.split(".")[0] in BACKEND_LIBRARIES
    ]
    assert not leaks, "\n".join(leaks)


def test_opentelemetry_is_imported_by_the_telemetry_module_only() -> None:
    leaks = [
        f"{module} imports {target}"
        for module in MODULES
        if module not in MAY_IMPORT_TELEMETRY_LIBRARIES
        for target, _, _ in _imports(module)
        if target.split(".")[0] in TELEMETRY_LIBRARIES
    ]
    assert not leaks, "\n".join(leaks)


def test_internal_imports_are_at_module_top() -> None:
    """No import inside a function or behind ``TYPE_CHECKING`` (they hid cycles),
    but those of optional extras and of modules loaded on first use.

    The layer and cycle checks above see those imports too, wherever they are.
    """
    deferred = OPTIONAL_EXTRAS + LOADED_ON_FIRST_USE
    hidden = [
        f"{module}:{node.lineno} imports {target}"
        for module in MODULES
        if module not in DEFERRING_MODULES
        for target, node, at_top in _imports(module)
        if not at_top and target.split(".")[0] not in deferred and target not in deferred
    ]
    assert not hidden, "\n".join(hidden)


IMPORT_CHUNKS = 8
"""test_every_module_imports_alone runs in this many parts: each part is a fresh
interpreter importing its modules one by one, and the parts can run side by side
(a single interpreter for all of them took minutes on a loaded 2-core machine)."""


def _alone_importable() -> list[str]:
    optional = {"jarvismem.backends.blob.azure"}  # needs the azure extra
    if importlib.util.find_spec("mcp") is None:  # the mcp extra, when not installed
        optional.add("jarvismem.integrations.mcp")
    return [m for m in MODULES if m not in optional and not m.endswith("__main__")]


@pytest.mark.parametrize("part", range(IMPORT_CHUNKS))
def test_every_module_imports_alone(part: int) -> None:
    """Each module imports in a fresh interpreter, in any order (no hidden order)."""
    names = _alone_importable()[part::IMPORT_CHUNKS]
    script = (
        "import importlib, sys\n"
        "bad = []\n"
        "for name in sys.argv[1:]:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'jarvismem']:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        bad.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *names], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


PUBLIC_API = [
    "AthenaClient",
    "AthenaMemory",
    "BlobStorage",
    "Bundle",
    "EpisodicLedger",
    "JarvisMemError",
    "KeySpace",
    "Lifecycle",
    "LocalBlobStorage",
    "LongTermMemory",
    "MemoryPolicy",
    "MemoryRuntime",
    "RecallSetup",
    "Settings",
    "UnifiedMemory",
    "WorkingScratchpad",
    "create_blob_storage",
    "get_athena_client",
    "load_settings",
    "validate_id",
]


def test_public_surface_is_pinned() -> None:
    jarvismem = importlib.import_module("jarvismem")
    # A change here is a change of the public API: make it on purpose.
    assert sorted(jarvismem.__all__) == sorted(PUBLIC_API)
    for name in jarvismem.__all__:
        assert getattr(jarvismem, name) is not None
    assert isinstance(jarvismem.__version__, str)
