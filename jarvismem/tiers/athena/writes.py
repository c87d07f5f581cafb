"""The outbox records of Athena writes: validated, redacted, each event with its key.

Pure functions: the memory queues what they build, as plain dicts (the outbox stores
JSON lines) whose ``kind`` says how delivery sends them: ``event`` or ``events`` (each
claimed on its own; older outboxes may still hold ``interaction`` records). The shape
follows how the server learns (docs/athena.md): a user's message is a ``user`` event,
everything else ``agent``; each event carries ``occurred_at`` and its idempotency key;
a caller's metadata key goes under :data:`CALLER_METADATA_PREFIX`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jarvismem.backends.athena_models import EVENT_TYPES
from jarvismem.errors import InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.redaction import Redactor

__all__ = [
    "AGENT_ROLE",
    "CALLER_METADATA_PREFIX",
    "IDENTITY_KEYS",
    "USER_ROLE",
    "WIRE_METADATA_KEYS",
    "TurnOrigin",
    "conversation_record",
    "event_record",
    "now_rfc3339",
    "turn_record",
]


@dataclass(frozen=True, slots=True)
class TurnOrigin:
    """Where a kernel turn was logged: with the turn id, its identity on Athena.

    The same origin gives the same idempotency keys, so a re-logged turn
    reaches Athena once. ``agent_id`` None: the memory's own agent.
    """

    workflow_id: str | None = None
    step_id: str | None = None
    agent_id: str | None = None


USER_ROLE = "user"
"""Role of what the user said: the server forms mid-term chains from these."""

AGENT_ROLE = "agent"
"""Role of the agent's thoughts, actions, observations and answers (the server's
own name for it; never ``assistant`` or the server default ``system``)."""

CALLER_METADATA_PREFIX = "meta."
"""Prefix of every metadata key a caller gives: no caller key can collide with a
key the server acts on (``execution_id``...) or with the documented keys."""

IDENTITY_KEYS = frozenset({"workflow_id", "step_id", "turn_id"})
"""Documented keys a caller may set directly (``record_thought(..., workflow_id=...)``)."""

WIRE_METADATA_KEYS = IDENTITY_KEYS | {"occurred_at", "idempotency_key"}
"""The only unprefixed keys of an event's metadata (``idempotency_key`` is added
by the client from the record's key)."""


def now_rfc3339() -> str:
    """The current UTC time in RFC 3339 (``2025-01-02T03:04:05.678Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _wire_metadata(
    caller: Mapping[str, Any],
    redactor: Redactor,
    *,
    occurred_at: str,
    workflow_id: str | None = None,
    step_id: str | None = None,
    turn_id: str | None = None,
) -> dict[str, str]:
    """The documented keys, then the caller's keys under the prefix (values redacted)."""
    identity: dict[str, str | None] = {
        "workflow_id": workflow_id,
        "step_id": step_id,
        "turn_id": turn_id,
    }
    prefixed: dict[str, str] = {}
    for key, value in caller.items():
        if not isinstance(value, str):
            raise InvalidPayloadError(
                f"metadata {key!r} must be a string (Athena accepts only string values), "
                f"got {type(value).__name__}"
            )
        if key in IDENTITY_KEYS:
            identity[key] = identity[key] or value
        else:
            prefixed[CALLER_METADATA_PREFIX + str(key)] = redactor(value)
    meta = {k: v for k, v in identity.items() if v is not None}
    meta["occurred_at"] = occurred_at
    meta.update(prefixed)
    return meta


def event_record(
    etype: str,
    content: str,
    metadata: Mapping[str, Any],
    redactor: Redactor,
    *,
    role: str = AGENT_ROLE,
) -> dict[str, Any]:
    """One event with a fresh idempotency key; refuses a bad type, content or metadata.

    ``metadata``: the caller's string values; ``workflow_id``, ``step_id`` and
    ``turn_id`` are kept as documented keys, any other key is prefixed.
    """
    if etype not in EVENT_TYPES:
        raise InvalidPayloadError(f"invalid event type {etype!r}")
    if not isinstance(content, str):
        raise InvalidPayloadError(f"content must be a string, got {type(content).__name__}")
    return {
        "kind": "event",
        "type": etype,
        "role": role,
        "content": redactor(content),
        "metadata": _wire_metadata(metadata, redactor, occurred_at=now_rfc3339()),
        "idempotency_key": uuid.uuid4().hex,
    }


