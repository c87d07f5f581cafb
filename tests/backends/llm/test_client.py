"""ChatCompletionsClient against the fake LLM over real HTTP: wire format, retries, limits."""

from __future__ import annotations

import asyncio
import email.utils
import inspect
import logging
import time
from typing import Any

import httpx
import pytest

from jarvismem import defaults
from jarvismem.backends.llm.client import ChatCompletionsClient, HttpPolicy, _parse_retry_after
from jarvismem.errors import ConfigError, InvalidPayloadError, LLMError
from jarvismem.settings import load_settings
from jarvismem.testing.fake_llm import FakeLLMServer
from tests.backends.llm.conftest import API_KEY, MESSAGES, MakeClient, record_sleeps

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


async def test_no_authorization_header_without_key(
    make_client: MakeClient, fake_llm: FakeLLMServer
) -> None:
    async with make_client(api_key=None) as c:
        await c.complete(MESSAGES)
    assert "authorization" not in fake_llm.completion_requests()[0].headers


async def test_bad_messages_rejected_before_sending(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    with pytest.raises(InvalidPayloadError):
        await client.complete([{"role": "user"}])  # type: ignore[list-item]
    assert fake_llm.requests == []


async def test_max_tokens_below_one_rejected_before_sending(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer
) -> None:
    with pytest.raises(InvalidPayloadError):
        await client.complete(MESSAGES, max_tokens=0)
    assert fake_llm.requests == []


def test_non_http_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        ChatCompletionsClient("ftp://x/v1", api_key=None, model="m")


@pytest.mark.parametrize(
    ("model", "policy"), [("", {}), ("m", {"timeout": 0}), ("m", {"max_retries": -1})]
)
def test_bad_options_are_config_errors(model: str, policy: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ChatCompletionsClient("http://x/v1", api_key=None, model=model, policy=HttpPolicy(**policy))


async def test_redirect_is_not_followed_and_key_not_forwarded() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(307, headers={"Location": "http://elsewhere.test/v1/steal"})

    c = ChatCompletionsClient(
        "http://llm.test/v1",
        api_key=API_KEY,
        model="m",
        policy=HttpPolicy(max_retries=0),
        transport=httpx.MockTransport(handler),
    )
    with pytest.raises(LLMError) as info:
        await c.complete(MESSAGES)
    await c.aclose()
    assert [r.url.host for r in seen] == ["llm.test"]
    assert API_KEY not in str(info.value)


# --- defaults and settings ------------------------------------------------------------------


def test_parameter_defaults_come_from_jarvismem_defaults() -> None:
    policy = inspect.signature(ChatCompletionsClient).parameters["policy"].default
    assert policy.timeout == defaults.LLM_TIMEOUT
    assert policy.max_retries == defaults.LLM_MAX_RETRIES
    assert policy.backoff_base == defaults.LLM_BACKOFF_BASE
    assert policy.backoff_cap == defaults.LLM_BACKOFF_CAP
    assert policy.retry_after_cap == defaults.RETRY_AFTER_CAP
    assert policy.max_response_bytes == defaults.LLM_MAX_RESPONSE_BYTES


async def test_from_settings_passes_the_llm_settings() -> None:
    settings = load_settings(
        _env_file=None,
        llm_base_url="http://127.0.0.1:9/v1",
        llm_api_key=API_KEY,
        llm_model="tiny",
        llm_timeout=7.5,
        llm_max_retries=1,
    )
    async with ChatCompletionsClient.from_settings(settings) as c:
        assert (c.base_url, c.model, c.timeout, c.max_retries) == (
            "http://127.0.0.1:9/v1",
            "tiny",
            7.5,
            1,
        )
        assert c._headers()["Authorization"] == f"Bearer {API_KEY}"


def test_from_settings_without_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="LLM_BASE_URL"):
        ChatCompletionsClient.from_settings(load_settings(_env_file=None, llm_base_url=None))


# --- retries -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_retries_transient_status_then_succeeds(
    client: ChatCompletionsClient, fake_llm: FakeLLMServer, status: int
) -> None:
    fake_llm.fail_next(2, status=status)
    assert (await client.complete(MESSAGES)).startswith("SUMMARY:")
    assert len(fake_llm.completion_requests()) == 3


async def test_retry_after_is_honoured(make_client: MakeClient, fake_llm: FakeLLMServer) -> None:
    fake_llm.fail_next(1, status=429, retry_after=7)
    c = make_client()
    delays = record_sleeps(c)
    await c.complete(MESSAGES)
    assert delays == [7.0]


