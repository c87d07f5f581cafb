"""CheckpointStore: revisions, conditional saves, idempotent operation ids, replay
ordering by stamp, input checks, and Redis failures surfacing as jarvismem errors."""

from __future__ import annotations

from typing import Any

import pytest

from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    CheckpointConflictError,
    InvalidPayloadError,
    PayloadTooLargeError,
)
from jarvismem.keys import MAX_REVISION, KeySpace
from jarvismem.tiers.checkpoints import (
    OPS_KEPT,
    CheckpointStore,
    StampClock,
    new_op_id,
    validate_checkpoint,
)

TTL = 600


def store_of(redis: Any, keyspace: KeySpace, workflow_id: str, step: str = "s1") -> CheckpointStore:
    return CheckpointStore(redis, keyspace, workflow_id, step, ttl_seconds=TTL, max_bytes=64)


@pytest.fixture
def store(redis_client: Any, keyspace: KeySpace, workflow_id: str) -> CheckpointStore:
    return store_of(redis_client, keyspace, workflow_id)


async def test_saves_count_revisions_and_load_returns_the_last(store: CheckpointStore) -> None:
    assert await store.load() is None
    assert await store.save('{"n":1}', ts=10.0) == 1
    assert await store.save('{"n":2}', ts=20.0) == 2
    loaded = await store.load()
    assert loaded is not None
    assert (loaded.state, loaded.rev, loaded.ts) == ('{"n":2}', 2, 20.0)
    assert loaded.stamp > 0 and not loaded.queued


async def test_a_stale_expected_revision_is_refused_and_writes_nothing(
    store: CheckpointStore,
) -> None:
    await store.save("one")
    await store.save("two")
    with pytest.raises(CheckpointConflictError) as caught:
        await store.save("three", expected_rev=1)
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    loaded = await store.load()
    assert loaded is not None and (loaded.state, loaded.rev) == ("two", 2)
    assert await store.save("three", expected_rev=2) == 3


async def test_the_same_operation_sent_twice_is_applied_once(store: CheckpointStore) -> None:
    op = new_op_id()
    first = await store.save_validated("once", op_id=op, expected_rev=0)
    # A retry after a lost reply: same answer, no new revision, no conflict with itself.
    again = await store.save_validated("once", op_id=op, expected_rev=0)
    assert first == again == 1
    loaded = await store.load()
    assert loaded is not None and loaded.rev == 1


async def test_a_replayed_save_older_than_the_stored_one_is_skipped(
    store: CheckpointStore,
) -> None:
    clock = StampClock()
    old_stamp = clock.next()
    await store.save_validated("newer", stamp=clock.next())
    rev = await store.save_validated("queued long ago", stamp=old_stamp, replay=True)
    assert rev is None  # superseded: it wrote no revision, and revision 1 is another save's
    loaded = await store.load()
    assert loaded is not None and loaded.state == "newer"
    # A live save with an old stamp still lands (its stamp is raised above the stored one).
    assert await store.save_validated("live", stamp=old_stamp) == 2
    newest = await store.load()
    assert newest is not None and newest.state == "live" and newest.stamp > loaded.stamp


async def test_both_keys_get_the_ttl_and_old_operation_ids_are_trimmed(
    redis_client: Any, store: CheckpointStore
) -> None:
    for i in range(OPS_KEPT + 5):
        await store.save(f"s{i}")
    assert 0 < await redis_client.ttl(store.key) <= TTL
    assert 0 < await redis_client.ttl(store.ops_key) <= TTL
    assert await redis_client.zcard(store.ops_key) == OPS_KEPT


def test_stamps_strictly_increase_and_never_fall_below_one_observed() -> None:
    clock = StampClock()
    stamps = [clock.next() for _ in range(1000)]
    assert stamps == sorted(set(stamps))
    ahead = stamps[-1] + 10**9  # a save made on a machine whose clock runs ahead
    clock.observe(ahead)
    assert clock.next() > ahead


