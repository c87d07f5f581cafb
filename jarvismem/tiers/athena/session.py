"""One Athena session per (tenant, user, agent), created once and reused across runs.

The session id is cached in Redis, and a Redis lock makes sure concurrent
first uses (tasks or processes) create exactly one session. Without Redis (or
while it is down) the id is kept by the Athena client, under one creation lock
per key, so every memory using that client shares it. A session belongs to one
server: the key names the server (a hash of its URL), so an id is never sent to
another one.

Only writes create a session (:meth:`AthenaSessions.current`); reads look the
cached one up (:meth:`AthenaSessions.lookup`) and find nothing for an agent that
never wrote. The server answers 404 "session not found" for any datastore error
on a session lookup, so :meth:`AthenaSessions.call` replaces a session only
after a second 404 and a healthy ``/api/v1/health``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from jarvismem.backends.redis import RedisBackend
from jarvismem.backends.redis_connect import RedisClient
from jarvismem.errors import (
    AthenaError,
    AthenaNotFoundError,
    AthenaUnavailableError,
    AthenaUnsupportedError,
    BackendRejectedError,
    BackendUnavailableError,
)
from jarvismem.keys import KeySpace
from jarvismem.resilience import Backoff
from jarvismem.tiers.athena.config import AthenaTierConfig
from jarvismem.tiers.athena.gate import RequestGate

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient

__all__ = ["RELEASE_IF_OWNER", "AthenaSessions", "text"]

log = logging.getLogger(__name__)

_CREATOR_POLL = Backoff(base=0.02, cap=0.2, factor=1.5, jitter="none")
"""How often a process waiting for another one's new session looks for its id."""

_WHAT = "Athena session cache"
"""Names the Redis operations here in the backend's errors."""

RELEASE_IF_OWNER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
"""Delete a lock or claim only if we still own it (it may have expired and moved on)."""

_T = TypeVar("_T")


def text(value: bytes | str | None) -> str | None:
    """A Redis reply as text (clients may or may not decode responses)."""
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