async def test_retry_after_is_capped(make_client: MakeClient, fake_llm: FakeLLMServer) -> None:
    fake_llm.fail_next(1, status=503, retry_after=3600)
    c = make_client(retry_after_cap=30.0)
    delays = record_sleeps(c)
    assert (await c.complete(MESSAGES)).startswith("SUMMARY:")
    assert delays == [30.0]


async def test_backoff_grows_exponentially_without_retry_after(
    make_client: MakeClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.fail_next(3, status=500)
    c = make_client(max_retries=3, backoff_base=1.0, backoff_cap=100.0)
    delays = record_sleeps(c)
    await c.complete(MESSAGES)
    # Jitter draws each delay from [ceiling/2, ceiling] with ceiling = base * 2**attempt.
    assert [0.5 <= delays[0] <= 1, 1 <= delays[1] <= 2, 2 <= delays[2] <= 4] == [True] * 3


async def test_backoff_never_passes_its_cap(
    make_client: MakeClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.fail_next(4, status=502)
    c = make_client(max_retries=4, backoff_base=1.0, backoff_cap=1.5)
    delays = record_sleeps(c)
    await c.complete(MESSAGES)
    assert len(delays) == 4
    assert all(d <= 1.5 for d in delays)
    assert all(d >= 0.75 for d in delays[1:])  # capped ceiling, still equal jitter


async def test_each_retry_is_logged_with_the_reason_and_retries_left(
    make_client: MakeClient, fake_llm: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.fail_next(2, status=503)
    c = make_client(max_retries=2)
    record_sleeps(c)
    with caplog.at_level(logging.WARNING, logger="jarvismem.backends.llm"):
        await c.complete(MESSAGES)
    lines = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(lines) == 2
    assert "HTTP 503" in lines[0] and "(2 retries left)" in lines[0]
    assert "(1 retries left)" in lines[1]
    assert all(API_KEY not in line for line in lines)


async def test_gives_up_after_max_retries_with_llm_error(
    make_client: MakeClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.mode = "error"
    c = make_client(max_retries=2)
    delays = record_sleeps(c)
    with pytest.raises(LLMError, match=r"failed after 3 attempt.*HTTP 500"):
        await c.complete(MESSAGES)
    assert len(fake_llm.completion_requests()) == 3
    assert len(delays) == 2  # no wait after the last attempt


async def test_client_error_status_is_not_retried(
    make_client: MakeClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.fail_next(1, status=401)
    c = make_client()
    delays = record_sleeps(c)
    with pytest.raises(LLMError, match="refused the request: HTTP 401"):
        await c.complete(MESSAGES)
    assert len(fake_llm.completion_requests()) == 1
    assert delays == []


async def test_error_message_never_contains_the_key(
    make_client: MakeClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.mode = "error"
    with pytest.raises(LLMError) as info:
        await make_client(max_retries=0).complete(MESSAGES)
    assert API_KEY not in str(info.value)


async def test_connection_refused_is_llm_error() -> None:
    server = FakeLLMServer()
    url = server.url
    server.stop()  # the port is now closed
    async with ChatCompletionsClient(
        url, api_key=None, model="m", policy=HttpPolicy(max_retries=1, backoff_base=0.01)
    ) as c:
        with pytest.raises(LLMError, match="connection failed"):
            await c.complete(MESSAGES)


def test_retry_after_header_forms() -> None:
    assert _parse_retry_after(None) is None
    assert _parse_retry_after("") is None
    assert _parse_retry_after(" 12 ") == 12.0
    assert _parse_retry_after("-5") == 0.0
    assert _parse_retry_after("soon") is None
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 <= (_parse_retry_after(in_a_minute) or 0) <= 60
    assert _parse_retry_after(email.utils.formatdate(time.time() - 60, usegmt=True)) == 0.0


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


async def test_body_over_the_byte_limit_is_refused(
    make_client: MakeClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.mode = "huge"
    with pytest.raises(LLMError, match="limit"):
        await make_client(max_response_bytes=10_000).complete(MESSAGES)


async def test_hang_gives_llm_error_within_the_timeout(
    make_client: MakeClient, fake_llm: FakeLLMServer
) -> None:
    fake_llm.mode = "hang"
    c = make_client(timeout=0.3, max_retries=0)
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
