"""What one agent's Athena tier reports in ``health()``, shared by its parts.

Session resolution, delivery and reads each note their failures and counts
here; the memory turns it into its health dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TierStatus", "describe_error"]

_MAX_ERROR = 300
"""Longest error text kept (server text is untrusted and may be long)."""


def describe_error(exc: BaseException) -> str:
    """``"ErrorClass: message"``, truncated: how every part reports a failure."""
    return f"{type(exc).__name__}: {exc}"[:_MAX_ERROR]


@dataclass(slots=True)
class TierStatus:
    """Counters and the last error of one Athena tier (mutable, one per memory)."""

    last_error: str | None = None
    rejected: int = 0
    """Records Athena refused for good (a 4xx other than 401/403/429, a 501, an
    unknown record): moved to the outbox's dead-letter file by this memory."""
    misdirected: int = 0
    """Records stamped for another destination: moved to the dead-letter file by
    this memory, never sent here."""
    duplicates_skipped: int = 0
    """Events another deliverer had sent already (effectively-once)."""
    unsupported: set[str] = field(default_factory=set)
    """Routes the server answered 501 for (``context``, ``search``, ``events``,
    ``sessions``...): not supported there, which is not an outage."""

    def note(self, exc: BaseException) -> str:
        """Keep ``exc`` as the last error; returns its description."""
        self.last_error = describe_error(exc)
        return self.last_error

    def note_text(self, text: str) -> None:
        """Keep an already formatted error (a local disk error names its errno)."""
        self.last_error = text[:_MAX_ERROR]
