"""Spaces and recall through UnifiedMemory: the bundle, remember/recall, preflight, capture."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from jarvismem.errors import NamespaceContextMissingError, RecallStoreMissingError
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.runtime import MemoryRuntime, RecallSetup
from jarvismem.settings import Settings, load_settings
from tests.conftest import REAL_REDIS_URL, Factory


async def test_an_agent_that_never_touches_spaces_has_none_in_its_bundle(
    settings: Settings, redis_client: Any, make_memory: Factory
) -> None:
    bundle = await make_memory(redis=redis_client).rehydrate_bundle()
    assert bundle["spaces"] is None
    assert [
        k async for k in redis_client.scan_iter(match=f"jm:{settings.jarvismem_namespace}:*")
    ] == []


async def test_spaces_written_through_the_facade_come_back_in_a_fresh_bundle(
    redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client)
    assert mem.spaces is not None
    await mem.spaces.world_put("customer", "ACME")
    await mem.spaces.tasks_add("send the quote")
    await mem.runtime.close()  # the first process ends
    bundle = await make_memory(redis=redis_client, step="s2").rehydrate_bundle()
    spaces = bundle["spaces"]
    assert spaces["spaces"]["world"]["data"] == {"customer": "ACME"}
    assert [t["text"] for t in spaces["spaces"]["tasks"]["data"]] == ["send the quote"]
    assert set(bundle) >= {
        "ltm_summary",
        "recent_turns",
        "checkpoint",
        "scratchpad",
        "athena_context",
    }


def _write_spaces_in_child(url: str, namespace: str, workflow_id: str, outbox: str) -> None:
    import asyncio

    import redis.asyncio as aioredis

    async def main() -> None:
        client = aioredis.Redis.from_url(url)
        s = load_settings(
            _env_file=None,
            jarvismem_namespace=namespace,
            outbox_path=outbox,
            compaction_enabled=False,
        )
        rt = MemoryRuntime(s, redis=client)
        spaces = rt.memory(workflow_id, "s1", "a1").spaces
        assert spaces is not None
        await spaces.world_put("written_by", "child")
        await spaces.tasks_add("from another process")
        await rt.close()
        await client.aclose()

    asyncio.run(main())


@pytest.mark.integration
async def test_rehydrate_returns_spaces_written_by_an_earlier_process(
    settings: Settings, workflow_id: str, real_redis: Any, tmp_path: Path, make_memory: Factory
) -> None:
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(
        target=_write_spaces_in_child,
        args=(REAL_REDIS_URL, settings.jarvismem_namespace, workflow_id, str(tmp_path / "c")),
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0
    bundle = await make_memory(redis=real_redis, step="s9").rehydrate_bundle()
    assert bundle["spaces"]["spaces"]["world"]["data"] == {"written_by": "child"}


async def test_remember_then_recall_ranks_the_relevant_fact_first(
    workflow_id: str, redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client)
    await mem.remember("The customer prefers invoices in euros.")
    await mem.remember("Deployments happen on Tuesdays after the standup.")
    await mem.remember("The staging database password rotates monthly.")
    results = await mem.recall("which day are deployments?")
    assert results and "Tuesdays" in results[0].entry.content
    assert all(r.entry.agent_id == "a1" for r in results)
    other = mem.runtime.memory(workflow_id, "s1", "a2")
    assert await other.recall("deployments Tuesdays") == []


async def test_without_redis_remember_says_no_recall_store(make_memory: Factory) -> None:
    mem = make_memory()
    with pytest.raises(RecallStoreMissingError):
        await mem.remember("x")
    with pytest.raises(RecallStoreMissingError):
        await mem.recall("x")


async def test_namespace_from_context_is_required_and_isolates_tenants(
    redis_client: Any, make_memory: Factory
) -> None:
    policy = MemoryPolicy.parse({"namespace_from": "tenant_id"})
    mem = make_memory(redis=redis_client, recall=RecallSetup(policy=policy))
    with pytest.raises(NamespaceContextMissingError):
        await mem.remember("no tenant given")
    await mem.remember("ACME renews in March", context={"tenant_id": "acme"})
    assert await mem.recall("renews March", context={"tenant_id": "globex"}) == []
    (hit,) = await mem.recall("renews March", context={"tenant_id": "acme"})
    assert hit.entry.content == "ACME renews in March"


async def test_preflight_shows_the_exact_messages_with_recalled_memory_and_bundle(
    redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client)
    await mem.remember("Quotes must include VAT.")
    assert mem.spaces is not None
    await mem.spaces.tasks_add("prepare the quote")
    pre = await mem.preflight("You are a sales agent.", "draft the quote with VAT")
    texts = [m["content"] for m in pre.messages]
    assert texts[0].startswith("You are a sales agent.")
    memory_msg = next(t for t in texts if t.startswith("Relevant memory:"))
    assert "- Quotes must include VAT." in memory_msg
    assert any("prepare the quote" in t for t in texts)
    assert pre.messages[-1] == {"role": "user", "content": "draft the quote with VAT"}
    assert [r.entry.content for r in pre.used_entries] == ["Quotes must include VAT."]


async def test_capture_writes_the_conversation_only_when_the_policy_says_so(
    redis_client: Any, make_memory: Factory
) -> None:
    manual = make_memory(redis=redis_client)
    assert await manual.capture("hi", "hello") is None
    conv = make_memory(
        redis=redis_client,
        recall=RecallSetup(policy=MemoryPolicy.parse({"capture": "conversation"})),
    )
    entry = await conv.capture("what is 2+2?", "4")
    assert entry is not None and entry.content == "User: what is 2+2?\nAssistant: 4"


async def test_remembered_secrets_are_redacted(redis_client: Any, make_memory: Factory) -> None:
    mem = make_memory(redis=redis_client)
    secret = "ghp_" + "x1Y2z3" * 6
    entry = await mem.remember(f"deploy token is {secret}")
    assert secret not in entry.content


async def test_the_seeds_headline_turn_and_its_source_markers_through_the_facade(
    redis_client: Any, make_memory: Factory
) -> None:
    # The seed's example: a preference remembered, then a turn that shares no word with it.
    mem = make_memory(
        redis=redis_client,
        recall=RecallSetup(policy=MemoryPolicy.parse({"capture": "conversation"})),
    )
    remembered = await mem.remember("User prefers the name Alex.")
    assert remembered.metadata["source"] == "manual"
    pre = await mem.preflight("You are a helpful assistant.", "hello")
    assert [r.entry.content for r in pre.used_entries] == ["User prefers the name Alex."]
    captured = await mem.capture("hello", "Hi Alex!")
    assert captured is not None and captured.metadata["source"] == "conversation"


async def test_recall_takes_limit_filter_and_min_score_and_fills_up_to_the_limit(
    redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client)
    await mem.remember("The customer prefers invoices in euros.", metadata={"topic": "billing"})
    await mem.remember("Deployments happen on Tuesdays.", metadata={"topic": "ops"})
    await mem.remember("Backups run nightly.", metadata={"topic": "ops"})
    # One match, then the newest others fill the default limit (max_entries, 5).
    found = await mem.recall("which day are deployments?")
    assert [r.entry.content for r in found] == [
        "Deployments happen on Tuesdays.",
        "Backups run nightly.",
        "The customer prefers invoices in euros.",
    ]
    assert found[0].score > 0 and [r.score for r in found[1:]] == [0.0, 0.0]
    assert len(await mem.recall("which day are deployments?", limit=2)) == 2
    matches_only = await mem.recall("which day are deployments?", min_score=1e-9)
    assert [r.entry.content for r in matches_only] == ["Deployments happen on Tuesdays."]
    billing = await mem.recall("deployments", filter={"topic": "billing"})
    assert [(r.entry.content, r.score) for r in billing] == [
        ("The customer prefers invoices in euros.", 0.0)
    ]


async def test_remember_takes_when_the_fact_happened_and_recall_finds_it_by_date(
    redis_client: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=redis_client)
    may = await mem.remember("Caroline went to a support group.", occurred_at="2023-05-07")
    await mem.remember("Caroline went to a pottery class.", occurred_at=1_687_255_200_000)
    assert may.occurred_at == 1_683_417_600_000
    (first, *_) = await mem.recall("What did Caroline do in May 2023?")
    assert first.entry.id == may.id and first.score > 0
    with pytest.raises(ValueError, match="occurred_at"):
        await mem.remember("bad date", occurred_at="last spring")
