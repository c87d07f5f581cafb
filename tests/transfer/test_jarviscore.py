"""Migration from JarvisCore: data written by the real reference package, then migrated.

The reference (``jarviscore-framework`` 3.0.0 from PyPI) runs in a venv of its own
(:mod:`tests.transfer._reference`), on a private ``redis-server`` (its keys are
not namespaced) and a blob folder of the test; jarvismem then migrates from the
same server and folder into a namespace of the test, and the bundles are compared.
The unit tests below write the reference's formats by hand (fakeredis).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.errors import ConfigError, InvalidIdError
from jarvismem.keys import KeySpace
from jarvismem.runtime import MemoryRuntime
from jarvismem.transfer.format import TransferError
from jarvismem.transfer.jarviscore import (
    ROLELESS_AGENT,
    JarvisCoreSource,
    list_jarviscore_workflows,
    migrate_from_jarviscore,
    split_scratchpad_name,
    target_digest,
)
from jarvismem.transfer.workflow import workflow_is_empty
from tests.reference_env import run_reference_text

# --- the reference's own formats, written as its RedisContextStore / WorkingScratchpad do ----


def ref_fields(entry: dict[str, Any]) -> dict[str, str]:
    """``append_ledger_entry``'s encoding: a str as is, anything else json.dumps'd."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in entry.items()}


def ref_turn(turn_id: str, ts: float, thought: Any, action: Any, result: Any) -> dict[str, Any]:
    return {"turn_id": turn_id, "ts": ts, "thought": thought, "action": action,
            "result": result, "tokens": 2}  # fmt: skip


def ref_line(entry_type: str, data: dict[str, Any], scope: str = "step") -> str:
    return json.dumps({"type": entry_type, "scope": scope, **data}, ensure_ascii=False)


@pytest.fixture
def fake_redis() -> Any:
    import fakeredis

    return fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())


@pytest.fixture
async def ref_blob(tmp_path: Path) -> AsyncIterator[LocalBlobStorage]:
    blob = LocalBlobStorage(tmp_path / "jarviscore-blobs")
    yield blob
    await blob.close()


@pytest.fixture
def target(
    fake_redis: Any,
    tmp_path: Path,
    make_settings: Callable[..., Any],
    make_runtime: Callable[..., MemoryRuntime],
) -> Callable[..., MemoryRuntime]:
    """``target(namespace=None)``: a jarvismem runtime on the same Redis, own blob folder."""

    def make(namespace: str | None = None) -> MemoryRuntime:
        overrides = {"jarvismem_namespace": namespace} if namespace else {}
        settings = make_settings(**overrides)
        blob = LocalBlobStorage(tmp_path / "jarvismem-blobs")
        return make_runtime(settings=settings, redis=fake_redis, blob=blob)

    return make


async def write_reference(redis: Any, blob: LocalBlobStorage, wf: str = "wf-1") -> None:
    """A small JarvisCore workflow: two turns, a goal finding, a note, checkpoint, summary."""
    t1 = ref_turn("t1", 1700000000.25, "42", "http_get", "null")
    t2 = ref_turn("t2", 1700000001.5, {"a": 1}, "x", [1, 2])
    await redis.xadd(f"ledgers:{wf}", ref_fields(t1), id="1700000000250-0")
    await redis.xadd(f"ledgers:{wf}", {"event": "workflow_cancelled", "timestamp": "17.5"},
                     id="1700000000900-0")  # fmt: skip
    await redis.xadd(f"ledgers:{wf}", ref_fields(t2), id="1700000001500-0")
    await redis.set(f"checkpoint:{wf}:step_1", json.dumps({"next": 3}))
    await redis.set(f"ltm:{wf}", "what happened so far")
    lines = [
        ref_line("turn", t1),
        ref_line("finding", {"content": "OAuth2 at /oauth/token"}, "goal"),
        ref_line("turn", t2),
        ref_line("attempt", {"content": "GET /v1 404"}),
    ]
    await blob.write(f"workflows/{wf}/scratchpads/step_1_researcher.md", "\n".join(lines).encode())


