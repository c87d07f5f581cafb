"""Reading and checking an export file, line by line, before anything is written.

A line is valid when its model validates (:mod:`jarvismem.transfer.format`) and
what it would write is acceptable to the stores: ids pass
:func:`~jarvismem.keys.validate_id`, ledger fields and scratchpad records encode
(:mod:`jarvismem.records`), a spaces snapshot loads with every revision within
``0..MAX_REVISION``, a checkpoint's within ``1..MAX_REVISION``, a scratchpad
record and a ledger entry fit one blob append (4 MiB). The file as a whole
(:class:`ExportChecker`) must also keep ledger ids strictly increasing from
above ``0-0`` (the order XADD accepts), give every turn a valid and unique
``step:agent:turn`` index field, and hold at most one summary, one checkpoint
per step and one spaces snapshot per agent. Every error names its line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiofiles
from pydantic import ValidationError

from jarvismem import defaults
from jarvismem.errors import JarvisMemError
from jarvismem.keys import KeySpace, validate_id
from jarvismem.records import encode_fields, encode_record, turn_identity
from jarvismem.spaces.models import MemoryContainer
from jarvismem.tiers.checkpoints import validate_checkpoint
from jarvismem.transfer.format import (
    FORMAT,
    MAX_BLOB_APPEND_BYTES,
    VERSION,
    BlobRecordLine,
    CheckpointLine,
    Header,
    LedgerLine,
    Record,
    SpacesLine,
    SummaryLine,
    TransferError,
    record_adapter,
)

_U64 = 2**64 - 1


def parse_header(line: str) -> Header:
    """The header line (with valid ids), or :class:`TransferError` naming line 1."""
    try:
        header = Header.model_validate_json(line)
    except ValidationError as exc:
        raise TransferError(
            f"line 1: not a {FORMAT} version {VERSION} header: {_first_error(exc)}"
        ) from None
    try:
        validate_id(header.workflow_id, "workflow_id")
        validate_id(header.namespace, "namespace")
    except ValueError as exc:
        raise TransferError(f"line 1: {exc}") from None
    return header


def stream_id(value: str, what: str = "ledger id") -> tuple[int, int]:
    """``(ms, seq)`` of a stream id the format's pattern accepted; ValueError if a part
    does not fit 64 bits (Redis would refuse it)."""
    ms, _, seq = value.partition("-")
    parts = int(ms), int(seq)
    if parts[0] > _U64 or parts[1] > _U64:
        raise ValueError(f"{what} {value} has a part above 2^64-1")
    return parts


class ExportChecker:
    """The checks that span lines, fed every record of a file in order.

    Ledger ids must rise strictly from above ``0-0`` (XADD refuses anything
    else, and did so in the middle of an import); a turn's identity must make a
    valid, unique index field (the exactly-once index maps it to one entry);
    one summary, one checkpoint per step, one spaces snapshot per agent (a
    second would silently replace the first).
    """

    def __init__(self) -> None:
        self.last_id: tuple[int, int] = (0, 0)
        self.last_text = "0-0"
        self.turns: dict[str, str] = {}
        self.steps: set[str] = set()
        self.agents: set[str] = set()
        self.summary = False

    def check(self, rec: Record, lineno: int) -> None:
        """Raise :class:`TransferError` naming ``lineno`` if ``rec`` breaks a file-wide rule."""
        try:
            self._check(rec)
        except (JarvisMemError, ValueError) as exc:
            raise TransferError(f"line {lineno}: {exc}") from None

    def _check(self, rec: Record) -> None:
        if isinstance(rec, LedgerLine):
            sid = stream_id(rec.id)
            if sid <= self.last_id:
                raise ValueError(
                    f"ledger id {rec.id} is not above {self.last_text}: ledger ids must "
                    "rise strictly, from above 0-0"
                )
            self.last_id, self.last_text = sid, rec.id
            identity = turn_identity(rec.fields)
            if identity is not None:
                field = KeySpace.turn_field(*identity)
                if field in self.turns:
                    raise ValueError(
                        f"turn {field} appears twice (ledger ids {self.turns[field]} and {rec.id})"
                    )
                self.turns[field] = rec.id
        elif isinstance(rec, SummaryLine):
            if self.summary:
                raise ValueError("a second summary record")
            self.summary = True
            for what, value in (("from_id", rec.from_id), ("to_id", rec.to_id)):
                if value is not None:
                    stream_id(value, f"summary {what}")
        elif isinstance(rec, CheckpointLine):
            if rec.step_id in self.steps:
                raise ValueError(f"a second checkpoint of step {rec.step_id}")
            self.steps.add(rec.step_id)
        elif isinstance(rec, SpacesLine):
            if rec.agent_id in self.agents:
                raise ValueError(f"a second spaces snapshot of agent {rec.agent_id}")
            self.agents.add(rec.agent_id)


def parse_record(
    line: str, lineno: int, *, max_checkpoint_bytes: int = defaults.MAX_CHECKPOINT_BYTES
) -> Record:
    """One record line, validated (ids included), or :class:`TransferError` naming the line.

    A checkpoint's state must be one the target would store: at most
    ``max_checkpoint_bytes`` (the target's ``MAX_CHECKPOINT_BYTES``) of valid UTF-8.
    """
    try:
        rec = record_adapter.validate_json(line)
    except ValidationError as exc:
        raise TransferError(f"line {lineno}: {_first_error(exc)}") from None
    try:
        if isinstance(rec, CheckpointLine):
            validate_id(rec.step_id, "step_id")
            validate_checkpoint(rec.state, max_checkpoint_bytes)
        elif isinstance(rec, BlobRecordLine):
            validate_id(rec.step_id, "step_id")
            validate_id(rec.agent_id, "agent_id")
            size = len(encode_record(rec.record))
            if size > MAX_BLOB_APPEND_BYTES:
                raise ValueError(
                    f"{rec.kind} record is {size} bytes encoded; one blob append holds at "
                    f"most {MAX_BLOB_APPEND_BYTES}"
                )
        elif isinstance(rec, SpacesLine):
            validate_id(rec.agent_id, "agent_id")
            MemoryContainer.from_dict(rec.snapshot)
        elif isinstance(rec, LedgerLine):
            # Bounded like a scratchpad record: a turn is mirrored into blobs too, and
            # no turn the runtime stores (fields capped by MAX_TURN_FIELD_CHARS) comes near.
            size = sum(len(part.encode("utf-8")) for part in encode_fields(rec.fields))
            if size > MAX_BLOB_APPEND_BYTES:
                raise ValueError(
                    f"ledger entry is {size} bytes encoded; an entry holds at most "
                    f"{MAX_BLOB_APPEND_BYTES}"
                )
    except (JarvisMemError, ValueError) as exc:
        raise TransferError(f"line {lineno}: {exc}") from None
    return rec


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else str(err["msg"])


async def read_lines(path: Path) -> AsyncIterator[tuple[int, str]]:
    """``(line number, stripped line)`` of every non-blank line, without blocking the loop."""
    async with aiofiles.open(path, encoding="utf-8") as fh:
        lineno = 0
        async for raw in fh:
            lineno += 1
            line = raw.strip()
            if line:
                yield lineno, line


async def validate_export(
    path: Path, *, max_checkpoint_bytes: int = defaults.MAX_CHECKPOINT_BYTES
) -> tuple[Header, int]:
    """Check every line of the file at ``path``, and the file as a whole
    (:class:`ExportChecker`); returns the header and the record count.

    ``max_checkpoint_bytes``: the target's checkpoint limit (see :func:`parse_record`).
    """
    header: Header | None = None
    checker = ExportChecker()
    count = 0
    try:
        async for lineno, line in read_lines(path):
            if header is None:
                if lineno != 1:
                    raise TransferError("line 1: the header must be the first line")
                header = parse_header(line)
                continue
            rec = parse_record(line, lineno, max_checkpoint_bytes=max_checkpoint_bytes)
            checker.check(rec, lineno)
            count += 1
    except UnicodeDecodeError:
        raise TransferError(f"{path}: not UTF-8 text") from None
    if header is None:
        raise TransferError(f"{path}: empty file, no {FORMAT} header")
    return header, count
