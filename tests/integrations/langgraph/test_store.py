"""JarvisMemStore against LangGraph's documented BaseStore contract.

No store test suite ships in a LangGraph package, so this is one built from the
contract: put/get/delete, namespace listing (prefix, suffix, wildcards,
max_depth, limit/offset), search by filter (values, nested objects, operators)
and by query (lexical, through the recall tier), limit/offset, TTL and its
refresh on read. Every test runs on fakeredis and on a real server; one runs on
the 3-master cluster (one store, one slot).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp
from redis.asyncio.cluster import RedisCluster
from redis.cluster import key_slot

from jarvismem.errors import InvalidIdError, InvalidPayloadError
from jarvismem.integrations.langgraph import JarvisMemStore, StoreIndex
from jarvismem.keys import KeySpace
from jarvismem.recall import InMemoryRecallStore


@pytest.fixture
async def store(redis_client: Any, keyspace: KeySpace) -> JarvisMemStore:
    return JarvisMemStore(redis_client, keyspace)


# --- put / get / delete ------------------------------------------------------------------


async def test_put_then_get_returns_the_item(store: JarvisMemStore) -> None:
    await store.aput(("users", "u1"), "prefs", {"theme": "dark", "n": 3})
    item = await store.aget(("users", "u1"), "prefs")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (
        ("users", "u1"),
        "prefs",
        {"theme": "dark", "n": 3},
    )
    assert item.created_at == item.updated_at


async def test_an_update_keeps_the_creation_time(store: JarvisMemStore) -> None:
    await store.aput(("u",), "k", {"v": 1})
    first = await store.aget(("u",), "k")
    await asyncio.sleep(0.002)  # distinct millisecond stamps, not a timing assertion
    await store.aput(("u",), "k", {"v": 2})
    second = await store.aget(("u",), "k")
    assert first is not None and second is not None
    assert second.value == {"v": 2}
    assert second.created_at == first.created_at < second.updated_at


async def test_a_missing_item_is_none_and_delete_removes(store: JarvisMemStore) -> None:
    assert await store.aget(("u",), "nope") is None
    await store.aput(("u",), "k", {"v": 1})
    await store.adelete(("u",), "k")
    assert await store.aget(("u",), "k") is None
    assert await store.alist_namespaces() == []


async def test_namespaces_keep_items_apart(store: JarvisMemStore) -> None:
    await store.aput(("a", "b"), "k", {"v": "ab"})
    await store.aput(("a", "bc"), "k", {"v": "abc"})
    got = [await store.aget(ns, "k") for ns in (("a", "b"), ("a", "bc"))]
    assert [i.value["v"] for i in got if i] == ["ab", "abc"]
    # NUL joins a namespace and a key: a key holding one is refused, never aliased.
    with pytest.raises(InvalidIdError, match="store key"):
        await store.aput(("a",), "b\x00k", {"v": "odd key"})
    assert await store.aget(("a", "b"), "k") is not None


async def test_bad_namespaces_and_values_are_refused(store: JarvisMemStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        await store.aput(("a.b",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        await store.abatch([PutOp(("a", ""), "k", {"v": 1})])  # an op given directly
    with pytest.raises(InvalidPayloadError, match="JSON"):
        await store.aput(("a",), "k", {"v": object()})


async def test_a_batch_answers_in_order_and_reads_before_its_puts(store: JarvisMemStore) -> None:
    await store.aput(("a",), "k", {"v": "old"})
    results = await store.abatch(
        [PutOp(("a",), "k", {"v": "new"}), GetOp(("a",), "k"), SearchOp(("a",))]
    )
    put_result, got, found = results
    assert put_result is None
    assert got is not None and got.value == {"v": "old"}  # type: ignore[union-attr]
    assert [i.value for i in found] == [{"v": "old"}]  # type: ignore[union-attr]
    item = await store.aget(("a",), "k")
    assert item is not None and item.value == {"v": "new"}


# --- list_namespaces ---------------------------------------------------------------------


async def _tree(store: JarvisMemStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "e"), ("x", "b", "c"), ("y",)]:
        await store.aput(ns, "k", {"v": 1})


async def test_list_namespaces_all_sorted(store: JarvisMemStore) -> None:
    await _tree(store)
    assert await store.alist_namespaces() == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "e"),
        ("x", "b", "c"),
        ("y",),
    ]


async def test_list_namespaces_by_prefix_suffix_and_wildcard(store: JarvisMemStore) -> None:
    await _tree(store)
    assert await store.alist_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d")]
    assert await store.alist_namespaces(suffix=("c",)) == [("a", "b", "c"), ("x", "b", "c")]
    assert await store.alist_namespaces(prefix=("*", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("x", "b", "c"),
    ]
    assert await store.alist_namespaces(prefix=("a",), suffix=("d",)) == [("a", "b", "d")]


async def test_list_namespaces_max_depth_limit_offset(store: JarvisMemStore) -> None:
    await _tree(store)
    assert await store.alist_namespaces(max_depth=1) == [("a",), ("x",), ("y",)]
    assert await store.alist_namespaces(max_depth=2, prefix=("a",)) == [("a", "b"), ("a", "e")]
    assert await store.alist_namespaces(limit=2, offset=1) == [("a", "b", "d"), ("a", "e")]


# --- search --------------------------------------------------------------------------------


async def test_search_by_prefix_covers_sub_namespaces_only(store: JarvisMemStore) -> None:
    await store.aput(("docs",), "1", {"t": "root"})
    await store.aput(("docs", "eng"), "2", {"t": "eng"})
    await store.aput(("docsx",), "3", {"t": "sibling"})
    found = await store.asearch(("docs",))
    assert sorted(i.value["t"] for i in found) == ["eng", "root"]
    assert len(await store.asearch(())) == 3


async def test_search_lists_the_most_recently_updated_first_with_limit_offset(
    store: JarvisMemStore,
) -> None:
    for n in range(5):
        await store.aput(("d",), f"k{n}", {"n": n})
        await asyncio.sleep(0.002)  # distinct update stamps
    assert [i.value["n"] for i in await store.asearch(("d",), limit=2)] == [4, 3]
    assert [i.value["n"] for i in await store.asearch(("d",), limit=2, offset=2)] == [2, 1]
    assert all(i.score is None for i in await store.asearch(("d",)))


async def test_search_by_filter(store: JarvisMemStore) -> None:
    await store.aput(("p",), "1", {"color": "red", "price": 5, "meta": {"tag": "a", "x": 1}})
    await store.aput(("p",), "2", {"color": "blue", "price": 15, "meta": {"tag": "b"}})
    await store.aput(("p",), "3", {"color": "red", "price": 25})

    async def keys(flt: dict[str, Any]) -> list[str]:
        return sorted(i.key for i in await store.asearch(("p",), filter=flt))

    assert await keys({"color": "red"}) == ["1", "3"]
    assert await keys({"meta": {"tag": "a"}}) == ["1"]
    assert await keys({"price": {"$gt": 5}}) == ["2", "3"]
    assert await keys({"price": {"$gte": 5, "$lt": 25}}) == ["1", "2"]
    assert await keys({"price": {"$lte": 5}}) == ["1"]
    assert await keys({"color": {"$ne": "red"}}) == ["2"]
    assert await keys({"color": {"$eq": "blue"}}) == ["2"]
    assert await keys({"color": "red", "price": {"$gt": 10}}) == ["3"]
    with pytest.raises(InvalidPayloadError, match="operator"):
        await keys({"price": {"$in": [5]}})


async def test_search_by_query_ranks_lexical_matches(store: JarvisMemStore) -> None:
    await store.aput(("m", "u1"), "1", {"text": "the user prefers dark roast coffee"})
    await store.aput(("m", "u1"), "2", {"text": "meeting moved to thursday"})
    await store.aput(("m", "u2"), "3", {"text": "coffee coffee with oat milk"})
    found = await store.asearch(("m",), query="coffee")
    assert [i.key for i in found] == ["3", "1"]
    assert all(i.score is not None and i.score > 0 for i in found)
    assert [i.key for i in await store.asearch(("m", "u1"), query="coffee")] == ["1"]
    assert await store.asearch(("m",), query="volcano") == []
    only = await store.asearch(("m",), query="coffee", filter={"text": {"$ne": "x"}}, limit=1)
    assert [i.key for i in only] == ["3"]


async def test_index_choices_decide_what_query_search_sees(store: JarvisMemStore) -> None:
    await store.aput(("m",), "hidden", {"text": "secret coffee"}, index=False)
    await store.aput(("m",), "title", {"title": "coffee", "body": "tea"}, index=["body"])
    assert [i.key for i in await store.asearch(("m",), query="coffee")] == []
    assert [i.key for i in await store.asearch(("m",), query="tea")] == ["title"]
    await store.adelete(("m",), "title")
    assert await store.asearch(("m",), query="tea") == []


async def test_query_search_uses_the_recall_store_given(
    redis_client: Any, keyspace: KeySpace
) -> None:
    recall = InMemoryRecallStore()
    store = JarvisMemStore(redis_client, keyspace, index=StoreIndex(recall=recall, agent="facts"))
    await store.aput(("m",), "1", {"text": "sourdough starter feeding schedule"})
    entries = await recall.list_entries("facts")
    assert [e.content for e in entries] == ["sourdough starter feeding schedule"]
    assert [i.key for i in await store.asearch(("m",), query="sourdough")] == ["1"]


async def test_the_index_fields_given_are_what_a_plain_put_indexes(
    redis_client: Any, keyspace: KeySpace
) -> None:
    recall = InMemoryRecallStore()
    index = StoreIndex(recall=recall, namespace="lg-facts", agent="facts", fields=("body",))
    store = JarvisMemStore(redis_client, keyspace, index=index)
    await store.aput(("m",), "1", {"title": "coffee", "body": "tea"})
    assert [e.content for e in await recall.list_entries("facts", None, "lg-facts")] == ["tea"]
    assert [i.key for i in await store.asearch(("m",), query="tea")] == ["1"]
    assert await store.asearch(("m",), query="coffee") == []


# --- TTL -------------------------------------------------------------------------------------


async def _deadline(redis: Any, keyspace: KeySpace, member: str) -> float | None:
    score: float | None = await redis.zscore(keyspace.lg_store_expiry("default"), member)
    return score


async def test_ttl_is_supported_and_expired_items_are_gone(
    store: JarvisMemStore, redis_client: Any, keyspace: KeySpace
) -> None:
    assert store.supports_ttl
    await store.aput(("t",), "k", {"v": 1}, ttl=5)  # minutes
    await store.aput(("t",), "keep", {"v": "coffee"})
    deadline = await _deadline(redis_client, keyspace, "t\x00k")
    assert deadline is not None and deadline > time.time() * 1000 + 4 * 60_000
    # Expire it without waiting: move its deadline into the past.
    await redis_client.zadd(keyspace.lg_store_expiry("default"), {"t\x00k": 1})
    assert await store.aget(("t",), "k") is None
    assert await redis_client.hlen(keyspace.lg_store_items("default")) == 1  # swept away
    assert [i.key for i in await store.asearch(("t",))] == ["keep"]
    assert await store.alist_namespaces() == [("t",)]


async def test_reads_refresh_the_ttl_unless_asked_not_to(
    store: JarvisMemStore, redis_client: Any, keyspace: KeySpace
) -> None:
    await store.aput(("t",), "k", {"v": "coffee"}, ttl=10)
    soon = time.time() * 1000 + 60_000
    expiry = keyspace.lg_store_expiry("default")
    await redis_client.zadd(expiry, {"t\x00k": soon})
    await store.aget(("t",), "k", refresh_ttl=False)
    await store.asearch(("t",), refresh_ttl=False)
    assert await _deadline(redis_client, keyspace, "t\x00k") == soon
    await store.aget(("t",), "k")
    refreshed = await _deadline(redis_client, keyspace, "t\x00k")
    assert refreshed is not None and refreshed > soon + 8 * 60_000
    await redis_client.zadd(expiry, {"t\x00k": soon})
    await store.asearch(("t",), query="coffee")
    searched = await _deadline(redis_client, keyspace, "t\x00k")
    assert searched is not None and searched > soon + 8 * 60_000


async def test_a_ttl_config_gives_the_default_ttl(redis_client: Any, keyspace: KeySpace) -> None:
    store = JarvisMemStore(redis_client, keyspace, ttl={"default_ttl": 2})
    await store.aput(("t",), "k", {"v": 1})
    deadline = await _deadline(redis_client, keyspace, "t\x00k")
    assert deadline is not None and deadline <= time.time() * 1000 + 2 * 60_000


# --- cluster, sync ---------------------------------------------------------------------------


def test_a_store_is_one_cluster_slot(keyspace: KeySpace) -> None:
    keys = [
        keyspace.lg_store_items("s"),
        keyspace.lg_store_index("s"),
        keyspace.lg_store_expiry("s"),
        keyspace.lg_store_namespaces("s"),
    ]
    assert len({key_slot(k.encode()) for k in keys}) == 1


@pytest.mark.integration
async def test_the_store_works_on_a_redis_cluster(
    cluster: RedisCluster, keyspace: KeySpace
) -> None:
    store = JarvisMemStore(cluster, keyspace, name="clustered")
    try:
        await store.aput(("a", "b"), "k", {"text": "glacier hiking"}, ttl=5)
        assert [i.key for i in await store.asearch(("a",), query="glacier")] == ["k"]
        assert await store.alist_namespaces() == [("a", "b")]
        await store.adelete(("a", "b"), "k")
        assert await store.aget(("a", "b"), "k") is None
    finally:
        keys = await cluster.keys(f"jm:{keyspace.namespace}:*", target_nodes=RedisCluster.PRIMARIES)
        for key in keys:
            await cluster.delete(key)


async def test_sync_calls_from_the_event_loop_thread_are_refused(store: JarvisMemStore) -> None:
    with pytest.raises(asyncio.InvalidStateError, match="is async"):
        store.get(("a",), "k")
