"""LLMSummarizer (over the fake LLM) and ExtractiveSummarizer: content, bounds, ownership."""

from __future__ import annotations

import asyncio
import itertools
import re
from unittest.mock import AsyncMock, MagicMock

import pytest

from jarvismem.backends.llm import extractive
from jarvismem.backends.llm.client import ChatCompletionsClient
from jarvismem.backends.llm.summarizers import (
    ExtractiveSummarizer,
    GenerateSummarizer,
    LLMSummarizer,
    as_summarizer,
)
from jarvismem.backends.llm.truncation import TRUNCATION_MARKER
from jarvismem.errors import InvalidPayloadError, LLMError
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
    # Room for three of the five lines and the marker of what was left out: the
    # two about the recurring subject win, then the short newest one, in input order.
    summary = await ExtractiveSummarizer().summarize(TEXT, max_chars=190)
    assert summary.splitlines() == [
        "[turns 1\u20132 omitted: 2 turns]",
        "[turn 3] billing service deploy failed: database migration error",
        "[turn 4] fixed billing database migration, redeployed billing service",
        "[turn 5] lunch",
    ]


def _accounted(summary: str) -> tuple[list[int], int]:
    """Turn ids kept in ``summary`` and the number its markers say were omitted."""
    kept = [int(t) for t in re.findall(r"^\[turn (\d+)\] ", summary, flags=re.M)]
    omitted = sum(int(n) for n in re.findall(r" omitted: (\d+) turns?\]", summary))
    return kept, omitted


async def test_extractive_marks_every_gap_and_the_counts_add_up_over_a_rolling_summary() -> None:
    # Seen by a user: 154 turns summarized, the text held 58-103 and 113-154 and said
    # nothing of the rest. Now every turn is either there or counted in a marker.
    words = "alpha beta gamma delta billing deploy staging database cache queue".split()
    summarizer, summary = ExtractiveSummarizer(), None
    for page in range(0, 154, 20):
        lines = [
            f"[turn {t}] " + " ".join(words[(t * k) % len(words)] for k in range(1, 8))
            for t in range(page + 1, min(page + 21, 155))
        ]
        summary = await summarizer.summarize(
            "\n".join(lines), previous_summary=summary, max_chars=1200
        )
        kept, omitted = _accounted(summary)
        assert len(kept) + omitted == min(page + 20, 154)
    assert summary is not None and len(summary) <= 1200
    kept, omitted = _accounted(summary)
    assert omitted and kept == sorted(kept)
    lines = summary.splitlines()
    for before, after in itertools.pairwise(lines):
        # Two markers never follow each other: adjacent gaps are merged.
        assert not (" omitted" in before and " omitted" in after)


async def test_extractive_marks_left_out_lines_that_are_not_turns() -> None:
    text = "\n".join(
        ["billing deploy failed", "weather", "billing deploy fixed", "lunch", "coffee"]
    )
    summary = await ExtractiveSummarizer().summarize(text, max_chars=60)
    assert summary.splitlines() == [
        "[2 lines omitted]",
        "billing deploy fixed",
        "[2 lines omitted]",
    ]


async def test_extractive_without_a_gap_adds_no_marker() -> None:
    assert await ExtractiveSummarizer().summarize(TEXT, max_chars=4000) == TEXT


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


# --- JarvisCore's generate() client shape -----------------------------------------------


class Generate:
    """A client of JarvisCore's shape; ``answer`` is what generate() returns or raises."""

    def __init__(self, answer: object = None, model: str | None = None) -> None:
        self.answer = answer if answer is not None else {"content": " the summary \n"}
        self.calls: list[dict[str, object]] = []
        if model is not None:
            self.model = model

    async def generate(self, *, prompt: str, temperature: float, max_tokens: int) -> object:
        self.calls.append({"prompt": prompt, "temperature": temperature, "max_tokens": max_tokens})
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


async def test_generate_summarizer_sends_one_prompt_with_the_summary_and_the_entries() -> None:
    client = Generate({"content": " the summary \n", "tokens": {"total": 42}})
    summarizer = GenerateSummarizer(client)
    out = await summarizer.summarize("[turn 1] new", previous_summary="old", max_chars=900)
    assert out == "the summary"
    [call] = client.calls
    assert "At most 900 characters" in str(call["prompt"])
    assert "Current summary:\nold" in str(call["prompt"]) and "[turn 1] new" in str(call["prompt"])
    assert call["temperature"] == 0.3 and call["max_tokens"] == 300
    assert summarizer.tokens_used == 42
    assert summarizer.name == "generate:Generate"
    assert GenerateSummarizer(Generate(model="gpt-x")).name == "generate:gpt-x"


