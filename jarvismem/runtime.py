"""The process-level entry points: the runtime and the shared Athena client.

:class:`MemoryRuntime` is the one owner of a process's memory (one Redis
client, one blob storage client, one Athena HTTP client, the summarizer, and
the per-workflow machinery shared by every view of a workflow);
``runtime.memory(wf, step, agent)`` returns a
:class:`~jarvismem.memory.UnifiedMemory` that costs a few object allocations
and no I/O. It is defined beside the view in :mod:`jarvismem.memory` (each
builds the other) and imported from here.

``MemoryRuntime.from_env()`` builds and connects every client from settings;
with nothing configured it runs on the embedded defaults (the embedded Redis
server, persistent, and a local blob folder). The CLI builds its runtimes
with it too.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from jarvismem.engine.athena_agents import ATHENA_RECENT_AGENTS
from jarvismem.engine.clients import new_athena_client
from jarvismem.engine.workflow import WorkflowState
from jarvismem.memory import RECENT_WORKFLOWS, MemoryRuntime
from jarvismem.settings import Settings, default_settings

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient

__all__ = [
    "ATHENA_RECENT_AGENTS",
    "RECENT_WORKFLOWS",
    "MemoryRuntime",
    "WorkflowState",
    "close_athena_clients",
    "default_settings",
    "get_athena_client",
]


# --- one Athena client per process ---------------------------------------------------------

# Kept process-wide on purpose: every caller of get_athena_client() shares one
# connection pool per (URL, credentials) instead of opening its own.
_athena_clients: dict[tuple[str, str, str], AthenaClient] = {}


def _fingerprint(secret: str | None) -> str:
    # The cache key holds a digest, not the secret itself.
    return hashlib.sha256(secret.encode()).hexdigest() if secret else ""


def get_athena_client(settings: Settings | None = None) -> AthenaClient | None:
    """The process's client for ``ATHENA_URL``, or None when Athena is not configured.

    Args:
        settings: the settings to use; None uses :func:`default_settings`.

    Returns one cached :class:`AthenaClient` per (URL, API key, JWT), so every
    caller shares one connection pool. A cached client that was closed is
    replaced by a fresh one.
    """
    settings = settings if settings is not None else default_settings()
    if not settings.athena_url:
        return None
    key_secret = settings.athena_api_key.get_secret_value() if settings.athena_api_key else None
    jwt_secret = settings.athena_jwt_token.get_secret_value() if settings.athena_jwt_token else None
    cache_key = (settings.athena_url, _fingerprint(key_secret), _fingerprint(jwt_secret))
    client = _athena_clients.get(cache_key)
    if client is None or client.is_closed:
        client = new_athena_client(settings)
        _athena_clients[cache_key] = client
    return client


async def close_athena_clients() -> None:
    """Close every cached client (process shutdown, or between test event loops)."""
    clients = list(_athena_clients.values())
    _athena_clients.clear()
    for client in clients:
        await client.aclose()
