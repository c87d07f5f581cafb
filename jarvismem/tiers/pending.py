"""Read-your-writes during an outage: what the local outbox still holds.

A write acknowledged while Redis was down sits in the workflow's outbox until
it is replayed. A read on the same machine must still see it: after a restart
during the outage, ``load_checkpoint()`` returns the newest queued checkpoint
(not ``None``, which would send the kernel back to turn 1), and the bundle's
``recent_turns`` include the queued turns.

A read first gives the deliverer (this process's or another's) a short chance
to replay the outbox; whatever is still queued after that is merged with what
Redis returned, the newer checkpoint (by stamp) winning.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from jarvismem.tiers.checkpoints import Checkpoint
from jarvismem.tiers.durable import DurableWriter

REPLAY_WAIT_SECONDS = 1.0
"""Longest a read waits for the outbox to replay before merging what is queued."""


async def outstanding_records(writer: DurableWriter, timeout: float) -> list[dict[str, Any]]:
    """Records still queued after a bounded wait for replay ([] when nothing is queued)."""
    if not await writer.notice():
        return []
    if await writer.flush(timeout=min(timeout, REPLAY_WAIT_SECONDS), stop_at_failure=True):
        return []
    return await writer.pending_records()


async def queued_records(writer: DurableWriter) -> list[dict[str, Any]]:
    """Records queued in ``writer``'s outbox as its files stand, starting no replay.

    For readers that must not write (the inspector): :func:`outstanding_records`
    first lets the deliverer replay, which is a write to the backend.
    """
    box = writer.outbox
    await box.refresh()
    if not len(box):
        return []
    queued = await box.peek(len(box))
    return [record for seq, record in queued if box.misdirected_to(seq) is None]


def queued_checkpoint(records: Iterable[dict[str, Any]], step_id: str) -> Checkpoint | None:
    """The newest checkpoint of ``step_id`` among queued records (rev 0: not stored yet)."""
    best: Checkpoint | None = None
    for record in records:
        if record.get("op") != "checkpoint" or record.get("step") != step_id:
            continue
        ts = float(record.get("ts") or 0.0)
        stamp = int(record.get("stamp") or ts * 1_000_000)
        if best is None or stamp >= best.stamp:
            best = Checkpoint(state=record["state"], rev=0, ts=ts, stamp=stamp, queued=True)
    return best


def newer_checkpoint(stored: Checkpoint | None, queued: Checkpoint | None) -> Checkpoint | None:
    """The checkpoint a replay would leave in place: the queued one only if newer."""
    if queued is None:
        return stored
    if stored is None or queued.stamp > stored.stamp:
        return queued
    return stored


def queued_turns(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Queued ledger turns, decoded like ledger entries (``id`` is ``"queued"``)."""
    turns: list[dict[str, Any]] = []
    for record in records:
        if record.get("op") != "turn":
            continue
        args = record.get("args") or []
        entry: dict[str, Any] = {"id": "queued"}
        for name, raw in zip(args[::2], args[1::2], strict=False):
            try:
                entry[name] = json.loads(raw)
            except (TypeError, ValueError):
                entry[name] = raw
        turns.append(entry)
    return turns


def merge_recent(
    ledger: list[dict[str, Any]], queued: list[dict[str, Any]], count: int
) -> list[dict[str, Any]]:
    """The last ``count`` turns of the ledger tail followed by queued ones, each once."""
    if not queued:
        return ledger
    seen = {_turn_key(entry) for entry in ledger}
    merged = list(ledger)
    for entry in queued:
        key = _turn_key(entry)
        if key not in seen:
            seen.add(key)
            merged.append(entry)
    return merged[-count:] if count > 0 else []


def _turn_key(entry: dict[str, Any]) -> tuple[str, str, str] | int:
    if "turn_id" not in entry:
        return id(entry)  # not a turn (a raw ledger entry): never merged away
    return (str(entry.get("step_id")), str(entry.get("agent_id")), str(entry.get("turn_id")))
