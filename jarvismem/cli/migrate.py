"""``jarvismem migrate --from-jarviscore``: bring a JarvisCore deployment's memory over.

Reads the reference's Redis keys and blob scratchpads (see
:mod:`jarvismem.transfer.jarviscore` for the mapping) and writes them into this
namespace through the importer: all or nothing per workflow, and running it
again changes nothing. ``--dry-run`` reads, converts and checks everything and
says what would happen, writing nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from jarvismem.cli._context import CliContext
from jarvismem.cli._output import ProgressBar
from jarvismem.keys import validate_id
from jarvismem.transfer.jarviscore import migrate_from_jarviscore, open_jarviscore_source


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``migrate`` to the ``jarvismem`` parser."""
    p = sub.add_parser(
        "migrate",
        parents=[common],
        help="bring JarvisCore memory (Redis ledgers, summaries, checkpoints, scratchpads) over",
    )
    p.add_argument(
        "--from-jarviscore",
        action="store_true",
        required=True,
        help="the source is a JarvisCore (jarviscore-framework 3.x) deployment",
    )
    p.add_argument(
        "--source-redis-url",
        metavar="URL",
        default=None,
        help="JarvisCore's Redis (default: REDIS_URL, i.e. the same server)",
    )
    p.add_argument(
        "--source-blob",
        metavar="PATH",
        default=None,
        help="JarvisCore's local blob folder (its STORAGE_BASE_PATH); without it no "
        "scratchpads are migrated",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--workflow", default=None, help="migrate this workflow")
    which.add_argument("--all", action="store_true", help="migrate every workflow found")
    p.add_argument(
        "--dry-run", action="store_true", help="read and check everything, write nothing"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a target workflow that holds other data (in one atomic switch)",
    )
    p.set_defaults(handler=migrate)


class _Bars:
    """One progress bar per phase (``reading wf``, ``writing wf``), on stderr."""

    def __init__(self) -> None:
        self.current: ProgressBar | None = None

    def __call__(self, label: str, done: int, total: int) -> None:
        if self.current is None or self.current.label != label:
            self.finish()  # the previous phase ended well, since a next one began
            self.current = ProgressBar(label)
        self.current(done, total)

    def finish(self) -> None:
        if self.current is not None:
            self.current.finish()
            self.current = None

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


def _human(report: dict[str, Any]) -> str:
    src = " + ".join(x for x in (report["source"]["redis"], report["source"]["blob"]) if x)
    head = "dry run, nothing written: " if report["dry_run"] else ""
    lines = [f"{head}JarvisCore ({src}) -> namespace {report['namespace']}"]
    for wf in report["workflows"]:
        if wf["status"] == "failed":
            lines.append(f"  {wf['workflow_id']}: failed: {wf['error']}")
            continue
        counts = ", ".join(f"{n} {k}" for k, n in wf["counts"].items()) or "nothing"
        line = f"  {wf['workflow_id']}: {wf['status']} ({counts})"
        if wf["skipped"]:
            line += "; skipped " + ", ".join(f"{n} {k}" for k, n in wf["skipped"].items())
        lines.append(line)
        lines.extend(f"    warning: {w}" for w in wf["warnings"])
    if not report["workflows"]:
        lines.append("  no workflows found")
    sessions = report["athena_sessions"]["found"]
    if sessions:
        lines.append(f"  athena sessions: {sessions} found, not migrated")
    lines.extend(f"warning: {w}" for w in report["warnings"])
    return "\n".join(lines)


async def migrate(ctx: CliContext) -> int:
    """Migrate, print the report; exit 1 if any workflow of ``--all`` failed."""
    a = ctx.args
    workflows = None if a.all else [validate_id(a.workflow, "workflow_id")]
    bars = _Bars()
    async with ctx.runtime() as rt:
        blob = Path(a.source_blob) if a.source_blob else None
        async with open_jarviscore_source(
            rt.settings, redis_url=a.source_redis_url, blob_path=blob
        ) as source:
            try:
                report = await migrate_from_jarviscore(
                    rt, source, workflows, dry_run=a.dry_run, force=a.force, progress=bars
                )
            except BaseException:
                bars.close()  # the line ends as it stood: not 100 %
                raise
    bars.finish()
    ctx.out.result(report, _human)
    return 1 if any(w["status"] == "failed" for w in report["workflows"]) else 0
