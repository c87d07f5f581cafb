"""Writes that survive a backend outage: try the backend, else a durable local outbox.

A :class:`DurableWriter` sits in front of one backend for one workflow. While
the backend answers and nothing is pending, a write goes straight through. When
a write fails for a *transient* reason (connection refused, timeout, a server
that is loading, out of memory or short of replicas), it is appended to the
outbox on local disk instead, and every later write joins the queue behind it,
so the backend receives them **in order**. One background task per writer
replays the outbox with capped backoff until it is empty.

The rules that keep this safe when processes crash, stall or race:

* **One deliverer per outbox on the machine.** The drain task takes the
  outbox's non-re-entrant delivery claim; :meth:`DurableWriter.flush` never
  delivers itself, it wakes the drain task and waits for the outbox to empty
  (whoever delivers it: this process or another).
* **Replay starts whenever the outbox is non-empty, whoever notices**: on the
  first use in this process, on a write that finds the file changed behind
  this process's back (one ``stat``), on a read, and on the runtime's
  periodic poll.
* **Replays are idempotent and monotonic**: the records carry their own
  operation ids and stamps, checked server-side (the ledger's exactly-once
  index; the checkpoint script's op ids and stamps), so a record delivered
  twice, or after a newer live write, changes nothing.
* **Only outages are retried.** Replay is the outbox's one
  :class:`~jarvismem.backends.outbox.Deliverer`: a record the backend refuses
  for good (a wrong key type, a malformed or unknown record), or one stamped
  for another destination, is moved to the outbox's dead-letter file, counted
  and logged; it never wedges the records behind it. A live write refused for
  good takes the same path.
* **The caller is never failed by the fallback**: a full outbox or a local
  disk error drops the record with a count and a warning (``health()``
  shows it), instead of raising into ``log_turn``. A record the disk refuses
  behind a backlog first gets one replay pass at once; if the queue empties,
  it is written live behind the replayed records instead of being dropped.
* **A backlog is replayed in runs, not one record per round trip.** Given
  ``apply_many`` (and ``batchable``, which records it takes), consecutive
  batchable records are applied by one call (the ledger sends a run of turns
  as one script call: one round trip). Outcomes are taken in queue order: the
  records before the first outage are acknowledged, that one and every later
  one stay queued, so order and exactly-once hold as for single records.
* **Recovery is noticed, not waited out.** After a long outage the replay
  backoff has grown to its cap (seconds). Given a ``probe`` (a cheap "does the
  backend answer?", such as a :class:`~jarvismem.backends.redis.RedisBackend`'s ``probe``),
  a backed-off writer asks it every ``probe_interval`` and replays at once when
  the backend answers again after not answering. A backend that answers the
  probe while writes still fail (short of replicas, out of memory, read-only)
  gets one early retry, then waits out the backoff as without a probe.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from jarvismem import telemetry
from jarvismem.backends.outbox import (
    Apply,
    ApplyMany,
    Deliverer,
    DeliveryPacing,
    Outbox,
    RunApplier,
)
from jarvismem.backends.redis_failures import is_transient_redis_error
from jarvismem.defaults import OUTBOX_CLAIM_POLL_SECONDS
from jarvismem.errors import JarvisMemError, is_retryable
from jarvismem.resilience import Backoff

log = telemetry.logger(__name__)

Probe = Callable[[], Awaitable[bool]]
"""Does the backend answer now? (cheap, never raises)"""


class _NotNow:
    def __repr__(self) -> str:
        return "NOT_NOW"


NOT_NOW: Any = _NotNow()
"""What an :data:`ApplyNow` returns when the record needs the awaited path."""

ApplyNow = Callable[[dict[str, Any]], Any]
"""Applies a record at once, without awaiting, when it can (a local append into the
page cache); returns its result, or :data:`NOT_NOW` to take the awaited ``apply``.
It raises what ``apply`` would raise for the same record."""

PROBE_SECONDS = 0.1
"""How often a backed-off writer with a probe asks whether its backend is back."""

CLAIM_POLL_SECONDS = OUTBOX_CLAIM_POLL_SECONDS
"""How often a writer whose outbox another deliverer holds re-reads the file."""

LIVE_CLAIM_POLL_SECONDS = 0.01
"""How often a write the disk refused asks for the delivery claim while a pass holds it."""

REPLAY_BACKOFF_BASE = 0.05
"""Wait after the first failed replay pass, in seconds (then doubling up to ``max_backoff``)."""


@dataclass(frozen=True, slots=True)
class WriterPolicy:
    """The bounds and pacing of one :class:`DurableWriter` (one value per backend kind).

    Attributes:
        timeout: bound of one write to the backend, live or replayed, in seconds.
        max_backoff: the cap of the replay backoff, in seconds.
        batch: records replayed per step.
        probe_interval: how often a backed-off writer with a probe asks it, in seconds.
    """

    timeout: float
    max_backoff: float = 2.0
    batch: int = 200
    probe_interval: float = PROBE_SECONDS

    def __post_init__(self) -> None:
        # A zero or negative bound would spin replay or fail every write at once.
        for name in ("timeout", "max_backoff", "probe_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"WriterPolicy.{name} must be a positive number, got {value!r}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"WriterPolicy.batch must be a positive int, got {self.batch!r}")


def is_backend_failure(exc: BaseException) -> bool:
    """True for a transient failure of a backend: the write is queued and retried.

    The one policy, :func:`~jarvismem.errors.is_retryable` (the error class's own
    ``retryable``, for Redis and blob storage alike), also knowing redis-py's
    own errors for an applier that lets one through untranslated. False for
    everything else: jarvismem's own input errors (caller bugs, raised before
    anything is written) and refusals that would repeat (a wrong key type, a
    script error, a blob write refused for permissions or a read-only file
    system: dead-lettered, so they never wedge the records behind them).
    """
    if isinstance(exc, JarvisMemError):
        return exc.retryable
    return is_retryable(exc) or is_transient_redis_error(exc)


def is_caller_error(exc: BaseException) -> bool:
    """True for a bad value passed by the caller (surfaces on a live write)."""
    return isinstance(exc, JarvisMemError) and isinstance(exc, ValueError | TypeError)


class DurableWriter:
    """Write-through with a durable, ordered, bounded fallback queue.

    ``apply(record)`` performs one write against the backend and returns its
    result; it must be idempotent for a record applied twice (a lost reply is
    retried by replay). Construction does no I/O and starts no task: the first
    awaited call loads the outbox (in a worker thread) and starts the replay
    of anything a previous process left behind. ``policy`` bounds and paces
    it (:class:`WriterPolicy`); ``probe``, ``apply_many``, ``batchable`` and
    ``apply_now`` are described in the module docstring.
    """

    def __init__(
        self,
        name: str,
        outbox: Outbox,
        apply: Apply,
        *,
        policy: WriterPolicy,
        probe: Probe | None = None,
        apply_many: ApplyMany | None = None,
        batchable: Callable[[dict[str, Any]], bool] | None = None,
        apply_now: ApplyNow | None = None,
    ) -> None:
        self.name = name
        self.outbox = outbox
        self._apply = apply
        self._apply_now = apply_now
        self.policy = policy
        self.timeout = timeout = policy.timeout
        max_backoff, batch = policy.max_backoff, policy.batch
        # Given the applier itself, not a method of this writer: no reference
        # cycle, so an evicted workflow's writer and outbox are freed at once.
        self._deliverer = Deliverer(
            outbox,
            apply,
            name=name,
            pacing=DeliveryPacing(batch=batch, timeout=timeout),
            runs=None if apply_many is None else RunApplier(apply_many, batchable),
            retryable=is_backend_failure,
        )
        self.max_backoff = max_backoff
        # No jitter: one deliverer per outbox on the machine, nothing to spread.
        self._backoff = Backoff(base=REPLAY_BACKOFF_BASE, cap=max_backoff, jitter="none")
        self.batch = max(1, batch)
        self._probe = probe
        self.probe_interval = policy.probe_interval
        # Whether the last backoff pause was ended by the probe (see _backed_off).
        self._probe_woke = False
        self._drainer: asyncio.Task[None] | None = None
        # Futures of flush(stop_at_failure=True) calls, resolved by the next failed replay pass.
        self._failure_waiters: list[asyncio.Future[None]] = []
        self._wake: asyncio.Event | None = None
        self._started = False
        self.last_error: str | None = None
        # A disk fault drops every write until it clears: one ERROR per burst, not per write.
        self._dropping = False
        self.last_error_at: float | None = None
        self._closed = False

    @property
    def replayed(self) -> int:
        """Records replayed from the outbox by this writer."""
        return self._deliverer.delivered

    @property
    def degraded(self) -> bool:
        """True while writes are queued locally instead of reaching the backend."""
        return len(self.outbox) > 0

    async def ensure_started(self) -> None:
        """Load the outbox once and replay a leftover (idempotent, cheap after the first)."""
        if not self._started:
            await self.outbox.load()
            self._started = True
        if self.degraded:
            self._ensure_drainer()

    async def notice(self) -> bool:
        """Re-read the outbox if another process changed it; start replay if non-empty.

        One ``stat`` when nothing changed. Returns :attr:`degraded`.
        """
        if not self._started:
            await self.ensure_started()
        elif self.outbox.stale():
            await self.outbox.refresh()
        if self.degraded:
            self._ensure_drainer()
        return self.degraded

    async def submit(self, record: dict[str, Any]) -> Any:
        """Apply ``record`` now and return the backend's result, or queue it and return None.

        Never raises for a backend failure: an outage queues the record, a
        refusal dead-letters it, a full outbox or a disk error drops it (each
        counted and logged). Raises only for a caller error found by ``apply``.
        """
        if not self._started or self.outbox.stale():
            await self.notice()
        if not self.degraded:
            try:
                if self._apply_now is not None:
                    # Done without awaiting (nothing to time out): no timer per write.
                    result = self._apply_now(record)
                    if result is not NOT_NOW:
                        return result
                # asyncio.timeout, not wait_for: no extra task on the hot path.
                async with asyncio.timeout(self.timeout):
                    return await self._apply(record)
            except Exception as exc:
                if is_caller_error(exc):
                    raise
                if not is_backend_failure(exc):
                    await self._dead_letter_live(record, exc)
                    return None
                self._note_failure(exc)
                await self._queue(record, behind_backlog=False)
                return None
        return await self._queue(record, behind_backlog=True)

    async def _queue(self, record: dict[str, Any], *, behind_backlog: bool) -> Any:
        """Queue ``record`` (returns None); when the disk refuses, try it live.

        ``behind_backlog``: queued only to keep its place behind pending records
        (its own live write did not just fail). Returns the backend's result
        when the record went live (see :meth:`_try_live`).
        """
        try:
            if not await self.outbox.put(record):
                telemetry.outbox_dropped(self.name)  # full: counted and logged by the outbox
        except OSError as exc:
            if behind_backlog:
                taken, result = await self._try_live(record)
                if taken:
                    return result
            # The local disk refused the fallback too (full, read-only): the
            # write is lost. Count it and say so, but never fail the caller.
            self.outbox.dropped += 1
            telemetry.outbox_dropped(self.name)
            log.log(
                logging.DEBUG if self._dropping else logging.ERROR,
                "%s: could not queue a write in the local outbox (%s, errno %s); dropped "
                "(and every write until the disk takes one again; counted in health())",
                self.name,
                type(exc).__name__,
                exc.errno,
            )
            self._dropping = True
            return
        if self._dropping:
            self._dropping = False
            log.warning("%s: the local outbox takes writes again", self.name)
        self._ensure_drainer()
        return None

    async def _try_live(self, record: dict[str, Any]) -> tuple[bool, Any]:
        """The disk refused to queue ``record`` behind a backlog: replay it now, then go live.

        The backend may take writes again while the replay waits out its
        backoff (out of memory: PING answered all along, so the probe could
        not cut it short). One replay pass now; if it empties the queue,
        ``record`` is applied live, behind the replayed records. Returns
        (True, the backend's result) then; (False, None) when the probe says
        the backend is down, the claim stays taken, or records remain queued
        (a live write may never overtake them): the caller drops the record.
        """
        if self._closed or (self._probe is not None and not await self._probe()):
            return False, None
        if not await self._claim_soon():
            return False, None
        try:
            await self._deliverer.run_claimed()
        except Exception as exc:
            # An OSError is the outbox's disk (an ack a read-only disk refused: what
            # was applied left the view anyway, to be replayed again later,
            # harmlessly). Whatever it was, the view below decides; the caller is
            # never failed by the fallback.
            self._note_failure(exc, disk=isinstance(exc, OSError))
        finally:
            self.outbox.release_delivery()
        if self.degraded:
            if self._deliverer.last_error is not None:
                self._note_failure(self._deliverer.last_error)
            return False, None
        self._event().set()  # the drain task's backoff ends: nothing is left to replay
        try:
            async with asyncio.timeout(self.timeout):
                return True, await self._apply(record)
        except Exception as exc:
            if is_caller_error(exc):
                raise
            if not is_backend_failure(exc):
                await self._dead_letter_live(record, exc)
                return True, None
            self._note_failure(exc)
            return False, None

    async def _claim_soon(self) -> bool:
        """Take the delivery claim, waiting up to ``timeout`` for its holder's pass to end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while not self.outbox.try_claim_delivery():
            if self._closed or loop.time() >= deadline:
                return False
            await asyncio.sleep(LIVE_CLAIM_POLL_SECONDS)
        return True

    async def _dead_letter_live(self, record: dict[str, Any], exc: BaseException) -> None:
        """A live write refused for good: the deliverer's refusal, before it was ever queued."""
        try:
            await self._deliverer.refuse(None, record, exc)
        except OSError:
            self.outbox.dropped += 1
            telemetry.outbox_dropped(self.name)

    def _note_failure(self, exc: BaseException, *, disk: bool = False) -> None:
        """Keep ``exc`` as the last error and log it; ``disk``: the outbox's own disk refused."""
        previous = self.last_error
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        self.last_error_at = time.time()
        if disk:
            if self.last_error != previous:
                log.warning(
                    "%s: the local outbox disk refused a replay step (%s, errno %s), "
                    "not the backend; replay retries",
                    self.name,
                    type(exc).__name__,
                    getattr(exc, "errno", None),
                )
            return
        if previous is None or not self.degraded:
            log.warning(
                "%s unavailable (%s); queueing writes in the local outbox",
                self.name,
                type(exc).__name__,
            )

    def _wake_failure_waiters(self) -> None:
        waiters, self._failure_waiters = self._failure_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _ensure_drainer(self) -> None:
        if self._closed or (self._drainer is not None and not self._drainer.done()):
            return
        self._drainer = asyncio.get_running_loop().create_task(
            self._drain_loop(), name=f"jarvismem-drain-{self.name}"
        )

    def _event(self) -> asyncio.Event:
        if self._wake is None:
            self._wake = asyncio.Event()
        return self._wake

    async def _pause(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; a flush (or a new write) cuts it short (then True)."""
        wake = self._event()
        woken = False
        try:
            async with asyncio.timeout(seconds):
                await wake.wait()
                woken = True
        except TimeoutError:
            pass
        wake.clear()
        return woken

    async def _backed_off(self, seconds: float) -> None:
        """The pause after a failed replay pass: ``seconds``, ended early by recovery.

        With a probe, it is asked every ``probe_interval``; an answer after a
        failed probe (the backend was down and is back) ends the pause. The
        first answer ends it too, unless the previous pause ended that way and
        the replay failed all the same: then the backend answers but refuses the
        writes for now, and only a down-then-up turn (or the backoff) ends it.
        """
        probe = self._probe
        if probe is None or seconds <= self.probe_interval:
            await self._pause(seconds)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        down_seen = not self._probe_woke
        self._probe_woke = False
        while not self._closed:
            left = deadline - loop.time()
            if left <= 0 or await self._pause(min(self.probe_interval, left)):
                return
            if await probe():
                if down_seen:
                    self._probe_woke = True
                    return
            else:
                down_seen = True

    async def _drain_loop(self) -> None:
        failures = 0  # consecutive failed replay passes
        while not self._closed:
            if not self.degraded:
                break
            if not self.outbox.try_claim_delivery():
                # Another deliverer (another process, or another writer of this
                # path here) is replaying the file: never become a second one.
                await self._pause(CLAIM_POLL_SECONDS)
                await self.outbox.refresh()
                continue
            try:
                await self._deliver_claimed()
                failures = 0
                self._probe_woke = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # An OSError raised by the pass itself (not the outage it stopped
                # at, which may be one too) is the outbox's disk, not the backend.
                disk = isinstance(exc, OSError) and exc is not self._deliverer.last_error
                self._note_failure(exc, disk=disk)
                self._wake_failure_waiters()
                self.outbox.release_delivery()  # free during the backoff: a peer may replay
                await self._backed_off(self._backoff.delay(failures))
                failures += 1
            finally:
                self.outbox.release_delivery()
        if not self.degraded and self.last_error is not None:
            log.warning(
                "%s recovered; outbox replayed (%d records so far)", self.name, self.replayed
            )
            self.last_error = None

    async def _deliver_claimed(self) -> None:
        """Replay the outbox in order while holding the claim; raise the outage that stops it."""
        await self._deliverer.run_claimed()
        if self._deliverer.last_error is not None:
            raise self._deliverer.last_error

    async def flush(self, timeout: float, *, stop_at_failure: bool = False) -> bool:
        """Wait up to ``timeout`` seconds for the outbox to empty; True if it did.

        Never a second deliverer: it wakes this writer's drain task (cutting
        its backoff short) and waits for it; when another process holds the
        claim, it waits for that process's replay.

        ``stop_at_failure``: return as soon as a replay pass started after this
        call fails (the backend is still down, so waiting out ``timeout`` only
        delays the caller: a bundle, a shutdown); the records stay queued.
        """
        deadline = time.monotonic() + timeout
        await self.notice()
        while self.degraded and not self._closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._ensure_drainer()
            drainer = self._drainer
            if drainer is None:
                break
            waits: set[asyncio.Future[Any]] = {drainer}
            failed: asyncio.Future[None] | None = None
            if stop_at_failure:
                failed = asyncio.get_running_loop().create_future()
                self._failure_waiters.append(failed)
                waits.add(failed)
            self._event().set()
            try:
                await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if failed is not None and not failed.done():
                    failed.cancel()
            if failed is not None and failed.done() and not failed.cancelled():
                break
            if drainer.done() and self.degraded:
                # It stopped on an outage or a peer's claim and left records behind.
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        return not self.degraded

    async def pending_records(self) -> list[dict[str, Any]]:
        """Every record still queued, oldest first (reads during an outage)."""
        if not self.degraded:
            return []
        queued = await self.outbox.peek(max(1, len(self.outbox)))
        # A record for another destination is never applied here, so never read here.
        return [record for seq, record in queued if self.outbox.misdirected_to(seq) is None]

    def health(self) -> dict[str, Any]:
        """Pending, dropped, dead-lettered and replayed counts and the last error (no secrets)."""
        return {
            "pending": len(self.outbox),
            "pending_bytes": self.outbox.pending_bytes,
            "dropped": self.outbox.dropped,
            "dead_lettered": self.outbox.dead,
            "foreign": self.outbox.foreign,
            "replayed": self.replayed,
            "degraded": self.degraded,
            "last_error": self.last_error,
            # The outbox's own disk condition (read-only, full, a folder in the way), if any.
            "disk_error": self.outbox.disk_error,
        }

    async def close(self) -> None:
        self._closed = True
        if self._drainer is not None:
            self._drainer.cancel()
            try:
                await self._drainer
            except (asyncio.CancelledError, Exception):
                pass
        await self.outbox.close()
