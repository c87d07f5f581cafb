"""Inspection commands: ``status``, ``tail``, ``bundle``, ``compact``, ``spaces``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from jarvismem.cli._args import count, seconds
from jarvismem.cli._context import CliContext
from jarvismem.cli._output import ProgressBar, error_line
from jarvismem.defaults import LEDGER_TAIL
from jarvismem.errors import ConfigError
from jarvismem.keys import validate_id
from jarvismem.records import as_text, decode_entry
from jarvismem.render import render_bundle, render_entry, render_health, render_spaces
from jarvismem.runtime import MemoryRuntime
from jarvismem.ui import data
from jarvismem.workflows import require_workflow


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add this group's commands to the ``jarvismem`` parser."""
    p = sub.add_parser(
        "status",
        parents=[common],
        help="every backend: configured, reachable, latency; degraded reasons; outboxes",
    )
    p.add_argument(
        "--write-check",
        action="store_true",
        help="also prove write access and credentials on every backend, step by step with "
        "timings (a Redis probe key and a blob each written, read back and deleted; an "
        "authenticated Athena call)",
    )
    p.set_defaults(handler=status)

    p = sub.add_parser(
        "tail",
        parents=[common],
        help="a workflow's ledger (optionally follow it)",
        description="Prints a workflow's last ledger entries. With --json: one JSON array "
        "([] when the ledger is empty); with --follow --json: one JSON object per line.",
    )
    p.add_argument("--workflow", required=True, help="workflow id")
    p.add_argument(
        "-n",
        type=count,
        metavar="N",
        default=LEDGER_TAIL,
        help=f"entries to show first (default {LEDGER_TAIL})",
    )
    p.add_argument("-f", "--follow", action="store_true", help="stream new entries as they come")
    p.add_argument(
        "--max-wait",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="with --follow: stop after this long without a new entry",
    )
    p.add_argument(
        "--count",
        type=count,
        metavar="N",
        default=None,
        help="with --follow: stop after this many new entries",
    )
    p.set_defaults(handler=tail, interrupt_exit=0)

    p = sub.add_parser("bundle", parents=[common], help="the rehydrate bundle of a step")
    p.add_argument("--workflow", required=True, help="workflow id")
    p.add_argument("--step", required=True, help="step id")
    p.add_argument("--agent", required=True, help="agent id")
    p.add_argument(
        "-n",
        type=count,
        metavar="N",
        default=LEDGER_TAIL,
        help=f"recent turns to include (default {LEDGER_TAIL})",
    )
    p.set_defaults(handler=bundle)

    p = sub.add_parser("compact", parents=[common], help="run long-term compaction now")
    p.add_argument("--workflow", required=True, help="workflow id")
    p.set_defaults(handler=compact)

    p = sub.add_parser("spaces", parents=[common], help="an agent's cognitive spaces")
    p.add_argument("--workflow", required=True, help="workflow id")
    p.add_argument("--agent", required=True, help="agent id")
    p.set_defaults(handler=spaces)


# --- status -------------------------------------------------------------------------------


async def status(ctx: CliContext) -> int:
    """Exit 1 when a configured backend does not answer or cannot be written."""
    async with ctx.probe_runtime() as rt:
        # The same report as the inspector's health page (jarvismem.ui.data).
        health = await data.health(rt, write_check=bool(getattr(ctx.args, "write_check", False)))
    ctx.out.result(health, render_health)
    for warning in health["warnings"]:
        sys.stderr.write(f"jarvismem: warning: {' '.join(warning.split())}\n")
    unreachable, not_writable = health["unreachable"], health["not_writable"]
    if unreachable:
        error_line(f"configured backend(s) not reachable: {', '.join(unreachable)}")
    if not_writable:
        error_line(f"configured backend(s) not writable: {', '.join(not_writable)}")
    return 1 if unreachable or not_writable else 0


# --- tail ---------------------------------------------------------------------------------


def _require_redis(rt: MemoryRuntime) -> None:
    if rt.redis is None:
        raise ConfigError("this command needs Redis; set REDIS_URL")


async def tail(ctx: CliContext) -> int:
    """Print the last ``-n`` entries; with ``--follow``, then every new one (XREAD BLOCK)."""
    a = ctx.args
    workflow = validate_id(a.workflow, "workflow_id")
    async with ctx.runtime() as rt:
        _require_redis(rt)
        await require_workflow(rt, workflow)
        ledger = rt.workflow(workflow).ledger
        assert ledger is not None
        entries = await ledger.tail(a.n) if a.n else []
        if not a.follow:
            if not a.n and not ctx.out.json_mode:
                # Zero entries asked for: nothing to print, and the ledger is
                # not empty for all this command read of it.
                return 0
            # One JSON document (an array, [] when empty); humans get a line per entry.
            ctx.out.result(entries, lambda es: _human_entries(es, workflow))
            return 0
        # Following is a stream: JSON lines, the first entries included.
        for entry in entries:
            ctx.out.line(entry, render_entry)
        last_id = entries[-1]["id"] if entries else await _last_id(rt, ledger.key)
        await _follow(ctx, rt.redis, ledger.key, last_id, a.max_wait, a.count)
    return 0


