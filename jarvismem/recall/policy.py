"""The memory policy: whether and how facts are recalled into, and captured from, a turn.

Values often come from configuration files or environment variables, so
strings are accepted and coerced: booleans from ``true/false/1/0/yes/no/on/off``,
integers from digits, enum values case-insensitively. :meth:`MemoryPolicy.parse`
turns any problem into one :class:`InvalidPolicyError` naming the field.

A whole policy may also be given as one boolean, as in the seed designs'
``memory: true`` / ``memory: false``: ``parse(True)`` (or ``"true"``, ``"yes"``,
``"on"``, ``"1"``, ``1``) is the default policy, ``parse(False)`` (or ``"false"``,
``"no"``, ``"off"``, ``"0"``, ``0``) is the default policy with ``enabled=False``:
no recall, no capture. ``parse(None)`` and ``parse({})`` are the default policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from jarvismem.defaults import RECALL_NAMESPACE
from jarvismem.errors import (
    InvalidPolicyError,
    NamespaceContextMissingError,
    SessionIdRequiredError,
)
from jarvismem.keys import validate_id
from jarvismem.recall.models import RecallRequest, WriteRequest, epoch_ms
from jarvismem.settings import validation_problems

Scope = Literal["agent", "session"]
Capture = Literal["manual", "conversation", "off"]
Inject = Literal["instructions", "context"]

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

SOURCE_MANUAL = "manual"
"""``metadata["source"]`` of an entry written explicitly (``remember``, :meth:`write_request`)."""
SOURCE_CONVERSATION = "conversation"
"""``metadata["source"]`` of an entry captured from a turn (``capture``)."""


def _as_bool(value: Any) -> Any:
    """``value`` as a bool when it spells one (see :data:`_TRUE`/:data:`_FALSE`, 0/1), else as is.

    Raises ``ValueError`` for a string that spells neither.
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"expected true/false/1/0/yes/no/on/off, got {value[:20]!r}")
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    return value


