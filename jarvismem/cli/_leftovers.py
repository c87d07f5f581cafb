"""Leftover outboxes: records queued for this backend under another address.

An outbox file is named by a digest of the address its process wrote to. A
process that reached the same Redis as ``localhost`` and another as
``127.0.0.1``, through a proxy port, or before a DNS change, leaves records no
later process replays. :func:`find_leftovers` tells them apart for ``status``;
:func:`replay_leftover` replays one into the configured backend for
``jarvismem outbox replay``: under the file's delivery claim (never beside a
live deliverer), through the workflow's own durable path (the ledger's turn
index and the checkpoint op ids make a replay exactly-once), then deletes the
files it emptied, so a second run finds nothing to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import socket
from pathlib import Path
from typing import Any

from jarvismem.backends.outbox import Outbox
from jarvismem.backends.outbox.format import sibling
from jarvismem.backends.outbox.scan import OutboxIdentity, outbox_identity, read_destination
from jarvismem.errors import ConfigError, InvalidIdError
from jarvismem.keys import validate_id
from jarvismem.runtime import MemoryRuntime

__all__ = ["find_leftovers", "replay_command", "replay_leftover"]

_SIDE_FILES = (".cursor", ".tmp", ".cursor.tmp", ".lock", ".deliver.lock")


def replay_command(entry: dict[str, Any], namespace: str) -> str:
    """The command line that replays a listed leftover (``--namespace`` when not ours)."""
    cmd = ["jarvismem", "outbox", "replay", str(entry["path"])]
    if entry.get("namespace") and entry["namespace"] != namespace:
        cmd[2:2] = ["--namespace", str(entry["namespace"])]
    return shlex.join(cmd)


def find_leftovers(rt: MemoryRuntime, scanned: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scanned outboxes with pending records for an address this runtime does not use.

    Each gets the ``replay`` command to run. An outbox of another namespace is
    a leftover too when its digest is not the configured one of its kind.
    """
    found = []
    for entry in scanned:
        kind = entry.get("kind")
        if not entry.get("pending") or kind is None:
            continue
        if entry.get("destination") == rt.destination(str(kind)):
            continue  # the configured backend's own outbox: its writers replay it
        found.append({**entry, "replay": replay_command(entry, rt.keyspace.namespace)})
    return found


def _resolve(rt: MemoryRuntime, ident: str) -> tuple[Path, OutboxIdentity]:
    """The leftover's data file (inside the outbox root) and what it is; clear errors else."""
    root = Path(rt.settings.outbox_path).resolve()
    raw = Path(ident)
    candidate = (raw if raw.is_absolute() else root / raw).resolve()
    try:
        rel = candidate.relative_to(root)
    except ValueError:
        raise InvalidIdError(f"{ident!r} is not inside the outbox folder {root}") from None
    parsed = outbox_identity(rel)
    if parsed is None:
        raise InvalidIdError(
            f"{ident!r} is not a Redis or blob outbox file "
            "(<namespace>/<kind>-<digest>/<workflow>.jsonl, as `jarvismem status` lists them)"
        )
    validate_id(parsed.workflow_id, "workflow_id")
    if parsed.namespace != rt.keyspace.namespace:
        raise ConfigError(
            f"the outbox {rel} belongs to namespace {parsed.namespace!r}, this command "
            f"runs in {rt.keyspace.namespace!r}: add --namespace {parsed.namespace}"
        )
    return candidate, parsed


