"""Redis connections: one pool per process, from a URL, the embedded server, or a stand-in.

``REDIS_URL`` unset means the *embedded server*: a real Redis-protocol server
that jarvismem starts and shares between processes, persistent in
``EMBEDDED_REDIS_PATH`` (:mod:`jarvismem.backends.redis_embedded`).
``REDIS_URL=memory://`` selects an in-process fakeredis stand-in instead: it is
ephemeral (gone when the process exits), for tests and explicit opt-in, and
every log line and status output says so. A ``redis+sentinel://`` URL gives a client that follows
a Sentinel-managed primary (:mod:`jarvismem.backends.redis_sentinel`), and
``REDIS_DURABILITY`` is attached to the client built here
(:mod:`jarvismem.backends.redis_durability`).
"""

from __future__ import annotations

import asyncio
import copy
import errno
import logging
import os
import re
import ssl
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    ClusterError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jarvismem.backends.redis_durability import Durability, durability_of, set_durability
from jarvismem.backends.redis_embedded import embedded_server, ensure_started
from jarvismem.backends.redis_sentinel import (
    create_sentinel_client,
    is_sentinel_url,
    parse_sentinel_url,
    sentinel_pool_destination,
)
from jarvismem.errors import BackendRejectedError, BackendUnavailableError, ConfigError
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

KNOWN_DOWN_SECONDS = 5.0
"""After a command failed every retry, how long later commands skip their retries."""

CONNECT_BACKOFF = Backoff(base=0.1, cap=2.0, jitter="none")
"""Waits between start-up PINGs: one process waiting for its server, nothing to spread."""


class _CommandRetry(Retry):
    """redis-py's command retry, minus credential refusals, and once only while down.

    redis-py files ``AuthenticationError`` (NOAUTH, WRONGPASS) under
    ``ConnectionError``, so a stock ``Retry`` resends a refused command three
    times with backoff: a wrong password then looks like a slow, flaky server
    ("timed out after 3s") instead of the configuration error it is.

    A command that failed after every retry means the server is down, not
    blipping: for :data:`KNOWN_DOWN_SECONDS` after that, commands try once and
    fail at once (the tiers then queue writes in the outbox and mark reads
    degraded). Without this, each of the dozen commands of a turn or a bundle
    waited out the whole backoff again, and an agent started with Redis down
    spent seconds per turn learning the same fact. Any success ends it.
    """

    def __init__(self, backoff: Any, retries: int, *, shared: list[float] | None = None) -> None:
        super().__init__(backoff, retries)
        # [monotonic time until which the server counts as down]; one list for
        # all the client's connections, see __deepcopy__.
        self._down = shared if shared is not None else [0.0]

    def __deepcopy__(self, memo: dict[int, Any]) -> _CommandRetry:
        # redis-py deep-copies the retry into every connection; what one
        # connection learnt about the server must hold for all of them.
        return _CommandRetry(copy.deepcopy(self._backoff, memo), self._retries, shared=self._down)

    def known_down(self) -> bool:
        """Whether a recent command found the server down (retries are skipped)."""
        return time.monotonic() < self._down[0]

    def mark_down(self) -> None:
        """The server was just found down: skip retries for a while."""
        self._down[0] = time.monotonic() + KNOWN_DOWN_SECONDS

    async def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        given = kwargs.pop("is_retryable", None) if "is_retryable" in kwargs else None
        if args:  # positional is_retryable (redis-py passes it by keyword today)
            given, args = args[0], args[1:]
        with_failure_count = bool(kwargs.pop("with_failure_count", False))
        retries = 0 if self.known_down() else self._retries
        failures = 0
        try:
            while True:
                try:
                    result = await do()
                except self._supported_errors as error:
                    if is_auth_error(error) or (given is not None and not given(error)):
                        raise
                    failures += 1
                    # redis-py's handler closes the connection (and may raise itself).
                    if with_failure_count:
                        await fail(error, failures)
                    else:
                        await fail(error)
                    if failures > retries:
                        raise error
                    await asyncio.sleep(self._backoff.compute(failures))
                else:
                    self._down[0] = 0.0
                    return result
        except self._supported_errors as error:
            if failures and not is_auth_error(error):
                self.mark_down()
            raise


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
        "retry": _CommandRetry(ExponentialBackoff(cap=1.0, base=0.05), 3),
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
    client = _create_client(settings, redis_url_of(settings))
    adopt_redis(client, settings)
    return client


