"""Store behaviour: BM25 ranking on both lexical stores.

The Redis index layout, TTL and real-server behaviour: test_redis_store.py.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest

from jarvismem.errors import BackendRejectedError, BackendUnavailableError
from jarvismem.keys import KeySpace
from jarvismem.recall import (
    InMemoryRecallStore,
    RecallRequest,
    RecallStore,
    RedisRecallStore,
    WriteRequest,
    stores,
)
from jarvismem.recall.models import MemoryEntry
from jarvismem.recall.stores import (
    DeletableRecallStore,
    by_age,
    entry_from_write,
    now_ms,
    rank,
)


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest, keyspace: KeySpace, fake_redis: Any) -> RecallStore:
    """Both lexical stores (Redis on fakeredis; the real server: test_redis_store.py)."""
    if request.param == "memory":
        return InMemoryRecallStore()
    return RedisRecallStore(fake_redis, keyspace)


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


async def test_query_of_only_stopwords_falls_back_to_the_newest(store: RecallStore) -> None:
    # No scoring word, so nothing matches: the newest entries come back, score 0.
    await write(store, "the and of")
    await write(store, "walrus facts")
    found = await store.recall(RecallRequest(agent_id="a1", query="the of and", limit=5))
    assert [(r.entry.content, r.score) for r in found] == [
        ("walrus facts", 0.0),
        ("the and of", 0.0),
    ]


async def test_delete_forgets_an_entry(store: RecallStore) -> None:
    gone = await write(store, "walrus facts")
    await write(store, "walrus habitat")
    assert await store.delete(gone, agent_id="a1") is True  # type: ignore[attr-defined]
    assert await store.delete(gone, agent_id="a1") is False  # type: ignore[attr-defined]
    assert await contents(store, "walrus") == ["walrus habitat"]


# --- both stores rank alike ------------------------------------------------------------------

_WORDS = (
    "walrus kayak painting sunrise adoption counseling pottery camping beach concert "
    "guitar violin marathon bakery festival library garden puppy kitten volunteer"
).split()
_QUERIES = (
    "when did she go camping",
    "painted a sunrise in May 2023",
    "volunteer at the library",
    "guitar concert festival",
    "what happened on 14 June 2023",
    "hello there",
    "kittens and puppies",
)


async def test_both_stores_return_the_same_results_with_the_same_scores(
    keyspace: KeySpace, fake_redis: Any
) -> None:
    # A deterministic corpus with upserts and deletes, asked with limits, filters and
    # thresholds: ids, order and scores (to the last bit) must agree.
    memory, redis = InMemoryRecallStore(), RedisRecallStore(fake_redis, keyspace)
    rnd = random.Random(19)
    ids: list[str] = []
    for i in range(160):
        words = " ".join(rnd.choice(_WORDS) for _ in range(rnd.randint(1, 9)))
        day = f"2023-{rnd.randint(4, 7):02d}-{rnd.randint(1, 28):02d}"
        upsert = ids and rnd.random() < 0.15
        fields = {
            "agent_id": "a1",
            "content": f"{'Anna' if i % 2 else 'Ben'}: {words}",
            "metadata": {"speaker": "Anna" if i % 2 else "Ben", "n": str(i % 3)},
            "occurred_at": day,
            "id": rnd.choice(ids) if upsert else f"e{i}",
        }
        for store in (memory, redis):
            await store.write(WriteRequest.model_validate(fields))
        ids.append(fields["id"])
        if rnd.random() < 0.05:
            gone = rnd.choice(ids)
            assert await memory.delete(gone, agent_id="a1") == await redis.delete(
                gone, agent_id="a1"
            )
    checked = 0
    for query in _QUERIES:
        for limit in (1, 3, 10, 200):
            for wanted in (None, {"speaker": "Anna"}, {"speaker": "Ben", "n": "1"}):
                for min_score in (0.0, 1.0):
                    request = RecallRequest(
                        agent_id="a1", query=query, limit=limit, filter=wanted, min_score=min_score
                    )
                    mine = [(r.entry.id, r.score) for r in await memory.recall(request)]
                    theirs = [(r.entry.id, r.score) for r in await redis.recall(request)]
                    assert mine == theirs, request
                    checked += bool(mine)
    assert checked > 100


async def test_the_in_memory_store_does_not_tokenise_entries_to_answer_a_query(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = InMemoryRecallStore()
    for i in range(50):
        await store.write(WriteRequest(agent_id="a1", content=f"walrus fact number {i}"))
    seen: list[str] = []
    real = stores.tokenize

    def counting(text: str) -> list[str]:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(stores, "tokenize", counting)
    monkeypatch.setattr(stores, "document_tokens", lambda *a, **k: pytest.fail("re-tokenised"))
    found = await store.recall(RecallRequest(agent_id="a1", query="walrus 7", limit=3))
    assert found[0].entry.content == "walrus fact number 7"
    assert seen == ["walrus 7"]  # the query only


async def test_the_in_memory_index_after_upserts_and_deletes_equals_a_fresh_one() -> None:
    store = InMemoryRecallStore(indexed_metadata=["tag"])
    rnd = random.Random(7)
    for i in range(120):
        entry_id = f"e{rnd.randint(0, 40)}"
        words = " ".join(rnd.choice(_WORDS) for _ in range(rnd.randint(1, 6)))
        await store.write(
            WriteRequest(agent_id="a1", id=entry_id, content=words, metadata={"tag": f"t{i % 4}"})
        )
        if i % 7 == 0:
            await store.delete(f"e{rnd.randint(0, 40)}", agent_id="a1")
    fresh = InMemoryRecallStore(indexed_metadata=["tag"])
    for entry in await store.list_entries("a1"):
        await fresh.write(
            WriteRequest(
                agent_id="a1",
                id=entry.id,
                content=entry.content,
                metadata=entry.metadata,
                occurred_at=entry.occurred_at,
            )
        )
    [(_, kept)] = store._scopes.items()
    [(_, built)] = fresh._scopes.items()
    assert kept.postings == built.postings
    assert (kept.lengths, kept.total_length) == (built.lengths, built.total_length)
    assert set(kept.entries) == set(built.entries)
    # tf_max is an upper bound kept through deletes, never below the true maximum.
    for token, posting in built.postings.items():
        assert kept.tf_max[token] >= max(code % 2**24 for code in posting.values())


def test_indexed_metadata_keys_must_be_non_empty_strings(fake_redis: Any) -> None:
    for bad in ([""], ["  "], [3]):
        with pytest.raises(ValueError, match="indexed metadata"):
            InMemoryRecallStore(indexed_metadata=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="indexed metadata"):
            RedisRecallStore(fake_redis, KeySpace(), indexed_metadata=bad)  # type: ignore[arg-type]


async def test_indexed_metadata_is_searchable_and_other_metadata_is_not(store: RecallStore) -> None:
    searchable = (
        InMemoryRecallStore(indexed_metadata=["place"])
        if isinstance(store, InMemoryRecallStore)
        # Another namespace: one scope is indexed one way (see test_redis_store.py).
        else RedisRecallStore(store._redis, KeySpace("other"), indexed_metadata=["place"])  # type: ignore[attr-defined]
    )
    for target in (store, searchable):
        await target.write(
            WriteRequest(
                agent_id="a2", content="went hiking", metadata={"place": "Zermatt", "mood": "glad"}
            )
        )
    plain = await store.recall(RecallRequest(agent_id="a2", query="zermatt"))
    assert [r.score for r in plain] == [0.0]  # the fill: metadata is not indexed by default
    found = await searchable.recall(RecallRequest(agent_id="a2", query="Zermatt hike"))
    assert found[0].score > 0
    mood = await searchable.recall(RecallRequest(agent_id="a2", query="glad"))
    assert [r.score for r in mood] == [0.0]


# --- the shared helpers of stores.py -------------------------------------------------------


def test_now_ms_is_strictly_increasing_even_within_one_millisecond() -> None:
    stamps = [now_ms() for _ in range(500)]
    assert all(b > a for a, b in itertools.pairwise(stamps))


def test_entry_from_write_on_a_new_entry() -> None:
    entry = entry_from_write(
        WriteRequest(agent_id="a1", content="fresh", metadata={"k": "v"}), None
    )
    assert entry.created_at == entry.updated_at
    assert (entry.content, entry.metadata, entry.id[:4]) == ("fresh", {"k": "v"}, "mem_")


def test_entry_from_write_upsert_keeps_id_and_creation_time() -> None:
    first = entry_from_write(WriteRequest(agent_id="a1", content="v1"), None)
    second = entry_from_write(WriteRequest(agent_id="a1", id=first.id, content="v2"), first)
    assert (second.id, second.created_at, second.content) == (first.id, first.created_at, "v2")
    assert second.updated_at > first.updated_at


def test_entry_from_write_never_moves_updated_at_backwards() -> None:
    # An entry stamped by a process whose clock ran ahead keeps its later stamp.
    first = entry_from_write(WriteRequest(agent_id="a1", content="v1"), None)
    ahead = first.model_copy(update={"updated_at": first.updated_at + 10_000_000})
    second = entry_from_write(WriteRequest(agent_id="a1", id=first.id, content="v2"), ahead)
    assert second.updated_at == ahead.updated_at


def _entry(entry_id: str, updated_at: int) -> MemoryEntry:
    return MemoryEntry(agent_id="a1", id=entry_id, content="x", created_at=0, updated_at=updated_at)


def test_rank_orders_by_score_then_recency_then_id_and_cuts_to_the_limit() -> None:
    entries = {i: _entry(i, t) for i, t in (("a", 1), ("b", 2), ("c", 2), ("d", 9))}
    scores = {"a": 3.0, "b": 1.0, "c": 1.0, "d": 0.5}
    assert [r.entry.id for r in rank(scores, entries, 10)] == ["a", "b", "c", "d"]
    assert [r.entry.id for r in rank(scores, entries, 2)] == ["a", "b"]
    assert [r.score for r in rank(scores, entries, 10)] == [3.0, 1.0, 1.0, 0.5]


def test_rank_skips_scored_ids_without_an_entry() -> None:
    # A concurrent delete can leave a posting whose entry is gone.
    assert [r.entry.id for r in rank({"gone": 9.0, "a": 1.0}, {"a": _entry("a", 1)}, 5)] == ["a"]


def test_by_age_is_oldest_first_then_by_id() -> None:
    def made(entry_id: str, created_at: int) -> MemoryEntry:
        return MemoryEntry(
            agent_id="a1", id=entry_id, content="x", created_at=created_at, updated_at=99
        )

    entries = [made("b", 5), made("c", 1), made("a", 5)]
    assert [e.id for e in by_age(entries)] == ["c", "a", "b"]


def test_the_in_memory_store_satisfies_both_protocols() -> None:
    store = InMemoryRecallStore()
    assert isinstance(store, RecallStore)
    assert isinstance(store, DeletableRecallStore)


async def test_in_memory_scopes_are_separate_and_delete_is_scoped() -> None:
    store = InMemoryRecallStore()
    agent_wide = await store.write(WriteRequest(agent_id="a1", content="shared fact"))
    await store.write(WriteRequest(agent_id="a1", session_id="s1", content="session fact"))
    assert [e.content for e in await store.list_entries("a1", "s1")] == ["session fact"]
    assert await store.delete(agent_wide.id, agent_id="a1", session_id="s1") is False
    assert await store.delete(agent_wide.id, agent_id="a1") is True
    assert await store.list_entries("a1") == []


async def test_in_memory_concurrent_upserts_keep_one_entry() -> None:
    store = InMemoryRecallStore()
    entry = await store.write(WriteRequest(agent_id="a1", content="v0"))
    await asyncio.gather(
        *(store.write(WriteRequest(agent_id="a1", id=entry.id, content=f"v{i}")) for i in range(20))
    )
    [kept] = await store.list_entries("a1")
    assert (kept.id, kept.created_at) == (entry.id, entry.created_at)


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
