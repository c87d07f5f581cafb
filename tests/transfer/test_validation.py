"""Validation of an export file: every error names its line, and a bad file writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jarvismem.transfer import (
    CheckpointLine,
    LedgerLine,
    TransferError,
    import_workflow,
    parse_header,
    parse_record,
    validate_export,
    workflow_is_empty,
)
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
