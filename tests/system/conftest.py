"""Fixtures of the system tests: the shared real Redis, and runtimes with short timeouts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from jarvismem.backends.redis_connect import create_redis
from jarvismem.runtime import Lifecycle, MemoryRuntime
from jarvismem.settings import Settings
from tests.conftest import REAL_REDIS_URL, Factory, real_redis_available, require_backend


@pytest.fixture
def real_url(namespaces: set[str]) -> Iterator[str]:
    """The shared real Redis's URL; the test's namespaces are deleted from it afterwards."""
    require_backend(real_redis_available(), "a real Redis on 127.0.0.1:6379")
    yield REAL_REDIS_URL
    # A synchronous client: teardown runs after the test's event loop is gone.
    client = redis.Redis.from_url(REAL_REDIS_URL)
    try:
        for namespace in namespaces:
            keys = list(client.scan_iter(match=f"jm:{namespace}:*", count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def durable_settings(make_settings: Factory) -> Callable[..., Settings]:
    """``durable_settings(redis_url, **extra)``: the test's settings on ``redis_url``, with
    short tier timeouts, no connect retries and a fast outbox poll, so an outage shows
    within a test's patience."""

    def build(redis_url: str, **extra: Any) -> Settings:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "storage_backend": "local",
            "tier_timeout_episodic": 0.5,
            "tier_timeout_working": 1.0,
            "tier_timeout_checkpoint": 0.5,
            "tier_timeout_athena": 0.5,
            "redis_connect_retries": 0,
            "outbox_poll_seconds": 0.2,
        }
        values.update(extra)
        settings: Settings = make_settings(**values)
        return settings

    return build


@pytest.fixture
def durable_runtime(
    durable_settings: Callable[..., Settings], make_runtime: Factory
) -> Callable[..., MemoryRuntime]:
    """``durable_runtime(redis_url, **extra)``: a runtime owning a client of ``redis_url``
    (no I/O until used), closed after the test unless the test closes it first."""

    def build(redis_url: str, **extra: Any) -> MemoryRuntime:
        settings = durable_settings(redis_url, **extra)
        runtime: MemoryRuntime = make_runtime(
            settings=settings, redis=create_redis(settings), lifecycle=Lifecycle(owns_clients=True)
        )
        return runtime

    return build
