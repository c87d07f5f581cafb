"""MemoryRuntime: assembling clients from settings, views, health, the shared Athena client."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from jarvismem import runtime as runtime_module
from jarvismem.engine.core import MemoryEngine
from jarvismem.errors import BackendUnavailableError
from jarvismem.memory import UnifiedMemory
from jarvismem.runtime import MemoryRuntime, default_settings, get_athena_client
from jarvismem.settings import Settings, load_settings
from tests.conftest import REAL_REDIS_URL, Factory

DEAD_REDIS = "redis://127.0.0.1:1/0"


def test_a_runtime_is_an_engine_configured_from_the_environment_by_default() -> None:
    rt = MemoryRuntime()
    assert isinstance(rt, MemoryEngine)
    assert rt.settings is default_settings() is default_settings()
    bounded = MemoryRuntime(recent_workflows=3, live_athena_agents=2)
    assert bounded.recent_workflows == 3


async def test_views_of_one_runtime_share_clients_and_workflow_state(
    workflow_id: str, redis_client: Any, blob_storage: Any, make_runtime: Factory
) -> None:
    rt = make_runtime(redis=redis_client, blob=blob_storage)
    a = rt.memory(workflow_id, "s1", "a1")
    b = rt.memory(workflow_id, "s2", "a2")
    assert isinstance(a, UnifiedMemory) and a.runtime is rt
    assert a.episodic is b.episodic
    assert a.runtime.redis is b.runtime.redis
    await a.log_turn(1, "x", "y", "z")
    await b.log_turn(1, "x", "y", "z")
    assert len(await b.episodic.tail(10)) == 2  # type: ignore[union-attr]
    await a.close()  # a view handed out by a runtime leaves it open
    assert not rt.closed


async def test_from_env_connects_to_redis_and_owns_its_clients(
    settings: Settings, workflow_id: str, real_redis: Any
) -> None:
    s = settings.model_copy(update={"redis_url": REAL_REDIS_URL})
    rt = await MemoryRuntime.from_env(s, require_redis=True)
    assert rt.owns_clients and rt.blob is not None and rt.athena is None
    health = await rt.health()
    assert health["backends"]["redis"]["reachable"]
    await rt.memory(workflow_id, "s1", "a1").log_turn(1, "t", "a", "r")
    assert await real_redis.exists(rt.keyspace.ledger(workflow_id))
    await rt.close()


async def test_from_env_starts_degraded_when_redis_does_not_answer(
    settings: Settings, workflow_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = settings.model_copy(update={"redis_url": DEAD_REDIS, "tier_timeout_episodic": 0.3})
    with caplog.at_level(logging.WARNING, logger="jarvismem.runtime"):
        rt = await MemoryRuntime.from_env(s)
    assert "starting degraded" in caplog.text
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(1, "t", "a", "r")  # queued, not raised
    health = await rt.health()
    assert not health["ok"]
    assert f"redis[{workflow_id}]: 1 write(s) queued in the local outbox" in health["reasons"]
    await rt.close()


async def test_from_env_without_warn_degraded_logs_the_degraded_start_below_warning(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    s = settings.model_copy(update={"redis_url": DEAD_REDIS})
    with caplog.at_level(logging.INFO, logger="jarvismem.runtime"):
        rt = await MemoryRuntime.from_env(s, warn_degraded=False)
    await rt.close()
    degraded = [r for r in caplog.records if "starting degraded" in r.getMessage()]
    assert [r.levelno for r in degraded] == [logging.INFO]


async def test_from_env_with_require_redis_raises_when_redis_does_not_answer(
    settings: Settings,
) -> None:
    s = settings.model_copy(update={"redis_url": DEAD_REDIS, "redis_connect_retries": 0})
    with pytest.raises(BackendUnavailableError, match="did not answer"):
        await MemoryRuntime.from_env(s, require_redis=True)


async def test_from_env_applies_overrides_over_the_environment(tmp_path: Path) -> None:
    rt = await MemoryRuntime.from_env(
        _env_file=None, jarvismem_namespace="overridden", outbox_path=tmp_path / "ob"
    )
    assert rt.keyspace.namespace == "overridden" and rt.embedded
    await rt.close()


async def test_health_of_a_runtime_without_backends(make_runtime: Factory) -> None:
    health = await make_runtime().health()
    assert health["ok"] and health["reasons"] == []
    assert not any(b["configured"] for b in health["backends"].values())


def test_get_athena_client_is_none_without_url() -> None:
    assert get_athena_client(load_settings(_env_file=None, athena_url=None)) is None


async def test_get_athena_client_caches_one_client_per_url_and_key() -> None:
    settings = load_settings(_env_file=None, athena_url="http://athena.test:8080")
    first = get_athena_client(settings)
    assert first is not None
    assert get_athena_client(settings) is first
    other = get_athena_client(
        load_settings(_env_file=None, athena_url="http://athena.test:8080", athena_api_key="k" * 12)
    )
    assert other is not None and other is not first
    await first.aclose()
    replacement = get_athena_client(settings)
    assert replacement is not None and replacement is not first
    await runtime_module.close_athena_clients()
    assert replacement.is_closed and other.is_closed
    assert get_athena_client(settings) is not replacement
    await runtime_module.close_athena_clients()


def test_the_cache_key_never_holds_a_secret() -> None:
    secret = "s3cret-api-key-value"
    get_athena_client(
        load_settings(_env_file=None, athena_url="http://athena.test", athena_api_key=secret)
    )
    assert all(secret not in "".join(key) for key in runtime_module._athena_clients)
