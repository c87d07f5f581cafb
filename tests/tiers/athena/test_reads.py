"""Athena reads: context and search, straight to the server, empty (not failing) on outages."""

from __future__ import annotations

from typing import Any

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.errors import AthenaBadRequestError, AthenaServerError
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena import AthenaMemory
from tests.tiers.athena.conftest import TENANT, USER, MakeMemory


async def test_get_memory_context_returns_seeded_mid_term_chains(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    chain_id = server.add_chain(TENANT, USER, "budget", "Q3 budget approved at 40k")
    mem = await make_memory(redis_client)
    await mem.record_observation("budget noted")
    await mem.flush()
    ctx = await mem.get_memory_context(limit=5)
    assert ctx is not None
    assert ctx["session_id"] == mem.session_id
    assert [c["id"] for c in ctx["mid_term"]] == [chain_id]
    assert ctx["mid_term"][0]["summary"] == "Q3 budget approved at 40k"
    assert [e["content"] for e in ctx["short_term"]] == ["budget noted"]


async def test_get_memory_context_is_none_when_server_down(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    server.mode = "error500"
    assert await mem.get_memory_context() is None
    assert "AthenaServerError" in (mem.health()["last_error"] or "")


async def test_strict_context_read_raises_the_outage(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    server.mode = "error500"
    with pytest.raises(AthenaServerError):
        await mem.get_memory_context(strict=True)


async def test_unsupported_reads_are_empty_and_noted(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    server.fail_next(1, status=501)
    assert await mem.get_memory_context(strict=True) is None  # 501 is not an outage
    server.fail_next(1, status=501)
    assert await mem.search("anything") == []
    assert mem.health()["unsupported"] == ["context", "search"]
    assert mem.health()["last_error"] is None


async def test_search_returns_distance_and_similarity(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    server.add_chain(TENANT, USER, "budget", "Q3 budget approved")
    mem = await make_memory(redis_client)
    [hit] = await mem.search("budget")
    assert hit["source_type"] == "cognitive_chain"
    assert hit["similarity"] == pytest.approx(1 / (1 + hit["distance"]))


async def test_search_in_a_forgotten_session_renews_it_once(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    server.add_chain(TENANT, USER, "budget", "Q3 budget approved")
    mem = await make_memory(redis_client)
    old = mem.session_id
    server.forget_session(old)
    assert len(await mem.search("budget")) == 1
    assert mem.session_id != old
    assert server.sessions_created == 2


async def test_refused_search_is_raised_and_outage_is_empty(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    server.fail_next(1, status=400)
    with pytest.raises(AthenaBadRequestError):
        await mem.search("bad query")
    server.mode = "error500"
    assert await mem.search("budget") == []
    assert "AthenaServerError" in (mem.health()["last_error"] or "")


async def test_reads_of_an_agent_without_a_session_are_empty_and_create_none(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any, keyspace: Any
) -> None:
    async with AthenaClient(server.url, timeout=2.0) as client:
        mem = AthenaMemory("nobody", client, redis_client, keyspace=keyspace)
        try:
            await mem.start()  # looks the session up only
            ctx = await mem.get_memory_context(strict=True)
            assert ctx is not None and ctx["session_id"] == ""
            assert ctx["short_term"] == [] and ctx["mid_term"] == []
            assert await mem.search("anything") == []
            assert server.requests_to("POST", "/api/v1/sessions") == []
            # An outage still shows: "empty" must not hide it.
            server.mode = "error500"
            with pytest.raises(AthenaServerError):
                await mem.get_memory_context(strict=True)
        finally:
            server.mode = "ok"
            await mem.close()


async def test_graph_hits_are_left_out_of_search_unless_enabled(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    # The server's graph lookup ignores tenant, user and agent.
    server.add_chain(TENANT, USER, "budget", "Q3 budget approved")
    server.add_ltm_node(TENANT, USER, "Ada", "Person")
    mem = await make_memory(redis_client)
    assert [h["source_type"] for h in await mem.search("budget")] == ["cognitive_chain"]
    opted_in = await make_memory(redis_client, include_graph_hits=True)
    types = [h["source_type"] for h in await opted_in.search("budget")]
    assert types == ["cognitive_chain", "ltm_node"]


async def test_search_sends_the_filter(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    await mem.search("budget", filter={"namespace": "ns1"})
    [post] = server.requests_to("POST", "/context/search")
    assert post.json["filter"] == {"namespace": "ns1"}
