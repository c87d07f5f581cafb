"""Recall wire models: entries, requests and results (pydantic, validated at the edge).

Construction validates everything: ids go through :func:`jarvismem.keys.validate_id`
(they become parts of Redis keys), content and query are stripped and must not be
empty, limits are positive, ``occurred_at`` is epoch milliseconds or an ISO 8601
date/time, filters map strings to strings. A bad value raises
``pydantic.ValidationError`` (a ``ValueError``) naming the field, before any store
sees it.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from jarvismem.defaults import RECALL_CONTENT_MAX_CHARS, RECALL_NAMESPACE, SEARCH_LIMIT
from jarvismem.keys import validate_id


def new_entry_id() -> str:
    """A fresh entry id: ``"mem_"`` + 32 hex digits."""
    return "mem_" + uuid.uuid4().hex


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _id(value: object, kind: str) -> str:
    try:
        return validate_id(value, kind)
    except ValueError as exc:  # re-raised as a plain ValueError so pydantic names the field
        raise ValueError(str(exc)) from None


_LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last day a date can name


def epoch_ms(value: object) -> int | None:
    """``occurred_at`` as epoch milliseconds: an int as is, an ISO 8601 string parsed,
    a ``datetime`` converted.

    A date/time without a zone is taken as UTC; a date alone is its midnight UTC.
    ``None`` stays ``None``. Raises ``ValueError`` for anything else (a bool, a
    float, an unparsable string, a time before 1970 or after 9999).
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        value = int(moment.timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(
            "occurred_at must be epoch milliseconds (int), an ISO 8601 string or a datetime"
        )
    if isinstance(value, str):
        text = value.strip()
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00") if text else "?")
        except ValueError:
            raise ValueError(
                f"occurred_at {text[:40]!r} is not an ISO 8601 date or date-time"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        value = int(moment.timestamp() * 1000)
    if not 0 <= value <= _LAST_MS:
        raise ValueError("occurred_at must be between 1970 and the year 9999")
    return value


def _text(value: object, kind: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{kind} must be a string")
    value = value.strip()
    if not value:
        raise ValueError(f"{kind} must not be empty")
    return value


class _Scoped(BaseModel):
    """Who an entry belongs to: agent, optional session (``None`` = agent-wide), namespace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_id: str
    session_id: str | None = None
    namespace: str = RECALL_NAMESPACE

    @field_validator("agent_id")
    @classmethod
    def _agent(cls, value: object) -> str:
        return _id(value, "agent_id")

    @field_validator("session_id")
    @classmethod
    def _session(cls, value: object) -> str | None:
        return None if value is None else _id(value, "session_id")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: object) -> str:
        return _id(value, "namespace")


class MemoryEntry(_Scoped):
    """One remembered fact. ``created_at``/``updated_at``/``occurred_at`` are epoch ms.

    ``occurred_at``: when the fact happened (a conversation's date, an event's
    day); its day is searchable. An entry stored without one (or before the field
    existed) takes its ``created_at``.
    """

    id: str = Field(default_factory=new_entry_id)
    content: str
    metadata: dict[str, str] = Field(default_factory=dict)
    created_at: int = Field(default_factory=_now_ms, ge=0)
    updated_at: int = Field(default_factory=_now_ms, ge=0)
    occurred_at: int = Field(default=-1, validate_default=False)

    @field_validator("id")
    @classmethod
    def _entry_id(cls, value: object) -> str:
        return _id(value, "entry id")

    @field_validator("occurred_at", mode="before")
    @classmethod
    def _occurred_at(cls, value: object) -> int:
        moment = epoch_ms(value)
        return -1 if moment is None else moment

    @model_validator(mode="after")
    def _occurred_defaults_to_created(self) -> MemoryEntry:
        if self.occurred_at < 0:
            object.__setattr__(self, "occurred_at", self.created_at)
        return self

    @field_validator("content")
    @classmethod
    def _content(cls, value: object) -> str:
        # No size bound here: an entry is read back as it was stored; writes
        # are bounded by WriteRequest.
        return _text(value, "content")


class RecallRequest(_Scoped):
    """Find the ``limit`` entries of one scope most relevant to ``query``.

    * ``filter``: metadata equality; an entry is a candidate only if every
      ``key: value`` pair is in its metadata (``None`` or ``{}``: no filter).
    * ``min_score``: leave out results scoring below it; above 0 it also leaves
      out the recency fill (whose entries score 0). See
      :mod:`jarvismem.recall.stores` for the ranking rule.
    """

    query: str
    limit: int = Field(default=SEARCH_LIMIT, gt=0)
    filter: dict[str, str] | None = None
    min_score: float = Field(default=0.0, ge=0, allow_inf_nan=False)

    @field_validator("query")
    @classmethod
    def _query(cls, value: object) -> str:
        return _text(value, "query")

    @field_validator("filter", mode="before")
    @classmethod
    def _filter(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError("filter must be a mapping of metadata keys to string values")
        for key, wanted in value.items():
            if not isinstance(key, str) or not key:
                raise ValueError("filter keys must be non-empty strings")
            if not isinstance(wanted, str):
                raise ValueError(f"filter value of {key!r} must be a string")
        return value or None


class WriteRequest(_Scoped):
    """Store ``content`` in one scope; with ``id`` it is an upsert of that entry.

    ``occurred_at``: when the fact happened, epoch milliseconds or an ISO 8601
    string (zone-less = UTC); ``None``: the entry's creation time (an upsert
    without it keeps the entry's previous ``occurred_at``).
    """

    content: str
    id: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    occurred_at: int | None = None

    @field_validator("occurred_at", mode="before")
    @classmethod
    def _occurred_at(cls, value: object) -> int | None:
        return epoch_ms(value)

    @field_validator("id")
    @classmethod
    def _entry_id(cls, value: object) -> str | None:
        return None if value is None else _id(value, "entry id")

    @field_validator("content")
    @classmethod
    def _content(cls, value: object) -> str:
        text = _text(value, "content")
        if len(text) > RECALL_CONTENT_MAX_CHARS:
            raise ValueError(
                f"content is {len(text)} characters; a remembered fact may hold at most "
                f"{RECALL_CONTENT_MAX_CHARS}"
            )
        return text


RecallSource = Literal["lexical", "vector", "lexical+vector", "recency", "athena"]
"""How a store found a result: ``lexical`` (BM25 on its words), ``vector`` (by meaning
only), ``lexical+vector`` (both signals, fused), ``recency`` (the recency fill, score 0),
``athena`` (the Athena server's search)."""


class RecallResult(BaseModel):
    """A recalled entry and its relevance: higher ``score`` = more relevant (>= 0).

    ``source``: how the store found it (:data:`RecallSource`); None when a store does
    not say (one written outside jarvismem).
    """

    model_config = ConfigDict(frozen=True)

    entry: MemoryEntry
    score: float = Field(ge=0)
    source: RecallSource | None = None
