"""Import: a faithful round trip, refusals of a non-empty target, what needs which store."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from jarvismem.keys import KeySpace
from jarvismem.runtime import MemoryRuntime
from jarvismem.tiers.episodic import WorkflowIndex
from jarvismem.transfer import (
    TransferError,
    export_workflow,
    import_workflow,
    importer,
    recover_import,
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
    if target.redis is not None:
        # Listed by `jarvismem workflows` without a rebuild (nothing else wrote to it yet).
        assert "wf1" in await WorkflowIndex(target.redis, target.keyspace).entries()
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


# --- all or nothing: a rejected or failed import leaves the target exactly as it was ---


async def _dump(rt: MemoryRuntime, redis: Any) -> dict[str, Any]:
    """Every key of the runtime's namespace with its type and content, and every blob."""
    keys: dict[str, Any] = {}
    async for raw in redis.scan_iter(match=f"jm:{rt.keyspace.namespace}:*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        kind = await redis.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "hash":
            value: Any = await redis.hgetall(key)
        elif kind == "stream":
            value = await redis.xrange(key)
        elif kind == "zset":
            value = await redis.zrange(key, 0, -1, withscores=True)
        else:
            value = await redis.get(key) if kind == "string" else kind
        keys[key] = (kind, value)
    blobs: dict[str, bytes] = {}
    if rt.blob is not None:
        for path in await rt.blob.list(""):
            blobs[path] = await rt.blob.read(path)
    return {"keys": keys, "blobs": blobs}


def _lasting(keys: dict[str, Any]) -> dict[str, Any]:
    """``keys`` without the short-lived operation-id records of spaces and checkpoints."""
    return {k: v for k, v in keys.items() if not re.search(r":(spaceops|ckops):", k)}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def _last_ledger_id(records: list[dict[str, Any]]) -> tuple[int, int]:
    ms, seq = [r for r in records if r.get("kind") == "ledger"][-1]["id"].split("-")
    return int(ms), int(seq)


def _bad_line(kind: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """One line that breaks a rule of ``kind``, placed after every valid line."""
    ms, _seq = _last_ledger_id(records)
    turn = {"step_id": "s9", "agent_id": "a9", "turn_id": 1, "thought": "t"}
    snapshot = next(r for r in records if r.get("kind") == "spaces")["snapshot"]
    if kind == "out-of-order":
        return {"kind": "ledger", "id": "1-0", "fields": turn}
    if kind == "zero-id":
        return {"kind": "ledger", "id": "0-0", "fields": turn}
    if kind == "id-above-64-bits":
        return {"kind": "ledger", "id": f"{2**64}-0", "fields": turn}
    if kind == "invalid-step-id":
        return {"kind": "ledger", "id": f"{ms + 1}-0", "fields": {**turn, "step_id": "../x"}}
    if kind == "duplicate-turn":
        first = next(r for r in records if r.get("kind") == "ledger")
        return {"kind": "ledger", "id": f"{ms + 1}-0", "fields": first["fields"]}
    if kind == "checkpoint-rev-above-2^53":
        return {"kind": "checkpoint", "step_id": "s9", "state": "x", "rev": 2**53}
    if kind == "spaces-rev-above-2^53":
        return {"kind": "spaces", "agent_id": "a9", "snapshot": {**snapshot, "rev": 2**63}}
    if kind == "record-over-append-limit":
        record = {"type": "note", "text": "x" * (4 * 1024 * 1024)}
        return {"kind": "scratchpad", "step_id": "s9", "agent_id": "a9", "record": record}
    raise AssertionError(kind)


REJECTIONS = [
    "out-of-order",
    "zero-id",
    "id-above-64-bits",
    "invalid-step-id",
    "duplicate-turn",
    "checkpoint-rev-above-2^53",
    "spaces-rev-above-2^53",
    "record-over-append-limit",
]


@pytest.mark.parametrize("kind", REJECTIONS)
async def test_a_rejected_file_writes_nothing_and_a_retry_works(
    make_store_runtime: MakeRuntime, redis_client: Any, tmp_path: Path, kind: str
) -> None:
    # Regression: out-of-order ids, 0-0 and an invalid step id
    # were refused by Redis in the middle of the writes, after checkpoints and the
    # summary, and with --force after the old workflow had been cleared.
    rt = make_store_runtime()
    await populate(rt, "wf1")
    good = tmp_path / "wf1.jsonl"
    await _export(rt, "wf1", good)
    records = _lines(good)
    bad = _write(tmp_path / "bad.jsonl", [*records, _bad_line(kind, records)])
    before = await _dump(rt, redis_client)
    with pytest.raises(TransferError, match=r"^line \d+: "):
        await import_workflow(rt, bad, force=True)
    with pytest.raises(TransferError, match=r"^line \d+: "):
        await import_workflow(rt, bad, workflow_id="wf2")
    assert await _dump(rt, redis_client) == before
    # Nothing was half written: the good file imports under the other id.
    result = await import_workflow(rt, good, workflow_id="wf2")
    assert result["records"] == len(records) - 1


async def test_an_out_of_order_ledger_leaves_nothing_and_does_not_block_a_retry(
    make_store_runtime: MakeRuntime, tmp_path: Path
) -> None:
    # Regression as reported: the failed import left a
    # partial workflow, and the retry said "already holds data".
    rt = make_store_runtime()
    turn = {"step_id": "s", "agent_id": "a", "turn_id": 1, "thought": "t"}
    path = _file(
        tmp_path,
        {"kind": "checkpoint", "step_id": "s", "state": "x", "rev": 3},
        {"kind": "summary", "text": "so far"},
        {"kind": "ledger", "id": "5-0", "fields": turn},
        {"kind": "ledger", "id": "4-0", "fields": {**turn, "turn_id": 2}},
    )
    with pytest.raises(TransferError, match="line 5: ledger id 4-0 is not above 5-0"):
        await import_workflow(rt, path, workflow_id="wfr")
    assert await workflow_is_empty(rt, "wfr")
    lines = _lines(path)
    lines[-1]["id"] = "6-0"
    await import_workflow(rt, _write(path, lines), workflow_id="wfr")
    ckpt = await rt.memory("wfr", "s", "a").load_checkpoint_record()
    assert ckpt is not None and ckpt.rev == 3


class _Boom(Exception):
    pass


@pytest.mark.parametrize("after", [0, 3, 20, -1], ids=["first", "3", "20", "before-switch"])
@pytest.mark.parametrize("force", [False, True], ids=["fresh", "force"])
async def test_a_failure_before_the_switch_leaves_the_target_as_it_was(
    make_store_runtime: MakeRuntime,
    redis_client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    after: int,
    force: bool,
) -> None:
    rt = make_store_runtime()
    await populate(rt, "wf1")
    path = tmp_path / "wf1.jsonl"
    await _export(rt, "wf1", path)
    target = "wf1" if force else "wf2"
    before = await _dump(rt, redis_client)
    bundle = await rt.memory("wf1", "s1", "a1").rehydrate_bundle()
    original_add = importer.RecordWriter.add
    seen = 0

    async def failing_add(self: importer.RecordWriter, rec: Any) -> None:
        nonlocal seen
        if seen == after:
            raise _Boom("injected")
        seen += 1
        await original_add(self, rec)

    async def failing_switch(*args: Any, **kwargs: Any) -> None:
        raise _Boom("injected before the switch")

    if after >= 0:
        monkeypatch.setattr(importer.RecordWriter, "add", failing_add)
    else:
        monkeypatch.setattr(importer, "_switch", failing_switch)
    with pytest.raises(_Boom):
        await import_workflow(rt, path, workflow_id=target, force=force)
    # The old data stayed in place throughout; the staging is gone.
    assert await _dump(rt, redis_client) == before
    monkeypatch.undo()
    await import_workflow(rt, path, workflow_id=target, force=force)
    assert await rt.memory(target, "s1", "a1").rehydrate_bundle() == bundle


async def test_a_crash_mid_import_is_cleaned_up_by_the_retry(
    make_store_runtime: MakeRuntime,
    redis_client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A killed importer runs no cleanup: simulated by a failure with the cleanup disabled.
    rt = make_store_runtime()
    await populate(rt, "wf1")
    path = tmp_path / "wf1.jsonl"
    await _export(rt, "wf1", path)
    before = await _dump(rt, redis_client)

    async def no_cleanup(*args: Any) -> None:
        return None

    async def failing_switch(*args: Any, **kwargs: Any) -> None:
        raise _Boom("killed")

    monkeypatch.setattr(importer, "_discard_staging", no_cleanup)
    monkeypatch.setattr(importer, "_switch", failing_switch)
    with pytest.raises(_Boom):
        await import_workflow(rt, path, workflow_id="wf2")
    left = await _dump(rt, redis_client)
    staged = [k for k in left["keys"] if k not in before["keys"]]
    assert staged and all("~import-" in k for k in staged)
    assert all(p.startswith("staging/imports/") for p in set(left["blobs"]) - set(before["blobs"]))
    assert await workflow_is_empty(rt, "wf2")  # staging is not the workflow's data
    monkeypatch.undo()
    await import_workflow(rt, path, workflow_id="wf2")  # no "already holds data"
    after = await _dump(rt, redis_client)
    assert not [k for k in after["keys"] if "~import-" in k]
    assert not [p for p in after["blobs"] if p.startswith("staging/")]


async def test_a_crash_between_the_key_switch_and_the_blob_move_is_recovered(
    make_store_runtime: MakeRuntime,
    redis_client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = make_store_runtime("src")
    await populate(source, "wf1")
    path = tmp_path / "wf1.jsonl"
    await _export(source, "wf1", path)
    rt = make_store_runtime("dst")
    await populate(rt, "wf1")
    await rt.memory("wf1", "s3", "a3").log_turn(1, "old only", "a", "r")  # a blob to drop
    original = importer._move_blobs
    calls = 0

    async def crash_once(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise _Boom("killed after the switch")
        await original(*args)

    monkeypatch.setattr(importer, "_move_blobs", crash_once)
    with pytest.raises(_Boom):
        await import_workflow(rt, path, force=True)
    assert await redis_client.exists(rt.keyspace.import_pending("wf1"))
    await recover_import(rt, "wf1")
    assert not await redis_client.exists(rt.keyspace.import_pending("wf1"))
    for step, agent in STEPS:
        want = await source.memory("wf1", step, agent).rehydrate_bundle(ledger_tail=20)
        assert await rt.memory("wf1", step, agent).rehydrate_bundle(ledger_tail=20) == want
    assert rt.blob is not None
    assert not await rt.blob.exists(rt.keyspace.scratchpad("wf1", "s3", "a3"))
    assert not await rt.blob.list("staging/")


async def test_force_replaces_in_one_switch_and_drops_what_the_file_lacks(
    make_store_runtime: MakeRuntime, redis_client: Any, tmp_path: Path
) -> None:
    rt = make_store_runtime()
    await populate(rt, "wf1")
    await rt.memory("wf1", "s3", "a3").save_checkpoint("old state only")
    turn = {"step_id": "s", "agent_id": "a", "turn_id": 1, "thought": "t"}
    path = _file(tmp_path, {"kind": "ledger", "id": "9-0", "fields": turn})
    await import_workflow(rt, path, workflow_id="wf1", force=True)
    suffixes = {
        k.rsplit("}:", 1)[1] for k in (await _dump(rt, redis_client))["keys"] if "{wf1}" in k
    }
    assert suffixes == {"ledger", "turns"}
    assert rt.blob is not None and not await rt.blob.list("workflows/wf1/")
    assert await rt.memory("wf1", "s3", "a3").load_checkpoint() is None


@pytest.mark.parametrize(
    "data",
    [b"", b"\n{}", b"\n{}\n{}\n{}", b"legacy\n{}", b"\n" + b"x" * 40 + b"\n{}", b"\n\n{}"],
)
def test_append_chunks_cut_between_records_and_join_back(data: bytes) -> None:
    chunks = importer.append_chunks(data, 10)
    assert b"".join(chunks) == data
    assert all(len(c) <= 10 or c.count(b"\n") <= 1 for c in chunks)


async def test_an_imported_scratchpad_stays_appendable_on_every_blob_backend(
    redis_client: Any,
    blob_storage: Any,
    make_settings: Any,
    make_runtime: MakeRuntime,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    # Azure refuses to append to a block blob: a moved scratchpad must be rebuilt by appends.
    rt = make_runtime(
        settings=make_settings(jarvismem_namespace=keyspace.namespace),
        redis=redis_client,
        blob=blob_storage,
    )
    await populate(rt, "wf1")
    path = tmp_path / "wf1.jsonl"
    await _export(rt, "wf1", path)
    await import_workflow(rt, path, force=True)
    await import_workflow(rt, path, workflow_id="wf2")
    for wf in ("wf1", "wf2"):
        mem = rt.memory(wf, "s1", "a1")
        assert mem.working is not None
        await mem.working.write("note", f"after the import of {wf}")
        notes = await mem.working.read_records()
        assert notes[-1]["data"] == f"after the import of {wf}"
    assert not await blob_storage.list("staging/")


# --- a real crash: the importer process killed (os._exit, no cleanup) at several points ---

_REPO_ROOT = str(Path(__file__).resolve().parents[2])
"""The worktree whose code the child process must run (not an installed copy)."""

_CHILD = """
import asyncio, os, sys
from pathlib import Path

from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from jarvismem.transfer import importer

redis_url, blobs, namespace, export, where = sys.argv[1:6]
point, _, count = where.partition(":")
left = int(count or 0)


def crash_point(fn, *, run_first=False):
    async def wrapped(*args, **kwargs):
        global left
        if run_first:
            result = await fn(*args, **kwargs)
            os._exit(9)
        if left == 0:
            os._exit(9)
        left -= 1
        return await fn(*args, **kwargs)
    return wrapped


if point == "add":
    importer.RecordWriter.add = crash_point(importer.RecordWriter.add)
elif point == "before-switch":
    importer._switch = crash_point(importer._switch)
elif point == "after-switch":
    importer._switch = crash_point(importer._switch, run_first=True)
elif point == "move":
    chunks = importer.append_chunks

    def crashing_chunks(data, limit):
        global left
        if left == 0:
            os._exit(9)
        left -= 1
        return chunks(data, limit)

    importer.append_chunks = crashing_chunks


async def main():
    settings = load_settings(
        _env_file=None, redis_url=redis_url, storage_base_path=Path(blobs),
        jarvismem_namespace=namespace, outbox_path=Path(blobs) / "outbox",
        compaction_enabled=False,
    )
    rt = await MemoryRuntime.from_env(settings)
    async with rt:
        await importer.import_workflow(rt, Path(export), force=True)


asyncio.run(main())
"""


@pytest.mark.integration
@pytest.mark.parametrize(
    "where", ["add:0", "add:5", "add:25", "before-switch", "after-switch", "move:0", "move:2"]
)
async def test_an_importer_killed_at_any_point_leaves_old_or_new_and_a_retry_succeeds(
    real_redis: Any,
    make_settings: Any,
    make_runtime: MakeRuntime,
    keyspace: KeySpace,
    tmp_path: Path,
    where: str,
) -> None:
    from jarvismem.backends.blob.local import LocalBlobStorage
    from tests.conftest import REAL_REDIS_URL

    blob_root = tmp_path / "target-blobs"
    blob = LocalBlobStorage(blob_root)
    source = make_runtime(
        settings=make_settings(), redis=real_redis, blob=LocalBlobStorage(tmp_path / "src")
    )
    await populate(source, "wf1")
    path = tmp_path / "wf1.jsonl"
    await _export(source, "wf1", path)
    want = {s: await source.memory("wf1", s, a).rehydrate_bundle(ledger_tail=30) for s, a in STEPS}
    # The target holds an older, different copy of wf1 (the source itself, in another namespace).
    target = make_runtime(
        settings=make_settings(
            jarvismem_namespace=keyspace.namespace + "t", storage_base_path=blob_root
        ),
        redis=real_redis,
        blob=blob,
    )
    await populate(target, "wf1")
    await target.memory("wf1", "s3", "a3").log_turn(1, "old only", "a", "r")
    old = await _dump(target, real_redis)
    child = tmp_path / "child.py"
    child.write_text(_CHILD)
    env = {**os.environ, "PYTHONPATH": _REPO_ROOT}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(child),
        REAL_REDIS_URL,
        str(blob_root),
        target.keyspace.namespace,
        str(path),
        where,
        env=env,
        cwd=str(tmp_path),
    )
    assert await proc.wait() == 9, "the importer was meant to be killed"
    now = await _dump(target, real_redis)
    live = {k: v for k, v in now["keys"].items() if "~import-" not in k}
    if where.startswith(("add", "before-switch")):
        # Killed before the switch: the live workflow is exactly the old one. Save
        # operation records are left out: each expires a second after its save's
        # deadline, so whether one is still there depends only on how long the
        # child took (seconds, on a loaded machine).
        assert _lasting(live) == _lasting(old["keys"])
        assert {p: b for p, b in now["blobs"].items() if not p.startswith("staging/")} == old[
            "blobs"
        ]
    else:
        # Killed after the switch: every key is the import's; the marker says blobs move.
        assert await real_redis.exists(target.keyspace.import_pending("wf1"))
    # The retry (with --force: the old or new copy is there) completes the job.
    await import_workflow(target, path, force=True)
    for step, agent in STEPS:
        got = await target.memory("wf1", step, agent).rehydrate_bundle(ledger_tail=30)
        assert got == want[step]
    after = await _dump(target, real_redis)
    assert not [k for k in after["keys"] if "~import-" in k or k.endswith(":import")]
    assert not [p for p in after["blobs"] if p.startswith("staging/")]
    assert not await blob.exists(target.keyspace.scratchpad("wf1", "s3", "a3"))
    await blob.close()


# --- Redis Cluster: staging keys share the workflow's slot, so the switch is one script ---


@pytest.mark.integration
async def test_an_import_into_a_redis_cluster_switches_in_one_slot(
    cluster_port: int,
    make_store_runtime: MakeRuntime,
    make_settings: Any,
    make_runtime: MakeRuntime,
    local_blob: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    from redis.asyncio.cluster import RedisCluster

    source = make_store_runtime("src")
    await populate(source, "wf1")
    path = tmp_path / "wf1.jsonl"
    await _export(source, "wf1", path)
    cluster = RedisCluster(host="127.0.0.1", port=cluster_port)
    await cluster.initialize()
    try:
        rt = make_runtime(settings=make_settings(), redis=cluster, blob=local_blob)
        await import_workflow(rt, path)
        await import_workflow(rt, path, force=True)
        for step, agent in STEPS:
            want = await source.memory("wf1", step, agent).rehydrate_bundle(ledger_tail=20)
            assert await rt.memory("wf1", step, agent).rehydrate_bundle(ledger_tail=20) == want
        keys = [k async for k in cluster.scan_iter(match=f"jm:{keyspace.namespace}:*")]
        assert keys and not [k for k in keys if b"~import-" in k]
        for key in keys:
            await cluster.delete(key)
    finally:
        await cluster.aclose()


SECRET_PEM = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
)
PLANTED = (
    "hunter2-planted",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "hf_" + "a" * 34,
    "MIIEvQIBAD",
)


def _plant(record: dict[str, Any]) -> dict[str, Any]:
    """One record of an export file with a secret added in its kind's text fields."""
    kind = record.get("kind")
    if kind == "ledger":
        record["fields"]["thought"] = f"key {PLANTED[1]}"
        record["fields"]["action"] = {"password": PLANTED[0], "tool": "login"}
    elif kind == "summary":
        record["text"] += f"\nused {PLANTED[2]}"
    elif kind == "checkpoint":
        record["state"] = json.dumps({"api_key": PLANTED[0], "pem": SECRET_PEM})
    elif kind in ("scratchpad", "goals"):
        record["record"]["data"] = {"token": PLANTED[0], "note": f"hf {PLANTED[2]}"}
    elif kind == "spaces":
        record["snapshot"]["spaces"]["world"]["data"]["password"] = PLANTED[0]
    return record


async def test_an_imported_file_is_redacted_like_any_write(
    make_store_runtime: MakeRuntime, keyspace: KeySpace, tmp_path: Path, redis_client: Any
) -> None:
    """An export file may come from anyone: its secrets are not stored by the import."""
    source = make_store_runtime("src")
    target = make_store_runtime("dst", namespace=keyspace.namespace + "sec")
    await populate(source, "wf1")
    records = await _export(source, "wf1", tmp_path / "clean.jsonl")
    planted = _write(tmp_path / "planted.jsonl", [records[0], *map(_plant, records[1:])])
    await import_workflow(target, planted)
    # Everything the target holds (keys and blobs), searched as text.
    stored = repr(await _dump(target, redis_client))
    for secret in PLANTED:
        assert secret not in stored, secret
    assert "[REDACTED]" in stored


@pytest.mark.integration
async def test_an_import_into_a_redis_out_of_memory_raises_a_jarvismem_error(
    redis_server: Any,
    local_blob: Any,
    make_runtime: MakeRuntime,
    tmp_path: Path,
) -> None:
    """A real OOM (``maxmemory 1``): the import raises BackendUnavailableError, not
    redis-py's OutOfMemoryError, and the target is left as it was; once Redis has
    room again the same import works."""
    import redis.asyncio as aioredis

    from jarvismem.errors import BackendUnavailableError

    client: Any = aioredis.Redis.from_url(redis_server.url)
    try:
        rt = make_runtime(redis=client, blob=local_blob)
        mem = rt.memory("wf1", "s1", "a1")
        # Turns only: the ledger's own batched writes are the first to meet the OOM.
        for turn in range(1, TURNS + 1):
            await mem.log_turn(turn, f"thinks {turn}", {"n": turn}, f"ok {turn}", tokens=3)
        path = tmp_path / "wf1.jsonl"
        await _export(rt, "wf1", path)
        bundle = await rt.memory("wf1", "s1", "a1").rehydrate_bundle()
        before = await _dump(rt, client)
        await client.config_set("maxmemory", 1)
        try:
            with pytest.raises(BackendUnavailableError, match="OutOfMemoryError"):
                await import_workflow(rt, path, force=True)
            assert await _dump(rt, client) == before
        finally:
            await client.config_set("maxmemory", 0)
        await import_workflow(rt, path, force=True)
        assert await rt.memory("wf1", "s1", "a1").rehydrate_bundle() == bundle
    finally:
        await client.aclose()
