"""Export and import one workflow, every tier, as JSON lines (``jarvismem-export`` version 1).

Import validates the whole file, then writes all or nothing, keeping ledger stream ids.
The format and its guarantees: docs/cli.md ("The export format") and docs/reliability.md
("Import files"). The parts: :mod:`~jarvismem.transfer.format` (the line models),
:mod:`~jarvismem.transfer.validation` (reading and checking a file),
:mod:`~jarvismem.transfer.workflow` (what a workflow holds across the stores),
:mod:`~jarvismem.transfer.exporter` and :mod:`~jarvismem.transfer.importer`.
"""

from __future__ import annotations

from jarvismem.transfer.exporter import export_workflow
from jarvismem.transfer.format import (
    FORMAT,
    VERSION,
    BlobRecordLine,
    CheckpointLine,
    Header,
    LedgerLine,
    Progress,
    Record,
    SpacesLine,
    SummaryLine,
    TransferError,
)
from jarvismem.transfer.importer import RecordWriter, import_workflow, recover_import
from jarvismem.transfer.validation import (
    ExportChecker,
    parse_header,
    parse_record,
    validate_export,
)
from jarvismem.transfer.workflow import clear_workflow, workflow_is_empty

__all__ = [
    "FORMAT",
    "VERSION",
    "BlobRecordLine",
    "CheckpointLine",
    "ExportChecker",
    "Header",
    "LedgerLine",
    "Progress",
    "Record",
    "RecordWriter",
    "SpacesLine",
    "SummaryLine",
    "TransferError",
    "clear_workflow",
    "export_workflow",
    "import_workflow",
    "parse_header",
    "parse_record",
    "recover_import",
    "validate_export",
    "workflow_is_empty",
]