async def _addresses(host: str, port: int) -> set[str]:
    """Every IP address ``host`` resolves to (empty when it does not resolve)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {str(info[4][0]) for info in infos}


def _split_redis(address: str) -> tuple[str, int, str] | None:
    """``redis:host:port/db`` as (host, port, db); None for any other form."""
    if not address.startswith("redis:") or "/" not in address:
        return None
    where, db = address[len("redis:") :].rsplit("/", 1)
    host, sep, port = where.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port), db


async def same_backend(recorded: str, configured: str) -> bool:
    """True when two recorded addresses name one backend.

    Redis addresses match when port and database are equal and the host names
    resolve to a common IP address (``localhost`` and ``127.0.0.1``); any
    other form (a socket path, a sentinel service, a cluster, blob storage)
    only by equal text.
    """
    if recorded == configured:
        return True
    a, b = _split_redis(recorded), _split_redis(configured)
    if a is None or b is None or a[1:] != b[1:]:
        return False
    return bool(await _addresses(a[0], a[1]) & await _addresses(b[0], b[1]))


async def _check_destination(
    rt: MemoryRuntime, path: Path, ident: OutboxIdentity, force: bool
) -> dict[str, Any]:
    configured = rt.destination_address(ident.kind)
    if configured is None or rt.destination(ident.kind) is None:
        raise ConfigError(f"this configuration has no {ident.kind} backend to replay into")
    info = await asyncio.to_thread(read_destination, path.parent)
    recorded = None if info is None else info.get("address")
    verdict = {"recorded_address": recorded, "configured_address": configured}
    if ident.destination == rt.destination(ident.kind):
        return {**verdict, "match": "configured"}
    if recorded is None:
        if not force:
            raise ConfigError(
                f"the outbox {path.name} does not record which {ident.kind} server it was for; "
                f"if it was {configured}, replay it with --force"
            )
        return {**verdict, "match": "forced"}
    if info is not None and info.get("kind", ident.kind) != ident.kind:
        raise ConfigError(f"the outbox {path.name} records kind {info.get('kind')!r}")
    if await same_backend(recorded, configured):
        return {**verdict, "match": "same server"}
    if not force:
        raise ConfigError(
            f"the outbox {path.name} was queued for {recorded}, this configuration writes to "
            f"{configured}; if they are the same server, replay it with --force"
        )
    return {**verdict, "match": "forced"}


def _remove_emptied(path: Path, keep_dead: bool) -> list[str]:
    """Delete a drained outbox's files (and its folder when nothing else is left in it)."""
    removed = []
    for file in (path, *(sibling(path, s) for s in _SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError):
            file.unlink()
            removed.append(file.name)
    if keep_dead:
        return removed
    folder = path.parent
    others = [p for p in folder.iterdir() if p.name != "destination.json"]
    if not others:
        with contextlib.suppress(FileNotFoundError):
            (folder / "destination.json").unlink()
        with contextlib.suppress(OSError):  # a peer wrote there meanwhile: keep it
            folder.rmdir()
    return removed


async def replay_leftover(
    rt: MemoryRuntime, ident: str, *, force: bool = False, timeout: float = 60.0
) -> dict[str, Any]:
    """Replay one leftover outbox into the configured backend; see the module docstring.

    Raises :class:`InvalidIdError` for an id that is not an outbox file under
    the root, :class:`ConfigError` for a destination that does not match
    (unless ``force``). Returns what happened: ``replayed``, ``pending`` (left
    when the backend failed or ``timeout`` ran out), ``dead_lettered``,
    ``removed`` files and the destination ``match``.
    """
    path, parsed = _resolve(rt, ident)
    result: dict[str, Any] = {"path": str(path), **parsed._asdict()}
    nothing = {**result, "replayed": 0, "pending": 0, "status": "nothing to replay"}
    if not await asyncio.to_thread(path.is_file):
        return nothing
    try:
        result.update(await _check_destination(rt, path, parsed, force))
    except ConfigError:
        # A peer replay that drained the file removes it, then its destination
        # file: a destination gone with its outbox is a finished replay, not an
        # outbox that never recorded one.
        if not await asyncio.to_thread(path.is_file):
            return nothing
        raise
    s = rt.settings
    box = Outbox(
        path,
        max_entries=s.outbox_max_entries,
        max_bytes=s.outbox_max_bytes,
        fsync=s.outbox_fsync_effective,
        destination=parsed.destination,
    )
    writer = rt.workflow(parsed.workflow_id).replay_writer(parsed.kind, box)
    try:
        # The writer's drain task takes the file's delivery claim; while another
        # process holds it, this waits for that replay instead of joining it.
        drained = await writer.flush(timeout, stop_at_failure=True)
        result.update(replayed=writer.replayed, pending=len(box), dead_lettered=box.dead)
        result["foreign"] = box.foreign
        if not drained:
            result["status"] = "not finished"
            result["last_error"] = writer.last_error
            return result
        removed: list[str] = []
        if box.try_claim_delivery():  # else a peer is at it: it cleans up
            try:
                if await box.refresh() == 0:
                    removed = await asyncio.to_thread(_remove_emptied, path, box.dead > 0)
            finally:
                box.release_delivery()
        result.update(status="replayed", removed=removed)
        return result
    finally:
        await writer.close()
