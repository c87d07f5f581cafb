"""Vector stores (in memory, Redis: fakeredis and a real server): pending, put, search, cache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from jarvismem.keys import KeySpace
from jarvismem.recall.models import MemoryEntry
from jarvismem.recall.vectors import (
    InMemoryVectorStore,
    RedisVectorStore,
    VectorStore,
    decode_record,
    encode_record,
)

NAME = "test:axes"
SCOPE = KeySpace.recall_scope("default", "agent-1", None)


def unit(*values: float) -> list[float]:
    v = np.asarray(values, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


def entry(entry_id: str, content: str = "some fact") -> MemoryEntry:
    return MemoryEntry(agent_id="agent-1", id=entry_id, content=content)


@pytest.fixture(params=["memory", "redis"])
async def store(
    request: pytest.FixtureRequest, redis_client: Any, keyspace: KeySpace
) -> AsyncIterator[VectorStore]:
    """Each store; ``redis_client`` is fakeredis, then a real server."""
    if request.param == "memory":
        yield InMemoryVectorStore()
        return
    yield RedisVectorStore(redis_client, keyspace)


async def embedded(store: VectorStore, e: MemoryEntry, vector: list[float]) -> None:
    await store.mark_pending(SCOPE, e)
    assert await store.put(SCOPE, e, NAME, vector)


async def test_search_ranks_by_cosine(store: VectorStore) -> None:
    await embedded(store, entry("mem_x"), unit(1, 0, 0))
    await embedded(store, entry("mem_y"), unit(0, 1, 0))
    await embedded(store, entry("mem_xy"), unit(1, 1, 0))
    hits = await store.search(SCOPE, unit(1, 0.2, 0), NAME, 2)
    assert [h.entry.id for h in hits] == ["mem_x", "mem_xy"]
    assert hits[0].similarity > hits[1].similarity
    assert hits[0].entry.content == "some fact"


async def test_search_with_where_keeps_to_the_metadata_and_reaches_past_closer_rows(
    store: VectorStore,
) -> None:
    for i in range(20):  # closer to the query, but the wrong label
        e = MemoryEntry(agent_id="agent-1", id=f"mem_n{i}", content="x", metadata={"k": "no"})
        await embedded(store, e, unit(1, 0.01 * i, 0))
    far = MemoryEntry(agent_id="agent-1", id="mem_far", content="x", metadata={"k": "yes"})
    await embedded(store, far, unit(0.2, 1, 0))
    hits = await store.search(SCOPE, unit(1, 0, 0), NAME, 1, where={"k": "yes"})
    assert [h.entry.id for h in hits] == ["mem_far"]
    # ``include`` keeps to ``where`` too; without ``where`` the closest rows win.
    hits = await store.search(SCOPE, unit(1, 0, 0), NAME, 1, ["mem_n3"], where={"k": "yes"})
    assert [h.entry.id for h in hits] == ["mem_far"]
    assert [h.entry.id for h in await store.search(SCOPE, unit(1, 0, 0), NAME, 1)] == ["mem_n0"]
    assert await store.search(SCOPE, unit(1, 0, 0), NAME, 3, where={"k": "maybe"}) == []


async def test_search_sees_only_the_scope_and_the_embedder(store: VectorStore) -> None:
    await embedded(store, entry("mem_x"), unit(1, 0))
    other = KeySpace.recall_scope("default", "agent-2", None)
    assert await store.search(other, unit(1, 0), NAME, 5) == []
    assert await store.search(SCOPE, unit(1, 0), "another:model", 5) == []


async def test_pending_until_put_then_listed_no_more(store: VectorStore) -> None:
    e = entry("mem_p")
    await store.mark_pending(SCOPE, e)
    assert [p.id for p in await store.pending(SCOPE, 10)] == ["mem_p"]
    assert SCOPE in await store.pending_scopes()
    assert not await store.settle_scope(SCOPE)
    assert await store.put(SCOPE, e, NAME, unit(1, 0))
    assert await store.pending(SCOPE, 10) == []
    assert await store.settle_scope(SCOPE)
    assert SCOPE not in await store.pending_scopes()


async def test_a_vector_of_a_superseded_entry_is_not_stored(store: VectorStore) -> None:
    old = entry("mem_u", "old words")
    await store.mark_pending(SCOPE, old)
    new = entry("mem_u", "new words")
    await store.mark_pending(SCOPE, new)
    assert not await store.put(SCOPE, old, NAME, unit(1, 0))
    assert [p.content for p in await store.pending(SCOPE, 10)] == ["new words"]
    assert await store.put(SCOPE, new, NAME, unit(0, 1))
    [hit] = await store.search(SCOPE, unit(0, 1), NAME, 5)
    assert hit.entry.content == "new words"


async def test_an_upsert_drops_the_old_vector_until_re_embedded(store: VectorStore) -> None:
    await embedded(store, entry("mem_u", "old"), unit(1, 0))
    assert len(await store.search(SCOPE, unit(1, 0), NAME, 5)) == 1
    await store.mark_pending(SCOPE, entry("mem_u", "new"))
    assert await store.search(SCOPE, unit(1, 0), NAME, 5) == []


async def test_delete_forgets_vector_and_pending(store: VectorStore) -> None:
    await embedded(store, entry("mem_a"), unit(1, 0))
    await embedded(store, entry("mem_b"), unit(0.9, 0.1))
    await store.mark_pending(SCOPE, entry("mem_c"))
    await store.delete(SCOPE, "mem_a")
    await store.delete(SCOPE, "mem_c")
    assert [h.entry.id for h in await store.search(SCOPE, unit(1, 0), NAME, 5)] == ["mem_b"]
    assert await store.pending(SCOPE, 10) == []


async def test_many_vectors_grow_and_shrink_the_matrix(store: VectorStore) -> None:
    rng = np.random.default_rng(7)
    vectors = {f"mem_{i}": unit(*rng.normal(size=8)) for i in range(40)}
    for entry_id, vector in vectors.items():
        await embedded(store, entry(entry_id), vector)
    for i in range(0, 40, 3):
        await store.delete(SCOPE, f"mem_{i}")
    for entry_id, vector in vectors.items():
        hits = await store.search(SCOPE, vector, NAME, 1)
        deleted = int(entry_id.split("_")[1]) % 3 == 0
        assert deleted or hits[0].entry.id == entry_id, entry_id


async def test_redis_search_sees_writes_of_another_process(
    redis_client: Any, keyspace: KeySpace
) -> None:
    mine, theirs = (
        RedisVectorStore(redis_client, keyspace),
        RedisVectorStore(redis_client, keyspace),
    )
    await embedded(mine, entry("mem_1"), unit(1, 0))
    assert [h.entry.id for h in await mine.search(SCOPE, unit(0, 1), NAME, 5)] == ["mem_1"]
    await embedded(theirs, entry("mem_2"), unit(0, 1))  # mine's cache is now stale
    assert [h.entry.id for h in await mine.search(SCOPE, unit(0, 1), NAME, 5)] == [
        "mem_2",
        "mem_1",
    ]
    await theirs.delete(SCOPE, "mem_2")
    assert [h.entry.id for h in await mine.search(SCOPE, unit(0, 1), NAME, 5)] == ["mem_1"]


async def test_redis_search_with_a_current_cache_reads_only_the_version(
    redis_client: Any, keyspace: KeySpace
) -> None:
    store = RedisVectorStore(redis_client, keyspace)
    await embedded(store, entry("mem_1"), unit(1, 0))
    await store.search(SCOPE, unit(1, 0), NAME, 5)  # loads the cache
    await embedded(store, entry("mem_2"), unit(0, 1))  # applied to the cache in place
    calls: list[str] = []
    original = store._load

    async def counting_load(*args: Any, **kwargs: Any) -> Any:
        calls.append("load")
        return await original(*args, **kwargs)

    store._load = counting_load  # type: ignore[method-assign]
    hits = await store.search(SCOPE, unit(0, 1), NAME, 5)
    assert [h.entry.id for h in hits] == ["mem_2", "mem_1"] and calls == []


async def test_redis_keys_share_the_scope_hash_tag(redis_client: Any, keyspace: KeySpace) -> None:
    keys = RedisVectorStore(redis_client, keyspace).keys(SCOPE)
    tag = keyspace.recall_entries(SCOPE).split("{")[1].split("}")[0]
    assert all(k.split("{")[1].split("}")[0] == tag for k in keys)


def test_a_record_round_trips() -> None:
    e = entry("mem_r", "text with \x1f inside")
    name, entry_json, vector = decode_record(encode_record(e, NAME, [0.5, -0.25]))
    assert name == NAME and MemoryEntry.model_validate_json(entry_json) == e
    assert vector.tolist() == [0.5, -0.25]


async def test_search_also_scores_the_included_ids(store: VectorStore) -> None:
    await embedded(store, entry("mem_near"), unit(1, 0))
    await embedded(store, entry("mem_far"), unit(0, 1))
    hits = await store.search(SCOPE, unit(1, 0), NAME, 1, include=["mem_far", "mem_none"])
    assert [h.entry.id for h in hits] == ["mem_near", "mem_far"]
    assert hits[1].similarity == pytest.approx(0.0, abs=1e-6)
