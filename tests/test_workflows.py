"""Listing and deleting whole workflows (``jarvismem.workflows``), on fake and real Redis."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from jarvismem.errors import InvalidIdError
from jarvismem.keys import KeySpace
from jarvismem.tiers.episodic import WorkflowIndex
from jarvismem.workflows import delete_workflow, list_workflows


async def _log(engine: Any, workflow: str, turns: range, *, step: str = "s1") -> None:
    mem = engine.memory(workflow, step, "a1")
    for t in turns:
        await mem.log_turn(t, f"thought {t}", f"action {t}", f"result {t}")


async def _everything(engine: Any, workflow: str) -> tuple[list[str], list[str]]:
    ks: KeySpace = engine.keyspace
    keys: list[str] = []
    if engine.redis is not None:
        keys = sorted(
            [
                k.decode() if isinstance(k, bytes) else k
                async for k in engine.redis.scan_iter(match=ks.workflow_pattern(workflow))
            ]
        )
    blobs = [] if engine.blob is None else await engine.blob.list(ks.workflow_blob_prefix(workflow))
    return keys, blobs


# --- listing ------------------------------------------------------------------------------


async def test_workflows_are_listed_with_turn_counts_newest_first(
    redis_client: Any, local_blob: Any, make_runtime: Callable[..., Any]
) -> None:
    rt = make_runtime(redis=redis_client, blob=local_blob)
    await _log(rt, "older", range(1, 4))
    await _log(rt, "newer", range(1, 6))
    await _log(rt, "newer", range(1, 3))  # re-logged turns count once
    rows = await list_workflows(rt)
    assert [r.workflow_id for r in rows] == ["newer", "older"]
    newer, older = rows
    assert (newer.turns, newer.entries, older.turns, older.entries) == (5, 5, 3, 3)
    assert newer.indexed and newer.blobs
    assert newer.last_activity is not None and abs(newer.last_activity - time.time()) < 60
    assert newer.last_activity >= older.last_activity  # type: ignore[operator]
    assert json.dumps([r.as_dict() for r in rows])  # JSON-able


async def test_the_index_is_written_once_per_refresh_window_not_per_turn(
    redis_client: Any, local_blob: Any, make_runtime: Callable[..., Any]
) -> None:
    rt = make_runtime(redis=redis_client, blob=local_blob)
    index = WorkflowIndex(redis_client, rt.keyspace)
    await _log(rt, "wf", range(1, 2))
    assert "wf" in await index.entries()
    await index.remove("wf")
    await _log(rt, "wf", range(2, 5))
    # No index command within the window: the hot path pays nothing more.
    assert "wf" not in await index.entries()
    ledger = rt.workflow("wf").ledger
    ledger._index_due = 0.0  # the window has passed
    await _log(rt, "wf", range(5, 6))
    assert "wf" in await index.entries()


async def test_rebuild_indexes_ledgers_written_before_the_index(
    redis_client: Any, make_runtime: Callable[..., Any]
) -> None:
    rt = make_runtime(redis=redis_client)
    await _log(rt, "legacy", range(1, 3))
    await redis_client.delete(rt.keyspace.workflow_index())
    assert await list_workflows(rt) == []
    rows = await list_workflows(rt, rebuild=True)
    assert [(r.workflow_id, r.turns) for r in rows] == [("legacy", 2)]
    assert rows[0].indexed


async def test_an_index_entry_whose_ledger_expired_is_dropped(
    redis_client: Any, make_runtime: Callable[..., Any]
) -> None:
    rt = make_runtime(redis=redis_client)
    index = WorkflowIndex(redis_client, rt.keyspace)
    long_ago = int((time.time() - rt.settings.ttl_seconds - 3600) * 1000)
    await index.add("gone", long_ago)
    await index.add("quiet", int(time.time() * 1000))  # recent: kept though empty
    rows = await list_workflows(rt)
    assert [r.workflow_id for r in rows] == ["quiet"]
    assert set(await index.entries()) == {"quiet"}


async def test_blob_only_workflows_are_listed_without_counts(
    local_blob: Any, make_runtime: Callable[..., Any]
) -> None:
    rt = make_runtime(blob=local_blob)
    await _log(rt, "on-disk", range(1, 3))
    rows = await list_workflows(rt)
    assert [(r.workflow_id, r.turns, r.blobs, r.indexed) for r in rows] == [
        ("on-disk", None, True, False)
    ]
    assert await list_workflows(rt, include_blobs=False) == []


async def test_other_namespaces_are_not_listed(
    redis_client: Any, local_blob: Any, make_runtime: Callable[..., Any], make_settings: Any
) -> None:
    mine = make_runtime(redis=redis_client, blob=local_blob)
    other = make_runtime(
        redis=redis_client, blob=local_blob, settings=make_settings(jarvismem_namespace="zz-other")
    )
    await _log(mine, "a", range(1, 2))
    await _log(other, "b", range(1, 2))
    assert [r.workflow_id for r in await list_workflows(mine)] == ["a"]
    assert [r.workflow_id for r in await list_workflows(other)] == ["b"]


# --- delete -------------------------------------------------------------------------------


async def _populate(rt: Any, workflow: str) -> None:
    mem = rt.memory(workflow, "s1", "a1")
    for t in range(1, 4):
        await mem.log_turn(t, f"thought {t}", "act", "res")
    await mem.save_checkpoint('{"step": 1}')
    await mem.working.write("finding", {"x": 1}, scope="goal")
    await mem.spaces.world_put("k", "v")
    await mem.compact_now()


async def test_delete_removes_the_workflow_from_every_tier_and_nothing_else(
    redis_client: Any, local_blob: Any, make_runtime: Callable[..., Any], tmp_path: Path
) -> None:
    rt = make_runtime(redis=redis_client, blob=local_blob)
    await _populate(rt, "doomed")
    await _log(rt, "keeper", range(1, 3))
    ks = rt.keyspace
    # A queued write left by a process that could not reach Redis.
    outbox = Path(rt.settings.outbox_path) / ks.outbox_file("redis", "doomed", "0123456789abcdef")
    outbox.parent.mkdir(parents=True, exist_ok=True)
    outbox.write_text('{"seq":1,"rec":{"op":"turn"}}\n')
    keys, blobs = await _everything(rt, "doomed")
    assert ks.ledger("doomed") in keys and ks.ltm_summary("doomed") in keys
    assert ks.goals("doomed", "s1", "a1") in blobs and ks.ltm_blob("doomed") in blobs

    plan = await delete_workflow(rt, "doomed", dry_run=True)
    assert plan.dry_run and set(keys) <= set(plan.redis_keys) and set(blobs) == set(plan.blobs)
    assert str(outbox) in plan.outbox_files and plan.indexed
    assert await _everything(rt, "doomed") == (keys, blobs)  # a dry run deletes nothing

    report = await delete_workflow(rt, "doomed")
    assert not report.raced
    assert await _everything(rt, "doomed") == ([], [])
    assert not outbox.exists()
    rows = await list_workflows(rt)
    assert [r.workflow_id for r in rows] == ["keeper"]
    assert rows[0].turns == 2
    assert (await delete_workflow(rt, "doomed", dry_run=True)).empty


async def test_a_turn_after_a_delete_is_stored_not_taken_for_a_duplicate(
    redis_client: Any, local_blob: Any, make_runtime: Callable[..., Any]
) -> None:
    rt = make_runtime(redis=redis_client, blob=local_blob)
    await _log(rt, "wf", range(1, 3))
    await delete_workflow(rt, "wf")
    other = make_runtime(redis=redis_client, blob=local_blob)  # a fresh process
    await _log(other, "wf", range(1, 2))
    bundle = await other.memory("wf", "s1", "a1").rehydrate_bundle()
    assert [t["thought"] for t in bundle["recent_turns"]] == ["thought 1"]
    assert [r.workflow_id for r in await list_workflows(other)] == ["wf"]


async def test_a_write_racing_the_delete_is_reported_and_keeps_its_index_entry(
    redis_client: Any, local_blob: Any, make_runtime: Callable[..., Any], monkeypatch: Any
) -> None:
    rt = make_runtime(redis=redis_client, blob=local_blob)
    writer = make_runtime(redis=redis_client, blob=local_blob)
    await _log(writer, "wf", range(1, 3))
    real_delete = local_blob.delete
    raced = False

    async def delete_and_race(path: str) -> bool:
        nonlocal raced
        if not raced:  # after the Redis keys went, before the index entry goes
            raced = True
            writer.workflow("wf").ledger._index_due = 0.0
            await _log(writer, "wf", range(3, 4))
        return bool(await real_delete(path))

    monkeypatch.setattr(local_blob, "delete", delete_and_race)
    report = await delete_workflow(rt, "wf")
    assert report.raced
    rows = await list_workflows(rt, include_blobs=False)
    assert [(r.workflow_id, r.turns) for r in rows] == [("wf", 1)]


@pytest.mark.parametrize("bad", ["../etc", "a/b", "{x}", "", "a*"])
async def test_delete_refuses_an_unsafe_id_before_touching_anything(
    redis_client: Any, local_blob: Any, make_runtime: Callable[..., Any], bad: str
) -> None:
    rt = make_runtime(redis=redis_client, blob=local_blob)
    with pytest.raises(InvalidIdError):
        await delete_workflow(rt, bad)


# --- Redis Cluster ------------------------------------------------------------------------


@pytest.mark.integration
async def test_list_and_delete_on_a_redis_cluster(
    cluster: RedisCluster, local_blob: Any, make_runtime: Callable[..., Any]
) -> None:
    rt = make_runtime(redis=cluster, blob=local_blob)
    names = [f"wf-{i}" for i in range(8)]  # spread over the three masters
    try:
        for name in names:
            await _log(rt, name, range(1, 3))
        await rt.memory("wf-0", "s1", "a1").save_checkpoint("{}")
        rows = await list_workflows(rt)
        assert sorted(r.workflow_id for r in rows) == names
        assert {r.turns for r in rows} == {2}
        await cluster.delete(rt.keyspace.workflow_index())
        assert len(await list_workflows(rt, rebuild=True, include_blobs=False)) == len(names)
        report = await delete_workflow(rt, "wf-0")
        assert rt.keyspace.checkpoint("wf-0", "s1") in report.redis_keys
        assert await _everything(rt, "wf-0") == ([], [])
        assert sorted(r.workflow_id for r in await list_workflows(rt)) == names[1:]
    finally:
        for name in names:
            await delete_workflow(rt, name)
        await cluster.delete(rt.keyspace.workflow_index())