# --- unit: conversion rules -----------------------------------------------------------------


def test_a_scratchpad_name_splits_at_a_known_step_else_at_its_last_underscore() -> None:
    assert split_scratchpad_name("step_1_data_analyst", {"step_1"}) == (
        "step_1",
        "data_analyst",
        False,
    )
    assert split_scratchpad_name("step_1_researcher", set()) == ("step_1", "researcher", True)
    assert split_scratchpad_name("s1_researcher", set()) == ("s1", "researcher", False)
    assert split_scratchpad_name("step_1", {"step_1"}) == ("step_1", ROLELESS_AGENT, False)
    assert split_scratchpad_name("plan", set()) == ("plan", ROLELESS_AGENT, False)


async def test_turns_get_their_step_agent_and_true_types_from_the_scratchpad_copy(
    fake_redis: Any, ref_blob: LocalBlobStorage, target: Callable[..., MemoryRuntime]
) -> None:
    await write_reference(fake_redis, ref_blob)
    rt = target()
    report = await migrate_from_jarviscore(rt, JarvisCoreSource(fake_redis, ref_blob), ["wf-1"])
    [wf] = report["workflows"]
    assert wf["status"] == "imported"
    assert wf["counts"] == {"checkpoint": 1, "goals": 1, "ledger": 3, "scratchpad": 4,
                            "summary": 1}  # fmt: skip
    mem = rt.memory("wf-1", "step_1", "researcher")
    bundle = await mem.rehydrate_bundle()
    turns = bundle["recent_turns"]
    assert [t["id"] for t in turns] == ["1700000000250-0", "1700000000900-0", "1700000001500-0"]
    # The reference would read these back as 42 and None; the caller wrote strings.
    assert turns[0]["thought"] == "42" and turns[0]["result"] == "null"
    assert turns[0]["step_id"] == "step_1" and turns[0]["agent_id"] == "researcher"
    assert turns[2]["thought"] == {"a": 1} and turns[2]["result"] == [1, 2]
    # A non-turn entry is read the way the reference reads it.
    assert turns[1] == {"id": "1700000000900-0", "event": "workflow_cancelled", "timestamp": 17.5}
    assert bundle["checkpoint"] == json.dumps({"next": 3})
    assert bundle["ltm_summary"] == "what happened so far"
    assert "OAuth2 at /oauth/token" in bundle["scratchpad"]
    # Exactly-once: logging a migrated turn again is a duplicate, not a new entry.
    await mem.log_turn("t1", "again", "again", "again")
    assert len((await mem.rehydrate_bundle())["recent_turns"]) == 3
    # Goal findings carry into another step's view, as jarvismem's own do.
    assert mem.working is not None
    findings = await mem.working.workflow_goal_findings()
    assert [f["data"] for f in findings] == [{"content": "OAuth2 at /oauth/token"}]


async def test_running_it_twice_changes_nothing(
    fake_redis: Any, ref_blob: LocalBlobStorage, target: Callable[..., MemoryRuntime]
) -> None:
    await write_reference(fake_redis, ref_blob)
    rt = target()
    source = JarvisCoreSource(fake_redis, ref_blob)
    await migrate_from_jarviscore(rt, source, ["wf-1"])
    before = await target_digest(rt, "wf-1")
    keys = sorted([k async for k in fake_redis.scan_iter(match="jm:*")])
    again = await migrate_from_jarviscore(rt, source)
    assert [w["status"] for w in again["workflows"]] == ["unchanged"]
    assert await target_digest(rt, "wf-1") == before
    assert sorted([k async for k in fake_redis.scan_iter(match="jm:*")]) == keys


