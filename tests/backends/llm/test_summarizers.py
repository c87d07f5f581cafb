"""LLMSummarizer (over the fake LLM) and ExtractiveSummarizer: content, bounds, ownership."""

from __future__ import annotations

import pytest

from jarvismem.backends.llm.client import ChatCompletionsClient
from jarvismem.backends.llm.summarizers import ExtractiveSummarizer, LLMSummarizer
from jarvismem.backends.llm.truncation import TRUNCATION_MARKER
from jarvismem.errors import InvalidPayloadError
from jarvismem.testing.fake_llm import FakeLLMServer
from tests.backends.llm.conftest import MESSAGES, MakeClient

TEXT = "\n".join(
    [
        "[turn 1] deploy the billing service to staging",
        "[turn 2] the weather is nice",
        "[turn 3] billing service deploy failed: database migration error",
        "[turn 4] fixed billing database migration, redeployed billing service",
        "[turn 5] lunch",
    ]
)

# --- LLM summarizer ---------------------------------------------------------------------------


async def test_llm_summarizer_sends_previous_summary_and_new_text(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    await LLMSummarizer(client).summarize("new entry", previous_summary="old facts")
    [request] = fake_llm.completion_requests()
    user = request.json["messages"][-1]["content"]
    assert "old facts" in user
    assert "new entry" in user
    assert request.json["max_tokens"] >= 64


async def test_llm_summarizer_states_the_budget_in_the_system_prompt(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    await LLMSummarizer(client, temperature=0.0).summarize("x", max_chars=1234)
    [request] = fake_llm.completion_requests()
    assert "At most 1234 characters" in request.json["messages"][0]["content"]
    assert request.json["temperature"] == 0.0


async def test_llm_summarizer_is_named_after_the_model(client: ChatCompletionsClient) -> None:
    assert LLMSummarizer(client).name == "llm:m1"


async def test_llm_summarizer_refuses_an_empty_budget(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    with pytest.raises(InvalidPayloadError):
        await LLMSummarizer(client).summarize("x", max_chars=0)
    assert fake_llm.requests == []


async def test_huge_answer_is_truncated_by_the_summarizer(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.mode = "huge"
    summary = await LLMSummarizer(client).summarize("some text", max_chars=500)
    assert len(summary) == 500
    assert summary.endswith(TRUNCATION_MARKER)


async def test_summarizer_closes_only_a_client_it_owns(make_client: MakeClient) -> None:
    shared = make_client()
    await LLMSummarizer(shared).aclose()
    assert (await shared.complete(MESSAGES)).startswith("SUMMARY:")
    await LLMSummarizer(shared, owns_client=True).aclose()
    with pytest.raises(RuntimeError):  # httpx refuses a closed client
        await shared.complete(MESSAGES)


# --- extractive summarizer ------------------------------------------------------------------


async def test_extractive_is_deterministic() -> None:
    s = ExtractiveSummarizer()
    first = await s.summarize(TEXT, max_chars=150)
    assert first == await ExtractiveSummarizer().summarize(TEXT, max_chars=150)


async def test_extractive_prefers_informative_lines_and_keeps_order() -> None:
    # Room for two of the five lines: the two about the recurring subject win,
    # and they come out in input order.
    summary = await ExtractiveSummarizer().summarize(TEXT, max_chars=140)
    assert summary.splitlines() == [
        "[turn 3] billing service deploy failed: database migration error",
        "[turn 4] fixed billing database migration, redeployed billing service",
    ]


@pytest.mark.parametrize("max_chars", [1, 30, 100, 4000])
async def test_extractive_is_bounded(max_chars: int) -> None:
    summary = await ExtractiveSummarizer().summarize(
        TEXT * 50, previous_summary=TEXT, max_chars=max_chars
    )
    assert len(summary) <= max_chars


async def test_extractive_keeps_previous_summary_lines() -> None:
    previous = "goal: ship billing v2 by friday"
    summary = await ExtractiveSummarizer().summarize(TEXT, previous_summary=previous, max_chars=200)
    assert summary.splitlines()[0] == previous


async def test_extractive_cuts_a_single_line_longer_than_the_budget() -> None:
    line = "billing " * 100  # one unit, far over the budget
    summary = await ExtractiveSummarizer().summarize(line.strip(), max_chars=100)
    assert len(summary) == 100
    assert summary.endswith(TRUNCATION_MARKER)


async def test_extractive_refuses_an_empty_budget() -> None:
    with pytest.raises(InvalidPayloadError):
        await ExtractiveSummarizer().summarize(TEXT, max_chars=0)
