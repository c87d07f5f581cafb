"""Read-your-writes during an outage: queued checkpoints and turns merged into reads."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.outbox import Outbox
from jarvismem.errors import BackendUnavailableError
from jarvismem.tiers.checkpoints import Checkpoint
from jarvismem.tiers.durable import DurableWriter, WriterPolicy
from jarvismem.tiers.pending import (
    merge_recent,
    newer_checkpoint,
    outstanding_records,
    queued_checkpoint,
    queued_turns,
)


def checkpoint_record(step: str, state: str, stamp: int, ts: float = 1.0) -> dict[str, Any]:
    return {"op": "checkpoint", "step": step, "state": state, "ts": ts, "stamp": stamp}


def turn_record(step: str, agent: str, turn: str, **fields: Any) -> dict[str, Any]:
    entry = {"turn_id": turn, "step_id": step, "agent_id": agent, **fields}
    args: list[str] = []
    for name, value in entry.items():
        args += [name, json.dumps(value)]
    return {"op": "turn", "args": args, "field": f"{step}:{agent}:{turn}"}


def turn(step: str, agent: str, turn_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": "1-0", "turn_id": turn_id, "step_id": step, "agent_id": agent, **fields}


# --- checkpoints -----------------------------------------------------------------------------


def test_the_newest_queued_checkpoint_of_the_step_wins() -> None:
    records = [
        checkpoint_record("s1", "old", stamp=10),
        checkpoint_record("s2", "other step", stamp=99),
        checkpoint_record("s1", "new", stamp=20, ts=2.5),
        turn_record("s1", "a", "t1"),
    ]
    best = queued_checkpoint(records, "s1")
    assert best == Checkpoint(state="new", rev=0, ts=2.5, stamp=20, queued=True)


def test_no_queued_checkpoint_of_the_step_gives_none() -> None:
    assert queued_checkpoint([checkpoint_record("s2", "x", stamp=1)], "s1") is None
    assert queued_checkpoint([], "s1") is None


def test_a_record_without_a_stamp_is_ordered_by_its_time() -> None:
    records = [
        {"op": "checkpoint", "step": "s1", "state": "later", "ts": 2.0},
        {"op": "checkpoint", "step": "s1", "state": "earlier", "ts": 1.0},
    ]
    best = queued_checkpoint(records, "s1")
    assert best is not None and best.state == "later" and best.stamp == 2_000_000


def test_the_queued_checkpoint_replaces_the_stored_one_only_if_newer() -> None:
    stored = Checkpoint(state="stored", rev=3, ts=1.0, stamp=15)
    older = Checkpoint(state="q-old", rev=0, ts=1.0, stamp=10, queued=True)
    newer = Checkpoint(state="q-new", rev=0, ts=1.0, stamp=20, queued=True)
    assert newer_checkpoint(stored, older) is stored
    assert newer_checkpoint(stored, newer) is newer
    assert newer_checkpoint(None, older) is older
    assert newer_checkpoint(stored, None) is stored
    assert newer_checkpoint(None, None) is None


# --- turns -----------------------------------------------------------------------------------


def test_queued_turns_are_decoded_like_ledger_entries() -> None:
    records = [
        checkpoint_record("s1", "x", stamp=1),
        turn_record("s1", "a", "t1", thought="hm", tokens=3),
    ]
    assert queued_turns(records) == [
        {
            "id": "queued",
            "turn_id": "t1",
            "step_id": "s1",
            "agent_id": "a",
            "thought": "hm",
            "tokens": 3,
        }
    ]


def test_a_value_that_is_not_json_is_kept_raw() -> None:
    record = {"op": "turn", "args": ["turn_id", "t1", "note", "{not json"]}
    assert queued_turns([record]) == [{"id": "queued", "turn_id": "t1", "note": "{not json"}]


def test_merge_appends_queued_turns_once_and_keeps_the_last_count() -> None:
    ledger = [turn("s", "a", "t1"), turn("s", "a", "t2")]
    queued = [
        {**turn("s", "a", "t2"), "id": "queued"},  # replayed meanwhile: already in the ledger
        {**turn("s", "a", "t3"), "id": "queued"},
        {**turn("s", "a", "t3"), "id": "queued"},
    ]
    merged = merge_recent(ledger, queued, count=10)
    assert [e["turn_id"] for e in merged] == ["t1", "t2", "t3"]
    assert merged[1]["id"] == "1-0"  # the ledger's copy wins
    assert [e["turn_id"] for e in merge_recent(ledger, queued, count=2)] == ["t2", "t3"]
    assert merge_recent(ledger, queued, count=0) == []


def test_merge_without_queued_turns_returns_the_ledger_as_is() -> None:
    ledger = [turn("s", "a", "t1")]
    assert merge_recent(ledger, [], count=0) is ledger


def test_entries_that_are_not_turns_are_never_merged_away() -> None:
    raw = [{"id": "1-0", "note": "x"}, {"id": "2-0", "note": "x"}]
    merged = merge_recent(raw, [{"id": "queued", "note": "x"}], count=10)
    assert len(merged) == 3


# --- waiting for the replay ------------------------------------------------------------------


class Backend:
    def __init__(self) -> None:
        self.down = True
        self.applied: list[dict[str, Any]] = []

    async def apply(self, record: dict[str, Any]) -> None:
        if self.down:
            raise BackendUnavailableError("down")
        self.applied.append(record)


@pytest.fixture
async def writer_and_backend(tmp_path: Path) -> AsyncIterator[tuple[DurableWriter, Backend]]:
    backend = Backend()
    writer = DurableWriter(
        "redis[wf]", Outbox(tmp_path / "o.jsonl"), backend.apply, policy=WriterPolicy(timeout=1.0)
    )
    yield writer, backend
    await writer.close()


async def test_nothing_outstanding_when_nothing_is_queued(
    writer_and_backend: tuple[DurableWriter, Backend],
) -> None:
    writer, _ = writer_and_backend
    assert await outstanding_records(writer, timeout=1.0) == []


async def test_records_still_queued_after_the_wait_are_returned(
    writer_and_backend: tuple[DurableWriter, Backend],
) -> None:
    writer, _ = writer_and_backend
    record = checkpoint_record("s1", "x", stamp=1)
    await writer.submit(record)
    assert await outstanding_records(writer, timeout=0.1) == [record]


async def test_a_replay_that_finishes_within_the_wait_leaves_nothing_outstanding(
    writer_and_backend: tuple[DurableWriter, Backend],
) -> None:
    writer, backend = writer_and_backend
    await writer.submit(checkpoint_record("s1", "x", stamp=1))
    backend.down = False
    assert await outstanding_records(writer, timeout=1.0) == []
    assert len(backend.applied) == 1