async def test_a_target_changed_since_is_refused_unless_forced(
    fake_redis: Any, ref_blob: LocalBlobStorage, target: Callable[..., MemoryRuntime]
) -> None:
    await write_reference(fake_redis, ref_blob)
    rt = target()
    source = JarvisCoreSource(fake_redis, ref_blob)
    await migrate_from_jarviscore(rt, source, ["wf-1"])
    await rt.memory("wf-1", "step_1", "researcher").log_turn("t9", "new", "new", "new")
    with pytest.raises(TransferError, match=r"already holds other data.*--force"):
        await migrate_from_jarviscore(rt, source, ["wf-1"])
    report = await migrate_from_jarviscore(rt, source, ["wf-1"], force=True)
    assert report["workflows"][0]["status"] == "replaced"
    turns = (await rt.memory("wf-1", "step_1", "researcher").rehydrate_bundle())["recent_turns"]
    assert [t.get("turn_id") for t in turns] == ["t1", None, "t2"]


async def test_dry_run_writes_nothing(
    fake_redis: Any, ref_blob: LocalBlobStorage, target: Callable[..., MemoryRuntime]
) -> None:
    await write_reference(fake_redis, ref_blob)
    rt = target()
    report = await migrate_from_jarviscore(
        rt, JarvisCoreSource(fake_redis, ref_blob), ["wf-1"], dry_run=True
    )
    assert report["dry_run"] and report["workflows"][0]["status"] == "would import"
    assert report["totals"]["ledger"] == 3
    assert [k async for k in fake_redis.scan_iter(match="jm:*")] == []
    assert await workflow_is_empty(rt, "wf-1")


async def test_bad_input_is_a_clear_error(
    fake_redis: Any, ref_blob: LocalBlobStorage, target: Callable[..., MemoryRuntime]
) -> None:
    rt = target()
    source = JarvisCoreSource(fake_redis, ref_blob, redis_label="redis://x/0")
    with pytest.raises(TransferError, match="JarvisCore workflow wf-9: nothing found in redis"):
        await migrate_from_jarviscore(rt, source, ["wf-9"])
    with pytest.raises(InvalidIdError, match=r"workflow_id '\.\./etc' is not allowed"):
        await migrate_from_jarviscore(rt, source, ["../etc"])
    assert [k async for k in fake_redis.scan_iter(match="jm:*")] == []


async def test_all_lists_every_workflow_and_reports_unusable_names(
    fake_redis: Any, ref_blob: LocalBlobStorage, target: Callable[..., MemoryRuntime]
) -> None:
    await write_reference(fake_redis, ref_blob, "wf-1")
    await fake_redis.set("ltm:wf-2", "only a summary")
    await fake_redis.xadd("ledgers:bad name", {"event": "x"})
    await ref_blob.write("workflows/wf-3/scratchpads/s1.md", ref_line("note", {"x": 1}).encode())
    source = JarvisCoreSource(fake_redis, ref_blob)
    assert await list_jarviscore_workflows(source) == (["wf-1", "wf-2", "wf-3"], ["bad name"])
    await fake_redis.set("athena_session:researcher", "sess-1")
    report = await migrate_from_jarviscore(target(), source)
    statuses = {w["workflow_id"]: w["status"] for w in report["workflows"]}
    assert statuses == {"wf-1": "imported", "wf-2": "imported", "wf-3": "imported"}
    assert report["athena_sessions"] == {"found": 1, "migrated": 0}
    assert any("'bad name'" in w for w in report["warnings"])
    assert any("athena_session" in w for w in report["warnings"])


