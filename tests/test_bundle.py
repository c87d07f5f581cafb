"""read_bundle: every tier read at once, each bounded by its timeout, queued writes merged."""

from __future__ import annotations

import asyncio
import time
from typing import Any, get_type_hints

import pytest

from jarvismem.bundle import Bundle, empty_bundle, read_bundle
from jarvismem.memory import UnifiedMemory
from jarvismem.settings import Settings
from tests.conftest import Factory, MakeSettings


@pytest.fixture
def settings(make_settings: MakeSettings) -> Settings:
    """Short tier timeouts: the timeout tests wait for them."""
    return make_settings(tier_timeout_athena=0.2, tier_timeout_working=0.2)


def test_the_empty_bundle_has_every_documented_key_at_its_default() -> None:
    bundle = empty_bundle()
    assert set(bundle) == set(get_type_hints(Bundle))
    assert bundle == {
        "ltm_summary": None,
        "recent_turns": [],
        "checkpoint": None,
        "scratchpad": "",
        "athena_context": None,
        "spaces": None,
        "degraded": {},
    }
    assert empty_bundle()["recent_turns"] is not bundle["recent_turns"]  # fresh containers


async def test_without_backends_the_bundle_is_empty_and_not_degraded(
    settings: Settings, workflow_id: str, make_runtime: Factory
) -> None:
    engine = make_runtime()
    assert await read_bundle(engine.workflow(workflow_id), "s1", 10, settings=settings) == (
        empty_bundle()
    )


@pytest.mark.parametrize("tail", [-1, True, 2.5])
async def test_a_bad_ledger_tail_is_refused(
    settings: Settings, make_runtime: Factory, tail: Any
) -> None:
    engine = make_runtime()
    with pytest.raises(ValueError, match="ledger_tail"):
        await read_bundle(engine.workflow("wf"), "s1", tail, settings=settings)


@pytest.mark.serial  # bounds a wall-clock time, which a loaded machine stretches
async def test_a_tier_past_its_timeout_is_marked_degraded_and_the_rest_is_served(
    settings: Settings, workflow_id: str, redis_client: Any, make_runtime: Factory
) -> None:
    engine = make_runtime(redis=redis_client)
    state = engine.workflow(workflow_id)
    await state.checkpoints("s1").save('{"n": 1}')

    async def hanging_athena() -> Any:
        await asyncio.sleep(30)

    start = time.monotonic()
    bundle = await read_bundle(state, "s1", 10, settings=settings, athena=hanging_athena)
    assert time.monotonic() - start < 2.0
    assert bundle["degraded"] == {"athena": "timed out after 0.2s"}
    assert bundle["athena_context"] is None
    assert bundle["checkpoint"] == '{"n": 1}'


async def test_a_failing_tier_is_marked_with_its_error(
    settings: Settings, workflow_id: str, make_runtime: Factory
) -> None:
    engine = make_runtime()

    class BrokenScratchpad:
        async def render(self) -> str:
            raise OSError("disk gone")

    bundle = await read_bundle(
        engine.workflow(workflow_id),
        "s1",
        10,
        settings=settings,
        working=BrokenScratchpad(),  # type: ignore[arg-type]
    )
    assert bundle["degraded"] == {"working": "OSError: disk gone"}
    assert bundle["scratchpad"] == ""


async def test_the_ledger_tail_and_the_spaces_come_back(
    settings: Settings, workflow_id: str, redis_client: Any, make_runtime: Factory
) -> None:
    engine = make_runtime(redis=redis_client)
    state = engine.workflow(workflow_id)
    mem = UnifiedMemory(workflow_id, "s1", "a1", runtime=engine)
    for turn in range(5):
        await mem.log_turn(turn, f"thought {turn}", "act", "res")
    assert mem.spaces is not None
    bundle = await read_bundle(state, "s1", 3, settings=settings, spaces=mem.spaces)
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["2", "3", "4"]
    assert bundle["spaces"] is None  # never written
    assert bundle["degraded"] == {}
    none = await read_bundle(state, "s1", 0, settings=settings)
    assert none["recent_turns"] == []


async def test_writes_queued_while_redis_is_down_are_in_the_bundle(
    settings: Settings, workflow_id: str, unreachable_redis: Any, make_runtime: Factory
) -> None:
    engine = make_runtime(
        settings=settings.model_copy(update={"tier_timeout_episodic": 0.3}),
        redis=unreachable_redis,
    )
    mem = UnifiedMemory(workflow_id, "s1", "a1", runtime=engine)
    await mem.log_turn(1, "queued thought", "act", "res")
    await mem.save_checkpoint('{"n": 7}')
    bundle = await read_bundle(engine.workflow(workflow_id), "s1", 10, settings=engine.settings)
    assert [t["thought"] for t in bundle["recent_turns"]] == ["queued thought"]
    assert bundle["checkpoint"] == '{"n": 7}'
    assert "redis_outbox" in bundle["degraded"] and "episodic" in bundle["degraded"]


