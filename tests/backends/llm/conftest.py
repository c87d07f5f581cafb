"""Fixtures of the LLM tests: the fake LLM over real HTTP and clients pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from jarvismem.backends.llm.client import ChatCompletionsClient, HttpPolicy
from jarvismem.testing.fake_llm import FakeLLMServer

API_KEY = "sk-test-abcdefghijklmnopqrstuvwxyz"
MESSAGES = [{"role": "user", "content": "line one\nline two"}]

MakeClient = Callable[..., ChatCompletionsClient]


@pytest.fixture
async def make_client(fake_llm: FakeLLMServer) -> AsyncIterator[MakeClient]:
    """Build clients of the fake LLM (fast retries); every one is closed after the test."""
    made: list[ChatCompletionsClient] = []

    def make(**kwargs: object) -> ChatCompletionsClient:
        """Keyword arguments name client options or :class:`HttpPolicy` fields."""
        policy: dict[str, Any] = {
            "timeout": 5.0,
            "max_retries": 2,
            "backoff_base": 0.01,
            "backoff_cap": 0.02,
        }
        options: dict[str, Any] = {"api_key": API_KEY, "model": "m1"}
        for name, value in kwargs.items():
            (policy if name in HttpPolicy.__dataclass_fields__ else options)[name] = value
        made.append(ChatCompletionsClient(fake_llm.url, policy=HttpPolicy(**policy), **options))
        return made[-1]

    yield make
    for client in made:
        await client.aclose()


@pytest.fixture
def client(make_client: MakeClient) -> ChatCompletionsClient:
    """A client of the fake LLM with the default test options."""
    return make_client()


def record_sleeps(client: ChatCompletionsClient) -> list[float]:
    """Replace the client's backoff sleep; the returned list fills with the delays."""
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)

    client._sleep = fake_sleep
    return delays