async def test_a_turn_logged_twice_and_a_turn_without_scratchpad_stay_unindexed(
    fake_redis: Any, ref_blob: LocalBlobStorage, target: Callable[..., MemoryRuntime]
) -> None:
    a = ref_turn("t1", 1.5, "first", "a", "r")
    b = ref_turn("t1", 2.5, "second", "a", "r")
    orphan = ref_turn("t7", 3.5, "7", "a", "r")
    for n, entry in enumerate((a, b, orphan), start=1):
        await fake_redis.xadd("ledgers:wf-d", ref_fields(entry), id=f"{n}-0")
    lines = "\n".join(ref_line("turn", t) for t in (a, b))
    await ref_blob.write("workflows/wf-d/scratchpads/s1_ag.md", lines.encode())
    rt = target()
    report = await migrate_from_jarviscore(rt, JarvisCoreSource(fake_redis, ref_blob), ["wf-d"])
    warnings = " ".join(report["workflows"][0]["warnings"])
    assert "s1:ag:t1 was logged before" in warnings and "1 turn(s) have no scratchpad" in warnings
    turns = (await rt.memory("wf-d", "s1", "ag").rehydrate_bundle())["recent_turns"]
    assert [(t["thought"], t.get("step_id")) for t in turns] == [
        ("first", "s1"),
        ("second", None),
        ("7", None),  # no scratchpad copy: the stored text, not the reference's int 7
    ]


async def test_the_target_blob_folder_in_the_default_namespace_is_refused(
    fake_redis: Any, tmp_path: Path, target: Callable[..., MemoryRuntime]
) -> None:
    rt = target(namespace="default")
    same = LocalBlobStorage(tmp_path / "jarvismem-blobs")
    with pytest.raises(ConfigError, match="own STORAGE_BASE_PATH in the default namespace"):
        await migrate_from_jarviscore(rt, JarvisCoreSource(fake_redis, same), ["wf-1"])
    await same.close()


# --- integration: data written by the real reference package ---------------------------------

DRIVER = textwrap.dedent(
    """
    import asyncio, json, os
    import redis
    from jarviscore.memory.unified import UnifiedMemory
    from jarviscore.storage.local import LocalBlobStorage
    from jarviscore.storage.redis_store import RedisContextStore

    async def main():
        client = redis.Redis.from_url(os.environ["REF_REDIS_URL"], decode_responses=True)
        store = RedisContextStore(client=client)
        blob = LocalBlobStorage(os.environ["REF_BLOB"])
        out = {}
        a = UnifiedMemory("wf-ref", "step_1", "researcher", redis_store=store, blob_storage=blob)
        await a.log_turn("t1", thought="42", action="http_get", result="null", tokens=5)
        await a.log_turn("t2", thought="look at {x}", action="search", result="3 hits", tokens=7)
        await a.working.write("finding", {"content": "OAuth2 at /oauth/token"}, scope="goal")
        await a.working.write("attempt", {"content": "GET /v1/data 404"})
        await a.save_checkpoint(json.dumps({"next": "t3", "n": 2}))
        b = UnifiedMemory("wf-ref", "step_2", "analyst", redis_store=store, blob_storage=blob)
        await b.log_turn("t1", thought="compare", action="calc", result="ok", tokens=1)
        await b.working.write("finding", {"content": "p95 is 120 ms"}, scope="goal")
        await a.ltm.save_summary("step 1 found the OAuth2 endpoint")
        for name, mem in (("a", a), ("b", b)):
            out[name] = {"bundle": await mem.rehydrate_bundle(),
                         "records": await mem.working.read_all()}
        out["ledger"] = store.get_ledger_full("wf-ref")
        print(json.dumps(out))

    asyncio.run(main())
    """
)

PASSED = {  # what the driver passed to log_turn, per (step, turn)
    ("step_1", "t1"): {"thought": "42", "action": "http_get", "result": "null", "tokens": 5},
    ("step_1", "t2"): {"thought": "look at {x}", "action": "search", "result": "3 hits",
                       "tokens": 7},
    ("step_2", "t1"): {"thought": "compare", "action": "calc", "result": "ok", "tokens": 1},
}  # fmt: skip


