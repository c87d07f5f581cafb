"""The outbox's on-disk encodings: record lines, destination stamps, cursor, dead letters.

A data line is ``{"seq": N, "dst": "<digest>", "rec": {...}}\\n`` (``dst`` only
when the outbox was opened for a destination); the cursor file is
``{"acked": N, "dropped": D, "dead": X, "gen": G}``; a dead letter is
``{"seq": N|null, "reason": "...", "at": <unix time>, "rec": {...}}``. Pure
functions, no I/O: :mod:`.store` does the reading and writing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from jarvismem.errors import InvalidPayloadError

__all__ = [
    "Cursor",
    "decode_cursor",
    "decode_line",
    "destination_stamp",
    "encode_cursor",
    "encode_dead_letter",
    "encode_line",
    "encode_record",
    "line_record",
    "sibling",
]

_COMPACT = (",", ":")


class Cursor(NamedTuple):
    """The delivery cursor of one outbox (see the module docstring)."""

    acked: int
    dropped: int
    gen: int
    dead: int


def sibling(path: Path, suffix: str) -> Path:
    """The companion file ``<path><suffix>`` (``.cursor``, ``.lock``, ``.dead``...)."""
    return path.with_name(path.name + suffix)


def encode_record(record: object) -> str:
    """``record`` as compact JSON; :class:`InvalidPayloadError` if it is not a JSON dict."""
    if not isinstance(record, dict):
        raise InvalidPayloadError(f"outbox record must be a dict, got {type(record).__name__}")
    try:
        return json.dumps(record, separators=_COMPACT, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidPayloadError(f"outbox record is not JSON-serialisable: {exc}") from None


def destination_stamp(destination: str | None) -> str:
    """The ``"dst":...,`` fragment put in every line (empty without a destination)."""
    return "" if destination is None else f'"dst":{json.dumps(destination)},'


def encode_line(seq: int, stamp: str, encoded_record: str) -> bytes:
    """One whole data line, newline included (written with a single ``write()``)."""
    return f'{{"seq":{seq},{stamp}"rec":{encoded_record}}}\n'.encode()


def decode_line(line: bytes) -> tuple[int | None, str | None]:
    """The seq and destination stamp of one data line ((None, None) when corrupt)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None, None
    if not isinstance(entry, dict) or not isinstance(entry.get("rec"), dict):
        return None, None
    seq = entry.get("seq")
    dst = entry.get("dst")
    if not isinstance(seq, int) or isinstance(seq, bool):
        return None, None
    return seq, dst if isinstance(dst, str) else None


def line_record(line: bytes) -> dict[str, Any]:
    """The record of a data line already checked by :func:`decode_line`."""
    record: dict[str, Any] = json.loads(line)["rec"]
    return record


def encode_dead_letter(seq: int | None, record: dict[str, Any], reason: str, at: float) -> str:
    """One dead-letter line (no newline); the reason is cut to 500 characters."""
    return json.dumps(
        {"seq": seq, "reason": reason[:500], "at": at, "rec": record},
        separators=_COMPACT,
        default=str,
    )


def encode_cursor(cursor: Cursor) -> str:
    """The cursor file's content."""
    return json.dumps(
        {"acked": cursor.acked, "dropped": cursor.dropped, "dead": cursor.dead, "gen": cursor.gen}
    )


def decode_cursor(raw: str) -> Cursor:
    """Parse a cursor file; ``ValueError``/``KeyError``/``TypeError`` when unreadable.

    ``gen`` and ``dead`` default to 0 (files written before they existed).
    """
    data = json.loads(raw)
    return Cursor(
        acked=int(data["acked"]),
        dropped=int(data["dropped"]),
        gen=int(data.get("gen", 0)),
        dead=int(data.get("dead", 0)),
    )
