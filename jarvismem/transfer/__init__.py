"""Export and import one workflow, every tier, as JSON lines.

The format (``jarvismem-export`` version 1), one UTF-8 JSON object per line:

* line 1, the header: ``{"format": "jarvismem-export", "version": 1,
  "workflow_id": ..., "namespace": ..., "exported_at": <epoch s>}``;
* then records, each with a ``"kind"``:

  - ``ledger``: ``{"kind", "id", "fields"}``: one stream entry with its
    original stream id and its decoded fields (a turn has ``turn_id``,
    ``step_id``, ``agent_id``, ``ts``, ``thought``, ``action``, ``result``,
    ``tokens``), oldest first;
  - ``summary``: ``{"kind", "text", "from_id", "to_id", "turns", "updated_at",
    "summarizer"}``: the long-term summary and its provenance;
  - ``checkpoint``: ``{"kind", "step_id", "state", "rev", "ts"}``;
  - ``scratchpad`` / ``goals``: ``{"kind", "step_id", "agent_id", "record"}``:
    one record of a working scratchpad / goal-findings blob, in file order;
  - ``spaces``: ``{"kind", "agent_id", "snapshot"}``: an agent's cognitive
    spaces as ``SpacesStore.snapshot()`` returns them.

Import validates the whole file before writing anything (an error names the
line; ledger ids must rise strictly from above ``0-0``, turn index fields be
valid and unique, revisions fit ``MAX_REVISION`` = 2^53-1), refuses a target
workflow that already holds data unless asked to replace it, and is all or
nothing: it writes into staging keys and blobs and switches them into place at
the end (:mod:`~jarvismem.transfer.importer` says what a crash leaves). Ledger
entries keep their original ids (XADD with an explicit id) so that provenance
ids and the exactly-once index stay valid.

The parts, by job: :mod:`~jarvismem.transfer.format` (the line models),
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
