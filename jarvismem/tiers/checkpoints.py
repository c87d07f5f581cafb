"""Checkpoints: the kernel's resumable state per (workflow, step), with revisions.

A checkpoint is an opaque string (usually JSON) stored in a Redis hash with a
monotonically increasing ``rev``. A save may name the revision it was based on
(``expected_rev``); if someone saved in between, the save is refused with
:class:`~jarvismem.errors.CheckpointConflictError` instead of silently
overwriting their state. Without ``expected_rev`` the save is last-writer-wins,
as in the reference API.

Every save also carries an operation id and a stamp, both checked inside the
save script:

* the **operation id** (kept for the step's last 32 saves) makes a save
  idempotent: sent again after its reply was lost (by redis-py's retry or an
  outbox replay), it finds its id, returns the revision it made, and writes
  nothing; a conditional save never reports a conflict with itself;
* a revision is one write: a save reports only a revision it made itself. One
  skipped because a newer save was stored returns None, not the stored revision;
* the **stamp** (microseconds from a per-process hybrid clock, see
  :class:`StampClock`) orders saves in real time. A conditional save always
  lands when its revision matches (its stamp is raised above the stored one if
  a clock lags); an unconditional save, sent at once or replayed from the
  outbox, lands only if it is newer than what is stored, so a queued old
  checkpoint can never replace a newer acknowledged one.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from jarvismem.backends.redis import RedisBackend
from jarvismem.defaults import MAX_CHECKPOINT_BYTES
from jarvismem.errors import CheckpointConflictError, InvalidPayloadError, PayloadTooLargeError
from jarvismem.keys import MAX_REVISION, KeySpace, validate_revision

OPS_KEPT = 32
"""Operation ids remembered per step: a retry or replay of one of them is a no-op."""

# KEYS: checkpoint hash, op-id sorted set. ARGV: state, expected rev ("" =
# unconditional), ts, ttl, stamp (integer microseconds), op id, "live"|"replay".
# Returns {1, rev, stamp} when applied now or earlier (same op id), {0, rev, 0}
# on a stale expected rev, {2, rev, stored stamp} for a replay older than the
# stored save (superseded: nothing written), {3, -1, 0} when the stored
# revision is already MAX_REVISION (ARGV[9]) or unreadable: Lua numbers are
# doubles, so rev + 1 would not be exact; nothing is written. Stamps stay below
# 2^53, exact in Lua's doubles. The two "done already" answers still write (a
# TTL refresh): with replicated durability the WAIT after the script waits for
# the connection's last write, and must cover the save they report.
_SAVE_LUA = """
local seen = redis.call('ZSCORE', KEYS[2], ARGV[6])
if seen then
  redis.call('EXPIRE', KEYS[2], ARGV[4])
  return {1, tonumber(seen), 0}
end
local cur = redis.call('HMGET', KEYS[1], 'rev', 'stamp')
local rev = tonumber(cur[1] or '0')
if not rev or rev >= tonumber(ARGV[9]) then return {3, -1, 0} end
local stored = tonumber(cur[2] or '0')
local stamp = tonumber(ARGV[5])
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= rev then
  return {0, rev, 0}
end
if stamp <= stored then
  if ARGV[7] == 'replay' then
    redis.call('EXPIRE', KEYS[1], ARGV[4])
    return {2, rev, stored}
  end
  stamp = stored + 1
end
rev = rev + 1
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'rev', rev, 'ts', ARGV[3],
  'stamp', string.format('%d', stamp))
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], rev, ARGV[6])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[8]) + 1))
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {1, rev, stamp}
"""


class StampClock:
    """Strictly increasing microsecond stamps: wall time, never below one seen.

    A hybrid logical clock for one process: every stamp it issues is above
    every stamp it issued or observed (from a loaded checkpoint), so a save
    made after reading a state always orders after that state, even when
    another machine's clock runs ahead. Processes on one machine share the
    wall clock, so their stamps order their saves in real time.
    """

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(time.time_ns() // 1000, self._last + 1)
            return self._last

    def observe(self, stamp: int) -> None:
        with self._lock:
            if stamp > self._last:
                self._last = stamp


CLOCK = StampClock()
"""The process's stamp clock (shared by every runtime: saves of one process are ordered)."""


def new_op_id() -> str:
    """A unique operation id for one save."""
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A stored checkpoint: its state, revision and save time (epoch seconds)."""

    state: str
    rev: int
    ts: float
    stamp: int = 0
    queued: bool = False
    """True for a save still waiting in the local outbox (its ``rev`` is not assigned yet: 0)."""


def validate_checkpoint(state: object, max_bytes: int) -> str:
    """The state as a str, or a specific error before anything is written."""
    if not isinstance(state, str):
        raise InvalidPayloadError(
            f"checkpoint state must be a str (e.g. json.dumps(state)), got {type(state).__name__}"
        )
    size = len(state.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"checkpoint is {size} bytes; MAX_CHECKPOINT_BYTES is {max_bytes}"
        )
    try:
        state.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPayloadError("checkpoint state contains unpaired surrogates") from None
    return state


def validate_checkpoint_rev(rev: object) -> int:
    """``rev`` if a checkpoint may hold it (an int in ``1..MAX_REVISION``), else
    :class:`~jarvismem.errors.InvalidPayloadError`."""
    try:
        return validate_revision(rev, "checkpoint revision", minimum=1)
    except ValueError as exc:
        raise InvalidPayloadError(str(exc)) from None


LOAD_FIELDS = ("state", "rev", "ts", "stamp")
"""The hash fields :meth:`CheckpointStore.load` reads, in its reply's order."""