def _human_entries(entries: list[dict[str, Any]], workflow: str) -> str:
    if not entries:
        return f"(ledger of {workflow} is empty)"
    return "\n".join(render_entry(entry) for entry in entries)


async def _last_id(rt: MemoryRuntime, key: str) -> str:
    """The newest id in the stream, or ``0-0`` so that every future entry is new."""
    assert rt.redis is not None
    rows = await rt.redis.xrevrange(key, count=1)
    if not rows:
        return "0-0"
    return as_text(rows[0][0])


async def _follow(
    ctx: CliContext,
    redis: Any,
    key: str,
    last_id: str,
    max_wait: float | None,
    count: int | None,
) -> None:
    seen = 0
    idle_since = time.monotonic()
    while count is None or seen < count:
        block_ms = 1000
        if max_wait is not None:
            left = max_wait - (time.monotonic() - idle_since)
            if left <= 0:
                return
            block_ms = max(1, min(block_ms, int(left * 1000)))
        # Block on the server for new entries; the loop only wakes to check bounds.
        reply = await redis.xread({key: last_id}, block=block_ms, count=100)
        for _stream, rows in reply or []:
            for sid, fields in rows:
                entry = decode_entry(sid, fields)
                last_id = entry["id"]
                ctx.out.line(entry, render_entry)
                seen += 1
                idle_since = time.monotonic()
                if count is not None and seen >= count:
                    return


# --- bundle -------------------------------------------------------------------------------


async def bundle(ctx: CliContext) -> int:
    """Print the rehydrate bundle of (workflow, step, agent)."""
    a = ctx.args
    async with ctx.runtime() as rt:
        await require_workflow(rt, a.workflow)
        mem = rt.memory(a.workflow, a.step, a.agent)
        data = await mem.rehydrate_bundle(ledger_tail=a.n)
    ctx.out.result(data, render_bundle)
    return 0


# --- compact ------------------------------------------------------------------------------


async def compact(ctx: CliContext) -> int:
    """Fold the ledger into the long-term summary now; exit 1 if the summarizer failed."""
    workflow = validate_id(ctx.args.workflow, "workflow_id")
    async with ctx.runtime() as rt:
        await require_workflow(rt, workflow)
        compactor = rt.workflow(workflow).compactor
        if compactor is None:
            raise ConfigError("long-term compaction needs both Redis and blob storage")
        bar = ProgressBar(f"compacting {workflow}, ledger entries")

        def progress(done: int, _estimate: int) -> None:
            # The compactor's estimate is the shared turn counter (0 when background
            # compaction is off, stale after an import) and the ledger length counts
            # entries already summarized: neither is the work left. Show the count.
            bar(done, 0)

        try:
            result = await compactor.compact(progress=progress)
        except BaseException:
            bar.close()
            raise
        if result.compacted:
            bar.finish(result.entries)
        else:
            bar.close()
    data = result.as_dict()
    data["workflow_id"] = workflow

    def human(d: dict[str, Any]) -> str:
        if d["compacted"]:
            return (
                f"compacted {d['entries']} new entries of {workflow}: summary of "
                f"{d['chars']} chars covers {d['from_id']} .. {d['to_id']}"
            )
        return f"nothing saved for {workflow}: {d['reason'] or 'no new entries'}"

    ctx.out.result(data, human)
    return 1 if result.failed else 0


# --- spaces -------------------------------------------------------------------------------


async def spaces(ctx: CliContext) -> int:
    """Print the agent's spaces (world map, task agenda, custom spaces, revisions)."""
    a = ctx.args
    workflow = validate_id(a.workflow, "workflow_id")
    agent = validate_id(a.agent, "agent_id")
    async with ctx.runtime() as rt:
        _require_redis(rt)
        # The inspector's spaces page reads the same dict (jarvismem.ui.data). A
        # container never written reads as {"exists": false}, like `tail` on an
        # empty ledger (exit 0).
        spaces_data = await data.spaces(rt, workflow, agent)

    def human(d: dict[str, Any]) -> str:
        if not d["exists"]:
            return f"(no spaces for agent {agent} in workflow {workflow})"
        return f"spaces of {agent} in {workflow}\n" + render_spaces(d)

    ctx.out.result(spaces_data, human)
    return 0
