"""scan_outboxes(): what a fresh process reports about outboxes others left."""

from __future__ import annotations

from pathlib import Path

from jarvismem.backends.outbox.scan import scan_outboxes
from jarvismem.backends.outbox.store import Outbox


async def test_lists_only_outboxes_with_something_to_report(tmp_path: Path) -> None:
    pending = Outbox(tmp_path / "wf1" / "redis.jsonl")
    await pending.put({"i": 0})
    await pending.put({"i": 1})
    drained = Outbox(tmp_path / "wf2" / "redis.jsonl")
    await drained.put({"i": 0})
    await drained.ack((await drained.peek(1))[0][0])
    full = Outbox(tmp_path / "wf3" / "blob.jsonl", max_entries=1)
    await full.put({"i": 0})
    await full.put({"i": 1})  # dropped
    await full.ack((await full.peek(1))[0][0])
    for box in (pending, drained, full):
        await box.close()

    found = await scan_outboxes(tmp_path)

    assert [entry["path"] for entry in found] == ["wf1/redis.jsonl", "wf3/blob.jsonl"]
    assert found[0]["pending"] == 2 and found[0]["pending_bytes"] > 0
    assert found[1] == {
        "path": "wf3/blob.jsonl",
        "pending": 0,
        "pending_bytes": 0,
        "dropped": 1,
        "dead_lettered": 0,
    }


async def test_an_empty_or_missing_root_lists_nothing(tmp_path: Path) -> None:
    assert await scan_outboxes(tmp_path) == []
    assert await scan_outboxes(tmp_path / "absent") == []
