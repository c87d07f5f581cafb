"""Recall wire models: ids, text and limits are validated at construction; entries are frozen."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from jarvismem.recall.models import (
    MemoryEntry,
    RecallRequest,
    RecallResult,
    WriteRequest,
    new_entry_id,
)

# --- MemoryEntry ----------------------------------------------------------------------------


def test_entry_defaults() -> None:
    entry = MemoryEntry(agent_id="a", content="  fact  ")
    assert entry.id.startswith("mem_") and len(entry.id) == 36
    assert entry.content == "fact"
    assert entry.namespace == "default" and entry.session_id is None


def test_entry_timestamps_default_to_now_in_epoch_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    entry = MemoryEntry(agent_id="a", content="fact")
    after = time.time_ns() // 1_000_000
    assert before <= entry.created_at <= after
    assert before <= entry.updated_at <= after


@pytest.mark.parametrize(
    "fields",
    [
        {"agent_id": "a", "content": ""},
        {"agent_id": "a", "content": "   \n\t"},
        {"agent_id": "a", "content": 5},
        {"agent_id": "a{b}", "content": "x"},
        {"agent_id": "", "content": "x"},
        {"agent_id": "a", "session_id": "", "content": "x"},
        {"agent_id": "a", "session_id": "s:1", "content": "x"},
        {"agent_id": "a", "namespace": "../ns", "content": "x"},
        {"agent_id": "a", "id": "mem/1", "content": "x"},
        {"agent_id": "a", "content": "x", "metadata": {"k": 1}},
        {"agent_id": "a", "content": "x", "created_at": -1},
        {"agent_id": "a", "content": "x", "unknown": "field"},
    ],
)
def test_entry_validation(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        MemoryEntry(**fields)


def test_a_bad_id_names_its_field_and_is_a_value_error() -> None:
    # Callers catch ValueError at the edge; the message must say which field was wrong.
    with pytest.raises(ValueError, match="session_id") as info:
        MemoryEntry(agent_id="a", session_id="bad id", content="x")
    assert isinstance(info.value, ValidationError)


def test_entries_are_frozen() -> None:
    entry = MemoryEntry(agent_id="a", content="x")
    with pytest.raises(ValidationError):
        entry.content = "changed"  # type: ignore[misc]


def test_entry_survives_a_json_round_trip() -> None:
    # Stores persist entries as JSON and rebuild them with model_validate_json.
    entry = MemoryEntry(
        agent_id="a", session_id="s1", namespace="team", content="fact", metadata={"k": "v"}
    )
    assert MemoryEntry.model_validate_json(entry.model_dump_json()) == entry


def test_new_entry_ids_are_unique_and_valid_entry_ids() -> None:
    ids = {new_entry_id() for _ in range(1000)}
    assert len(ids) == 1000
    for entry_id in list(ids)[:10]:
        assert MemoryEntry(agent_id="a", id=entry_id, content="x").id == entry_id


# --- requests -------------------------------------------------------------------------------


def test_write_request_id_is_optional_and_validated() -> None:
    assert WriteRequest(agent_id="a", content="x").id is None
    with pytest.raises(ValidationError):
        WriteRequest(agent_id="a", content="x", id="../etc")


def test_write_request_strips_content_and_refuses_blank_content() -> None:
    assert WriteRequest(agent_id="a", content="  x \n").content == "x"
    with pytest.raises(ValidationError, match="content"):
        WriteRequest(agent_id="a", content="  ")


def test_recall_request_defaults_and_validation() -> None:
    assert RecallRequest(agent_id="a", query=" q ").query == "q"
    assert RecallRequest(agent_id="a", query="q").limit == 5
    with pytest.raises(ValidationError):
        RecallRequest(agent_id="a", query="q", limit=-1)


@pytest.mark.parametrize(
    "fields",
    [
        {"agent_id": "a", "query": "q", "limit": 0},
        {"agent_id": "a", "query": ""},
        {"agent_id": "a", "query": None},
        {"agent_id": "a b", "query": "q"},
        {"agent_id": "a", "query": "q", "extra": 1},
        {"agent_id": "a", "query": "q", "min_score": -0.1},
        {"agent_id": "a", "query": "q", "min_score": float("nan")},
        {"agent_id": "a", "query": "q", "filter": ["k", "v"]},
        {"agent_id": "a", "query": "q", "filter": {"k": 1}},
        {"agent_id": "a", "query": "q", "filter": {"": "v"}},
    ],
)
def test_recall_request_refuses(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RecallRequest(**fields)


def test_requests_share_the_scope_fields_of_entries() -> None:
    scope: dict[str, Any] = {"agent_id": "a", "session_id": "s", "namespace": "n"}
    request = RecallRequest(query="q", **scope)
    write = WriteRequest(content="c", **scope)
    entry = MemoryEntry(content="c", **scope)
    for model in (request, write, entry):
        assert (model.agent_id, model.session_id, model.namespace) == ("a", "s", "n")


# --- RecallResult ---------------------------------------------------------------------------


def test_result_score_must_not_be_negative() -> None:
    entry = MemoryEntry(agent_id="a", content="x")
    assert RecallResult(entry=entry, score=0.0).score == 0.0
    with pytest.raises(ValidationError):
        RecallResult(entry=entry, score=-0.1)


def test_results_are_frozen() -> None:
    result = RecallResult(entry=MemoryEntry(agent_id="a", content="x"), score=1.0)
    with pytest.raises(ValidationError):
        result.score = 2.0  # type: ignore[misc]


def test_a_fact_over_the_content_limit_is_refused() -> None:
    from pydantic import ValidationError

    from jarvismem.defaults import RECALL_CONTENT_MAX_CHARS

    WriteRequest(agent_id="a1", content="x" * RECALL_CONTENT_MAX_CHARS)
    with pytest.raises(ValidationError, match="at most"):
        WriteRequest(agent_id="a1", content="x" * (RECALL_CONTENT_MAX_CHARS + 1))


def test_a_stored_entry_over_the_write_limit_is_still_read() -> None:
    """The bound is on writes: an entry stored before it (or by another tool) still loads."""
    from jarvismem.defaults import RECALL_CONTENT_MAX_CHARS

    big = "x" * (RECALL_CONTENT_MAX_CHARS + 10)
    entry = MemoryEntry(id="e1", agent_id="a1", content=big, created_at=1, updated_at=1)
    assert entry.content == big


# --- occurred_at, filter, min_score ----------------------------------------------------------

MAY_8_2023 = 1_683_504_000_000  # 2023-05-08T00:00:00Z


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (MAY_8_2023, MAY_8_2023),
        ("2023-05-08", MAY_8_2023),
        ("2023-05-08T00:00:00Z", MAY_8_2023),
        ("2023-05-08T02:00:00+02:00", MAY_8_2023),
        (" 2023-05-08T00:00:00 ", MAY_8_2023),
        (datetime(2023, 5, 8, tzinfo=UTC), MAY_8_2023),
        (datetime(2023, 5, 8), MAY_8_2023),  # zone-less is UTC
        (None, None),
    ],
)
def test_occurred_at_takes_epoch_ms_iso_8601_or_a_datetime(given: Any, expected: Any) -> None:
    assert WriteRequest(agent_id="a", content="x", occurred_at=given).occurred_at == expected


@pytest.mark.parametrize(
    "bad", [True, 1.5, "yesterday", "", "8 May 2023", -1, 253_402_300_800_000, [2023]]
)
def test_a_bad_occurred_at_is_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(ValidationError, match="occurred_at"):
        WriteRequest(agent_id="a", content="x", occurred_at=bad)


def test_an_entry_without_occurred_at_takes_its_creation_time() -> None:
    entry = MemoryEntry(agent_id="a", content="x", created_at=5, updated_at=7)
    assert entry.occurred_at == 5
    stored = entry.model_dump()
    del stored["occurred_at"]  # as entries written before the field existed
    assert MemoryEntry.model_validate(stored).occurred_at == 5
    assert MemoryEntry(agent_id="a", content="x", occurred_at=MAY_8_2023).occurred_at == MAY_8_2023


def test_recall_request_filter_and_min_score_defaults() -> None:
    request = RecallRequest(agent_id="a", query="q")
    assert (request.filter, request.min_score) == (None, 0.0)
    assert RecallRequest(agent_id="a", query="q", filter={}).filter is None
    wanted = RecallRequest(agent_id="a", query="q", filter={"k": "v"}, min_score=0.5)
    assert (wanted.filter, wanted.min_score) == ({"k": "v"}, 0.5)
