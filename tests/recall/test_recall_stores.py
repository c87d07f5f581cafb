"""Store-specific behaviour: BM25 ranking, the Redis index and TTL."""

from __future__ import annotations

import math
from typing import Any

import pytest

from jarvismem.keys import KeySpace
from jarvismem.recall import (
    InMemoryRecallStore,
    RecallRequest,
    RecallStore,
    RedisRecallStore,
    WriteRequest,
)
from jarvismem.recall.bm25 import idf, score_documents, tokenize


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


# --- tokenizer and formula ----------------------------------------------------------------


def test_tokenize_lowercases_drops_stopwords_and_plural_s() -> None:
    assert tokenize("The Cats and THE dog's toys, café_bar!") == [
        "cat",
        "dog",
        "s",
        "toy",
        "café",
        "bar",
    ]


def test_idf_is_positive_and_rarer_is_higher() -> None:
    assert idf(10, 10) > 0
    assert idf(10, 1) > idf(10, 5)


def test_bm25_matches_the_formula_for_one_document() -> None:
    scores = score_documents(["x"], {"x": {"d": 2}}, {"d": 4}, doc_count=2, avg_length=2.0)
    k1, b = 1.2, 0.75
    expected = math.log(1 + (2 - 1 + 0.5) / 1.5) * 2 * (k1 + 1) / (2 + k1 * (1 - b + b * 2))
    assert scores["d"] == pytest.approx(expected)


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
