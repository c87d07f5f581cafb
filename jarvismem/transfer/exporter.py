"""Export: one workflow, every tier, as lines of the export format."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from jarvismem.errors import BlobNotFoundError
from jarvismem.keys import validate_id
from jarvismem.records import parse_records
from jarvismem.runtime import MemoryRuntime
from jarvismem.spaces.store import SpacesStore
from jarvismem.tiers.longterm import LongTermMemory
from jarvismem.transfer.format import FORMAT, PAGE, VERSION, Progress, dump_line
from jarvismem.transfer.workflow import key_suffix, split_blob_path, workflow_keys


async def export_workflow(
    rt: MemoryRuntime, workflow_id: str, *, progress: Progress | None = None
) -> AsyncIterator[str]:
    """The export of ``workflow_id`` as lines (without newlines), header first.

    Reads page by page, so memory stays bounded by one page of the ledger and
    one blob. ``progress(done, total)`` counts ledger entries.
    """
    validate_id(workflow_id, "workflow_id")
    ks = rt.keyspace
    yield dump_line(
        {
            "format": FORMAT,
            "version": VERSION,
            "workflow_id": workflow_id,
            "namespace": ks.namespace,
            "exported_at": time.time(),
        }
    )
    keys = await workflow_keys(rt, workflow_id) if rt.redis is not None else []

    # Ledger, oldest first, with original ids.
    state = rt.workflow(workflow_id)
    if state.ledger is not None:
        total = await state.ledger.length()
        done = 0
        async for entry in state.ledger.iter_history(page_size=PAGE):
            sid = entry.pop("id")
            yield dump_line({"kind": "ledger", "id": sid, "fields": entry})
            done += 1
            if progress is not None and (done % 100 == 0 or done == total):
                progress(done, total)

    # Long-term summary (Redis, else the durable blob copy).
    ltm = state.ltm or LongTermMemory(
        rt.backend, rt.blob, ks, workflow_id, ttl_seconds=rt.settings.ttl_seconds
    )
    if ltm.active:
        record = await ltm.load_summary_record()
        if record is not None:
            yield dump_line({"kind": "summary", **record.model_dump()})

    # Checkpoints of every step.
    for key in keys:
        suffix = key_suffix(rt, workflow_id, key)
        if not suffix.startswith("ckpt:"):
            continue
        step = suffix[len("ckpt:") :]
        checkpoint = await state.checkpoints(step).load()
        if checkpoint is not None:
            yield dump_line(
                {
                    "kind": "checkpoint",
                    "step_id": step,
                    "state": checkpoint.state,
                    "rev": checkpoint.rev,
                    "ts": checkpoint.ts,
                }
            )

    # Scratchpads and goal findings: raw records in file order.
    if rt.blob is not None:
        for kind, prefix in (
            ("scratchpad", ks.scratchpad_prefix(workflow_id)),
            ("goals", ks.goals_prefix(workflow_id)),
        ):
            for path in await rt.blob.list(prefix):
                step, agent = split_blob_path(prefix, path)
                try:
                    raw = await rt.blob.read(path)
                except BlobNotFoundError:
                    continue
                for rec in parse_records(raw, source=path):
                    yield dump_line(
                        {"kind": kind, "step_id": step, "agent_id": agent, "record": rec}
                    )

    # Cognitive spaces, per agent.
    if rt.redis is not None:
        for key in keys:
            suffix = key_suffix(rt, workflow_id, key)
            if not suffix.startswith("spaces:"):
                continue
            agent = suffix[len("spaces:") :]
            store = SpacesStore(
                rt.backend, ks, workflow_id, agent, ttl_seconds=rt.settings.ttl_seconds
            )
            yield dump_line(
                {"kind": "spaces", "agent_id": agent, "snapshot": await store.snapshot()}
            )
