"""Redis connections: one client per process, from a URL, the embedded server, or a stand-in.

``REDIS_URL`` unset means the *embedded server*: a real Redis-protocol server
that jarvismem starts and shares between processes, persistent in
``EMBEDDED_REDIS_PATH`` (:mod:`jarvismem.backends.redis_embedded`).
``REDIS_URL=memory://`` selects an in-process fakeredis stand-in instead: it is
ephemeral (gone when the process exits), for tests and explicit opt-in, and
every log line and status output says so. A ``redis+sentinel://`` URL gives a client that follows
a Sentinel-managed primary (:mod:`jarvismem.backends.redis_sentinel`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jarvismem.backends.redis_embedded import embedded_server, ensure_started
from jarvismem.backends.redis_failures import (
    CommandRetry,
    cluster_unreachable,
    is_auth_error,
    is_redis_failure,
    translate_redis_error,
)
from jarvismem.backends.redis_sentinel import (
    create_sentinel_client,
    is_sentinel_url,
    parse_sentinel_url,
    sentinel_pool_destination,
)
from jarvismem.errors import BackendUnavailableError, ConfigError
from jarvismem.redaction import mask_url
from jarvismem.resilience import Backoff
from jarvismem.settings import MEMORY_URL, Settings

log = logging.getLogger(__name__)

RedisClient: TypeAlias = "aioredis.Redis | RedisCluster"
"""What every tier accepts: a plain or a cluster ``redis.asyncio`` client."""

IN_PROCESS_NOTE = (
    "in-process Redis stand-in (REDIS_URL=memory://; ephemeral: lost when the process exits)"
)

POOL_WAIT_SECONDS = 20.0
"""How long a command waits for a pooled connection when all are busy."""

CONNECT_BACKOFF = Backoff(base=0.1, cap=2.0, jitter="none")
"""Waits between start-up PINGs: one process waiting for its server, nothing to spread."""


_CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


def is_in_process(client: Any) -> bool:
    """True for the in-process fakeredis stand-in (``REDIS_URL=memory://``)."""
    return type(client).__module__.startswith("fakeredis")


def redis_destination(client: Any) -> str:
    """A secret-free description of the server(s) ``client`` talks to.

    Names the client's outboxes, so records queued for one server are never
    replayed into another. No password: host, port, database, or socket path.
    """
    if is_in_process(client):
        return "in-process"
    pool = getattr(client, "connection_pool", None)
    sentinel = sentinel_pool_destination(pool)
    if sentinel is not None:
        return sentinel  # the service, whichever server is its primary now
    if pool is not None:
        kw = pool.connection_kwargs
        where = kw.get("path") or f"{kw.get('host', 'localhost')}:{kw.get('port', 6379)}"
        return f"redis:{where}/{kw.get('db', 0)}"
    nodes = getattr(client, "startup_nodes", None) or []
    names = sorted(f"{n.host}:{n.port}" for n in nodes if hasattr(n, "host"))
    return "cluster:" + ",".join(names) if names else type(client).__name__


def redis_url_of(settings: Settings) -> str:
    """The URL the client of ``settings`` talks to: ``REDIS_URL``, else the embedded
    server's ``unix://`` URL (``memory://`` for the in-process stand-in)."""
    return settings.redis_url or embedded_server(settings).url


def is_embedded_server(settings: Settings) -> bool:
    """True when ``settings`` use the embedded server (``REDIS_URL`` unset)."""
    return not settings.redis_url


def _client_kwargs(settings: Settings) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        # Commands retry on connection blips with exponential backoff; the
        # tiers above add their own timeouts so a dead server cannot hang a turn.
        "retry": CommandRetry(ExponentialBackoff(cap=1.0, base=0.05), 3),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "socket_connect_timeout": 2.0,
        "health_check_interval": 30,
        "max_connections": settings.redis_max_connections,
    }
    url = settings.redis_url or ""
    if url.startswith("rediss://"):
        kwargs["ssl_cert_reqs"] = _CERT_REQS[settings.redis_ssl_cert_reqs]
        if settings.redis_ssl_ca_certs:
            kwargs["ssl_ca_certs"] = str(settings.redis_ssl_ca_certs)
        if settings.redis_ssl_certfile:
            kwargs["ssl_certfile"] = str(settings.redis_ssl_certfile)
        if settings.redis_ssl_keyfile:
            kwargs["ssl_keyfile"] = str(settings.redis_ssl_keyfile)
    return kwargs


