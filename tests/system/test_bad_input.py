"""Bad input: each has a defined outcome and nothing stored is damaged.

Either a specific error from ``jarvismem.errors`` before anything is written, or
a tolerant skip with a warning. The ledger runs on fakeredis and the real server,
the scratchpad on a local folder and Azurite (the shared parametrized fixtures).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from jarvismem.defaults import AZURE_APPEND_BLOCK_BYTES, SUMMARY_MAX_CHARS
from jarvismem.errors import ConfigError, InvalidIdError, InvalidPayloadError
from jarvismem.keys import KeySpace, validate_id
from jarvismem.memory import UnifiedMemory
from jarvismem.payload import max_field_chars_for, turn_record_max_bytes
from jarvismem.records import compact_json
from jarvismem.settings import Settings
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.testing.fake_llm import FakeLLMServer
from tests.conftest import Factory, MakeSettings


@pytest.fixture
def settings(make_settings: MakeSettings) -> Settings:
    """A 1 s Athena tier timeout: a malformed answer is given up on quickly."""
    return make_settings(tier_timeout_athena=1.0)


@pytest.fixture
def mem(redis_client: Any, blob_storage: Any, make_memory: Factory) -> UnifiedMemory:
    """A view over both parametrized stores: fakeredis/real Redis, local folder/Azurite."""
    memory: UnifiedMemory = make_memory(redis=redis_client, blob=blob_storage)
    return memory


async def nothing_written(mem: UnifiedMemory) -> bool:
    assert mem.episodic is not None and mem.working is not None
    wf = mem.runtime.workflow(mem.workflow_id)
    queued = any(w is not None and w.degraded for w in (wf.redis_writer, wf.blob_writer))
    return await mem.episodic.length() == 0 and await mem.working.read_all() == [] and not queued


# --- ids ---


@hsettings(max_examples=300, deadline=None)
@given(st.text(max_size=140))
def test_any_text_is_either_refused_or_a_key_and_path_safe_id(value: str) -> None:
    try:
        ok = validate_id(value)
    except InvalidIdError:
        return
    ks = KeySpace("ns")
    assert not set(ok) & set("/\\:{}*?[]\x00 ") and ".." not in ok and not ok.startswith(".")
    assert ks.scratchpad(ok, ok, ok).count("/") == 6
    assert ks.ledger(ok).count(":") == 3


@pytest.mark.parametrize(
    "turn_id",
    ["../../etc/passwd", "a/b", "a:b", "{tag}", "*", "", "x" * 129, "\x00", ".hidden", True, 1.5],
)
async def test_a_hostile_turn_id_is_refused_before_any_tier_is_written(
    mem: UnifiedMemory, turn_id: Any
) -> None:
    with pytest.raises(InvalidIdError):
        await mem.log_turn(turn_id, "t", "a", "r")
    assert await nothing_written(mem)


# --- payloads ---


async def test_a_10_mb_thought_is_truncated_in_every_tier_with_a_documented_marker(
    mem: UnifiedMemory, settings: Settings
) -> None:
    size = 10 * 1024 * 1024
    await mem.log_turn(1, "z" * size, "a", "r")
    limit = settings.max_turn_field_chars
    marker = f"…[truncated {size - limit} chars]"
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    (record,) = await mem.working.read_records()  # type: ignore[union-attr]
    for thought in (turn["thought"], record["data"]["thought"]):
        assert thought == "z" * limit + marker


def nested_list(levels: int) -> list[Any]:
    """``levels`` lists one inside the other, built without recursion."""
    root: list[Any] = []
    inner = root
    for _ in range(levels - 1):
        child: list[Any] = []
        inner.append(child)
        inner = child
    return root


async def test_a_10_mb_list_result_is_bounded_in_the_ledger_and_the_scratchpad(
    mem: UnifiedMemory, settings: Settings
) -> None:
    # Regression: only strings were truncated; the whole list was stored (and
    # on Azure the record failed its append after the ledger write).
    big = [{"row": i, "text": "x" * 40} for i in range(200_000)]  # ~10 MB of JSON
    await mem.log_turn(1, "t", "a", big)
    limit = settings.max_turn_field_chars
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    (record,) = await mem.working.read_records()  # type: ignore[union-attr]
    for result in (turn["result"], record["data"]["result"]):
        assert set(result) == {"truncated", "kind", "items", "kept_chars"}
        assert result["kind"] == "list" and result["items"] == 200_000
        assert result["truncated"].startswith('[{"row":0,"text":"xxx')
        assert len(compact_json(result)) <= limit
    raw = await mem.working.blob.read(mem.working.path)  # type: ignore[union-attr]
    assert len(raw) < 4 * limit


@pytest.mark.parametrize("levels", [495, 10_000])
async def test_deep_nesting_is_refused_with_a_specific_error_and_nothing_written(
    mem: UnifiedMemory, levels: int
) -> None:
    # Regression: ~495 levels made log_turn raise RecursionError on valid JSON.
    with pytest.raises(InvalidPayloadError, match=r"^result: nesting deeper than 64 levels$"):
        await mem.log_turn(1, "t", "a", nested_list(levels))
    assert await nothing_written(mem)
    await mem.log_turn(2, "t", "a", nested_list(64))
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    assert turn["result"] == nested_list(64)


async def test_a_deep_scratchpad_note_is_refused_without_recursion(mem: UnifiedMemory) -> None:
    assert mem.working is not None
    with pytest.raises(InvalidPayloadError, match="nesting deeper than 64 levels"):
        await mem.working.write("note", {"tree": nested_list(10_000)}, scope="goal")
    assert await mem.working.read_all() == []
    assert await mem.working.goal_findings() == []


async def test_a_turn_of_three_worst_case_fields_fits_one_append_on_every_blob_store(
    mem: UnifiedMemory, settings: Settings
) -> None:
    # Each field at the limit with every character escaped to six bytes: the
    # largest record the size policy allows still appends (Azure: one block).
    limit = settings.max_turn_field_chars
    worst = "\x01" * (limit + 10)
    await mem.log_turn(1, worst, worst, worst, tokens=10**4000)
    (record,) = await mem.working.read_records()  # type: ignore[union-attr]
    assert record["data"]["result"].startswith("\x01" * 10)
    size = len(await mem.working.blob.read(mem.working.path))  # type: ignore[union-attr]
    assert size <= turn_record_max_bytes(limit)
    cap = getattr(mem.working.blob, "max_append_bytes", None)  # type: ignore[union-attr]
    assert cap is None or turn_record_max_bytes(limit) <= cap


def test_azure_settings_refuse_a_field_limit_whose_records_exceed_one_append_block(
    make_settings: MakeSettings,
) -> None:
    fits = max_field_chars_for(AZURE_APPEND_BLOCK_BYTES)
    azure = {
        "storage_backend": "azure",
        "azure_storage_connection_string": "UseDevelopmentStorage=true",
    }
    assert make_settings(max_turn_field_chars=fits, **azure).max_turn_field_chars == fits
    with pytest.raises(ConfigError, match=f"MAX_TURN_FIELD_CHARS.*must be at most {fits}"):
        make_settings(max_turn_field_chars=fits + 1, **azure)
    # A local folder takes any append: the same limit is fine there.
    assert make_settings(max_turn_field_chars=fits + 1).max_turn_field_chars == fits + 1


async def test_a_view_over_a_store_with_a_smaller_append_limit_is_refused(
    blob_storage: Any, make_memory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(type(blob_storage), "max_append_bytes", 1024 * 1024, raising=False)
    with pytest.raises(ConfigError, match="MAX_TURN_FIELD_CHARS=65536"):
        make_memory(blob=blob_storage)


@pytest.mark.parametrize(
    "field_values",
    [
        {"thought": object()},
        {"action": {"tool": {1, 2}}},
        {"result": "ok \ud800"},
        {"thought": "lone surrogate \udfff"},
    ],
    ids=["object", "set-inside-dict", "surrogate-result", "surrogate-thought"],
)
async def test_an_unstorable_turn_field_is_refused_before_anything_is_written(
    mem: UnifiedMemory, field_values: dict[str, Any]
) -> None:
    fields = {"thought": "t", "action": "a", "result": "r", **field_values}
    with pytest.raises(InvalidPayloadError):
        await mem.log_turn(1, **fields)
    assert await nothing_written(mem)
    await mem.log_turn(2, "fine", "a", "r")  # and the next turn is not stuck behind it
    assert [t["turn_id"] for t in await mem.episodic.tail(5)] == ["2"]  # type: ignore[union-attr]


async def test_a_lone_surrogate_does_not_wedge_a_redis_only_ledger(
    workflow_id: str, redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client)
    with pytest.raises(InvalidPayloadError):
        await mem.log_turn(1, "bad \ud800", "a", "r")
    await mem.log_turn(2, "good", "a", "r")
    writer = mem.runtime.workflow(workflow_id).redis_writer
    assert writer is not None and not writer.degraded
    assert [t["turn_id"] for t in await mem.episodic.tail(5)] == ["2"]  # type: ignore[union-attr]


async def test_non_utf8_bytes_are_stored_with_replacement_characters(mem: UnifiedMemory) -> None:
    await mem.log_turn(1, b"caf\xe9 \xff\xfe", "a", "r")
    (turn,) = await mem.episodic.tail(1)  # type: ignore[union-attr]
    (record,) = await mem.working.read_records()  # type: ignore[union-attr]
    assert turn["thought"] == record["data"]["thought"] == "caf\ufffd \ufffd\ufffd"


@pytest.mark.parametrize(
    "state",
    [{"a": 1}, ["x"], b"{}", 3.14, None, object(), "bad \ud800"],
    ids=["dict", "list", "bytes", "float", "none", "object", "surrogate"],
)
async def test_a_bad_checkpoint_is_refused_and_the_stored_one_kept(
    mem: UnifiedMemory, state: Any
) -> None:
    await mem.save_checkpoint('{"good": true}')
    with pytest.raises(InvalidPayloadError):
        await mem.save_checkpoint(state)
    assert await mem.load_checkpoint() == '{"good": true}'


# The fixtures are shared by the examples of one run: each example saves over the
# same checkpoint, and what it loads back is what it saved or it was refused.
@hsettings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(text=st.text(max_size=300))
async def test_any_valid_text_checkpoint_round_trips_unchanged(
    fake_redis: Any, make_memory: Factory, text: str
) -> None:
    mem = make_memory(redis=fake_redis)
    try:
        await mem.save_checkpoint(text)
    except InvalidPayloadError:
        return  # unpaired surrogates: refused, the defined outcome
    assert await mem.load_checkpoint() == text


# --- damaged stored data ---


async def test_a_torn_or_mistyped_scratchpad_line_is_skipped_and_later_turns_render(
    mem: UnifiedMemory, caplog: pytest.LogCaptureFixture
) -> None:
    assert mem.working is not None
    await mem.log_turn(1, "before the damage", "a", "r")
    await mem.runtime.blob.append(  # type: ignore[union-attr]
        mem.working.path,
        b'\n{"ts": 1, "type": "turn", "data": {"thou'  # torn
        b'\n[1, 2]\n"just a string"\n\xff\xfe\x00garbage'
        b'\n{"type": "turn", "turn_id": {"odd": 1}, "data": "not a dict"}'
        b'\n{"type": 5, "data": null, "ts": "yesterday"}',
    )
    await mem.log_turn(2, "after the damage", "a", "r")
    bundle = await mem.rehydrate_bundle()
    assert "working" not in bundle["degraded"]
    notes = bundle["scratchpad"]
    assert "before the damage" in notes and "after the damage" in notes
    assert any("skipped" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


async def test_a_garbage_summary_blob_is_ignored_with_a_warning(
    mem: UnifiedMemory, caplog: pytest.LogCaptureFixture
) -> None:
    assert mem.ltm is not None
    await mem.ltm.save_summary("a real summary")
    await mem.runtime.redis.delete(mem.ltm.key)  # force the blob path
    await mem.runtime.blob.write(mem.ltm.blob_path, b"\xff\xfe\x00\x81 garbage")  # type: ignore[union-attr]
    bundle = await mem.rehydrate_bundle()
    assert bundle["ltm_summary"] is None and "ltm" not in bundle["degraded"]
    assert any("not UTF-8" in r.getMessage() for r in caplog.records)


async def test_a_summary_with_damaged_provenance_keeps_its_text(mem: UnifiedMemory) -> None:
    assert mem.ltm is not None
    await mem.ltm.save_summary("kept text")
    await mem.runtime.redis.delete(mem.ltm.key)
    await mem.runtime.blob.write(mem.ltm.meta_path, b'{"turns": "many", ')  # type: ignore[union-attr]
    record = await mem.ltm.load_summary_record()
    assert record is not None and record.text == "kept text" and record.turns == 0


async def test_ledger_entries_of_unexpected_shape_come_back_as_raw_text(
    mem: UnifiedMemory,
) -> None:
    assert mem.episodic is not None
    await mem.log_turn(1, "t", "a", "r")
    await mem.runtime.redis.xadd(mem.episodic.key, {"thought": "{not json", "turn_id": "[1,"})
    bundle = await mem.rehydrate_bundle()
    assert "episodic" not in bundle["degraded"]
    assert bundle["recent_turns"][-1]["thought"] == "{not json"


# --- malformed answers from services ---


async def test_a_malformed_athena_answer_marks_the_tier_degraded_and_log_turn_goes_on(
    redis_client: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_memory: Factory,
) -> None:
    client = make_athena_client(athena_server.url, max_retries=0, timeout=2.0)
    mem = make_memory(redis=redis_client, athena=client)
    await mem.log_turn(1, "t", "a", "r")
    assert await mem.runtime.athena_memory("a1") is not None
    athena_server.mode = "garbage"
    await mem.log_turn(2, "t", "a", "r")
    bundle = await mem.rehydrate_bundle()
    assert "athena" in bundle["degraded"] and bundle["athena_context"] is None
    assert len(bundle["recent_turns"]) == 2
    athena_server.mode = "ok"


@pytest.fixture
def llm_memory(
    fake_llm: FakeLLMServer,
    redis_client: Any,
    local_blob: Any,
    make_settings: Factory,
    make_memory: Factory,
) -> UnifiedMemory:
    """A view whose summaries come from ``fake_llm`` (one attempt per compaction)."""
    settings = make_settings(llm_base_url=fake_llm.url, llm_max_retries=0)
    memory: UnifiedMemory = make_memory(settings=settings, redis=redis_client, blob=local_blob)
    return memory


@pytest.mark.parametrize("mode", ["empty", "garbage"])
async def test_an_unusable_llm_answer_keeps_the_old_summary(
    fake_llm: FakeLLMServer, llm_memory: UnifiedMemory, mode: str
) -> None:
    mem = llm_memory
    assert mem.ltm is not None
    await mem.ltm.save_summary("the old summary")
    await mem.log_turn(1, "something new", "a", "r")
    fake_llm.mode = mode  # type: ignore[assignment]
    result = await mem.compact_now()
    assert result["compacted"] is False
    assert await mem.ltm.load_summary() == "the old summary"


async def test_a_huge_llm_answer_is_bounded_in_the_new_summary(
    fake_llm: FakeLLMServer, llm_memory: UnifiedMemory
) -> None:
    fake_llm.mode = "huge"
    mem = llm_memory
    await mem.log_turn(1, "something", "a", "r")
    result = await mem.compact_now()
    summary = await mem.ltm.load_summary()  # type: ignore[union-attr]
    assert result["compacted"] is True and summary is not None
    assert len(summary) <= SUMMARY_MAX_CHARS < fake_llm.huge_chars
