"""The export line format (``jarvismem-export`` version 1) as models.

Each line of an export is one of these models serialised as JSON; the layout is
described in :mod:`jarvismem.transfer`. The models validate a line's shape
(``extra="forbid"``, so a typo is an error); :mod:`jarvismem.transfer.validation`
adds the checks that need the stores' rules (ids, encodable records).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from jarvismem.defaults import AZURE_APPEND_BLOCK_BYTES
from jarvismem.errors import JarvisMemError
from jarvismem.keys import MAX_REVISION
from jarvismem.records import compact_json

FORMAT = "jarvismem-export"
VERSION = 1

Progress = Callable[[int, int], None]
"""``progress(done, total)``; ``total`` is an estimate (0 when unknown)."""

PAGE = 500
"""Ledger entries read (export) or written (import) per round trip."""

STREAM_ID = r"^\d{1,20}-\d{1,20}$"
"""A Redis stream id as exported: ``<ms>-<seq>`` (each part also checked to fit 64 bits)."""

MAX_BLOB_APPEND_BYTES = AZURE_APPEND_BLOCK_BYTES
"""The smallest append limit of the blob backends (Azure's append block, 4 MiB):
one imported scratchpad record, and one batched append, must fit in it."""


class TransferError(JarvisMemError, ValueError):
    """An export file is malformed, or the import target is not empty."""


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Header(_Line):
    """First line of an export."""

    format: Literal["jarvismem-export"]
    version: Literal[1]
    workflow_id: str
    namespace: str
    exported_at: float | None = None


class LedgerLine(_Line):
    """One ledger stream entry with its original id."""

    kind: Literal["ledger"]
    id: Annotated[str, Field(pattern=STREAM_ID)]
    fields: dict[str, Any]


class SummaryLine(_Line):
    """The long-term summary with its provenance."""

    kind: Literal["summary"]
    text: str
    from_id: Annotated[str, Field(pattern=STREAM_ID)] | None = None
    to_id: Annotated[str, Field(pattern=STREAM_ID)] | None = None
    turns: int = Field(default=0, ge=0)
    updated_at: float | None = None
    summarizer: str | None = None


class CheckpointLine(_Line):
    """One step's checkpoint with its revision."""

    kind: Literal["checkpoint"]
    step_id: str
    state: str
    rev: int = Field(ge=1, le=MAX_REVISION)
    ts: float = 0.0


class BlobRecordLine(_Line):
    """One record of a scratchpad or goal-findings blob."""

    kind: Literal["scratchpad", "goals"]
    step_id: str
    agent_id: str
    record: dict[str, Any]


class SpacesLine(_Line):
    """One agent's cognitive spaces."""

    kind: Literal["spaces"]
    agent_id: str
    snapshot: dict[str, Any]


Record = Annotated[
    LedgerLine | SummaryLine | CheckpointLine | BlobRecordLine | SpacesLine,
    Field(discriminator="kind"),
]
"""Any line after the header, told apart by its ``kind``."""

record_adapter: TypeAdapter[Record] = TypeAdapter(Record)


def dump_line(data: dict[str, Any]) -> str:
    """One line of an export (without its newline): compact JSON, like the stores."""
    return compact_json(data)