class CheckpointStore:
    """Save and load one step's checkpoint."""

    def __init__(
        self,
        redis: Any,
        keyspace: KeySpace,
        workflow_id: str,
        step_id: str,
        *,
        ttl_seconds: int,
        max_bytes: int = MAX_CHECKPOINT_BYTES,
    ) -> None:
        self.redis = RedisBackend.adopt(redis)
        self.key = keyspace.checkpoint(workflow_id, step_id)
        self.ops_key = keyspace.checkpoint_ops(workflow_id, step_id)
        self.ttl_seconds = ttl_seconds
        self.max_bytes = max_bytes
        self._script = self.redis.script(_SAVE_LUA)

    async def save(
        self, state: str, *, expected_rev: int | None = None, ts: float | None = None
    ) -> int | None:
        """Store ``state``; returns the new revision (None: see :meth:`save_validated`).

        Raises :class:`CheckpointConflictError` when ``expected_rev`` is given and
        is not the stored revision (nothing is written then), and
        :class:`~jarvismem.errors.BackendUnavailableError` when Redis cannot be
        reached (the save may or may not have landed; saving again with the
        same outcome is safe).
        """
        validate_checkpoint(state, self.max_bytes)
        return await self.save_validated(state, expected_rev=expected_rev, ts=ts)

    async def save_validated(
        self,
        state: str,
        *,
        expected_rev: int | None = None,
        ts: float | None = None,
        stamp: int | None = None,
        op_id: str | None = None,
        replay: bool = False,
    ) -> int | None:
        """:meth:`save` for a state already validated (live saves and outbox replay).

        ``stamp``/``op_id`` default to fresh ones. With ``replay=True`` a save
        older than the stored one is skipped and returns None: it wrote no
        revision, and the stored one is another save's, never to be reported
        as this one's (a caller holding it would then pass it as
        ``expected_rev`` and overwrite a state it never saw).
        """
        stamp = CLOCK.next() if stamp is None else stamp
        # With replicated durability, acknowledged only once WAIT confirmed it.
        reply = await self.redis.run_script(
            self._script,
            [self.key, self.ops_key],
            [
                state,
                "" if expected_rev is None else str(expected_rev),
                repr(time.time() if ts is None else ts),
                self.ttl_seconds,
                stamp,
                op_id or new_op_id(),
                "replay" if replay else "live",
                OPS_KEPT,
                MAX_REVISION,
            ],
            what="checkpoint save",
        )
        ok, rev = int(reply[0]), int(reply[1])
        if ok == 3:
            raise InvalidPayloadError(
                f"checkpoint {self.key}: the stored revision is at or above {MAX_REVISION} "
                "(2^53-1) or unreadable, so it cannot be raised exactly; nothing was written"
            )
        if int(reply[2]):
            CLOCK.observe(int(reply[2]))
        if ok == 2:
            return None  # superseded: a newer save is stored, this one never will be
        if not ok:
            raise CheckpointConflictError(
                f"stale checkpoint revision: expected {expected_rev}, stored {rev}",
                expected=expected_rev,
                actual=rev,
            )
        return rev

    async def load(self) -> Checkpoint | None:
        """The stored checkpoint, or None."""
        raw = await self.redis.call("hmget", self.key, list(LOAD_FIELDS), what="checkpoint load")
        return self._decode(raw)

    @staticmethod
    def _decode(raw: Any) -> Checkpoint | None:
        """The checkpoint in an ``HMGET`` reply of :data:`LOAD_FIELDS` (None: none stored)."""
        state, rev, ts, stamp = raw
        if state is None:
            return None
        checkpoint = Checkpoint(
            state=state.decode("utf-8") if isinstance(state, bytes) else str(state),
            rev=int(rev or 0),
            ts=float(ts or 0.0),
            stamp=int(stamp or 0),
        )
        # A save made after this read must order after it, whatever our clock says.
        CLOCK.observe(checkpoint.stamp)
        return checkpoint

    async def restore(self, state: str, rev: int, ts: float) -> None:
        """Write an exported checkpoint back as it was: for import only.

        Unlike :meth:`save`, the revision is the given one (not the stored one
        plus one), so a kernel's ``expected_rev`` stays meaningful after an
        export and import. No stamp or operation id is written: the restored
        state orders before any later live save. Raises
        :class:`~jarvismem.errors.InvalidPayloadError` /
        :class:`~jarvismem.errors.PayloadTooLargeError` for a state :meth:`save`
        would refuse or a revision outside ``1..MAX_REVISION`` (2^53-1, the
        largest the save script raises exactly; nothing is written then), and
        :class:`~jarvismem.errors.BackendUnavailableError` when Redis cannot be reached.
        """
        validate_checkpoint(state, self.max_bytes)
        validate_checkpoint_rev(rev)

        def build(pipe: Any) -> None:
            pipe.hset(self.key, mapping={"state": state, "rev": rev, "ts": repr(ts)})
            pipe.expire(self.key, self.ttl_seconds)

        await self.redis.pipeline(build, what="checkpoint restore", transaction=True)
