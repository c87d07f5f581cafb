"""RedisRecallStore: the BM25 index layout in Redis, TTL, and real-server behaviour.

Layout tests run on fakeredis and the real server (``redis_client``); the rest
needs real-server semantics (Lua atomicity under concurrency, a second client
seeing the same data) and runs on the real server only (``real_redis``). Each
test has its own namespace, whose keys are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from jarvismem.errors import InvalidIdError, InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.recall import redis_store
from jarvismem.recall.bm25 import tokenize
from jarvismem.recall.models import MemoryEntry, RecallRequest, WriteRequest
from jarvismem.recall.redis_store import RedisRecallStore, index_signature
from jarvismem.recall.stores import entry_tokens
from tests.conftest import REAL_REDIS_URL, during_a_stall

# --- Redis layout ---------------------------------------------------------------------------


def indexed_length(entry: MemoryEntry) -> int:
    """An entry's length in the index: content tokens and the three of its day."""
    return len(entry_tokens(entry, ()))


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
    found = await store.recall(RecallRequest(agent_id="a1", query="walrus color", limit=1))
    assert [r.entry.id for r in found] == [target.id]
    # Three round trips: the heads of the query's tokens (with the statistics and
    # the index signature), the chunks they name, then the top entries. Entry
    # lengths travel inside the postings.
    assert [c[0] for c in recorder.calls] == ["hmget", "hmget", "hmget"]
    entries_key, postings_key = store.keys("default", "a1", None)
    (_, k1, a1), (_, k2, a2), (_, k3, a3) = recorder.calls
    walrus, color = tokenize("walrus color")
    assert (k1, a1[0]) == (postings_key, [walrus, color, "__n__", "__sum__", "__v__"])
    assert (k2, a2[0]) == (postings_key, [f"{walrus}#1"])
    assert (k3, a3[0]) == (entries_key, [target.id])


async def test_redis_fallback_reads_only_the_newest_entries(
    redis_client: Any, keyspace: KeySpace
) -> None:
    # A query that matches nothing costs three round trips (postings, __recent__,
    # the entries it names), not a scan of the scope.
    recorder = RecordingRedis(redis_client)
    store = RedisRecallStore(recorder, keyspace)  # type: ignore[arg-type]
    written = [
        await store.write(WriteRequest(agent_id="a1", content=f"routine entry number {i}"))
        for i in range(30)
    ]
    recorder.calls.clear()
    found = await store.recall(RecallRequest(agent_id="a1", query="hello", limit=3))
    assert [r.entry.id for r in found] == [e.id for e in reversed(written[-3:])]
    assert [r.score for r in found] == [0.0, 0.0, 0.0]
    assert [c[0] for c in recorder.calls] == ["hmget", "hget", "hmget"]
    entries_key, postings_key = store.keys("default", "a1", None)
    assert recorder.calls[1][1:] == (postings_key, ("__recent__",))
    assert recorder.calls[2][1] == entries_key
    recent = (await redis_client.hget(postings_key, "__recent__")).decode().split()
    assert recent == [e.id for e in reversed(written)]