def create_redis(settings: Settings) -> RedisClient:
    """Build (without connecting) the process's Redis client from settings.

    ``REDIS_URL`` unset: a client of the embedded server's socket (started by
    :func:`connect_redis`, not here); ``memory://``: the in-process stand-in.
    Raises :class:`ConfigError` for ``REDIS_DURABILITY=replicated`` without a
    server with replicas (neither default has any) and for a malformed
    ``redis+sentinel://`` URL.
    """
    if not settings.redis_url or settings.redis_url == MEMORY_URL:
        if settings.redis_durability == "replicated":
            raise ConfigError(
                "REDIS_DURABILITY=replicated needs a Redis server with replicas (set "
                "REDIS_URL): the embedded server and the in-process stand-in have none"
            )
    if settings.redis_url == MEMORY_URL:
        return in_process_redis()
    return _create_client(settings, redis_url_of(settings))


def _create_client(settings: Settings, url: str) -> RedisClient:
    kwargs = _client_kwargs(settings)
    if is_sentinel_url(url):
        if settings.redis_cluster:
            raise ConfigError("REDIS_CLUSTER=true cannot be combined with a redis+sentinel:// URL")
        return create_sentinel_client(
            parse_sentinel_url(url), kwargs, pool_timeout=POOL_WAIT_SECONDS
        )
    if settings.redis_cluster:
        if url.startswith("unix://"):
            raise ConfigError("REDIS_CLUSTER=true needs a redis:// or rediss:// REDIS_URL")
        kwargs.pop("health_check_interval", None)
        return RedisCluster.from_url(url, **kwargs)
    # A blocking pool: past REDIS_MAX_CONNECTIONS concurrent commands, callers
    # wait for a free connection (up to POOL_WAIT_SECONDS) instead of failing
    # at once with "Too many connections" as the default pool does.
    pool = aioredis.BlockingConnectionPool.from_url(url, timeout=POOL_WAIT_SECONDS, **kwargs)
    client = aioredis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # aclose() also closes the pool
    return client


def mark_known_down(client: RedisClient) -> None:
    """Tell ``client`` its server was just found down (its commands skip retries a while).

    For a client made right after a failed connect: its first commands would
    otherwise each wait out the whole retry backoff to learn the same thing.
    """
    pool = getattr(client, "connection_pool", None)
    retry = pool.connection_kwargs.get("retry") if pool is not None else None
    if isinstance(retry, CommandRetry):
        retry.mark_down()


_in_process_server: Any = None


def in_process_redis() -> aioredis.Redis:
    """A client of the process-wide in-process stand-in (fakeredis, with Lua)."""
    # Imported here, not at module top: the stand-in is ~65 modules that a
    # process with REDIS_URL set never needs (start-up time, memory, and more
    # long-lived objects for every garbage collection to walk).
    try:
        import fakeredis
    except ImportError:
        raise ConfigError(
            f"REDIS_URL={MEMORY_URL} (the in-process stand-in) needs fakeredis: "
            "pip install 'jarvismem[memory]' (or unset REDIS_URL for the embedded server)"
        ) from None

    global _in_process_server
    if _in_process_server is None:
        _in_process_server = fakeredis.FakeServer()
        log.warning("REDIS_URL=%s: using the %s", MEMORY_URL, IN_PROCESS_NOTE)
    client: aioredis.Redis = fakeredis.FakeAsyncRedis(server=_in_process_server)
    return client


def _where(url: str) -> str:
    """``host:port`` (or the socket path) of a Redis URL, for "is it running?" hints."""
    if is_sentinel_url(url):
        try:
            target = parse_sentinel_url(url)
        except ConfigError:
            return "<unparseable url>"
        hosts = ",".join(f"{h}:{p}" for h, p in target.sentinels)
        return f"{hosts} (sentinels of {target.service})"
    try:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            return parts.path or url
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
    except ValueError:
        return "<unparseable url>"


def auth_refused_message(url: str, exc: BaseException) -> str:
    """The one line for refused credentials: which URL, what to fix (no secret)."""
    parts = urlsplit(url)
    has_password = parts.password is not None or "password=" in parts.query
    fix = (
        "the password (or user) in REDIS_URL is wrong"
        if has_password
        else "the server requires a password and REDIS_URL has none "
        "(put [USER]:PASSWORD@ before the host)"
    )
    first = str(exc).split("\n", 1)[0][:120]
    return f"Redis refused the credentials (NOAUTH/WRONGPASS) at {mask_url(url)}: {fix} ({first})"


