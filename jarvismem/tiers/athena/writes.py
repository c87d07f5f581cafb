"""The outbox records of Athena writes: validated, redacted, each event with its key.

Pure functions: the memory queues what they build. Records are plain dicts
(the outbox stores JSON lines); ``kind`` says how delivery sends them:
``event`` (one event), ``events`` (a turn's events, each claimed on its own)
or ``interaction`` (a user message and the agent's answer).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from jarvismem.backends.athena import EVENT_TYPES
from jarvismem.errors import InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.redaction import Redactor

__all__ = ["event_record", "interaction_record", "turn_record"]


def _check_meta(metadata: dict[str, Any]) -> dict[str, str]:
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise InvalidPayloadError(
                f"metadata {key!r} must be a string (Athena accepts only string values), "
                f"got {type(value).__name__}"
            )
    return dict(metadata)


def event_record(
    etype: str, content: str, metadata: dict[str, Any], redactor: Redactor
) -> dict[str, Any]:
    """One event with a fresh idempotency key; refuses a bad type, content or metadata."""
    if etype not in EVENT_TYPES:
        raise InvalidPayloadError(f"invalid event type {etype!r}")
    if not isinstance(content, str):
        raise InvalidPayloadError(f"content must be a string, got {type(content).__name__}")
    return {
        "kind": "event",
        "type": etype,
        "content": redactor(content),
        "metadata": {k: redactor(v) for k, v in _check_meta(metadata).items()},
        "idempotency_key": uuid.uuid4().hex,
    }


def interaction_record(
    user_message: str, agent_response: str | None, redactor: Redactor
) -> dict[str, Any]:
    """One user message and, optionally, the agent's answer."""
    if not isinstance(user_message, str):
        raise InvalidPayloadError("user_message must be a string")
    if agent_response is not None and not isinstance(agent_response, str):
        raise InvalidPayloadError("agent_response must be a string or None")
    return {
        "kind": "interaction",
        "user_message": redactor(user_message),
        "agent_response": None if agent_response is None else redactor(agent_response),
        "idempotency_key": uuid.uuid4().hex,
    }


def turn_record(
    keys: KeySpace,
    turn_id: str | int,
    values: tuple[Any, Any, Any],
    redactor: Redactor,
    *,
    workflow_id: str | None,
    step_id: str | None,
    agent_id: str,
) -> dict[str, Any] | None:
    """A kernel turn's (thought, action, result) as one record of up to three events.

    Empty values are left out (None when all are). Non-string values are sent
    as JSON. Each event's key is derived from the turn's identity, so logging
    the turn again gives the same keys and Athena gets each event once.
    """
    turn = str(turn_id)
    events = []
    for etype, value in zip(("thought", "action", "observation"), values, strict=True):
        if value in (None, ""):
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        events.append(
            {
                "type": etype,
                "content": redactor(text),
                "metadata": {"turn_id": turn},
                "idempotency_key": keys.athena_event_key(
                    workflow_id, step_id, agent_id, turn, etype
                ),
            }
        )
    return {"kind": "events", "events": events} if events else None