def _event_key(
    keys: KeySpace,
    kind: str,
    *,
    turn_id: str | None,
    workflow_id: str | None,
    step_id: str | None,
    agent_id: str,
) -> str:
    """A key derived from the turn's identity when there is one (same turn, same key)."""
    if turn_id is None:
        return uuid.uuid4().hex
    return keys.athena_event_key(workflow_id, step_id, agent_id, turn_id, kind)


def conversation_record(
    keys: KeySpace,
    user_message: str | None,
    agent_response: str | None,
    redactor: Redactor,
    *,
    workflow_id: str | None = None,
    step_id: str | None = None,
    agent_id: str,
    turn_id: str | int | None = None,
) -> dict[str, Any] | None:
    """A user message and the agent's answer as ``message`` events (roles user, agent).

    Events, not an Athena interaction: the server drops an interaction's
    metadata, and with it the idempotency key and the time it was written.
    With ``turn_id`` the keys come from the turn's identity (a user message
    logged with the turn and captured again after it is sent once). Empty
    texts are left out; None when both are.
    """
    if user_message is not None and not isinstance(user_message, str):
        raise InvalidPayloadError("user_message must be a string or None")
    if agent_response is not None and not isinstance(agent_response, str):
        raise InvalidPayloadError("agent_response must be a string or None")
    turn = None if turn_id is None else str(turn_id)
    when = now_rfc3339()
    meta = _wire_metadata(
        {}, redactor, occurred_at=when, workflow_id=workflow_id, step_id=step_id, turn_id=turn
    )
    events = []
    for kind, role, text in (
        ("user_message", USER_ROLE, user_message),
        ("agent_response", AGENT_ROLE, agent_response),
    ):
        if not text:
            continue
        events.append(
            {
                "type": "message",
                "role": role,
                "content": redactor(text),
                "metadata": dict(meta),
                "idempotency_key": _event_key(
                    keys,
                    kind,
                    turn_id=turn,
                    workflow_id=workflow_id,
                    step_id=step_id,
                    agent_id=agent_id,
                ),
            }
        )
    return {"kind": "events", "events": events} if events else None


def turn_record(
    keys: KeySpace,
    turn_id: str | int,
    values: tuple[Any, Any, Any],
    redactor: Redactor,
    *,
    workflow_id: str | None,
    step_id: str | None,
    agent_id: str,
    user_message: str | None = None,
) -> dict[str, Any] | None:
    """A kernel turn as one record: the user's message (role user), if any, then
    the (thought, action, result) as thought, action and observation (role agent).

    Empty values are left out (None when all are). Non-string values are sent
    as JSON. Each event's key is derived from the turn's identity, so logging
    the turn again gives the same keys and Athena gets each event once.
    """
    turn = str(turn_id)
    when = now_rfc3339()
    meta = _wire_metadata(
        {}, redactor, occurred_at=when, workflow_id=workflow_id, step_id=step_id, turn_id=turn
    )
    events = []
    if user_message is not None and not isinstance(user_message, str):
        raise InvalidPayloadError("user_message must be a string or None")
    entries: list[tuple[str, str, str, Any]] = [
        ("message", "user_message", USER_ROLE, user_message)
    ]
    entries += [
        (etype, etype, AGENT_ROLE, value)
        for etype, value in zip(("thought", "action", "observation"), values, strict=True)
    ]
    for etype, kind, role, value in entries:
        if value in (None, ""):
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        events.append(
            {
                "type": etype,
                "role": role,
                "content": redactor(text),
                "metadata": dict(meta),
                "idempotency_key": keys.athena_event_key(
                    workflow_id, step_id, agent_id, turn, kind
                ),
            }
        )
    return {"kind": "events", "events": events} if events else None
