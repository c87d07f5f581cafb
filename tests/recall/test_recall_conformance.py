"""Every shipped recall store against the same conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from jarvismem.keys import KeySpace
from jarvismem.recall import (
    AthenaRecallStore,
    InMemoryRecallStore,
    MemoryEntry,
    RecallStore,
    RedisRecallStore,
    WriteRequest,
)
from jarvismem.testing.recall_conformance import RecallStoreConformance, run_recall_conformance


class TestInMemoryRecallStore(RecallStoreConformance):
    @pytest.fixture
    async def recall_store(self) -> InMemoryRecallStore:
        return InMemoryRecallStore()


class TestRedisRecallStore(RecallStoreConformance):
    @pytest.fixture
    async def recall_store(self, redis_client: Any, keyspace: KeySpace) -> RedisRecallStore:
        return RedisRecallStore(redis_client, keyspace)


class _AnyAgent:
    """An AthenaMemory without its ``agent_id``: lets the suite's many agents share it."""

    def __init__(self, memory: Any) -> None:
        self.record_observation = memory.record_observation
        self.search = memory.search


class TestAthenaRecallStore(RecallStoreConformance):
    """Athena over real HTTP (the in-repo fake server).

    Honest expectations: Athena ranks with its own embeddings (nearest first, with
    no lexical "nothing matches" case to fall back from or fill after, no stems or
    date tokens, no recency tie-break), cannot filter on our metadata, scopes only
    by (tenant, user, agent) and cannot update in place, so those checks are off.
    Athena builds searchable chains from observations on its own schedule; the
    fake does not, so ``seed`` plays that part by adding one chain per fact
    after the facts were delivered as observation events.
    """

    fills_to_limit: ClassVar[bool] = False
    falls_back_to_newest: ClassVar[bool] = False
    ties_by_recency: ClassVar[bool] = False
    filters_and_min_score: ClassVar[bool] = False
    lexical: ClassVar[bool] = False
    recall_is_scoped: ClassVar[bool] = False
    upserts_in_place: ClassVar[bool] = False

    @pytest.fixture
    async def recall_store(self, tmp_path: Path) -> AsyncIterator[AthenaRecallStore]:
        fake = pytest.importorskip("jarvismem.testing.fake_athena")
        from jarvismem.backends.athena import AthenaClient
        from jarvismem.backends.outbox import Outbox
        from jarvismem.tiers.athena import AthenaMemory

        with fake.FakeAthenaServer() as server:
            client = AthenaClient(server.url, timeout=2.0, max_retries=1, backoff=0.01)
            memory = await AthenaMemory.create(
                "conformance", client, outbox=Outbox(tmp_path / "athena.jsonl")
            )
            # The suite writes as many agents; one AthenaMemory is one agent, and
            # the store refuses other agents of a memory that names its own.
            store = AthenaRecallStore(_AnyAgent(memory))
            store.fake_server = server  # type: ignore[attr-defined]
            store.athena_memory = memory  # type: ignore[attr-defined]
            yield store
            await memory.close()
            await client.aclose()

    async def seed(self, store: RecallStore, requests: list[WriteRequest]) -> list[MemoryEntry]:
        entries = [await store.write(r) for r in requests]
        memory = store.athena_memory  # type: ignore[attr-defined]
        await memory.flush(timeout=5.0)
        server = store.fake_server  # type: ignore[attr-defined]
        observed = {e["content"] for _, e in server.events if e.get("type") == "observation"}
        assert {e.content for e in entries} <= observed, "observations were not delivered"
        for entry in entries:
            server.add_chain("default", "jarvismem", "fact", entry.content)
        return entries


async def test_run_recall_conformance_passes_on_a_conforming_store() -> None:
    await run_recall_conformance(InMemoryRecallStore())


async def test_run_recall_conformance_names_the_failing_check() -> None:
    class ForgetfulStore(InMemoryRecallStore):
        async def list_entries(
            self, agent_id: str, session_id: str | None = None, namespace: str = "default"
        ) -> list[MemoryEntry]:
            return []

    with pytest.raises(AssertionError, match="test_"):
        await run_recall_conformance(ForgetfulStore())
