"""Find every outbox under a folder, for status output of a process that opened none."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from jarvismem.backends.outbox.store import Outbox

__all__ = ["scan_outboxes"]


async def scan_outboxes(root: Path) -> list[dict[str, Any]]:
    """Every outbox file under ``root`` with its pending, dropped and dead-lettered counts.

    For ``jarvismem status``: a fresh process has no outbox open, yet what
    other processes left (or could not deliver) must show. Reads each file
    the way its owner would (a worker thread), and only lists non-empty state.
    """
    files = await asyncio.to_thread(lambda: sorted(Path(root).rglob("*.jsonl")))
    found: list[dict[str, Any]] = []
    for path in files:
        box = Outbox(path)
        try:
            pending = await box.load()
            if pending or box.dropped or box.dead:
                found.append(
                    {
                        "path": str(path.relative_to(root)),
                        "pending": pending,
                        "pending_bytes": box.pending_bytes,
                        "dropped": box.dropped,
                        "dead_lettered": box.dead,
                    }
                )
        except OSError as exc:
            found.append({"path": str(path.relative_to(root)), "error": str(exc)})
        finally:
            await box.close()
    return found
