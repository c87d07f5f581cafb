"""Pick the summarizer the settings ask for."""

from __future__ import annotations

from jarvismem.backends.llm.protocol import Summarizer
from jarvismem.backends.llm.summarizers import ExtractiveSummarizer, LLMSummarizer
from jarvismem.settings import Settings

__all__ = ["create_summarizer"]


def create_summarizer(settings: Settings) -> Summarizer:
    """An :class:`LLMSummarizer` when ``LLM_BASE_URL`` is set, else an extractive one.

    The LLM summarizer owns its new client: close it with ``await summarizer.aclose()``.
    The extractive one runs in the process's summary worker unless
    ``COMPACTION_WORKER=loop``.
    """
    if settings.llm_base_url:
        # The HTTP client (and httpx) is imported only when an LLM is configured.
        from jarvismem.backends.llm.client import ChatCompletionsClient

        return LLMSummarizer(ChatCompletionsClient.from_settings(settings), owns_client=True)
    return ExtractiveSummarizer(offload=settings.compaction_worker == "process")
