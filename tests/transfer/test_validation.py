"""Validation of an export file: every error names its line, and a bad file writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jarvismem.spaces import MemoryContainer
from jarvismem.transfer import (
    CheckpointLine,
    ExportChecker,
    LedgerLine,
    TransferError,
    import_workflow,
    parse_header,
    parse_record,
    validate_export,
    workflow_is_empty,
)
from jarvismem.transfer.format import MAX_BLOB_APPEND_BYTES
from tests.transfer.conftest import MakeRuntime

HEADER = '{"format": "jarvismem-export", "version": 1, "workflow_id": "w", "namespace": "n"}\n'


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ('{"format": "other", "version": 1, "workflow_id": "w", "namespace": "n"}\n', "line 1"),
        (HEADER.replace('"version": 1', '"version": 2'), "line 1"),
        (HEADER + "not json\n", "line 2"),
        (
            HEADER + '{"kind": "ledger", "id": "1-0", "fields": {"a": 1}}\n'
            '{"kind": "checkpoint", "step_id": "../x", "state": "s", "rev": 1}\n',
            "line 3: step_id",
        ),
        (HEADER + '{"kind": "ledger", "id": "not-an-id", "fields": {}}\n', "line 2"),
        ("\n" + HEADER, "header must be the first line"),
    ],
    ids=[
        "empty",
        "wrong-format",
        "wrong-version",
        "not-json",
        "bad-step-id",
        "bad-stream-id",
        "header-not-first",
    ],
)
async def test_a_bad_file_is_refused_with_its_line_and_nothing_written(
    make_store_runtime: MakeRuntime, tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(TransferError, match=message):
        await validate_export(path)
    rt = make_store_runtime()
    with pytest.raises(TransferError):
        await import_workflow(rt, path)
    assert await workflow_is_empty(rt, "w")


async def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(HEADER.encode() + b"\xff\xfe\x00garbage\n")
    with pytest.raises(TransferError, match="not UTF-8"):
        await validate_export(path)


async def test_a_good_file_counts_its_records_and_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "ok.jsonl"
    path.write_text(HEADER + '{"kind": "ledger", "id": "1-0", "fields": {"a": 1}}\n\n\n')
    header, count = await validate_export(path)
    assert (header.workflow_id, header.namespace, count) == ("w", "n", 1)


def test_parse_header_names_line_1() -> None:
    assert parse_header(HEADER).workflow_id == "w"
    with pytest.raises(TransferError, match="line 1: not a jarvismem-export version 1 header"):
        parse_header('{"format": "jarvismem-export"}')


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"kind": "nope"}, "does not match any of the expected tags"),
        ({"kind": "ledger", "id": "1-0", "fields": {}}, "at least one field"),
        ({"kind": "ledger", "id": "1-0", "fields": {"a": 1}, "extra": 1}, "extra"),
        ({"kind": "checkpoint", "step_id": "s", "state": "x", "rev": 0}, "rev"),
        (
            {"kind": "scratchpad", "step_id": "s", "agent_id": "a/b", "record": {}},
            "agent_id",
        ),
        ({"kind": "spaces", "agent_id": "a", "snapshot": {"world": 5}}, "container id"),
    ],
    ids=["unknown-kind", "empty-fields", "extra-field", "rev-0", "bad-agent", "bad-snapshot"],
)
def test_parse_record_refuses_with_the_line(record: dict[str, Any], message: str) -> None:
    with pytest.raises(TransferError, match=message) as info:
        parse_record(json.dumps(record), 7)
    assert str(info.value).startswith("line 7: ")


def test_parse_record_tells_the_kinds_apart() -> None:
    ledger = parse_record('{"kind": "ledger", "id": "2-3", "fields": {"a": [1]}}', 2)
    assert isinstance(ledger, LedgerLine) and ledger.fields == {"a": [1]}
    ckpt = parse_record('{"kind": "checkpoint", "step_id": "s", "state": "x", "rev": 4}', 3)
    assert isinstance(ckpt, CheckpointLine) and ckpt.rev == 4 and ckpt.ts == 0.0


def test_parse_record_refuses_a_checkpoint_over_the_targets_limit() -> None:
    line = json.dumps({"kind": "checkpoint", "step_id": "s", "state": "x" * 2000, "rev": 1})
    assert isinstance(parse_record(line, 4), CheckpointLine)
    with pytest.raises(TransferError, match="line 4: checkpoint is 2000 bytes"):
        parse_record(line, 4, max_checkpoint_bytes=1024)


# --- rules that span lines (ExportChecker) ----------------------------------------------

TURN = {"step_id": "s", "agent_id": "a", "turn_id": 1, "thought": "t"}


def _ledger(sid: str, **fields: Any) -> str:
    return json.dumps({"kind": "ledger", "id": sid, "fields": {**TURN, **fields}}) + "\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_ledger("0-0"), "line 2: ledger id 0-0 is not above 0-0"),
        (_ledger("5-1") + _ledger("5-1", turn_id=2), "line 3: ledger id 5-1 is not above 5-1"),
        (_ledger("5-1") + _ledger("4-9", turn_id=2), "line 3: ledger id 4-9 is not above 5-1"),
        (_ledger(f"{2**64}-0"), "line 2: ledger id .* above 2\\^64-1"),
        (_ledger("1-0", step_id="../x"), "line 2: step_id"),
        (_ledger("1-0", agent_id="a:b"), "line 2: agent_id"),
        (_ledger("1-0", turn_id="t/1"), "line 2: turn_id"),
        (_ledger("1-0") + _ledger("2-0"), "line 3: turn s:a:1 appears twice"),
        (
            '{"kind": "checkpoint", "step_id": "s", "state": "x", "rev": 9007199254740992}\n',
            "line 2: checkpoint.rev: .* 9007199254740991",
        ),
        (
            '{"kind": "checkpoint", "step_id": "s", "state": "x", "rev": 1}\n'
            '{"kind": "checkpoint", "step_id": "s", "state": "y", "rev": 2}\n',
            "line 3: a second checkpoint of step s",
        ),
        ('{"kind": "summary", "text": "a"}\n{"kind": "summary", "text": "b"}\n', "line 3"),
        ('{"kind": "summary", "text": "a", "from_id": "x"}\n', "line 2: summary.from_id"),
        ('{"kind": "summary", "text": "a", "turns": -1}\n', "line 2: summary.turns"),
    ],
    ids=[
        "zero-id",
        "repeated-id",
        "out-of-order",
        "id-above-64-bits",
        "bad-step-id-in-turn",
        "bad-agent-id-in-turn",
        "bad-turn-id",
        "duplicate-turn",
        "checkpoint-rev-2^53",
        "two-checkpoints-of-a-step",
        "two-summaries",
        "bad-summary-id",
        "negative-turns",
    ],
)
async def test_file_wide_rules_name_the_line(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(HEADER + body)
    with pytest.raises(TransferError, match=message):
        await validate_export(path)


async def test_a_header_with_an_invalid_workflow_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(HEADER.replace('"workflow_id": "w"', '"workflow_id": "../w"'))
    with pytest.raises(TransferError, match="line 1: workflow_id"):
        await validate_export(path)


def test_a_spaces_snapshot_above_2_53_is_refused_with_its_line() -> None:
    snapshot = MemoryContainer().to_dict()
    snapshot["rev"] = 2**63
    line = json.dumps({"kind": "spaces", "agent_id": "a", "snapshot": snapshot})
    with pytest.raises(TransferError, match=r"line 9: container rev .*2\^53-1"):
        parse_record(line, 9)


def test_a_ledger_entry_over_one_append_is_refused() -> None:
    # Seen from import: a 10 MB result in an export of an old runtime.
    fields = {**TURN, "result": ["x" * 1000] * 10_000}
    line = json.dumps({"kind": "ledger", "id": "1-0", "fields": fields})
    with pytest.raises(TransferError, match=r"line 3: ledger entry is \d+ bytes encoded"):
        parse_record(line, 3)


def test_a_scratchpad_record_over_one_append_is_refused() -> None:
    record = {"type": "note", "text": "x" * MAX_BLOB_APPEND_BYTES}
    line = json.dumps({"kind": "scratchpad", "step_id": "s", "agent_id": "a", "record": record})
    with pytest.raises(TransferError, match=r"line 4: scratchpad record is .* bytes encoded"):
        parse_record(line, 4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=6))
def test_ledger_ids_are_accepted_exactly_when_they_rise_from_above_zero(
    ids: list[tuple[int, int]],
) -> None:
    checker = ExportChecker()
    rising = all(b > a for a, b in zip([(0, 0), *ids], ids, strict=False))
    try:
        for n, (ms, seq) in enumerate(ids):
            fields = {"note": n}  # no turn identity: only the order is checked
            checker.check(LedgerLine(kind="ledger", id=f"{ms}-{seq}", fields=fields), n + 2)
    except TransferError:
        assert not rising
    else:
        assert rising


@settings(max_examples=80, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=12,
    ),
    st.sampled_from(["ledger", "checkpoint", "scratchpad", "goals", "spaces", "summary"]),
)
def test_any_hostile_line_is_refused_only_with_a_transfer_error(value: Any, kind: str) -> None:
    keys = {"ledger": "fields", "checkpoint": "state", "spaces": "snapshot", "summary": "text"}
    record = {"kind": kind, "id": "1-0", "step_id": "s", "agent_id": "a", "rev": 1}
    record = {k: v for k, v in record.items() if k == "kind" or k in _FIELDS[kind]}
    record[keys.get(kind, "record")] = value
    try:
        rec = parse_record(json.dumps(record), 2)
        ExportChecker().check(rec, 2)
    except TransferError as exc:
        assert str(exc).startswith("line 2: ")


_FIELDS = {
    "ledger": {"id"},
    "checkpoint": {"step_id", "rev"},
    "scratchpad": {"step_id", "agent_id"},
    "goals": {"step_id", "agent_id"},
    "spaces": {"agent_id"},
    "summary": set(),
}
