"""``jarvismem export`` / ``jarvismem import``: a workflow as JSON lines.

The format is documented in :mod:`jarvismem.transfer`. An import is all or
nothing (validated whole, staged, switched into place; see
:mod:`jarvismem.transfer.importer`): a refused file exits 1 having written
nothing, and running the same command again after a crash finishes or cleans
up the interrupted import first.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import aiofiles

from jarvismem.cli._context import CliContext
from jarvismem.cli._output import ProgressBar
from jarvismem.errors import ConfigError
from jarvismem.keys import validate_id
from jarvismem.transfer import export_workflow, import_workflow
from jarvismem.workflows import require_workflow


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``export`` and ``import`` to the ``jarvismem`` parser."""
    p = sub.add_parser(
        "export", parents=[common], help="every tier of a workflow as JSON lines (stdout)"
    )
    p.add_argument("--workflow", required=True, help="workflow id to export")
    p.add_argument(
        "-o", "--output", metavar="PATH", default=None, help="write here instead of stdout"
    )
    p.set_defaults(handler=export)

    p = sub.add_parser("import", parents=[common], help="load a `jarvismem export` file")
    p.add_argument("file", help="the .jsonl file written by `jarvismem export`")
    p.add_argument("--workflow", default=None, help="import under this workflow id instead")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the target workflow if it already holds data (in one atomic switch)",
    )
    p.set_defaults(handler=import_)


async def export(ctx: CliContext) -> int:
    """Stream the export to stdout (or ``--output``); progress on stderr."""
    a = ctx.args
    workflow = validate_id(a.workflow, "workflow_id")
    bar = ProgressBar(f"exporting {workflow} ledger")
    lines = 0
    try:
        async with ctx.runtime() as rt:
            # Before the file is opened: an unknown workflow leaves no header-only file.
            await require_workflow(rt, workflow)
            if a.output:
                async with aiofiles.open(a.output, "w", encoding="utf-8") as fh:
                    async for line in export_workflow(rt, workflow, progress=bar):
                        await fh.write(line + "\n")
                        lines += 1
            else:
                out = sys.stdout
                async for line in export_workflow(rt, workflow, progress=bar):
                    out.write(line + "\n")
                    lines += 1
                out.flush()
    except BaseException:
        bar.close()  # the line ends as it stood: not 100 %
        raise
    bar.finish()
    where = a.output or "stdout"
    sys.stderr.write(f"exported {lines - 1} record(s) of {workflow} to {where}\n")
    return 0


async def import_(ctx: CliContext) -> int:
    """Validate then load the file; prints what was imported."""
    a = ctx.args
    path = Path(a.file)
    if not await asyncio.to_thread(path.is_file):
        raise ConfigError(f"{a.file}: no such file")
    bar = ProgressBar(f"importing {path.name}")
    async with ctx.runtime() as rt:
        try:
            result = await import_workflow(
                rt, path, workflow_id=a.workflow, force=a.force, progress=bar
            )
        except BaseException:
            bar.close()  # the line ends as it stood: not 100 %
            raise
    # Only now, switched into place, is the import complete.
    bar.finish(result["records"])

    def human(d: dict[str, Any]) -> str:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(d["counts"].items())) or "nothing"
        return (
            f"imported {d['records']} record(s) into workflow {d['workflow_id']} "
            f"(namespace {d['namespace']}): {counts}"
        )

    ctx.out.result(result, human)
    return 0