async def test_generate_summarizer_caps_max_tokens_and_the_answer() -> None:
    client = Generate({"content": "z" * 500})
    summarizer = GenerateSummarizer(client, max_tokens=50)
    out = await summarizer.summarize("text", max_chars=100)
    assert len(out) <= 100 and out.endswith(TRUNCATION_MARKER)
    assert client.calls[0]["max_tokens"] == 50


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (RuntimeError("rate limited"), "generate\\(\\) failed: RuntimeError: rate limited"),
        ({"text": "no content key"}, "'content' string, got dict with keys \\['text'\\]"),
        ("just a string", "got str"),
        ({"content": None}, "'content' string"),
    ],
    ids=["raises", "no-content", "not-a-dict", "content-none"],
)
async def test_a_failing_or_malformed_generate_is_an_llm_error(answer: object, match: str) -> None:
    with pytest.raises(LLMError, match=match):
        await GenerateSummarizer(Generate(answer)).summarize("text")


async def test_a_synchronous_generate_is_accepted_too() -> None:
    class Sync:
        def generate(self, **kwargs: object) -> dict[str, str]:
            return {"content": "sync"}

    assert await GenerateSummarizer(Sync()).summarize("text") == "sync"


def test_as_summarizer_tells_the_shapes_apart() -> None:
    extractive = ExtractiveSummarizer()
    assert as_summarizer(extractive) is extractive
    wrapped = as_summarizer(Generate(), max_tokens=7)
    assert isinstance(wrapped, GenerateSummarizer) and wrapped.max_tokens == 7
    with pytest.raises(InvalidPayloadError, match=r"summarize.*generate.*got int"):
        as_summarizer(42)
    with pytest.raises(InvalidPayloadError, match="max_tokens"):
        GenerateSummarizer(Generate(), max_tokens=0)


def test_as_summarizer_recognises_a_generate_client_first() -> None:
    # A test double (MagicMock) answers every attribute, summarize() included; the
    # reference only ever calls generate(), so a client with generate() is its client.
    mock = MagicMock()
    mock.generate = AsyncMock(return_value={"content": "x"})
    assert isinstance(as_summarizer(mock), GenerateSummarizer)

    class Both:
        name = "both"

        async def summarize(self, text: str, **kwargs: object) -> str:
            return "from summarize"

        async def generate(self, **kwargs: object) -> dict[str, str]:
            return {"content": "from generate"}

    assert isinstance(as_summarizer(Both()), GenerateSummarizer)


async def test_a_magicmock_with_an_async_generate_summarizes_through_generate() -> None:
    mock = MagicMock()
    mock.generate = AsyncMock(return_value={"content": "Summary text.", "tokens": {"total": 50}})
    summarizer = as_summarizer(mock)
    assert await summarizer.summarize("[turn 1] analysing") == "Summary text."
    mock.generate.assert_awaited_once()
    assert mock.generate.call_args.kwargs["temperature"] == 0.3


# --- the event loop keeps running ------------------------------------------------------------


async def _ticking(task_done: asyncio.Event, ticks: list[int]) -> None:
    while not task_done.is_set():
        ticks[0] += 1
        await asyncio.sleep(0)


async def test_extractive_yields_to_the_event_loop_while_it_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A slice of zero: yield at every step, so the count below depends on the
    # work's structure, never on the machine's speed.
    monkeypatch.setattr(extractive, "SLICE_SECONDS", 0.0)
    lines = [f"[turn {i}] billing deploy {i % 7} staging database {i % 5}" for i in range(400)]
    text = "\n".join(lines)
    done, ticks = asyncio.Event(), [0]
    ticker = asyncio.create_task(_ticking(done, ticks))
    summary = await ExtractiveSummarizer().summarize(text, max_chars=2000)
    done.set()
    await ticker
    # Another task ran between the steps of one summary (it runs on the loop,
    # in slices): hundreds of times for 400 lines.
    assert ticks[0] >= 100
    # And slicing changed nothing in the result.
    assert summary == ExtractiveSummarizer().summarize_now(text, max_chars=2000)


async def test_summarize_now_is_the_same_summary() -> None:
    summary = ExtractiveSummarizer().summarize_now(TEXT, previous_summary="goal: x", max_chars=190)
    assert summary == await ExtractiveSummarizer().summarize(
        TEXT, previous_summary="goal: x", max_chars=190
    )
    with pytest.raises(InvalidPayloadError):
        ExtractiveSummarizer().summarize_now(TEXT, max_chars=0)
