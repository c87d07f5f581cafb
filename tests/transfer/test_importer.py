"""Import: a faithful round trip, refusals of a non-empty target, what needs which store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from jarvismem.keys import KeySpace
from jarvismem.runtime import MemoryRuntime
from jarvismem.transfer import (
    TransferError,
    export_workflow,
    import_workflow,
    workflow_is_empty,
)
from jarvismem.transfer.format import FORMAT, VERSION
from tests.transfer.conftest import STEPS, TURNS, MakeRuntime, populate


async def _export(rt: MemoryRuntime, wf: str, path: Path) -> list[dict[str, Any]]:
    lines = [line async for line in export_workflow(rt, wf)]
    await asyncio.to_thread(path.write_text, "\n".join(lines) + "\n")
    return [json.loads(line) for line in lines]


async def test_round_trip_reproduces_every_bundle(
    make_store_runtime: MakeRuntime, keyspace: KeySpace, tmp_path: Path
) -> None:
    source = make_store_runtime("src")
    target = make_store_runtime("dst", namespace=keyspace.namespace + "imp")
    await populate(source, "wf1")
    records = await _export(source, "wf1", tmp_path / "wf1.jsonl")
    assert records[0]["format"] == "jarvismem-export" and records[0]["version"] == 1
    assert records[0]["namespace"] == keyspace.namespace
    kinds = {r["kind"] for r in records[1:]}
    assert kinds == {"ledger", "summary", "checkpoint", "scratchpad", "goals", "spaces"}
    progress: list[tuple[int, int]] = []
    result = await import_workflow(
        target, tmp_path / "wf1.jsonl", progress=lambda d, t: progress.append((d, t))
    )
    assert result["counts"]["ledger"] == len(STEPS) * TURNS
    assert result["counts"]["checkpoint"] == 2
    assert result["records"] == len(records) - 1 and progress[-1] == (len(records) - 1,) * 2
    for step, agent in STEPS:
        before = await source.memory("wf1", step, agent).rehydrate_bundle(ledger_tail=20)
        after = await target.memory("wf1", step, agent).rehydrate_bundle(ledger_tail=20)
        assert after == before
    # Revisions and the exactly-once index came along.
    ckpt = await target.memory("wf1", "s1", "a1").load_checkpoint_record()
    assert ckpt is not None and ckpt.rev == 2
    mem = target.memory("wf1", "s1", "a1")
    await mem.log_turn(3, "re-run", "again", "dup")
    assert mem.episodic is not None and await mem.episodic.length() == len(STEPS) * TURNS


async def test_import_refuses_a_non_empty_target_unless_forced(
    make_store_runtime: MakeRuntime, tmp_path: Path
) -> None:
    rt = make_store_runtime()
    await populate(rt, "wf1")
    await _export(rt, "wf1", tmp_path / "wf1.jsonl")
    with pytest.raises(TransferError, match="already holds data"):
        await import_workflow(rt, tmp_path / "wf1.jsonl")
    before = await rt.memory("wf1", "s2", "a2").rehydrate_bundle()
    await import_workflow(rt, tmp_path / "wf1.jsonl", force=True)
    assert await rt.memory("wf1", "s2", "a2").rehydrate_bundle() == before
    # Importing under another id leaves the original alone.
    assert await workflow_is_empty(rt, "wf2")
    await import_workflow(rt, tmp_path / "wf1.jsonl", workflow_id="wf2")
    assert not await workflow_is_empty(rt, "wf2")


def _file(tmp_path: Path, *records: dict[str, Any]) -> Path:
    header = {"format": FORMAT, "version": VERSION, "workflow_id": "w", "namespace": "n"}
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (header, *records)) + "\n")
    return path


async def test_ledger_records_need_redis(make_runtime: MakeRuntime, tmp_path: Path) -> None:
    rt = make_runtime()  # no Redis, no blob storage
    path = _file(tmp_path, {"kind": "ledger", "id": "1-1", "fields": {"a": 1}})
    with pytest.raises(TransferError, match="Redis is not configured"):
        await import_workflow(rt, path)


async def test_a_foreign_ledger_entry_keeps_its_id_and_is_not_indexed(
    make_store_runtime: MakeRuntime, redis_client: Any, tmp_path: Path
) -> None:
    rt = make_store_runtime()
    turn = {"step_id": "s", "agent_id": "a", "turn_id": 1, "thought": "t"}
    path = _file(
        tmp_path,
        {"kind": "ledger", "id": "5-1", "fields": {"note": "from elsewhere"}},
        {"kind": "ledger", "id": "6-0", "fields": turn},
    )
    await import_workflow(rt, path, workflow_id="wfx")
    ledger = rt.workflow("wfx").ledger
    assert ledger is not None
    assert await ledger.tail(5) == [
        {"id": "5-1", "note": "from elsewhere"},
        {"id": "6-0", **turn},
    ]
    index = await redis_client.hgetall(rt.keyspace.turn_index("wfx"))
    assert index == {KeySpace.turn_field("s", "a", "1").encode(): b"6-0"}
