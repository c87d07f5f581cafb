"""create_summarizer(): the settings pick the summarizer."""

from __future__ import annotations

from jarvismem.backends.llm.factory import create_summarizer
from jarvismem.backends.llm.summarizers import ExtractiveSummarizer, LLMSummarizer
from jarvismem.settings import load_settings


async def test_no_base_url_gives_the_extractive_summarizer() -> None:
    plain = load_settings(_env_file=None, llm_base_url=None)
    assert isinstance(create_summarizer(plain), ExtractiveSummarizer)


async def test_a_base_url_gives_an_llm_summarizer_owning_its_client() -> None:
    with_llm = load_settings(_env_file=None, llm_base_url="http://127.0.0.1:9/v1", llm_model="tiny")
    summarizer = create_summarizer(with_llm)
    assert isinstance(summarizer, LLMSummarizer)
    try:
        assert summarizer.client.base_url == "http://127.0.0.1:9/v1"
        assert summarizer.name == "llm:tiny"
        assert summarizer.owns_client
    finally:
        await summarizer.aclose()
