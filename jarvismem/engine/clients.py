"""Turning settings into connected backend clients (what ``MemoryRuntime.from_env`` owns).

Configuration is checked first (a missing extra, a bad connection string), so a
misconfiguration fails before any connection is attempted or warned about.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from jarvismem.backends.blob import BlobStorage, LocalBlobStorage, create_blob_storage
from jarvismem.backends.blob.local import folder_write_error, os_reason
from jarvismem.backends.redis import RedisBackend
from jarvismem.errors import BackendUnavailableError
from jarvismem.settings import Settings

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient


def new_athena_client(settings: Settings) -> AthenaClient:
    """A client for ``settings``' Athena, its module (and httpx) imported only now."""
    from jarvismem.backends.athena import AthenaClient

    return AthenaClient.from_settings(settings)


# Logged as the runtime starting: the logger name users already filter on.
log = logging.getLogger("jarvismem.runtime")


async def open_clients(
    settings: Settings,
    *,
    require_redis: bool = False,
    warn_degraded: bool = True,
    connect_retries: int | None = None,
) -> tuple[RedisBackend, BlobStorage | None, AthenaClient | None]:
    """The Redis backend, blob storage and Athena client ``settings`` configure.

    A Redis that does not answer gives a backend marked down (one log line at
    WARNING, or INFO with ``warn_degraded=False``) unless ``require_redis``,
    which waits ``connect_retries`` attempts and raises
    :class:`~jarvismem.errors.BackendUnavailableError`. The caller owns and
    closes what is returned.
    """
    blob = create_blob_storage(settings)
    try:
        # Starts the embedded server when REDIS_URL is unset; logs once for memory://.
        redis = await RedisBackend.connect(
            settings, retries=connect_retries if require_redis else 0
        )
    except BackendUnavailableError as exc:
        if require_redis:
            if blob is not None:
                await blob.close()
            raise
        log.log(
            logging.WARNING if warn_degraded else logging.INFO,
            "%s; starting degraded: writes queue in the local outbox and replay when Redis answers",
            exc,
        )
        redis = RedisBackend.create(settings)
        redis.mark_known_down()
    except BaseException:
        if blob is not None:
            await blob.close()
        raise
    await _warn_unwritable_folders(settings, blob, warn_blob=warn_degraded)
    athena = new_athena_client(settings) if settings.athena_url else None
    return redis, blob, athena


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
