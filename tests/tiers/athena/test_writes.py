"""Athena write records: validated before queueing, redacted, one idempotency key per event."""

from __future__ import annotations

import json

import pytest

from jarvismem.errors import InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.redaction import no_redaction
from jarvismem.tiers.athena.writes import event_record, interaction_record, turn_record


def _upper(text: str) -> str:
    return text.upper()


def test_event_record_redacts_content_and_metadata() -> None:
    record = event_record("thought", "secret", {"tool": "search"}, _upper)
    assert record["kind"] == "event" and record["type"] == "thought"
    assert record["content"] == "SECRET" and record["metadata"] == {"tool": "SEARCH"}
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


def test_interaction_record_checks_types_and_redacts() -> None:
    record = interaction_record("hello", None, _upper)
    assert record["user_message"] == "HELLO" and record["agent_response"] is None
    with pytest.raises(InvalidPayloadError):
        interaction_record(3, None, _upper)  # type: ignore[arg-type]
    with pytest.raises(InvalidPayloadError):
        interaction_record("hi", 3, _upper)  # type: ignore[arg-type]


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
