"""Pydantic models of Athena's wire format (see ``ATHENA_API.md``).

The server answers in lowerCamelCase and always sends every field; the models
accept camelCase (and snake_case, for round trips) and tolerate missing or
``null`` fields so that a partial answer still parses. ``to_dict()`` gives a
plain snake_case, JSON-able dict for rehydrate bundles and ``--json`` output.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

EventType = Literal["message", "thought", "action", "observation"]
EVENT_TYPES: frozenset[str] = frozenset({"message", "thought", "action", "observation"})
"""The kinds of short-term event Athena accepts."""


class _Wire(BaseModel):
    """Base of every Athena model: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
    )

    def to_dict(self) -> dict[str, Any]:
        """Plain snake_case dict, safe for ``json.dumps``."""
        return self.model_dump(mode="json", by_alias=False)


def _str_map(value: Any) -> dict[str, str]:
    """Coerce ``null``/odd metadata into a string map (the server only sends str→str)."""
    if not isinstance(value, dict):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def _str(value: Any) -> str:
    return "" if value is None else str(value)


class StmEvent(_Wire):
    """One event of the short-term window (``stmEvents[i]``)."""

    role: str = ""
    type: str = ""
    content: str = ""
    timestamp: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)
    blob_uri: str = ""
    blob_mime_type: str = ""

    @field_validator("metadata", mode="before")
    @classmethod
    def _meta(cls, value: Any) -> dict[str, str]:
        return _str_map(value)

    @field_validator(
        "role", "type", "content", "timestamp", "blob_uri", "blob_mime_type", mode="before"
    )
    @classmethod
    def _text(cls, value: Any) -> str:
        return _str(value)


class MidTermChain(_Wire):
    """A mid-term memory chain: Athena sends these as ``relevantPages``.

    There is no heat field on the wire; the server computes heat internally.
    """

    id: str = ""
    session_id: str = ""
    topic: str = ""
    summary: str = ""
    timestamp: str = ""
    embedding: list[float] = Field(default_factory=list)
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("metadata", mode="before")
    @classmethod
    def _meta(cls, value: Any) -> dict[str, str]:
        return _str_map(value)

    @field_validator("embedding", mode="before")
    @classmethod
    def _emb(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("id", "session_id", "topic", "summary", "timestamp", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return _str(value)


class AthenaContext(_Wire):
    """Answer of ``GET /api/v1/sessions/{id}/context``.

    ``stm_events`` come oldest first (at most 10); ``relevant_pages`` are the
    mid-term chains (newest first without a query, vector hits with one).
    """

    stm_events: list[StmEvent] = Field(default_factory=list)
    relevant_pages: list[MidTermChain] = Field(default_factory=list)
    segments: list[Any] = Field(default_factory=list)
    user_persona: dict[str, Any] | None = None

    @field_validator("stm_events", "relevant_pages", "segments", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return [] if value is None else value

    @property
    def mid_term(self) -> list[MidTermChain]:
        """The mid-term chains (an alias of ``relevant_pages`` that says what they are)."""
        return self.relevant_pages


class AthenaSearchResult(_Wire):
    """One hit of ``POST /api/v1/sessions/{id}/context/search``.

    ``similarity_score`` is what the server calls it, but it is a RAW L2
    DISTANCE: lower means closer, 0 is identical. Use :attr:`similarity` for a
    higher-is-closer number. ``ltm_node`` hits always carry 0.
    """

    content: str = ""
    similarity_score: float = 0.0
    source_type: str = ""
    source_id: str = ""
    timestamp: str = ""

    @field_validator("content", "source_type", "source_id", "timestamp", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return _str(value)

    @field_validator("similarity_score", mode="before")
    @classmethod
    def _score(cls, value: Any) -> Any:
        return 0.0 if value is None else value

    @property
    def distance(self) -> float:
        """The raw L2 distance (lower is closer)."""
        return self.similarity_score

    @property
    def similarity(self) -> float:
        """``1 / (1 + distance)``: in (0, 1], HIGHER is closer (1 = identical)."""
        return 1.0 / (1.0 + max(0.0, self.similarity_score))

    def to_dict(self) -> dict[str, Any]:
        """Snake_case dict; adds ``distance`` and ``similarity`` so readers need no doc."""
        out = super().to_dict()
        out["distance"] = self.distance
        out["similarity"] = self.similarity
        return out


class AthenaHealth(_Wire):
    """Answer of ``GET /api/v1/health``: overall status and each dependency's."""

    status: str = ""
    dependencies: dict[str, str] = Field(default_factory=dict)
    timestamp: str = ""

    @field_validator("dependencies", mode="before")
    @classmethod
    def _deps(cls, value: Any) -> dict[str, str]:
        return _str_map(value)

    @field_validator("status", "timestamp", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return _str(value)

    @property
    def healthy(self) -> bool:
        """True when the server reports ``healthy``."""
        return self.status == "healthy"
