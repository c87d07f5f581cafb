"""What the inspector shows, as JSON-able dicts: one source for each page and its JSON.

Every function here only reads. It starts no replay (queued records are read
as their files stand), prunes no index entry and creates no Athena session:
the inspector may be pointed at a production namespace while kernels run.
Ids are validated by :mod:`jarvismem.keys` before any key or path is built.
"""

from __future__ import annotations

import asyncio
import json
from functools import partial
from pathlib import Path
from typing import Any

from jarvismem.backends.outbox import scan_outboxes
from jarvismem.bundle import Bundle, read_bundle
from jarvismem.cli._leftovers import find_leftovers
from jarvismem.defaults import LEDGER_TAIL, PROMPT_BUDGET_CHARS
from jarvismem.errors import BackendUnavailableError, ConfigError
from jarvismem.keys import validate_id
from jarvismem.recall.prompt import preflight as build_preflight
from jarvismem.runtime import MemoryRuntime
from jarvismem.tiers.pending import queued_records, queued_turns
from jarvismem.workflows import list_workflows, require_workflow

PAGE_SIZE = 50
"""Ledger entries on one timeline page."""

SCAN_LIMIT = 5000
"""Most ledger entries one filtered timeline page reads before it returns a cursor.

A filter that matches rarely must not turn one page into a scan of a million
entries: the page says where it stopped and the next one goes on from there.
"""

RECALL_LIMIT = 10

RECENT_SAMPLE = 100
"""Ledger entries read at the end of a workflow for its recent steps and agents."""

DETAILED_ROWS = 200
"""Workflow rows given their recent steps and agents (one ledger read each)."""


def _stream_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


async def workflows(rt: MemoryRuntime, query: str = "") -> dict[str, Any]:
    """The namespace's workflows, most recently active first; ``query`` filters ids.

    Each row also names the steps and agents of its last :data:`RECENT_SAMPLE`
    ledger entries (``recent_steps``, ``recent_agents``): the ledger is never scanned
    whole, so these are the recent ones, for the first :data:`DETAILED_ROWS` rows.
    """
    rows = [row.as_dict() for row in await list_workflows(rt, prune=False)]
    needle = query.strip().lower()
    if needle:
        rows = [row for row in rows if needle in row["workflow_id"].lower()]
    gate = asyncio.Semaphore(16)

    async def detail(row: dict[str, Any]) -> None:
        row["recent_steps"] = row["recent_agents"] = None
        if rt.backend is None or not row.get("entries"):
            return
        ledger = rt.workflow(row["workflow_id"]).ledger
        assert ledger is not None
        async with gate:
            recent = await ledger.tail(RECENT_SAMPLE)
        row["recent_steps"] = sorted({str(e.get("step_id")) for e in recent})
        row["recent_agents"] = sorted({str(e.get("agent_id")) for e in recent})

    await asyncio.gather(*(detail(row) for row in rows[:DETAILED_ROWS]))
    for row in rows[DETAILED_ROWS:]:
        row["recent_steps"] = row["recent_agents"] = None
    return {"namespace": rt.settings.jarvismem_namespace, "query": query, "workflows": rows}


