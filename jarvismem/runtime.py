"""The process-level entry points: the runtime and the process's Athena client.

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
from jarvismem.engine.options import RECENT_WORKFLOWS, Lifecycle, RecallSetup
from jarvismem.engine.workflow import WorkflowState
from jarvismem.errors import ConfigError
from jarvismem.memory import MemoryRuntime
from jarvismem.settings import Settings, default_settings

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient

__all__ = [
    "ATHENA_RECENT_AGENTS",
    "RECENT_WORKFLOWS",
    "Lifecycle",
    "MemoryRuntime",
    "RecallSetup",
    "WorkflowState",
    "close_athena_clients",
    "default_settings",
    "get_athena_client",
]


# --- one Athena client per process ---------------------------------------------------------

# Exactly one, on purpose: get_athena_client() is the documented way to hand a
# client to the drop-in UnifiedMemory(..., athena_client=...), which builds a
# runtime per view and never closes the clients it is given; one shared client
# keeps one connection pool, one write bound and one session cache for all of
# them. A MemoryRuntime built from settings opens and closes its own client.
_process_client: tuple[tuple[str, str, str], AthenaClient] | None = None


def _fingerprint(secret: str | None) -> str:
    # The identity of the client holds a digest, not the secret itself.
    return hashlib.sha256(secret.encode()).hexdigest() if secret else ""


def get_athena_client(settings: Settings | None = None) -> AthenaClient | None:
    """The process's Athena client for ``ATHENA_URL``, or None when Athena is not configured.

    Args:
        settings: the settings to use; None uses :func:`default_settings`.

    Every call returns the same :class:`AthenaClient` (one connection pool), made
    on first use and again once closed. It serves one (URL, API key, JWT): asking
    for another while it is open raises :class:`ConfigError` (build a second one
    with ``AthenaClient.from_settings`` and close it yourself, or call
    :func:`close_athena_clients` first).
    """
    global _process_client
    settings = settings if settings is not None else default_settings()
    if not settings.athena_url:
        return None
    key_secret = settings.athena_api_key.get_secret_value() if settings.athena_api_key else None
    jwt_secret = settings.athena_jwt_token.get_secret_value() if settings.athena_jwt_token else None
    identity = (settings.athena_url, _fingerprint(key_secret), _fingerprint(jwt_secret))
    if _process_client is not None and not _process_client[1].is_closed:
        held, client = _process_client
        if held != identity:
            raise ConfigError(
                "the process Athena client is open for another URL or credentials; "
                "use AthenaClient.from_settings(settings) for a second server "
                "(and close it), or close_athena_clients() first"
            )
        return client
    client = new_athena_client(settings)
    _process_client = (identity, client)
    return client


async def close_athena_clients() -> None:
    """Close the process's client (process shutdown, or between test event loops)."""
    global _process_client
    held, _process_client = _process_client, None
    if held is not None:
        await held[1].aclose()