class AthenaSessions:
    """Resolves, caches and renews the session of one (tenant, user, agent).

    Attributes:
        session_id: the session in use; "" until resolved.
    """

    def __init__(
        self,
        client: AthenaClient,
        redis: RedisBackend | RedisClient | None,
        keys: KeySpace,
        *,
        config: AthenaTierConfig,
        agent_id: str,
        gate: RequestGate,
        metadata: dict[str, str] | None = None,
    ) -> None:
        """The session of (``config.tenant_id``, ``config.user_id``, ``agent_id``).

        ``config`` also gives the creation lock's lifetime (``session_lock_ttl``)
        and the wait before a created session is confirmed (``confirm_delay``).
        ``metadata``: given to a session this creates. ``redis``: the runtime's
        backend, or a redis-py client (adopted); None keeps the id in the client.
        """
        tenant_id, user_id = config.tenant_id, config.user_id
        self._client = client
        self._confirm_delay = max(0.0, config.confirm_delay)
        # Chains inherit session metadata and search filters match on it.
        self._metadata = dict(metadata or {})
        self._redis = None if redis is None else RedisBackend.adopt(redis)
        self._tenant, self._user, self._agent = tenant_id, user_id, agent_id
        destination = KeySpace.athena_destination(tenant_id, user_id, agent_id, client.base_url)
        self._key = keys.athena_session(destination)
        self._lock_key = keys.athena_session_lock(destination)
        self._lock_ttl_ms = max(1000, int(config.session_lock_ttl * 1000))
        self._gate = gate
        self.session_id = ""

    @property
    def agent_id(self) -> str:
        """The agent whose session this is."""
        return self._agent

    async def current(self) -> str:
        """The session id, resolving it now if Athena was unreachable before."""
        if not self.session_id:
            self.session_id = await self.ensure()
        return self.session_id

    async def lookup(self) -> str:
        """The session id if one is known (here or cached in Redis), else ""; never creates one.

        What reads use: a read for an agent that never wrote must not leave a
        session behind on the server.
        """
        if self.session_id:
            return self.session_id
        cached: str | None = None
        if self._redis is not None:
            try:
                cached = await self._cached(self._redis, None)
            except (BackendUnavailableError, BackendRejectedError):
                cached = None
        cached = cached or self._client.known_session(self._key)
        if cached:
            self.session_id = cached
        return self.session_id

    async def call(self, op: Callable[[str], Awaitable[_T]], session_id: str) -> _T:
        """``op(session_id)``, replacing the session only once its loss is confirmed.

        A 404 may be a transient datastore error the server reports as "session
        not found": ``op`` is tried again after ``confirm_delay`` (a request
        answered 404 changed nothing, so a write may be repeated). A second 404
        replaces the session only if the server says it is healthy; otherwise
        :class:`AthenaUnavailableError` is raised and the session is kept.
        """
        try:
            return await op(session_id)
        except AthenaNotFoundError:
            pass
        await asyncio.sleep(self._confirm_delay)
        try:
            return await op(session_id)
        except AthenaNotFoundError as exc:
            if not await self._server_healthy():
                raise AthenaUnavailableError(
                    f"Athena answered 404 for the session of agent {self._agent} while not "
                    f"healthy; kept the session ({exc})"
                ) from None
        return await op(await self.renew(session_id))

    async def _server_healthy(self) -> bool:
        """True when ``/api/v1/health`` says healthy, or the server has no such route."""
        try:
            health = await self._client.health_detailed()
        except (AthenaUnsupportedError, AthenaNotFoundError):
            return True  # cannot ask: two 404s in a row are the evidence we have
        except AthenaError:
            return False
        return health.healthy

    async def renew(self, stale: str) -> str:
        """A new session in place of ``stale``, which the server no longer knows."""
        log.warning("Athena forgot session of agent %s; using a new one", self._agent)
        self.session_id = await self.ensure(stale=stale)
        return self.session_id

    async def ensure(self, stale: str | None = None) -> str:
        """The cached session id, or a new one made by exactly one creator.

        ``stale`` is an id the server no longer knows: a cache holding it counts
        as empty, and the new id replaces it only if nobody replaced it first.
        """
        if self._redis is None:
            return await self._ensure_local(stale)
        try:
            return await self._ensure_shared(self._redis, stale)
        except (BackendUnavailableError, BackendRejectedError) as exc:
            # Redis down: fall back to the client's cache rather than stall Athena.
            cause = type(exc.__cause__ or exc).__name__
            log.warning("Redis unavailable for the Athena session cache (%s)", cause)
            return await self._ensure_local(stale)

    async def _cached(self, redis: RedisBackend, stale: str | None) -> str | None:
        cached = text(await redis.call("get", self._key, what=_WHAT))
        return cached if cached and cached != stale else None

    async def _ensure_shared(self, redis: RedisBackend, stale: str | None) -> str:
        cached = await self._cached(redis, stale)
        if cached:
            return cached
        token = uuid.uuid4().hex
        waits = 0
        while True:
            locked = await redis.call(
                "set", self._lock_key, token, nx=True, px=self._lock_ttl_ms, what=_WHAT
            )
            if locked:
                try:
                    cached = await self._cached(redis, stale)
                    if cached:
                        return cached
                    session_id = await self._create()
                    # No TTL: the session is reused for as long as the server knows it.
                    await redis.call("set", self._key, session_id, what=_WHAT)
                    log.info("Athena session created for agent %s", self._agent)
                    return session_id
                finally:
                    await redis.call("eval", RELEASE_IF_OWNER, 1, self._lock_key, token, what=_WHAT)
            # Someone else is creating it: wait for their id instead of making another.
            await asyncio.sleep(_CREATOR_POLL.delay(waits))
            waits += 1
            cached = await self._cached(redis, stale)
            if cached:
                return cached

    async def _ensure_local(self, stale: str | None) -> str:
        async with self._client.session_lock(self._key):
            cached = self._client.known_session(self._key)
            if cached and cached != stale:
                return cached
            session_id = await self._create()
            self._client.remember_session(self._key, session_id)
            return session_id

    async def _create(self) -> str:
        return await self._gate.run(
            lambda: self._client.create_session(
                self._tenant, self._user, self._agent, metadata=self._metadata
            )
        )
