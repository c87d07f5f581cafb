"""Opening the clients the settings configure."""

from __future__ import annotations

import pytest

from jarvismem.backends.blob import LocalBlobStorage
from jarvismem.engine.clients import open_clients
from jarvismem.errors import BackendUnavailableError
from jarvismem.settings import Settings

DEAD_REDIS = "redis://127.0.0.1:1/0"


async def test_a_dead_redis_gives_a_backend_marked_down_unless_required(
    settings: Settings,
) -> None:
    s = settings.model_copy(update={"redis_url": DEAD_REDIS, "redis_connect_retries": 0})
    redis, blob, athena = await open_clients(s)
    assert redis is not None and isinstance(blob, LocalBlobStorage) and athena is None
    await redis.aclose()
    await blob.close()
    with pytest.raises(BackendUnavailableError):
        await open_clients(s, require_redis=True, connect_retries=0)