def adopt_redis(client: Any, settings: Settings) -> None:
    """Give a Redis client the durability level of ``settings``, or refuse the pair.

    The one point where a client enters a runtime (built here, or passed in to
    ``UnifiedMemory(redis_store=...)``, ``MemoryRuntime(redis=...)``): whichever
    way it came, its writes then follow ``REDIS_DURABILITY``. A client that
    already carries another level (set by :func:`set_durability` for other
    users of it) is refused with :class:`ConfigError` rather than silently
    changed, and so is ``replicated`` on the embedded stand-in (no replicas).
    """
    wanted = (
        Durability(settings.redis_wait_replicas, settings.redis_wait_timeout_ms)
        if settings.redis_durability == "replicated"
        else None
    )
    if wanted is not None and is_in_process(client):
        raise ConfigError(
            "REDIS_DURABILITY=replicated needs a Redis server with replicas: the "
            "in-process stand-in has none"
        )
    held = durability_of(client)
    if held == wanted:
        return
    if held is None and wanted is not None:
        set_durability(client, "replicated", replicas=wanted.replicas, timeout_ms=wanted.timeout_ms)
        return
    told = (
        "REDIS_DURABILITY=primary"
        if wanted is None
        else f"REDIS_DURABILITY=replicated, REDIS_WAIT_REPLICAS={wanted.replicas}, "
        f"REDIS_WAIT_TIMEOUT_MS={wanted.timeout_ms}"
    )
    has = (
        "primary"
        if held is None
        else f"replicated ({held.replicas} replica(s), {held.timeout_ms} ms)"
    )
    raise ConfigError(
        f"the Redis client passed in is already {has} but the settings say {told}: "
        "make them agree (one client, one durability level)"
    )


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
    if isinstance(retry, _CommandRetry):
        retry.mark_down()


PROBE_SECONDS = 0.1
"""How often, at most, a :class:`RecoveryProbe` PINGs its server (callers in between share
the last answer): while replay is backed off, recovery is noticed within about this long."""

PROBE_TIMEOUT_SECONDS = 1.0
"""How long a recovery PING may take before it counts as no answer."""


class RecoveryProbe:
    """Does the server answer now? One PING per :data:`PROBE_SECONDS` per client, shared.

    Every durable writer of a client waits on the same probe while its replay is
    backed off (:class:`jarvismem.tiers.durable.DurableWriter`), so a thousand
    queued workflows cost one PING per interval, not a thousand. Never raises.
    A success also ends the client's "known down" window (any command does).
    """

    def __init__(self, client: Any, *, interval: float = PROBE_SECONDS) -> None:
        self._client = weakref.ref(client)
        self.interval = interval
        self._task: asyncio.Task[bool] | None = None
        self._at = float("-inf")
        self._ok = False
        self.pings = 0

    async def __call__(self) -> bool:
        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None and not task.done() and task.get_loop() is loop:
            return await asyncio.shield(task)  # a PING in flight: share its answer
        if loop.time() - self._at < self.interval:
            return self._ok
        task = self._task = loop.create_task(self._ping(), name="jarvismem-redis-probe")
        return await asyncio.shield(task)

    async def _ping(self) -> bool:
        client = self._client()
        ok = False
        if client is not None:
            self.pings += 1
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                    await client.ping()
                ok = True
            except Exception:
                ok = False
        self._ok, self._at = ok, asyncio.get_running_loop().time()
        return ok


_probes: weakref.WeakKeyDictionary[Any, RecoveryProbe] = weakref.WeakKeyDictionary()


def recovery_probe(client: Any) -> RecoveryProbe:
    """The shared :class:`RecoveryProbe` of ``client`` (made on first use)."""
    probe = _probes.get(client)
    if probe is None:
        probe = _probes[client] = RecoveryProbe(client)
    return probe


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


def is_auth_error(exc: BaseException) -> bool:
    """True when Redis refused the credentials (NOAUTH, WRONGPASS, AUTH misuse)."""
    if isinstance(exc, AuthenticationError | AuthenticationWrongNumberOfArgsError):
        return True
    if isinstance(exc, ResponseError):
        return str(exc).lstrip("-").split(" ", 1)[0].upper() in ("NOAUTH", "WRONGPASS")
    return False


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

# Error replies that mean "not now" rather than "never": the server is loading,
# busy with a script, short of memory or replicas, read-only during a failover,
# or the cluster is resharding. A write that meets one is queued and retried.
TRANSIENT_REPLIES = frozenset(
    {
        "LOADING",
        "BUSY",
        "OOM",
        "NOREPLICAS",
        "READONLY",
        "MASTERDOWN",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "MOVED",
        "ASK",
        "NOSCRIPT",
    }
)

# redis-py prefixes a command refused inside MULTI/EXEC (or a raising pipeline)
# with "Command # N (...) of pipeline caused error: ".
_PIPELINE_NOTE = re.compile(r"Command # \d+ \(.*?\) of pipeline caused error: ", re.S)
# Redis 6 wraps the error of a redis.call inside a script: "ERR Error running
# script (call to f_...): @user_script:12: @user_script: 12: -OOM command not ...".
_SCRIPT_INNER = re.compile(r": -([A-Z]+) ")


def reply_code(text: str) -> str:
    """The error code (``OOM``, ``WRONGTYPE``, ...) of a Redis error reply's text.

    Found wherever the reply comes back: a plain reply, a script's error reply
    (also the older servers' ``ERR Error running script ... -OOM ...`` form), a
    per-command reply of a pipeline, a command refused inside MULTI/EXEC.
    """
    text = text.lstrip("-")
    note = _PIPELINE_NOTE.match(text)
    if note is not None:
        text = text[note.end() :].lstrip("-")
    code = text.split(" ", 1)[0].upper()
    if code == "ERR" and "script" in text:
        inner = _SCRIPT_INNER.search(text)
        if inner is not None:
            return inner.group(1)
    return code


