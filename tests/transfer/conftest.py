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

MakeRuntime = Callable[..., MemoryRuntime]

STEPS = (("s1", "a1"), ("s2", "a2"))
TURNS = 7


@pytest.fixture
async def make_store_runtime(
    redis_client: Any,
    local_blob: LocalBlobStorage,
    keyspace: KeySpace,
    tmp_path: Path,
    make_settings: Callable[..., Any],
    make_runtime: MakeRuntime,
) -> AsyncIterator[MakeRuntime]:
    """``make_store_runtime(blob_dir=None, namespace=None)``: a runtime over ``redis_client``
    and a local blob folder (``local_blob``, or ``tmp_path / blob_dir``), in the test's
    namespace or ``namespace``; closed, and its keys removed, after the test."""
    made: list[MemoryRuntime] = []
    extra_blobs: list[LocalBlobStorage] = []

    def make(blob_dir: str | None = None, *, namespace: str | None = None) -> MemoryRuntime:
        blob = local_blob
        if blob_dir is not None:
            blob = LocalBlobStorage(tmp_path / blob_dir)
            extra_blobs.append(blob)
        settings = make_settings(jarvismem_namespace=namespace or keyspace.namespace)
        rt = make_runtime(settings=settings, redis=redis_client, blob=blob)
        made.append(rt)
        return rt

    yield make
    # Closed here, before the blob folders they write to (make_runtime's own close
    # afterwards finds them closed; redis_client's teardown deletes every namespace).
    for rt in made:
        await rt.close()
    for blob in extra_blobs:
        await blob.close()


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