async def timeline(
    rt: MemoryRuntime,
    workflow_id: str,
    *,
    after: str | None = None,
    before: str | None = None,
    step: str | None = None,
    agent: str | None = None,
    limit: int = PAGE_SIZE,
) -> dict[str, Any]:
    """One page of a workflow's ledger, shown oldest first, from a cursor.

    ``after``: the page that starts just after that id (None: the first page), read
    forward with ``XRANGE``; ``before``: the page that ends just before that id, or
    ``"+"`` for the newest page, read backward with ``XREVRANGE``. Never the whole
    stream: with ``step``/``agent`` filters a page reads at most :data:`SCAN_LIMIT`
    entries, then hands back its cursor. ``next``/``prev``: the ``after`` of the
    newer page and the ``before`` of the older one (None at that end). Each entry
    says whether the long-term summary covers it (``summarized``). On the newest
    page, ``live_from`` is where the live tail starts and the turns still queued in
    this machine's outbox follow (``queued``).
    """
    workflow = await require_workflow(rt, workflow_id)
    if after is not None and before is not None:
        raise ValueError("give after or before, not both")
    for cursor_value in (after, before):
        if cursor_value not in (None, "0-0", "+"):
            _check_cursor(cursor_value)
    if after == "+":
        raise ValueError("bad cursor '+': only before=+ (the newest page) takes it")
    step = None if not step else validate_id(step, "step_id")
    agent = None if not agent else validate_id(agent, "agent_id")
    if rt.backend is None:
        raise ConfigError("the timeline needs Redis; set REDIS_URL")
    ledger = rt.workflow(workflow).ledger
    assert ledger is not None
    backward = before is not None
    cursor = (None if before == "+" else before) if backward else after
    newest_seen: str | None = None
    entries: list[dict[str, Any]] = []
    scanned = 0
    exhausted = False
    unavailable = None
    try:
        covered_to = await _summary_end(rt, workflow)
        while len(entries) < limit and scanned < SCAN_LIMIT:
            want = min(max(limit * 4, 100), SCAN_LIMIT - scanned) if (step or agent) else limit
            if backward:
                batch = list(reversed(await ledger.tail(want, before=cursor)))  # newest first
            else:
                batch = await ledger.range_after(cursor, want)
            if backward and newest_seen is None and batch:
                newest_seen = str(batch[0]["id"])
            scanned += len(batch)
            read_all = True
            for n, entry in enumerate(batch):
                cursor = str(entry["id"])
                if not _matches(entry, step, agent):
                    continue
                entry["summarized"] = covered_to is not None and _stream_key(cursor) <= covered_to
                entries.append(entry)
                if len(entries) >= limit:
                    read_all = n == len(batch) - 1
                    break
            if len(batch) < want:
                exhausted = read_all
                break
    except BackendUnavailableError as exc:
        # Redis is down: show what this machine's outbox holds, and say why the rest is not.
        covered_to, unavailable = None, str(exc)
        exhausted, backward, before, after = True, False, None, None
    if backward:
        entries.reverse()
        at_end = before == "+"
        newer = None if at_end else (str(entries[-1]["id"]) if entries else None)
        older = None if exhausted else cursor
        live_from = (newest_seen or "0-0") if at_end else None
    else:
        at_end = exhausted
        newer = None if at_end else cursor
        older = str(entries[0]["id"]) if entries and after not in (None, "0-0") else None
        live_from = (cursor or "0-0") if at_end else None
    queued: list[dict[str, Any]] = []
    writer = rt.workflow(workflow).redis_writer
    if at_end and writer is not None:
        records = await queued_records(writer)
        queued = [turn for turn in queued_turns(records) if _matches(turn, step, agent)]
    return {
        "workflow_id": workflow,
        "filters": {"step": step, "agent": agent},
        "after": after,
        "before": before,
        "entries": entries,
        "next": newer,
        "prev": older,
        "live_from": live_from,
        "scanned": scanned,
        "summary_covers_to": None if covered_to is None else f"{covered_to[0]}-{covered_to[1]}",
        "queued": queued,
        "unavailable": unavailable,
    }


def _matches(entry: dict[str, Any], step: str | None, agent: str | None) -> bool:
    """Whether a ledger entry passes the timeline's step and agent filters (None: any)."""
    return (not step or entry.get("step_id") == step) and (
        not agent or entry.get("agent_id") == agent
    )


def _check_cursor(value: str) -> None:
    try:
        ms, seq = _stream_key(value)
    except ValueError:
        raise ValueError(f"bad cursor {value!r}: a ledger id such as 1700000000000-0") from None
    if ms < 0 or seq < 0 or value.count("-") != 1:
        raise ValueError(f"bad cursor {value!r}: a ledger id such as 1700000000000-0")


async def _summary_end(rt: MemoryRuntime, workflow: str) -> tuple[int, int] | None:
    """The last ledger id the long-term summary covers, or None."""
    ltm = rt.workflow(workflow).ltm
    if ltm is None:
        return None
    base = await ltm.read_base()
    if base.record is None or not base.record.to_id:
        return None
    return _stream_key(base.record.to_id)


TAIL_READ = 200
"""Most ledger entries one live-tail poll reads."""


