"""Delivery of one agent's Athena outbox: in order, effectively once, behind a circuit breaker.

One background task per memory replays the outbox through the agent's
session, claiming each event first (:mod:`.markers`) so a turn logged twice is
sent once, and leaving Athena alone while the circuit (:mod:`.circuit`) says so.
The outbox's one :class:`~jarvismem.backends.outbox.Deliverer` applies the
policy every outbox shares: an outage (a retryable error: 5xx, 429, no answer,
refused credentials) stops the pass and the circuit backs off; a record Athena
refuses for good (another 4xx, 501) or one stamped for another destination is
moved to the outbox's dead-letter file with its reason, counted, and the
records behind it carry on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from jarvismem.backends.outbox import Deliverer, DeliveryPacing, Outbox, RecordDestination
from jarvismem.errors import (
    AthenaUnsupportedError,
    InvalidPayloadError,
    MisdirectedRecordError,
)
from jarvismem.tiers.athena.circuit import DeliveryCircuit
from jarvismem.tiers.athena.config import KERNEL_BUSY_GAP
from jarvismem.tiers.athena.gate import RequestGate
from jarvismem.tiers.athena.markers import DeliveryMarkers
from jarvismem.tiers.athena.session import AthenaSessions
from jarvismem.tiers.athena.status import TierStatus

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient

__all__ = ["AthenaDelivery"]

log = logging.getLogger(__name__)

DELIVERY_BATCH = 50
"""Records read from the outbox file per step."""

ACK_EVERY = 10
"""Records sent between two cursor writes: a crash resends at most this many (each
event still claimed once in Redis, so a resend is skipped while Redis answers)."""


def _destination_of(record: dict[str, Any]) -> Any:
    """Where an Athena record says it goes (stamped by the memory that queued it)."""
    return record.get("dest")


def _route_of(record: dict[str, Any]) -> str:
    """The Athena route a record is sent to, as ``health()["unsupported"]`` names it."""
    return "interactions" if record.get("kind") == "interaction" else "events"


class AthenaDelivery:
    """The background delivery of one memory's outbox to its session.

    ``destination``: records stamped for another one are dead-lettered, never sent.
    """

    def __init__(
        self,
        *,
        destination: str,
        outbox: Outbox,
        client: AthenaClient,
        sessions: AthenaSessions,
        markers: DeliveryMarkers,
        circuit: DeliveryCircuit,
        gate: RequestGate,
        status: TierStatus,
    ) -> None:
        self._agent = sessions.agent_id
        self._dest = destination
        self._outbox = outbox
        self._client = client
        self._sessions = sessions
        self._markers = markers
        self._gate = gate
        self._status = status
        self.circuit = circuit
        self._deliverer = Deliverer(
            outbox,
            self._send,
            name="athena",
            pacing=DeliveryPacing(batch=DELIVERY_BATCH, ack_every=ACK_EVERY),
            destination=RecordDestination(destination, _destination_of),
            on_refused=self._refused,
        )
        self._last_activity = 0.0
        self._flushing = False
        self._wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def delivered(self) -> int:
        """Records delivered since this memory started (refused ones not counted)."""
        return self._deliverer.delivered

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
        seconds (an interrupted record is delivered again later). While another
        deliverer holds the outbox's claim (this memory's background pass, or
        another process), it waits for the claim, never delivering beside it.
        """
        before = self._deliverer.delivered
        self._flushing = True
        try:
            async with asyncio.timeout(timeout):
                # None: the claim was held; run_once waited a poll and re-read the file.
                while await self._drain(None) is None:
                    if not len(self._outbox) or self._gate.closed:
                        break
        except TimeoutError:
            pass
        finally:
            self._flushing = False
        return self._deliverer.delivered - before

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
            # As long as the longest backoff: an unexpected error is not retried in a spin.
            self.circuit.pause(self.circuit.longest_backoff)
            log.warning("Athena delivery loop error: %s", self._status.last_error)

    async def _drain(self, max_records: int | None = None) -> int | None:
        """One delivery pass under the outbox's claim; updates the circuit breaker.

        None when another deliverer held the claim (no evidence either way)."""
        delivered = await self._deliverer.run_once(max_records)
        if delivered is None:
            return None
        error = self._deliverer.last_error
        if error is None:
            if self.circuit.record_success():
                log.warning("Athena delivery recovered; circuit closed")
            return delivered
        self.count_failure(error)
        return delivered

    # --- one record ----------------------------------------------------------------------

    async def _send(self, record: dict[str, Any]) -> None:
        """Deliver one outbox record (the deliverer checked its destination)."""
        if self._gate.closed:
            # Stop at a record boundary: the record stays queued for the next run.
            raise asyncio.CancelledError
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
            session_id = await self._sessions.current()
        except AthenaUnsupportedError:
            self._status.unsupported.add("sessions")
            raise
        # A 404 replaces the session only once confirmed (not a datastore hiccup).
        await self._sessions.call(lambda sid: self._post(sid, record), session_id)

    def _refused(self, record: dict[str, Any], error: BaseException) -> None:
        """The deliverer dead-lettered ``record``: this tier's counts of why."""
        if isinstance(error, MisdirectedRecordError):
            self._status.misdirected += 1
            return
        self._status.rejected += 1
        if isinstance(error, AthenaUnsupportedError):
            # 501: this server does not have the route. Not an outage: no retry,
            # no circuit opening; named in health()["unsupported"].
            if "sessions" not in self._status.unsupported:
                self._status.unsupported.add(_route_of(record))
            return
        self._status.note(error)

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
            # Records queued before roles were sent have none: they were the agent's.
            role=event.get("role") or "agent",
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