class _RoundTrips:
    """Counts what is sent to Redis: one ``send_packed_command`` is one round trip
    (a pipeline sends all its commands at once)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from redis.asyncio.connection import AbstractConnection

        self.count = 0
        send = AbstractConnection.send_packed_command

        async def counting(conn: Any, *args: Any, **kwargs: Any) -> None:
            self.count += 1
            await send(conn, *args, **kwargs)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)


async def _full_workflow(engine: Any, workflow_id: str) -> UnifiedMemory:
    mem = UnifiedMemory(workflow_id, "s1", "a1", runtime=engine)
    for turn in range(4):
        await mem.log_turn(turn, f"thought {turn}", "act", "res")
    await mem.save_checkpoint('{"n": 3}')
    assert mem.ltm is not None and mem.spaces is not None
    await mem.ltm.save_summary("the story so far")
    await mem.spaces.ensure_space("notes", {"sky": "blue"})
    return mem


async def test_the_bundle_reads_redis_in_one_round_trip(
    real_redis: Any,
    local_blob: Any,
    workflow_id: str,
    make_runtime: Factory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = make_runtime(redis=real_redis, blob=local_blob)
    mem = await _full_workflow(engine, workflow_id)
    await mem.rehydrate_bundle()  # warm: connections made, outboxes looked at
    trips = _RoundTrips(monkeypatch)
    bundle = await mem.rehydrate_bundle(ledger_tail=3)
    # Summary, ledger tail, checkpoint and spaces: one pipelined round trip
    # (each of them used to be its own).
    assert trips.count == 1
    assert bundle["ltm_summary"] == "the story so far"
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["1", "2", "3"]
    assert bundle["checkpoint"] == '{"n": 3}'
    assert bundle["spaces"] is not None
    assert bundle["spaces"]["spaces"]["notes"]["data"] == {"sky": "blue"}
    assert bundle["degraded"] == {}


async def test_a_failing_read_of_the_batch_degrades_only_its_tier(
    redis_client: Any, local_blob: Any, workflow_id: str, make_runtime: Factory
) -> None:
    engine = make_runtime(redis=redis_client, blob=local_blob)
    mem = await _full_workflow(engine, workflow_id)
    # The checkpoint key holds a string: its HMGET fails (WRONGTYPE) in the pipeline.
    await redis_client.delete(engine.keyspace.checkpoint(workflow_id, "s1"))
    await redis_client.set(engine.keyspace.checkpoint(workflow_id, "s1"), "not a hash")
    bundle = await mem.rehydrate_bundle(ledger_tail=2)
    assert set(bundle["degraded"]) == {"checkpoint"}
    assert "WRONGTYPE" in bundle["degraded"]["checkpoint"]
    assert bundle["checkpoint"] is None
    assert bundle["ltm_summary"] == "the story so far"
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["2", "3"]
    assert bundle["spaces"] is not None


async def test_a_failed_summary_read_in_the_batch_falls_back_to_the_blob_copy(
    redis_client: Any, local_blob: Any, workflow_id: str, make_runtime: Factory
) -> None:
    engine = make_runtime(redis=redis_client, blob=local_blob)
    mem = await _full_workflow(engine, workflow_id)
    key = engine.keyspace.ltm_summary(workflow_id)
    await redis_client.delete(key)
    await redis_client.set(key, "not a hash")
    bundle = await mem.rehydrate_bundle()
    assert bundle["ltm_summary"] == "the story so far"
    assert "ltm" not in bundle["degraded"]


async def test_a_slow_round_trip_times_out_per_tier(
    settings: Settings,
    redis_client: Any,
    local_blob: Any,
    workflow_id: str,
    make_runtime: Factory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checkpoint tier gives up at its own (short) timeout while the others,
    with longer ones, still get the same round trip's replies."""
    fast = settings.model_copy(update={"tier_timeout_checkpoint": 0.05})
    engine = make_runtime(settings=fast, redis=redis_client, blob=local_blob)
    mem = await _full_workflow(engine, workflow_id)
    pipeline_cls = type(redis_client.pipeline(transaction=False))
    execute = pipeline_cls.execute

    async def slow_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.3)
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(pipeline_cls, "execute", slow_execute)
    bundle = await mem.rehydrate_bundle(ledger_tail=1)
    assert set(bundle["degraded"]) == {"checkpoint"}
    assert bundle["degraded"]["checkpoint"].startswith("timed out")
    assert bundle["ltm_summary"] == "the story so far"
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["3"]
