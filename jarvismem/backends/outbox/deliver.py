"""The one deliverer of every outbox: apply in order, retry outages, refuse the rest.

A :class:`Deliverer` replays one outbox (Redis, blob storage, Athena) through
an ``apply`` callable, oldest record first, and decides each outcome by one
policy:

* **applied**: acknowledged (every ``ack_every`` records and whenever a pass
  stops, so a crash replays at most that many: at-least-once, made harmless by
  the backends' idempotent writes);
* **an outage** (:func:`~jarvismem.errors.is_retryable`, read from the error
  class): the pass stops there; that record and every later one stay queued,
  in order, for the caller's next pass (its backoff or circuit breaker);
* **a refusal** (any other error, and a record stamped for another
  destination, which is never applied): the record moves to the outbox's
  dead-letter file ``<outbox>.dead`` with its reason, is counted (``dead``,
  persisted) and logged at ERROR, and the records behind it carry on.

One deliverer per outbox file on the machine: a pass runs under the outbox's
delivery claim (:meth:`run_once` takes it; a caller that holds it already
calls :meth:`run_claimed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jarvismem import telemetry
from jarvismem.backends.outbox.store import Outbox
from jarvismem.defaults import OUTBOX_CLAIM_POLL_SECONDS
from jarvismem.errors import MisdirectedRecordError, is_retryable

__all__ = [
    "Apply",
    "ApplyMany",
    "Deliverer",
    "DeliveryPacing",
    "RecordDestination",
    "Refused",
    "RunApplier",
]

log = telemetry.logger(__name__)

Apply = Callable[[dict[str, Any]], Awaitable[Any]]
"""Applies one record to the backend; raises what stopped it."""

ApplyMany = Callable[[list[dict[str, Any]]], Awaitable[Sequence[Any]]]
"""Applies a run of records in order; returns one outcome per record: its result, or
the exception it met (an outage's error on every record from the first it stopped)."""

Refused = Callable[[dict[str, Any], BaseException], None]
"""Told of each record refused for good (after it is in the dead-letter file)."""

_REASON_CHARS = 300
"""Longest refusal reason logged (the dead-letter file keeps up to 500)."""


@dataclass(frozen=True, slots=True)
class DeliveryPacing:
    """How much a :class:`Deliverer` takes at a time and how long one call may last.

    Attributes:
        batch: records read from the file per step (at least 1).
        ack_every: delivered records between two acknowledgements (default
            ``batch``); each is a file write.
        timeout: bound of one ``apply`` / ``apply_many`` call (None: the
            backend client's own bounds).
    """

    batch: int = 100
    ack_every: int | None = None
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class RunApplier:
    """Applies a run of consecutive records in one call (one round trip for a backlog).

    Attributes:
        apply_many: applies the run (see :data:`ApplyMany`).
        batchable: which records it takes (None: all of them).
    """

    apply_many: ApplyMany
    batchable: Callable[[dict[str, Any]], bool] | None = None


@dataclass(frozen=True, slots=True)
class RecordDestination:
    """Where a deliverer sends, for records that carry their destination themselves.

    Attributes:
        address: this deliverer's destination.
        of: where a record says it goes; a record for another destination is
            refused, never applied.
    """

    address: str
    of: Callable[[dict[str, Any]], Any]


_DEFAULT_PACING = DeliveryPacing()


class Deliverer:
    """Replays one outbox in order through ``apply`` (see the module docstring).

    Args:
        outbox: the outbox to replay.
        apply: sends one record; must be idempotent (a lost reply is replayed).
        name: the outbox's name in logs and telemetry (``redis[wf]``, ``athena``).
        pacing: batch size, acknowledgement interval and call timeout.
        runs: applies runs of consecutive records in one call (None: one by one).
        retryable: the outage test; default :func:`~jarvismem.errors.is_retryable`.
        destination: for records that carry their destination themselves; one
            for another destination is refused, never applied, like a line the
            outbox itself found stamped for another destination.
        on_refused: told of each refused record (a tier's own counts).
    """

    def __init__(
        self,
        outbox: Outbox,
        apply: Apply,
        *,
        name: str,
        pacing: DeliveryPacing = _DEFAULT_PACING,
        runs: RunApplier | None = None,
        retryable: Callable[[BaseException], bool] = is_retryable,
        destination: RecordDestination | None = None,
        on_refused: Refused | None = None,
    ) -> None:
        self.outbox = outbox
        self.name = name
        self.batch = max(1, pacing.batch)
        self.ack_every = self.batch if pacing.ack_every is None else max(1, pacing.ack_every)
        self.timeout = pacing.timeout
        self._apply = apply
        self._apply_many = None if runs is None else runs.apply_many
        self._batchable = None if runs is None else runs.batchable
        self._retryable = retryable
        self._destination = None if destination is None else destination.address
        self._destination_of = None if destination is None else destination.of
        self._on_refused = on_refused
        # Most records in one apply_many call: halved after a run timed out (a run
        # too big for the timeout must not stall replay for ever), doubled back after.
        self._run_cap = self.batch
        self.delivered = 0
        """Records applied by this deliverer."""
        self.refused = 0
        """Records this deliverer moved to the dead-letter file."""
        self.last_error: BaseException | None = None
        """The outage that stopped the last pass (None: it emptied the outbox or hit its bound)."""
        telemetry.watch_outbox(outbox, name)

    async def run_once(self, max_records: int | None = None) -> int | None:
        """One pass under the delivery claim; None when another deliverer holds it.

        While another deliverer (another process, or another object here)
        holds the claim, this waits one claim poll and re-reads the file,
        so a caller looping on it neither spins nor delivers beside it.
        """
        if not self.outbox.try_claim_delivery():
            await asyncio.sleep(OUTBOX_CLAIM_POLL_SECONDS)
            await self.outbox.refresh()
            return None
        try:
            return await self.run_claimed(max_records)
        finally:
            self.outbox.release_delivery()

    @telemetry.outbox_delivery(lambda deliverer: str(deliverer.name))
    async def run_claimed(self, max_records: int | None = None) -> int:
        """Replay while the caller holds the claim: until empty, an outage or ``max_records``.

        Returns how many records left the queue (applied or refused); an
        outage is left in :attr:`last_error`, never raised.
        """
        self.last_error = None
        await self.outbox.refresh()  # under the claim, the file is ours to replay
        done = 0
        while max_records is None or done < max_records:
            want = self.batch if max_records is None else min(self.batch, max_records - done)
            pending = await self.outbox.peek(want)
            if not pending:
                break
            taken = await self._deliver(pending)
            done += taken
            if self.last_error is not None or taken < len(pending):
                break
        return done

    async def _deliver(self, pending: list[tuple[int, dict[str, Any]]]) -> int:
        """Apply ``pending`` in order; returns how many left the queue."""
        taken = 0
        unacked: int | None = None  # highest applied seq not yet acknowledged
        try:
            for run in self._runs(pending):
                outcomes = await self._apply_run(run)
                for (seq, record), outcome in zip(run, outcomes, strict=True):
                    if not isinstance(outcome, BaseException):
                        unacked = seq
                        taken += 1
                        self.delivered += 1
                        if self.delivered % self.ack_every == 0:
                            await self.outbox.ack(seq)
                            unacked = None
                        continue
                    if self._retryable(outcome):
                        self.last_error = outcome
                        return taken
                    if unacked is not None:  # the cursor moves in order
                        await self.outbox.ack(unacked)
                        unacked = None
                    await self.refuse(seq, record, outcome)
                    taken += 1
        finally:
            # Always acknowledged before returning, even on a cancellation.
            if unacked is not None:
                await self.outbox.ack(unacked)
        return taken

    async def refuse(self, seq: int | None, record: dict[str, Any], error: BaseException) -> None:
        """Move ``record`` to the dead-letter file with its reason, count it, log it.

        ``seq``: the head of the queue (the caller holds the claim), or None
        for a write refused live, before it was ever queued.
        """
        reason = f"{type(error).__name__}: {error}"
        await self.outbox.dead_letter(
            seq, record, reason, misdirected=isinstance(error, MisdirectedRecordError)
        )
        self.refused += 1
        log.error(
            "%s: %s refused for good; moved to %s.dead (%s)",
            self.name,
            "a write" if seq is None else f"record {seq}",
            self.outbox.path.name,
            reason[:_REASON_CHARS],
        )
        if self._on_refused is not None:
            self._on_refused(record, error)

    def _misdirected(self, seq: int, record: dict[str, Any]) -> MisdirectedRecordError | None:
        """The refusal of a record for another destination (None: it is for this one)."""
        other = self.outbox.misdirected_to(seq)
        if other is None and self._destination_of is not None:
            said = self._destination_of(record)
            other = None if said == self._destination else str(said)
        if other is None:
            return None
        return MisdirectedRecordError(
            f"record {seq} of {self.outbox.path.name} is for destination {other}, "
            f"not {self._destination or self.outbox.destination}"
        )

    def _runs(self, pending: list[tuple[int, dict[str, Any]]]) -> list[list[Any]]:
        """``pending`` cut into what one apply call takes: runs of batchable records, or one."""
        if self._apply_many is None:
            return [[item] for item in pending]
        takes = self._batchable
        runs: list[list[Any]] = []
        current: list[Any] = []
        for item in pending:
            if (takes is None or takes(item[1])) and self._misdirected(*item) is None:
                if len(current) >= self._run_cap:
                    runs.append(current)
                    current = []
                current.append(item)
                continue
            if current:
                runs.append(current)
                current = []
            runs.append([item])
        if current:
            runs.append(current)
        return runs

    async def _apply_run(self, run: list[tuple[int, dict[str, Any]]]) -> list[Any]:
        """One outcome per record of ``run`` (a result or its exception), in order."""
        if len(run) == 1 or self._apply_many is None:
            return [await self._apply_one(*run[0])]
        records = [record for _, record in run]
        try:
            async with asyncio.timeout(self.timeout):
                outcomes = list(await self._apply_many(records))
        except Exception as exc:
            if isinstance(exc, TimeoutError):
                self._run_cap = max(1, self._run_cap // 2)
            if self._retryable(exc):
                return [exc] * len(run)
            # Refused as a whole: one record at a time finds the one to refuse.
            outcomes = []
            for item in run:
                outcomes.append(await self._apply_one(*item))
                if isinstance(outcomes[-1], BaseException) and self._retryable(outcomes[-1]):
                    outcomes += [outcomes[-1]] * (len(run) - len(outcomes))
                    break
            return outcomes
        if len(outcomes) != len(run):
            raise RuntimeError(f"{self.name}: {len(outcomes)} outcomes for {len(run)} records")
        self._run_cap = min(self.batch, self._run_cap * 2)
        return outcomes

    async def _apply_one(self, seq: int, record: dict[str, Any]) -> Any:
        """``apply(record)`` under the timeout: its result, or the exception it raised."""
        misdirected = self._misdirected(seq, record)
        if misdirected is not None:
            return misdirected
        try:
            async with asyncio.timeout(self.timeout):
                return await self._apply(record)
        except Exception as exc:
            return exc
