"""Recall wire models: entries, requests and results (pydantic, validated at the edge).

Construction validates everything: ids go through :func:`jarvismem.keys.validate_id`
(they become parts of Redis keys), content and query are stripped and must not be
empty, limits are positive. A bad value raises ``pydantic.ValidationError`` (a
``ValueError``) naming the field, before any store sees it.
"""

from __future__ import annotations

import time
import uuid

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
    """One remembered fact. ``created_at``/``updated_at`` are epoch milliseconds."""

    id: str = Field(default_factory=new_entry_id)
    content: str
    metadata: dict[str, str] = Field(default_factory=dict)
    created_at: int = Field(default_factory=_now_ms, ge=0)
    updated_at: int = Field(default_factory=_now_ms, ge=0)

    @field_validator("id")
    @classmethod
    def _entry_id(cls, value: object) -> str:
        return _id(value, "entry id")

    @field_validator("content")
    @classmethod
    def _content(cls, value: object) -> str:
        # No size bound here: an entry is read back as it was stored; writes
        # are bounded by WriteRequest.
        return _text(value, "content")


class RecallRequest(_Scoped):
    """Find the ``limit`` entries of one scope most relevant to ``query``."""

    query: str
    limit: int = Field(default=SEARCH_LIMIT, gt=0)

    @field_validator("query")
    @classmethod
    def _query(cls, value: object) -> str:
        return _text(value, "query")


class WriteRequest(_Scoped):
    """Store ``content`` in one scope; with ``id`` it is an upsert of that entry."""

    content: str
    id: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)

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


class RecallResult(BaseModel):
    """A recalled entry and its relevance: higher ``score`` = more relevant (>= 0)."""

    model_config = ConfigDict(frozen=True)

    entry: MemoryEntry
    score: float = Field(ge=0)
