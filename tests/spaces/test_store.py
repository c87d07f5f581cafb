"""SpacesStore on fakeredis and a real server: persistence, revisions, concurrency."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jarvismem.errors import (
    BackendRejectedError,
    InvalidPayloadError,
    ReservedSpaceError,
    SpaceConflictError,
    SpaceNotFoundError,
    SpaceTypeError,
    TaskNotFoundError,
)
from jarvismem.keys import MAX_REVISION, KeySpace
from jarvismem.payload import PayloadPolicy
from jarvismem.redaction import REDACTED, is_secret_key
from jarvismem.spaces import MemoryContainer, Space, SpaceItemNotFoundError, SpacesStore
from jarvismem.spaces.store import _CAS_SCRIPT


def make_store(redis: Any, keyspace: KeySpace, wf: str, **kw: Any) -> SpacesStore:
    kw.setdefault("ttl_seconds", None)
    return SpacesStore(redis, keyspace, wf, "agent-1", **kw)


@pytest.fixture
def store(redis_client: Any, keyspace: KeySpace, workflow_id: str) -> SpacesStore:
    return make_store(redis_client, keyspace, workflow_id)


async def revs(store: SpacesStore) -> dict[str, int]:
    mem = await store.load()
    return {"memory": mem.rev, **{n: s.rev for n, s in mem.spaces.items()}}


async def test_load_before_any_write_writes_nothing(store: SpacesStore, redis_client: Any) -> None:
    mem = await store.load()
    assert await revs(store) == {"memory": 0, "world": 0, "tasks": 0}
    assert mem.world_items() == {} and mem.tasks_open() == []
    assert await redis_client.exists(store.key) == 0


async def test_revision_sequence_world_tasks_world(store: SpacesStore) -> None:
    await store.world_put("door", "open")
    await store.tasks_add("go")
    await store.world_put("door", "closed")
    assert await revs(store) == {"memory": 3, "world": 2, "tasks": 1}


async def test_container_id_is_stable_once_written(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    first = make_store(redis_client, keyspace, workflow_id)
    await first.world_put("k", 1)
    second = make_store(redis_client, keyspace, workflow_id)
    await second.world_put("k", 2)
    assert (await first.load()).id == (await second.load()).id
    assert (await second.load()).id.startswith("mem_")


async def test_world_helpers_persist(store: SpacesStore) -> None:
    await store.world_put("user", {"name": "Ada"})
    assert await store.world_get("user") == {"name": "Ada"}
    assert await store.world_items() == {"user": {"name": "Ada"}}
    assert await store.world_delete("user") is True
    assert await store.world_delete("user") is False
    assert await revs(store) == {"memory": 2, "world": 2, "tasks": 0}


async def test_task_helpers_persist(store: SpacesStore) -> None:
    a = await store.tasks_add("a")
    b = await store.tasks_add("b")
    top = await store.tasks_insert(0, "top")
    assert await store.tasks_next() == top
    await store.tasks_complete(top["id"])
    assert await store.tasks_next() == a
    await store.tasks_reorder([b["id"], a["id"], top["id"]])
    assert [t["id"] for t in await store.tasks_open()] == [b["id"], a["id"]]
    assert await store.tasks_remove(b["id"]) == b
    assert [t["id"] for t in await store.tasks_open()] == [a["id"]]


async def test_unknown_task_raises_and_writes_nothing(store: SpacesStore) -> None:
    await store.tasks_add("a")
    with pytest.raises(TaskNotFoundError):
        await store.tasks_complete("task_nope")
    with pytest.raises(InvalidPayloadError):
        await store.tasks_reorder([])
    assert await revs(store) == {"memory": 1, "world": 0, "tasks": 1}


async def test_custom_map_and_list_spaces(store: SpacesStore) -> None:
    await store.ensure_space("facts")
    await store.put_key("facts", "sky", "blue")
    assert await store.get_key("facts", "sky") == "blue"
    await store.put_space("steps", ["b"], metadata={"owner": "planner"})
    await store.prepend("steps", "a")
    await store.append("steps", "d")
    await store.insert("steps", 2, "c")
    assert await store.update_item("steps", 3, "D") == "d"
    assert await store.remove("steps", 0) == "a"
    steps = await store.get_space("steps")
    assert steps.data == ["b", "c", "D"] and steps.metadata == {"owner": "planner"}
    assert steps.rev == 6


async def test_ensure_space_existing_is_no_write(store: SpacesStore) -> None:
    await store.ensure_space("plan", [])
    await store.ensure_space("plan", [])
    assert (await store.get_space("plan")).rev == 1
    with pytest.raises(SpaceTypeError):
        await store.ensure_space("plan", {})


async def test_update_space(store: SpacesStore) -> None:
    await store.put_space("counter", {"n": 1})
    await store.update_space("counter", lambda d: {"n": d["n"] + 1})  # type: ignore[call-overload]
    assert (await store.get_space("counter")).data == {"n": 2}


async def test_wrong_type_operations(store: SpacesStore) -> None:
    with pytest.raises(SpaceTypeError):
        await store.append("world", 1)
    with pytest.raises(SpaceTypeError):
        await store.put_key("tasks", "k", 1)
    assert await revs(store) == {"memory": 0, "world": 0, "tasks": 0}


async def test_reserved_spaces_are_protected(store: SpacesStore) -> None:
    with pytest.raises(ReservedSpaceError):
        await store.delete_space("world")
    with pytest.raises(ReservedSpaceError):
        await store.put_space("tasks", {})
    with pytest.raises(ReservedSpaceError):
        await store.update_space("world", lambda _d: [])


async def test_missing_space(store: SpacesStore) -> None:
    assert await store.has_space("ghost") is False
    assert await store.has_space("world") is True
    with pytest.raises(SpaceNotFoundError):
        await store.get_space("ghost")
    with pytest.raises(SpaceNotFoundError):
        await store.put_key("ghost", "k", 1)
    with pytest.raises(SpaceNotFoundError):
        await store.delete_space("ghost")


async def test_delete_custom_space_bumps_container(store: SpacesStore) -> None:
    await store.put_space("scratch", {"a": 1})
    await store.delete_space("scratch")
    assert await store.has_space("scratch") is False
    assert await revs(store) == {"memory": 2, "world": 0, "tasks": 0}


async def test_strict_mode_raises_on_stale_revision(store: SpacesStore) -> None:
    await store.world_put("k", 0)
    interloper_done = False

    def fn(space: Space) -> None:
        space.put_key("k", 1)

    async def race() -> None:
        # A second writer lands between this writer's read and its write.
        nonlocal interloper_done
        if not interloper_done:
            interloper_done = True
            await store.world_put("k", 2)

    original_read = store._read

    async def read_then_race(name: str, what: str) -> Any:
        space = await original_read(name, what)
        await race()
        return space

    store._read = read_then_race  # type: ignore[method-assign]
    with pytest.raises(SpaceConflictError):
        await store.mutate("world", fn, strict=True)
    store._read = original_read  # type: ignore[method-assign]
    assert await store.world_get("k") == 2


async def test_non_strict_retries_after_a_lost_race(store: SpacesStore) -> None:
    raced = False
    original_read = store._read

    async def read_then_race(name: str, what: str) -> Any:
        nonlocal raced
        space = await original_read(name, what)
        if not raced:
            raced = True
            await store.tasks_add("sneaked in")
        return space

    store._read = read_then_race  # type: ignore[method-assign]
    await store.tasks_add("mine")
    store._read = original_read  # type: ignore[method-assign]
    assert store.retries == 1
    assert {t["text"] for t in await store.tasks_open()} == {"sneaked in", "mine"}


async def test_fifty_concurrent_task_adds_all_land(store: SpacesStore) -> None:
    await asyncio.gather(*(store.tasks_add(f"task {i}") for i in range(50)))
    texts = {t["text"] for t in await store.tasks_open()}
    assert texts == {f"task {i}" for i in range(50)}
    assert (await store.get_space("tasks")).rev == 50


async def test_writers_to_different_spaces_never_retry(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    world_writer = make_store(redis_client, keyspace, workflow_id, max_retries=0)
    task_writer = make_store(redis_client, keyspace, workflow_id, max_retries=0)

    async def beliefs() -> None:
        for i in range(10):
            await world_writer.world_put(f"k{i}", i)

    async def agenda() -> None:
        for i in range(10):
            await task_writer.tasks_add(f"t{i}")

    await asyncio.gather(beliefs(), agenda())
    assert (world_writer.retries, task_writer.retries) == (0, 0)
    assert await revs(world_writer) == {"memory": 20, "world": 10, "tasks": 10}


async def test_snapshot_restore_round_trip(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    src = make_store(redis_client, keyspace, workflow_id)
    await src.world_put("k", {"nested": [1, 2]})
    await src.tasks_add("t")
    await src.put_space("extra", ["x"])
    snap = await src.snapshot()
    dst = make_store(redis_client, keyspace, workflow_id + "-copy")
    await dst.restore(snap)
    assert await dst.snapshot() == snap
    await dst.world_put("k", 0)
    assert await revs(dst) == {"memory": 4, "world": 2, "tasks": 1, "extra": 1}


async def test_restore_validates_before_writing(store: SpacesStore, redis_client: Any) -> None:
    bad = MemoryContainer().to_dict()
    bad["spaces"]["tasks"]["data"] = [{"id": "x"}]
    with pytest.raises(InvalidPayloadError):
        await store.restore(bad)
    assert await redis_client.exists(store.key) == 0


async def test_ttl_is_set_on_write(redis_client: Any, keyspace: KeySpace, workflow_id: str) -> None:
    store = make_store(redis_client, keyspace, workflow_id, ttl_seconds=60)
    await store.world_put("k", 1)
    ttl = await redis_client.ttl(store.key)
    assert 0 < ttl <= 60


async def test_no_ttl_means_persistent(store: SpacesStore, redis_client: Any) -> None:
    await store.world_put("k", 1)
    assert await redis_client.ttl(store.key) == -1


# --- several processes against the real server ------------------------------------------

# Same server as the ``real_redis`` fixture (see tests/conftest.py).
REAL_URL = os.environ.get("JARVISMEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _add_tasks_in_process(url: str, namespace: str, wf: str, tag: str, count: int) -> int:
    async def run() -> int:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(url)
        store = SpacesStore(client, KeySpace(namespace), wf, "agent-1", ttl_seconds=None)
        for i in range(count):
            await store.tasks_add(f"{tag}-{i}")
        await client.aclose()
        return store.retries

    return asyncio.run(run())


@pytest.mark.integration
async def test_processes_adding_tasks_lose_nothing(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    procs, per_proc = 3, 15
    ctx = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with ctx.Pool(procs) as pool:
        results = [
            pool.apply_async(
                _add_tasks_in_process,
                (REAL_URL, keyspace.namespace, workflow_id, f"p{p}", per_proc),
            )
            for p in range(procs)
        ]
        await loop.run_in_executor(None, lambda: [r.get(timeout=120) for r in results])
    store = make_store(real_redis, keyspace, workflow_id)
    texts = [t["text"] for t in await store.tasks_open()]
    assert sorted(texts) == sorted(f"p{p}-{i}" for p in range(procs) for i in range(per_proc))
    assert (await store.get_space("tasks")).rev == procs * per_proc


# --- revisions a Lua double cannot hold ---------------------------


@pytest.mark.parametrize("where", ["container", "world"])
@pytest.mark.parametrize("rev", [2**53, 2**63], ids=["2^53", "2^63"])
async def test_a_snapshot_with_a_revision_above_2_53_is_refused_and_spaces_stay_writable(
    store: SpacesStore, where: str, rev: int
) -> None:
    # Regression: the restore was accepted, and the next write bumped the container
    # revision in Lua doubles to -9223372036854775808, after which every write was
    # refused as a corrupt container.
    await store.world_put("door", "open")
    before = await store.snapshot()
    snapshot = await store.snapshot()
    if where == "container":
        snapshot["rev"] = rev
    else:
        snapshot["spaces"]["world"]["rev"] = rev
    with pytest.raises(InvalidPayloadError, match="2\\^53-1"):
        await store.restore(snapshot)
    assert await store.snapshot() == before
    await store.world_put("door", "closed")
    assert await revs(store) == {"memory": 2, "world": 2, "tasks": 0}


async def test_a_space_at_the_largest_revision_refuses_a_write_without_writing(
    store: SpacesStore,
) -> None:
    snapshot = MemoryContainer().to_dict()
    snapshot["rev"] = MAX_REVISION
    await store.restore(snapshot)
    before = await store.snapshot()
    with pytest.raises(BackendRejectedError, match="revision limit"):
        await store.world_put("k", 1)
    assert await store.snapshot() == before


def test_the_cas_script_spells_out_max_revision() -> None:
    assert str(MAX_REVISION) in _CAS_SCRIPT


_HOSTILE_INT = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([MAX_REVISION - 1, MAX_REVISION, MAX_REVISION + 1, 2**63, -1, 0]),
    st.booleans(),
    st.floats(allow_nan=False),
    st.none(),
)


@settings(max_examples=60, deadline=None)
@given(
    where=st.sampled_from(["container", "world", "tasks", "custom"]),
    field=st.sampled_from(["rev", "created_at", "updated_at"]),
    value=_HOSTILE_INT,
)
def test_a_hostile_snapshot_is_restored_whole_or_refused_and_spaces_stay_writable(
    where: str, field: str, value: Any
) -> None:
    import fakeredis

    async def run() -> None:
        client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        store = make_store(client, KeySpace("prop"), "wf")
        await store.world_put("k", "v")
        await store.put_space("custom", {"a": 1})
        before = await store.snapshot()
        snapshot = await store.snapshot()
        target = snapshot if where == "container" else snapshot["spaces"][where]
        target[field] = value
        try:
            await store.restore(snapshot)
        except (InvalidPayloadError, ReservedSpaceError):
            assert await store.snapshot() == before
        else:
            assert isinstance(value, int) and 0 <= value <= MAX_REVISION
        # Whatever happened, a write either lands with exact revisions or is refused
        # (a revision at the limit) without changing anything.
        now = await store.snapshot()
        try:
            await store.world_put("k", "w")
        except BackendRejectedError:
            assert MAX_REVISION in (now["rev"], now["spaces"]["world"]["rev"])
            assert await store.snapshot() == now
        else:
            after = await store.snapshot()
            assert after["rev"] == now["rev"] + 1
            assert after["spaces"]["world"]["rev"] == now["spaces"]["world"]["rev"] + 1
        await client.aclose()

    asyncio.run(run())


# --- the seed's task without a status; items by id -----------------------------------------


async def test_a_task_appended_without_status_is_stored_open(store: SpacesStore) -> None:
    # The seed's own example; before, the store refused what the container took.
    await store.append("tasks", {"id": "t1", "text": "write the tests"})
    await store.prepend("tasks", {"id": "t0", "text": "read the brief"})
    assert await store.tasks_open() == [
        {"id": "t0", "text": "read the brief", "status": "open"},
        {"id": "t1", "text": "write the tests", "status": "open"},
    ]
    snapshot = await store.snapshot()
    assert MemoryContainer.from_dict(snapshot).to_dict() == snapshot


_ITEMS: list[Any] = [
    {"id": "t1", "text": "fine", "status": "done"},
    {"id": "t2", "text": "no status"},
    {"id": "t3", "text": "extra keys", "status": "open", "due": "friday"},
    {"text": "no id"},
    {"id": "t4"},
    {"id": "t5", "text": "bad status", "status": "blocked"},
    {"id": "t6", "text": "null status", "status": None},
    "a bare string",
]


@pytest.mark.parametrize("item", _ITEMS, ids=lambda i: str(i)[:30])
async def test_the_container_and_the_store_accept_the_same_tasks(
    store: SpacesStore, item: Any
) -> None:
    mem = MemoryContainer()
    try:
        mem.append("tasks", item)
    except InvalidPayloadError:
        with pytest.raises(InvalidPayloadError):
            await store.append("tasks", item)
        assert (await store.load()).get_space("tasks").data == []
    else:
        await store.append("tasks", item)
        assert (await store.load()).get_space("tasks").data == mem.get_space("tasks").data
    # Whatever was accepted, its snapshot (and a restore of it) is accepted too.
    await store.restore(mem.to_dict())
    assert (await store.load()).get_space("tasks").data == mem.get_space("tasks").data


async def test_remove_and_update_by_item_id_through_the_store(store: SpacesStore) -> None:
    await store.put_space("notes", [{"id": "a", "v": 1}, {"id": "b", "v": 2}])
    task = await store.tasks_add("ship it")
    assert await store.update_in_space("notes", "a", lambda i: {**i, "v": 5}) == {"id": "a", "v": 5}
    assert await store.remove_from_space("notes", "b") == {"id": "b", "v": 2}
    await store.update_in_space("tasks", task["id"], lambda t: {**t, "status": "done"})
    assert await revs(store) == {"memory": 5, "world": 0, "tasks": 2, "notes": 3}
    assert (await store.load()).get_space("notes").data == [{"id": "a", "v": 5}]
    assert await store.tasks_open() == []
    assert await store.remove_from_space("tasks", task["id"]) == {**task, "status": "done"}


async def test_item_id_errors_through_the_store_write_nothing(store: SpacesStore) -> None:
    await store.put_space("notes", [{"id": "a"}])
    await store.world_put("k", "v")
    before = await store.snapshot()
    with pytest.raises(SpaceItemNotFoundError):
        await store.remove_from_space("notes", "zz")
    with pytest.raises(SpaceItemNotFoundError):
        await store.update_in_space("notes", "zz", lambda i: i)
    with pytest.raises(SpaceTypeError):
        await store.remove_from_space("world", "k")
    with pytest.raises(SpaceNotFoundError):
        await store.update_in_space("nope", "a", lambda i: i)
    with pytest.raises(InvalidPayloadError, match="keeping id"):
        await store.update_in_space("notes", "a", lambda i: {"id": "b"})
    with pytest.raises(InvalidPayloadError, match="item id"):
        await store.remove_from_space("notes", "")
    assert await store.snapshot() == before


async def test_concurrent_updates_by_item_id_lose_nothing(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    # Compare-and-set on the space's rev: a writer that lost a race re-reads and
    # re-applies its (pure) change to the fresh item.
    seed = make_store(real_redis, keyspace, workflow_id)
    await seed.put_space("counters", [{"id": "c", "n": 0}, {"id": "d", "n": 0}])
    writers = [make_store(real_redis, keyspace, workflow_id, max_retries=200) for _ in range(4)]
    await asyncio.gather(
        *(
            w.update_in_space("counters", item, lambda i: {**i, "n": i["n"] + 1})
            for w in writers
            for item in ("c", "d")
            for _ in range(5)
        )
    )
    data = (await seed.load()).get_space("counters").data
    assert data == [{"id": "c", "n": 20}, {"id": "d", "n": 20}]
    assert (await seed.load()).get_space("counters").rev == 41


async def test_a_strict_update_by_item_id_refuses_a_stale_read(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    one = make_store(real_redis, keyspace, workflow_id)
    two = make_store(real_redis, keyspace, workflow_id)
    await one.put_space("notes", [{"id": "a", "v": 0}])

    def racing(item: dict[str, Any]) -> dict[str, Any]:
        # Another writer lands between this read and its compare-and-set.
        asyncio.get_running_loop().create_task(two.append("notes", {"id": "b"}))
        return {**item, "v": 1}

    async def race() -> None:
        await one.update_in_space("notes", "a", racing, strict=True)

    # The other write is scheduled, not awaited; give it a chance to land first.
    original = one._script

    async def delayed(*args: Any, **kw: Any) -> Any:
        await asyncio.sleep(0.05)
        return await original(*args, **kw)

    one._script = delayed  # type: ignore[method-assign]
    with pytest.raises(SpaceConflictError):
        await race()
    await asyncio.sleep(0.05)
    assert (await two.load()).get_space("notes").data == [{"id": "a", "v": 0}, {"id": "b"}]


async def test_a_payload_policy_redacts_what_a_write_stores_and_none_stores_it_as_given(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    policy = PayloadPolicy(
        redact=lambda text: text.replace("hunter2", "[secret]"), is_secret_key=is_secret_key
    )
    redacting = make_store(redis_client, keyspace, workflow_id, policy=policy)
    await redacting.world_put("login", {"note": "pw hunter2", "api_key": 7})
    assert await redacting.world_get("login") == {"note": "pw [secret]", "api_key": REDACTED}
    plain = make_store(redis_client, keyspace, workflow_id)
    await plain.world_put("login", {"note": "pw hunter2", "api_key": 7})
    assert await plain.world_get("login") == {"note": "pw hunter2", "api_key": 7}
