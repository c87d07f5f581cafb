"""Export/import of a workflow: the line format, a faithful round trip, and refusals."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.keys import KeySpace
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from jarvismem.transfer import (
    TransferError,
    export_workflow,
    import_workflow,
    validate_export,
    workflow_is_empty,
)


def _runtime(redis: Any, blob: Any, keyspace: KeySpace, tmp_path: Path) -> MemoryRuntime:
    settings = load_settings(
        _env_file=None,
        jarvismem_namespace=keyspace.namespace,
        outbox_path=tmp_path / "outbox",
        compaction_enabled=False,
    )
    return MemoryRuntime(settings, redis=redis, blob=blob)


async def _populate(rt: MemoryRuntime, wf: str) -> None:
    for step, agent in (("s1", "a1"), ("s2", "a2")):
        mem = rt.memory(wf, step, agent)
        for turn in range(1, 8):
            await mem.log_turn(
                turn, f"{step} thinks {turn}", {"tool": "t", "n": turn}, f"ok {turn}", tokens=3
            )
        await mem.save_checkpoint(json.dumps({"step": step, "next": 8}))
        await mem.save_checkpoint(json.dumps({"step": step, "next": 8, "again": True}))
        assert mem.working is not None
        await mem.working.write("note", f"note of {step}")
        await mem.working.write("finding", f"finding of {step}", scope="goal")
        assert mem.spaces is not None
        await mem.spaces.world_put("where", step)
        await mem.spaces.tasks_add(f"task of {agent}")
    await rt.memory(wf, "s1", "a1").compact_now()


async def _export(rt: MemoryRuntime, wf: str, path: Path) -> list[dict[str, Any]]:
    lines = [line async for line in export_workflow(rt, wf)]
    await asyncio.to_thread(path.write_text, "\n".join(lines) + "\n")
    return [json.loads(line) for line in lines]


async def test_round_trip_reproduces_every_bundle(
    redis_client: Any, keyspace: KeySpace, tmp_path: Path
) -> None:
    source = _runtime(redis_client, LocalBlobStorage(tmp_path / "src"), keyspace, tmp_path)
    target_ks = KeySpace(keyspace.namespace + "imp")
    target = _runtime(redis_client, LocalBlobStorage(tmp_path / "dst"), target_ks, tmp_path)
    try:
        await _populate(source, "wf1")
        records = await _export(source, "wf1", tmp_path / "wf1.jsonl")
        assert records[0]["format"] == "jarvismem-export" and records[0]["version"] == 1
        assert records[0]["namespace"] == keyspace.namespace
        kinds = {r["kind"] for r in records[1:]}
        assert kinds == {"ledger", "summary", "checkpoint", "scratchpad", "goals", "spaces"}
        result = await import_workflow(target, tmp_path / "wf1.jsonl")
        assert result["counts"]["ledger"] == 14 and result["counts"]["checkpoint"] == 2
        for step, agent in (("s1", "a1"), ("s2", "a2")):
            before = await source.memory("wf1", step, agent).rehydrate_bundle(ledger_tail=20)
            after = await target.memory("wf1", step, agent).rehydrate_bundle(ledger_tail=20)
            assert after == before
        # Revisions and the exactly-once index came along.
        ckpt = await target.memory("wf1", "s1", "a1").load_checkpoint_record()
        assert ckpt is not None and ckpt.rev == 2
        mem = target.memory("wf1", "s1", "a1")
        await mem.log_turn(3, "re-run", "again", "dup")
        assert mem.episodic is not None and await mem.episodic.length() == 14
    finally:
        await source.close()
        await target.close()
        for ks in (keyspace, target_ks):
            keys = [k async for k in redis_client.scan_iter(match=f"jm:{ks.namespace}:*")]
            if keys:
                await redis_client.delete(*keys)


async def test_import_refuses_a_non_empty_target_unless_forced(
    redis_client: Any, keyspace: KeySpace, tmp_path: Path
) -> None:
    rt = _runtime(redis_client, LocalBlobStorage(tmp_path / "b"), keyspace, tmp_path)
    try:
        await _populate(rt, "wf1")
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
    finally:
        await rt.close()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ('{"format": "other", "version": 1, "workflow_id": "w", "namespace": "n"}\n', "line 1"),
        (
            '{"format": "jarvismem-export", "version": 2, "workflow_id": "w", "namespace": "n"}\n',
            "line 1",
        ),
        (
            '{"format": "jarvismem-export", "version": 1, "workflow_id": "w", "namespace": "n"}\n'
            "not json\n",
            "line 2",
        ),
        (
            '{"format": "jarvismem-export", "version": 1, "workflow_id": "w", "namespace": "n"}\n'
            '{"kind": "ledger", "id": "1-0", "fields": {"a": 1}}\n'
            '{"kind": "checkpoint", "step_id": "../x", "state": "s", "rev": 1}\n',
            "line 3: step_id",
        ),
        (
            '{"format": "jarvismem-export", "version": 1, "workflow_id": "w", "namespace": "n"}\n'
            '{"kind": "ledger", "id": "not-an-id", "fields": {}}\n',
            "line 2",
        ),
    ],
    ids=["empty", "wrong-format", "wrong-version", "not-json", "bad-step-id", "bad-stream-id"],
)
async def test_a_bad_file_is_refused_with_its_line_and_nothing_written(
    redis_client: Any, keyspace: KeySpace, tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(TransferError, match=message):
        await validate_export(path)
    rt = _runtime(redis_client, LocalBlobStorage(tmp_path / "b"), keyspace, tmp_path)
    try:
        with pytest.raises(TransferError):
            await import_workflow(rt, path)
        assert await workflow_is_empty(rt, "w")
    finally:
        await rt.close()