class MemoryPolicy(BaseModel):
    """How recall behaves for one agent.

    * ``enabled``: recall and capture happen at all.
    * ``scope``: ``agent`` (entries shared by every session and every workflow
      of the agent in the namespace) or ``session`` (entries private to one
      session; a session id is required). An MCP server narrows ``agent`` to
      its workflow (session scope, the workflow id as session id) unless told
      otherwise (:class:`jarvismem.integrations.mcp.McpScope`).
    * ``namespace`` / ``namespace_from``: a fixed namespace, or the name of a
      context key (e.g. ``"tenant_id"``) whose value is the namespace; at most
      one may be given, and with neither the namespace is ``"default"``.
    * ``capture``: ``manual`` (only explicit writes), ``conversation`` (each
      turn is written as ``"User: ...\\nAssistant: ..."``) or ``off``.
    * ``inject``: ``instructions`` (a "Relevant memory:" system message) or
      ``context`` (a structured context block).
    * ``max_entries``: the most entries recalled into one prompt (>= 1).
    * ``metadata``: string labels copied onto every entry written under the
      policy (captured or written on purpose); its ``source`` key, if any, is
      replaced by the write's own marker (``"manual"`` or ``"conversation"``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    scope: Scope = "agent"
    namespace: str | None = None
    namespace_from: str | None = None
    capture: Capture = "manual"
    inject: Inject = "instructions"
    max_entries: int = Field(default=5, ge=1)
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("enabled", mode="before")
    @classmethod
    def _bool(cls, value: Any) -> Any:
        return _as_bool(value)

    @field_validator("scope", "capture", "inject", mode="before")
    @classmethod
    def _enum(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("max_entries", mode="before")
    @classmethod
    def _int(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return validate_id(value.strip(), "namespace")
        except ValueError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("namespace_from")
    @classmethod
    def _namespace_from(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise ValueError("namespace_from must name a context key")
        return value.strip()

    @model_validator(mode="after")
    def _one_namespace_source(self) -> MemoryPolicy:
        if self.namespace is not None and self.namespace_from is not None:
            raise ValueError("give either namespace or namespace_from, not both")
        if self.namespace is None and self.namespace_from is None:
            object.__setattr__(self, "namespace", RECALL_NAMESPACE)
        return self

    @classmethod
    def parse(
        cls, values: Mapping[str, Any] | bool | str | int | None = None, **overrides: Any
    ) -> MemoryPolicy:
        """Build a policy from loose (often string) values; :class:`InvalidPolicyError` if bad.

        ``values``: a mapping of fields, or one boolean (``memory: true`` /
        ``memory: false`` in a configuration file, also as the strings and 0/1 the
        ``enabled`` field accepts): true is the default policy, false the default
        policy disabled. ``overrides`` are applied on top either way. The error
        message names each bad field and never echoes its value.
        """
        if values is None:
            values = {}
        elif not isinstance(values, Mapping):
            try:
                switch = _as_bool(values)
            except ValueError:
                switch = None
            if not isinstance(switch, bool):
                raise InvalidPolicyError(
                    "invalid memory policy: expected a mapping of policy fields or a boolean "
                    f"(true/false/yes/no/on/off/1/0), got {type(values).__name__}"
                )
            values = {"enabled": switch}
        data = {**values, **overrides}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = validation_problems(exc, subject="policy")
            raise InvalidPolicyError(f"invalid memory policy: {problems}") from None

    # --- resolving a turn's scope -----------------------------------------------------

    def resolve_namespace(self, context: Mapping[str, str] | None = None) -> str:
        """The namespace for this turn.

        Returns the fixed ``namespace``, or the value of ``context[namespace_from]``.
        Raises :class:`NamespaceContextMissingError` when that key is absent or
        empty, ``InvalidIdError`` when its value cannot be used as a namespace.
        """
        if self.namespace_from is None:
            assert self.namespace is not None  # set by the validator
            return self.namespace
        value = (context or {}).get(self.namespace_from)
        if value is None or not str(value).strip():
            raise NamespaceContextMissingError(
                f"the memory policy takes its namespace from context key "
                f"{self.namespace_from!r}, which is missing"
            )
        return validate_id(str(value).strip(), f"namespace (from {self.namespace_from!r})")

    def scope_session(self, session_id: str | None) -> str | None:
        """The session id entries are scoped to: ``None`` for agent scope.

        Raises :class:`SessionIdRequiredError` for session scope without a session id.
        """
        if self.scope == "agent":
            return None
        if not session_id:
            raise SessionIdRequiredError(
                "the memory policy's scope is 'session' but no session id was given"
            )
        return session_id

    def recall_request(
        self,
        *,
        agent_id: str,
        query: str,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        limit: int | None = None,
        filter: Mapping[str, str] | None = None,
        min_score: float = 0.0,
    ) -> RecallRequest:
        """The request recalling at most ``limit`` (default ``max_entries``) entries for
        this turn, with an optional metadata ``filter`` and ``min_score``."""
        return RecallRequest(
            agent_id=agent_id,
            session_id=self.scope_session(session_id),
            namespace=self.resolve_namespace(context),
            query=query,
            limit=self.max_entries if limit is None else limit,
            filter=None if filter is None else dict(filter),
            min_score=min_score,
        )

    def write_request(
        self,
        *,
        agent_id: str,
        content: str,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        entry_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        source: str = SOURCE_MANUAL,
        occurred_at: int | str | datetime | None = None,
    ) -> WriteRequest:
        """A write into this turn's scope.

        The entry's metadata is, later ones winning: the policy's ``metadata``,
        ``{"source": source}`` (:data:`SOURCE_MANUAL` for an explicit write,
        :data:`SOURCE_CONVERSATION` for a captured turn), then ``metadata``.
        Filtering on ``metadata["source"]`` tells captured turns from facts
        written on purpose; a caller's own ``"source"`` label is kept.
        ``occurred_at``: when the fact happened (epoch ms, ISO 8601 or a datetime;
        ``None``: when it is written).
        """
        return WriteRequest(
            agent_id=agent_id,
            session_id=self.scope_session(session_id),
            namespace=self.resolve_namespace(context),
            content=content,
            id=entry_id,
            metadata={**self.metadata, "source": source, **(metadata or {})},
            occurred_at=epoch_ms(occurred_at),
        )
