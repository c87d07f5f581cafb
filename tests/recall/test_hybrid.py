"""Hybrid recall: fusion, embedding off the write path, durability of pending entries."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from jarvismem.errors import LLMError
from jarvismem.keys import KeySpace
from jarvismem.recall import InMemoryRecallStore, RecallRequest, RedisRecallStore, WriteRequest
from jarvismem.recall.hybrid import FusionWeights, HybridRecallStore, fuse
from jarvismem.recall.models import MemoryEntry, RecallResult
from jarvismem.recall.stores import RecallStore
from jarvismem.recall.vectors import InMemoryVectorStore, RedisVectorStore, VectorHit
from jarvismem.testing.fake_llm import hashed_embedding
from jarvismem.testing.recall_conformance import RecallStoreConformance

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
    """The fake LLM's hashed bag of words, as an in-process embedder."""

    name = "test:hashed"
    dimensions = 64

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [hashed_embedding(t) for t in texts]


def hybrid(inner: RecallStore | None = None, embedder: Any = None, **kw: Any) -> HybridRecallStore:
    return HybridRecallStore(
        inner or InMemoryRecallStore(),
        embedder or ConceptEmbedder(),
        retry_base=0.01,
        retry_cap=0.02,
        **kw,
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


def test_fuse_ignores_negative_similarity() -> None:
    a = _entry(1, 100)
    [result] = fuse([], [VectorHit(a, -0.3)], 5, FusionWeights(recency=0.0))
    assert result.score == 0.0


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
    """Honest differences: meaning brings entries that share no word with the query
    (no "only matches" rule), and a query matching no word ranks by meaning rather
    than falling back to the newest entries. ``seed`` waits for the embeddings, so
    the ranking checks run on the hybrid ranking, not the lexical one."""

    ranks_only_matches: ClassVar[bool] = False
    falls_back_to_newest: ClassVar[bool] = False

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
