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
    settings: Settings, workflow_id: str, make_engine: Factory
) -> None:
    engine = make_engine()
    assert await read_bundle(engine.workflow(workflow_id), "s1", 10, settings=settings) == (
        empty_bundle()
    )


@pytest.mark.parametrize("tail", [-1, True, 2.5])
async def test_a_bad_ledger_tail_is_refused(
    settings: Settings, make_engine: Factory, tail: Any
) -> None:
    engine = make_engine()
    with pytest.raises(ValueError, match="ledger_tail"):
        await read_bundle(engine.workflow("wf"), "s1", tail, settings=settings)


async def test_a_tier_past_its_timeout_is_marked_degraded_and_the_rest_is_served(
    settings: Settings, workflow_id: str, redis_client: Any, make_engine: Factory
) -> None:
    engine = make_engine(redis=redis_client)
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
    settings: Settings, workflow_id: str, make_engine: Factory
) -> None:
    engine = make_engine()

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
    settings: Settings, workflow_id: str, redis_client: Any, make_engine: Factory
) -> None:
    engine = make_engine(redis=redis_client)
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
    settings: Settings, workflow_id: str, unreachable_redis: Any, make_engine: Factory
) -> None:
    engine = make_engine(
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
