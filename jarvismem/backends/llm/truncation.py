"""The one bound every summary obeys: at most ``max_chars``, visibly cut when longer."""

from __future__ import annotations

__all__ = ["TRUNCATION_MARKER", "truncate"]

TRUNCATION_MARKER = "\n[…truncated]"
"""Appended to a summary that was cut to fit ``max_chars``."""


def truncate(text: str, max_chars: int) -> str:
    """``text`` if it fits in ``max_chars``, else its head plus :data:`TRUNCATION_MARKER`.

    The result is never longer than ``max_chars``.
    """
    if max_chars <= 0:
        return ""
    if len(text) <= max_chars:
        return text
    if max_chars <= len(TRUNCATION_MARKER):
        return text[:max_chars]
    return text[: max_chars - len(TRUNCATION_MARKER)].rstrip() + TRUNCATION_MARKER
