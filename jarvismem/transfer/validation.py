"""Reading and checking an export file, line by line, before anything is written.

A line is valid when its model validates (:mod:`jarvismem.transfer.format`) and
what it would write is acceptable to the stores: ids pass
:func:`~jarvismem.keys.validate_id`, ledger fields and scratchpad records encode
(:mod:`jarvismem.records`), a spaces snapshot loads. Every error names its line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiofiles
from pydantic import ValidationError

from jarvismem import defaults
from jarvismem.errors import JarvisMemError
from jarvismem.keys import validate_id
from jarvismem.records import encode_fields, encode_record
from jarvismem.spaces.models import MemoryContainer
from jarvismem.tiers.checkpoints import validate_checkpoint
from jarvismem.transfer.format import (
    FORMAT,
    VERSION,
    BlobRecordLine,
    CheckpointLine,
    Header,
    LedgerLine,
    Record,
    SpacesLine,
    TransferError,
    record_adapter,
)


def parse_header(line: str) -> Header:
    """The header line, or :class:`TransferError` naming line 1."""
    try:
        return Header.model_validate_json(line)
    except ValidationError as exc:
        raise TransferError(
            f"line 1: not a {FORMAT} version {VERSION} header: {_first_error(exc)}"
        ) from None


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
            encode_record(rec.record)
        elif isinstance(rec, SpacesLine):
            validate_id(rec.agent_id, "agent_id")
            MemoryContainer.from_dict(rec.snapshot)
        elif isinstance(rec, LedgerLine):
            encode_fields(rec.fields)
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
    """Check every line of the file at ``path``; returns the header and the record count.

    ``max_checkpoint_bytes``: the target's checkpoint limit (see :func:`parse_record`).
    """
    header: Header | None = None
    count = 0
    try:
        async for lineno, line in read_lines(path):
            if header is None:
                if lineno != 1:
                    raise TransferError("line 1: the header must be the first line")
                header = parse_header(line)
                continue
            parse_record(line, lineno, max_checkpoint_bytes=max_checkpoint_bytes)
            count += 1
    except UnicodeDecodeError:
        raise TransferError(f"{path}: not UTF-8 text") from None
    if header is None:
        raise TransferError(f"{path}: empty file, no {FORMAT} header")
    return header, count
