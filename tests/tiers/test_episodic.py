"""EpisodicLedger: the stream contract, exactly-once turns, and the append batcher."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from jarvismem.backends.redis import RedisBackend
from jarvismem.errors import BackendRejectedError, BackendUnavailableError, InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.records import encode_fields
from jarvismem.tiers import episodic
from jarvismem.tiers.episodic import AppendResult, EpisodicLedger, WorkflowIndex, ledger_stats


def ledger(redis: Any, keyspace: KeySpace, workflow_id: str, **kw: Any) -> EpisodicLedger:
    return EpisodicLedger(redis, keyspace, workflow_id, ttl_seconds=kw.pop("ttl", 600), **kw)


async def test_append_and_tail_round_trip_values_with_their_types(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    await led.append({"note": "42", "n": 42, "nested": {"a": [1, None, True]}})
    (entry,) = await led.tail(5)
    assert entry["note"] == "42" and entry["n"] == 42
    assert entry["nested"] == {"a": [1, None, True]}


async def test_tail_is_oldest_first_and_bounded(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    for i in range(12):
        await led.append({"i": i})
    assert [e["i"] for e in await led.tail(3)] == [9, 10, 11]
    assert await led.tail(0) == []


async def test_full_history_and_paged_iteration_agree(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    for i in range(25):
        await led.append({"i": i})
    paged = [e["i"] async for e in led.iter_history(page_size=7)]
    assert paged == list(range(25))
    assert [e["i"] for e in await led.full_history()] == paged
    first = (await led.tail(25))[9]["id"]
    assert [e["i"] for e in await led.range_after(first, 3)] == [10, 11, 12]


async def test_every_append_refreshes_the_ttl(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id, ttl=1000)
    await led.append_turn(step_id="s", agent_id="a", turn_id=1, thought="t", action="a", result="r")
    await redis_client.expire(led.key, 5)
    await led.append({"x": 1})
    assert 5 < await redis_client.ttl(led.key) <= 1000
    assert 0 < await redis_client.ttl(led.index_key) <= 1000


async def test_retention_bounds_the_stream_approximately(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id, max_len=50)
    for i in range(400):
        await led.append({"i": i})
    length = await led.length()
    assert 50 <= length < 400  # approximate trimming keeps at least N, far fewer than all
    assert (await led.tail(1))[0]["i"] == 399


async def test_a_turn_is_stored_once_per_step_agent_and_turn_id(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    kw = dict(step_id="s1", agent_id="a1", thought="t", action="a", result="r")
    first = await led.append_turn(turn_id=3, **kw)
    again = await led.append_turn(turn_id="3", **kw)
    assert first.created and not again.created and again.id == first.id
    assert await led.find_turn("s1", "a1", 3) == first.id
    assert await led.length() == 1


async def test_concurrent_appends_all_land_once_with_distinct_ids(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    kw = dict(step_id="s1", thought="t", action="a", result="r")
    results = await asyncio.gather(
        *(led.append_turn(agent_id=f"a{i % 8}", turn_id=i, **kw) for i in range(200)),
        # The same 50 turns again, concurrently: the batcher must not defeat dedupe.
        *(led.append_turn(agent_id=f"a{i % 8}", turn_id=i, **kw) for i in range(50)),
    )
    assert await led.length() == 200
    created = [r for r in results if r.created]
    assert len(created) == 200 and len({r.id for r in created}) == 200
    ids = [e["id"] for e in await led.full_history()]
    assert sorted(ids, key=lambda i: tuple(map(int, i.split("-")))) == ids


@pytest.mark.integration
async def test_the_batcher_reloads_the_script_when_the_server_lost_it(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(real_redis, keyspace, workflow_id)
    await led.append({"warm": 1})
    await real_redis.script_flush()
    results = await asyncio.gather(*(led.append({"i": i}) for i in range(20)))
    assert len(set(results)) == 20
    assert await led.length() == 21


async def test_an_error_reaches_only_the_caller_whose_append_failed(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    # A key of the wrong type makes this one ledger's XADD fail server-side.
    broken = ledger(redis_client, keyspace, workflow_id + "-broken")
    await redis_client.set(broken.key, "not a stream")
    outcomes = await asyncio.gather(
        *(led.append({"i": i}) for i in range(10)),
        broken.append({"x": 1}),
        *(led.append({"i": i}) for i in range(10, 20)),
        return_exceptions=True,
    )
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failures) == 1
    assert await led.length() == 20


@pytest.mark.parametrize("bad", [{}, {"": 1}, {"x": object()}])
async def test_bad_entries_are_refused_before_anything_is_written(
    redis_client: Any, keyspace: KeySpace, workflow_id: str, bad: dict[str, Any]
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    with pytest.raises(InvalidPayloadError):
        await led.append(bad)
    assert await led.length() == 0


async def test_entries_written_by_other_tools_still_decode(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    # Raw values, as redis-cli would write them: not JSON, or JSON of another shape.
    await redis_client.xadd(led.key, {"note": "1,2", "plain": "hello", "n": "7"})
    # Every value parses as JSON together, but as three elements for two fields.
    await redis_client.xadd(led.key, {"note": "1,2", "n": "7"})
    first, second = await led.tail(2)
    assert first["note"] == "1,2" and first["plain"] == "hello" and first["n"] == 7
    assert second["note"] == "1,2" and second["n"] == 7


# --- Redis failures surface as jarvismem errors ---------------------------------------------


@pytest.mark.integration
async def test_a_ledger_key_of_the_wrong_type_is_a_rejection(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(real_redis, keyspace, workflow_id)
    await real_redis.set(led.key, "not a stream")
    calls = [
        lambda: led.append_turn(
            step_id="s", agent_id="a", turn_id=1, thought="t", action="", result=""
        ),
        lambda: led.tail(3),
        lambda: led.range_after(None, 3),
        lambda: led.length(),
    ]
    for call in calls:
        # Retrying would meet the same key: a refusal, not an outage to queue through.
        with pytest.raises(BackendRejectedError, match=f"ledger of {workflow_id}"):
            await call()


async def test_an_unreachable_server_is_unavailable_for_every_call(
    unreachable_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(unreachable_redis, keyspace, workflow_id)
    calls = [
        lambda: led.append({"x": 1}),
        lambda: led.tail(3),
        lambda: led.range_after(None, 3),
        lambda: led.length(),
        lambda: led.find_turn("s", "a", 1),
        lambda: led.full_history(),
    ]
    for call in calls:
        with pytest.raises(BackendUnavailableError, match=f"ledger of {workflow_id}"):
            await call()


# --- turn_id: an id, stored as its string ---------------------------------------


async def test_an_int_turn_id_reads_back_as_its_string_and_the_readme_says_so(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    await led.append_turn(step_id="s", agent_id="a", turn_id=1, thought=42, action="a", result=None)
    dup = await led.append_turn(
        step_id="s", agent_id="a", turn_id="1", thought=0, action="", result=None
    )
    assert not dup.created  # 1 and "1" are one turn: one canonical type
    (entry,) = await led.tail(5)
    assert entry["turn_id"] == "1" and entry["thought"] == 42 and entry["result"] is None


def test_the_readme_says_turn_id_reads_back_as_a_string() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `recent_turns`"))
    assert "`turn_id`, always the id's string" in row


# --- the namespace's workflow index ----------------------------------------------------------


async def test_the_first_append_indexes_the_workflow_and_stats_count_it(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    for turn in (1, 2, 2):
        await led.append_turn(
            step_id="s", agent_id="a", turn_id=turn, thought="", action="", result=""
        )
    await led.append({"note": "not a turn"})
    index = await WorkflowIndex(redis_client, keyspace).entries()
    stats = await ledger_stats(redis_client, keyspace, workflow_id)
    assert (stats.turns, stats.entries) == (2, 3)
    assert stats.last_ms is not None and abs(index[workflow_id] - stats.last_ms) < 60_000


async def test_a_staging_ledger_is_not_indexed(redis_client: Any, keyspace: KeySpace) -> None:
    led = ledger(redis_client, keyspace.staged("tok1"), "wf")
    await led.append({"x": 1})
    assert await WorkflowIndex(redis_client, keyspace).entries() == {}


async def test_a_failed_index_update_does_not_fail_the_append_and_is_retried(
    redis_client: Any, keyspace: KeySpace, workflow_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    real_zadd = redis_client.zadd

    async def failing_zadd(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("index node down")

    monkeypatch.setattr(redis_client, "zadd", failing_zadd)
    assert (await led.append({"x": 1})) is not None
    monkeypatch.setattr(redis_client, "zadd", real_zadd)
    assert await WorkflowIndex(redis_client, keyspace).entries() == {}
    await led.append({"x": 2})  # the next append retries at once
    assert workflow_id in await WorkflowIndex(redis_client, keyspace).entries()


# --- replicated durability: a replayed duplicate must still be confirmed ------------------------


@pytest.mark.integration
async def test_a_duplicate_append_waits_for_the_replica_to_have_the_earlier_copy(
    tmp_path: Path, keyspace: KeySpace
) -> None:
    # Redis versions whose WAIT waits for the connection's last *propagated* write
    # would confirm at once a replay (on a fresh connection) that finds the turn
    # already there and writes nothing, though the replica may never have had it:
    # the duplicate path refreshes a TTL so there is always a write to wait for.
    # (redis-server 7.0 sets the offset after every command, so there this test
    # passes without that write too; it guards the other semantics.)
    import redis.asyncio as aioredis

    from tests.ha_servers import replicated_pair

    with replicated_pair(tmp_path) as (primary, replica):
        writer = RedisBackend(aioredis.from_url(primary.url))
        # Another process: a connection of its own.
        replayer = RedisBackend(aioredis.from_url(primary.url))
        for backend in (writer, replayer):
            backend.set_durability("replicated", replicas=1, timeout_ms=300)
        try:
            ledger = EpisodicLedger(writer, keyspace, "wf-dup")
            replica.pause()
            try:
                with pytest.raises(BackendUnavailableError, match="not replicated"):
                    await ledger.append_turn(
                        step_id="s", agent_id="a", turn_id=1, thought="t", action="a", result="r"
                    )
                again = EpisodicLedger(replayer, keyspace, "wf-dup")
                with pytest.raises(BackendUnavailableError, match="not replicated"):
                    await again.append_turn(
                        step_id="s", agent_id="a", turn_id=1, thought="t", action="a", result="r"
                    )
            finally:
                replica.resume()
            # The resumed replica catches up in its own time (longer than the 300 ms
            # WAIT on a loaded machine): the replay is confirmed once it has.
            deadline = time.monotonic() + 30
            while True:
                try:
                    result = await again.append_turn(
                        step_id="s", agent_id="a", turn_id=1, thought="t", action="a", result="r"
                    )
                    break
                except BackendUnavailableError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            assert not result.created
            assert await again.length() == 1
        finally:
            await writer.aclose()
            await replayer.aclose()


# --- a replayed run of turns: one script call, in order, exactly once ----------------------------


def _turn(led: EpisodicLedger, n: int, agent: str = "a") -> tuple[list[str], str, int]:
    fields = encode_fields(
        {"turn_id": str(n), "step_id": "s", "agent_id": agent, "thought": f"t{n}", "tokens": n}
    )
    return fields, KeySpace.turn_field("s", agent, str(n)), n


async def test_a_run_of_turns_lands_in_order_once_each_in_one_round_trip(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    await led.append_encoded(*_turn(led, 2))  # already stored: the run must not repeat it
    pipeline = led.redis.auto_pipeline()
    before = pipeline.commands
    outcomes = await led.append_encoded_many([_turn(led, n) for n in range(1, 6)])
    assert pipeline.commands - before == 1  # one script call (plus a load, the first time)
    assert all(isinstance(o, AppendResult) for o in outcomes)
    assert [o.created for o in outcomes if isinstance(o, AppendResult)] == [
        True,
        False,
        True,
        True,
        True,
    ]
    stored = [e["turn_id"] for e in await led.full_history()]
    assert stored == ["2", "1", "3", "4", "5"]
    assert await redis_client.ttl(led.key) > 0 and await redis_client.ttl(led.index_key) > 0
    # The same run again (a replay whose reply was lost) stores nothing more.
    again = await led.append_encoded_many([_turn(led, n) for n in range(1, 6)])
    assert not any(isinstance(o, AppendResult) and o.created for o in again)
    assert await led.length() == 5


async def test_single_appends_and_a_replayed_run_count_the_same_for_compaction(
    redis_client: Any, keyspace: KeySpace
) -> None:
    """Every new turn adds one turn and its tokens to the workflow's compaction
    counters inside its append script, live or replayed; a duplicate adds nothing."""
    counters = []
    for name in ("wf-one", "wf-many"):
        led = EpisodicLedger(redis_client, keyspace, name, count_for_compaction=True)
        if name == "wf-one":
            results = [await led.append_encoded(*_turn(led, n)) for n in (1, 2, 2, 3)]
            assert [r.counters for r in results] == [(1, 1), (2, 3), None, (3, 6)]
        else:
            await led.append_encoded(*_turn(led, 2))
            await led.append_encoded_many([_turn(led, n) for n in (1, 2, 3)])
        state = await redis_client.hgetall(keyspace.ltm_state(name))
        counters.append((int(state[b"turns"]), int(state[b"tokens"])))
    assert counters == [(3, 6), (3, 6)]
    assert await redis_client.ttl(keyspace.ltm_state("wf-many")) > 0


async def test_a_ledger_that_does_not_count_leaves_no_counters(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    res = await led.append_encoded(*_turn(led, 1))
    await led.append_encoded_many([_turn(led, 2)])
    assert res.counters is None
    assert not await redis_client.exists(keyspace.ltm_state(workflow_id))


async def test_a_counters_key_of_the_wrong_type_fails_the_append_before_it_writes(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = EpisodicLedger(redis_client, keyspace, workflow_id, count_for_compaction=True)
    await redis_client.set(keyspace.ltm_state(workflow_id), "not a hash")
    with pytest.raises(BackendRejectedError):
        await led.append_encoded(*_turn(led, 1))
    assert await led.length() == 0


async def test_a_run_stores_what_single_appends_store(
    redis_client: Any, keyspace: KeySpace
) -> None:
    one, many = ledger(redis_client, keyspace, "wf-one"), ledger(redis_client, keyspace, "wf-many")
    for n in range(3):
        await one.append_encoded(*_turn(one, n))
    await many.append_encoded_many([_turn(many, n) for n in range(3)])
    strip = lambda e: {k: v for k, v in e.items() if k != "id"}  # noqa: E731
    assert [strip(e) for e in await one.full_history()] == [
        strip(e) for e in await many.full_history()
    ]
    assert await one.find_turn("s", "a", 1) and await many.find_turn("s", "a", 1)


async def test_a_malformed_turn_of_a_run_is_refused_alone(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(redis_client, keyspace, workflow_id)
    outcomes = await led.append_encoded_many([_turn(led, 1), ([], "s|a|bad", 0), _turn(led, 3)])
    assert isinstance(outcomes[1], BackendRejectedError)
    assert isinstance(outcomes[0], AppendResult) and isinstance(outcomes[2], AppendResult)
    assert [e["turn_id"] for e in await led.full_history()] == ["1", "3"]


async def test_a_big_run_is_split_into_several_calls_still_in_order(
    redis_client: Any, keyspace: KeySpace, workflow_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(episodic, "REPLAY_CALL_BYTES", 200)
    led = ledger(redis_client, keyspace, workflow_id)
    pipeline = led.redis.auto_pipeline()
    before = pipeline.commands
    await led.append_encoded_many([_turn(led, n) for n in range(10)])
    assert pipeline.commands - before > 2
    assert [e["turn_id"] for e in await led.full_history()] == [str(n) for n in range(10)]


async def test_an_outage_fails_every_turn_of_the_run_from_the_failed_call_on(
    unreachable_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    led = ledger(unreachable_redis, keyspace, workflow_id)
    outcomes = await led.append_encoded_many([_turn(led, n) for n in range(3)])
    assert len(outcomes) == 3
    assert all(isinstance(o, BackendUnavailableError) for o in outcomes)
