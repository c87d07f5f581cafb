"""The outbox's on-disk encodings, without any file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jarvismem.backends.outbox.format import (
    Cursor,
    decode_cursor,
    decode_line,
    destination_stamp,
    encode_cursor,
    encode_dead_letter,
    encode_line,
    encode_record,
    line_record,
    sibling,
)
from jarvismem.errors import InvalidPayloadError


def test_a_record_is_compact_json() -> None:
    assert encode_record({"a": 1, "b": [1, 2]}) == '{"a":1,"b":[1,2]}'


@pytest.mark.parametrize(
    "record", [["not", "a", "dict"], "text", {"when": object()}, {"x": float("nan")}]
)
def test_a_record_that_is_not_a_json_dict_is_refused(record: object) -> None:
    with pytest.raises(InvalidPayloadError):
        encode_record(record)


def test_a_line_round_trips_with_and_without_a_destination() -> None:
    plain = encode_line(7, destination_stamp(None), encode_record({"i": 1}))
    stamped = encode_line(8, destination_stamp("ab12"), encode_record({"i": 2}))
    assert plain.endswith(b"\n") and plain.count(b"\n") == 1
    assert decode_line(plain.rstrip(b"\n")) == (7, None)
    assert decode_line(stamped.rstrip(b"\n")) == (8, "ab12")
    assert line_record(stamped) == {"i": 2}
    assert json.loads(stamped) == {"seq": 8, "dst": "ab12", "rec": {"i": 2}}


def test_a_destination_is_json_escaped_in_its_stamp() -> None:
    line = encode_line(1, destination_stamp('we"ird'), "{}")
    assert decode_line(line) == (1, 'we"ird')


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[1, 2]",
        b'{"seq": 1}',
        b'{"seq": 1, "rec": [1]}',
        b'{"seq": "1", "rec": {}}',
        b'{"seq": true, "rec": {}}',
        b'{"seq": 1, "rec": {"i":',
    ],
)
def test_a_corrupt_line_decodes_to_nothing(line: bytes) -> None:
    assert decode_line(line) == (None, None)


def test_a_non_string_destination_is_ignored() -> None:
    assert decode_line(b'{"seq": 3, "dst": 5, "rec": {}}') == (3, None)


def test_the_cursor_round_trips() -> None:
    cursor = Cursor(acked=12, dropped=3, gen=4, dead=1)
    raw = encode_cursor(cursor)
    assert json.loads(raw) == {"acked": 12, "dropped": 3, "dead": 1, "gen": 4}
    assert decode_cursor(raw) == cursor


def test_an_old_cursor_without_gen_and_dead_reads_as_zero() -> None:
    assert decode_cursor('{"acked": 5, "dropped": 2}') == Cursor(5, 2, 0, 0)


@pytest.mark.parametrize("raw", ["", "{}", '{"acked": "x", "dropped": 0}', "[]"])
def test_an_unreadable_cursor_raises(raw: str) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        decode_cursor(raw)


def test_a_dead_letter_keeps_the_record_and_a_bounded_reason() -> None:
    line = encode_dead_letter(None, {"when": object()}, "r" * 900, at=1.5)
    entry = json.loads(line)
    assert entry["seq"] is None and entry["at"] == 1.5
    assert len(entry["reason"]) == 500
    assert isinstance(entry["rec"]["when"], str)  # unserialisable values shown as text
    assert "\n" not in line


def test_sibling_files_sit_next_to_the_data_file() -> None:
    assert sibling(Path("/x/o.jsonl"), ".cursor") == Path("/x/o.jsonl.cursor")
