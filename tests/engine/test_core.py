"""MemoryEngine: clients, per-workflow state (bounded), outboxes, close."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from jarvismem.engine.core import MemoryEngine, shared_summarizer
from jarvismem.errors import ConfigError
from jarvismem.memory import UnifiedMemory
from jarvismem.settings import Settings
from tests.conftest import Factory


def test_an_engine_is_configured_explicitly_it_does_not_read_the_environment() -> None:
    with pytest.raises(ConfigError, match="MemoryEngine needs settings"):
        MemoryEngine()


async def test_an_engine_without_backends_has_no_tiers_and_closes_twice(
    workflow_id: str, make_engine: Factory
) -> None:
    engine = make_engine()
    state = engine.workflow(workflow_id)
    assert (state.ledger, state.redis_writer, state.blob_writer, state.ltm) == (None,) * 4
    assert engine.destination("redis") is None and engine.destination("blob") is None
    assert await engine.athena_memory("a1") is None
    assert engine.athena_memory_nowait("a1") is None
    with pytest.raises(ConfigError, match="ATHENA_URL"):
        engine.athena_outbox("a1")
    assert engine.recall_store is None and not engine.in_process
    await engine.close()
    assert engine.closed
    await engine.close()


async def test_the_embedded_recall_store_indexes_the_configured_metadata_keys(
    workflow_id: str, redis_client: Any, settings: Settings, make_engine: Factory
) -> None:
    # RECALL_INDEXED_METADATA must reach the store the engine builds, or it does nothing.
    engine = make_engine(
        redis=redis_client,
        settings=settings.model_copy(update={"recall_indexed_metadata": "topic"}),
    )
    view = UnifiedMemory(workflow_id, "s1", "a1", runtime=engine)
    await view.remember("the launch slipped a week", metadata={"topic": "astronomy"})
    found = await view.recall("astronomy", min_score=1e-9)
    assert [r.entry.content for r in found] == ["the launch slipped a week"]


async def test_one_workflow_state_and_one_outbox_per_workflow(
    workflow_id: str, redis_client: Any, blob_storage: Any, make_engine: Factory
) -> None:
    engine = make_engine(redis=redis_client, blob=blob_storage)
    state = engine.workflow(workflow_id)
    assert engine.workflow(workflow_id) is state
    assert engine.outbox("redis", workflow_id) is state.redis_writer.outbox  # type: ignore[union-attr]
    assert engine.outbox("blob", workflow_id) is state.blob_writer.outbox  # type: ignore[union-attr]
    # Outbox files are named by the destination they deliver to.
    redis_dst = engine.destination("redis")
    assert redis_dst is not None and redis_dst != engine.destination("blob")
    assert redis_dst in str(engine.outbox("redis", workflow_id).path)
    assert engine.open_writers() == list(state.writers)


async def test_any_engine_serves_views_and_keeps_only_recent_workflows(
    redis_client: Any, make_engine: Factory
) -> None:
    engine = make_engine(redis=redis_client, recent_workflows=8)
    for i in range(40):
        await UnifiedMemory(f"wf-{i}", "s1", "a1", runtime=engine).log_turn(1, "t", "a", "r")
    gc.collect()
    assert len(engine._workflows) <= 8 + 1
    kept = UnifiedMemory("wf-0", "s1", "a1", runtime=engine)  # evicted, used again: same data
    assert [t["turn_id"] for t in await kept.episodic.tail(5)] == ["1"]  # type: ignore[union-attr]


async def test_held_idle_views_do_not_pin_their_workflow_state(
    redis_client: Any, blob_storage: Any, make_engine: Factory
) -> None:
    # A kernel may hold a view per waiting workflow: thousands of them. The views
    # must not keep every workflow's state (writers, outboxes, tiers) alive.
    engine = make_engine(redis=redis_client, blob=blob_storage, recent_workflows=8)
    views = [UnifiedMemory(f"wf-{i}", "s1", "a1", runtime=engine) for i in range(40)]
    for view in views:
        await view.log_turn(1, "t", "a", "r")
    gc.collect()
    assert len(engine._workflows) <= 8 + 1  # was 40: each view held its state
    # A held view whose state was let go works as before: its state is made again.
    first = views[0]
    await first.log_turn(2, "t2", "a2", "r2")
    bundle = await first.rehydrate_bundle()
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["1", "2"]
    assert first.episodic is not None and await first.episodic.length() == 2


async def test_an_engine_compacts_with_jarviscores_generate_client(
    redis_client: Any, blob_storage: Any, make_engine: Factory
) -> None:
    # A JarvisCore user hands the engine the LLM client they already have.
    class Generate:
        def __init__(self) -> None:
            self.prompts: list[str] = []

        async def generate(self, **kwargs: Any) -> dict[str, Any]:
            self.prompts.append(kwargs["prompt"])
            return {"content": "summary by generate()", "tokens": {"total": 7}}

    client = Generate()
    engine = make_engine(redis=redis_client, blob=blob_storage, summarizer=client)
    mem = UnifiedMemory("wf-gen", "s1", "a1", runtime=engine)
    await mem.log_turn(1, "look up the invoice", "search()", "found it")
    result = await mem.compact_now()
    assert result["compacted"], result
    assert mem.ltm is not None and await mem.ltm.load_summary() == "summary by generate()"
    assert client.prompts and "look up the invoice" in client.prompts[0]


async def test_closing_an_engine_leaves_clients_it_does_not_own_open(
    redis_client: Any, blob_storage: Any, make_engine: Factory
) -> None:
    engine = make_engine(redis=redis_client, blob=blob_storage)
    await UnifiedMemory("wf", "s1", "a1", runtime=engine).log_turn(1, "t", "a", "r")
    await engine.close()
    assert await redis_client.ping()
    await blob_storage.append("still/open.txt", b"x")


async def test_engines_not_owning_clients_share_one_summarizer_per_settings(
    settings: Settings, make_engine: Factory
) -> None:
    first, second = make_engine(), make_engine()
    assert first.summarizer is second.summarizer is shared_summarizer(settings)
    owner = make_engine(owns_clients=True)
    assert owner.summarizer is not first.summarizer


def test_defaults_follow_the_settings(settings: Settings) -> None:
    engine = MemoryEngine(settings.model_copy(update={"redaction_enabled": False}))
    assert engine.redactor("api_key=sk-abcdefghijklmnopqrstuvwx") == (
        "api_key=sk-abcdefghijklmnopqrstuvwx"
    )
    assert engine.keyspace.namespace == settings.jarvismem_namespace
    assert engine.policy is not None


async def test_recall_embedder_setting_makes_the_runtime_recall_by_meaning(
    workflow_id: str, settings: Settings, real_redis: Any
) -> None:
    # End to end through the settings: RECALL_EMBEDDER=openai and EMBEDDINGS_BASE_URL
    # make the runtime's recall store hybrid, vectors in Redis, embeddings over HTTP
    # from the fake server (whose aliases give "automobile" and "sedan" one meaning).
    from jarvismem.recall.hybrid import HybridRecallStore
    from jarvismem.runtime import MemoryRuntime
    from jarvismem.testing.fake_llm import FakeLLMServer
    from tests.conftest import REAL_REDIS_URL

    with FakeLLMServer() as llm:
        llm.embedding_aliases = {"automobile": "car", "sedan": "car"}
        s = settings.model_copy(
            update={
                "redis_url": REAL_REDIS_URL,
                "recall_embedder": "openai",
                "embeddings_base_url": llm.url,
                "embeddings_batch": 8,
                # The fake's 64 default buckets would let unrelated words collide.
                "embeddings_dimensions": 4096,
            }
        )
        rt = await MemoryRuntime.from_env(s, require_redis=True)
        store = rt.recall_store
        assert isinstance(store, HybridRecallStore) and store.batch_size == 8
        view = rt.memory(workflow_id, "s1", "a1")
        entry = await view.remember("I drove my new sedan to work")
        await view.remember("The weather was grey all week")
        await view.remember("We ate pasta for dinner")
        assert await store.flush(10)
        found = await view.recall("which automobile", min_score=1e-9)
        assert [r.entry.content for r in found] == ["I drove my new sedan to work"]
        assert llm.embedding_requests(), "the embeddings went over HTTP"
        scope = rt.keyspace.recall_scope(entry.namespace, entry.agent_id, entry.session_id)
        vectors = rt.keyspace.recall_vectors(scope)
        assert await real_redis.hlen(vectors) == 3
        await rt.close()
        assert store._closed  # the engine stopped the background embedding

    lexical = await MemoryRuntime.from_env(
        settings.model_copy(update={"redis_url": REAL_REDIS_URL}), require_redis=True
    )
    assert not isinstance(lexical.recall_store, HybridRecallStore)
    await lexical.close()
