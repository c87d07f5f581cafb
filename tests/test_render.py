"""Text renderings on fixed inputs: what ``jarvismem`` and the demo print."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.render import (
    fmt_ms,
    fmt_ts,
    render_athena_context,
    render_bundle,
    render_entry,
    render_health,
    render_hits,
    render_spaces,
    short,
    to_json,
)


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC, so rendered timestamps are fixed strings."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _turn(entry_id: str, turn: int, **fields: Any) -> dict[str, Any]:
    return {
        "id": entry_id,
        "ts": 0,
        "turn_id": str(turn),
        "step_id": "s1",
        "agent_id": "a1",
        "thought": f"thought {turn}",
        "action": f"action {turn}",
        "result": f"result {turn}",
        **fields,
    }


# --- small formatters -------------------------------------------------------------------------


def test_to_json_turns_unknown_values_into_strings() -> None:
    assert to_json({"p": Path("/x"), "é": 1}, indent=None) == '{"p": "/x", "é": 1}'


def test_fmt_ms_and_fmt_ts_show_a_dash_when_unknown(utc: None) -> None:
    assert fmt_ms(None) == "-"
    assert fmt_ms(1.234) == "1.2 ms"
    assert fmt_ts(None) == "-" and fmt_ts("soon") == "-"
    assert fmt_ts(86400) == "1970-01-02 00:00:00"


def test_short_keeps_one_line_and_cuts_with_an_ellipsis() -> None:
    assert short("a\n  b\tc") == "a b c"
    assert short("x" * 20, 10) == "x" * 9 + "…"
    assert short({"k": [1, 2]}) == '{"k": [1, 2]}'


# --- entries and bundles ----------------------------------------------------------------------


def test_render_entry_of_a_turn(utc: None) -> None:
    line = render_entry(_turn("1-0", 3))
    assert line == ("1-0  1970-01-01 00:00:00  turn 3    s1/a1  thought 3 → action 3 = result 3")


def test_render_entry_without_a_turn_shows_its_fields() -> None:
    assert render_entry({"id": "7-1", "kind": "note"}) == '7-1  {"kind": "note"}'


def test_render_entry_leaves_out_empty_parts(utc: None) -> None:
    line = render_entry(_turn("1-0", 1, thought="", result=None))
    assert line.endswith("s1/a1  action 1")


def test_render_bundle_of_an_empty_bundle_names_every_section() -> None:
    text = render_bundle({})
    assert text.splitlines() == [
        "== Long-term summary ==",
        "    (none yet)",
        "== Recent turns (0) ==",
        "    (none)",
        "== Checkpoint ==",
        "    (none)",
        "== Scratchpad ==",
        "    (empty)",
        "== Athena context ==",
        "    (not configured or unavailable)",
        "== Spaces ==",
        "    (no spaces written yet)",
        "== Degraded ==",
        "    none: every configured tier answered",
    ]


def test_render_bundle_with_content(utc: None) -> None:
    text = render_bundle(
        {
            "ltm_summary": "line one\nline two",
            "recent_turns": [_turn("1-0", 1), _turn("2-0", 2)],
            "checkpoint": '{"next_turn": 3}',
            "scratchpad": "- [goal] finding: x",
            "athena_context": {"session_id": "s-1", "short_term": [], "mid_term": []},
            "degraded": {"athena": "timeout"},
        }
    )
    lines = text.splitlines()
    assert lines[1:3] == ["    line one", "    line two"]
    assert lines[3] == "== Recent turns (2) =="
    assert lines[4].startswith("    1-0  ") and lines[5].startswith("    2-0  ")
    assert '    {"next_turn": 3}' in lines
    assert "    - [goal] finding: x" in lines
    assert "    session s-1" in lines
    assert lines[-1] == "    athena: timeout"


# --- spaces -------------------------------------------------------------------------------------


def test_render_spaces_of_nothing() -> None:
    assert render_spaces(None) == "(no spaces written yet)"


def test_render_spaces_world_tasks_and_custom_spaces() -> None:
    snapshot = {
        "id": "c1",
        "rev": 4,
        "spaces": {
            "world": {"rev": 2, "data": {"subject": "tides"}},
            "tasks": {
                "rev": 3,
                "data": [
                    {"id": "t1", "text": "gather", "status": "done"},
                    {"id": "t2", "text": "write", "status": "open"},
                    "loose item",
                ],
            },
            "notes": {"rev": 1, "data": []},
            "empty": {"rev": 0, "data": {}},
            "log": {"rev": 1, "data": ["a"]},
        },
    }
    assert render_spaces(snapshot).splitlines() == [
        "container c1  rev 4",
        "  world (map, rev 2)",
        "      subject: tides",
        "  tasks (list, rev 3)",
        "      1. [x] gather  (t1)",
        "      2. [ ] write  (t2)",
        "      3. loose item",
        "  notes (list, rev 1)",
        "      (empty)",
        "  empty (map, rev 0)",
        "      (empty)",
        "  log (list, rev 1)",
        "      [0] a",
    ]


def test_render_spaces_with_no_tasks() -> None:
    snapshot = {"id": "c", "spaces": {"tasks": {"data": []}}}
    assert render_spaces(snapshot).splitlines()[-1] == "      (no tasks)"


# --- Athena ---------------------------------------------------------------------------------------


def test_render_athena_context() -> None:
    text = render_athena_context(
        {
            "session_id": "s-9",
            "short_term": [{"type": "turn", "content": "hello"}, {"role": "user"}, {}],
            "mid_term": [{"topic": "tides", "summary": "moon pulls"}, {"id": "c2"}],
            "user_persona": "curious",
        }
    )
    assert text.splitlines() == [
        "session s-9",
        "short-term events (3):",
        "  [turn] hello",
        "  [user] ",
        "  [?] ",
        "mid-term chains (2):",
        "  - tides: moon pulls",
        "  - c2: ",
        "user persona: curious",
    ]


def test_render_hits_best_first_with_scores() -> None:
    assert render_hits([]) == "(no results)"
    text = render_hits(
        [
            {"similarity": 0.91234, "content": "first"},
            {"similarity": None, "title": "second"},
            {"other": 1},
        ]
    )
    assert text.splitlines() == [
        " 1. [0.912] first",
        " 2. [?] second",
        ' 3. [?] {"other": 1}',
    ]


# --- health ---------------------------------------------------------------------------------------


def test_render_health_of_a_healthy_runtime() -> None:
    text = render_health(
        {
            "namespace": "ns",
            "ok": True,
            "backends": {
                "redis": {
                    "configured": True,
                    "reachable": True,
                    "backend": "redis",
                    "latency_ms": 0.5,
                    "where": "redis://127.0.0.1:6379/0",
                },
                "athena": {"configured": False},
                "llm": {"configured": False, "summarizer": "extractive"},
            },
            "reasons": [],
        }
    )
    assert text.splitlines() == [
        "namespace: ns",
        "  redis   redis        reachable        0.5 ms  redis://127.0.0.1:6379/0",
        "  athena  not configured",
        "  llm     not configured (summarizer: extractive)",
        "degraded: no",
        "OK",
    ]


def test_render_health_of_a_degraded_embedded_runtime() -> None:
    text = render_health(
        {
            "namespace": "ns",
            "ok": False,
            "in_process": True,
            "backends": {
                "athena": {
                    "configured": True,
                    "reachable": False,
                    "backend": "athena",
                    "model": "m1",
                    "status": "down",
                    "dependencies": {"postgres": "down"},
                    "reason": "connection refused",
                },
            },
            "reasons": ["athena unreachable", "outbox x: 2 queued"],
        }
    )
    lines = text.splitlines()
    assert lines[1].split() == ["athena", "athena", "UNREACHABLE", "-"]
    assert lines[2:6] == [
        "          model: m1",
        "          status: down",
        "          - postgres: down",
        "          reason: connection refused",
    ]
    assert lines[6].startswith("note: Redis is the in-process stand-in")
    assert lines[-2:] == ["degraded: athena unreachable; outbox x: 2 queued", "NOT OK"]


def test_render_health_says_a_reachable_backend_that_refuses_writes_is_not_writable() -> None:
    text = render_health(
        {
            "namespace": "ns",
            "backends": {
                "blob": {
                    "configured": True,
                    "reachable": True,
                    "writable": False,
                    "backend": "local",
                    "latency_ms": 0.2,
                    "reason": "not writable: Read-only file system (EROFS)",
                }
            },
            "reasons": ["blob: not writable"],
            "ok": False,
        }
    )
    line = next(line for line in text.splitlines() if line.strip().startswith("blob"))
    assert "NOT WRITABLE" in line and "reachable" not in line