@pytest.mark.parametrize(
    ("state", "error"),
    [
        ({"not": "a str"}, InvalidPayloadError),
        ("x" * 65, PayloadTooLargeError),
        ("é" * 33, PayloadTooLargeError),  # the limit counts UTF-8 bytes, not characters
        ("lone \udc80 surrogate", InvalidPayloadError),
    ],
)
async def test_bad_states_are_refused_before_anything_is_written(
    store: CheckpointStore, state: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        validate_checkpoint(state, 64)
    with pytest.raises(error):
        await store.save(state)
    assert await store.load() is None


async def test_an_unreachable_redis_is_unavailable(
    unreachable_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    store = store_of(unreachable_redis, keyspace, workflow_id)
    with pytest.raises(BackendUnavailableError, match="checkpoint save"):
        await store.save("x")
    with pytest.raises(BackendUnavailableError, match="checkpoint load"):
        await store.load()


@pytest.mark.integration
async def test_a_checkpoint_key_of_the_wrong_type_is_a_rejection(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    store = store_of(real_redis, keyspace, workflow_id)
    await real_redis.set(store.key, "not a hash")
    with pytest.raises(BackendRejectedError, match="checkpoint save"):
        await store.save("x")
    with pytest.raises(BackendRejectedError, match="checkpoint load"):
        await store.load()


@pytest.mark.integration
async def test_restore_writes_the_given_revision_with_the_ttl_and_saves_continue_from_it(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    store = store_of(real_redis, keyspace, workflow_id)
    await store.restore('{"n":7}', 7, 12.5)
    loaded = await store.load()
    assert loaded is not None
    assert (loaded.state, loaded.rev, loaded.ts, loaded.stamp) == ('{"n":7}', 7, 12.5, 0)
    assert 0 < await real_redis.ttl(store.key) <= TTL
    # A kernel that read rev 7 before the export can go on saving against it.
    assert await store.save('{"n":8}', expected_rev=7) == 8


@pytest.mark.parametrize(
    ("state", "rev", "error"),
    [
        ("x" * 65, 1, PayloadTooLargeError),
        ("lone \udc80 surrogate", 1, InvalidPayloadError),
        ("ok", 0, InvalidPayloadError),
        ("ok", True, InvalidPayloadError),
        ("ok", 2**53, InvalidPayloadError),
        ("ok", 2**63, InvalidPayloadError),
    ],
    ids=["too-large", "surrogate", "rev-0", "rev-bool", "rev-2^53", "rev-2^63"],
)
async def test_restore_refuses_what_it_cannot_store_before_writing(
    store: CheckpointStore, state: str, rev: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await store.restore(state, rev, 1.0)
    assert await store.load() is None


async def test_restore_on_an_unreachable_redis_is_unavailable(
    unreachable_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    store = store_of(unreachable_redis, keyspace, workflow_id)
    with pytest.raises(BackendUnavailableError, match="checkpoint restore"):
        await store.restore("x", 1, 1.0)


async def test_a_revision_above_2_53_is_refused_and_the_checkpoint_stays_writable(
    store: CheckpointStore,
) -> None:
    # Regression (checkpoint side): a restored revision above
    # 2^53 was stored, and the save script (Lua doubles) then bumped it inexactly.
    await store.save("before", ts=1.0)
    with pytest.raises(InvalidPayloadError, match="2\\^53-1"):
        await store.restore("imported", 2**53 + 1, 2.0)
    loaded = await store.load()
    assert loaded is not None and (loaded.state, loaded.rev) == ("before", 1)
    assert await store.save("after") == 2


async def test_a_checkpoint_at_the_largest_revision_refuses_a_save_without_writing(
    store: CheckpointStore,
) -> None:
    await store.restore("top", MAX_REVISION, 1.0)
    with pytest.raises(InvalidPayloadError, match="cannot be raised exactly"):
        await store.save("next")
    loaded = await store.load()
    assert loaded is not None and (loaded.state, loaded.rev) == ("top", MAX_REVISION)
