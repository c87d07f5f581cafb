"""Health over an engine's clients and outboxes, and a view's active tiers."""

from __future__ import annotations

from typing import Any

import pytest

from jarvismem.health import engine_health, memory_health
from jarvismem.memory import UnifiedMemory
from jarvismem.settings import Settings
from tests.conftest import Factory, MakeSettings


@pytest.fixture
def settings(make_settings: MakeSettings) -> Settings:
    """A short episodic timeout: an unreachable Redis is given up on quickly."""
    return make_settings(tier_timeout_episodic=0.3)


async def test_an_engine_without_backends_is_healthy_and_says_nothing_is_configured(
    settings: Settings, make_engine: Factory
) -> None:
    engine = make_engine()
    health = await engine_health(engine)
    assert health["ok"] and not health["degraded"] and health["reasons"] == []
    assert health["namespace"] == settings.jarvismem_namespace
    assert {name: b["configured"] for name, b in health["backends"].items()} == {
        "redis": False,
        "blob": False,
        "athena": False,
        "llm": False,
    }
    assert health["outboxes"] == {} and health["embedded"] is False


async def test_reachable_backends_report_their_latency(
    redis_client: Any, blob_storage: Any, make_engine: Factory
) -> None:
    engine = make_engine(redis=redis_client, blob=blob_storage)
    engine.workflow("wf")
    health = await engine_health(engine)
    assert health["ok"], health["reasons"]
    for name in ("redis", "blob"):
        backend = health["backends"][name]
        assert backend["reachable"] and backend["latency_ms"] is not None
    assert set(health["outboxes"]) == {"redis[wf]", "blob[wf]"}


async def test_an_unreachable_redis_and_its_queued_writes_are_reasons(
    workflow_id: str, unreachable_redis: Any, make_engine: Factory
) -> None:
    engine = make_engine(redis=unreachable_redis)
    await UnifiedMemory(workflow_id, "s1", "a1", runtime=engine).log_turn(1, "t", "a", "r")
    health = await engine_health(engine)
    assert not health["ok"] and health["degraded"]
    redis = health["backends"]["redis"]
    assert redis["configured"] and not redis["reachable"] and redis["reason"]
    assert any(r.startswith("redis: ") for r in health["reasons"])
    assert f"redis[{workflow_id}]: 1 write(s) queued in the local outbox" in health["reasons"]


async def test_a_views_health_names_its_active_tiers(
    workflow_id: str, redis_client: Any, make_engine: Factory
) -> None:
    engine = make_engine(redis=redis_client)
    mem = UnifiedMemory(workflow_id, "s1", "a1", runtime=engine)
    health = await memory_health(engine, engine.workflow(workflow_id), mem.working)
    assert health["tiers"] == {"working": False, "episodic": True, "ltm": False, "athena": False}
    assert health["backends"]["redis"]["configured"]
