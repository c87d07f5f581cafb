"""A store put whose recall-index write fails is repaired, without a second put.

The item and a record of the index change it needs are written by one script in
the store's slot; the index write follows. When that write fails (its Redis is
down), the record stays, and the next query search (or put) applies it before
the index is read: search never finds an item by text it no longer holds, nor
misses it by its new text. On a real server with the failure injected at the
Redis seam, and on a 3-master cluster whose index master is SIGKILLed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions
from redis.asyncio.cluster import RedisCluster

from jarvismem.defaults import RECALL_NAMESPACE
from jarvismem.errors import BackendUnavailableError
from jarvismem.integrations.langgraph import JarvisMemStore, StoreIndex
from jarvismem.keys import KeySpace
from jarvismem.recall import RedisRecallStore
from tests.conftest import require_backend
from tests.harness.ha import ClusterBed, key_slot

pytestmark = pytest.mark.integration

NS = ("users", "u1")


class _Broken:
    """Stands in for a registered script: every call fails as a lost connection would."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise redis.exceptions.ConnectionError("injected: the index's Redis is unreachable")


async def _texts(store: JarvisMemStore, query: str) -> list[Any]:
    return [item.value["text"] for item in await store.asearch(NS, query=query)]


async def _put(store: JarvisMemStore, text: str) -> BaseException | None:
    """Put the item; the error it raised, if any (asserted after the state is)."""
    try:
        await store.aput(NS, "drink", {"text": text})
    except BackendUnavailableError as exc:
        return exc
    return None


async def test_a_put_whose_index_write_failed_is_repaired_by_the_next_search(
    real_redis: Any, keyspace: KeySpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    recall = RedisRecallStore(real_redis, keyspace)
    store = JarvisMemStore(real_redis, keyspace, index=StoreIndex(recall=recall))
    await store.aput(NS, "drink", {"text": "coffee beans"})
    script = recall._script
    monkeypatch.setattr(recall, "_script", _Broken())
    raised = await _put(store, "green tea")
    # The change the index missed is recorded beside the item.
    assert await real_redis.hgetall(keyspace.lg_store_reindex("default")) == {
        b"users.u1\x00drink": b"green tea"
    }
    monkeypatch.setattr(recall, "_script", script)

    item = await store.aget(NS, "drink")
    assert item is not None and item.value == {"text": "green tea"}
    assert await _texts(store, "tea") == ["green tea"]
    assert await _texts(store, "coffee") == []
    assert await real_redis.hgetall(keyspace.lg_store_reindex("default")) == {}
    # The item and its repair record landed together: the put did what it was asked.
    assert raised is None


async def test_a_delete_whose_index_write_failed_is_repaired(
    real_redis: Any, keyspace: KeySpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    recall = RedisRecallStore(real_redis, keyspace)
    store = JarvisMemStore(real_redis, keyspace, index=StoreIndex(recall=recall))
    await store.aput(NS, "drink", {"text": "coffee beans"})
    await store.aput(NS, "food", {"text": "coffee cake"})
    script = recall._script
    monkeypatch.setattr(recall, "_script", _Broken())
    await store.adelete(NS, "drink")
    monkeypatch.setattr(recall, "_script", script)
    assert await _texts(store, "coffee") == ["coffee cake"]
    entries = await recall.list_entries(f"lgstore-{store.name}", namespace=RECALL_NAMESPACE)
    assert [e.content for e in entries] == ["coffee cake"]


async def test_reads_of_items_do_not_need_the_index(
    real_redis: Any, keyspace: KeySpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An item that expires is taken out of the index later (recorded, not done on the
    spot), so a get or a namespace listing never fails because the index is down."""
    recall = RedisRecallStore(real_redis, keyspace)
    store = JarvisMemStore(real_redis, keyspace, index=StoreIndex(recall=recall))
    await store.aput(NS, "soon", {"text": "coffee beans"}, ttl=0.0001)  # 6 ms
    await store.aput(NS, "kept", {"text": "green tea"})
    await real_redis.zadd(keyspace.lg_store_expiry("default"), {"users.u1\x00soon": 1})
    monkeypatch.setattr(recall, "_script", _Broken())
    item = await store.aget(NS, "kept")
    assert item is not None and item.value == {"text": "green tea"}
    assert await store.alist_namespaces() == [NS]
    monkeypatch.undo()
    assert await _texts(store, "coffee") == []
    entries = await recall.list_entries(f"lgstore-{store.name}", namespace=RECALL_NAMESPACE)
    assert [e.content for e in entries] == ["green tea"]


# --- a real 3-master cluster: the index's master is SIGKILLed ------------------------------


def _split_store_name(bed: ClusterBed, keyspace: KeySpace) -> str:
    """A store name whose item slot and recall-index slot have different masters."""
    for n in range(200):
        name = f"s{n}"
        items = key_slot(keyspace.lg_store_items(name))
        scope = KeySpace.recall_scope(RECALL_NAMESPACE, f"lgstore-{name}", None)
        index = key_slot(keyspace.recall_entries(scope))
        if bed.primary_for_slot(items).port != bed.primary_for_slot(index).port:
            return name
    raise AssertionError("no store name splits the two slots")


async def test_on_a_cluster_a_put_during_the_index_masters_death_is_repaired(
    tmp_path: Path, keyspace: KeySpace
) -> None:
    for binary in ("redis-server", "redis-cli"):
        require_backend(shutil.which(binary) is not None, f"the {binary} binary")
    with ClusterBed(tmp_path, replicas=0, full_coverage=False) as bed:
        name = _split_store_name(bed, keyspace)
        scope = KeySpace.recall_scope(RECALL_NAMESPACE, f"lgstore-{name}", None)
        index_master = bed.primary_for_slot(key_slot(keyspace.recall_entries(scope))).port
        seed = next(p for p in bed.ports if p != index_master)
        client: Any = RedisCluster(host="127.0.0.1", port=seed)
        try:
            store = JarvisMemStore(client, keyspace, name=name)
            await store.aput(NS, "drink", {"text": "coffee beans"})
            bed.kill(index_master)
            raised = await _put(store, "green tea")
            assert await client.hgetall(keyspace.lg_store_reindex(name)) == {
                b"users.u1\x00drink": b"green tea"
            }
            bed.restart(index_master)
            bed.wait_healthy()

            item = await store.aget(NS, "drink")
            assert item is not None and item.value == {"text": "green tea"}
            assert await _texts(store, "tea") == ["green tea"]
            assert await _texts(store, "coffee") == []
            assert raised is None
        finally:
            await client.aclose()
