"""The line protocol between the demo's parent and its children.

A child reports progress as one JSON object per line on stdout, with an
``event`` field (``start``, ``ack``, ``rerun``, ``inflight``, ``done``) and the
event's data. Anything else on stdout (a stray print) is not an event.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["decode_event", "encode_event"]


def encode_event(event: str, **data: Any) -> str:
    """One protocol line (with its newline) for ``event`` carrying ``data``."""
    return json.dumps({"event": event, **data}, default=str) + "\n"


def decode_event(raw: bytes | str) -> dict[str, Any] | None:
    """The event a line holds, or None when the line is not a protocol line."""
    try:
        event = json.loads(raw)
    except ValueError:
        return None
    if isinstance(event, dict) and "event" in event:
        return event
    return None
