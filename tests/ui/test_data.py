"""The inspector's data: paging without full scans, filters, summary coverage, outages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jarvismem.errors import InvalidIdError, WorkflowNotFoundError
from jarvismem.runtime import Lifecycle
from jarvismem.ui import data

pytestmark = pytest.mark.integration


async def _log(rt: Any, workflow: str, turns: int, agents: tuple[str, ...] = ("a1",)) -> None:
    for i in range(1, turns + 1):
        agent = agents[i % len(agents)]
        mem = rt.memory(workflow, f"s{i % 2}", agent)
        await mem.log_turn(i, f"thought {i}", {"step": i}, f"result {i}", 10)


async def test_pages_walk_the_ledger_oldest_first_each_entry_once(real_runtime: Any) -> None:
    await _log(real_runtime, "wf-page", 120)
    seen: list[int] = []
    after = None
    pages = 0
    while True:
        page = await data.timeline(real_runtime, "wf-page", after=after, limit=50)
        seen += [int(e["turn_id"]) for e in page["entries"]]
        pages += 1
        if page["next"] is None:
            break
        after = page["next"]
    assert seen == list(range(1, 121))
    assert pages == 3


async def test_the_newest_page_and_older_pages_walk_back_without_a_full_read(
    real_runtime: Any,
) -> None:
    await _log(real_runtime, "wf-back", 120)
    page = await data.timeline(real_runtime, "wf-back", before="+", limit=50)
    newest_id = page["entries"][-1]["id"]
    assert [int(e["turn_id"]) for e in page["entries"]] == list(range(71, 121))
    assert page["scanned"] == 50 and page["next"] is None
    assert page["live_from"] == page["entries"][-1]["id"]  # the live tail starts here
    seen = [int(e["turn_id"]) for e in page["entries"]]
    while page["prev"] is not None:
        page = await data.timeline(real_runtime, "wf-back", before=page["prev"], limit=50)
        assert page["live_from"] is None and page["next"] == page["entries"][-1]["id"]
        seen = [int(e["turn_id"]) for e in page["entries"]] + seen
    assert seen == list(range(1, 121))
    # "newer" from an older page goes forward again from its last entry.
    middle = await data.timeline(real_runtime, "wf-back", after=page["next"], limit=50)
    assert [int(e["turn_id"]) for e in middle["entries"]] == list(range(21, 71))
    assert middle["prev"] == middle["entries"][0]["id"]
    # A filter that matches nothing still starts the live tail at the ledger's end,
    # not at its start (which would replay every entry through the tail).
    filtered = await data.timeline(real_runtime, "wf-back", before="+", agent="nobody")
    assert filtered["entries"] == [] and filtered["live_from"] == newest_id
    with pytest.raises(ValueError, match="not both"):
        await data.timeline(real_runtime, "wf-back", after="1-0", before="+")
    with pytest.raises(ValueError, match="bad cursor"):
        await data.timeline(real_runtime, "wf-back", after="+")


async def test_an_agent_filter_keeps_only_that_agents_turns(real_runtime: Any) -> None:
    await _log(real_runtime, "wf-filter", 30, agents=("planner", "coder", "coder"))
    page = await data.timeline(real_runtime, "wf-filter", agent="planner")
    assert page["entries"], page
    assert {e["agent_id"] for e in page["entries"]} == {"planner"}
    assert [int(e["turn_id"]) for e in page["entries"]] == list(range(3, 31, 3))


async def test_a_rare_match_stops_at_the_scan_limit_with_a_cursor(
    real_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A filter matching nothing must not read the whole ledger in one page.
    monkeypatch.setattr(data, "SCAN_LIMIT", 100)
    await _log(real_runtime, "wf-rare", 250)
    page = await data.timeline(real_runtime, "wf-rare", agent="nobody", limit=10)
    assert page["entries"] == []
    assert page["scanned"] == 100
    assert page["next"] is not None
    rest = await data.timeline(real_runtime, "wf-rare", agent="nobody", after=page["next"])
    assert rest["scanned"] == 100 and rest["next"] is not None


async def test_recall_names_each_hits_source_and_what_preflight_injects(
    real_runtime: Any,
) -> None:
    await _log(real_runtime, "wf-recall", 3, agents=("a1",))
    mem = real_runtime.memory("wf-recall", "s1", "a1")
    await mem.remember("the falcon project ships on friday")
    await mem.remember("lunch is at noon")
    page = await data.recall(real_runtime, "wf-recall", "a1", "when does falcon ship")
    assert [(h["entry"]["content"], h["source"]) for h in page["hits"]][:2] == [
        ("the falcon project ships on friday", "lexical"),
        ("lunch is at noon", "recency"),
    ]
    pre = page["preflight"]
    assert pre["step_id"] in ("s0", "s1")  # the agent's latest step in the ledger
    text = "\n".join(m["content"] for m in pre["messages"])
    assert "the falcon project ships on friday" in text
    assert pre["messages"][-1] == {"role": "user", "content": "when does falcon ship"}
    assert (await data.recall(real_runtime, "wf-recall", "a1", "  "))["preflight"] is None


async def test_the_workflow_list_names_recent_steps_and_agents(real_runtime: Any) -> None:
    await _log(real_runtime, "wf-who", 6, agents=("planner", "coder"))
    rows = {r["workflow_id"]: r for r in (await data.workflows(real_runtime))["workflows"]}
    assert rows["wf-who"]["recent_agents"] == ["coder", "planner"]
    assert rows["wf-who"]["recent_steps"] == ["s0", "s1"]
    assert rows["wf-who"]["turns"] == 6
    only = await data.workflows(real_runtime, "WHO")
    assert [r["workflow_id"] for r in only["workflows"]] == ["wf-who"]


async def test_turns_the_summary_covers_are_marked(real_runtime: Any) -> None:
    await _log(real_runtime, "wf-sum", 10)
    result = await real_runtime.workflow("wf-sum").compactor.compact()
    assert result.compacted
    await _log_more(real_runtime, "wf-sum", 11, 13)
    page = await data.timeline(real_runtime, "wf-sum")
    flags = [(int(e["turn_id"]), e["summarized"]) for e in page["entries"]]
    assert flags == [(i, i <= 10) for i in range(1, 14)]
    assert page["summary_covers_to"] == page["entries"][9]["id"]
    summary = await data.summary(real_runtime, "wf-sum")
    assert summary["summary"]["turns"] == 10 and summary["summary"]["text"]


async def _log_more(rt: Any, workflow: str, first: int, last: int) -> None:
    mem = rt.memory(workflow, "s1", "a1")
    for i in range(first, last + 1):
        await mem.log_turn(i, f"thought {i}", "act", "res", 10)


@pytest.mark.parametrize("bad", ["../etc", "a b", "x\x00y", "", "a" * 300, "wf:*"])
async def test_hostile_ids_are_refused_before_any_read(real_runtime: Any, bad: str) -> None:
    with pytest.raises((InvalidIdError, ValueError)):
        await data.timeline(real_runtime, bad)
    await _log(real_runtime, "wf-ok", 1)
    with pytest.raises((InvalidIdError, ValueError)):
        await data.step_state(real_runtime, "wf-ok", bad or "..", "a1")
    with pytest.raises((InvalidIdError, ValueError)):
        await data.spaces(real_runtime, "wf-ok", bad or "..")


async def test_a_bad_cursor_and_an_unknown_workflow_are_clear_errors(real_runtime: Any) -> None:
    await _log(real_runtime, "wf-known", 1)
    with pytest.raises(ValueError, match="bad cursor"):
        await data.timeline(real_runtime, "wf-known", after="12-x")
    with pytest.raises(WorkflowNotFoundError):
        await data.timeline(real_runtime, "wf-unknown")


def _tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``root`` with its size, mtime and bytes."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            st = path.stat()
            out[str(path)] = (st.st_size, st.st_mtime_ns, path.read_bytes())
    return out


async def _keys(redis: Any, namespace: str) -> dict[bytes, bytes]:
    found = {}
    async for key in redis.scan_iter(match=f"*{namespace}*", count=1000):
        found[key] = await redis.dump(key)
    return found


async def test_every_page_leaves_redis_and_the_disk_as_they_were(
    real_runtime: Any, real_redis: Any, local_blob: Any, make_runtime: Any, tmp_path: Path
) -> None:
    rt = real_runtime
    await _log(rt, "wf-ro", 12, agents=("a1", "a2"))
    mem = rt.memory("wf-ro", "s1", "a1")
    await mem.save_checkpoint('{"k": 1}')
    await mem.remember("the deploy goes through staging")
    await rt.workflow("wf-ro").compactor.compact()
    await rt.close()  # the kernel is gone; what it left is what the inspector reads

    # Built as `jarvismem ui` builds it: no outbox poller.
    viewer = make_runtime(redis=real_redis, blob=local_blob, lifecycle=Lifecycle(background=False))
    namespace = rt.settings.jarvismem_namespace
    before_keys = await _keys(real_redis, namespace)
    before_files = _tree(tmp_path)
    try:
        await data.workflows(viewer)
        for after in (None, "0-0"):
            await data.timeline(viewer, "wf-ro", after=after)
        await data.timeline(viewer, "wf-ro", agent="a2")
        await data.step_state(viewer, "wf-ro", "s1", "a1")
        await data.summary(viewer, "wf-ro")
        await data.spaces(viewer, "wf-ro", "a1")
        await data.recall(viewer, "wf-ro", "a1", "deploy staging")
        await data.health(viewer)
        await data.last_id(viewer, "wf-ro")
    finally:
        await viewer.close()
    assert await _keys(real_redis, namespace) == before_keys
    assert _tree(tmp_path) == before_files


async def test_the_live_tail_moves_past_entries_its_filter_skips(real_runtime: Any) -> None:
    await _log(real_runtime, "wf-tail", 5, agents=("a1", "a2"))
    start = "0-0"
    found, cursor, more = await data.newer_entries(real_runtime, "wf-tail", start, agent="a2")
    assert [int(e["turn_id"]) for e in found] == [1, 3, 5] and not more
    assert cursor == (await data.timeline(real_runtime, "wf-tail"))["entries"][-1]["id"]
    # Nothing new: the next poll reads nothing, and a new turn of the other agent
    # moves the cursor without being shown.
    assert await data.newer_entries(real_runtime, "wf-tail", cursor, agent="a2") == (
        [],
        cursor,
        False,
    )
    await real_runtime.memory("wf-tail", "s1", "a1").log_turn(6, "t", "a", "r", 1)
    found, moved, _ = await data.newer_entries(real_runtime, "wf-tail", cursor, agent="a2")
    assert found == [] and moved != cursor


async def test_a_burst_larger_than_one_read_says_more_is_waiting(
    real_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data, "TAIL_READ", 4)
    await _log(real_runtime, "wf-burst", 10)
    seen: list[int] = []
    cursor, more, polls = "0-0", True, 0
    while more:
        found, cursor, more = await data.newer_entries(real_runtime, "wf-burst", cursor)
        seen += [int(e["turn_id"]) for e in found]
        polls += 1
    assert seen == list(range(1, 11)) and polls == 3