def unreachable_hint(url: str, exc: BaseException) -> str:
    """Why a connection failed, in words, with a hint when nothing listens there."""
    text = str(exc)
    where = _where(url)
    refused = f"Error {errno.ECONNREFUSED} " in text or "refused" in text.lower()
    if refused or isinstance(exc, ConnectionRefusedError):
        return f"connection refused (is redis-server running on {where}?)"
    if "No such file" in text or isinstance(exc, FileNotFoundError):
        return f"no socket at {where} (is redis-server running?)"
    if isinstance(exc, TimeoutError | RedisTimeoutError) or "Timeout" in type(exc).__name__:
        return f"no answer from {where} in time (a firewall, or a host that is down?)"
    first = text.split("\n", 1)[0][:160]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


async def connect_redis(settings: Settings, *, retries: int | None = None) -> RedisClient:
    """Create the client and wait until it answers PING, retrying with backoff.

    ``retries`` (default ``REDIS_CONNECT_RETRIES``) are the attempts after the
    first. Logs a countdown; raises :class:`BackendUnavailableError` (with the
    URL's password masked and a hint such as "is redis-server running on
    HOST:PORT?") when every attempt failed, and :class:`ConfigError` at once,
    without retrying, when the server refuses the credentials: waiting will
    not fix a wrong or missing password.

    ``REDIS_URL`` unset: the embedded server is started first if it is not
    running (:class:`~jarvismem.backends.redis_embedded.EmbeddedServerUnavailable`,
    a ``BackendUnavailableError``, when it cannot run here).
    """
    if is_embedded_server(settings):
        await ensure_started(settings)
    client = create_redis(settings)
    if is_in_process(client):
        return client
    url = redis_url_of(settings)
    retries = settings.redis_connect_retries if retries is None else max(0, retries)
    attempts = retries + 1
    for attempt in range(1, attempts + 1):
        try:
            await asyncio.wait_for(client.ping(), timeout=5.0)
            return client
        except Exception as exc:
            if is_auth_error(exc):
                await client.aclose()
                raise ConfigError(auth_refused_message(url, exc)) from None
            unreachable = isinstance(exc, TimeoutError | RedisConnectionError | OSError)
            if not (unreachable or cluster_unreachable(exc)):
                if isinstance(exc, RedisError):
                    # Any other reply (a server error): waiting will not help.
                    await client.aclose()
                    raise translate_redis_error(exc, "Redis connect") from None
                raise
            if attempt == attempts:
                await client.aclose()
                tried = "1 attempt" if attempts == 1 else f"{attempts} attempts"
                raise BackendUnavailableError(
                    f"Redis at {mask_url(url)} did not answer after {tried} "
                    f"(REDIS_CONNECT_RETRIES={retries}): {unreachable_hint(url, exc)}"
                ) from None
            delay = CONNECT_BACKOFF.delay(attempt - 1)
            log.warning(
                "Redis at %s not reachable (%s); retrying in %.1fs (retry %d of %d)",
                mask_url(url),
                unreachable_hint(url, exc),
                delay,
                attempt,
                retries,
            )
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def ping_redis(client: RedisClient, url: str | None) -> None:
    """PING with failures translated for a health report (auth named as such)."""
    try:
        await client.ping()
    except Exception as exc:
        if is_auth_error(exc):
            raise ConfigError(auth_refused_message(url or "", exc)) from None
        unreachable = isinstance(exc, TimeoutError | RedisConnectionError | OSError)
        if (unreachable or cluster_unreachable(exc)) and url:
            raise BackendUnavailableError(unreachable_hint(url, exc)) from None
        if is_redis_failure(exc):
            raise translate_redis_error(exc, "PING") from None
        raise


async def probe_redis_call(call: Callable[[], Awaitable[Any]], url: str | None) -> Any:
    """Await one command of a health probe; a refusal becomes jarvismem's error.

    An authentication refusal is a :class:`ConfigError` naming the URL (masked),
    any other Redis failure its translated error; so a probe's reason reads the
    same whichever step of it failed.
    """
    try:
        return await call()
    except Exception as exc:
        if is_auth_error(exc):
            raise ConfigError(auth_refused_message(url or "", exc)) from None
        if is_redis_failure(exc):
            raise translate_redis_error(exc, "write probe") from None
        raise


# --- errors translated at the edge ------------------------------------------------------
