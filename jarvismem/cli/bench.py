"""``jarvismem bench``: run the benchmark suite in ``benchmarks/`` (from a checkout only).

The suite's options are mirrored here so a typo is reported by name. The suite reads its
Redis from ``REDIS_URL``, so that is how the settings reach it: ``--redis-url``, else
``REDIS_URL`` from the environment or ``.env``, else the embedded server (what a user
with nothing configured runs); ``memory://`` is refused, since the in-process stand-in
would live in this process, not the suite's.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
from typing import Any

from jarvismem.backends.redis_embedded import ensure_started
from jarvismem.cli._context import CliContext
from jarvismem.errors import ConfigError
from jarvismem.settings import MEMORY_URL

SUITE_OPTIONS = (
    "--quick",
    "--json",
    "--only",
    "--redis-url",
    "--with-reference",
    "--plots",
    "--topology",
)
"""The options of ``python -m benchmarks``; a test checks they match the suite's parser."""


NOT_A_CHECKOUT = (
    "jarvismem bench runs the benchmarks of a source checkout, which an installed jarvismem "
    "does not carry: git clone the jarvismem repository, then from its root: "
    "pip install -e '.[bench]' && jarvismem bench (or python -m benchmarks)"
)
"""Why ``bench`` refuses where no ``benchmarks/`` package is importable, and what to do."""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``bench`` to the ``jarvismem`` parser (with the suite's options).

    The suite lives in a checkout's ``benchmarks/``, not in the installed
    package: where it cannot be imported, the command is left out of the
    command list (no ``help``), and running it says how to get the suite.
    """
    listed = (
        {"help": "run the benchmark suite (python -m benchmarks), from a checkout"}
        if benchmarks_available()
        else {}
    )
    p = sub.add_parser(
        "bench",
        parents=[common],
        description="Runs `python -m benchmarks` from the current directory (a jarvismem "
        "checkout) against the Redis server of --redis-url or REDIS_URL (.env included); "
        "--json prints the suite's report as JSON.",
        **listed,
    )
    p.add_argument("--quick", action="store_true", help="small sizes (the CI smoke run)")
    p.add_argument(
        "--only",
        metavar="S1,S2,...",
        default=None,
        help="comma-separated scenarios to run (default all)",
    )
    p.add_argument(
        "--with-reference",
        action="store_true",
        help="also run the workloads through the reference (jarviscore-framework, in its own venv)",
    )
    p.add_argument("--plots", metavar="DIR", default=None, help="write PNG plots into DIR")
    p.add_argument(
        "--topology",
        metavar="NAMES",
        default=None,
        help="instead of the suite: S1/S2/S3 on Redis topologies started for the run "
        "(comma-separated among single, sentinel, cluster)",
    )
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


def suite_argv(args: argparse.Namespace) -> list[str]:
    """The arguments for ``python -m benchmarks``, from the parsed ``bench`` options.

    Never the Redis URL: it may hold a password, and a command line is visible
    to every user of the machine (``ps``); it goes in the child's environment.
    """
    argv: list[str] = []
    if args.quick:
        argv.append("--quick")
    if getattr(args, "json", False):
        argv.append("--json")
    if args.only:
        argv += ["--only", args.only]
    if getattr(args, "with_reference", False):
        argv.append("--with-reference")
    if getattr(args, "plots", None):
        argv += ["--plots", args.plots]
    if getattr(args, "topology", None):
        argv += ["--topology", args.topology]
    return argv


async def bench(ctx: CliContext) -> int:
    """Run the suite as a child process and return its exit code."""
    if not benchmarks_available():
        raise ConfigError(NOT_A_CHECKOUT)
    settings = ctx.settings()
    if settings.redis_url == MEMORY_URL:
        raise ConfigError(
            f"jarvismem bench needs a Redis server: REDIS_URL={MEMORY_URL} is an in-process "
            "stand-in the benchmark process cannot share (unset REDIS_URL for the embedded "
            "server, or set it to a server)"
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    if settings.redis_url:
        url = settings.redis_url
    else:
        server = await ensure_started(settings)
        url = server.url
        print(
            f"[bench] REDIS_URL unset: the embedded server at {server.socket_path}", file=sys.stderr
        )
    env["REDIS_URL"] = url  # the suite's --redis-url defaults to it
    argv = suite_argv(ctx.args)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "benchmarks", *argv, env=env)
    return await proc.wait()
