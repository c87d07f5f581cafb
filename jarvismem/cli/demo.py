"""``jarvismem demo``: the crash-recovery demo (see :mod:`jarvismem.demo`)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from jarvismem.cli._context import CliContext
from jarvismem.demo import (
    DEFAULT_TURNS,
    MIN_TURNS,
    DemoFailure,
    WorkflowInUse,
    default_kill_after,
    run_demo,
)
from jarvismem.errors import ConfigError, JarvisMemError
from jarvismem.keys import validate_id
from jarvismem.redaction import default_redactor

log = logging.getLogger(__name__)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``demo`` to the ``jarvismem`` parser."""
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="kill a simulated agent mid-turn, resume it, verify the ledger",
        description="Runs a simulated agent kernel in a child process, SIGKILLs it mid-turn, "
        "resumes it in a fresh process from rehydrate_bundle() and verifies that every turn "
        "is in the ledger exactly once. Uses your REDIS_URL/blob/Athena/LLM settings when set; "
        "otherwise the embedded Redis server (persistent, what your own kernel gets with nothing "
        "configured) and a local folder.",
    )
    p.add_argument(
        "--tmp",
        action="store_true",
        help="keep local blobs and the outbox in a temporary folder, removed after",
    )
    p.add_argument(
        "--turns",
        type=int,
        metavar="N",
        default=DEFAULT_TURNS,
        help=f"turns of the task (default {DEFAULT_TURNS}, at least {MIN_TURNS})",
    )
    p.add_argument(
        "--kill-after",
        type=int,
        metavar="K",
        default=None,
        help="acknowledged turns before the kill, 1 <= K < N "
        f"(default two thirds of N: {default_kill_after(DEFAULT_TURNS)} of {DEFAULT_TURNS})",
    )
    p.add_argument(
        "--workflow",
        default=None,
        help="workflow id, which must hold no data yet (default: demo-<random>)",
    )
    p.set_defaults(handler=demo)


def kill_point(turns: int, kill_after: int | None) -> int:
    """The kill point K for ``--turns``/``--kill-after``; :class:`ConfigError` naming
    the flag at fault when the combination cannot run."""
    if turns < MIN_TURNS:
        raise ConfigError(
            f"--turns {turns}: the demo needs at least {MIN_TURNS} turns "
            "(one acknowledged before the kill, one after)"
        )
    if kill_after is None:
        return default_kill_after(turns)
    if not 1 <= kill_after < turns:
        raise ConfigError(
            f"--kill-after {kill_after}: must be at least 1 and less than --turns ({turns})"
        )
    return kill_after


async def demo(ctx: CliContext) -> int:
    """Exit 0 when the ledger verified, 1 otherwise (2 for bad flags or a used workflow)."""
    a = ctx.args
    if a.workflow is not None:
        validate_id(a.workflow, "workflow_id")
    kill_after = kill_point(a.turns, a.kill_after)
    settings = ctx.settings()
    env_file = str(ctx.env_file) if ctx.env_file is not None else os.devnull
    say = (lambda _text: None) if ctx.out.json_mode else ctx.out.text
    try:
        summary = await run_demo(
            settings,
            env_file=env_file,
            turns=a.turns,
            kill_after=kill_after,
            use_tmp=a.tmp,
            workflow_id=a.workflow,
            say=say,
        )
    except WorkflowInUse as exc:
        raise ConfigError(str(exc)) from None
    except DemoFailure as exc:
        # A misbehaving child is the demo's verdict, not a crash of this command:
        # one line here, the child's own stderr (its traceback) under -v.
        if exc.stderr_tail:
            log.info("child stderr:\n%s", default_redactor("\n".join(exc.stderr_tail)))
        hint = "" if log.isEnabledFor(logging.INFO) else " (-v shows the child's stderr)"
        raise JarvisMemError(f"demo failed: {exc}{hint if exc.stderr_tail else ''}") from None
    if ctx.out.json_mode:
        ctx.out.result(summary, str)
    return 0 if summary["ok"] else 1
