"""The package re-exports every name imported from jarvismem.backends.llm elsewhere."""

from __future__ import annotations

import jarvismem.backends.llm as llm
from jarvismem.backends.llm import client, factory, protocol, summarizers, truncation


def test_reexports_are_the_parts_objects() -> None:
    assert llm.ChatCompletionsClient is client.ChatCompletionsClient
    assert llm.LLMSummarizer is summarizers.LLMSummarizer
    assert llm.ExtractiveSummarizer is summarizers.ExtractiveSummarizer
    assert llm.GenerateSummarizer is summarizers.GenerateSummarizer
    assert llm.as_summarizer is summarizers.as_summarizer
    assert llm.Summarizer is protocol.Summarizer
    assert llm.create_summarizer is factory.create_summarizer
    assert llm.truncate is truncation.truncate
    assert llm.TRUNCATION_MARKER == truncation.TRUNCATION_MARKER
    assert sorted(llm.__all__) == sorted(
        [
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
    )
