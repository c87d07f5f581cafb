"""AthenaRecallStore: facts go in as observations, recall is Athena's search, L2 distance
mapped to a similarity and sorted by it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.outbox import Outbox
from jarvismem.errors import RecallError
from jarvismem.recall.athena_store import AthenaRecallStore, similarity_from_distance
from jarvismem.recall.models import RecallRequest, WriteRequest
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena import AthenaMemory


class StandInAthena:
    """Duck-typed AthenaMemory: records observations, answers searches from a script."""

    def __init__(self, hits: list[dict[str, Any]]) -> None:
        self.hits = hits
        self.observations: list[tuple[str, dict[str, str]]] = []
        self.searches: list[tuple[str, int]] = []

    async def record_observation(self, content: str, **metadata: str) -> None:
        self.observations.append((content, metadata))

    async def search(self, query: str, limit: int = 5) -> list[dict[str, Any]]:
        self.searches.append((query, limit))
        return list(self.hits)


def _hit(content: str, distance: float, source_type: str = "cognitive_chain") -> dict[str, Any]:
    return {
        "content": content,
        "similarity_score": distance,
        "source_type": source_type,
        "source_id": content.replace(" ", "-"),
        "timestamp": "2025-01-01T00:00:00Z",
    }


def test_similarity_is_higher_for_smaller_distance() -> None:
    assert similarity_from_distance(0.0) == 1.0
    assert similarity_from_distance(1.0) == 0.5
    assert similarity_from_distance(0.2) > similarity_from_distance(3.0)


async def test_graph_hits_are_not_recalled_unless_enabled() -> None:
    # The server's graph lookup ignores tenant, user and agent: not this agent's memory.
    hits = [_hit("mid", 0.5), _hit("Ada [Person]", 0, "ltm_node")]
    found = await AthenaRecallStore(StandInAthena(hits)).recall(
        RecallRequest(agent_id="a1", query="q", limit=4)
    )
    assert [r.entry.content for r in found] == ["mid"]


async def test_athena_recall_sorts_by_similarity_descending() -> None:
    athena = StandInAthena(
        [
            _hit("far", 2.0),
            _hit("closest", 0.1),
            _hit("Ada [Person]", 0, "ltm_node"),
            _hit("mid", 0.5),
        ]
    )
    store = AthenaRecallStore(athena, include_graph_hits=True)
    found = await store.recall(RecallRequest(agent_id="a1", query="q", limit=4))
    assert [r.entry.content for r in found] == ["closest", "mid", "far", "Ada [Person]"]
    assert [r.score for r in found] == [1 / 1.1, 1 / 1.5, 1 / 3.0, 0.0]
    assert found[0].entry.metadata["distance"] == "0.1"
    assert athena.searches == [("q", 4)]


async def test_athena_recall_cuts_to_the_limit_after_sorting() -> None:
    athena = StandInAthena([_hit("b", 0.9), _hit("a", 0.3), _hit("c", 1.5)])
    found = await AthenaRecallStore(athena).recall(RecallRequest(agent_id="a1", query="q", limit=2))
    assert [r.entry.content for r in found] == ["a", "b"]


async def test_athena_recall_leaves_out_hits_below_min_score() -> None:
    athena = StandInAthena([_hit("b", 0.9), _hit("a", 0.3), _hit("c", 1.5)])
    found = await AthenaRecallStore(athena).recall(
        RecallRequest(agent_id="a1", query="q", limit=5, min_score=0.5)
    )
    assert [r.entry.content for r in found] == ["a", "b"]


async def test_athena_recall_refuses_a_metadata_filter_it_cannot_apply() -> None:
    store = AthenaRecallStore(StandInAthena([_hit("a", 0.3)]))
    with pytest.raises(RecallError, match="filter"):
        await store.recall(RecallRequest(agent_id="a1", query="q", filter={"k": "v"}))


async def test_athena_write_sends_an_observation_with_labels() -> None:
    athena = StandInAthena([])
    store = AthenaRecallStore(athena)
    entry = await store.write(
        WriteRequest(agent_id="a1", session_id="s1", content="likes tea", metadata={"k": "v"})
    )
    assert athena.observations == [
        ("likes tea", {"k": "v", "memory_id": entry.id, "namespace": "default", "session_id": "s1"})
    ]
    assert await store.list_entries("a1", "s1") == [entry]


async def test_athena_store_against_the_fake_server(tmp_path: Path) -> None:
    with FakeAthenaServer() as server:
        async with AthenaClient(server.url, timeout=2.0, max_retries=1, backoff=0.01) as client:
            memory = await AthenaMemory.create(
                "recall-agent", client, outbox=Outbox(tmp_path / "out.jsonl")
            )
            try:
                store = AthenaRecallStore(memory)
                await store.write(WriteRequest(agent_id="recall-agent", content="tea with lemon"))
                await memory.flush(timeout=5.0)
                assert [e["content"] for _, e in server.events] == ["tea with lemon"]
                server.add_chain("default", "jarvismem", "drinks", "tea with lemon")
                server.add_chain("default", "jarvismem", "cars", "red sports cars go fast")
                found = await store.recall(
                    RecallRequest(agent_id="recall-agent", query="tea lemon", limit=2)
                )
            finally:
                await memory.close()
    assert found[0].entry.content == "tea with lemon"
    assert found[0].score > found[1].score
    distance = float(found[0].entry.metadata["distance"])
    assert found[0].score == pytest.approx(1 / (1 + distance))


async def test_store_of_one_agent_refuses_another() -> None:
    athena = StandInAthena([])
    athena.agent_id = "a1"  # type: ignore[attr-defined]
    store = AthenaRecallStore(athena)
    with pytest.raises(RecallError, match="belongs to agent 'a1'"):
        await store.recall(RecallRequest(agent_id="a2", query="q"))
    with pytest.raises(RecallError):
        await store.write(WriteRequest(agent_id="a2", content="not mine"))
    assert athena.observations == [] and athena.searches == []


async def test_upsert_by_id_replaces_the_local_entry_but_sends_again() -> None:
    athena = StandInAthena([])
    store = AthenaRecallStore(athena)
    first = await store.write(WriteRequest(agent_id="a1", id="m1", content="likes tea"))
    second = await store.write(WriteRequest(agent_id="a1", id="m1", content="likes coffee"))
    assert first.id == second.id == "m1"
    assert [e.content for e in await store.list_entries("a1")] == ["likes coffee"]
    # Athena cannot update: both observations reach it.
    assert [content for content, _ in athena.observations] == ["likes tea", "likes coffee"]


async def test_a_store_on_a_real_athena_memory_refuses_another_agent(tmp_path: Path) -> None:
    # AthenaMemory names its agent: the store's agent check runs on the real tier too.
    async with AthenaClient("http://127.0.0.1:9", timeout=0.5, max_retries=0) as client:
        memory = AthenaMemory("a1", client, outbox=Outbox(tmp_path / "out.jsonl"))
        try:
            assert memory.agent_id == "a1"
            store = AthenaRecallStore(memory)
            with pytest.raises(RecallError, match="belongs to agent 'a1'"):
                await store.recall(RecallRequest(agent_id="a2", query="q"))
            with pytest.raises(RecallError):
                await store.write(WriteRequest(agent_id="a2", content="not mine"))
            assert len(memory.outbox) == 0
        finally:
            await memory.close()