@pytest.fixture
async def real_source(redis_server: Any, tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    """The reference's data on a private redis-server: ``(what the reference read, source)``."""
    import redis.asyncio as aioredis

    blob_dir = tmp_path / "jarviscore-blobs"
    env = {"REF_REDIS_URL": redis_server.url, "REF_BLOB": str(blob_dir)}
    seen = json.loads(run_reference_text(DRIVER, cwd=tmp_path, env=env))
    client = aioredis.Redis.from_url(redis_server.url)
    blob = LocalBlobStorage(blob_dir)
    yield seen, JarvisCoreSource(client, blob, redis_label=redis_server.url)
    await blob.close()
    await client.aclose()


@pytest.mark.integration
async def test_data_written_by_the_reference_package_migrates_and_reads_the_same(
    real_source: tuple[Any, JarvisCoreSource],
    tmp_path: Path,
    make_settings: Callable[..., Any],
    make_runtime: Callable[..., MemoryRuntime],
    keyspace: KeySpace,
) -> None:
    seen, source = real_source
    blob = LocalBlobStorage(tmp_path / "jarvismem-blobs")
    rt = make_runtime(settings=make_settings(), redis=source.redis, blob=blob)

    dry = await migrate_from_jarviscore(rt, source, dry_run=True)
    assert [(w["workflow_id"], w["status"]) for w in dry["workflows"]] == [
        ("wf-ref", "would import")
    ]
    assert [k async for k in source.redis.scan_iter(match=f"jm:{keyspace.namespace}:*")] == []
    assert await workflow_is_empty(rt, "wf-ref")

    report = await migrate_from_jarviscore(rt, source)
    [wf] = report["workflows"]
    assert wf["status"] == "imported" and not wf["skipped"], wf
    assert wf["counts"] == {"checkpoint": 1, "goals": 2, "ledger": 3, "scratchpad": 6,
                            "summary": 1}  # fmt: skip

    for name, step, agent in (("a", "step_1", "researcher"), ("b", "step_2", "analyst")):
        ref = seen[name]["bundle"]
        mine = await rt.memory("wf-ref", step, agent).rehydrate_bundle()
        assert mine["ltm_summary"] == ref["ltm_summary"] == "step 1 found the OAuth2 endpoint"
        assert mine["checkpoint"] == ref["checkpoint"]
        # Same entries, same stream ids, same order.
        assert [t["id"] for t in mine["recent_turns"]] == [t["_id"] for t in ref["recent_turns"]]
        for jm, jc in zip(mine["recent_turns"], ref["recent_turns"], strict=True):
            step_id = jm["step_id"]
            assert jm["turn_id"] == jc["turn_id"] and jm["ts"] == jc["ts"]
            assert {k: jm[k] for k in ("thought", "action", "result", "tokens")} == (
                PASSED[(step_id, jm["turn_id"])]
            )
        # The reference mangled the strings "42" and "null" on the way back; jarvismem did not.
        first = ref["recent_turns"][0]
        assert (first["thought"], first["result"]) == (42, None)
        # Its notes (goal findings) are in jarvismem's scratchpad rendering too.
        for line in ref["scratchpad"].splitlines()[1:]:
            content = json.loads(line.split(": ", 1)[1])["content"]
            assert content in mine["scratchpad"]
        # Every scratchpad record, with its type, scope and data.
        mem = rt.memory("wf-ref", step, agent)
        assert mem.working is not None
        # read_all answers in JarvisCore's flat shape: the very records it returned.
        assert await mem.working.read_all() == seen[name]["records"]

    # The finding of step 1 reaches step 2's view (goal scope carried forward).
    step2 = rt.memory("wf-ref", "step_2", "analyst")
    assert step2.working is not None
    contents = [f["data"]["content"] for f in await step2.working.workflow_goal_findings()]
    assert sorted(contents) == ["OAuth2 at /oauth/token", "p95 is 120 ms"]

    # The second run changes nothing.
    before = await target_digest(rt, "wf-ref")
    again = await migrate_from_jarviscore(rt, source)
    assert [w["status"] for w in again["workflows"]] == ["unchanged"]
    assert await target_digest(rt, "wf-ref") == before
    await blob.close()
