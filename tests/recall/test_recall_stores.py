"""Store-specific behaviour: BM25 ranking, the Redis index, TTL, and Athena's distance mapping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jarvismem.errors import BackendRejectedError, BackendUnavailableError
from jarvismem.keys import KeySpace
from jarvismem.recall import (
    AthenaRecallStore,
    InMemoryRecallStore,
    RecallRequest,
    RecallStore,
    RedisRecallStore,
    WriteRequest,
    similarity_from_distance,
)


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest, keyspace: KeySpace) -> RecallStore:
    """Both lexical stores (Redis on fakeredis; the real server runs in the conformance suite)."""
    if request.param == "memory":
        return InMemoryRecallStore()
    import fakeredis

    return RedisRecallStore(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()), keyspace)


async def write(store: RecallStore, content: str, **kw: Any) -> str:
    return (await store.write(WriteRequest(agent_id="a1", content=content, **kw))).id


async def contents(store: RecallStore, query: str, limit: int = 5) -> list[str]:
    found = await store.recall(RecallRequest(agent_id="a1", query=query, limit=limit))
    return [r.entry.content for r in found]


# --- ranking on both lexical stores -----------------------------------------------------


async def test_more_occurrences_rank_higher(store: RecallStore) -> None:
    await write(store, "deadline moved once more into next week maybe")
    await write(store, "deadline deadline deadline: the deadline is firm")
    assert (await contents(store, "deadline"))[0].startswith("deadline deadline")


async def test_rare_word_outweighs_common_word(store: RecallStore) -> None:
    for i in range(4):
        await write(store, f"meeting notes {i}")
    await write(store, "meeting about the kraken")
    await write(store, "kraken sighting reported")
    found = await contents(store, "meeting kraken", limit=2)
    assert found[0] == "meeting about the kraken"
    assert found[1] == "kraken sighting reported"


async def test_shorter_entry_wins_at_equal_term_frequency(store: RecallStore) -> None:
    await write(store, "budget review with many other words attached to it today")
    await write(store, "budget review")
    assert (await contents(store, "budget"))[0] == "budget review"


async def test_recency_breaks_ties(store: RecallStore) -> None:
    old = await write(store, "same words here")
    new = await write(store, "same words here")
    found = await store.recall(RecallRequest(agent_id="a1", query="words"))
    assert [r.entry.id for r in found] == [new, old]
    assert found[0].score == found[1].score


async def test_recency_tie_break_applies_at_the_limit_boundary(store: RecallStore) -> None:
    ids = [await write(store, "identical fact") for _ in range(4)]
    found = await store.recall(RecallRequest(agent_id="a1", query="fact", limit=2))
    assert [r.entry.id for r in found] == [ids[3], ids[2]]


async def test_query_of_only_stopwords_finds_nothing(store: RecallStore) -> None:
    await write(store, "the and of")
    assert await contents(store, "the of and") == []


async def test_delete_forgets_an_entry(store: RecallStore) -> None:
    gone = await write(store, "walrus facts")
    await write(store, "walrus habitat")
    assert await store.delete(gone, agent_id="a1") is True  # type: ignore[attr-defined]
    assert await store.delete(gone, agent_id="a1") is False  # type: ignore[attr-defined]
    assert await contents(store, "walrus") == ["walrus habitat"]


# --- Redis layout ---------------------------------------------------------------------------


class RecordingRedis:
    """Delegates to a client and records the hash reads it is asked for."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[tuple[str, Any, Any]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in {"hget", "hmget", "hgetall"}:
            return attr

        async def recorded(key: Any, *args: Any) -> Any:
            self.calls.append((name, key, args))
            return await attr(key, *args)

        return recorded


async def test_redis_recall_reads_only_the_query_postings(
    redis_client: Any, keyspace: KeySpace
) -> None:
    recorder = RecordingRedis(redis_client)
    store = RedisRecallStore(recorder, keyspace)  # type: ignore[arg-type]
    for i in range(30):
        await store.write(WriteRequest(agent_id="a1", content=f"routine entry number {i}"))
    target = await store.write(WriteRequest(agent_id="a1", content="the walrus is blue"))
    recorder.calls.clear()
    found = await store.recall(RecallRequest(agent_id="a1", query="walrus color", limit=5))
    assert [r.entry.id for r in found] == [target.id]
    assert [c[0] for c in recorder.calls] == ["hmget", "hmget", "hmget"]
    entries_key, postings_key = store.keys("default", "a1", None)
    (_, k1, a1), (_, k2, a2), (_, k3, a3) = recorder.calls
    assert (k1, a1[0]) == (postings_key, ["walrus", "color", "__n__", "__sum__"])
    assert (k2, a2[0]) == (postings_key, [f"__dl__:{target.id}"])
    assert (k3, a3[0]) == (entries_key, [target.id])


