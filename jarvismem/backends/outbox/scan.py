"""Find every outbox under a folder, for status output of a process that opened none.

Also tells what a Redis or blob outbox file is by its place under the root
(``<namespace>/<kind>-<digest>/<workflow>.jsonl``, see
:meth:`~jarvismem.keys.KeySpace.outbox_file`) and which backend it was for (its
folder's ``destination.json``), so a leftover queued under another address can
be listed and replayed.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from jarvismem.backends.outbox.store import Outbox

__all__ = ["OutboxIdentity", "outbox_identity", "read_destination", "scan_outboxes"]

REPLAYABLE_KINDS = ("redis", "blob")
"""Kinds of outbox a runtime can replay into its own backend (one per workflow)."""

_FOLDER = re.compile(r"^(?P<kind>[a-z]+)-(?P<digest>[0-9a-f]{16})$")


class OutboxIdentity(NamedTuple):
    """What a Redis or blob outbox file is, read from its path under the outbox root."""

    namespace: str
    kind: str
    destination: str
    workflow_id: str


def outbox_identity(relative: Path) -> OutboxIdentity | None:
    """The identity of ``relative`` (a path under the root), or None if it is not one."""
    parts = relative.parts
    if len(parts) != 3 or not parts[2].endswith(".jsonl"):
        return None
    match = _FOLDER.match(parts[1])
    if match is None or match["kind"] not in REPLAYABLE_KINDS:
        return None
    workflow_id = parts[2][: -len(".jsonl")]
    if not workflow_id:
        return None
    return OutboxIdentity(parts[0], match["kind"], match["digest"], workflow_id)


def read_destination(folder: Path) -> dict[str, str] | None:
    """The ``destination.json`` of an outbox folder (None when missing or unreadable)."""
    try:
        data = json.loads((folder / "destination.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): str(v) for k, v in data.items()}


async def scan_outboxes(root: Path) -> list[dict[str, Any]]:
    """Every outbox file under ``root`` with its pending, dropped and dead-lettered counts.

    For ``jarvismem status``: a fresh process has no outbox open, yet what
    other processes left (or could not deliver) must show. Reads each file
    the way its owner would (a worker thread), and only lists non-empty state.
    A Redis or blob outbox also shows its ``namespace``, ``kind``,
    ``destination`` (digest), ``workflow_id`` and, when recorded, ``address``.
    """
    files = await asyncio.to_thread(lambda: sorted(Path(root).rglob("*.jsonl")))
    found: list[dict[str, Any]] = []
    for path in files:
        rel = path.relative_to(root)
        box = Outbox(path)
        try:
            pending = await box.load()
            if pending or box.dropped or box.dead:
                entry: dict[str, Any] = {
                    "path": str(rel),
                    "pending": pending,
                    "pending_bytes": box.pending_bytes,
                    "dropped": box.dropped,
                    "dead_lettered": box.dead,
                }
                ident = outbox_identity(rel)
                if ident is not None:
                    entry.update(ident._asdict())
                    info = await asyncio.to_thread(read_destination, path.parent)
                    if info is not None and info.get("address"):
                        entry["address"] = info["address"]
                found.append(entry)
        except OSError as exc:
            found.append({"path": str(rel), "error": str(exc)})
        finally:
            await box.close()
    return found
