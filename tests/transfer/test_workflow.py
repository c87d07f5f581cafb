"""What a workflow holds across the stores: keys, blobs, emptiness, clearing."""

from __future__ import annotations

import pytest

from jarvismem.transfer.workflow import (
    blob_paths,
    clear_workflow,
    key_suffix,
    split_blob_path,
    workflow_is_empty,
    workflow_keys,
)
from tests.transfer.conftest import MakeRuntime, populate


async def test_a_populated_workflow_is_found_and_cleared_without_touching_another(
    make_store_runtime: MakeRuntime,
) -> None:
    rt = make_store_runtime()
    await populate(rt, "wf1")
    await populate(rt, "wf2")
    assert rt.blob is not None
    keys = await workflow_keys(rt, "wf1")
    suffixes = {key_suffix(rt, "wf1", k).split(":")[0] for k in keys}
    assert {"ckpt", "spaces"} <= suffixes
    assert await blob_paths(rt.blob, rt.keyspace, "wf1")
    assert not await workflow_is_empty(rt, "wf1")

    await clear_workflow(rt, "wf1")
    assert await workflow_is_empty(rt, "wf1")
    assert await workflow_keys(rt, "wf1") == []
    assert not await rt.blob.exists(rt.keyspace.ltm_blob("wf1"))
    assert not await workflow_is_empty(rt, "wf2")


async def test_a_long_term_blob_alone_makes_a_workflow_non_empty(
    make_store_runtime: MakeRuntime,
) -> None:
    rt = make_store_runtime()
    assert rt.blob is not None
    assert await workflow_is_empty(rt, "wf1")
    await rt.blob.write(rt.keyspace.ltm_blob("wf1"), b"summary")
    assert not await workflow_is_empty(rt, "wf1")


@pytest.mark.parametrize(
    ("path", "expected"),
    [("pre/s1/a1.jsonl", ("s1", "a1")), ("pre/s1/a.b.jsonl", ("s1", "a.b"))],
)
def test_split_blob_path(path: str, expected: tuple[str, str]) -> None:
    assert split_blob_path("pre/", path) == expected
