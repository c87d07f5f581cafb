"""Delivery of one agent's Athena outbox: in order, effectively once, behind a circuit breaker.

One background task per memory replays the outbox through the agent's
session. Consecutive failures back off exponentially (one
:class:`~jarvismem.resilience.Backoff`); past a threshold the circuit opens for
a cooldown, then one trial record decides whether it closes again.

Effectively-once: the Athena server does not deduplicate, so before sending
an event the deliverer claims its idempotency key in Redis (``SET NX`` with a
short lease), marks it sent afterwards (kept for the workflow TTL) and
releases the claim if the send failed. A turn's keys are derived from
(namespace, workflow, step, agent, turn, kind), so a re-logged turn, from any
view or process sharing Redis, is sent once. Without Redis (or while it is
down) delivery is at-least-once. A crash after a send and before its mark
sends that event again once the lease expires.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.outbox import Outbox, OutboxDrainer
from jarvismem.backends.redis import RedisClient, redis_errors
from jarvismem.errors import (
    AthenaAuthError,
    AthenaBadRequestError,
    AthenaNotFoundError,
    AthenaUnsupportedError,
    BackendRejectedError,
    BackendUnavailableError,
    InvalidPayloadError,
)
from jarvismem.keys import KeySpace
from jarvismem.resilience import Backoff, CircuitBreaker
from jarvismem.tiers.athena.config import (
    CLAIM_LEASE_SECONDS,
    KERNEL_BUSY_GAP,
    MARKER_TIMEOUT,
)
from jarvismem.tiers.athena.gate import RequestGate
from jarvismem.tiers.athena.session import RELEASE_IF_OWNER, AthenaSessions, text
from jarvismem.tiers.athena.status import TierStatus

__all__ = ["AthenaDelivery", "CircuitState", "DeliveryCircuit", "DeliveryMarkers"]

log = logging.getLogger(__name__)

CircuitState = Literal["closed", "open", "half_open"]

_CLAIMANT = f"{socket.gethostname()}:{os.getpid()}"
"""Who holds a delivery claim: this host and process (a claim is ``pending:<host>:<pid>:<id>``)."""

_SENT = "sent"

# Process-wide on purpose: two memories of one agent (two runtimes, or a
# runtime and a CLI command, in one process) share an outbox file, and both
# draining it at once would send its records twice. Held weakly (a lock nobody
# holds or waits for is dropped) and per event loop (a lock serves one loop).
_drain_locks: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, weakref.WeakValueDictionary[Path, asyncio.Lock]
] = weakref.WeakKeyDictionary()


def _drain_lock(path: Path) -> asyncio.Lock:
    locks = _drain_locks.setdefault(asyncio.get_running_loop(), weakref.WeakValueDictionary())
    lock = locks.get(path)
    if lock is None:
        lock = locks[path] = asyncio.Lock()
    return lock


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


def _append_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)


class DeliveryCircuit:
    """Closed, open or half-open, with the time of the next delivery attempt.

    Below ``failure_threshold`` consecutive failures, the next attempt waits
    out ``backoff`` (through a :class:`CircuitBreaker`); at the threshold (or
    when a half-open trial fails) the circuit opens for ``cooldown`` seconds.
    One success closes it. The clock is injectable for tests.
    """

    def __init__(
        self,
        *,
        failure_threshold: int,
        cooldown: float,
        backoff: Backoff,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._breaker = CircuitBreaker(backoff, clock=clock)
        self._threshold = max(1, failure_threshold)
        self._cooldown = cooldown
        self._clock = clock
        self.state: CircuitState = "closed"
        self.open_until = 0.0
        self.next_attempt = 0.0

    @property
    def failures(self) -> int:
        """Consecutive failures so far."""
        return self._breaker.failures

    @property
    def is_closed(self) -> bool:
        """True while deliveries flow normally."""
        return self.state == "closed"

    def reported_state(self) -> CircuitState:
        """The state as ``health()`` shows it: an open circuit past its cooldown is half-open."""
        if self.state == "open" and self._clock() >= self.open_until:
            return "half_open"
        return self.state

    def wait(self) -> float:
        """Seconds until the next attempt (<= 0: now)."""
        return self.next_attempt - self._clock()

    def half_open(self) -> None:
        """The cooldown is over: the next delivery is a trial."""
        self.state = "half_open"

    def record_success(self) -> bool:
        """Close the circuit; True if it was recovering (worth a log line)."""
        recovering = self.state != "closed" or self._breaker.failures > 0
        self.state = "closed"
        self._breaker.record_success()
        return recovering

    def record_failure(self) -> float | None:
        """Count a failure; the backoff it set, or None when the circuit is now open."""
        backoff = self._breaker.record_failure()
        now = self._clock()
        if self.state == "half_open" or self._breaker.failures >= self._threshold:
            self.state = "open"
            self.open_until = self.next_attempt = now + self._cooldown
            return None
        self.next_attempt = now + backoff
        return backoff

    def pause(self, seconds: float) -> None:
        """No attempt for ``seconds`` (an unexpected error; not a delivery failure)."""
        self.next_attempt = self._clock() + seconds


class DeliveryMarkers:
    """Claims and sent-marks of idempotency keys in Redis (see the module doc).

    Best effort throughout: when Redis fails, delivery goes on without a
    claim (at-least-once) and a warning is logged once.
    """

    def __init__(
        self,
        redis: RedisClient | None,
        keys: KeySpace,
        destination: str,
        *,
        dedupe_ttl: int,
        gate: RequestGate,
    ) -> None:
        self._redis = redis
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
        delay = 0.05
        while True:
            try:
                async with redis_errors("Athena delivery claim", MARKER_TIMEOUT):
                    if await redis.set(marker, token, nx=True, px=int(CLAIM_LEASE_SECONDS * 1000)):
                        return token
                    current = text(await redis.get(marker))
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
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)

    async def mark_sent(self, key: str | None, claim: str) -> None:
        """Remember that ``key`` was sent (for the dedupe TTL)."""
        if key is not None and claim:
            await self._best_effort("mark", self._set_sent, key, claim)

    async def release(self, key: str | None, claim: str) -> None:
        """Give ``claim`` up: the event was not sent (or not known to be)."""
        if key is not None and claim:
            await self._best_effort("release", self._delete_if, key, claim)

    async def _set_sent(self, key: str, claim: str) -> None:
        assert self._redis is not None
        await self._redis.set(self._keys.athena_sent(self._dest, key), _SENT, ex=self._dedupe_ttl)

    async def _delete_if(self, key: str, claim: str) -> None:
        assert self._redis is not None
        marker = self._keys.athena_sent(self._dest, key)
        await self._redis.eval(RELEASE_IF_OWNER, 1, marker, claim)

    async def _best_effort(
        self, what: str, op: Callable[[str, str], Awaitable[None]], key: str, claim: str
    ) -> None:
        # A lost mark only means the lease expires and a later copy of the
        # turn may be sent again (at-least-once), never a lost event.
        try:
            async with redis_errors(f"Athena delivery {what}", MARKER_TIMEOUT):
                await op(key, claim)
        except (BackendUnavailableError, BackendRejectedError) as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "Athena delivery markers unavailable (%s); delivery is at-least-once meanwhile",
                exc,
            )


class AthenaDelivery:
    """The background delivery of one memory's outbox to its session.

    ``destination``: records stamped for another one are set aside, never sent.
    """

    def __init__(
        self,
        *,
        agent_id: str,
        destination: str,
        outbox: Outbox,
        client: AthenaClient,
        sessions: AthenaSessions,
        markers: DeliveryMarkers,
        circuit: DeliveryCircuit,
        gate: RequestGate,
        status: TierStatus,
        retry_cap: float,
    ) -> None:
        self._agent = agent_id
        self._dest = destination
        self._outbox = outbox
        self._client = client
        self._sessions = sessions
        self._markers = markers
        self._gate = gate
        self._status = status
        self._retry_cap = retry_cap
        self.circuit = circuit
        self._drainer = OutboxDrainer(outbox, self._send, batch=50)
        self._last_activity = 0.0
        self._flushing = False
        self._wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def delivered(self) -> int:
        """Records delivered (or dropped as refused) since this memory started."""
        return self._drainer.delivered

    def note_write(self) -> None:
        """The kernel just wrote: delivery yields to it for a moment."""
        self._last_activity = time.monotonic()

    def wake(self) -> None:
        """A record was queued: deliver it if the circuit allows."""
        self._wake.set()

    def start(self) -> None:
        """Start the background task (once; not after close)."""
        if self.task is not None or self._gate.closed:
            return
        self.task = asyncio.get_running_loop().create_task(
            self._loop(), name=f"jarvismem-athena-{self._agent}"
        )

    async def flush(self, timeout: float | None = None) -> int:
        """Try to deliver every pending write now; returns how many were delivered.

        Stops at the first failure (the rest stays queued) or after ``timeout``
        seconds (an interrupted record is delivered again later).
        """
        before = self._drainer.delivered
        self._flushing = True
        try:
            async with asyncio.timeout(timeout):
                await self._drain(None)
        except TimeoutError:
            pass
        finally:
            self._flushing = False
        return self._drainer.delivered - before

    def count_failure(self, error: BaseException) -> None:
        """One more consecutive failure: back off, or open the circuit."""
        was_open = self.circuit.state == "open"
        last = self._status.note(error)
        backoff = self.circuit.record_failure()
        if backoff is None:
            if not was_open:
                log.warning(
                    "Athena circuit open after %d failures (%s); %d writes pending",
                    self.circuit.failures,
                    last,
                    len(self._outbox),
                )
            return
        log.warning(
            "Athena delivery failed (%s); %d pending, retry in %.1fs",
            last,
            len(self._outbox),
            backoff,
        )

    # --- the loop ------------------------------------------------------------------------

    async def _loop(self) -> None:
        try:
            await self._outbox.load()  # what a previous run left counts as pending
        except OSError as exc:
            self._status.note(exc)
            log.warning("Athena outbox %s unreadable: %s", self._outbox.path.name, exc)
        while not self._gate.closed:
            wait = self.circuit.wait()
            if wait > 0:
                await asyncio.sleep(wait)  # backoff / open circuit: writes keep queueing
                if self.circuit.state == "open":
                    self.circuit.half_open()
                    # Half-open: one trial record decides.
                    await self._safe_drain(1)
                    if not self.circuit.is_closed:
                        continue
            if not len(self._outbox):
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._safe_drain(None)

    async def _safe_drain(self, max_records: int | None) -> None:
        try:
            await self._drain(max_records)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the loop must survive anything (disk full, a bug)
            self._status.note(exc)
            self.circuit.pause(self._retry_cap)
            log.warning("Athena delivery loop error: %s", self._status.last_error)

    async def _drain(self, max_records: int | None = None) -> int:
        """One delivery run under the per-outbox lock; updates the circuit breaker."""
        async with _drain_lock(self._outbox.path):
            delivered = await self._drainer.run_once(max_records)
            error = self._drainer.last_error
        if error is None:
            if self.circuit.record_success():
                log.warning("Athena delivery recovered; circuit closed")
            return delivered
        self.count_failure(error)
        return delivered

    # --- one record ----------------------------------------------------------------------

    async def _send(self, record: dict[str, Any]) -> None:
        """Deliver one outbox record; return normally to ack (or drop) it."""
        if self._gate.closed:
            # Stop at a record boundary: the record stays queued for the next run.
            raise asyncio.CancelledError
        if record.get("dest") != self._dest:
            await self._misdirect(record)
            return
        await self._yield_to_kernel()
        await self._send_to_session(record)

    async def _yield_to_kernel(self) -> None:
        """Let the agent's own turns go first.

        Delivery shares the event loop with the kernel, and each record costs
        up to three HTTP requests of CPU. While the kernel is busy (a write in
        the last ``KERNEL_BUSY_GAP`` seconds) records go out at most one per
        gap; when it is idle, as fast as Athena answers. ``flush()`` does not wait.
        """
        if self._flushing:
            return
        if time.monotonic() - self._last_activity < KERNEL_BUSY_GAP:
            await asyncio.sleep(KERNEL_BUSY_GAP)

    async def _send_to_session(self, record: dict[str, Any]) -> None:
        try:
            await self._post(await self._sessions.current(), record)
        except AthenaNotFoundError:
            await self._post(await self._sessions.renew(self._sessions.session_id), record)
        except AthenaAuthError:
            raise  # keep it: fixing the credentials makes it deliverable
        except (AthenaBadRequestError, AthenaUnsupportedError, InvalidPayloadError) as exc:
            # Retrying cannot fix it; dropping keeps the queue moving.
            self._status.rejected += 1
            self._status.note(exc)
            log.warning("Athena refused a %s record; dropped it: %s", record.get("kind"), exc)

    async def _post(self, session_id: str, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        if kind == "event":
            await self._once(record.get("idempotency_key"), self._event_post(session_id, record))
        elif kind == "events":
            # Each event is claimed on its own: a redelivery after a failure (or
            # a crash) mid-record skips the events already sent.
            for event in record.get("events", []):
                await self._once(event.get("idempotency_key"), self._event_post(session_id, event))
        elif kind == "interaction":
            await self._once(
                record.get("idempotency_key"),
                lambda: self._client.add_interaction(
                    session_id, record.get("user_message", ""), record.get("agent_response")
                ),
            )
        else:
            raise InvalidPayloadError(f"unknown outbox record kind {kind!r}")

    def _event_post(self, session_id: str, event: dict[str, Any]) -> Callable[[], Awaitable[None]]:
        return lambda: self._client.add_event(
            session_id,
            event["type"],
            event.get("content", ""),
            metadata=event.get("metadata") or {},
            idempotency_key=event.get("idempotency_key"),
        )

    async def _once(self, key: Any, post: Callable[[], Awaitable[None]]) -> None:
        """Send one event unless it was sent already: claim its key, send, mark it sent."""
        if self._gate.closed:
            raise asyncio.CancelledError  # stop between events; the record stays queued
        key = key if isinstance(key, str) else None
        claim = await self._markers.claim(key)
        if claim is None:
            self._status.duplicates_skipped += 1
            return
        try:
            await self._gate.run(post)
        except BaseException:
            # Not sent (or not known to be): let a retry, here or elsewhere, send it.
            await self._markers.release(key, claim)
            raise
        await self._markers.mark_sent(key, claim)

    async def _misdirect(self, record: dict[str, Any]) -> None:
        """A record stamped for another destination: never sent here; set aside and counted."""
        self._status.misdirected += 1
        dead = self._outbox.path.with_name(self._outbox.path.name + ".misdirected")
        log.warning(
            "Athena outbox %s holds a record for another destination; not sent to %s, "
            "moved to %s (%d so far)",
            self._outbox.path.name,
            self._dest,
            dead.name,
            self._status.misdirected,
        )
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        try:
            await asyncio.to_thread(_append_line, dead, line)
        except OSError as exc:
            log.warning("could not keep the misdirected record: %s", exc)
