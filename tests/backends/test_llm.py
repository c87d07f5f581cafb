"""The chat-completions client against the fake LLM over real HTTP, and the summarizers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from jarvismem.backends.llm import (
    TRUNCATION_MARKER,
    ChatCompletionsClient,
    ExtractiveSummarizer,
    LLMSummarizer,
    create_summarizer,
    truncate,
)
from jarvismem.errors import ConfigError, InvalidPayloadError, LLMError
from jarvismem.settings import load_settings
from jarvismem.testing.fake_llm import FakeLLMServer

API_KEY = "sk-test-abcdefghijklmnopqrstuvwxyz"
MESSAGES = [{"role": "user", "content": "line one\nline two"}]


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def make_client(server: FakeLLMServer, **kwargs: object) -> ChatCompletionsClient:
    options: dict[str, object] = {
        "api_key": API_KEY,
        "model": "m1",
        "timeout": 5.0,
        "max_retries": 2,
        "backoff_base": 0.01,
        "backoff_cap": 0.02,
    }
    options.update(kwargs)
    return ChatCompletionsClient(server.url, **options)  # type: ignore[arg-type]


@pytest.fixture
async def client(fake_llm: FakeLLMServer) -> AsyncIterator[ChatCompletionsClient]:
    c = make_client(fake_llm)
    yield c
    await c.aclose()


# --- request shape ---------------------------------------------------------------------


async def test_complete_posts_model_messages_and_temperature(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    await client.complete(MESSAGES, max_tokens=50, temperature=0.3)
    [request] = fake_llm.completion_requests()
    assert request.method == "POST"
    assert request.path == "/v1/chat/completions"
    assert request.json == {
        "model": "m1",
        "messages": MESSAGES,
        "temperature": 0.3,
        "max_tokens": 50,
    }


async def test_complete_omits_max_tokens_when_not_given(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    await client.complete(MESSAGES)
    assert "max_tokens" not in fake_llm.completion_requests()[0].json


async def test_complete_returns_the_answer_content(client: ChatCompletionsClient) -> None:
    assert await client.complete(MESSAGES) == "SUMMARY: line one | line two"


async def test_bearer_header_sent_when_key_set(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    await client.complete(MESSAGES)
    assert fake_llm.completion_requests()[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_no_authorization_header_without_key(fake_llm: FakeLLMServer) -> None:
    async with make_client(fake_llm, api_key=None) as c:
        await c.complete(MESSAGES)
    assert "authorization" not in fake_llm.completion_requests()[0].headers


async def test_bad_messages_rejected_before_sending(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    with pytest.raises(InvalidPayloadError):
        await client.complete([{"role": "user"}])  # type: ignore[list-item]
    assert fake_llm.requests == []


def test_non_http_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        ChatCompletionsClient("ftp://x/v1", api_key=None, model="m")


async def test_redirect_is_not_followed_and_key_not_forwarded() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(307, headers={"Location": "http://elsewhere.test/v1/steal"})

    c = ChatCompletionsClient(
        "http://llm.test/v1",
        api_key=API_KEY,
        model="m",
        max_retries=0,
        transport=httpx.MockTransport(handler),
    )
    with pytest.raises(LLMError) as info:
        await c.complete(MESSAGES)
    await c.aclose()
    assert [r.url.host for r in seen] == ["llm.test"]
    assert API_KEY not in str(info.value)


# --- retries -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_retries_transient_status_then_succeeds(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer, status: int
) -> None:
    fake_llm.fail_next(2, status=status)
    assert (await client.complete(MESSAGES)).startswith("SUMMARY:")
    assert len(fake_llm.completion_requests()) == 3


def record_sleeps(c: ChatCompletionsClient) -> list[float]:
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)

    c._sleep = fake_sleep
    return delays


async def test_retry_after_is_honoured(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail_next(1, status=429, retry_after=7)
    async with make_client(fake_llm) as c:
        delays = record_sleeps(c)
        await c.complete(MESSAGES)
    assert delays == [7.0]


async def test_retry_after_is_capped(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail_next(1, status=503, retry_after=3600)
    async with make_client(fake_llm, retry_after_cap=30.0) as c:
        delays = record_sleeps(c)
        assert (await c.complete(MESSAGES)).startswith("SUMMARY:")
    assert delays == [30.0]


async def test_backoff_grows_exponentially_without_retry_after(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail_next(3, status=500)
    async with make_client(fake_llm, max_retries=3, backoff_base=1.0, backoff_cap=100.0) as c:
        delays = record_sleeps(c)
        await c.complete(MESSAGES)
    # Jitter draws each delay from [ceiling/2, ceiling] with ceiling = base * 2**attempt.
    assert [0.5 <= delays[0] <= 1, 1 <= delays[1] <= 2, 2 <= delays[2] <= 4] == [True] * 3


async def test_gives_up_after_max_retries_with_llm_error(fake_llm: FakeLLMServer) -> None:
    fake_llm.mode = "error"
    async with make_client(fake_llm, max_retries=2) as c:
        with pytest.raises(LLMError, match="3 attempt"):
            await c.complete(MESSAGES)
    assert len(fake_llm.completion_requests()) == 3


async def test_client_error_status_is_not_retried(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail_next(1, status=401)
    async with make_client(fake_llm) as c:
        with pytest.raises(LLMError, match="401"):
            await c.complete(MESSAGES)
    assert len(fake_llm.completion_requests()) == 1


async def test_error_message_never_contains_the_key(fake_llm: FakeLLMServer) -> None:
    fake_llm.mode = "error"
    async with make_client(fake_llm, max_retries=0) as c:
        with pytest.raises(LLMError) as info:
            await c.complete(MESSAGES)
    assert API_KEY not in str(info.value)


async def test_connection_refused_is_llm_error() -> None:
    server = FakeLLMServer()
    url = server.url
    server.stop()  # the port is now closed
    async with ChatCompletionsClient(
        url, api_key=None, model="m", max_retries=1, backoff_base=0.01
    ) as c:
        with pytest.raises(LLMError, match="connection failed"):
            await c.complete(MESSAGES)


# --- unusable answers ----------------------------------------------------------------------


async def test_empty_answer_is_llm_error(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.mode = "empty"
    with pytest.raises(LLMError, match="empty"):
        await client.complete(MESSAGES)


async def test_garbage_body_is_llm_error(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.mode = "garbage"
    with pytest.raises(LLMError, match="malformed"):
        await client.complete(MESSAGES)


async def test_body_over_the_byte_limit_is_refused(fake_llm: FakeLLMServer) -> None:
    fake_llm.mode = "huge"
    async with make_client(fake_llm, max_response_bytes=10_000) as c:
        with pytest.raises(LLMError, match="limit"):
            await c.complete(MESSAGES)


async def test_huge_answer_is_truncated_by_the_summarizer(fake_llm: FakeLLMServer) -> None:
    fake_llm.mode = "huge"
    async with make_client(fake_llm) as c:
        summary = await LLMSummarizer(c).summarize("some text", max_chars=500)
    assert len(summary) == 500
    assert summary.endswith(TRUNCATION_MARKER)


async def test_hang_gives_llm_error_within_the_timeout(fake_llm: FakeLLMServer) -> None:
    fake_llm.mode = "hang"
    async with make_client(fake_llm, timeout=0.3, max_retries=0) as c:
        with pytest.raises(LLMError, match="timed out"):
            # If the client ignored its own timeout, wait_for would raise TimeoutError
            # instead and the test would fail (and not hang).
            await asyncio.wait_for(c.complete(MESSAGES), timeout=10)


# --- ping ------------------------------------------------------------------------------------


async def test_ping_returns_round_trip_seconds(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    elapsed = await client.ping()
    assert elapsed > 0
    assert fake_llm.requests[-1].path == "/v1/models"


async def test_ping_of_unreachable_server_is_llm_error() -> None:
    server = FakeLLMServer()
    url = server.url
    server.stop()
    async with ChatCompletionsClient(url, api_key=None, model="m") as c:
        with pytest.raises(LLMError):
            await c.ping()


# --- summarizers ---------------------------------------------------------------------------------


async def test_llm_summarizer_sends_previous_summary_and_new_text(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    await LLMSummarizer(client).summarize("new entry", previous_summary="old facts")
    [request] = fake_llm.completion_requests()
    user = request.json["messages"][-1]["content"]
    assert "old facts" in user
    assert "new entry" in user
    assert request.json["max_tokens"] >= 64


TEXT = "\n".join(
    [
        "[turn 1] deploy the billing service to staging",
        "[turn 2] the weather is nice",
        "[turn 3] billing service deploy failed: database migration error",
        "[turn 4] fixed billing database migration, redeployed billing service",
        "[turn 5] lunch",
    ]
)


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


def test_truncate_marks_the_cut() -> None:
    assert truncate("abc", 10) == "abc"
    cut = truncate("a" * 100, 40)
    assert len(cut) == 40
    assert cut.endswith(TRUNCATION_MARKER)


def test_create_summarizer_picks_by_settings() -> None:
    plain = load_settings(_env_file=None, llm_base_url=None)
    assert isinstance(create_summarizer(plain), ExtractiveSummarizer)
    with_llm = load_settings(_env_file=None, llm_base_url="http://127.0.0.1:9/v1")
    summarizer = create_summarizer(with_llm)
    assert isinstance(summarizer, LLMSummarizer)
    assert summarizer.client.base_url == "http://127.0.0.1:9/v1"
    assert summarizer.owns_client
    asyncio.run(summarizer.aclose())


async def test_summarizer_closes_only_a_client_it_owns(fake_llm: FakeLLMServer) -> None:
    shared = make_client(fake_llm)
    await LLMSummarizer(shared).aclose()
    assert (await shared.complete(MESSAGES)).startswith("SUMMARY:")
    await LLMSummarizer(shared, owns_client=True).aclose()
    with pytest.raises(RuntimeError):  # httpx refuses a closed client
        await shared.complete(MESSAGES)
