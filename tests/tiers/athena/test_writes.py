"""Athena write records: validated before queueing, redacted, one idempotency key per event."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from jarvismem.errors import InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.redaction import no_redaction
from jarvismem.tiers.athena.writes import (
    CALLER_METADATA_PREFIX,
    WIRE_METADATA_KEYS,
    conversation_record,
    event_record,
    turn_record,
)


def _upper(text: str) -> str:
    return text.upper()


def _recent(stamp: str) -> bool:
    """An RFC 3339 UTC time within the last minute."""
    assert stamp.endswith("Z")
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return timedelta(0) <= datetime.now(UTC) - when < timedelta(minutes=1)


def test_event_record_redacts_content_and_metadata() -> None:
    record = event_record("thought", "secret", {"tool": "search"}, _upper)
    assert record["kind"] == "event" and record["type"] == "thought"
    assert record["role"] == "agent"
    meta = record["metadata"]
    assert record["content"] == "SECRET" and meta.pop("meta.tool") == "SEARCH"
    assert set(meta) == {"occurred_at"} and _recent(meta["occurred_at"])
    other = event_record("thought", "secret", {}, _upper)
    assert record["idempotency_key"] != other["idempotency_key"]  # each write is its own


@pytest.mark.parametrize(
    ("etype", "content", "metadata"),
    [
        ("feeling", "x", {}),  # not an Athena event type
        ("thought", b"bytes", {}),
        ("thought", "x", {"count": 3}),  # Athena takes string values only
    ],
)
def test_event_record_refuses_bad_input(
    etype: str, content: object, metadata: dict[str, object]
) -> None:
    with pytest.raises(InvalidPayloadError):
        event_record(etype, content, metadata, no_redaction)  # type: ignore[arg-type]


def test_caller_metadata_cannot_reach_server_meaningful_keys() -> None:
    # An execution_id would make the server replace earlier short-term entries;
    # occurred_at/idempotency_key are ours. Every caller key is prefixed.
    record = event_record(
        "observation",
        "x",
        {"execution_id": "e1", "occurred_at": "1999", "idempotency_key": "k", "workflow_id": "wf"},
        no_redaction,
    )
    meta = record["metadata"]
    assert meta["workflow_id"] == "wf"  # a documented key a caller may set
    assert meta["meta.execution_id"] == "e1" and "execution_id" not in meta
    assert meta["meta.occurred_at"] == "1999" and meta["occurred_at"] != "1999"
    assert meta["meta.idempotency_key"] == "k"
    unprefixed = {k for k in meta if not k.startswith(CALLER_METADATA_PREFIX)}
    assert unprefixed <= WIRE_METADATA_KEYS


def test_conversation_record_is_user_then_agent_message_events() -> None:
    keys = KeySpace("ns")
    record = conversation_record(
        keys, "hello", "hi there", _upper, workflow_id="wf", step_id="s1", agent_id="a1"
    )
    assert record is not None and record["kind"] == "events"  # events keep their metadata
    user, agent = record["events"]
    assert (user["type"], user["role"], user["content"]) == ("message", "user", "HELLO")
    assert (agent["type"], agent["role"], agent["content"]) == ("message", "agent", "HI THERE")
    assert user["metadata"]["workflow_id"] == "wf" and user["metadata"]["step_id"] == "s1"
    assert user["idempotency_key"] != agent["idempotency_key"]
    assert conversation_record(keys, "", None, _upper, agent_id="a1") is None
    with pytest.raises(InvalidPayloadError):
        conversation_record(keys, 3, None, _upper, agent_id="a1")  # type: ignore[arg-type]
    with pytest.raises(InvalidPayloadError):
        conversation_record(keys, "hi", 3, _upper, agent_id="a1")  # type: ignore[arg-type]


def test_a_turns_user_message_has_the_same_key_in_the_turn_and_in_a_capture() -> None:
    keys = KeySpace("ns")
    ids = {"workflow_id": "wf", "step_id": "s1", "agent_id": "a1"}
    turn = turn_record(keys, 3, ("t", "", ""), no_redaction, user_message="book it", **ids)
    captured = conversation_record(keys, "book it", "done", no_redaction, turn_id=3, **ids)
    assert turn is not None and captured is not None
    assert turn["events"][0]["role"] == "user"
    assert turn["events"][0]["idempotency_key"] == captured["events"][0]["idempotency_key"]


def test_turn_record_keys_are_stable_per_turn() -> None:
    keys = KeySpace("ns")

    def build(turn: str | int) -> dict:
        record = turn_record(
            keys,
            turn,
            ("think", {"tool": "x"}, ""),
            no_redaction,
            workflow_id="wf",
            step_id="s1",
            agent_id="a1",
        )
        assert record is not None
        return record

    first, again, other = build(7), build("7"), build(8)
    assert [e["type"] for e in first["events"]] == ["thought", "action"]  # empty result left out
    assert {e["role"] for e in first["events"]} == {"agent"}
    meta = first["events"][0]["metadata"]
    assert (meta["workflow_id"], meta["step_id"], meta["turn_id"]) == ("wf", "s1", "7")
    assert _recent(meta["occurred_at"])
    assert json.loads(first["events"][1]["content"]) == {"tool": "x"}
    assert [e["idempotency_key"] for e in first["events"]] == [
        e["idempotency_key"] for e in again["events"]
    ]
    assert first["events"][0]["idempotency_key"] != other["events"][0]["idempotency_key"]


def test_empty_turn_makes_no_record() -> None:
    assert (
        turn_record(
            KeySpace(),
            1,
            (None, "", None),
            no_redaction,
            workflow_id=None,
            step_id=None,
            agent_id="a1",
        )
        is None
    )
