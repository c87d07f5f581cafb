"""The runtime's own summarizer: made from the settings when compaction first needs it.

A view that never compacts makes no summarizer, so no LLM HTTP client. A runtime
its caller closes keeps the one it made until :meth:`OnDemandSummarizer.aclose`;
a drop-in view's private runtime, which nobody closes, makes one per use and
closes it at once, so no HTTP client outlives the call that needed it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from jarvismem.backends.llm import Summarizer, create_summarizer
from jarvismem.defaults import SUMMARY_MAX_CHARS
from jarvismem.settings import Settings


async def _close(summarizer: Summarizer) -> None:
    aclose = getattr(summarizer, "aclose", None)
    if aclose is not None:
        await aclose()


class OnDemandSummarizer:
    """The summarizer ``settings`` ask for (:func:`create_summarizer`), made on first use.

    Args:
        settings: which summarizer (``LLM_BASE_URL`` and the ``LLM_*`` settings).
        keep: keep the summarizer made between uses (closed by :meth:`aclose`);
            False makes one per use and closes it after.
    """

    def __init__(self, settings: Settings, *, keep: bool) -> None:
        self._settings = settings
        self._keep = keep
        self._made: Summarizer | None = None

    @property
    def name(self) -> str:
        """Name recorded in a summary's provenance (the made summarizer's once made)."""
        if self._made is not None:
            return self._made.name
        s = self._settings
        return f"llm:{s.llm_model}" if s.llm_base_url else "extractive"

    @property
    def made(self) -> Summarizer | None:
        """The summarizer kept now (None: not made yet, or made per use)."""
        return self._made

    @property
    def bounded_input(self) -> bool:
        """Whether the summarizer has a context window (an LLM's): compaction then
        map-reduces its input in chunks; the extractive summarizer takes it whole."""
        if self._made is not None:
            return bool(getattr(self._made, "bounded_input", True))
        return bool(self._settings.llm_base_url)

    @property
    def worker(self) -> Any:
        """The kept summarizer's worker process (the extractive summarizer's), or None.

        :meth:`LongTermMemory.compress <jarvismem.tiers.longterm.LongTermMemory.compress>`
        redacts and summarizes the rendered ledger entries there, off the event
        loop, in one call; a summarizer made per use has none to lend.
        """
        if not self._keep:
            return None
        if self._made is None:
            self._made = create_summarizer(self._settings)
        return getattr(self._made, "worker", None)

    @asynccontextmanager
    async def using(self) -> AsyncIterator[Summarizer]:
        """The summarizer for one use (kept, or made now and closed on exit)."""
        if self._keep:
            if self._made is None:
                self._made = create_summarizer(self._settings)
            yield self._made
            return
        summarizer = create_summarizer(self._settings)
        try:
            yield summarizer
        finally:
            await _close(summarizer)

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = SUMMARY_MAX_CHARS
    ) -> str:
        """:meth:`Summarizer.summarize` of the summarizer made for it."""
        async with self.using() as summarizer:
            return await summarizer.summarize(
                text, previous_summary=previous_summary, max_chars=max_chars
            )

    async def aclose(self) -> None:
        """Close the summarizer kept (its HTTP client); a later use makes a new one."""
        made, self._made = self._made, None
        if made is not None:
            await _close(made)
