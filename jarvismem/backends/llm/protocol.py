"""The protocol the long-term tier talks to: something that condenses text."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from jarvismem.defaults import SUMMARY_MAX_CHARS

__all__ = ["Summarizer"]


@runtime_checkable
class Summarizer(Protocol):
    """Something that condenses text, optionally on top of an earlier summary.

    An optional attribute ``bounded_input`` (taken as True when absent) says whether
    the summarizer has a context window: compaction then feeds it at most
    ``COMPACTION_CHUNK_CHARS`` of new text per call, map-reducing larger input.
    """

    name: str
    """Short name recorded in a summary's provenance (``extractive``, ``llm:<model>``)."""

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = SUMMARY_MAX_CHARS
    ) -> str:
        """Return a summary of ``previous_summary`` + ``text`` of at most ``max_chars``.

        Raises :class:`~jarvismem.errors.LLMError` when the summary cannot be made;
        callers then keep their old summary.
        """
        ...
