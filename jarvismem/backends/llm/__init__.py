"""LLM access for long-term compression: one small protocol, two honest summarizers.

The package is split by job:

* :mod:`.truncation`: :func:`truncate` and :data:`TRUNCATION_MARKER`, the bound
  every summary obeys;
* :mod:`.protocol`: :class:`Summarizer`, what the long-term tier talks to;
* :mod:`.client`: :class:`ChatCompletionsClient`, the OpenAI-compatible HTTP client;
* :mod:`.summarizers`: :class:`LLMSummarizer`, :class:`ExtractiveSummarizer`, and
  :class:`GenerateSummarizer` with :func:`as_summarizer` (JarvisCore's
  ``generate()`` client shape);
* :mod:`.factory`: :func:`create_summarizer`, which picks one from the settings.

This module only re-exports; the parts import each other directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jarvismem.backends.llm.factory import create_summarizer
from jarvismem.backends.llm.protocol import Summarizer
from jarvismem.backends.llm.summarizers import (
    ExtractiveSummarizer,
    GenerateSummarizer,
    LLMSummarizer,
    as_summarizer,
)
from jarvismem.backends.llm.truncation import TRUNCATION_MARKER, truncate

if TYPE_CHECKING:
    from jarvismem.backends.llm.client import ChatCompletionsClient

__all__ = [
    "TRUNCATION_MARKER",
    "ChatCompletionsClient",
    "ExtractiveSummarizer",
    "GenerateSummarizer",
    "LLMSummarizer",
    "Summarizer",
    "as_summarizer",
    "create_summarizer",
    "truncate",
]


def __getattr__(name: str) -> Any:
    # The HTTP client is imported on first use: it brings httpx, which a process
    # summarizing extractively (no LLM_BASE_URL) never needs.
    if name == "ChatCompletionsClient":
        from jarvismem.backends.llm.client import ChatCompletionsClient

        return ChatCompletionsClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
