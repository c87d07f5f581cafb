"""Fixtures of the export/import tests: runtimes over the shared Redis client, populated."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.keys import KeySpace
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings

MakeRuntime = Callable[..., MemoryRuntime]

STEPS = (("s1", "a1"), ("s2", "a2"))
TURNS = 7


@pytest.fixture
async def make_runtime(
    redis_client: Any, keyspace: KeySpace, tmp_path: Path
) -> AsyncIterator[MakeRuntime]:
    """``make_runtime(blob_dir, namespace=None)``: a runtime over ``redis_client`` and a
    local blob folder under ``tmp_path``; closed, and its keys removed, after the test."""
    made: list[MemoryRuntime] = []

    def make(blob_dir: str = "blobs", *, namespace: str | None = None) -> MemoryRuntime:
        settings = load_settings(
            _env_file=None,
            jarvismem_namespace=namespace or keyspace.namespace,
            outbox_path=tmp_path / "outbox",
            compaction_enabled=False,
        )
        rt = MemoryRuntime(settings, redis=redis_client, blob=LocalBlobStorage(tmp_path / blob_dir))
        made.append(rt)
        return rt

    yield make
    for rt in made:
        await rt.close()
    # The shared fixture cleans the test's own namespace; the others are ours.
    for ns in {rt.keyspace.namespace for rt in made} - {keyspace.namespace}:
        keys = [k async for k in redis_client.scan_iter(match=f"jm:{ns}:*")]
        if keys:
            await redis_client.delete(*keys)


async def populate(rt: MemoryRuntime, wf: str) -> None:
    """Something in every tier of ``wf``: turns, two checkpoint revisions per step,
    notes and goal findings, spaces, and a long-term summary."""
    for step, agent in STEPS:
        mem = rt.memory(wf, step, agent)
        for turn in range(1, TURNS + 1):
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
