"""The demo's parent/child line protocol."""

from __future__ import annotations

from jarvismem.demo.protocol import decode_event, encode_event


def test_an_event_round_trips_on_one_line() -> None:
    line = encode_event("ack", turn=3)
    assert line.endswith("\n") and line.count("\n") == 1
    assert decode_event(line) == {"event": "ack", "turn": 3}
    assert decode_event(line.encode()) == {"event": "ack", "turn": 3}


def test_values_json_cannot_hold_become_strings() -> None:
    assert decode_event(encode_event("done", when={1, 2}.__class__)) == {
        "event": "done",
        "when": "<class 'set'>",
    }


def test_lines_that_are_not_events_are_ignored() -> None:
    for raw in (b"hello\n", b"[1, 2]\n", b'{"turn": 1}\n', b"", b"42"):
        assert decode_event(raw) is None
