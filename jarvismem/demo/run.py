"""The whole demo, stage after stage: :func:`run_demo`."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from jarvismem.demo.steps import (
    DemoSetup,
    KilledRun,
    ResumedRun,
    Say,
    prepare,
    resume,
    run_until_killed,
    verify,
)
from jarvismem.demo.verify import LedgerCheck
from jarvismem.settings import Settings

__all__ = ["DEFAULT_TURNS", "MIN_TURNS", "default_kill_after", "run_demo", "summarize"]

DEFAULT_TURNS = 12
"""Turns N of the demo's task."""

MIN_TURNS = 2
"""The fewest turns a demo can have: one acknowledged before the kill, one after."""


def default_kill_after(turns: int) -> int:
    """Acknowledged turns K before the first child is killed, for a run of ``turns``:
    two thirds of the way through (8 of the default 12), at least 1, at most turns - 1."""
    return min(max(1, turns * 2 // 3), max(1, turns - 1))


async def run_demo(
    settings: Settings,
    *,
    env_file: str | None,
    turns: int = DEFAULT_TURNS,
    kill_after: int | None = None,
    use_tmp: bool = False,
    workflow_id: str | None = None,
    say: Say = print,
    child_wait: float = 40.0,
) -> dict[str, Any]:
    """Run the whole demo; returns the summary (``ok`` says whether verification passed).

    ``settings``: the parent's settings (their REDIS_URL/blob/Athena/LLM are
    used when present); ``env_file``: the file the children read too;
    ``turns``: N; ``kill_after``: K acknowledged turns before the kill
    (1 <= K < N; default :func:`default_kill_after`); ``use_tmp``: local
    blobs and outbox in a temporary folder;
    ``say``: where stage descriptions go; ``child_wait``: most seconds to wait
    for a child's next line. A child that misbehaves raises
    :class:`~jarvismem.demo.process.DemoFailure`.
    """
    if kill_after is None:
        kill_after = default_kill_after(turns)
    if not 1 <= kill_after < turns:
        raise ValueError("kill_after must be between 1 and turns - 1")
    started = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        setup = await prepare(
            settings,
            stack,
            env_file=env_file,
            turns=turns,
            kill_after=kill_after,
            use_tmp=use_tmp,
            workflow_id=workflow_id,
            say=say,
        )
        killed = await run_until_killed(setup, say, child_wait)
        resumed = await resume(setup, say, child_wait)
        check = await verify(setup, say)
        return summarize(setup, killed, resumed, check, elapsed_s=time.monotonic() - started)


def summarize(
    setup: DemoSetup,
    killed: KilledRun,
    resumed: ResumedRun,
    check: LedgerCheck,
    *,
    elapsed_s: float,
) -> dict[str, Any]:
    """The demo's JSON summary (what ``jarvismem demo --json`` prints)."""
    return {
        "ok": check.ok,
        "workflow_id": setup.workflow_id,
        "namespace": setup.settings.jarvismem_namespace,
        "turns": setup.turns,
        "redis": {
            "url": setup.redis_where,
            "embedded_server": setup.embedded,
        },
        "blob": setup.blob,
        "killed_child": {
            "pid": killed.pid,
            "signal": "SIGKILL",
            "exit_status": killed.exit_status,
            "acknowledged": killed.acknowledged,
            "inflight_turn": killed.inflight_turn,
        },
        "resumed": {
            "next_turn": resumed.next_turn,
            "reruns": resumed.reruns,
            "acknowledged": resumed.acknowledged,
        },
        "bundle": resumed.bundle,
        "compaction": resumed.compaction,
        "ledger": check.ledger,
        "summary": check.summary,
        "elapsed_s": round(elapsed_s, 2),
    }
