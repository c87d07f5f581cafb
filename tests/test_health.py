"""Health over an engine's clients and outboxes, and a view's active tiers."""

from __future__ import annotations

import time
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
    settings: Settings, make_runtime: Factory
) -> None:
    engine = make_runtime()
    health = await engine_health(engine)
    assert health["ok"] and not health["degraded"] and health["reasons"] == []
    assert health["namespace"] == settings.jarvismem_namespace
    assert {name: b["configured"] for name, b in health["backends"].items()} == {
        "redis": False,
        "blob": False,
        "athena": False,
        "llm": False,
    }
    assert health["outboxes"] == {} and health["in_process"] is False


async def test_reachable_backends_report_their_latency(
    redis_client: Any, blob_storage: Any, make_runtime: Factory
) -> None:
    engine = make_runtime(redis=redis_client, blob=blob_storage)
    engine.workflow("wf")
    health = await engine_health(engine)
    assert health["ok"], health["reasons"]
    for name in ("redis", "blob"):
        backend = health["backends"][name]
        assert backend["reachable"] and backend["latency_ms"] is not None
    assert set(health["outboxes"]) == {"redis[wf]", "blob[wf]"}


async def test_an_unreachable_redis_and_its_queued_writes_are_reasons(
    workflow_id: str, unreachable_redis: Any, make_runtime: Factory
) -> None:
    engine = make_runtime(redis=unreachable_redis)
    await UnifiedMemory(workflow_id, "s1", "a1", runtime=engine).log_turn(1, "t", "a", "r")
    health = await engine_health(engine)
    assert not health["ok"] and health["degraded"]
    redis = health["backends"]["redis"]
    assert redis["configured"] and not redis["reachable"] and redis["reason"]
    assert any(r.startswith("redis: ") for r in health["reasons"])
    assert f"redis[{workflow_id}]: 1 write(s) queued in the local outbox" in health["reasons"]


async def test_a_views_health_names_its_active_tiers(
    workflow_id: str, redis_client: Any, make_runtime: Factory
) -> None:
    engine = make_runtime(redis=redis_client)
    mem = UnifiedMemory(workflow_id, "s1", "a1", runtime=engine)
    health = await memory_health(engine, engine.workflow(workflow_id), mem.working)
    assert health["tiers"] == {"working": False, "episodic": True, "ltm": False, "athena": False}
    assert health["backends"]["redis"]["configured"]


# --- write access ------------------------------------------------------------------


async def test_a_local_blob_folder_that_cannot_be_written_is_not_healthy(
    tmp_path: Any, redis_client: Any, make_runtime: Factory
) -> None:
    from jarvismem.backends.blob import LocalBlobStorage

    blocker = tmp_path / "a-file"
    blocker.write_text("x")  # a file where a parent folder should be: unwritable even as root
    engine = make_runtime(redis=redis_client, blob=LocalBlobStorage(blocker / "blobs"))
    health = await engine_health(engine)
    blob = health["backends"]["blob"]
    # Before: "reachable" was all it checked, and the folder showed as healthy.
    assert blob["reachable"] and blob["writable"] is False
    assert "is not writable: Not a directory (ENOTDIR)" in blob["reason"]
    assert not health["ok"]
    assert any(r.startswith("blob: ") and "not writable" in r for r in health["reasons"])


async def test_the_local_write_probe_leaves_nothing_behind(
    tmp_path: Any, make_runtime: Factory
) -> None:
    from jarvismem.backends.blob import LocalBlobStorage

    engine = make_runtime(blob=LocalBlobStorage(tmp_path / "not-yet" / "blobs"))
    health = await engine_health(engine)
    assert health["backends"]["blob"]["writable"] is True
    assert list(tmp_path.iterdir()) == []  # not even the folder it would create


async def test_write_check_proves_writes_on_redis_and_blob(
    redis_client: Any, blob_storage: Any, make_runtime: Factory
) -> None:
    engine = make_runtime(redis=redis_client, blob=blob_storage)
    health = await engine_health(engine, write_check=True)
    assert health["ok"], health["reasons"]
    assert health["backends"]["redis"]["writable"] is True
    assert health["backends"]["blob"]["writable"] is True
    # The probes clean up after themselves.
    namespace = engine.keyspace.namespace
    assert [k async for k in redis_client.scan_iter(match=f"jm:{namespace}:health-probe:*")] == []
    assert [p for p in await blob_storage.list("health/") if "probe" in p] == []


async def test_write_check_reports_each_step_with_its_time(
    redis_client: Any, blob_storage: Any, make_runtime: Factory
) -> None:
    engine = make_runtime(redis=redis_client, blob=blob_storage)
    health = await engine_health(engine, write_check=True)
    for name in ("redis", "blob"):
        check = health["backends"][name]["write_check"]
        assert check["ok"] is True and check["failed_step"] is None
        steps = [s for s in check["steps"] if s["step"] != "folder"]  # local blob's extra
        assert [s["step"] for s in steps] == ["write", "read back", "clean up"]
        assert all(s["ok"] is True and s["ms"] >= 0 and s["reason"] is None for s in steps)
        assert check["ms"] >= sum(s["ms"] for s in steps) - 0.01


async def test_a_failed_read_back_is_named_and_the_probe_still_cleaned_up(
    tmp_path: Any, make_runtime: Factory
) -> None:
    from jarvismem.backends.blob import LocalBlobStorage

    class GarbledReads(LocalBlobStorage):
        async def read(self, path: str) -> bytes:
            return b"not what was written"

    blob = GarbledReads(tmp_path / "blobs")
    health = await engine_health(make_runtime(blob=blob), write_check=True)
    out = health["backends"]["blob"]
    assert out["writable"] is False and not health["ok"]
    check = out["write_check"]
    assert check["failed_step"] == "read back"
    assert [(s["step"], s["ok"]) for s in check["steps"]] == [
        ("folder", True),
        ("write", True),
        ("read back", False),
        ("clean up", True),
    ]
    assert "differs from what was written" in out["reason"]
    assert [p for p in await blob.list("") if "probe" in p] == []


async def test_write_check_of_an_unreachable_backend_says_it_did_not_run(
    settings: Settings, make_runtime: Factory
) -> None:
    import redis.asyncio as aioredis

    from tests.harness.redis_server import free_port

    client = aioredis.Redis(port=free_port(), socket_connect_timeout=0.2)
    try:
        health = await engine_health(make_runtime(redis=client), write_check=True)
    finally:
        await client.aclose()
    check = health["backends"]["redis"]["write_check"]
    assert check["ok"] is None and check["why"] == "not reachable" and check["steps"] == []


async def test_without_write_check_redis_is_only_pinged(
    redis_client: Any, make_runtime: Factory
) -> None:
    health = await engine_health(make_runtime(redis=redis_client))
    assert "writable" not in health["backends"]["redis"]


def test_the_durability_line_names_the_level_and_the_last_shortfall() -> None:
    from jarvismem.health import durability_line

    assert durability_line({"level": "primary"}).startswith("durability: primary")
    line = durability_line(
        {
            "level": "replicated",
            "replicas": 2,
            "wait_timeout_ms": 500,
            "waits": 9,
            "shortfalls": 1,
            "last_shortfall": {"at": time.time(), "wanted": 2, "got": 1, "what": "checkpoint save"},
        }
    )
    assert line.startswith("durability: replicated (WAIT 2 replicas, 500 ms); 1 shortfall(s)")
    assert line.endswith("1 of 2 replicas (checkpoint save)")
