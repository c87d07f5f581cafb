"""The rehydrate bundle: every tier of one step read at once, each with its own timeout.

A tier that fails or times out yields its empty default, is logged at
WARNING, and is named in the bundle's ``degraded`` entry with the reason.
:func:`read_bundle` works on the tiers and shared workflow state it is given,
so it does not depend on the memory view that calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict, TypeVar

from jarvismem import telemetry
from jarvismem.engine.workflow import WorkflowState
from jarvismem.settings import Settings
from jarvismem.spaces.store import SpacesStore
from jarvismem.tiers.athena import AthenaMemory
from jarvismem.tiers.checkpoints import Checkpoint
from jarvismem.tiers.pending import (
    merge_recent,
    newer_checkpoint,
    outstanding_records,
    queued_checkpoint,
    queued_records,
    queued_turns,
)
from jarvismem.tiers.working import WorkingScratchpad

log = telemetry.logger(__name__)

T = TypeVar("T")


class Bundle(TypedDict):
    """Everything an agent needs to carry on after a crash (``rehydrate_bundle``).

    Every key is always present; a tier that is off, empty, failing or timed
    out leaves its empty default.

    Keys:
        ltm_summary: the workflow's long-term summary (Redis, else its blob
            copy); None.
        recent_turns: the last ``ledger_tail`` ledger entries, oldest first,
            values with their original types, then turns still queued in the
            local outbox; [].
        checkpoint: this step's last saved state (a queued newer save wins); None.
        scratchpad: markdown of the step's scratchpad (the goal findings of
            every step and agent of the workflow, carried forward, then this
            step's most recent turns and notes, within the scratchpad budget); "".
        athena_context: Athena short-term events and mid-term chains (ranked
            against the step's current goal when one is known); None.
        spaces: the agent's cognitive spaces, once it wrote any; None.
        degraded: tier -> reason, for every tier that failed or timed out and
            every outbox still holding writes; {}.
    """

    ltm_summary: str | None
    recent_turns: list[dict[str, Any]]
    checkpoint: str | None
    scratchpad: str
    athena_context: dict[str, Any] | None
    spaces: dict[str, Any] | None
    degraded: dict[str, str]


def empty_bundle() -> Bundle:
    """A bundle with every key at its empty default (fresh containers)."""
    return {
        "ltm_summary": None,
        "recent_turns": [],
        "checkpoint": None,
        "scratchpad": "",
        "athena_context": None,
        "spaces": None,
        "degraded": {},
    }


async def _guarded(
    tier: str, coro: Awaitable[T], timeout: float, degraded: dict[str, str]
) -> T | None:
    """``coro``'s value, or None with ``degraded[tier]`` set when it fails or times out."""
    with telemetry.tier_span(tier) as span:
        try:
            async with asyncio.timeout(timeout):
                return await coro
        except TimeoutError:
            degraded[tier] = f"timed out after {timeout:g}s"
            telemetry.degraded(tier, "timeout", span)
        except Exception as exc:
            degraded[tier] = f"{type(exc).__name__}: {exc}"[:300]
            telemetry.degraded(tier, "error", span, exc)
    log.warning("rehydrate: %s tier degraded (%s)", tier, degraded[tier])
    return None


async def read_bundle(
    workflow: WorkflowState,
    step_id: str,
    ledger_tail: int,
    *,
    settings: Settings,
    working: WorkingScratchpad | None = None,
    athena: Callable[[], Awaitable[AthenaMemory | None]] | None = None,
    spaces: SpacesStore | None = None,
    athena_query: str | None = None,
    replay: bool = True,
) -> Bundle:
    """Read the bundle of one step from the tiers given, all at once.

    Args:
        workflow: the workflow's shared state (ledger, checkpoints, long-term
            memory, and the durable writers whose queued records are merged in).
        step_id: the step whose checkpoint is read.
        ledger_tail: how many recent ledger turns to return (0: none).
        settings: the per-tier timeouts (``tier_timeout_*``).
        working: the step's scratchpad, when the working tier is on.
        athena: returns the agent's AthenaMemory, when Athena is configured
            (called inside the Athena tier's timeout).
        spaces: the agent's cognitive spaces store, when Redis is configured.
        athena_query: the current goal (the user's latest message, the task):
            Athena's mid-term chains are then the ones relevant to it (a vector
            search), not only the newest. None or blank: the newest.
        replay: give the outboxes' deliverer a moment to replay queued writes
            first (a kernel's read). False reads the queued records as they
            stand and starts nothing: the inspector's read, which never writes.
    """
    if isinstance(ledger_tail, bool) or not isinstance(ledger_tail, int) or ledger_tail < 0:
        raise ValueError("ledger_tail must be a non-negative int")
    s = settings
    wf = workflow
    degraded: dict[str, str] = {}

    # Writes queued during an outage (by this process or a crashed one on this
    # machine) belong in the bundle: give the deliverer a moment to replay
    # them, then merge what is still queued with what the backends return.
    queued: list[dict[str, Any]] = []
    for writer in wf.writers:
        if replay:
            records = await outstanding_records(writer, writer.timeout)
        else:
            records = await queued_records(writer)
        if records:
            tier = writer.name.split("[")[0] + "_outbox"
            degraded[tier] = f"{len(records)} write(s) still queued locally"
            telemetry.degraded(tier, "queued")
            if writer is wf.redis_writer:
                queued = records

    # Only the tiers that are on are read (each a task of the gather below).
    # Their Redis reads (summary, ledger tail, checkpoint, spaces: all keys of
    # the workflow's hash tag, so one slot and one node) go out as ONE pipelined
    # round trip (the backend's batched reads); each tier still awaits its own
    # reply under its own timeout, so a failing or slow read marks only its tier
    # degraded.
    jobs: dict[str, Awaitable[Any]] = {}
    if wf.ltm is not None:
        jobs["ltm"] = _guarded("ltm", wf.ltm.load_summary(), s.tier_timeout_ltm, degraded)
    if wf.ledger is not None and ledger_tail > 0:
        tail = wf.ledger.tail(ledger_tail)
        jobs["episodic"] = _guarded("episodic", tail, s.tier_timeout_episodic, degraded)
    if wf.redis_writer is not None:
        checkpoint = wf.checkpoints(step_id).load()
        jobs["checkpoint"] = _guarded("checkpoint", checkpoint, s.tier_timeout_checkpoint, degraded)
    if working is not None:
        jobs["working"] = _guarded("working", working.render(), s.tier_timeout_working, degraded)
    if athena is not None:
        jobs["athena"] = _guarded(
            "athena", _athena_context(athena, athena_query), s.tier_timeout_athena, degraded
        )
    if spaces is not None:
        jobs["spaces"] = _guarded(
            "spaces", _spaces_snapshot(spaces), s.tier_timeout_episodic, degraded
        )
    batch = (
        contextlib.nullcontext()
        if wf.redis is None
        else wf.redis.batched_reads(
            # The longest tier timeout bounds the round trip; each tier gives up
            # on it at its own timeout.
            max(s.tier_timeout_ltm, s.tier_timeout_episodic, s.tier_timeout_checkpoint)
        )
    )
    async with batch:  # the tasks gather starts take the batch with them
        read = dict(zip(jobs, await asyncio.gather(*jobs.values()), strict=True))

    bundle = empty_bundle()
    if read.get("ltm") is not None:
        bundle["ltm_summary"] = read["ltm"]
    if "episodic" in read:
        # Queued turns count even when the ledger read failed.
        bundle["recent_turns"] = merge_recent(
            read["episodic"] or [], queued_turns(queued), ledger_tail
        )
    if "checkpoint" in read:
        latest: Checkpoint | None = newer_checkpoint(
            read["checkpoint"], queued_checkpoint(queued, step_id)
        )
        bundle["checkpoint"] = None if latest is None else latest.state
    if read.get("working") is not None:
        bundle["scratchpad"] = read["working"]
    bundle["athena_context"] = read.get("athena")
    bundle["spaces"] = read.get("spaces")
    bundle["degraded"] = degraded
    return bundle


async def _athena_context(
    athena: Callable[[], Awaitable[AthenaMemory | None]], query: str | None
) -> dict[str, Any] | None:
    memory = await athena()
    if memory is None:
        return None
    # A blank query would be a search for nothing: ask for the newest instead.
    goal = query.strip() if isinstance(query, str) else ""
    return await memory.get_memory_context(query=goal or None, strict=True)


async def _spaces_snapshot(store: SpacesStore) -> dict[str, Any] | None:
    """The agent's spaces, or None when it never wrote any (container rev 0)."""
    container = await store.load_unbounded()  # bounded by the spaces tier's timeout
    return None if container.rev == 0 else dict(container.to_dict())