async def test_redis_upsert_takes_old_words_out_of_the_index(
    redis_client: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(redis_client, keyspace)
    entry = await store.write(WriteRequest(agent_id="a1", content="zebra stripes"))
    await store.write(WriteRequest(agent_id="a1", id=entry.id, content="giraffe"))
    _, postings_key = store.keys("default", "a1", None)
    fields = {f.decode() for f in await redis_client.hkeys(postings_key)}
    assert "zebra" not in fields and "stripe" not in fields
    assert "giraffe" in fields
    assert await redis_client.hget(postings_key, "__n__") == b"1"
    assert await redis_client.hget(postings_key, "__sum__") == b"1"


async def test_redis_ttl_applies_to_both_keys(redis_client: Any, keyspace: KeySpace) -> None:
    store = RedisRecallStore(redis_client, keyspace, ttl_seconds=120)
    await store.write(WriteRequest(agent_id="a1", content="short lived"))
    for key in store.keys("default", "a1", None):
        assert 0 < await redis_client.ttl(key) <= 120


async def test_redis_without_ttl_keeps_keys(redis_client: Any, keyspace: KeySpace) -> None:
    store = RedisRecallStore(redis_client, keyspace)
    await store.write(WriteRequest(agent_id="a1", content="long lived"))
    for key in store.keys("default", "a1", None):
        assert await redis_client.ttl(key) == -1


async def test_redis_keys_share_one_cluster_slot(keyspace: KeySpace) -> None:
    import fakeredis

    store = RedisRecallStore(fakeredis.FakeAsyncRedis(), keyspace)
    entries_key, postings_key = store.keys("ns", "a1", "s1")
    tag = entries_key[entries_key.index("{") : entries_key.index("}") + 1]
    assert tag in postings_key and tag == "{recall:ns:a1:s1}"


# --- Athena: L2 distance to similarity ------------------------------------------------------


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


async def test_athena_recall_sorts_by_similarity_descending() -> None:
    athena = StandInAthena(
        [
            _hit("far", 2.0),
            _hit("closest", 0.1),
            _hit("Ada [Person]", 0, "ltm_node"),
            _hit("mid", 0.5),
        ]
    )
    store = AthenaRecallStore(athena)
    found = await store.recall(RecallRequest(agent_id="a1", query="q", limit=4))
    assert [r.entry.content for r in found] == ["closest", "mid", "far", "Ada [Person]"]
    assert [r.score for r in found] == [1 / 1.1, 1 / 1.5, 1 / 3.0, 0.0]
    assert found[0].entry.metadata["distance"] == "0.1"
    assert athena.searches == [("q", 4)]


async def test_athena_recall_cuts_to_the_limit_after_sorting() -> None:
    athena = StandInAthena([_hit("b", 0.9), _hit("a", 0.3), _hit("c", 1.5)])
    found = await AthenaRecallStore(athena).recall(RecallRequest(agent_id="a1", query="q", limit=2))
    assert [r.entry.content for r in found] == ["a", "b"]


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
    fake = pytest.importorskip("jarvismem.testing.fake_athena")
    from jarvismem.backends.athena import AthenaClient
    from jarvismem.backends.outbox import Outbox
    from jarvismem.tiers.athena import AthenaMemory

    with fake.FakeAthenaServer() as server:
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


# --- Redis failures surface as jarvismem errors ---------------------------------------------


async def test_the_redis_store_on_an_unreachable_server_raises_backend_unavailable(
    unreachable_redis: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(unreachable_redis, keyspace)
    calls = [
        ("recall write", lambda: store.write(WriteRequest(agent_id="a1", content="x"))),
        ("recall", lambda: store.recall(RecallRequest(agent_id="a1", query="x"))),
        ("recall list_entries", lambda: store.list_entries("a1")),
        ("recall delete", lambda: store.delete("e1", agent_id="a1")),
    ]
    for what, call in calls:
        with pytest.raises(BackendUnavailableError, match=f"^{what}: Redis unavailable"):
            await call()


@pytest.mark.integration
async def test_a_scope_key_of_the_wrong_type_is_a_rejection(
    real_redis: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(real_redis, keyspace)
    entries_key, _ = store.keys("default", "a1", None)
    await real_redis.set(entries_key, "not a hash")
    with pytest.raises(BackendRejectedError, match="recall list_entries"):
        await store.list_entries("a1")
    with pytest.raises(BackendRejectedError, match="recall write"):
        await store.write(WriteRequest(agent_id="a1", content="hello", id="e1"))
