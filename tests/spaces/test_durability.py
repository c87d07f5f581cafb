"""SpacesStore under adversity: delete + re-create, lost replies, stalls, refusals.

Each test here reproduces a way the spaces write path used to break, against
fakeredis, the shared real server or a private
``redis-server`` of our own (ports 6400-6409) that we stop, kill or starve.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.redis_connect import create_redis
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    SpaceConflictError,
    SpaceNotFoundError,
)
from jarvismem.keys import KeySpace
from jarvismem.settings import Settings
from jarvismem.spaces import Space, SpacesStore
from tests.conftest import REAL_REDIS_URL, require_backend
from tests.harness.netfaults import LostReplyProxy
from tests.harness.redis_server import RedisServerProcess


def make_store(redis: Any, keyspace: KeySpace, wf: str, **kw: Any) -> SpacesStore:
    kw.setdefault("ttl_seconds", None)
    return SpacesStore(redis, keyspace, wf, "agent-1", **kw)


def project_client(url: str) -> Any:
    """A client built the way the runtime builds it (same retries, same pool)."""
    return create_redis(Settings(redis_url=url, _env_file=None))  # type: ignore[call-arg]


# --- 1. delete + re-create never reuses a revision ---------------------------------------


async def hold_stale_read(
    writer: SpacesStore, interleave: Callable[[], Awaitable[None]]
) -> Callable[[], None]:
    """Make ``writer``'s next read run ``interleave`` before returning (once)."""
    original = writer._read
    done = False

    async def read_then_interleave(name: str, what: str) -> Any:
        nonlocal done
        seen = await original(name, what)
        if not done:
            done = True
            await interleave()
        return seen

    writer._read = read_then_interleave  # type: ignore[method-assign]

    def restore() -> None:
        writer._read = original  # type: ignore[method-assign]

    return restore


@pytest.mark.parametrize("strict", [True, False])
async def test_stale_writer_never_overwrites_a_recreated_space(
    redis_client: Any, keyspace: KeySpace, workflow_id: str, strict: bool
) -> None:
    # Two stores on one hash: two processes' views of the same agent.
    owner = make_store(redis_client, keyspace, workflow_id)
    stale = make_store(redis_client, keyspace, workflow_id)
    await owner.put_space("plan", {"old": 1})
    await owner.put_key("plan", "old", 2)  # plan at rev 2

    async def delete_and_recreate() -> None:
        await owner.delete_space("plan")
        await owner.put_space("plan", {"new": 1})
        await owner.put_key("plan", "new", 2)  # as many mutations as before the delete

    restore = await hold_stale_read(stale, delete_and_recreate)
    if strict:
        with pytest.raises(SpaceConflictError):
            await stale.mutate("plan", lambda s: s.put_key("b", 3), strict=True)
        expected = {"new": 2}
    else:
        await stale.mutate("plan", lambda s: s.put_key("b", 3))
        # Re-applied on the re-created space, never on the copy read before the delete.
        expected = {"new": 2, "b": 3}
    restore()
    plan = await owner.get_space("plan")
    assert plan.data == expected
    assert "old" not in (await stale.get_space("plan")).data


