"""Effectively-once delivery: claims and sent-marks of idempotency keys in Redis.

The Athena server does not deduplicate, so before sending an event the
deliverer claims its idempotency key (``SET NX`` with a short lease), marks it
sent afterwards (kept for the workflow TTL) and releases the claim if the send
failed. A turn's keys are derived from (namespace, workflow, step, agent, turn,
kind), so a re-logged turn, from any view or process sharing Redis, is sent
once. Without Redis (or while it is down) delivery is at-least-once. A crash
after a send and before its mark sends that event again once the lease
expires; a claim left by a process that died on this host is taken over at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable

from jarvismem.backends.redis import RedisBackend
from jarvismem.backends.redis_connect import RedisClient
from jarvismem.errors import BackendRejectedError, BackendUnavailableError
from jarvismem.keys import KeySpace
from jarvismem.resilience import Backoff
from jarvismem.tiers.athena.config import CLAIM_LEASE_SECONDS, MARKER_TIMEOUT
from jarvismem.tiers.athena.gate import RequestGate
from jarvismem.tiers.athena.session import RELEASE_IF_OWNER, text

__all__ = ["DeliveryMarkers"]

log = logging.getLogger(__name__)

_CLAIMANT = f"{socket.gethostname()}:{os.getpid()}"
"""Who holds a delivery claim: this host and process (a claim is ``pending:<host>:<pid>:<id>``)."""

_SENT = "sent"

_CLAIMANT_POLL = Backoff(base=0.05, cap=1.0, jitter="none")
"""How often a deliverer waiting for another one's claim to end looks again."""


def _claimant_is_dead(claim: str) -> bool:
    """True for a claim taken on this host by a process that no longer exists."""
    parts = claim.split(":")
    if len(parts) != 4 or parts[0] != "pending" or parts[1] != socket.gethostname():
        return False  # another machine's claim: only its lease can end it
    try:
        pid = int(parts[2])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive (owned by another user)
    return False


class DeliveryMarkers:
    """Claims and sent-marks of idempotency keys in Redis (see the module doc).

    Best effort throughout: when Redis fails, or takes longer than
    :data:`MARKER_TIMEOUT` for one claim, mark or release, delivery goes on
    without a claim (at-least-once) and a warning is logged once. ``redis``: the
    runtime's backend, or a redis-py client (adopted); None means no claims.
    """

    def __init__(
        self,
        redis: RedisBackend | RedisClient | None,
        keys: KeySpace,
        destination: str,
        *,
        dedupe_ttl: int,
        gate: RequestGate,
    ) -> None:
        self._redis = None if redis is None else RedisBackend.adopt(redis)
        self._keys = keys
        self._dest = destination
        self._dedupe_ttl = max(1, int(dedupe_ttl))
        self._gate = gate
        self._warned = False

    async def claim(self, key: str | None) -> str | None:
        """A claim token ("" = no Redis: send without one), or None when already sent.

        A claim held by another deliverer (another process delivering its own
        copy of the turn) is waited for: it ends sent, released, or expired.
        """
        if key is None or self._redis is None:
            return ""
        redis = self._redis
        marker = self._keys.athena_sent(self._dest, key)
        token = f"pending:{_CLAIMANT}:{uuid.uuid4().hex}"
        waits = 0
        while True:
            what = "Athena delivery claim"
            try:
                # One deadline over the attempt (SET NX, then GET of the holder).
                async with redis.guard(what, MARKER_TIMEOUT):
                    lease = int(CLAIM_LEASE_SECONDS * 1000)
                    if await redis.call("set", marker, token, nx=True, px=lease, what=what):
                        return token
                    current = text(await redis.call("get", marker, what=what))
            except (BackendUnavailableError, BackendRejectedError) as exc:
                self._failed(exc)
                return ""
            if current == _SENT:
                return None
            if current is not None and _claimant_is_dead(current):
                # Its deliverer was killed on this machine mid-send: the event may
                # or may not have reached Athena; waiting out the lease would only
                # stall the queue. Take the claim over (compare-and-delete first).
                await self._best_effort("takeover", self._delete_if, key, current)
                continue
            if current is not None:
                if self._gate.closed:
                    raise asyncio.CancelledError
                await asyncio.sleep(_CLAIMANT_POLL.delay(waits))
                waits += 1

    async def mark_sent(self, key: str | None, claim: str) -> None:
        """Remember that ``key`` was sent (for the dedupe TTL)."""
        if key is not None and claim:
            await self._best_effort("mark", self._set_sent, key, claim)

    async def release(self, key: str | None, claim: str) -> None:
        """Give ``claim`` up: the event was not sent (or not known to be)."""
        if key is not None and claim:
            await self._best_effort("release", self._delete_if, key, claim)

    async def _set_sent(self, key: str, claim: str, what: str) -> None:
        assert self._redis is not None
        marker = self._keys.athena_sent(self._dest, key)
        await self._redis.call("set", marker, _SENT, ex=self._dedupe_ttl, what=what)

    async def _delete_if(self, key: str, claim: str, what: str) -> None:
        assert self._redis is not None
        marker = self._keys.athena_sent(self._dest, key)
        await self._redis.call("eval", RELEASE_IF_OWNER, 1, marker, claim, what=what)

    async def _best_effort(
        self, what: str, op: Callable[[str, str, str], Awaitable[None]], key: str, claim: str
    ) -> None:
        # A lost mark only means the lease expires and a later copy of the
        # turn may be sent again (at-least-once), never a lost event.
        assert self._redis is not None
        named = f"Athena delivery {what}"
        try:
            async with self._redis.guard(named, MARKER_TIMEOUT):
                await op(key, claim, named)
        except (BackendUnavailableError, BackendRejectedError) as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "Athena delivery markers unavailable (%s); delivery is at-least-once meanwhile",
                exc,
            )
