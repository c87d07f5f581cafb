"""``jarvismem bench``: run the benchmark suite in ``benchmarks/`` (from a checkout)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
from typing import Any

from jarvismem.cli._context import CliContext
from jarvismem.errors import ConfigError


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``bench`` to the ``jarvismem`` parser; extra arguments go to the suite."""
    p = sub.add_parser(
        "bench",
        parents=[common],
        help="run the benchmarks (python -m benchmarks ...)",
        description="Runs `python -m benchmarks ARGS` from the current directory "
        "(a jarvismem checkout). Arguments after `bench` are passed through.",
    )
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for the suite")
    p.set_defaults(handler=bench)


def benchmarks_available(cwd: str | None = None) -> bool:
    """Whether ``benchmarks`` can be run as a module from ``cwd`` (default: here)."""
    here = cwd or os.getcwd()
    if os.path.isfile(os.path.join(here, "benchmarks", "__main__.py")):
        return True
    return importlib.util.find_spec("benchmarks.__main__") is not None if _importable() else False


def _importable() -> bool:
    try:
        return importlib.util.find_spec("benchmarks") is not None
    except (ImportError, ValueError):
        return False


async def bench(ctx: CliContext) -> int:
    """Run the suite as a child process and return its exit code."""
    if not benchmarks_available():
        raise ConfigError(
            "the benchmark suite is not importable here: run `jarvismem bench` from the root "
            "of a jarvismem checkout (the folder that holds benchmarks/)"
        )
    argv = list(ctx.args.bench_args or [])
    if argv[:1] == ["--"]:
        argv = argv[1:]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "benchmarks", *argv, env=env)
    return await proc.wait()