async def test_redis_results_say_they_are_a_word_match_or_the_fill(
    redis_client: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(redis_client, keyspace)
    await store.write(WriteRequest(agent_id="a1", content="the falcon project is late"))
    await store.write(WriteRequest(agent_id="a1", content="lunch at noon"))
    found = await store.recall(RecallRequest(agent_id="a1", query="falcon", limit=2))
    assert [(r.entry.content, r.source) for r in found] == [
        ("the falcon project is late", "lexical"),
        ("lunch at noon", "recency"),
    ]
    nothing = await store.recall(RecallRequest(agent_id="a1", query="zebra", limit=1))
    assert [r.source for r in nothing] == ["recency"]


async def test_redis_recency_list_is_capped_and_forgets_deleted_entries(
    redis_client: Any, keyspace: KeySpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_store, "RECENT_KEPT", 4)
    store = RedisRecallStore(redis_client, keyspace)
    ids = [
        (await store.write(WriteRequest(agent_id="a1", content=f"fact {i}"))).id for i in range(6)
    ]
    _, postings_key = store.keys("default", "a1", None)

    async def recent() -> list[str]:
        raw = await redis_client.hget(postings_key, "__recent__")
        return [] if raw is None else raw.decode().split()

    assert await recent() == ids[:1:-1]  # the 4 newest
    assert await store.delete(ids[4], agent_id="a1")
    assert await recent() == [ids[5], ids[3], ids[2]]
    # More wanted than the list holds: the whole scope is read, still newest first.
    found = await store.recall(RecallRequest(agent_id="a1", query="hello", limit=10))
    assert [r.entry.id for r in found] == [ids[5], ids[3], ids[2], ids[1], ids[0]]


async def test_redis_fallback_works_on_a_scope_indexed_before_the_recency_list(
    redis_client: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(redis_client, keyspace)
    ids = [
        (await store.write(WriteRequest(agent_id="a1", content=f"fact {i}"))).id for i in range(3)
    ]
    _, postings_key = store.keys("default", "a1", None)
    await redis_client.hdel(postings_key, "__recent__")  # as an older version left it
    found = await store.recall(RecallRequest(agent_id="a1", query="hello", limit=2))
    assert [r.entry.id for r in found] == [ids[2], ids[1]]


async def test_redis_upsert_takes_old_words_out_of_the_index(
    redis_client: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(redis_client, keyspace)
    entry = await store.write(WriteRequest(agent_id="a1", content="zebra stripes"))
    await store.write(WriteRequest(agent_id="a1", id=entry.id, content="giraffe"))
    _, postings_key = store.keys("default", "a1", None)
    fields = {f.decode() for f in await redis_client.hkeys(postings_key)}
    assert not {f for f in fields if f.startswith(("zebra", "stripe"))}, fields
    assert tokenize("giraffe")[0] in fields
    assert await redis_client.hget(postings_key, "__n__") == b"1"
    [kept] = await store.list_entries("a1")
    assert await redis_client.hget(postings_key, "__sum__") == str(indexed_length(kept)).encode()


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


async def test_redis_keys_share_one_cluster_slot(fake_redis: Any, keyspace: KeySpace) -> None:
    store = RedisRecallStore(fake_redis, keyspace)
    entries_key, postings_key = store.keys("ns", "a1", "s1")
    tag = entries_key[entries_key.index("{") : entries_key.index("}") + 1]
    assert tag in postings_key and tag == "{recall:ns:a1:s1}"


# --- construction and validation ------------------------------------------------------------


@pytest.mark.parametrize("ttl", [0, -5])
def test_a_non_positive_ttl_is_refused(fake_redis: Any, keyspace: KeySpace, ttl: int) -> None:
    with pytest.raises(InvalidPayloadError, match="ttl_seconds"):
        RedisRecallStore(fake_redis, keyspace, ttl_seconds=ttl)


async def test_delete_refuses_an_unsafe_entry_id_before_touching_redis(
    real_redis: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(real_redis, keyspace)
    with pytest.raises(InvalidIdError):
        await store.delete("../mem", agent_id="a1")
    assert [k async for k in real_redis.scan_iter(match=f"jm:{keyspace.namespace}:*")] == []


async def test_keys_live_under_the_tenant_namespace(real_redis: Any, keyspace: KeySpace) -> None:
    # Namespace cleanup and tenant isolation both rely on this prefix.
    store = RedisRecallStore(real_redis, keyspace)
    await store.write(WriteRequest(agent_id="a1", session_id="s1", content="prefixed fact"))
    found = sorted(
        [k.decode() async for k in real_redis.scan_iter(match=f"jm:{keyspace.namespace}:*")]
    )
    assert found == sorted(store.keys("default", "a1", "s1"))


# --- the index bookkeeping on the real server ---------------------------------------------


async def test_deleting_every_entry_empties_the_index(real_redis: Any, keyspace: KeySpace) -> None:
    store = RedisRecallStore(real_redis, keyspace)
    ids = [
        (await store.write(WriteRequest(agent_id="a1", content=text))).id
        for text in ("otters hold hands", "otters sleep floating", "sea urchins")
    ]
    for entry_id in ids:
        assert await store.delete(entry_id, agent_id="a1") is True
    entries_key, postings_key = store.keys("default", "a1", None)
    assert await real_redis.hlen(entries_key) == 0
    left = {k.decode(): v.decode() for k, v in (await real_redis.hgetall(postings_key)).items()}
    assert left == {"__n__": "0", "__sum__": "0", "__v__": index_signature(())}
    assert await store.recall(RecallRequest(agent_id="a1", query="otters")) == []


async def test_concurrent_writes_keep_the_index_consistent(
    real_redis: Any, keyspace: KeySpace
) -> None:
    # Each write is one Lua script, so concurrent writers never lose a count.
    store = RedisRecallStore(real_redis, keyspace)
    texts = [f"harbour report number {i} mentions pelicans" for i in range(40)]
    written = await asyncio.gather(
        *(store.write(WriteRequest(agent_id="a1", content=t)) for t in texts)
    )
    _, postings_key = store.keys("default", "a1", None)
    assert int(await real_redis.hget(postings_key, "__n__")) == len(texts)
    total = sum(indexed_length(e) for e in written)
    assert int(await real_redis.hget(postings_key, "__sum__")) == total
    found = await store.recall(RecallRequest(agent_id="a1", query="pelicans", limit=100))
    assert {r.entry.id for r in found} == {e.id for e in written}


async def test_concurrent_upserts_of_one_entry_leave_one_indexed_version(
    real_redis: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(real_redis, keyspace)
    entry = await store.write(WriteRequest(agent_id="a1", content="first version"))
    await asyncio.gather(
        *(
            store.write(WriteRequest(agent_id="a1", id=entry.id, content=f"version word{i}"))
            for i in range(20)
        )
    )
    _, postings_key = store.keys("default", "a1", None)
    assert await real_redis.hget(postings_key, "__n__") == b"1"
    [kept] = await store.list_entries("a1")
    assert await real_redis.hget(postings_key, "__sum__") == str(indexed_length(kept)).encode()
    # "first" is in no indexed version: only the recency fill (score 0) answers.
    stale = await store.recall(RecallRequest(agent_id="a1", query="first"))
    assert [(r.entry.id, r.entry.content, r.score) for r in stale] == [(kept.id, kept.content, 0.0)]
    assert await real_redis.hget(postings_key, "__recent__") == kept.id.encode()


async def test_every_write_refreshes_the_ttl(real_redis: Any, keyspace: KeySpace) -> None:
    store = RedisRecallStore(real_redis, keyspace, ttl_seconds=300)
    await store.write(WriteRequest(agent_id="a1", content="kept alive"))
    keys = store.keys("default", "a1", None)
    for key in keys:
        await real_redis.expire(key, 5)
    await store.write(WriteRequest(agent_id="a1", content="another write"))
    for key in keys:
        assert 5 < await real_redis.ttl(key) <= 300


# --- sharing one server -------------------------------------------------------------------


async def test_a_second_client_sees_what_the_first_wrote(
    real_redis: Any, keyspace: KeySpace
) -> None:
    writer = RedisRecallStore(real_redis, keyspace)
    entry = await writer.write(WriteRequest(agent_id="a1", content="lighthouse keeper notes"))
    other = aioredis.Redis.from_url(REAL_REDIS_URL)
    try:
        reader = RedisRecallStore(other, KeySpace(keyspace.namespace))
        found = await reader.recall(RecallRequest(agent_id="a1", query="lighthouse"))
        assert [r.entry for r in found] == [entry]
        assert await reader.delete(entry.id, agent_id="a1") is True
    finally:
        await other.aclose()
    assert await writer.list_entries("a1") == []


async def test_tenants_on_one_server_do_not_see_each_other(
    real_redis: Any, keyspace: KeySpace
) -> None:
    other_tenant = KeySpace(keyspace.namespace + "x")
    mine = RedisRecallStore(real_redis, keyspace)
    theirs = RedisRecallStore(real_redis, other_tenant)
    try:
        await theirs.write(WriteRequest(agent_id="a1", content="their secret plan"))
        assert await mine.recall(RecallRequest(agent_id="a1", query="secret plan")) == []
        assert await mine.list_entries("a1") == []
    finally:
        for key in theirs.keys("default", "a1", None):
            await real_redis.delete(key)


async def test_the_runtime_remembers_through_this_store(
    real_runtime: Any, real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    # A runtime given a Redis client and no recall store embeds this one.
    memory = real_runtime.memory(workflow_id, "s1", "a1")
    await memory.remember("Invoices go out on the first Monday.")
    store = RedisRecallStore(real_redis, keyspace)
    [entry] = await store.list_entries("a1")
    assert entry.content == "Invoices go out on the first Monday."
    found = await store.recall(RecallRequest(agent_id="a1", query="invoices Monday"))
    assert [r.entry.id for r in found] == [entry.id]


# --- index upgrades -------------------------------------------------------------------------


async def _write_version_1_scope(client: Any, store: RedisRecallStore) -> list[str]:
    """Two entries indexed as the first release did: JSON postings, no ``__v__``,
    entries without ``occurred_at``, tokens neither stemmed nor date-aware."""
    entries_key, postings_key = store.keys("default", "a1", None)
    old = [("mem_old1", "Melanie painted a sunrise", 1_683_504_000_000), ("mem_old2", "cats", 1)]
    for entry_id, content, created in old:
        entry = {
            "agent_id": "a1",
            "session_id": None,
            "namespace": "default",
            "id": entry_id,
            "content": content,
            "metadata": {},
            "created_at": created,
            "updated_at": created,
        }
        await client.hset(entries_key, entry_id, json.dumps(entry))
    await client.hset(
        postings_key,
        mapping={
            "melanie": '{"mem_old1": 1}',
            "painted": '{"mem_old1": 1}',
            "sunrise": '{"mem_old1": 1}',
            "cat": '{"mem_old2": 1}',
            "__n__": 2,
            "__sum__": 4,
            "__dl__:mem_old1": 3,
            "__dl__:mem_old2": 1,
            "__tk__:mem_old1": '["melanie", "painted", "sunrise"]',
            "__tk__:mem_old2": '["cat"]',
            "__recent__": "mem_old2 mem_old1",
        },
    )
    return [e for e, _, _ in old]


async def test_a_scope_indexed_by_an_older_version_is_rebuilt_on_first_recall(
    redis_client: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(redis_client, keyspace)
    await _write_version_1_scope(redis_client, store)
    # "paintings" and the day only match through the new tokeniser's index.
    found = await store.recall(RecallRequest(agent_id="a1", query="paintings in May 2023", limit=1))
    assert [(r.entry.id, r.score > 0) for r in found] == [("mem_old1", True)]
    _, postings_key = store.keys("default", "a1", None)
    assert (await redis_client.hget(postings_key, "__v__")).decode() == index_signature(())
    assert not any(
        v.startswith(b"{") for v in (await redis_client.hgetall(postings_key)).values()
    ), "a JSON posting of the old layout survived"
    assert await redis_client.hget(postings_key, "__n__") == b"2"


async def test_a_write_to_an_older_scope_rebuilds_it_first_so_old_and_new_entries_are_found(
    redis_client: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(redis_client, keyspace)
    await _write_version_1_scope(redis_client, store)
    new = await store.write(WriteRequest(agent_id="a1", content="Melanie paints the sea"))
    found = await store.recall(RecallRequest(agent_id="a1", query="painting", limit=5))
    assert {r.entry.id for r in found if r.score > 0} == {"mem_old1", new.id}
    _, postings_key = store.keys("default", "a1", None)
    assert await redis_client.hget(postings_key, "__n__") == b"3"
    assert await store.delete("mem_old2", agent_id="a1") is True
    assert await redis_client.hget(postings_key, "__n__") == b"2"


async def test_changing_the_indexed_metadata_keys_rebuilds_the_index(
    redis_client: Any, keyspace: KeySpace
) -> None:
    plain = RedisRecallStore(redis_client, keyspace)
    entry = await plain.write(
        WriteRequest(agent_id="a1", content="went hiking", metadata={"place": "Zermatt"})
    )
    assert [r.score for r in await plain.recall(RecallRequest(agent_id="a1", query="zermatt"))] == [
        0.0
    ]
    indexed = RedisRecallStore(redis_client, keyspace, indexed_metadata=["place"])
    found = await indexed.recall(RecallRequest(agent_id="a1", query="zermatt"))
    assert [(r.entry.id, r.score > 0) for r in found] == [(entry.id, True)]
    _, postings_key = indexed.keys("default", "a1", None)
    assert (await redis_client.hget(postings_key, "__v__")).decode() == index_signature(["place"])


async def test_reindex_rebuilds_a_scope_on_demand_and_counts_its_entries(
    redis_client: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(redis_client, keyspace)
    for text in ("alpha walrus", "beta walrus", "gamma"):
        await store.write(WriteRequest(agent_id="a1", content=text))
    _, postings_key = store.keys("default", "a1", None)
    before = await redis_client.hgetall(postings_key)
    await redis_client.hdel(postings_key, tokenize("walrus")[0])  # a damaged index
    assert await store.reindex("a1") == 3
    assert await redis_client.hgetall(postings_key) == before
    assert await store.reindex("nobody") == 0


async def test_the_rebuild_refuses_entries_that_changed_since_it_read_them(
    redis_client: Any, keyspace: KeySpace
) -> None:
    store = RedisRecallStore(redis_client, keyspace)
    await _write_version_1_scope(redis_client, store)
    entries_key, postings_key = store.keys("default", "a1", None)
    snapshot = {
        k.decode(): v.decode() for k, v in (await redis_client.hgetall(entries_key)).items()
    }
    # Another writer changes an entry between the read and the rebuild.
    await redis_client.hset(entries_key, "mem_old2", snapshot["mem_old2"].replace("cats", "dogs"))
    entries = [MemoryEntry.model_validate_json(v) for v in snapshot.values()]
    args: list[Any] = [index_signature(()), len(snapshot)]
    for pair in snapshot.items():
        args += pair
    for pair in redis_store.build_index(entries, ()).items():
        args += pair
    script = redis_client.register_script(redis_store._REBUILD_SCRIPT)
    assert await script(keys=[entries_key, postings_key], args=args) == 0
    assert await redis_client.hget(postings_key, "__v__") is None  # left as it was
    # The store itself reads again and succeeds.
    found = await store.recall(RecallRequest(agent_id="a1", query="dogs", limit=1))
    assert [(r.entry.id, r.score > 0) for r in found] == [("mem_old2", True)]


async def test_concurrent_first_recalls_of_an_old_scope_rebuild_it_once_consistently(
    real_redis: Any, keyspace: KeySpace
) -> None:
    stores = [RedisRecallStore(real_redis, keyspace) for _ in range(6)]
    await _write_version_1_scope(real_redis, stores[0])
    results = await asyncio.gather(
        *(s.recall(RecallRequest(agent_id="a1", query="sunrise", limit=1)) for s in stores),
        *(
            s.write(WriteRequest(agent_id="a1", content=f"sunrise number {i}"))
            for i, s in enumerate(stores)
        ),
    )
    assert all(r for r in results)
    _, postings_key = stores[0].keys("default", "a1", None)
    assert await real_redis.hget(postings_key, "__n__") == b"8"
    assert await stores[0].reindex("a1") == 8


async def test_a_common_token_is_split_into_chunks_that_writes_and_deletes_keep_bounded(
    redis_client: Any, keyspace: KeySpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_store, "CHUNK_BYTES", 200)
    store = RedisRecallStore(redis_client, keyspace)
    written = [
        await store.write(WriteRequest(agent_id="a1", content=f"walrus note {i}"))
        for i in range(40)
    ]
    _, postings_key = store.keys("default", "a1", None)
    walrus = tokenize("walrus")[0]
    bound, last, df = (await redis_client.hget(postings_key, walrus)).decode().split()
    assert (bound, df) == ("1", "40") and int(last) > 5
    for n in range(1, int(last) + 1):
        # A chunk is closed once it reaches the size: at most one posting beyond it.
        assert len(await redis_client.hget(postings_key, f"{walrus}#{n}")) < 200 + 60
    for entry in written[:-1]:
        assert await store.delete(entry.id, agent_id="a1")
    left = {k.decode() for k in await redis_client.hkeys(postings_key) if b"#" in k}
    assert len([f for f in left if f.startswith(f"{walrus}#")]) == 1
    found = await store.recall(RecallRequest(agent_id="a1", query="walrus", limit=3))
    assert [(r.entry.id, r.score > 0) for r in found] == [(written[-1].id, True)]
    assert await store.reindex("a1") == 1
    rebuilt = await store.recall(RecallRequest(agent_id="a1", query="walrus", limit=3))
    assert [(r.entry.id, r.score) for r in rebuilt] == [(r.entry.id, r.score) for r in found]


# --- a stalled Redis: recall reads keep the tier deadline ----------------------------------


@pytest.mark.integration
async def test_a_recall_during_a_redis_stall_gives_up_before_the_stall_ends(
    redis_server: Any, make_settings: Any, make_runtime: Any
) -> None:
    """A Redis SIGSTOPped for 3 s: ``recall`` raises BackendUnavailableError after the
    read deadline (TIER_TIMEOUT_EPISODIC, as a ledger read or a conditional save), not
    when the server wakes. Asserted by order: it has raised before the SIGCONT is sent."""
    client: Any = aioredis.Redis.from_url(redis_server.url)
    try:
        rt = make_runtime(settings=make_settings(tier_timeout_episodic=0.5), redis=client)
        mem = rt.memory("wf1", "s1", "a1")
        await mem.remember("the user drinks green tea")
        assert [r.entry.content for r in await mem.recall("tea")] == ["the user drinks green tea"]
        events = await during_a_stall(redis_server, lambda: mem.recall("tea"))
        assert events == ["raised", "sigcont"]
        # Once Redis answers again, so does recall.
        assert [r.entry.content for r in await mem.recall("tea")] == ["the user drinks green tea"]
    finally:
        await client.aclose()
