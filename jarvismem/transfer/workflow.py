"""What one workflow holds across the stores: its Redis keys and its blobs.

Shared by the exporter (what to read) and the importer (is the target empty,
clear it for ``--force``).
"""

from __future__ import annotations

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.keys import KeySpace
from jarvismem.records import as_text
from jarvismem.runtime import MemoryRuntime


async def workflow_keys(rt: MemoryRuntime, workflow_id: str) -> list[str]:
    """Every Redis key of ``workflow_id`` in the runtime's namespace, sorted."""
    assert rt.backend is not None
    pattern = rt.keyspace.workflow_pattern(workflow_id)
    what = f"list the keys of {workflow_id}"
    keys = [as_text(k) async for k in rt.backend.scan(pattern, what=what)]
    return sorted(keys)


def key_suffix(rt: MemoryRuntime, workflow_id: str, key: str) -> str:
    """What follows the workflow's prefix in ``key`` (e.g. ``ckpt:<step>``)."""
    prefix = rt.keyspace.workflow_pattern(workflow_id)[:-1]
    return key[len(prefix) :]


async def blob_paths(blob: BlobStorage, keyspace: KeySpace, workflow_id: str) -> list[str]:
    """Paths of the workflow's scratchpad and goal-findings blobs."""
    paths: list[str] = []
    for prefix in (keyspace.scratchpad_prefix(workflow_id), keyspace.goals_prefix(workflow_id)):
        paths.extend(await blob.list(prefix))
    return paths


def split_blob_path(prefix: str, path: str) -> tuple[str, str]:
    """``(step_id, agent_id)`` of a scratchpad or goals blob under ``prefix``."""
    step, _, agent_file = path[len(prefix) :].partition("/")
    return step, agent_file.removesuffix(".jsonl")


async def live_blob_paths(blob: BlobStorage, keyspace: KeySpace, workflow_id: str) -> list[str]:
    """Every blob of ``workflow_id``: scratchpads, goal findings and the summary pair."""
    paths = await blob_paths(blob, keyspace, workflow_id)
    for path in (keyspace.ltm_blob(workflow_id), keyspace.ltm_meta_blob(workflow_id)):
        if await blob.exists(path):
            paths.append(path)
    return paths


async def workflow_is_empty(rt: MemoryRuntime, workflow_id: str) -> bool:
    """Whether no tier holds anything of ``workflow_id`` in this runtime's namespace.

    An import's staging keys and blobs (see :mod:`jarvismem.transfer.importer`)
    are not the workflow's: their names are outside its key pattern and prefixes.
    """
    if rt.redis is not None and await workflow_keys(rt, workflow_id):
        return False
    if rt.blob is not None:
        if await blob_paths(rt.blob, rt.keyspace, workflow_id):
            return False
        if await rt.blob.exists(rt.keyspace.ltm_blob(workflow_id)):
            return False
    return True


async def clear_workflow(rt: MemoryRuntime, workflow_id: str) -> None:
    """Delete every key and blob of ``workflow_id`` (import ``--force``)."""
    if rt.backend is not None:
        keys = await workflow_keys(rt, workflow_id)
        if keys:
            await rt.backend.call("delete", *keys, what=f"clear workflow {workflow_id}")
    if rt.blob is not None:
        for path in await blob_paths(rt.blob, rt.keyspace, workflow_id):
            await rt.blob.delete(path)
        for path in (rt.keyspace.ltm_blob(workflow_id), rt.keyspace.ltm_meta_blob(workflow_id)):
            await rt.blob.delete(path)