async def newer_entries(
    rt: MemoryRuntime,
    workflow: str,
    after: str,
    *,
    step: str | None = None,
    agent: str | None = None,
) -> tuple[list[dict[str, Any]], str, bool]:
    """The live tail's poll: entries after ``after`` matching the filters, the next
    cursor, and whether the read was full (more may be waiting: poll again at once).

    ``workflow``, ``step`` and ``agent`` were validated when the tail opened. At most
    :data:`TAIL_READ` entries are read; the cursor moves past every entry read,
    matching or not, so a filter that matches rarely never re-reads the same ones.
    """
    ledger = rt.workflow(workflow).ledger
    if ledger is None:
        return [], after, False
    batch = await ledger.range_after(after, TAIL_READ)
    cursor = str(batch[-1]["id"]) if batch else after
    matching = [entry for entry in batch if _matches(entry, step, agent)]
    return matching, cursor, len(batch) == TAIL_READ


async def last_id(rt: MemoryRuntime, workflow_id: str) -> str:
    """The newest ledger id of a workflow (``0-0`` when empty): the live tail's start."""
    workflow = await require_workflow(rt, workflow_id)
    ledger = rt.workflow(workflow).ledger
    if ledger is None:
        return "0-0"
    newest = await ledger.tail(1)
    return str(newest[-1]["id"]) if newest else "0-0"


async def _bundle(
    rt: MemoryRuntime, workflow: str, step: str, agent: str, ledger_tail: int, query: str | None
) -> Bundle:
    """The bundle ``rehydrate_bundle`` would return, read without writing anything.

    Queued writes are shown, not replayed (``replay=False``); Athena is read through
    the agent's known session only (reads never create one).
    """
    mem = rt.memory(workflow, step, agent)
    return await read_bundle(
        rt.workflow(workflow),
        step,
        ledger_tail,
        settings=rt.settings,
        working=mem.working,
        athena=None if rt.athena is None else partial(rt.athena_memory, agent),
        spaces=mem.spaces,
        athena_query=query,
        replay=False,
    )


async def step_state(
    rt: MemoryRuntime, workflow_id: str, step_id: str, agent_id: str, ledger_tail: int = 10
) -> dict[str, Any]:
    """A step's checkpoint, its scratchpad and the bundle a fresh process would get now."""
    workflow = await require_workflow(rt, workflow_id)
    step = validate_id(step_id, "step_id")
    agent = validate_id(agent_id, "agent_id")
    bundle = await _bundle(rt, workflow, step, agent, ledger_tail, None)
    checkpoint = None
    if rt.backend is not None:
        record = await rt.workflow(workflow).checkpoints(step).load()
        if record is not None:
            checkpoint = {"state": _json_or_text(record.state), "rev": record.rev, "ts": record.ts}
    return {
        "workflow_id": workflow,
        "step_id": step,
        "agent_id": agent,
        "checkpoint": checkpoint,
        "scratchpad": bundle["scratchpad"],
        "bundle": dict(bundle),
    }


def _json_or_text(text: str) -> Any:
    """A checkpoint's state parsed for pretty printing when it is JSON, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


async def summary(rt: MemoryRuntime, workflow_id: str) -> dict[str, Any]:
    """The long-term summary: text, generation, ledger range covered, last compaction."""
    workflow = await require_workflow(rt, workflow_id)
    wf = rt.workflow(workflow)
    if wf.ltm is None or wf.compactor is None:
        return {"workflow_id": workflow, "active": False, "summary": None, "compaction": None}
    base = await wf.ltm.read_base()
    record = base.record
    return {
        "workflow_id": workflow,
        "active": True,
        "generation": base.gen,
        "summary": None if record is None else record.model_dump(),
        "compaction": await wf.compactor.state(),
    }


async def spaces(rt: MemoryRuntime, workflow_id: str, agent_id: str) -> dict[str, Any]:
    """An agent's cognitive spaces (world, tasks, custom spaces) with their revisions."""
    workflow = await require_workflow(rt, workflow_id)
    agent = validate_id(agent_id, "agent_id")
    store = rt.memory(workflow, "inspect", agent).spaces
    if store is None:
        raise ConfigError("spaces need Redis; set REDIS_URL")
    exists = await store.exists()
    snapshot = await store.snapshot() if exists else {}
    return {"workflow_id": workflow, "agent_id": agent, "exists": exists, **snapshot}


PREFLIGHT_INSTRUCTIONS = "(the agent's system instructions)"
"""Stands in for the instructions on the recall page's preflight: only memory is shown."""