async def test_stale_writer_of_a_deleted_space_finds_it_gone(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    owner = make_store(redis_client, keyspace, workflow_id)
    stale = make_store(redis_client, keyspace, workflow_id)
    await owner.put_space("scratch", ["a"])

    async def delete() -> None:
        await owner.delete_space("scratch")

    restore = await hold_stale_read(stale, delete)
    with pytest.raises(SpaceNotFoundError):
        await stale.append("scratch", "b")
    restore()
    assert await owner.has_space("scratch") is False


async def test_a_deleted_space_is_invisible_and_its_revisions_continue(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    store = make_store(redis_client, keyspace, workflow_id)
    await store.put_space("scratch", {"a": 1})
    await store.put_key("scratch", "a", 2)  # rev 2
    await store.delete_space("scratch")
    assert await store.has_space("scratch") is False
    with pytest.raises(SpaceNotFoundError):
        await store.get_space("scratch")
    with pytest.raises(SpaceNotFoundError):
        await store.delete_space("scratch")
    with pytest.raises(SpaceNotFoundError):
        await store.put_key("scratch", "a", 3)
    mem = await store.load()
    assert set(mem.spaces) == {"world", "tasks"} and mem.rev == 3
    assert set((await store.snapshot())["spaces"]) == {"world", "tasks"}
    again = await store.ensure_space("scratch", [])
    assert again.data == [] and again.rev > 2
    assert (await store.get_space("scratch")).rev == again.rev
    assert (await store.load()).rev == 4


async def test_restore_replaces_live_spaces_and_tombstones(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    source = make_store(redis_client, keyspace, workflow_id + "-src")
    await source.put_space("kept", {"v": 1})
    snap = await source.snapshot()
    store = make_store(redis_client, keyspace, workflow_id)
    await store.put_space("gone", ["x"])
    await store.delete_space("gone")
    await store.world_put("k", 1)
    await store.restore(snap)
    assert await store.snapshot() == snap
    # The tombstone of "gone" went with the rest.
    assert set(await redis_client.hkeys(store.key)) == {
        b"__container__",
        b"world",
        b"tasks",
        b"kept",
    }


# --- 2. a write whose reply was lost is applied once -------------------------------------


@pytest.fixture
async def lossy_client(real_redis: Any) -> AsyncIterator[tuple[Any, LostReplyProxy]]:
    from urllib.parse import urlsplit

    parts = urlsplit(REAL_REDIS_URL)
    proxy = await LostReplyProxy(parts.hostname or "127.0.0.1", parts.port or 6379).start()
    client = project_client(f"redis://127.0.0.1:{proxy.port}{parts.path or '/0'}")
    yield client, proxy
    await client.aclose()
    await proxy.close()


def the_write_script(keyspace: KeySpace, workflow_id: str) -> bytes:
    """Bytes only the compare-and-set call carries: its second key (the op record)."""
    return keyspace.spaces_ops(workflow_id, "agent-1").encode()


@pytest.mark.integration
async def test_a_task_add_whose_reply_was_lost_is_stored_once(
    lossy_client: tuple[Any, LostReplyProxy], keyspace: KeySpace, workflow_id: str
) -> None:
    client, proxy = lossy_client
    store = make_store(client, keyspace, workflow_id)
    await store.world_put("warm", True)  # the script is loaded: the next EVALSHA runs it
    proxy.lose_next_reply(the_write_script(keyspace, workflow_id))
    task = await store.tasks_add("only once")
    # The lost reply said "applied" (the script had run).
    assert len(proxy.dropped) == 1 and proxy.dropped[0].startswith(b"*2\r\n:1\r\n")
    assert [t["text"] for t in await store.tasks_open()] == ["only once"]
    assert (await store.tasks_next()) == task
    assert (await store.get_space("tasks")).rev == 1


@pytest.mark.integration
async def test_a_strict_write_whose_reply_was_lost_returns_normally(
    lossy_client: tuple[Any, LostReplyProxy], keyspace: KeySpace, workflow_id: str
) -> None:
    client, proxy = lossy_client
    store = make_store(client, keyspace, workflow_id)
    await store.world_put("k", 0)
    proxy.lose_next_reply(the_write_script(keyspace, workflow_id))

    def bump(space: Space) -> int:
        space.put_key("k", space.get_key("k") + 1)
        return int(space.get_key("k"))

    assert await store.mutate("world", bump, strict=True) == 1
    assert len(proxy.dropped) == 1
    assert await store.world_get("k") == 1
    assert (await store.get_space("world")).rev == 2


@pytest.mark.integration
async def test_a_delete_whose_reply_was_lost_returns_normally(
    lossy_client: tuple[Any, LostReplyProxy], keyspace: KeySpace, workflow_id: str
) -> None:
    client, proxy = lossy_client
    store = make_store(client, keyspace, workflow_id)
    await store.put_space("scratch", ["x"])
    proxy.lose_next_reply(the_write_script(keyspace, workflow_id))
    await store.delete_space("scratch")
    assert len(proxy.dropped) == 1
    assert await store.has_space("scratch") is False
    assert (await store.load()).rev == 2


# --- 3. errors and timeouts ------------------------------------------------------------------


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServerProcess]:
    """A redis-server of our own (no persistence) that the test may stop or starve."""
    require_backend(shutil.which("redis-server") is not None, "the redis-server binary")
    # Its own port (a worker's, under xdist; moved if taken before it binds).
    server = RedisServerProcess(tmp_path / "redis", persistence=False)
    server.start()
    yield server
    server.kill()


@pytest.fixture
async def private_client(private_redis: RedisServerProcess) -> AsyncIterator[Any]:
    client = project_client(private_redis.url)
    yield client
    await client.aclose()


async def seeded(client: Any, keyspace: KeySpace, workflow_id: str, **kw: Any) -> SpacesStore:
    """A store built with ``kw`` over spaces seeded through one with the default timeout.

    A short ``timeout`` is what a test puts under a stall; the seeding before it
    must not trip over that bound on a loaded machine (it did, with 0.5 s in CI).
    """
    seeder = make_store(client, keyspace, workflow_id)
    await seeder.world_put("k", 1)
    await seeder.tasks_add("first")
    await seeder.put_space("scratch", ["x"])
    return make_store(client, keyspace, workflow_id, **kw)


# Every public SpacesStore method that talks to Redis, as (name, call).
OPERATIONS: list[tuple[str, Callable[[SpacesStore], Awaitable[Any]]]] = [
    ("load", lambda s: s.load()),
    ("snapshot", lambda s: s.snapshot()),
    ("get_space", lambda s: s.get_space("world")),
    ("has_space", lambda s: s.has_space("scratch")),
    ("world_get", lambda s: s.world_get("k")),
    ("tasks_open", lambda s: s.tasks_open()),
    ("world_put", lambda s: s.world_put("k", 2)),
    ("world_delete", lambda s: s.world_delete("k")),
    ("tasks_add", lambda s: s.tasks_add("second")),
    ("append", lambda s: s.append("scratch", "y")),
    ("ensure_space", lambda s: s.ensure_space("fresh")),
    ("put_space", lambda s: s.put_space("scratch", ["z"])),
    ("delete_space", lambda s: s.delete_space("scratch")),
    ("restore", lambda s: s.restore({"id": "mem_" + "0" * 32, "spaces": {}})),
]
WRITES = [op for op in OPERATIONS if op[0] in {"world_put", "tasks_add", "append", "put_space"}]


async def state_of(store: SpacesStore) -> dict[str, Any]:
    snap = await store.snapshot()
    snap.pop("updated_at")
    return snap


@pytest.mark.integration
@pytest.mark.parametrize(("name", "call"), OPERATIONS, ids=[n for n, _ in OPERATIONS])
async def test_a_stalled_redis_gives_backend_unavailable_and_changes_nothing(
    private_redis: RedisServerProcess,
    private_client: Any,
    keyspace: KeySpace,
    workflow_id: str,
    name: str,
    call: Callable[[SpacesStore], Awaitable[Any]],
) -> None:
    store = await seeded(private_client, keyspace, workflow_id, timeout=0.5)
    checker = make_store(private_client, keyspace, workflow_id)  # default timeout
    before = await state_of(checker)
    private_redis.pause()
    try:
        with pytest.raises(BackendUnavailableError, match=f"spaces {name}"):
            # The outer bound only stops a hang from blocking the suite.
            await asyncio.wait_for(call(store), timeout=30)
    finally:
        private_redis.resume()
    assert await state_of(checker) == before


@pytest.mark.integration
@pytest.mark.parametrize("op", ["world_put", "delete_space"])
async def test_a_write_sent_to_a_stalled_redis_is_not_applied_when_it_resumes(
    private_redis: RedisServerProcess, keyspace: KeySpace, workflow_id: str, op: str
) -> None:
    import redis.asyncio as aioredis

    writer_client = project_client(private_redis.url)
    store = await seeded(writer_client, keyspace, workflow_id, timeout=0.5)
    checker_client = aioredis.Redis.from_url(private_redis.url, single_connection_client=True)
    checker = make_store(checker_client, keyspace, workflow_id)
    try:
        before = await state_of(checker)

        async def stall() -> None:
            private_redis.pause()  # after the read: the write goes to a stopped server

        restore = await hold_stale_read(store, stall)
        try:
            with pytest.raises(BackendUnavailableError, match=f"spaces {op}"):
                write = (
                    store.world_put("k", 2) if op == "world_put" else store.delete_space("scratch")
                )
                await asyncio.wait_for(write, timeout=30)
        finally:
            restore()
            private_redis.resume()
        await writer_client.aclose()
        # Redis drops the writer's closed connection only after running what it
        # had buffered, so once the checker is alone the late write has been seen.
        for _ in range(600):
            if len(await checker_client.client_list()) == 1:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the writer's connection never went away")
        assert await state_of(checker) == before
    finally:
        await checker_client.aclose()


@pytest.mark.integration
@pytest.mark.parametrize(("name", "call"), OPERATIONS, ids=[n for n, _ in OPERATIONS])
async def test_a_stopped_redis_gives_backend_unavailable(
    private_redis: RedisServerProcess,
    private_client: Any,
    keyspace: KeySpace,
    workflow_id: str,
    name: str,
    call: Callable[[SpacesStore], Awaitable[Any]],
) -> None:
    store = await seeded(private_client, keyspace, workflow_id)
    private_redis.kill()
    with pytest.raises(BackendUnavailableError, match=f"spaces {name}"):
        await asyncio.wait_for(call(store), timeout=30)


@pytest.mark.integration
@pytest.mark.parametrize(
    "config",
    [
        {"maxmemory": "1", "maxmemory-policy": "noeviction"},
        {"min-replicas-to-write": "1"},
    ],
    ids=["out-of-memory", "no-replicas"],
)
@pytest.mark.parametrize(("name", "call"), WRITES, ids=[n for n, _ in WRITES])
async def test_a_refusing_redis_gives_backend_unavailable_and_changes_nothing(
    private_client: Any,
    keyspace: KeySpace,
    workflow_id: str,
    config: dict[str, str],
    name: str,
    call: Callable[[SpacesStore], Awaitable[Any]],
) -> None:
    store = await seeded(private_client, keyspace, workflow_id)
    before = await state_of(store)
    saved = {k: (await private_client.config_get(k))[k] for k in config}
    for key, value in config.items():
        await private_client.config_set(key, value)
    try:
        with pytest.raises(BackendUnavailableError, match=f"spaces {name}"):
            await call(store)
    finally:
        for key, value in saved.items():
            await private_client.config_set(key, value)
    assert await state_of(store) == before


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "call"), OPERATIONS[:1] + WRITES, ids=["load"] + [n for n, _ in WRITES]
)
async def test_a_redis_busy_with_a_script_gives_backend_unavailable(
    private_redis: RedisServerProcess,
    private_client: Any,
    keyspace: KeySpace,
    workflow_id: str,
    name: str,
    call: Callable[[SpacesStore], Awaitable[Any]],
) -> None:
    import redis.asyncio as aioredis
    from redis.exceptions import ResponseError

    store = await seeded(private_client, keyspace, workflow_id)
    before = await state_of(store)
    await private_client.config_set("busy-reply-threshold", "50")
    runner = aioredis.Redis.from_url(private_redis.url)
    killer = aioredis.Redis.from_url(private_redis.url)
    # A read-only script that never ends: Redis answers BUSY to everyone else.
    spin = asyncio.create_task(runner.eval("while true do end", 0))
    try:
        for _ in range(600):  # until Redis says BUSY (the script has started)
            try:
                await killer.ping()
            except ResponseError:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the spinning script never made Redis busy")
        with pytest.raises(BackendUnavailableError, match=f"spaces {name}"):
            await asyncio.wait_for(call(store), timeout=30)
    finally:
        await killer.script_kill()
        with pytest.raises(ResponseError):
            await spin  # killed by SCRIPT KILL
        await runner.aclose()
        await killer.aclose()
    assert await state_of(store) == before


async def test_a_corrupt_space_field_is_a_rejection_not_a_raw_error(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    store = await seeded(redis_client, keyspace, workflow_id)
    await redis_client.hset(store.key, "scratch", "not json")
    with pytest.raises(BackendRejectedError, match="spaces append"):
        await store.append("scratch", "y")
    with pytest.raises(BackendRejectedError, match="spaces load"):
        await store.load()
    with pytest.raises(BackendRejectedError, match="spaces get_space"):
        await store.get_space("scratch")
    assert await redis_client.hget(store.key, "scratch") == b"not json"
    assert await store.world_get("k") == 1  # the other spaces still work


async def test_timeout_must_be_positive(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    from jarvismem.errors import InvalidPayloadError

    with pytest.raises(InvalidPayloadError):
        make_store(redis_client, keyspace, workflow_id, timeout=0)
