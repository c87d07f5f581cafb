"""Nothing leaves the process unredacted: queries sent to Athena and to the embedder.

``log_turn(user_message=…)`` and ``capture`` redact a user's text before it is sent;
the same text as a query (``preflight``, ``recall``, the MCP tools ``search``,
``context`` and ``bundle``, the Athena recall store, a hybrid recall's query
embedding) must be redacted too. Each test runs the in-repo fake servers over real
HTTP on loopback and checks what they RECEIVED against every secret of
``tests/secret_corpus.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.embeddings.openai import EMBEDDINGS_HTTP, OpenAIEmbedder
from jarvismem.backends.outbox import Outbox
from jarvismem.recall import RecallRequest
from jarvismem.recall.athena_store import AthenaRecallStore
from jarvismem.runtime import MemoryRuntime
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.testing.fake_llm import FakeLLMServer
from jarvismem.tiers.athena import AthenaMemory
from tests.conftest import REAL_REDIS_URL, Factory
from tests.secret_corpus import SECRETS

TEXTS = [text for _, text, _ in SECRETS]
SECRET_VALUES = [secret for _, _, secret in SECRETS]


def _received(server: Any) -> str:
    """Everything a fake server was sent: paths, query strings and JSON bodies."""
    return "\n".join(
        f"{r.method} {r.path} {json.dumps(r.query)} {json.dumps(r.json)}" for r in server.requests
    )


def _leaks(text: str) -> list[str]:
    return sorted({s for s in SECRET_VALUES if s in text})


async def test_athena_receives_no_secret_from_a_query(
    real_redis: Any, make_athena_client: Factory, make_runtime: Factory
) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from jarvismem.integrations.mcp import McpScope, build_server

    with FakeAthenaServer() as athena:
        client = make_athena_client(athena.url, timeout=5.0)
        rt: MemoryRuntime = make_runtime(redis=real_redis, athena=client)
        view = rt.memory("wf-q", "s1", "a1")
        await view.log_turn(1, "t", "a", "r", user_message="hello there")
        memory = await rt.athena_memory("a1")
        assert memory is not None
        await memory.flush(timeout=5.0)
        athena.clear_requests()
        for text in TEXTS:
            await view.preflight("You are helpful.", text)
            await view.recall(text)
        async with Client(build_server(rt, McpScope("wf-q", "a1"))) as mcp:
            for text in TEXTS:
                await mcp.call_tool("search", {"query": text})
                await mcp.call_tool("context", {"query": text})
                await mcp.call_tool("bundle", {"query": text})
        received = _received(athena)
    assert athena.requests_to("GET", "/context"), "the queries went over HTTP"
    assert athena.requests_to("POST", "/context/search")
    assert _leaks(received) == []


async def test_the_athena_recall_store_sends_no_secret(tmp_path: Path) -> None:
    with FakeAthenaServer() as athena:
        async with AthenaClient(athena.url, timeout=5.0, max_retries=0) as client:
            memory = await AthenaMemory.create("a1", client, outbox=Outbox(tmp_path / "out.jsonl"))
            try:
                store = AthenaRecallStore(memory)
                await memory.record_observation("a first fact")
                await memory.flush(timeout=5.0)
                athena.clear_requests()
                for text in TEXTS:
                    await store.recall(RecallRequest(agent_id="a1", query=text))
            finally:
                await memory.close()
        received = _received(athena)
    assert athena.requests_to("POST", "/context/search")
    assert _leaks(received) == []


async def test_the_embedder_receives_no_secret_from_a_query(settings: Any) -> None:
    with FakeLLMServer() as llm:
        s = settings.model_copy(
            update={
                "redis_url": REAL_REDIS_URL,
                "recall_embedder": "openai",
                "embeddings_base_url": llm.url,
            }
        )
        rt = await MemoryRuntime.from_env(s, require_redis=True)
        try:
            view = rt.memory("wf-e", "s1", "a1")
            await view.remember("the build runs on Python 3.11")
            for text in TEXTS:
                await view.recall(text)
                await view.preflight("You are helpful.", text)
        finally:
            await rt.close()
        received = _received(llm)
    assert llm.embedding_requests(), "the queries were embedded over HTTP"
    assert _leaks(received) == []


async def test_an_embedder_made_directly_redacts_its_request_body() -> None:
    with FakeLLMServer() as llm:
        embedder = OpenAIEmbedder(
            llm.url, api_key=None, policy=replace(EMBEDDINGS_HTTP, timeout=5.0)
        )
        try:
            vectors = await embedder.embed(TEXTS)
        finally:
            await embedder.aclose()
        sent = [text for r in llm.embedding_requests() for text in r.json["input"]]
        received = _received(llm)
    assert len(vectors) == len(sent) == len(TEXTS)
    assert _leaks(received) == []


async def test_clients_from_settings_follow_redaction_enabled() -> None:
    from jarvismem.settings import Settings

    query = TEXTS[0]
    with FakeAthenaServer() as athena, FakeLLMServer() as llm:
        for enabled in (True, False):
            s = Settings(
                _env_file=None,  # type: ignore[call-arg]
                athena_url=athena.url,
                recall_embedder="openai",
                embeddings_base_url=llm.url,
                redaction_enabled=enabled,
            )
            async with AthenaClient.from_settings(s) as client:
                session = await client.create_session("t", "u", "a1")
                await client.get_context(session, query=query)
            embedder = OpenAIEmbedder.from_settings(s)
            try:
                await embedder.embed([query])
            finally:
                await embedder.aclose()
        athena_sent = [r.query["query"] for r in athena.requests_to("GET", "/context")]
        embedded = [r.json["input"][0] for r in llm.embedding_requests()]
    assert athena_sent[1] == embedded[1] == query
    assert athena_sent[0] == embedded[0] != query and _leaks(athena_sent[0]) == []
