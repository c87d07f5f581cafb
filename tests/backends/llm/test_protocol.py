"""The Summarizer protocol: both summarizers satisfy it, other objects do not."""

from __future__ import annotations

import inspect

from jarvismem.backends.llm.client import ChatCompletionsClient
from jarvismem.backends.llm.protocol import Summarizer
from jarvismem.backends.llm.summarizers import ExtractiveSummarizer, LLMSummarizer
from jarvismem.defaults import SUMMARY_MAX_CHARS


def test_extractive_summarizer_is_a_summarizer() -> None:
    assert isinstance(ExtractiveSummarizer(), Summarizer)


async def test_llm_summarizer_is_a_summarizer() -> None:
    client = ChatCompletionsClient("http://127.0.0.1:9/v1", api_key=None, model="m")
    try:
        assert isinstance(LLMSummarizer(client), Summarizer)
    finally:
        await client.aclose()


def test_an_object_without_summarize_is_not_a_summarizer() -> None:
    class NameOnly:
        name = "nothing"

    assert not isinstance(NameOnly(), Summarizer)


def test_protocol_and_summarizers_share_the_default_budget() -> None:
    methods = (Summarizer.summarize, ExtractiveSummarizer.summarize, LLMSummarizer.summarize)
    for summarize in methods:
        default = inspect.signature(summarize).parameters["max_chars"].default
        assert default == SUMMARY_MAX_CHARS
