"""Management commands: ``workflows`` (list), ``delete --workflow W``, ``outbox replay``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from jarvismem.cli._args import seconds
from jarvismem.cli._context import CliContext
from jarvismem.cli._leftovers import replay_leftover
from jarvismem.errors import ConfigError
from jarvismem.keys import validate_id
from jarvismem.render import fmt_ts
from jarvismem.workflows import DeletionReport, WorkflowInfo, delete_workflow, list_workflows


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add this group's commands to the ``jarvismem`` parser."""
    p = sub.add_parser(
        "workflows",
        parents=[common],
        help="list workflows with turn counts and last activity",
        description="List the namespace's workflows, most recently active first.",
    )
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="first index every workflow whose ledger exists (scans all Redis keys; for data "
        "written before the index or by an import)",
    )
    p.add_argument(
        "--no-blobs", action="store_true", help="do not list workflows found only in blob storage"
    )
    p.set_defaults(handler=workflows)

    p = sub.add_parser(
        "delete",
        parents=[common],
        help="delete a workflow from every tier (asks first; --yes to skip)",
        description=(
            "Delete a workflow's Redis keys, index entry, blobs and local outbox files. "
            "Recall entries and Athena are not touched. Stop the workflow's kernels first: "
            "a write racing the delete starts the workflow afresh."
        ),
    )
    p.add_argument("--workflow", required=True, help="workflow id")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted, delete nothing"
    )
    p.set_defaults(handler=delete)

    p = sub.add_parser(
        "outbox",
        parents=[common],
        help="replay a leftover outbox (queued under another address) into the configured backend",
    )
    outbox_sub = p.add_subparsers(dest="outbox_command", metavar="ACTION")
    outbox_sub.required = True
    r = outbox_sub.add_parser(
        "replay",
        parents=[common],
        help="replay one leftover outbox listed by `jarvismem status`, exactly once",
        description=(
            "Replay the records of a leftover outbox (as `jarvismem status` lists it: "
            "<namespace>/<kind>-<digest>/<workflow>.jsonl under OUTBOX_PATH) into the "
            "configured backend, then delete its files. Exactly once: the records carry "
            "their own ids. Refuses an outbox recorded for another server unless --force."
        ),
    )
    r.add_argument("leftover", help="the outbox file, relative to OUTBOX_PATH (or its full path)")
    r.add_argument(
        "--force",
        action="store_true",
        help="replay even if the outbox was recorded for another address, or records none",
    )
    r.add_argument(
        "--timeout",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="give up after this long (default 60; the records stay queued)",
    )
    r.set_defaults(handler=outbox_replay)


# --- workflows ----------------------------------------------------------------------------


async def workflows(ctx: CliContext) -> int:
    """Print the workflows as a table (or a JSON list)."""
    a = ctx.args
    async with ctx.runtime() as rt:
        rows = await list_workflows(rt, rebuild=a.rebuild, include_blobs=not a.no_blobs)
        in_process = rt.in_process
    ctx.out.result([r.as_dict() for r in rows], lambda _: _table(rows, in_process))
    return 0


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table(rows: list[WorkflowInfo], in_process: bool) -> str:
    if not rows:
        text = "(no workflows)"
        if in_process:
            text += " (Redis is the in-process stand-in: ledgers of other processes are not seen)"
        return text
    header = ("WORKFLOW", "TURNS", "ENTRIES", "LAST ACTIVITY", "STORED IN")
    body = [
        (
            r.workflow_id,
            _count(r.turns),
            _count(r.entries),
            fmt_ts(r.last_activity),
            "+".join(name for name, on in (("redis", r.indexed), ("blob", r.blobs)) if on),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    right = {1, 2}  # counts are right-aligned

    def fmt(row: tuple[str, ...]) -> str:
        cells = (
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        return "  ".join(cells).rstrip()

    return "\n".join(fmt(row) for row in (header, *body))


# --- delete -------------------------------------------------------------------------------


async def delete(ctx: CliContext) -> int:
    """Delete one workflow everywhere; asks first unless ``--yes`` or ``--dry-run``."""
    a = ctx.args
    workflow = validate_id(a.workflow, "workflow_id")
    async with ctx.runtime() as rt:
        plan = await delete_workflow(rt, workflow, dry_run=True)
        if a.dry_run or plan.empty:
            ctx.out.result(plan.as_dict(), lambda _: _describe_plan(plan))
            return 0
        if not a.yes:
            await _confirm(plan)
        report = await delete_workflow(rt, workflow)
    ctx.out.result(report.as_dict(), lambda _: _describe_done(report))
    return 0


def _summary(r: DeletionReport) -> str:
    parts = [
        f"{len(r.redis_keys)} Redis key(s)",
        f"{len(r.blobs)} blob(s)",
        f"{len(r.outbox_files)} outbox file(s) ({r.outbox_pending} queued write(s))",
    ]
    if r.indexed:
        parts.append("its index entry")
    return ", ".join(parts)


def _describe_plan(r: DeletionReport) -> str:
    if r.empty:
        return f"nothing stored for workflow {r.workflow_id}: nothing to delete"
    lines = [f"would delete workflow {r.workflow_id}: {_summary(r)}"]
    lines += [f"  redis  {k}" for k in r.redis_keys]
    lines += [f"  blob   {p}" for p in r.blobs]
    lines += [f"  file   {f}" for f in r.outbox_files]
    return "\n".join(lines)


def _describe_done(r: DeletionReport) -> str:
    text = f"deleted workflow {r.workflow_id}: {_summary(r)}"
    if r.raced:
        text += (
            "\nwarning: a write landed during the delete and started the workflow afresh "
            "(stop its kernels and delete again)"
        )
    return text


async def _confirm(plan: DeletionReport) -> None:
    """Ask on the terminal; refuse (usage error) when there is none to ask on."""
    if not sys.stdin.isatty():
        raise ConfigError(
            f"refusing to delete workflow {plan.workflow_id} without confirmation: "
            "stdin is not a terminal; pass --yes (or --dry-run to see what would go)"
        )
    prompt = f"delete workflow {plan.workflow_id} ({_summary(plan)})? [y/N] "
    # input() blocks: on a worker thread, the event loop stays free.
    try:
        answer = await asyncio.to_thread(input, prompt)
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise ConfigError(f"not deleted: workflow {plan.workflow_id} was left as it was")


# --- outbox replay ------------------------------------------------------------------------


async def outbox_replay(ctx: CliContext) -> int:
    """Replay one leftover outbox; exit 1 when records are left (backend down, timeout)."""
    a = ctx.args
    async with ctx.runtime() as rt:
        result = await replay_leftover(rt, a.leftover, force=a.force, timeout=a.timeout)

    def human(r: dict[str, Any]) -> str:
        if r["status"] == "nothing to replay":
            return f"nothing to replay: {a.leftover} holds no records (already replayed?)"
        text = (
            f"replayed {r['replayed']} record(s) of {r['kind']} outbox {a.leftover} "
            f"(queued for {r.get('recorded_address') or 'an unrecorded address'}) "
            f"into {r['configured_address']}"
        )
        if r.get("dead_lettered"):
            text += f"; {r['dead_lettered']} refused for good, kept in its .dead file"
        if r["status"] != "replayed":
            text += f"; NOT FINISHED: {r['pending']} still queued ({r.get('last_error')})"
        return text

    ctx.out.result(result, human)
    return 0 if result["status"] != "not finished" else 1
