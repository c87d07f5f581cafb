"""WorkingScratchpad: appends and reads on blob storage (JarvisCore's flat entries and
the stored records), goal findings carried across steps and agents, JarvisCore's
notes and the bundle's bounded rendering, and blob failures surfacing as jarvismem
errors."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.errors import BackendRejectedError, BlobRejectedError, InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.payload import PayloadPolicy
from jarvismem.records import compact_json
from jarvismem.redaction import REDACTED, default_redactor, is_secret_key
from jarvismem.tiers.working import (
    GoalIndex,
    ScratchpadBounds,
    ScratchpadLinks,
    WorkingScratchpad,
)


def pad_of(
    blob: Any, keyspace: KeySpace, wf: str, step: str = "s1", **kw: Any
) -> WorkingScratchpad:
    return WorkingScratchpad(blob, keyspace, wf, step, "a1", **kw)


@pytest.fixture
def pad(blob_storage: Any, keyspace: KeySpace, workflow_id: str) -> WorkingScratchpad:
    # Small bounds so the size and depth policies show without megabytes.
    return pad_of(
        blob_storage, keyspace, workflow_id, policy=PayloadPolicy(max_chars=1000, max_depth=5)
    )


async def test_records_read_back_in_order_with_their_data(pad: WorkingScratchpad) -> None:
    assert await pad.read_records() == []
    await pad.write("note", {"k": [1, 2]})
    await pad.append_turn("t1", {"thought": "hm", "action": "look", "result": "ok"}, ts=5.0)
    first, second = await pad.read_records()
    assert (first["type"], first["scope"], first["data"]) == ("note", "step", {"k": [1, 2]})
    assert (second["type"], second["turn_id"], second["ts"]) == ("turn", "t1", 5.0)
    assert await pad.read_recent() == [first, second]


async def test_read_all_returns_jarviscores_flat_entries(pad: WorkingScratchpad) -> None:
    # JarvisCore's scratchpad stores {"type", "scope", **data}; its users read the
    # caller's keys at the top level (before: KeyError, they were under "data").
    assert await pad.read_all() == []
    await pad.write("observation", {"value": 42, "unit": "ms"})
    await pad.write("finding", {"thought": "cache is cold"}, scope="goal")
    await pad.append_turn(
        "t1", {"thought": "hm", "action": "look", "result": "ok", "tokens": 3}, ts=5.0
    )
    note, finding, turn = await pad.read_all()
    assert note == {"type": "observation", "scope": "step", "value": 42, "unit": "ms"}
    assert finding["thought"] == "cache is cold" and finding["scope"] == "goal"
    # A turn: the keys of JarvisCore's log_turn entry, in its order.
    assert list(turn.items()) == [
        ("type", "turn"),
        ("scope", "step"),
        ("turn_id", "t1"),
        ("ts", 5.0),
        ("thought", "hm"),
        ("action", "look"),
        ("result", "ok"),
        ("tokens", 3),
    ]


async def test_flat_entries_keep_data_that_is_not_a_dict_and_let_data_keys_win(
    pad: WorkingScratchpad,
) -> None:
    await pad.write("note", "plain text")
    await pad.write("note", {"type": "custom", "x": 1})  # JarvisCore: data keys win
    text, custom = await pad.read_all()
    assert text == {"type": "note", "scope": "step", "data": "plain text"}
    assert custom == {"type": "custom", "scope": "step", "x": 1}
    # The stored record keeps both apart.
    assert [r["type"] for r in await pad.read_records()] == ["note", "note"]


async def test_goal_findings_are_kept_in_their_own_blob_too(pad: WorkingScratchpad) -> None:
    await pad.write("note", "step only")
    await pad.write("finding", "the key is under the mat", scope="goal")
    assert [r["data"] for r in await pad.goal_findings()] == ["the key is under the mat"]
    assert [r["data"] for r in await pad.read_records()] == [
        "step only",
        "the key is under the mat",
    ]


@pytest.mark.parametrize(
    ("entry_type", "data", "scope"),
    [
        ("note", "x", "forever"),
        ("", "x", "step"),
        ("note", {1, 2}, "step"),
        ("n" * 257, "x", "step"),
        ("note", {"deep": [[[[["x"]]]]]}, "goal"),
    ],
    ids=["scope", "empty-type", "set", "long-type", "too-deep"],
)
async def test_bad_entries_are_refused_before_anything_is_written(
    pad: WorkingScratchpad, entry_type: str, data: Any, scope: Any
) -> None:
    with pytest.raises(InvalidPayloadError):
        await pad.write(entry_type, data, scope=scope)
    assert await pad.read_records() == []


async def test_a_torn_line_is_skipped_with_a_warning(
    pad: WorkingScratchpad, caplog: pytest.LogCaptureFixture
) -> None:
    await pad.write("note", "before")
    await pad.blob.append(pad.path, b'\n{"ts": 1, "type": "no')  # a crash mid-record
    await pad.write("note", "after")
    with caplog.at_level(logging.WARNING):
        records = await pad.read_records()
    assert [r["data"] for r in records] == ["before", "after"]
    assert "skipped 1 torn or unreadable line" in caplog.text


async def test_the_rendering_puts_goals_first_keeps_the_newest_and_stays_in_budget(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    pad = pad_of(local_blob, keyspace, workflow_id, bounds=ScratchpadBounds(budget_chars=600))
    await pad.write("finding", "goal one", scope="goal")
    for i in range(200):
        await pad.append_turn(str(i), {"thought": f"thought {i}", "result": "r"}, ts=float(i))
    notes = await pad.render()
    assert len(notes) <= 600
    assert notes.startswith("## Goal findings\n- **finding:** goal one\n")
    assert "### Turn 199" in notes and "### Turn 0\n" not in notes


async def test_get_notes_is_jarviscores_goal_findings_only(pad: WorkingScratchpad) -> None:
    # JarvisCore: goal-scoped findings only ("tactical noise excluded"), under its
    # header, the rest of each entry as JSON. Before: every turn and note, rendered.
    assert await pad.get_notes() == ""
    await pad.write("attempt", {"content": "GET /v1/data: 404"})
    await pad.append_turn("t1", {"thought": "try oauth", "action": "a", "result": "r"}, ts=1.0)
    assert await pad.get_notes() == ""
    await pad.write("finding", {"content": "API uses OAuth2", "où": "/oauth/token"}, scope="goal")
    await pad.write("finding", "plain", scope="goal")
    assert await pad.get_notes() == (
        "## Findings from prior step (s1)\n"
        '- **finding**: {"content": "API uses OAuth2", "où": "/oauth/token"}\n'
        '- **finding**: {"data": "plain"}'
    )


async def test_a_re_run_turn_is_rendered_once_with_its_last_copy(pad: WorkingScratchpad) -> None:
    await pad.append_turn("7", {"thought": "first try"}, ts=1.0)
    await pad.append_turn("7", {"thought": "second try"}, ts=2.0)
    notes = await pad.render()
    assert notes.count("### Turn 7") == 1
    assert "second try" in notes and "first try" not in notes


async def test_a_re_logged_turn_reads_back_once_in_its_first_place(pad: WorkingScratchpad) -> None:
    # A kernel killed after appending turn 5 to the scratchpad, before checkpointing
    # it, logs turn 5 again on resume: the ledger keeps one copy, and so must every
    # read of the scratchpad.
    await pad.append_turn("4", {"thought": "four"}, ts=1.0)
    await pad.append_turn("5", {"thought": "five"}, ts=2.0)
    await pad.write("note", "between", scope="step")
    await pad.append_turn("5", {"thought": "five again"}, ts=3.0)
    await pad.append_turn("6", {"thought": "six"}, ts=4.0)
    records = await pad.read_records()
    assert [r.get("turn_id") for r in records] == ["4", "5", None, "6"]
    assert records[1]["data"] == {"thought": "five again"}  # the last copy, as rendered
    flat = await pad.read_all()
    assert [e.get("turn_id") for e in flat] == ["4", "5", None, "6"]


async def test_later_steps_see_every_steps_goal_findings(
    blob_storage: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    await pad_of(blob_storage, keyspace, workflow_id, "s1").write("f", "from s1", scope="goal")
    await pad_of(blob_storage, keyspace, workflow_id, "s2").write("f", "from s2", scope="goal")
    later = pad_of(blob_storage, keyspace, workflow_id, "s3")
    found = await later.workflow_goal_findings()
    assert [(r["step_id"], r["agent_id"], r["data"]) for r in found] == [
        ("s1", "a1", "from s1"),
        ("s2", "a1", "from s2"),
    ]


async def test_the_rendering_carries_every_steps_and_agents_goal_findings(
    blob_storage: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    # Before: a step rendered its own findings only, so step 2 never saw step 1's.
    await pad_of(blob_storage, keyspace, workflow_id, "s1").write("f", "from s1", scope="goal")
    other = WorkingScratchpad(blob_storage, keyspace, workflow_id, "s1", "a2")
    await other.write("f", "from a2", scope="goal")
    await other.write("noise", "step-scoped, not carried")
    here = pad_of(blob_storage, keyspace, workflow_id, "s2")
    await here.write("f", "mine", scope="goal")
    assert await here.render() == (
        "## Goal findings\n"
        "- **f:** from s1 _(from step s1, agent a1)_\n"
        "- **f:** from a2 _(from step s1, agent a2)_\n"
        "- **f:** mine"
    )
    # JarvisCore's get_notes stays this step's own.
    assert "from s1" not in await here.get_notes()


async def test_carried_findings_that_overflow_leave_out_the_oldest_before_our_own(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    for i in range(30):
        await pad_of(local_blob, keyspace, workflow_id, f"s{i}").write(
            "f", f"old finding {i:02d} " + "x" * 40, scope="goal"
        )
    here = pad_of(
        local_blob, keyspace, workflow_id, "now", bounds=ScratchpadBounds(budget_chars=600)
    )
    await here.write("f", "our own finding", scope="goal")
    notes = await here.render()
    assert len(notes) <= 600
    assert "our own finding" in notes and "old finding 29" in notes
    assert "old finding 00" not in notes
    assert "earlier finding(s) of other steps left out" in notes


async def test_a_failing_listing_still_renders_this_steps_own_findings(
    local_blob: LocalBlobStorage,
    keyspace: KeySpace,
    workflow_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pad = pad_of(local_blob, keyspace, workflow_id)
    await pad.write("f", "mine", scope="goal")

    async def broken_list(prefix: str = "") -> list[str]:
        raise BlobRejectedError("listing refused")

    pad.blob.list = broken_list  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        assert await pad.render() == "## Goal findings\n- **f:** mine"
    assert "listing refused" in caplog.text


async def test_the_redactor_runs_before_anything_is_stored(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    pad = pad_of(
        local_blob,
        keyspace,
        workflow_id,
        policy=PayloadPolicy(redact=lambda s: s.replace("hunter2", "[secret]")),
    )
    await pad.write("note", {"login": ["user", "hunter2"]})
    assert b"hunter2" not in await local_blob.read(pad.path)
    [record] = await pad.read_records()
    assert record["data"] == {"login": ["user", "[secret]"]}


async def test_a_blob_store_that_refuses_writes_raises_a_jarvismem_error(
    tmp_path: Path, keyspace: KeySpace, workflow_id: str
) -> None:
    (tmp_path / "file").write_bytes(b"")
    pad = pad_of(LocalBlobStorage(tmp_path / "file" / "root"), keyspace, workflow_id)
    with pytest.raises(BlobRejectedError) as caught:
        await pad.write("note", "x")
    assert isinstance(caught.value, BackendRejectedError)


async def test_a_note_obeys_the_size_policy_of_turn_fields(pad: WorkingScratchpad) -> None:
    await pad.write("note", "x" * 1500)
    await pad.write("table", [["cell"] * 10] * 1000)
    text, table = (r["data"] for r in await pad.read_records())
    assert text == "x" * 1000 + "…[truncated 500 chars]"
    assert (table["kind"], table["items"]) == ("list", 1000)
    assert table["truncated"].startswith('[["cell","cell"')
    assert len(compact_json(table)) <= 1000


async def test_values_under_secret_named_keys_are_hidden_in_notes(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    pad = pad_of(
        local_blob,
        keyspace,
        workflow_id,
        policy=PayloadPolicy(redact=default_redactor, is_secret_key=is_secret_key),
    )
    await pad.write("login", {"user": "alice", "password": "hunter2", "api_key": {"v": 1}})
    raw = await local_blob.read(pad.path)
    assert b"hunter2" not in raw
    [record] = await pad.read_records()
    assert record["data"] == {"user": "alice", "password": REDACTED, "api_key": REDACTED}


async def test_two_writers_of_one_step_and_agent_do_not_duplicate_a_goal_finding(
    fake_redis: Any, local_blob: Any, make_runtime: Any, workflow_id: str
) -> None:
    # Two runtimes: what two processes running the same (workflow, step, agent) do.
    views = [
        make_runtime(redis=fake_redis, blob=local_blob).memory(workflow_id, "s1", "a1")
        for _ in range(2)
    ]
    finding = {"host": "db-1", "open_ports": [22, 5432]}
    await asyncio.gather(
        *(v.working.write("finding", dict(finding), scope="goal") for v in views for _ in range(3))
    )
    await views[1].working.write("finding", {"host": "db-2"}, scope="goal")
    await views[1].working.write("other", dict(finding), scope="goal")  # another type: kept
    found = await views[0].working.goal_findings()
    assert [(r["type"], r["data"]) for r in found] == [
        ("finding", finding),
        ("finding", {"host": "db-2"}),
        ("other", finding),
    ]
    notes = (await views[0].rehydrate_bundle())["scratchpad"]
    assert notes.count("db-1") == 2  # the finding once, the "other" record once
    later = make_runtime(redis=fake_redis, blob=local_blob).memory(workflow_id, "s2", "a1")
    carried = await later.working.workflow_goal_findings()
    assert [r["data"] for r in carried].count(finding) == 2


async def test_the_same_finding_from_two_agents_is_kept_for_each(
    blob_storage: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    for agent in ("a1", "a2"):
        pad = WorkingScratchpad(blob_storage, keyspace, workflow_id, "s1", agent)
        await pad.write("f", "same", scope="goal")
    found = await pad_of(blob_storage, keyspace, workflow_id, "s2").workflow_goal_findings()
    assert [(r["agent_id"], r["data"]) for r in found] == [("a1", "same"), ("a2", "same")]


@pytest.mark.parametrize(
    "thought,action,result,tokens",
    [
        ("plain", "act()", "ok", 3),
        ('ünïcode ✓ \u2028 "quoted"', {"tool": "x", "args": [1, 2.5, None]}, ["a", {"b": True}], 0),
        (None, "", {"nested": {"deep": "x"}}, 12345),
    ],
)
def test_a_turn_line_from_the_ledger_fields_is_byte_for_byte_the_record_encoding(
    thought: Any, action: Any, result: Any, tokens: int
) -> None:
    from jarvismem.records import TURN, encode_fields, encode_record
    from jarvismem.tiers.working import encode_turn_line

    ts = 1712345678.123456
    entry = {
        "turn_id": "7",
        "step_id": "s1",
        "agent_id": "a1",
        "ts": ts,
        "thought": thought,
        "action": action,
        "result": result,
        "tokens": tokens,
    }
    data = {"thought": thought, "action": action, "result": result, "tokens": tokens}
    record = {"ts": ts, "type": TURN, "scope": "step", "turn_id": "7", "data": data}
    assert encode_turn_line(encode_fields(entry)) == encode_record(record)


async def test_the_goal_listing_is_cached_and_kept_true_by_the_writes_of_its_sharers(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    """Every bundle used to list the workflow's goal blobs; the listing is now
    listed once per GOALS_LISTING_MAX_AGE, and a finding written by a scratchpad
    sharing the workflow's GoalIndex joins it at once."""
    lists: list[str] = []
    listing = local_blob.list

    async def counting_list(prefix: str = "") -> list[str]:
        lists.append(prefix)
        return await listing(prefix)

    local_blob.list = counting_list  # type: ignore[method-assign]
    goals = GoalIndex(local_blob, keyspace.goals_prefix(workflow_id))
    here = pad_of(local_blob, keyspace, workflow_id, "s2", links=ScratchpadLinks(goals=goals))
    assert await here.render() == ""
    await pad_of(local_blob, keyspace, workflow_id, "s1", links=ScratchpadLinks(goals=goals)).write(
        "f", "from s1", scope="goal"
    )
    await here.write("f", "mine", scope="goal")
    notes = await here.render()
    assert "from s1 _(from step s1, agent a1)_" in notes and "- **f:** mine" in notes
    assert len(lists) == 1
    # A writer not sharing the index (another process, or a scratchpad of its
    # own) starts findings of a new (step, agent): seen once the listing is
    # older than the bound.
    await pad_of(local_blob, keyspace, workflow_id, "s9").write("f", "far", scope="goal")
    assert "far" not in await here.render()
    goals.max_age = 0.0
    assert "far _(from step s9, agent a1)_" in await here.render()
    assert len(lists) == 2


@pytest.mark.parametrize("bounds", [{"tail_bytes": 0}, {"budget_chars": -5}, {"tail_bytes": 1.5}])
def test_scratchpad_bounds_refuse_a_bound_that_is_not_a_positive_int(
    bounds: dict[str, Any],
) -> None:
    with pytest.raises(ValueError, match="must be a positive int"):
        ScratchpadBounds(**bounds)


async def test_writes_go_through_the_append_given(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    sent: list[str] = []

    async def append(path: str, data: bytes) -> None:
        sent.append(path)
        await local_blob.append(path, data)

    pad = pad_of(local_blob, keyspace, workflow_id, links=ScratchpadLinks(append=append))
    await pad.write("note", "kept", scope="goal")
    await pad.append_turn("t1", {"thought": "x"}, 1.0)
    assert sent == [pad.goals_path, pad.path, pad.path]
    assert [r["type"] for r in await pad.read_records()] == ["note", "turn"]
