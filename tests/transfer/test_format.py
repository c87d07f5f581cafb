"""The export line models: strict shapes, told apart by kind, compact lines."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from jarvismem.errors import JarvisMemError
from jarvismem.transfer.format import (
    FORMAT,
    VERSION,
    BlobRecordLine,
    Header,
    LedgerLine,
    SpacesLine,
    SummaryLine,
    TransferError,
    dump_line,
    record_adapter,
)


def test_header_pins_format_and_version() -> None:
    header = Header(format=FORMAT, version=VERSION, workflow_id="w", namespace="n")
    assert header.exported_at is None
    with pytest.raises(ValidationError):
        Header.model_validate(
            {"format": FORMAT, "version": 2, "workflow_id": "w", "namespace": "n"}
        )


def test_lines_forbid_unknown_fields_and_are_frozen() -> None:
    with pytest.raises(ValidationError):
        LedgerLine.model_validate({"kind": "ledger", "id": "1-0", "fields": {}, "typo": 1})
    line = LedgerLine(kind="ledger", id="1-0", fields={"a": 1})
    with pytest.raises(ValidationError):
        line.id = "2-0"  # type: ignore[misc]


@pytest.mark.parametrize("stream_id", ["1-0", "1700000000000-12"])
def test_ledger_ids_are_stream_ids(stream_id: str) -> None:
    assert LedgerLine(kind="ledger", id=stream_id, fields={}).id == stream_id


@pytest.mark.parametrize("stream_id", ["1", "a-b", "1-0-0", "-1-0", "*"])
def test_other_ledger_ids_are_refused(stream_id: str) -> None:
    with pytest.raises(ValidationError):
        LedgerLine(kind="ledger", id=stream_id, fields={})


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        ({"kind": "summary", "text": "t"}, SummaryLine),
        ({"kind": "goals", "step_id": "s", "agent_id": "a", "record": {}}, BlobRecordLine),
        ({"kind": "spaces", "agent_id": "a", "snapshot": {}}, SpacesLine),
    ],
)
def test_the_kind_picks_the_model(data: dict[str, object], kind: type) -> None:
    assert isinstance(record_adapter.validate_python(data), kind)


def test_a_line_is_compact_json_with_non_ascii_kept() -> None:
    line = dump_line({"kind": "summary", "text": "café"})
    assert line == '{"kind":"summary","text":"café"}'
    assert "\n" not in dump_line({"text": "a\nb"}) and json.loads(dump_line({"text": "a\nb"}))


def test_transfer_error_is_a_jarvismem_error_and_a_value_error() -> None:
    assert issubclass(TransferError, JarvisMemError) and issubclass(TransferError, ValueError)
