"""Reading the rehydrate bundle: every tier at once, each with its own timeout.

A tier that fails or times out yields its empty default, is logged at
WARNING, and is named in the bundle's ``degraded`` entry with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from jarvismem.tiers.pending import (
    merge_recent,
    newer_checkpoint,
    outstanding_records,
    queued_checkpoint,
    queued_turns,
)

if TYPE_CHECKING:
    from jarvismem.memory import UnifiedMemory

log = logging.getLogger(__name__)

BUNDLE_DEFAULTS: dict[str, Any] = {
    "ltm_summary": None,
    "recent_turns": [],
    "checkpoint": None,
    "scratchpad": "",
    "athena_context": None,
}
"""The five documented keys and their empty defaults."""


def empty_bundle() -> dict[str, Any]:
    """A bundle with every documented key at its empty default (fresh list)."""
    return {**BUNDLE_DEFAULTS, "recent_turns": []}


async def _guarded(
    tier: str, coro: Awaitable[Any], timeout: float, degraded: dict[str, str]
) -> Any:
    try:
        async with asyncio.timeout(timeout):
            return await coro
    except TimeoutError:
        degraded[tier] = f"timed out after {timeout:g}s"
    except Exception as exc:
        degraded[tier] = f"{type(exc).__name__}: {exc}"[:300]
    log.warning("rehydrate: %s tier degraded (%s)", tier, degraded[tier])
    return None


async def read_bundle(mem: UnifiedMemory, ledger_tail: int) -> dict[str, Any]:
    """The bundle of ``mem`` (see ``UnifiedMemory.rehydrate_bundle``)."""
    if isinstance(ledger_tail, bool) or not isinstance(ledger_tail, int) or ledger_tail < 0:
        raise ValueError("ledger_tail must be a non-negative int")
    rt = mem.runtime
    s = rt.settings
    wf = mem._wf
    degraded: dict[str, str] = {}
    jobs: dict[str, Awaitable[Any]] = {}

    rt.ensure_background()
    # Writes queued during an outage (by this process or a crashed one on this
    # machine) belong in the bundle: give the deliverer a moment to replay
    # them, then merge what is still queued with what the backends return.
    queued: list[dict[str, Any]] = []
    for writer in wf.writers:
        records = await outstanding_records(writer, writer.timeout)
        if records:
            degraded[writer.name.split("[")[0] + "_outbox"] = (
                f"{len(records)} write(s) still queued locally"
            )
            if writer is wf.redis_writer:
                queued = records

    if mem.ltm is not None:
        jobs["ltm_summary"] = _guarded("ltm", mem.ltm.load_summary(), s.tier_timeout_ltm, degraded)
    if mem.episodic is not None and ledger_tail > 0:
        jobs["recent_turns"] = _guarded(
            "episodic", mem.episodic.tail(ledger_tail), s.tier_timeout_episodic, degraded
        )
    if wf.redis_writer is not None:
        jobs["checkpoint"] = _guarded(
            "checkpoint", wf.checkpoints(mem.step_id).load(), s.tier_timeout_checkpoint, degraded
        )
    if mem.working is not None:
        jobs["scratchpad"] = _guarded(
            "working", mem.working.get_notes(), s.tier_timeout_working, degraded
        )
    if rt.athena is not None:
        jobs["athena_context"] = _guarded(
            "athena", _athena_context(mem), s.tier_timeout_athena, degraded
        )
    spaces = mem.spaces
    if spaces is not None:
        jobs["spaces"] = _guarded(
            "spaces", _spaces_snapshot(spaces), s.tier_timeout_episodic, degraded
        )

    names = list(jobs)
    values = await asyncio.gather(*jobs.values())
    bundle = empty_bundle()
    bundle["spaces"] = None
    for name, value in zip(names, values, strict=True):
        if name == "checkpoint":
            value = newer_checkpoint(value, queued_checkpoint(queued, mem.step_id))
            value = None if value is None else value.state
        elif name == "recent_turns":
            value = merge_recent(value or [], queued_turns(queued), ledger_tail)
        if value is None:
            continue
        bundle[name] = value
    bundle["degraded"] = degraded
    return bundle


async def _athena_context(mem: UnifiedMemory) -> dict[str, Any] | None:
    athena = await mem.runtime.athena_memory(mem.agent_id)
    if athena is None:
        return None
    return await athena.get_memory_context(strict=True)


async def _spaces_snapshot(store: Any) -> dict[str, Any] | None:
    """The agent's spaces, or None when it never wrote any (container rev 0)."""
    container = await store.load()
    return None if container.rev == 0 else dict(container.to_dict())