def is_transient_reply(text: str) -> bool:
    """True when an error reply means "not now" (see :data:`TRANSIENT_REPLIES`)."""
    return reply_code(text) in TRANSIENT_REPLIES


_REDIS_PACKAGE = os.path.dirname(os.path.abspath(redis.__file__)) + os.sep


def closed_under_command(exc: BaseException) -> bool:
    """True for redis-py's own ``AttributeError`` on a connection closed mid-command.

    When a command fails during a failover, redis-py closes connections other tasks
    are using (the cluster client closes every connection on ``CLUSTERDOWN``); a
    command between its "connected?" check and its write then meets the closed
    connection's ``None`` writer and raises ``AttributeError: 'NoneType' object has
    no attribute 'writelines'`` from redis-py's connection code. That is an outage
    (the command never reached the server), not a refusal: taken for one, a queued
    turn was dead-lettered, an acknowledged turn lost.
    """
    if not isinstance(exc, AttributeError) or "'NoneType'" not in str(exc):
        return False
    tb, innermost = exc.__traceback__, None
    while tb is not None:
        innermost, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    return innermost is not None and os.path.abspath(innermost).startswith(_REDIS_PACKAGE)


def cluster_unreachable(exc: BaseException) -> bool:
    """True for the cluster client's "Redis Cluster cannot be connected" error.

    redis-py raises it (a ``RedisClusterException``, outside its ``RedisError``
    hierarchy) when no node it knows answers while it loads the cluster layout:
    at start with every seed down, or mid-failover. An outage, not a refusal; left
    untranslated it escaped the tiers as a raw library error.
    """
    if not isinstance(exc, RedisClusterException) or isinstance(exc, SlotNotCoveredError):
        return False
    cause = exc.__cause__ or exc.__context__
    return "cannot be connected" in str(exc) or isinstance(
        cause, RedisConnectionError | RedisTimeoutError | TimeoutError | OSError
    )


def is_transient_redis_error(exc: BaseException) -> bool:
    """True when ``exc`` (from redis-py) is an outage worth retrying later."""
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | TimeoutError | OSError):
        return True
    if cluster_unreachable(exc):
        return True
    if isinstance(exc, SlotNotCoveredError) or closed_under_command(exc):
        # No node serves the slot yet (mid-failover); a connection closed under us.
        return True
    if isinstance(
        exc,
        OutOfMemoryError | ReadOnlyError | TryAgainError | AskError | ClusterError | NoScriptError,
    ):
        return True
    if isinstance(exc, ResponseError):
        return is_transient_reply(str(exc))
    return isinstance(exc, RedisError) and not isinstance(exc, ResponseError)


def translate_redis_error(exc: BaseException, what: str) -> Exception:
    """jarvismem's own error for a redis-py failure of operation ``what``.

    Transient failures become :class:`BackendUnavailableError`; a refusal that
    would repeat (WRONGTYPE, a script error) becomes :class:`BackendRejectedError`.
    The message names the operation and the error class, never a URL or value.
    """
    first = str(exc).split("\n", 1)[0][:200]
    if is_transient_redis_error(exc):
        return BackendUnavailableError(f"{what}: Redis unavailable ({type(exc).__name__}: {first})")
    return BackendRejectedError(f"{what}: Redis refused it ({type(exc).__name__}: {first})")


_FAILURES = (RedisError, TimeoutError, OSError)


def is_redis_failure(exc: BaseException) -> bool:
    """A failure of a Redis call, to translate: redis-py's errors, timeouts, socket
    errors, and the outages redis-py raises outside its hierarchy (see
    :func:`closed_under_command`, :func:`cluster_unreachable`, ``SlotNotCoveredError``)."""
    return (
        isinstance(exc, (*_FAILURES, SlotNotCoveredError))
        or closed_under_command(exc)
        or cluster_unreachable(exc)
    )


class redis_errors:
    """Run a block of Redis calls under ``timeout`` with errors translated.

    Inside, redis-py and timeout errors become :class:`BackendUnavailableError`
    or :class:`BackendRejectedError`; jarvismem's own errors pass unchanged.
    A plain class rather than a generator-based context manager: it wraps
    every ledger append, and costs a few hundred nanoseconds instead of microseconds.
    """

    __slots__ = ("_timeout", "what")

    def __init__(self, what: str, timeout: float | None = None) -> None:
        self.what = what
        self._timeout = None if timeout is None else asyncio.timeout(timeout)

    async def __aenter__(self) -> None:
        if self._timeout is not None:
            await self._timeout.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if self._timeout is not None:
            try:
                # Turns the cancellation of an expired deadline into TimeoutError.
                await self._timeout.__aexit__(exc_type, exc, tb)
            except TimeoutError as expired:
                raise translate_redis_error(expired, self.what) from expired
        if exc is not None and is_redis_failure(exc):
            raise translate_redis_error(exc, self.what) from exc