async def recall(
    rt: MemoryRuntime,
    workflow_id: str,
    agent_id: str,
    query: str,
    *,
    step: str | None = None,
    limit: int = RECALL_LIMIT,
) -> dict[str, Any]:
    """Ranked hits for ``query`` over the agent's facts, and what ``preflight`` would inject.

    Each hit has its score and ``source``: ``lexical``, ``vector``,
    ``lexical+vector`` (fused), ``recency`` (the fill, score 0) or ``athena``.
    ``preflight``: the messages of the next LLM call for ``query`` as the user
    message, with the bundle of ``step`` (default: the agent's latest step in the
    ledger) and these hits, and which hits were used or dropped.
    """
    workflow = await require_workflow(rt, workflow_id)
    agent = validate_id(agent_id, "agent_id")
    step = None if not step else validate_id(step, "step_id")
    store = rt.recall_store
    out: dict[str, Any] = {
        "workflow_id": workflow,
        "agent_id": agent,
        "query": query,
        "store": "none" if store is None else type(store).__name__,
        "policy": rt.policy.model_dump(mode="json") if rt.policy is not None else None,
        "hits": [],
        "preflight": None,
    }
    if not query.strip():
        return out
    step = step or await _latest_step(rt, workflow, agent) or "inspect"
    results = await rt.memory(workflow, step, agent).recall(query, limit=limit)
    out["hits"] = [
        {"score": r.score, "source": r.source, "entry": r.entry.model_dump(mode="json")}
        for r in results
    ]
    bundle = await _bundle(rt, workflow, step, agent, LEDGER_TAIL, query)
    injected = build_preflight(
        PREFLIGHT_INSTRUCTIONS,
        query,
        bundle=bundle,
        recalled=results,
        policy=rt.policy,
        budget_chars=PROMPT_BUDGET_CHARS,
        redactor=rt.redactor,
        is_secret_key=rt.is_secret_key,
    )
    out["preflight"] = {"step_id": step, **injected.model_dump(mode="json")}
    return out


async def _latest_step(rt: MemoryRuntime, workflow: str, agent: str) -> str | None:
    """The step of the agent's newest turn among the ledger's last entries, if any."""
    ledger = rt.workflow(workflow).ledger
    if ledger is None:
        return None
    for entry in reversed(await ledger.tail(RECENT_SAMPLE)):
        if entry.get("agent_id") == agent and isinstance(entry.get("step_id"), str):
            return str(entry["step_id"])
    return None


async def health(rt: MemoryRuntime, *, write_check: bool = False) -> dict[str, Any]:
    """Every backend's state and every outbox on this machine: ``jarvismem status``'s report.

    ``rt.health()`` plus ``local_outboxes`` (every outbox file under OUTBOX_PATH
    with its queued, dead-lettered and dropped counts: what any process here left),
    ``leftover_outboxes`` (queued for an address this configuration does not use,
    with the command that replays them) and ``warnings``; an outbox holding
    records makes the report degraded. ``unreachable``/``not_writable``: the
    configured backends that failed. ``write_check``: also prove write access
    (``jarvismem status --write-check``; never from the inspector).
    """
    report = await rt.health(write_check=write_check)
    local = await scan_outboxes(Path(rt.settings.outbox_path))
    report["local_outboxes"] = local
    for box in local:
        if box.get("pending") or box.get("dead_lettered") or box.get("error"):
            report["ok"], report["degraded"] = False, True
            report["reasons"].append(_outbox_reason(box))
    leftovers = find_leftovers(rt, local)
    report["leftover_outboxes"] = leftovers
    report.setdefault("warnings", [])
    for box in leftovers:
        report["warnings"].append(_leftover_warning(box))
    backends = report["backends"].items()
    report["unreachable"] = [
        n for n, b in backends if b.get("configured") and not b.get("reachable")
    ]
    report["not_writable"] = [n for n, b in backends if b.get("writable") is False]
    return report


def _leftover_warning(box: dict[str, Any]) -> str:
    where = box.get("address") or "an unrecorded address"
    return (
        f"outbox {box['path']} holds {box['pending']} record(s) queued for {where}, "
        f"not the configured {box['kind']} address; replay them with: {box['replay']}"
    )


def _outbox_reason(box: dict[str, Any]) -> str:
    if box.get("error"):
        return f"outbox {box['path']}: unreadable ({box['error']})"
    parts = [f"{box['pending']} queued"]
    if box.get("dead_lettered"):
        parts.append(f"{box['dead_lettered']} dead-lettered")
    return f"outbox {box['path']}: " + ", ".join(parts)
