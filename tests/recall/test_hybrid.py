"""Hybrid recall: fusion, embedding off the write path, durability of pending entries."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from jarvismem.errors import InvalidPayloadError, LLMError
from jarvismem.keys import KeySpace
from jarvismem.recall import InMemoryRecallStore, RecallRequest, RedisRecallStore, WriteRequest
from jarvismem.recall.hybrid import FusionWeights, HybridPolicy, HybridRecallStore, fuse
from jarvismem.recall.models import MemoryEntry, RecallResult
from jarvismem.recall.stores import RecallStore
from jarvismem.recall.vectors import InMemoryVectorStore, RedisVectorStore, VectorHit, VectorStore
from jarvismem.testing.fake_llm import hashed_embedding
from jarvismem.testing.recall_conformance import RecallStoreConformance
from tests.conftest import during_a_stall

AGENT = "agent-h"
SCOPE = KeySpace.recall_scope("default", AGENT, None)

# A hand-made "meaning": words of one concept share an axis, so synonyms are close
# although they share no letters (what BM25 cannot see).
CONCEPTS = (
    {"car", "automobile", "vehicle", "drove", "sedan"},
    {"dog", "puppy", "hound"},
    {"pizza", "pasta", "dinner", "ate"},
    {"paris", "france", "trip", "travel"},
)


class ConceptEmbedder:
    """Deterministic test embedder: one axis per concept, plus a small constant axis."""

    name = "test:concepts"
    dimensions = len(CONCEPTS) + 1

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.failing = False
        self.gate: asyncio.Event | None = None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise LLMError("embedder is down")
        out = []
        for text in texts:
            words = {w.strip(".,?!").lower() for w in text.split()}
            v = [float(len(words & c)) for c in CONCEPTS] + [0.1]
            norm = sum(x * x for x in v) ** 0.5
            out.append([x / norm for x in v])
        return out


class HashedEmbedder:
    """The fake LLM's hashed bag of words, as an in-process embedder.

    4,096 buckets: the conformance corpus's words never share one, so "similar in
    meaning" is exactly "shares a word" (stopwords included) and the contract's
    exact expectations hold; the fake server's 64 buckets would mix unrelated words.
    """

    name = "test:hashed"
    dimensions = 4096

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [hashed_embedding(t, self.dimensions) for t in texts]


def hybrid(
    inner: RecallStore | None = None,
    embedder: Any = None,
    vectors: VectorStore | None = None,
    owns_embedder: bool = False,
    background: bool = True,
    **policy: Any,
) -> HybridRecallStore:
    """A store with fast retries; other keyword arguments are :class:`HybridPolicy` fields."""
    return HybridRecallStore(
        inner or InMemoryRecallStore(),
        embedder or ConceptEmbedder(),
        vectors=vectors,
        policy=HybridPolicy(**{"retry_base": 0.01, "retry_cap": 0.02, **policy}),
        owns_embedder=owns_embedder,
        background=background,
    )


async def write_all(store: HybridRecallStore, *contents: str) -> list[MemoryEntry]:
    return [await store.write(WriteRequest(agent_id=AGENT, content=c)) for c in contents]


async def recall(store: RecallStore, query: str, limit: int = 5) -> list[str]:
    found = await store.recall(RecallRequest(agent_id=AGENT, query=query, limit=limit))
    return [r.entry.content for r in found]


# --- fusion ------------------------------------------------------------------------------

CORPUS = (
    "I drove my new sedan to work",
    "We adopted a puppy last spring",
    "We ate pasta for dinner yesterday",
    "Our trip to Paris was lovely",
    "The weather was grey all week",
)


async def test_meaning_finds_an_entry_that_shares_no_word_with_the_query() -> None:
    store = hybrid()
    await write_all(store, *CORPUS)
    assert await store.flush(10)
    assert (await recall(store, "automobile", 1)) == [CORPUS[0]]
    assert (await recall(store, "hound", 1)) == [CORPUS[1]]
    # The lexical store alone can only fall back to the newest entry.
    lexical = InMemoryRecallStore()
    for c in CORPUS:
        await lexical.write(WriteRequest(agent_id=AGENT, content=c))
    assert (await recall(lexical, "automobile", 1)) == [CORPUS[-1]]
    await store.aclose()


async def test_an_entry_matching_both_ways_beats_one_matching_one_way() -> None:
    store = hybrid()
    await write_all(
        store,
        "pizza night with friends",  # lexical "pizza" and the food concept
        "pasta dinner at home",  # the food concept only
        "pizza oven brochure in the vehicle",  # lexical "pizza", mostly the car concept
    )
    assert await store.flush(10)
    found = await store.recall(RecallRequest(agent_id=AGENT, query="pizza", limit=3))
    assert found[0].entry.content == "pizza night with friends"
    by_content = {r.entry.content: r.source for r in found}
    assert by_content["pizza night with friends"] == "lexical+vector"
    assert by_content["pasta dinner at home"] == "vector"
    assert [r.score for r in found] == sorted((r.score for r in found), reverse=True)
    await store.aclose()


def _entry(i: int, updated_at: int) -> MemoryEntry:
    return MemoryEntry(
        agent_id=AGENT, id=f"mem_{i}", content=f"c{i}", created_at=1, updated_at=updated_at
    )


def test_fuse_normalises_each_signal_by_its_best_value() -> None:
    a, b, c = _entry(1, 100), _entry(2, 200), _entry(3, 300)
    lexical = [RecallResult(entry=a, score=8.0), RecallResult(entry=b, score=4.0)]
    semantic = [VectorHit(c, 0.8), VectorHit(b, 0.4)]
    weights = FusionWeights(lexical=1.0, semantic=1.0, recency=0.0)
    scores = {r.entry.id: r.score for r in fuse(lexical, semantic, 5, weights)}
    assert scores == pytest.approx({"mem_1": 1.0, "mem_2": 1.0, "mem_3": 1.0})
    # Equal scores: the newer entry first. Recency then decides.
    assert [r.entry.id for r in fuse(lexical, semantic, 5, weights)] == ["mem_3", "mem_2", "mem_1"]
    only_recency = FusionWeights(lexical=0.0, semantic=0.0, recency=1.0)
    assert [r.score for r in fuse(lexical, semantic, 5, only_recency)] == [1.0, 0.5, 0.0]
    assert len(fuse(lexical, semantic, 2)) == 2
    assert fuse([], [], 5) == []


def test_fuse_keeps_matches_only_each_scoring_above_zero() -> None:
    a, b, c = _entry(1, 100), _entry(2, 200), _entry(3, 300)
    # No similarity, or a negative one, is no match by meaning; a lexical score of 0
    # (an inner store's fill) is no match by words.
    assert fuse([], [VectorHit(a, -0.3), VectorHit(b, 0.0)], 5) == []
    assert fuse([RecallResult(entry=c, score=0.0)], [], 5) == []
    found = fuse([RecallResult(entry=a, score=2.0)], [VectorHit(c, 0.5), VectorHit(b, -1)], 5)
    assert [r.entry.id for r in found] == ["mem_3", "mem_1"]
    # The oldest match, found by words only, still scores above 0.
    assert all(r.score > 0 for r in found), found


async def test_the_query_is_embedded_once_per_recall() -> None:
    embedder = ConceptEmbedder()
    store = hybrid(embedder=embedder)
    await write_all(store, *CORPUS)
    assert await store.flush(10)
    embedder.calls.clear()
    await recall(store, "automobile trip")
    assert embedder.calls == [["automobile trip"]]
    await store.aclose()


async def test_recall_is_lexical_while_the_embedder_is_down() -> None:
    embedder = ConceptEmbedder()
    store = hybrid(embedder=embedder)
    await write_all(store, *CORPUS)
    assert await store.flush(10)
    embedder.failing = True
    assert (await recall(store, "puppy", 1)) == [CORPUS[1]]
    await store.aclose()


# --- embedding off the write path ---------------------------------------------------------


async def test_write_returns_before_the_embedding_and_recall_is_lexical_meanwhile() -> None:
    embedder = ConceptEmbedder()
    embedder.gate = asyncio.Event()  # the embedder hangs until the gate opens
    vectors = InMemoryVectorStore()
    store = hybrid(embedder=embedder, vectors=vectors, query_timeout=0.05)
    [entry] = await write_all(store, "I drove my new sedan to work")
    assert [e.id for e in await vectors.pending(SCOPE, 10)] == [entry.id]
    # The hung embedder holds neither the write nor the recall (lexical past the timeout).
    assert (await recall(store, "sedan")) == [entry.content]
    embedder.gate.set()
    assert await store.flush(10)
    assert await vectors.pending(SCOPE, 10) == []
    assert (await recall(store, "automobile", 1)) == [entry.content]
    await store.aclose()


async def test_writes_are_embedded_in_batches() -> None:
    embedder = ConceptEmbedder()
    embedder.gate = asyncio.Event()
    store = hybrid(embedder=embedder, batch_size=2)
    await write_all(store, *CORPUS)
    embedder.gate.set()
    assert await store.flush(10)
    assert all(len(batch) <= 2 for batch in embedder.calls)
    assert sum(len(batch) for batch in embedder.calls) >= len(CORPUS)
    await store.aclose()


async def test_a_failing_embedder_never_fails_write_and_keeps_entries_pending() -> None:
    embedder = ConceptEmbedder()
    embedder.failing = True
    vectors = InMemoryVectorStore()
    store = hybrid(embedder=embedder, vectors=vectors)
    entries = await write_all(store, *CORPUS)
    assert not await store.flush(0.2)  # still retrying
    assert {e.id for e in await vectors.pending(SCOPE, 10)} == {e.id for e in entries}
    embedder.failing = False  # the outage ends: the retries embed everything
    assert await store.flush(10)
    assert await vectors.pending(SCOPE, 10) == []
    assert (await recall(store, "automobile", 1)) == [CORPUS[0]]
    await store.aclose()


async def test_pending_entries_survive_a_new_store_and_get_embedded(
    redis_client: Any, keyspace: KeySpace
) -> None:
    down = ConceptEmbedder()
    down.failing = True
    first = hybrid(
        RedisRecallStore(redis_client, keyspace),
        down,
        vectors=RedisVectorStore(redis_client, keyspace),
    )
    await write_all(first, *CORPUS)
    await first.aclose()  # a crash or a shutdown with the embedder down

    vectors = RedisVectorStore(redis_client, keyspace)
    assert len(await vectors.pending(SCOPE, 10)) == len(CORPUS)
    second = hybrid(RedisRecallStore(redis_client, keyspace), ConceptEmbedder(), vectors=vectors)
    assert await second.flush(10)  # starting drains what the first store left
    assert await vectors.pending(SCOPE, 10) == []
    assert SCOPE not in await vectors.pending_scopes()
    assert (await recall(second, "automobile", 1)) == [CORPUS[0]]
    await second.aclose()


async def test_a_store_without_background_work_reads_vectors_and_writes_none(
    redis_client: Any, keyspace: KeySpace
) -> None:
    """The inspector's store: recall ranks with the vectors already stored and embeds
    nothing; a write leaves its entry pending for a process that embeds."""
    embedder = ConceptEmbedder()
    first = hybrid(
        RedisRecallStore(redis_client, keyspace),
        embedder,
        vectors=RedisVectorStore(redis_client, keyspace),
    )
    await write_all(first, *CORPUS[:3])
    assert await first.flush(10)
    await first.aclose()
    vectors = RedisVectorStore(redis_client, keyspace)
    reader = hybrid(
        RedisRecallStore(redis_client, keyspace), embedder, vectors=vectors, background=False
    )
    embedded = len(embedder.calls)
    assert (await recall(reader, "automobile", 1)) == [CORPUS[0]]  # by meaning
    await write_all(reader, CORPUS[4])
    assert await reader.flush(1)
    await asyncio.sleep(0.05)
    assert embedder.calls[embedded:] == [["automobile"]]  # the query's embedding only
    assert [e.content for e in await vectors.pending(SCOPE, 10)] == [CORPUS[4]]
    assert not reader._drains
    await reader.aclose()


async def test_an_upsert_is_re_embedded_and_delete_forgets_the_vector() -> None:
    store = hybrid()
    [entry] = await write_all(store, "I drove my new sedan to work")
    assert await store.flush(10)
    await store.write(WriteRequest(agent_id=AGENT, id=entry.id, content="a puppy at home"))
    assert await store.flush(10)
    assert (await recall(store, "hound", 1)) == ["a puppy at home"]
    assert await store.delete(entry.id, agent_id=AGENT)
    assert await recall(store, "hound") == []
    await store.aclose()


async def test_delete_needs_an_inner_store_that_can_delete() -> None:
    class WriteOnly:
        def __init__(self) -> None:
            self._inner = InMemoryRecallStore()
            self.write = self._inner.write
            self.recall = self._inner.recall
            self.list_entries = self._inner.list_entries

    store = hybrid(WriteOnly())  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError):
        await store.delete("mem_x", agent_id=AGENT)


# --- the recall contract ------------------------------------------------------------------


class _HybridConformance(RecallStoreConformance):
    """Honest differences: a query sharing no word with the scope still ranks by
    meaning rather than falling back to the newest entries (``falls_back_to_newest``),
    and recency is part of the fused score, so equally relevant entries do not tie:
    the newer scores higher (``ties_by_recency``, checked below by
    :func:`test_equally_relevant_entries_come_newest_first`). The recency fill,
    filters, ``min_score``, stems and dates (through the inner store) hold. ``seed``
    waits for the embeddings, so the ranking checks run on the hybrid ranking."""

    falls_back_to_newest: ClassVar[bool] = False
    ties_by_recency: ClassVar[bool] = False

    async def seed(self, store: RecallStore, requests: list[WriteRequest]) -> list[MemoryEntry]:
        entries = await super().seed(store, requests)
        assert isinstance(store, HybridRecallStore) and await store.flush(10)
        return entries


class TestHybridInMemory(_HybridConformance):
    @pytest.fixture
    async def recall_store(self) -> HybridRecallStore:
        return HybridRecallStore(InMemoryRecallStore(), HashedEmbedder())


class TestHybridRedis(_HybridConformance):
    @pytest.fixture
    async def recall_store(self, redis_client: Any, keyspace: KeySpace) -> HybridRecallStore:
        return HybridRecallStore(
            RedisRecallStore(redis_client, keyspace),
            HashedEmbedder(),
            vectors=RedisVectorStore(redis_client, keyspace),
        )


async def test_a_lexical_candidate_outside_the_vector_top_keeps_its_similarity() -> None:
    # candidates=1: the vector top holds only the closest entry (the pasta one). The
    # pizza entry matches both query words and is close in meaning too: it must be
    # scored on meaning as well, or it would lose to an entry found one way only.
    store = hybrid(candidates=1, weights=FusionWeights(recency=0.0))
    await write_all(store, "pizza dinner in the car", "pasta dinner ate")
    assert await store.flush(10)
    assert (await recall(store, "pizza dinner", 1)) == ["pizza dinner in the car"]


async def test_aclose_closes_an_owned_embedder_only() -> None:
    class Closable(ConceptEmbedder):
        closed = False

        async def aclose(self) -> None:
            self.closed = True

    borrowed, owned = Closable(), Closable()
    await hybrid(embedder=borrowed).aclose()
    await hybrid(embedder=owned, owns_embedder=True).aclose()
    assert (borrowed.closed, owned.closed) == (False, True)


# --- the contract's hybrid details ---------------------------------------------------------


async def test_equally_relevant_entries_come_newest_first() -> None:
    store = hybrid()
    written = await write_all(store, *["identical words here"] * 4)
    assert await store.flush(10)
    found = await store.recall(RecallRequest(agent_id=AGENT, query="words", limit=4))
    assert [r.entry.id for r in found] == [e.id for e in reversed(written)]
    assert all(r.score > 0 for r in found)
    first = await store.recall(RecallRequest(agent_id=AGENT, query="words", limit=1))
    assert [r.entry.id for r in first] == [written[-1].id]
    await store.aclose()


async def test_a_filter_applies_to_entries_found_by_meaning_only() -> None:
    store = hybrid()
    for content, who in (
        ("I drove my new sedan to work", "ann"),
        ("the automobile needs new tyres", "bob"),
        ("a vehicle blocked the road", "ann"),
        ("We adopted a puppy last spring", "bob"),
    ):
        await store.write(WriteRequest(agent_id=AGENT, content=content, metadata={"who": who}))
    assert await store.flush(10)
    found = await store.recall(
        RecallRequest(agent_id=AGENT, query="automobile", limit=2, filter={"who": "ann"})
    )
    # Both of ann's car entries, found by meaning; bob's exact word match is left out.
    assert {r.entry.content for r in found} == {
        "I drove my new sedan to work",
        "a vehicle blocked the road",
    }
    assert all(r.score > 0 and r.entry.metadata == {"who": "ann"} for r in found)
    await store.aclose()


async def test_a_filter_reaches_past_many_closer_entries_that_fail_it() -> None:
    store = hybrid(candidates=2)
    for i in range(30):
        await store.write(
            WriteRequest(agent_id=AGENT, content=f"sedan car {i}", metadata={"n": "x"})
        )
    await store.write(
        WriteRequest(agent_id=AGENT, content="an old vehicle and a dog", metadata={"n": "y"})
    )
    assert await store.flush(10)
    found = await store.recall(
        RecallRequest(agent_id=AGENT, query="automobile", limit=1, filter={"n": "y"})
    )
    assert [r.entry.content for r in found] == ["an old vehicle and a dog"]
    assert found[0].score > 0
    await store.aclose()


async def test_matches_by_meaning_come_before_the_recency_fill() -> None:
    store = hybrid()
    await write_all(store, "We adopted a puppy", "I drove my sedan", "grey weather", "cold tea")
    assert await store.flush(10)
    found = await store.recall(RecallRequest(agent_id=AGENT, query="automobile", limit=4))
    # The ConceptEmbedder's constant axis makes every entry a little similar: give
    # the store a query vector with nothing in common with the unrelated entries.
    assert found[0].entry.content == "I drove my sedan"
    assert len(found) == 4

    class Orthogonal(ConceptEmbedder):
        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            vectors = await super().embed(texts)
            return [[*v[:-1], 0.0] if any(v[:-1]) else v for v in vectors]

    strict = hybrid(embedder=Orthogonal())
    await write_all(strict, "We adopted a puppy", "I drove my sedan", "grey weather", "cold tea")
    assert await strict.flush(10)
    found = await strict.recall(RecallRequest(agent_id=AGENT, query="automobile", limit=3))
    assert [r.entry.content for r in found] == ["I drove my sedan", "cold tea", "grey weather"]
    assert found[0].score > 0 and [r.score for r in found[1:]] == [0.0, 0.0]
    # Each result says how it was found: the sedan by meaning only, the rest as the fill.
    assert [r.source for r in found] == ["vector", "recency", "recency"]
    only = await strict.recall(
        RecallRequest(agent_id=AGENT, query="automobile", limit=3, min_score=1e-9)
    )
    assert [r.entry.content for r in only] == ["I drove my sedan"]
    await strict.aclose()
    await store.aclose()


async def test_min_score_applies_to_the_fused_score() -> None:
    store = hybrid(weights=FusionWeights(recency=0.0))
    await write_all(store, "pizza night with friends", "pasta dinner at home", "grey weather")
    assert await store.flush(10)
    everything = await store.recall(RecallRequest(agent_id=AGENT, query="pizza", limit=3))
    # Found both ways: the best of each signal (1.0 + 1.5); by meaning only: less.
    assert everything[0].entry.content == "pizza night with friends"
    assert everything[0].score == pytest.approx(2.5)
    assert 0 < everything[1].score < 1.5
    kept = await store.recall(
        RecallRequest(agent_id=AGENT, query="pizza", limit=3, min_score=everything[1].score + 0.01)
    )
    assert [r.entry.content for r in kept] == ["pizza night with friends"]
    await store.aclose()


async def test_the_inner_store_is_asked_for_matches_only_then_for_the_fill() -> None:
    class Recording(InMemoryRecallStore):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[tuple[int, float]] = []

        async def recall(self, request: RecallRequest) -> list[RecallResult]:
            self.asked.append((request.limit, request.min_score))
            return await super().recall(request)

    inner = Recording()
    store = hybrid(inner, candidates=20)
    await write_all(store, *CORPUS)
    assert await store.flush(10)
    inner.asked.clear()
    await store.recall(RecallRequest(agent_id=AGENT, query="sedan", limit=3))
    assert inner.asked[0] == (20, pytest.approx(1e-9))
    # Every entry is a little similar to "sedan" (the constant axis): no fill asked.
    assert len(inner.asked) == 1
    await store.aclose()


@pytest.mark.integration
async def test_a_vector_search_during_a_redis_stall_gives_up_before_the_stall_ends(
    redis_server: Any,
) -> None:
    """The vector half of a hybrid recall keeps the same read deadline as the lexical
    half: a SIGSTOPped Redis fails the search once the deadline has passed, not at SIGCONT."""
    import redis.asyncio as aioredis

    client: Any = aioredis.Redis.from_url(redis_server.url)
    keyspace = KeySpace("stall")
    vectors = RedisVectorStore(client, keyspace, timeout=0.5)
    store = hybrid(RedisRecallStore(client, keyspace), ConceptEmbedder(), vectors=vectors)
    try:
        await write_all(store, *CORPUS)
        assert await store.flush(10)
        query = (await ConceptEmbedder().embed(["automobile"]))[0]
        search = lambda: vectors.search(SCOPE, query, ConceptEmbedder.name, 5)  # noqa: E731
        assert await during_a_stall(redis_server, search) == ["raised", "sigcont"]
    finally:
        await store.aclose()
        await client.aclose()


@pytest.mark.parametrize(
    "bad", [{"candidates": 0}, {"batch_size": 0}, {"query_timeout": 0}, {"retry_base": -1}]
)
def test_a_bad_policy_is_refused_when_built(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidPayloadError):
        HybridPolicy(**bad)


def test_the_store_follows_its_policy() -> None:
    policy = HybridPolicy(candidates=7, batch_size=3, query_timeout=0.5)
    store = HybridRecallStore(InMemoryRecallStore(), ConceptEmbedder(), policy=policy)
    assert (store.candidates, store.batch_size, store.query_timeout) == (7, 3, 0.5)
    assert store.weights is policy.weights and store.policy is policy
