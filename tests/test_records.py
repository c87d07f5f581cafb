"""jarvismem.records: the ledger entry and scratchpad line encodings."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from jarvismem.errors import InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.payload import PayloadPolicy
from jarvismem.records import (
    TURN,
    TURN_FIELDS,
    decode_entry,
    encode_entry,
    encode_fields,
    encode_record,
    entry_tokens,
    parse_records,
    turn_identity,
    turn_record,
)

TYPED_ENTRY: dict[str, Any] = {
    "note": "42",
    "n": 42,
    "pi": 3.5,
    "none": None,
    "flag": True,
    "nested": {"a": [1, None, "ü"]},
    "emoji": "café ☕",
}


# --- ledger entries -----------------------------------------------------------------------


def _as_stream_reply(args: list[str]) -> dict[bytes, bytes]:
    """What redis-py hands back for the fields XADD stored (bytes in, bytes out)."""
    return {k.encode(): v.encode() for k, v in zip(args[::2], args[1::2], strict=True)}


def test_fields_round_trip_with_their_types() -> None:
    entry = decode_entry(b"1-0", _as_stream_reply(encode_fields(TYPED_ENTRY)))
    assert entry == {"id": "1-0", **TYPED_ENTRY}
    assert isinstance(entry["note"], str) and isinstance(entry["n"], int)


def test_fields_are_compact_json_in_order_and_not_ascii_escaped() -> None:
    args = encode_fields({"b": "é", "a": [1, 2]})
    assert args == ["b", '"é"', "a", "[1,2]"]


def test_encode_entry_is_the_mapping_form_of_encode_fields() -> None:
    assert encode_entry(TYPED_ENTRY) == dict(
        zip(encode_fields(TYPED_ENTRY)[::2], encode_fields(TYPED_ENTRY)[1::2], strict=True)
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({}, "at least one field"),
        ({"": 1}, "non-empty strings"),
        ({1: 1}, "non-empty strings"),
        ({"x": object()}, "not JSON-serialisable"),
        ({"x": {1, 2}}, "not JSON-serialisable"),
        ({"x": "lone \udfff"}, "unpaired surrogates"),
    ],
    ids=["empty", "empty-name", "int-name", "object", "set", "surrogate"],
)
def test_bad_entries_are_refused(bad: dict[Any, Any], message: str) -> None:
    with pytest.raises(InvalidPayloadError, match=message):
        encode_fields(bad)


def test_values_written_by_other_tools_decode_as_raw_text() -> None:
    # redis-cli values: not JSON, or JSON that splits into more elements than fields.
    entry = decode_entry(b"2-0", {b"note": b"1,2", b"plain": b"hello", b"n": b"7"})
    assert entry == {"id": "2-0", "note": "1,2", "plain": "hello", "n": 7}
    assert decode_entry("3-0", {"note": "1,2", "n": "7"}) == {"id": "3-0", "note": "1,2", "n": 7}


def test_str_and_bytes_replies_decode_alike() -> None:
    args = encode_fields(TYPED_ENTRY)
    as_str = dict(zip(args[::2], args[1::2], strict=True))
    assert decode_entry("1-0", as_str) == decode_entry(b"1-0", _as_stream_reply(args))


def test_an_entry_without_fields_decodes_to_its_id() -> None:
    assert decode_entry(b"4-0", {}) == {"id": "4-0"}


@pytest.mark.parametrize(
    ("fields", "identity"),
    [
        ({"step_id": "s", "agent_id": "a", "turn_id": 3}, ("s", "a", "3")),
        ({"step_id": "s", "agent_id": "a", "turn_id": "t-1"}, ("s", "a", "t-1")),
        ({"step_id": "s", "agent_id": "a"}, None),
        ({"step_id": "s", "agent_id": "a", "turn_id": {"x": 1}}, None),
        ({"note": "hello"}, None),
    ],
)
def test_turn_identity(fields: dict[str, Any], identity: tuple[str, str, str] | None) -> None:
    assert turn_identity(fields) == identity


def test_turn_fields_name_what_a_ledger_turn_holds() -> None:
    assert set(TURN_FIELDS) >= {"turn_id", "step_id", "agent_id", "thought", "action", "result"}


async def test_a_real_stream_round_trips_the_encoding(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    key = keyspace.ledger(workflow_id)
    sid = await real_redis.xadd(key, encode_entry(TYPED_ENTRY))
    [(got_id, fields)] = await real_redis.xrange(key)
    assert decode_entry(got_id, fields) == {"id": sid.decode(), **TYPED_ENTRY}


# --- scratchpad lines ---------------------------------------------------------------------


def test_a_record_is_one_line_with_a_leading_newline() -> None:
    data = encode_record({"ts": 1.0, "type": "note", "scope": "step", "data": "a\nb ü"})
    assert data.startswith(b"\n") and data.count(b"\n") == 1
    assert json.loads(data) == {"ts": 1.0, "type": "note", "scope": "step", "data": "a\nb ü"}


def test_records_round_trip_through_parse() -> None:
    records = [turn_record(i, {"thought": f"t{i}"}, float(i)) for i in range(3)]
    raw = b"".join(encode_record(r) for r in records)
    assert parse_records(raw, source="test") == records


def test_turn_record_shape() -> None:
    assert turn_record("7", {"thought": "x"}, 2.5) == {
        "ts": 2.5,
        "type": TURN,
        "scope": "step",
        "turn_id": "7",
        "data": {"thought": "x"},
    }


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"data": object()}, "not JSON-serialisable"),
        ({"data": "lone \udfff"}, "unpaired surrogates"),
    ],
)
def test_bad_records_are_refused(record: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidPayloadError, match=message):
        encode_record(record)


def test_a_torn_record_spoils_only_itself(caplog: pytest.LogCaptureFixture) -> None:
    first, second = (encode_record({"type": "note", "data": n}) for n in (1, 2))
    raw = first + second[:-4] + encode_record({"type": "note", "data": 3}) + b"\n[1,2]\n\n"
    with caplog.at_level(logging.WARNING, logger="jarvismem.records"):
        records = parse_records(raw, source="pad.jsonl")
    assert [r["data"] for r in records] == [1, 3]
    # One warning for the torn line and the non-object line together.
    [warning] = caplog.records
    assert "pad.jsonl" in warning.getMessage() and "2" in warning.getMessage()


def test_a_tail_read_drops_its_partial_first_line_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = b"".join(encode_record({"type": "note", "data": n}) for n in range(3))
    cut = raw[5:]  # starts mid-record, as a tail read does
    with caplog.at_level(logging.WARNING, logger="jarvismem.records"):
        records = parse_records(cut, source="pad", partial_head=True)
    assert [r["data"] for r in records] == [1, 2]
    assert not caplog.records


def test_invalid_utf8_lines_are_skipped() -> None:
    raw = b'\n{"a": "\xc3\x28"}' + encode_record({"type": "note", "data": "ok"})
    assert parse_records(raw, source="pad") == [{"type": "note", "data": "ok"}]


def test_entry_tokens_takes_the_given_count_else_estimates_four_chars_a_token() -> None:
    assert entry_tokens({"tokens": 7, "thought": "x" * 400}) == 7
    assert entry_tokens({"tokens": 0, "thought": "x" * 9, "action": "ab"}) == 3 + 1
    assert entry_tokens({"tokens": True, "thought": "abcd"}) == 1  # a bool is no count
    assert entry_tokens({"result": {"k": [1, 2]}}) == 4  # str({'k': [1, 2]}) is 13 chars
    assert entry_tokens({}) == 0


def test_entry_tokens_of_a_cleaned_entry_and_of_its_read_back_agree() -> None:
    """The ledger adds what log_turn counts; compaction subtracts what it reads back."""
    policy = PayloadPolicy()
    entry = {
        "turn_id": "1",
        "thought": policy.clean("plain text", "thought"),
        "action": policy.clean({"tool": "search", 3: (1.5, None, True)}, "action"),
        "result": policy.clean([10**30, 1e-7, "é"], "result"),
        "tokens": 0,
    }
    stored = {k.encode(): v.encode() for k, v in encode_entry(entry).items()}
    assert entry_tokens(decode_entry(b"1-0", stored)) == entry_tokens(entry) > 0
