"""STARTUP: what a process pays before it can use jarvismem.

Wall time of whole fresh interpreters, each the median of N runs:

* ``python -c pass``: the interpreter alone, the baseline of the same run;
* ``python -c "import jarvismem"``;
* ``python -m jarvismem --version`` (what the ``jarvismem`` command runs);
* ``python -c "from jarvismem import MemoryRuntime, UnifiedMemory"`` (the facade).

They take turns run after run, so load drifting on a shared machine
touches each alike. Then, once each, the number of modules loaded
(``len(sys.modules)``, counting the ``json`` module that reports it) after
``pass``, ``import jarvismem`` and the facade's import, and whether numpy and
httpx (the offline embedder's and the HTTP clients' libraries, loaded only when
configured) are among them. Targets: 0.25 s for the import, 0.15 s for
``--version``. No Redis is needed: ``python -m benchmarks.startup`` runs it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.stats import Target

if TYPE_CHECKING:
    from benchmarks.suite import Bench

IMPORT_LIMIT_S = 0.25
VERSION_LIMIT_S = 0.15
RUNS = 21
QUICK_RUNS = 5

COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "import jarvismem": ["-c", "import jarvismem"],
    "jarvismem --version": ["-m", "jarvismem", "--version"],
    "facade import": ["-c", "from jarvismem import MemoryRuntime, UnifiedMemory"],
}
IMPORTS = {
    "python -c pass": "pass",
    "import jarvismem": "import jarvismem",
    "facade": "from jarvismem import MemoryRuntime, UnifiedMemory",
}
WATCHED = ("numpy", "httpx")

_COUNT = (
    "import json, sys\n{statement}\n"
    "print(json.dumps({{'modules': len(sys.modules), "
    "'loaded': [n for n in {watched!r} if n in sys.modules]}}))"
)


def _env() -> dict[str, str]:
    """This environment, with the jarvismem being measured first on the path."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _wall(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def _modules(statement: str, env: dict[str, str]) -> dict[str, Any]:
    code = _COUNT.format(statement=statement, watched=WATCHED)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def measure_startup(runs: int) -> dict[str, Any]:
    """Median wall seconds of each command over ``runs`` turns, and the module counts.

    Blocking (it runs subprocesses): call it in a thread from async code.
    """
    env = _env()
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for args in COMMANDS.values():  # one unmeasured run each: disk cache, .pyc files
        _wall(args, env)
    for _ in range(runs):
        for name, args in COMMANDS.items():
            walls[name].append(_wall(args, env))
    return {
        "runs": runs,
        "median_s": {name: statistics.median(times) for name, times in walls.items()},
        "imports": {name: _modules(stmt, env) for name, stmt in IMPORTS.items()},
    }


def figures(result: dict[str, Any]) -> dict[str, float]:
    """The report's figures for one :func:`measure_startup` result."""
    out: dict[str, float] = {}
    runs = result["runs"]
    for name, median in result["median_s"].items():
        out[f"STARTUP {name}, median of {runs}, s"] = median
    for name, counted in result["imports"].items():
        out[f"STARTUP modules loaded after {IMPORTS[name]}"] = float(counted["modules"])
        if name == "python -c pass":
            continue  # the baseline's count only
        for lib in WATCHED:
            out[f"STARTUP {lib} loaded by {IMPORTS[name]} (1 yes, 0 no)"] = float(
                lib in counted["loaded"]
            )
    return out


def targets(result: dict[str, Any]) -> list[Target]:
    """The two start-up targets."""
    median = result["median_s"]
    return [
        Target(
            f"STARTUP import jarvismem <= {IMPORT_LIMIT_S:g} s",
            median["import jarvismem"],
            IMPORT_LIMIT_S,
            "<=",
        ),
        Target(
            f"STARTUP jarvismem --version <= {VERSION_LIMIT_S:g} s",
            median["jarvismem --version"],
            VERSION_LIMIT_S,
            "<=",
        ),
    ]


async def startup_scenario(bench: Bench) -> None:
    """Run STARTUP and record its figures and targets in ``bench.report``."""
    runs = QUICK_RUNS if bench.cfg.quick else RUNS
    result = await asyncio.to_thread(measure_startup, runs)
    bench.report.figures.update(figures(result))
    bench.report.targets.extend(targets(result))


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.startup [--runs N] [--json]``: the row alone, no Redis."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=RUNS, help="runs per command (median)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    result = measure_startup(max(1, args.runs))
    rows = figures(result)
    if args.json:
        print(json.dumps({"figures": rows, "targets": [t.as_dict() for t in targets(result)]}))
        return 0
    for name, value in rows.items():
        print(f"{name}: {value:.3f}" if value % 1 else f"{name}: {value:.0f}")
    for target in targets(result):
        verdict = "met" if target.passed else "MISSED"
        print(f"{target.name}: {target.value:.3f} s ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
