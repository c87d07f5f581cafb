"""The long-lived runtime: the one place that assembles memory from settings.

:class:`MemoryRuntime` is a :class:`~jarvismem.engine.MemoryEngine` (one Redis
client, one blob storage client, one Athena HTTP client, one summarizer, and
the per-workflow machinery shared by every view of a workflow) that also hands
out views: ``runtime.memory(wf, step, agent)`` returns a
:class:`~jarvismem.memory.UnifiedMemory` that costs a few object allocations
and no I/O.

``MemoryRuntime.from_env()`` builds and connects every client from settings;
with nothing configured it runs on the embedded defaults (the embedded Redis
server, persistent, and a local blob folder). The CLI builds its runtimes
with it too.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from jarvismem.backends.blob import BlobStorage, LocalBlobStorage, create_blob_storage
from jarvismem.backends.blob.local import folder_write_error, os_reason
from jarvismem.backends.redis import connect_redis, create_redis, mark_known_down
from jarvismem.engine.athena_agents import ATHENA_RECENT_AGENTS
from jarvismem.engine.core import RECENT_WORKFLOWS, MemoryEngine, shared_summarizer
from jarvismem.engine.workflow import WorkflowState
from jarvismem.errors import BackendUnavailableError
from jarvismem.health import engine_health
from jarvismem.memory import UnifiedMemory
from jarvismem.settings import Settings, default_settings, load_settings

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
    "shared_summarizer",
]

log = logging.getLogger(__name__)


class MemoryRuntime(MemoryEngine):
    """Owns backends for a process and hands out :class:`UnifiedMemory` views.

    Takes the engine's arguments; ``settings`` defaults to the environment's
    (read once per process, see :meth:`fallback_settings`). Use :meth:`from_env`
    to build the clients too.
    """

    @classmethod
    def fallback_settings(cls) -> Settings:
        """The environment's settings, read once per process (a runtime is an entry point)."""
        return default_settings()

    @classmethod
    async def from_env(
        cls,
        settings: Settings | None = None,
        *,
        require_redis: bool = False,
        warn_degraded: bool = True,
        connect_retries: int | None = None,
        **overrides: Any,
    ) -> Self:
        """Build and connect every configured backend from settings/environment.

        ``overrides`` are settings fields applied over the environment (only
        when ``settings`` is None). A configured Redis that does not answer at
        start-up does not stop the runtime: it starts degraded (one WARNING),
        writes queue in the local outbox, reads serve what the outbox holds,
        and everything replays once Redis answers (the client reconnects on its
        own). ``require_redis=True`` instead waits ``REDIS_CONNECT_RETRIES``
        attempts and raises :class:`~jarvismem.errors.BackendUnavailableError`
        (tools that can do nothing without Redis). ``warn_degraded=False``
        logs the degraded start at INFO instead of WARNING, for callers that
        report each backend's state themselves (``jarvismem status``).
        """
        if settings is None:
            settings = load_settings(**overrides) if overrides else default_settings()
        # Configuration first (a missing extra, a bad connection string): a
        # misconfiguration fails before any connection is attempted or warned about.
        blob = create_blob_storage(settings)
        try:
            # Starts the embedded server when REDIS_URL is unset; logs once for memory://.
            redis = await connect_redis(settings, retries=connect_retries if require_redis else 0)
        except BackendUnavailableError as exc:
            if require_redis:
                if blob is not None:
                    await blob.close()
                raise
            log.log(
                logging.WARNING if warn_degraded else logging.INFO,
                "%s; starting degraded: writes queue in the local outbox and replay "
                "when Redis answers",
                exc,
            )
            redis = create_redis(settings)
            mark_known_down(redis)
        except BaseException:
            if blob is not None:
                await blob.close()
            raise
        await _warn_unwritable_folders(settings, blob, warn_blob=warn_degraded)
        athena = _new_athena_client(settings) if settings.athena_url else None
        return cls(settings, redis=redis, blob=blob, athena=athena, owns_clients=True)

    def memory(self, workflow_id: str, step_id: str, agent_id: str) -> UnifiedMemory:
        """A cheap per-(workflow, step, agent) view; no I/O."""
        return UnifiedMemory(workflow_id, step_id, agent_id, runtime=self)

    async def health(self, *, write_check: bool = False) -> dict[str, Any]:
        """Reachability and latency of every backend, plus outbox state.

        ``write_check=True`` also proves write access and credentials on every
        backend (see :func:`jarvismem.health.engine_health`).
        """
        return await engine_health(self, write_check=write_check)


async def _warn_unwritable_folders(
    settings: Settings, blob: BlobStorage | None, *, warn_blob: bool
) -> None:
    """One WARNING per local folder the runtime will need to write and cannot.

    A read-only working directory (or a wrong owner) does not stop the agent:
    the scratchpad tier degrades (its appends fail, are counted and shown by
    ``health()``) and the outbox cannot hold writes during an outage. Saying
    so once, with the path and the errno, beats one error per write later.
    """
    folders: list[tuple[str, Path, str]] = []
    if isinstance(blob, LocalBlobStorage) and warn_blob:
        # Not for ``status`` (warn_degraded=False): it probes and reports the
        # blob folder itself.
        folders.append(
            ("STORAGE_BASE_PATH", blob.root, "the scratchpad tier is degraded (appends fail)")
        )
    folders.append(
        (
            "OUTBOX_PATH",
            Path(settings.outbox_path),
            "writes cannot be queued locally while a backend is down",
        )
    )
    for name, folder, effect in folders:
        exc = await asyncio.to_thread(folder_write_error, folder)
        if exc is not None:
            log.warning(
                "%s %s is not writable (%s): %s; set %s to a writable folder",
                name,
                folder.absolute(),
                os_reason(exc),
                effect,
                name,
            )


# --- one Athena client per process ---------------------------------------------------------

# Kept process-wide on purpose: every caller of get_athena_client() shares one
# connection pool per (URL, credentials) instead of opening its own.
_athena_clients: dict[tuple[str, str, str], AthenaClient] = {}


def _new_athena_client(settings: Settings) -> AthenaClient:
    """A client for ``settings``' Athena, its module (and httpx) imported only now."""
    from jarvismem.backends.athena import AthenaClient

    return AthenaClient.from_settings(settings)


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
        client = _new_athena_client(settings)
        _athena_clients[cache_key] = client
    return client


async def close_athena_clients() -> None:
    """Close every cached client (process shutdown, or between test event loops)."""
    clients = list(_athena_clients.values())
    _athena_clients.clear()
    for client in clients:
        await client.aclose()
