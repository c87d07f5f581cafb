"""Helpers shared by the long-term memory and compaction tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jarvismem.backends.llm import ChatCompletionsClient, LLMSummarizer
from jarvismem.backends.llm.client import HttpPolicy
from jarvismem.errors import LLMError
from jarvismem.keys import KeySpace
from jarvismem.testing.fake_llm import FakeLLMServer
from jarvismem.tiers.longterm import LongTermMemory

TTL = 3600


class RecordingSummarizer:
    """Test summarizer: summary = previous + new text, so coverage is checkable.

    ``gate``: when set, each call waits for it (to hold a compaction in flight);
    ``fail``: raise LLMError instead of answering.
    """

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.started = asyncio.Event()
        self.gate: asyncio.Event | None = None
        self.fail = False

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = 4000
    ) -> str:
        self.calls.append((text, previous_summary))
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise LLMError("summarizer down")
        return "\n".join(p for p in (previous_summary, text) if p)[:max_chars]


def make_ltm(redis: Any, blob: Any, keyspace: KeySpace, wf: str, **kw: Any) -> LongTermMemory:
    return LongTermMemory(redis, blob, keyspace, wf, ttl_seconds=TTL, **kw)


@pytest.fixture
async def llm_summarizer(fake_llm: FakeLLMServer) -> AsyncIterator[LLMSummarizer]:
    client = ChatCompletionsClient(
        fake_llm.url, api_key=None, model="m", policy=HttpPolicy(max_retries=0)
    )
    yield LLMSummarizer(client)
    await client.aclose()
