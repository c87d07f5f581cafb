"""``jarvismem demo``: the crash-recovery demo (see :mod:`jarvismem.demo`)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from jarvismem.cli._context import CliContext
from jarvismem.demo import DEFAULT_KILL_AFTER, DEFAULT_TURNS, DemoFailure, run_demo
from jarvismem.errors import ConfigError, JarvisMemError
from jarvismem.keys import validate_id


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``demo`` to the ``jarvismem`` parser."""
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="kill a simulated agent mid-turn, resume it, verify the ledger",
        description="Runs a simulated agent kernel in a child process, SIGKILLs it mid-turn, "
        "resumes it in a fresh process from rehydrate_bundle() and verifies that every turn "
        "is in the ledger exactly once. Uses your REDIS_URL/blob/Athena/LLM settings when set; "
        "otherwise an embedded, ephemeral Redis-protocol server on loopback and a local folder.",
    )
    p.add_argument(
        "--tmp",
        action="store_true",
        help="keep local blobs and the outbox in a temporary folder, removed after",
    )
    p.add_argument(
        "--turns",
        type=int,
        default=DEFAULT_TURNS,
        help=f"turns N of the task (default {DEFAULT_TURNS})",
    )
    p.add_argument(
        "--kill-after",
        type=int,
        default=DEFAULT_KILL_AFTER,
        help=f"acknowledged turns K before the kill (default {DEFAULT_KILL_AFTER})",
    )
    p.add_argument("--workflow", default=None, help="workflow id (default: demo-<random>)")
    p.set_defaults(handler=demo)


async def demo(ctx: CliContext) -> int:
    """Exit 0 when the ledger verified, 1 otherwise."""
    a = ctx.args
    if a.workflow is not None:
        validate_id(a.workflow, "workflow_id")
    if not 1 <= a.kill_after < a.turns:
        raise ConfigError("--kill-after must be at least 1 and less than --turns")
    settings = ctx.settings()
    env_file = str(ctx.env_file) if ctx.env_file is not None else os.devnull
    say = (lambda _text: None) if ctx.out.json_mode else ctx.out.text
    try:
        summary = await run_demo(
            settings,
            env_file=env_file,
            turns=a.turns,
            kill_after=a.kill_after,
            use_tmp=a.tmp,
            workflow_id=a.workflow,
            say=say,
        )
    except DemoFailure as exc:
        # A misbehaving child is the demo's verdict, not a crash of this command.
        raise JarvisMemError(f"demo failed: {exc}") from None
    if ctx.out.json_mode:
        ctx.out.result(summary, str)
    return 0 if summary["ok"] else 1
