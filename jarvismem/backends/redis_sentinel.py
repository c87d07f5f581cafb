"""Redis Sentinel: a client that follows the primary of a Sentinel-managed service.

``REDIS_URL=redis+sentinel://[user:password@]host1:port1,host2:port2/<service>[/<db>]``
names the sentinels (the port defaults to 26379) and the service they watch
(``sentinel monitor <service> ...``). The credentials are the Redis servers'
(primary and replicas); the sentinels are asked without any. Every new connection
asks a sentinel for the current primary (redis-py's ``SentinelConnectionPool``),
and a connection that finds its server demoted (``READONLY``) is dropped, so a
failover is followed by the next command.

Outbox files are named after :func:`sentinel_destination`, the *service* (its
name, sentinels and database), never the primary of the moment: records queued
while one primary was down replay into its promoted replica.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import redis.asyncio as aioredis
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from jarvismem.errors import ConfigError

SCHEME = "redis+sentinel://"
"""The REDIS_URL scheme of a Sentinel-managed primary."""

DEFAULT_SENTINEL_PORT = 26379
"""Port of a sentinel named without one."""

SENTINEL_SOCKET_TIMEOUT = 1.0
"""Seconds a sentinel has to answer "which is the primary?" before the next one is asked."""

_SERVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HOST = re.compile(r"[A-Za-z0-9._-]+")

_EXAMPLE = "redis+sentinel://[user:password@]host:26379,host2:26379/<service>[/<db>]"


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """A parsed ``redis+sentinel://`` URL (``password`` is never shown in a repr)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
        return f"SentinelTarget({hosts}/{self.service}/{self.db})"


def is_sentinel_url(url: str | None) -> bool:
    """True for a ``redis+sentinel://`` URL."""
    return bool(url) and str(url).startswith(SCHEME)


def _bad(why: str) -> ConfigError:
    return ConfigError(f"invalid REDIS_URL: {why} (expected {_EXAMPLE})")


def _host_port(part: str) -> tuple[str, int]:
    if part.startswith("["):  # [IPv6]:port
        host, sep, rest = part[1:].partition("]")
        if not sep or not host:
            raise _bad(f"sentinel address {part!r} has an unclosed [")
        port_text = rest.removeprefix(":") if rest else ""
        if rest and not rest.startswith(":"):
            raise _bad(f"sentinel address {part!r}: expected ]:port")
    else:
        host, _, port_text = part.partition(":")
        if not host or not _HOST.fullmatch(host):
            raise _bad(f"sentinel address {part!r} has no valid host name")
    if not port_text:
        return host, DEFAULT_SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _bad(f"sentinel address {part!r} has an invalid port")
    return host, int(port_text)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The sentinels, service, database and credentials of a ``redis+sentinel://`` URL.

    Raises :class:`~jarvismem.errors.ConfigError` naming what is wrong (never
    echoing the password).
    """
    if not is_sentinel_url(url):
        raise _bad("the scheme must be redis+sentinel://")
    rest = url[len(SCHEME) :]
    if "?" in rest or "#" in rest:
        raise _bad("query strings and fragments are not supported")
    netloc, _, path = rest.partition("/")
    username = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, has_password, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None
    if not netloc:
        raise _bad("no sentinel address")
    sentinels = tuple(_host_port(p) for p in netloc.split(",") if p)
    if not sentinels:
        raise _bad("no sentinel address")
    parts = [p for p in path.split("/")]
    if not parts or not parts[0]:
        raise _bad("no service name after the sentinel addresses")
    service = parts[0]
    if not _SERVICE.fullmatch(service):
        raise _bad(f"service name {service!r} may hold only letters, digits, . _ -")
    db = 0
    if len(parts) > 1 and parts[1] != "":
        if not parts[1].isdigit():
            raise _bad(f"database {parts[1]!r} is not a number")
        db = int(parts[1])
    if len(parts) > 2 and any(parts[2:]):
        raise _bad("too many path parts (only /<service>[/<db>])")
    return SentinelTarget(sentinels, service, db, username, password)


def sentinel_destination(target: SentinelTarget) -> str:
    """The secret-free name of a sentinel service, for outbox files.

    The service, not its primary of the moment: the name stays the same across
    a failover, so queued records replay into whichever server is primary.
    Sorted sentinels: the same service written in any order is one destination.
    """
    hosts = ",".join(sorted(f"{h}:{p}" for h, p in target.sentinels))
    return f"sentinel:{target.service}@{hosts}/{target.db}"


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """A Sentinel pool that waits for a free connection instead of failing at once.

    Past ``max_connections`` busy connections, callers wait up to ``timeout``
    seconds (as the plain client's ``BlockingConnectionPool`` does). Closing it
    also closes the sentinel clients it asks.
    """

    async def aclose(self) -> None:
        await super().aclose()
        await self.sentinel_manager.aclose()


def create_sentinel_client(
    target: SentinelTarget, kwargs: dict[str, Any], *, pool_timeout: float
) -> aioredis.Redis:
    """A client of the service's current primary (no I/O until the first command).

    ``kwargs``: the plain client's connection options (retry, timeouts, pool size).
    """
    options = dict(kwargs)
    max_connections = options.pop("max_connections", None)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels),
        sentinel_kwargs={
            "socket_connect_timeout": options.get("socket_connect_timeout", 2.0),
            "socket_timeout": SENTINEL_SOCKET_TIMEOUT,
        },
    )
    if target.username is not None:
        options["username"] = target.username
    if target.password is not None:
        options["password"] = target.password
    client: aioredis.Redis = sentinel.master_for(
        target.service,
        connection_pool_class=BlockingSentinelPool,
        db=target.db,
        max_connections=max_connections or 50,
        timeout=pool_timeout,
        **options,
    )
    return client


def sentinel_pool_destination(pool: Any) -> str | None:
    """The destination of a client whose pool is a Sentinel pool, else None."""
    if not isinstance(pool, SentinelConnectionPool):
        return None
    hosts = []
    for sentinel in pool.sentinel_manager.sentinels:
        kw = sentinel.connection_pool.connection_kwargs
        hosts.append((str(kw.get("host", "localhost")), int(kw.get("port", DEFAULT_SENTINEL_PORT))))
    db = int(pool.connection_kwargs.get("db", 0) or 0)
    return sentinel_destination(SentinelTarget(tuple(hosts), pool.service_name, db))
