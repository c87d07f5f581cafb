"""UnifiedMemory: the documented API, the degradation matrix, recovery, exactly-once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from jarvismem.errors import (
    CheckpointConflictError,
    InvalidIdError,
    InvalidPayloadError,
    PayloadTooLargeError,
)
from jarvismem.memory import UnifiedMemory
from jarvismem.settings import Settings
from tests.conftest import REAL_REDIS_URL, Factory, real_redis_available, require_backend

DOCUMENTED_KEYS = {"ltm_summary", "recent_turns", "checkpoint", "scratchpad", "athena_context"}


# --- the documented constructor and defaults ---------------------------------------


def test_documented_constructor_accepts_positional_and_keyword_backends(
    redis_client: Any, blob_storage: Any
) -> None:
    positional = UnifiedMemory("wf", "s1", "a1", redis_client, blob_storage, None)
    keyword = UnifiedMemory(
        workflow_id="wf",
        step_id="s1",
        agent_id="a1",
        redis_store=redis_client,
        blob_storage=blob_storage,
        athena_client=None,
    )
    for mem in (positional, keyword):
        assert mem.working is not None and mem.episodic is not None and mem.ltm is not None


async def test_the_drop_in_constructor_takes_settings_and_leaves_caller_clients_open(
    settings: Settings, workflow_id: str, redis_client: Any
) -> None:
    mem = UnifiedMemory(workflow_id, "s1", "a1", redis_client, settings=settings)
    assert mem.runtime.settings is settings
    assert mem.runtime.keyspace.namespace == settings.jarvismem_namespace
    await mem.log_turn(1, "t", "a", "r")
    await mem.close()  # closes its private engine, not the caller's client
    assert mem.runtime.closed and await redis_client.ping()


async def test_drop_in_views_open_no_llm_client_and_leave_none_open_when_they_compact(
    settings: Settings,
    workflow_id: str,
    redis_client: Any,
    blob_storage: Any,
    fake_llm: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A kernel may build a drop-in view per step and never close it: each one
    # must not leave an LLM HTTP client behind.
    from jarvismem.backends.llm import client as llm_client

    opened: list[Any] = []
    real_init = llm_client.ChatCompletionsClient.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(llm_client.ChatCompletionsClient, "__init__", counting_init)
    s = settings.model_copy(update={"llm_base_url": fake_llm.url})
    views = [
        UnifiedMemory(workflow_id, f"s{i}", "a1", redis_client, blob_storage, settings=s)
        for i in range(5)
    ]
    for i, view in enumerate(views):
        await view.log_turn(i + 1, "t", "a", "r")
    assert opened == []  # no view compacted: no client
    result = await views[0].compact_now()
    assert result["compacted"], result
    assert fake_llm.completion_requests() and opened
    assert all(client._http.is_closed for client in opened)


async def test_an_unclosed_drop_in_view_runs_no_background_task_and_is_freed(
    settings: Settings, workflow_id: str, redis_client: Any, blob_storage: Any
) -> None:
    import gc
    import weakref

    def polls() -> int:
        return sum(t.get_name() == "jarvismem-outbox-poll" for t in asyncio.all_tasks())

    before = polls()
    view = UnifiedMemory(workflow_id, "s1", "a1", redis_client, blob_storage, settings=settings)
    await view.log_turn(1, "t", "a", "r")
    await view.rehydrate_bundle()
    assert polls() == before
    runtime = weakref.ref(view.runtime)
    del view
    gc.collect()
    assert runtime() is None


def test_backends_or_settings_with_a_runtime_are_refused(
    settings: Settings, make_runtime: Factory
) -> None:
    rt = make_runtime()
    with pytest.raises(TypeError, match="not both"):
        UnifiedMemory("wf", "s1", "a1", runtime=rt, settings=settings)
    with pytest.raises(TypeError, match="not both"):
        UnifiedMemory("wf", "s1", "a1", object(), runtime=rt)


async def test_no_backends_is_a_pure_in_process_run(make_memory: Factory) -> None:
    mem = make_memory()
    assert (mem.working, mem.episodic, mem.ltm) == (None, None, None)
    await mem.log_turn(1, "think", "act", "result")
    assert await mem.save_checkpoint('{"x": 1}') is None
    assert await mem.load_checkpoint() is None
    bundle = await mem.rehydrate_bundle()
    assert {k: bundle[k] for k in DOCUMENTED_KEYS} == {
        "ltm_summary": None,
        "recent_turns": [],
        "checkpoint": None,
        "scratchpad": "",
        "athena_context": None,
    }
    assert bundle["degraded"] == {}


@pytest.mark.parametrize(
    ("use_redis", "use_blob", "expected"),
    [
        (False, False, (False, False, False)),
        (True, False, (False, True, False)),
        (False, True, (True, False, False)),
        (True, True, (True, True, True)),
    ],
    ids=["none", "redis-only", "blob-only", "redis+blob"],
)
async def test_degradation_matrix_activates_exactly_the_documented_tiers(
    redis_client: Any,
    blob_storage: Any,
    make_memory: Factory,
    use_redis: bool,
    use_blob: bool,
    expected: tuple[bool, bool, bool],
) -> None:
    mem = make_memory(
        redis=redis_client if use_redis else None,
        blob=blob_storage if use_blob else None,
    )
    active = (mem.working is not None, mem.episodic is not None, mem.ltm is not None)
    assert active == expected
    await mem.log_turn("t1", "thought one", "action one", "result one")
    await mem.save_checkpoint('{"step": 1}')
    bundle = await mem.rehydrate_bundle()
    assert DOCUMENTED_KEYS <= set(bundle)
    assert (len(bundle["recent_turns"]) == 1) is use_redis
    assert (bundle["checkpoint"] == '{"step": 1}') is use_redis
    assert ("thought one" in bundle["scratchpad"]) is use_blob
    assert bundle["degraded"] == {}


# --- recovery ---------------------------------------------------------------------------


async def test_a_new_memory_rehydrates_turns_checkpoint_summary_and_goal_findings(
    redis_client: Any, blob_storage: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client, blob=blob_storage)
    for i in range(1, 4):
        await mem.log_turn(i, f"thought {i}", f"action {i}", f"result {i}", tokens=10 * i)
    await mem.save_checkpoint(json.dumps({"next_turn": 4}))
    assert mem.ltm is not None and mem.working is not None
    await mem.ltm.save_summary("The agent compared three vendors.")
    await mem.working.write("finding", "vendor B is cheapest", scope="goal")
    await mem.runtime.close()  # the first process ends

    fresh = make_memory(redis=redis_client, blob=blob_storage)
    bundle = await fresh.rehydrate_bundle(ledger_tail=10)
    assert bundle["ltm_summary"] == "The agent compared three vendors."
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["1", "2", "3"]
    assert bundle["recent_turns"][1]["tokens"] == 20
    assert json.loads(bundle["checkpoint"]) == {"next_turn": 4}
    for i in range(1, 4):
        assert f"thought {i}" in bundle["scratchpad"]
    assert "vendor B is cheapest" in bundle["scratchpad"]
    assert bundle["scratchpad"].index("Goal findings") < bundle["scratchpad"].index("thought 1")


async def test_a_goal_finding_is_carried_into_later_steps_and_other_agents_bundles(
    redis_client: Any, blob_storage: Any, make_memory: Factory
) -> None:
    # Goal scope means "for the rest of the goal": before, step 2's bundle (and
    # another agent's) did not hold what step 1 found.
    step1 = make_memory(redis=redis_client, blob=blob_storage, step="s1", agent="researcher")
    await step1.working.write(  # type: ignore[union-attr]
        "finding", {"content": "API uses OAuth2"}, scope="goal"
    )
    await step1.working.write("attempt", {"content": "GET /v1: 404"})  # type: ignore[union-attr]
    await step1.log_turn(1, "probing the API", "http_get", "404")
    await step1.runtime.close()
    for step, agent in (("s2", "researcher"), ("s2", "writer"), ("s1", "writer")):
        later = make_memory(redis=redis_client, blob=blob_storage, step=step, agent=agent)
        pad = (await later.rehydrate_bundle())["scratchpad"]
        assert "API uses OAuth2" in pad and "step s1, agent researcher" in pad, (step, agent)
        # Step-scoped notes and turns stay with their step.
        assert "GET /v1" not in pad and "probing the API" not in pad
        assert await later.working.get_notes() == ""  # type: ignore[union-attr]


async def test_views_of_one_runtime_share_the_workflows_goal_listing(
    redis_client: Any, local_blob: Any, make_runtime: Factory, workflow_id: str
) -> None:
    # The runtime's workflow state owns the listing (no process-wide table): a
    # finding written through one view is in another view's next bundle at once,
    # though that view's listing is younger than GOALS_LISTING_MAX_AGE.
    rt = make_runtime(redis=redis_client, blob=local_blob)
    reader, writer = rt.memory(workflow_id, "s2", "a1"), rt.memory(workflow_id, "s1", "a2")
    assert "OAuth2" not in (await reader.rehydrate_bundle())["scratchpad"]
    await writer.working.write("finding", "API uses OAuth2", scope="goal")
    assert "API uses OAuth2" in (await reader.rehydrate_bundle())["scratchpad"]


@pytest.mark.integration
def test_the_drop_in_constructor_works_outside_a_loop_with_queued_writes(
    tmp_path: Path, workflow_id: str, make_settings: Factory
) -> None:
    # A drop-in user builds UnifiedMemory in sync code (at import time) while a
    # crashed run left writes in both outboxes: construction must not need a loop,
    # and the first awaited call replays them.
    import redis
    import redis.asyncio as aioredis

    from jarvismem.backends.blob.local import LocalBlobStorage

    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    settings = make_settings(redis_url=REAL_REDIS_URL)
    blob_root = tmp_path / "blobs"
    note = b'\n{"ts":1.0,"type":"note","scope":"step","data":{"value":"left over"}}'

    async def leave_queued_writes() -> None:
        client = aioredis.Redis.from_url(REAL_REDIS_URL)
        blob = LocalBlobStorage(blob_root)
        mem = UnifiedMemory(workflow_id, "s1", "a1", client, blob, settings=settings)
        wf = mem.runtime.workflow(workflow_id)
        assert wf.redis_writer is not None and wf.blob_writer is not None
        assert mem.working is not None
        checkpoint = {"op": "checkpoint", "step": "s1", "state": '{"left": "over"}'}
        checkpoint |= {"ts": 1.0, "stamp": 1, "opid": "op-left-over"}
        await wf.redis_writer.outbox.put(checkpoint)
        await wf.blob_writer.outbox.put(
            {"op": "append", "path": mem.working.path, "data": note.decode()}
        )
        await mem.runtime.close()  # the process ends with both records queued
        await client.aclose()
        await blob.close()

    asyncio.run(leave_queued_writes())
    client = aioredis.Redis.from_url(REAL_REDIS_URL)
    blob = LocalBlobStorage(blob_root)
    try:
        mem = UnifiedMemory(workflow_id, "s1", "a1", client, blob, settings=settings)  # no loop

        async def first_calls() -> tuple[str | None, list[dict[str, Any]]]:
            try:
                state = await mem.load_checkpoint()
                wf = mem.runtime.workflow(workflow_id)
                assert wf.blob_writer is not None and await wf.blob_writer.flush(timeout=10.0)
                return state, await mem.working.read_all()  # type: ignore[union-attr]
            finally:
                await mem.close()
                await client.aclose()
                await blob.close()

        state, entries = asyncio.run(first_calls())
        assert state == '{"left": "over"}'
        assert entries == [{"type": "note", "scope": "step", "value": "left over"}]
    finally:
        sync = redis.Redis.from_url(REAL_REDIS_URL)
        keys = list(sync.scan_iter(match=f"jm:{settings.jarvismem_namespace}:*", count=1000))
        if keys:
            sync.delete(*keys)
        sync.close()


async def test_relogging_a_turn_after_a_crash_keeps_one_ledger_entry(
    redis_client: Any, blob_storage: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client, blob=blob_storage)
    await mem.log_turn(7, "t", "a", "r")
    await mem.runtime.close()
    again = make_memory(redis=redis_client, blob=blob_storage)
    await again.log_turn(7, "t", "a", "r")
    assert again.episodic is not None
    assert await again.episodic.length() == 1
    bundle = await again.rehydrate_bundle()
    assert bundle["scratchpad"].count("### Turn 7") == 1


async def test_the_same_turn_id_in_another_step_or_agent_is_a_different_turn(
    workflow_id: str, redis_client: Any, make_runtime: Factory
) -> None:
    rt = make_runtime(redis=redis_client)
    await rt.memory(workflow_id, "s1", "a1").log_turn(1, "x", "y", "z")
    await rt.memory(workflow_id, "s2", "a1").log_turn(1, "x", "y", "z")
    await rt.memory(workflow_id, "s1", "a2").log_turn(1, "x", "y", "z")
    ledger = rt.memory(workflow_id, "s1", "a1").episodic
    assert ledger is not None
    assert await ledger.length() == 3


async def test_ledger_values_keep_their_types(redis_client: Any, make_memory: Factory) -> None:
    mem = make_memory(redis=redis_client)
    await mem.log_turn("42", "42", {"tool": "search", "args": [1, 2]}, 42, tokens=5)
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    assert turn["turn_id"] == "42" and turn["thought"] == "42"
    assert turn["action"] == {"tool": "search", "args": [1, 2]}
    assert turn["result"] == 42 and turn["tokens"] == 5
    assert (turn["step_id"], turn["agent_id"]) == ("s1", "a1")


# --- checkpoints ----------------------------------------------------------------------------


async def test_checkpoint_save_with_a_stale_revision_is_rejected(
    redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client)
    rev1 = await mem.save_checkpoint("v1")
    rev2 = await mem.save_checkpoint("v2", expected_rev=rev1)
    assert rev2 == (rev1 or 0) + 1
    with pytest.raises(CheckpointConflictError) as info:
        await mem.save_checkpoint("stale", expected_rev=rev1)
    assert info.value.actual == rev2
    assert await mem.load_checkpoint() == "v2"


@pytest.mark.parametrize("bad", [{"a": 1}, b"bytes", 42, None])
async def test_a_non_string_checkpoint_is_refused_before_anything_is_written(
    redis_client: Any, bad: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client)
    await mem.save_checkpoint("good")
    with pytest.raises(InvalidPayloadError):
        await mem.save_checkpoint(bad)
    assert await mem.load_checkpoint() == "good"


async def test_an_oversized_checkpoint_is_refused(
    make_settings: Factory, redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(settings=make_settings(max_checkpoint_bytes=1024), redis=redis_client)
    with pytest.raises(PayloadTooLargeError):
        await mem.save_checkpoint("x" * 2000)
    assert await mem.load_checkpoint() is None


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", ["../etc", "a/b", "x{y}", "a:b", "", "*"])
def test_hostile_ids_are_refused_at_construction(bad_id: str) -> None:
    with pytest.raises(InvalidIdError):
        UnifiedMemory(bad_id, "s1", "a1")
    with pytest.raises(InvalidIdError):
        UnifiedMemory("wf", bad_id, "a1")
    with pytest.raises(InvalidIdError):
        UnifiedMemory("wf", "s1", bad_id)


async def test_a_hostile_turn_id_is_refused_before_anything_is_written(
    redis_client: Any, blob_storage: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client, blob=blob_storage)
    with pytest.raises(InvalidIdError):
        await mem.log_turn("../../x", "t", "a", "r")
    assert await mem.episodic.length() == 0  # type: ignore[union-attr]
    assert await mem.working.read_all() == []  # type: ignore[union-attr]


async def test_huge_turn_fields_are_truncated_with_a_marker(
    redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client)
    huge = "y" * 10_000_000
    await mem.log_turn(1, huge, "a", "r")
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    limit = mem.runtime.settings.max_turn_field_chars
    assert turn["thought"].startswith("y" * limit)
    assert turn["thought"].endswith(f"…[truncated {10_000_000 - limit} chars]")


async def test_secrets_are_redacted_before_any_tier_persists_them(
    redis_client: Any, blob_storage: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client, blob=blob_storage)
    secret = "sk-" + "A1b2C3d4" * 4
    await mem.log_turn(1, f"use key {secret}", "call api", "Authorization: Bearer abcdefgh12345678")
    await mem.working.write("note", {"token": f"{secret}"})  # type: ignore[union-attr]
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    assert secret not in json.dumps(turn)
    assert "abcdefgh12345678" not in json.dumps(turn)
    raw = await blob_storage.read(mem.working.path)  # type: ignore[union-attr]
    assert secret.encode() not in raw and b"abcdefgh12345678" not in raw


async def test_values_under_secret_named_keys_are_hidden_whatever_their_type(
    redis_client: Any, blob_storage: Any, make_memory: Factory
) -> None:
    # Regression: {"password": "hunter2"} and {"api_key": ...} were stored as given.
    mem = make_memory(redis=redis_client, blob=blob_storage)
    action = {"tool": "login", "args": {"user": "alice", "password": "hunter2"}}
    result = {"api_key": {"id": 7, "value": "k-123456"}, "token_count": 12}
    await mem.log_turn(1, "t", action, result)
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    assert turn["action"] == {"tool": "login", "args": {"user": "alice", "password": "[REDACTED]"}}
    assert turn["result"] == {"api_key": "[REDACTED]", "token_count": 12}
    raw = await blob_storage.read(mem.working.path)  # type: ignore[union-attr]
    assert b"hunter2" not in raw and b"k-123456" not in raw


async def test_with_redaction_disabled_secret_named_keys_are_kept(
    make_settings: Factory, redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(settings=make_settings(redaction_enabled=False), redis=redis_client)
    await mem.log_turn(1, "t", {"password": "hunter2"}, "r")
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    assert turn["action"] == {"password": "hunter2"}


async def test_a_depth_limit_from_settings_is_applied(
    make_settings: Factory, redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(settings=make_settings(max_payload_depth=2), redis=redis_client)
    await mem.log_turn(1, "t", {"a": [1]}, "r")
    with pytest.raises(InvalidPayloadError, match=r"^action: nesting deeper than 2 levels$"):
        await mem.log_turn(2, "t", {"a": [[1]]}, "r")
    assert [t["turn_id"] for t in await mem.episodic.tail(5)] == ["1"]  # type: ignore[union-attr]


async def test_a_huge_structured_result_costs_a_few_summarizer_calls_to_compact(
    redis_client: Any, local_blob: Any, make_memory: Factory
) -> None:
    # Regression: a 10 MB list result was stored whole and cost 861
    # summarizer calls to compact; bounded, it costs a handful.
    calls: list[int] = []

    class Counting:
        name = "counting"

        async def summarize(
            self, text: str, *, previous_summary: str | None = None, max_chars: int = 4000
        ) -> str:
            calls.append(len(text))
            return "summary"

    mem = make_memory(redis=redis_client, blob=local_blob, summarizer=Counting())
    big = [{"row": i, "text": "x" * 40} for i in range(200_000)]
    await mem.log_turn(1, "t", "a", big)
    report = await mem.compact_now()
    assert report["compacted"] is True
    assert 1 <= len(calls) <= 10


async def test_a_custom_redactor_is_applied(redis_client: Any, make_memory: Factory) -> None:
    mem = make_memory(redis=redis_client, redactor=lambda s: s.replace("Alice", "[name]"))
    await mem.log_turn(1, "Alice asked", "reply to Alice", "done")
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    assert turn["thought"] == "[name] asked" and turn["action"] == "reply to [name]"


async def test_the_scratchpad_of_a_long_step_renders_its_newest_turns_within_budget(
    make_settings: Factory, blob_storage: Any, make_memory: Factory
) -> None:
    mem = make_memory(settings=make_settings(scratchpad_budget_chars=1000), blob=blob_storage)
    await mem.working.write("finding", "the first finding", scope="goal")  # type: ignore[union-attr]
    for i in range(300):
        await mem.log_turn(i, f"thought number {i}", "act", "res")
    await mem.log_turn(300, "x" * 20_000, "huge", "res")  # bigger than the first tail read
    notes = await mem.working.render()  # type: ignore[union-attr]
    assert len(notes) <= 1000
    assert "the first finding" in notes
    assert "### Turn 300" in notes and "thought number 0" not in notes


async def test_a_durable_writer_never_replays_an_outbox_another_deliverer_holds(
    tmp_path: Path,
) -> None:
    from jarvismem.backends.outbox import Outbox
    from jarvismem.tiers.durable import DurableWriter, WriterPolicy

    path = tmp_path / "ob" / "redis.jsonl"
    applied: list[int] = []

    async def apply(record: dict[str, Any]) -> None:
        applied.append(record["n"])

    writer = DurableWriter("redis[wf]", Outbox(path), apply, policy=WriterPolicy(timeout=1.0))
    for n in range(3):
        await writer.outbox.put({"n": n})
    other = Outbox(path)  # another deliverer of the same file
    assert other.try_claim_delivery()
    assert not await writer.flush(timeout=0.5)  # waits for the holder; never a second one
    assert applied == []
    other.release_delivery()
    assert await writer.flush(timeout=5.0) and applied == [0, 1, 2]
    await other.close()
    await writer.close()


@pytest.mark.integration
async def test_log_turn_sends_the_ledger_append_before_the_scratchpad_write(
    real_redis: Any, local_blob: Any, make_memory: Factory
) -> None:
    """The ledger append goes first: the scratchpad never holds a turn the ledger was not sent."""
    mem = make_memory(redis=real_redis, blob=local_blob)
    await mem.log_turn(0, "warm", "up", "x")  # the script loaded, the file created
    events: list[str] = []
    send, append, append_now = (
        real_redis.execute_command,
        local_blob.append,
        local_blob.append_now,
    )

    async def spy_send(*args: Any, **kw: Any) -> Any:
        events.append("ledger sent")
        return await send(*args, **kw)

    async def spy_append(*args: Any, **kw: Any) -> Any:
        events.append("scratchpad written")
        return await append(*args, **kw)

    def spy_append_now(*args: Any, **kw: Any) -> bool:
        done: bool = append_now(*args, **kw)
        if done:  # written at once, without awaiting (else append follows)
            events.append("scratchpad written")
        return done

    real_redis.execute_command, local_blob.append = spy_send, spy_append
    local_blob.append_now = spy_append_now
    try:
        await mem.log_turn(1, "t", "a", "r")
    finally:
        del real_redis.execute_command, local_blob.append, local_blob.append_now
    assert events == ["ledger sent", "scratchpad written"]


@pytest.mark.integration
async def test_many_agents_log_concurrently_every_turn_exactly_once_in_each_agents_order(
    real_redis: Any, local_blob: Any, make_runtime: Factory, workflow_id: str
) -> None:
    rt = make_runtime(redis=real_redis, blob=local_blob)
    mems = [rt.memory(f"{workflow_id}-{a % 4}", "s1", f"agent-{a}") for a in range(32)]

    async def agent(mem: UnifiedMemory, relog: bool) -> None:
        for i in range(12):
            await mem.log_turn(i, f"t{i}", "a", "r")
            if relog and i % 3 == 0:
                await mem.log_turn(i, f"t{i}", "a", "r")  # a kernel re-running its turn

    await asyncio.gather(*(agent(m, a % 2 == 0) for a, m in enumerate(mems)))
    for w in range(4):
        ledger = mems[w].episodic
        assert ledger is not None
        entries = await ledger.full_history()
        assert len(entries) == 8 * 12
        for a in range(w, 32, 4):
            mine = [e["turn_id"] for e in entries if e["agent_id"] == f"agent-{a}"]
            assert mine == [str(i) for i in range(12)]
    for mem in mems[:3]:
        bundle = await mem.rehydrate_bundle()
        assert bundle["scratchpad"].count("### Turn 11") == 1
