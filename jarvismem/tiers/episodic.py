"""Tier 2: the episodic ledger, one Redis Stream per workflow.

Every field of an entry is stored JSON-encoded, so values come back with the
type they went in with (the string ``"42"`` stays a string, ``42`` an int), with
one exception: ``turn_id`` is an id, stored as its canonical string (an int
turn id ``1`` reads back as ``"1"``), because ``1`` and ``"1"`` name the same
turn in the exactly-once index; storing the caller's type would give one
workflow's entries mixed types (every entry written so far holds a string).
Appends set the TTL in the same round trip (one Lua script), and retention is
bounded by an approximate ``MAXLEN`` trim.

Turns are exactly-once: :meth:`EpisodicLedger.append_turn` records each
``(step, agent, turn_id)`` in an index hash inside the same script, so a kernel
that re-runs its last turn after a crash (or an outbox replay of a turn that
had in fact landed) stores it once.

The namespace's workflow index (:meth:`~jarvismem.keys.KeySpace.workflow_index`,
a sorted set workflow -> last write ms, read by ``jarvismem workflows``) is
kept by the appends too, but *not* inside the append script: on a Redis
Cluster the index key lives in another slot than the workflow's keys, and one
script cannot touch both. Instead a ledger object sends one ``ZADD GT`` of its
own, concurrently with the append (no added round trip), on its first append
and then at most once per :data:`INDEX_REFRESH_SECONDS`. A busy workflow thus
costs the index one command a minute per process, and the index score is the
last write time to within that minute (the listing reads the exact time from
the ledger's newest entry). A failed index update is retried on the next
append; the turn itself is unaffected.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jarvismem.backends.redis import RedisBackend
from jarvismem.backends.redis_failures import is_transient_reply
from jarvismem.defaults import CONTEXT_TTL_SECONDS, LEDGER_TAIL
from jarvismem.errors import BackendRejectedError, BackendUnavailableError, InvalidIdError
from jarvismem.keys import KeySpace, validate_id, validate_turn_id
from jarvismem.records import decode_entry, encode_fields, entry_tokens

# KEYS: ledger, turn index[, compaction counters]. ARGV: index field ("" = no
# dedupe), ttl seconds, maxlen (0 = unbounded), tokens, then field/value pairs.
# Returns {1, id} when appended, {0, id-of-the-earlier-copy} when a duplicate.
# A duplicate still writes (refreshes the index's TTL): with replicated
# durability the WAIT after it must cover the earlier copy, and WAIT waits for
# the connection's last *write*; a script that wrote nothing would be confirmed
# at once even if that copy never reached a replica.
# With the counters key, a new entry also adds one turn and its tokens to the
# workflow's compaction counters in the same atomic call (so no turn is counted
# twice, or lost by a crash between two round trips) and the reply carries the
# totals: {1, id, turns, tokens}. The counters are read before anything is
# written, so a counters key of the wrong type fails the call before the XADD.
_APPEND_LUA = """
if ARGV[1] ~= '' then
  local existing = redis.call('HGET', KEYS[2], ARGV[1])
  if existing then
    redis.call('EXPIRE', KEYS[2], ARGV[2])
    return {0, existing}
  end
end
local turns, tokens
if KEYS[3] then
  local now = redis.call('HMGET', KEYS[3], 'turns', 'tokens')
  turns = (tonumber(now[1]) or 0) + 1
  tokens = (tonumber(now[2]) or 0) + tonumber(ARGV[4])
end
local id
if tonumber(ARGV[3]) > 0 then
  id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', unpack(ARGV, 5))
else
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 5))
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], id)
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
if KEYS[3] then
  redis.call('HSET', KEYS[3], 'turns', turns, 'tokens', tokens)
  redis.call('EXPIRE', KEYS[3], ARGV[2])
  return {1, id, turns, tokens}
end
return {1, id}
"""

# The same append for a run of turns (an outbox replay), in one script call: one
# round trip (and one WAIT when replicated) for the run, applied atomically and in
# order. KEYS: ledger, turn index[, compaction counters]. ARGV: ttl seconds, maxlen
# (0 = unbounded), then per turn: index field ("" = no dedupe), its tokens, the
# count n of its strings, n field/value strings. Returns one reply per turn: {1,
# id} appended, {0, id} a duplicate, {2, message} refused: a malformed entry (the
# other turns still apply), or a refusal for now such as OOM, which the caller
# tells apart by the reply's code. The TTLs are refreshed once, at the end: always
# a write (the index exists once a deduplicated turn is in it), which the WAIT
# after it covers, as above. The appended turns are counted as in _APPEND_LUA.
_APPEND_MANY_LUA = """
local maxlen = tonumber(ARGV[2])
local out = {}
local turns, tokens
if KEYS[3] then
  local now = redis.call('HMGET', KEYS[3], 'turns', 'tokens')
  turns = tonumber(now[1]) or 0
  tokens = tonumber(now[2]) or 0
end
local added = 0
local i = 3
while i <= #ARGV do
  local field = ARGV[i]
  local weight = tonumber(ARGV[i + 1])
  local first = i + 3
  local last = i + 2 + tonumber(ARGV[i + 2])
  i = last + 1
  local existing = false
  if field ~= '' then
    existing = redis.call('HGET', KEYS[2], field)
  end
  if existing then
    out[#out + 1] = {0, existing}
  else
    local id
    if maxlen > 0 then
      id = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, first, last))
    else
      id = redis.pcall('XADD', KEYS[1], '*', unpack(ARGV, first, last))
    end
    if type(id) == 'table' and id.err then
      out[#out + 1] = {2, id.err}
    else
      if field ~= '' then
        redis.call('HSET', KEYS[2], field, id)
      end
      added = added + 1
      if KEYS[3] then
        tokens = tokens + weight
      end
      out[#out + 1] = {1, id}
    end
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
if KEYS[3] and added > 0 then
  redis.call('HSET', KEYS[3], 'turns', turns + added, 'tokens', tokens)
  redis.call('EXPIRE', KEYS[3], ARGV[1])
end
return out
"""

REPLAY_CALL_BYTES = 512 * 1024
"""Most bytes of turns one :meth:`EpisodicLedger.append_encoded_many` script call
carries: a replay of big turns is split so one call never holds the server long."""


INDEX_REFRESH_SECONDS = 60
"""How stale a workflow's score in the namespace index may get while it is written.

A bound on extra commands, not a setting: the listing shows the exact last
activity from the ledger itself and drops index entries only once they are
older than the ledger TTL plus this."""

log = logging.getLogger(__name__)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Outcome of an append: the stream id and whether it was new.

    ``counters``: the workflow's compaction counters (turns, tokens since the
    last summary) right after a new entry was counted in them; None when the
    ledger counts nothing (no compaction) or the entry was a duplicate.
    """

    id: str
    created: bool
    counters: tuple[int, int] | None = None


class EpisodicLedger:
    """What happened, in order: a Redis Stream of one workflow's turns.

    Every method raises jarvismem's errors only: a Redis failure is
    :class:`~jarvismem.errors.BackendUnavailableError` (outage, timeout) or
    :class:`~jarvismem.errors.BackendRejectedError` (a refusal that would repeat).
    """

    def __init__(
        self,
        redis: Any,
        keyspace: KeySpace,
        workflow_id: str,
        *,
        ttl_seconds: int = CONTEXT_TTL_SECONDS,
        max_len: int = 0,
        count_for_compaction: bool = False,
    ) -> None:
        """``count_for_compaction``: every new entry adds one turn and its tokens
        (:func:`~jarvismem.records.entry_tokens`) to the workflow's compaction
        counters, inside the append's own script."""
        # A redis-py client gets a backend of its own (primary durability).
        self.redis = RedisBackend.adopt(redis)
        self.workflow_id = validate_id(workflow_id, "workflow_id")
        self.key = keyspace.ledger(workflow_id)
        # Named once: every append is wrapped, and formatting per call shows in profiles.
        self._append_what = f"ledger of {workflow_id}: append"
        self.index_key = keyspace.turn_index(workflow_id)
        self._keys = [self.key, self.index_key]
        if count_for_compaction:
            self._keys.append(keyspace.ltm_state(workflow_id))
        self.ttl_seconds = ttl_seconds
        self.max_len = max_len
        self._script = self.redis.script(_APPEND_LUA)
        self._many_script = self.redis.script(_APPEND_MANY_LUA)
        self._index_key = keyspace.live().workflow_index()
        # Monotonic deadline of the next index refresh (0: refresh on the next append).
        self._index_due = 0.0
        # A staging ledger (an import building a workflow aside) is not a workflow yet.
        self._indexed = keyspace.staging is None

    # --- writes ------------------------------------------------------------------------

    async def append(self, entry: Mapping[str, Any]) -> str:
        """Append any JSON-able mapping; returns its stream id. Not deduplicated."""
        result = await self._append(entry, dedupe_field="")
        return result.id

    async def append_turn(
        self,
        *,
        step_id: str,
        agent_id: str,
        turn_id: str | int,
        thought: Any,
        action: Any,
        result: Any,
        tokens: int = 0,
        ts: float | None = None,
    ) -> AppendResult:
        """Append a turn exactly once per ``(step, agent, turn_id)``."""
        turn = validate_turn_id(turn_id)
        entry = {
            "turn_id": turn,
            "step_id": step_id,
            "agent_id": agent_id,
            "ts": time.time() if ts is None else ts,
            "thought": thought,
            "action": action,
            "result": result,
            "tokens": tokens,
        }
        return await self._append(entry, KeySpace.turn_field(step_id, agent_id, turn))

    async def append_encoded(
        self, args: list[str], dedupe_field: str, tokens: int = 0
    ) -> AppendResult:
        """Append pre-encoded field/value pairs (``log_turn`` and the outbox replay).

        ``tokens``: what the entry adds to the compaction counters (its
        :func:`~jarvismem.records.entry_tokens`), when this ledger counts.

        Redis failures raise :class:`~jarvismem.errors.BackendUnavailableError`
        (the append may or may not have landed; appending again is safe for a
        deduplicated turn) or :class:`~jarvismem.errors.BackendRejectedError`.
        """
        # Coalesced with the appends other tasks issue meanwhile (one pipelined
        # round trip for many agents); errors come back translated.
        call = self.redis.evalsha(
            self._script,
            self._keys,
            [dedupe_field, self.ttl_seconds, self.max_len, tokens, *args],
            what=self._append_what,
        )
        if self._indexed and time.monotonic() >= self._index_due:
            # Rare (once a minute per workflow): the index update rides alongside.
            reply = (await asyncio.gather(call, self._touch_index()))[0]
        else:
            reply = await call
        counters = (int(reply[2]), int(reply[3])) if len(reply) > 3 else None
        return AppendResult(id=_text(reply[1]), created=bool(int(reply[0])), counters=counters)

    async def append_encoded_many(
        self, turns: Sequence[tuple[list[str], str, int]]
    ) -> list[AppendResult | BackendRejectedError | BackendUnavailableError]:
        """Append a run of pre-encoded turns ``(args, dedupe_field, tokens)`` in order.

        One script call per :data:`REPLAY_CALL_BYTES` of turns instead of one per
        turn: a backlog drains in a few round trips. Each call is atomic, so a
        failure never leaves a later turn stored before an earlier one of the
        same call. Returns one outcome per turn, in order: its
        :class:`AppendResult`, a :class:`~jarvismem.errors.BackendRejectedError`
        for a turn the server refused (the rest still applied), or, from the
        first call that failed for an outage on, the
        :class:`~jarvismem.errors.BackendUnavailableError` of that call (those
        turns may or may not have landed: appending them again is safe).
        """
        outcomes: list[AppendResult | BackendRejectedError | BackendUnavailableError] = []
        for chunk in _chunks(turns, REPLAY_CALL_BYTES):
            args: list[Any] = [self.ttl_seconds, self.max_len]
            for fields, dedupe_field, tokens in chunk:
                args += [dedupe_field, tokens, len(fields), *fields]
            try:
                replies = await self.redis.evalsha(
                    self._many_script, self._keys, args, what=self._append_what
                )
            except BackendUnavailableError as exc:
                outcomes += [exc] * (len(turns) - len(outcomes))
                return outcomes
            for reply in replies:
                status = int(reply[0])
                if status == 2 and is_transient_reply(_text(reply[1])):
                    # Refused for now (out of memory, read-only, short of replicas):
                    # an outage, not a malformed turn. It and every later turn stay
                    # queued, in order (a turn of this call that did land is found
                    # again by the index when re-sent).
                    down = BackendUnavailableError(
                        f"{self._append_what}: Redis unavailable ({_text(reply[1])[:200]})"
                    )
                    outcomes += [down] * (len(turns) - len(outcomes))
                    return outcomes
                if status == 2:
                    outcomes.append(
                        BackendRejectedError(f"{self._append_what}: refused ({_text(reply[1])})")
                    )
                else:
                    outcomes.append(AppendResult(id=_text(reply[1]), created=status == 1))
        if self._indexed and time.monotonic() >= self._index_due:
            await self._touch_index()
        return outcomes

    async def _touch_index(self) -> None:
        """``ZADD GT`` this workflow's last-write time into the namespace index; never raises."""
        self._index_due = time.monotonic() + INDEX_REFRESH_SECONDS
        try:
            await self.redis.call(
                "zadd",
                self._index_key,
                {self.workflow_id: int(time.time() * 1000)},
                gt=True,
                what=f"workflow index: {self.workflow_id}",
            )
        except (BackendUnavailableError, BackendRejectedError) as exc:
            self._index_due = 0.0  # try again with the next append
            log.debug("workflow index not updated for %s: %s", self.workflow_id, exc)

    async def _append(self, entry: Mapping[str, Any], dedupe_field: str) -> AppendResult:
        return await self.append_encoded(encode_fields(entry), dedupe_field, entry_tokens(entry))

    # --- reads ---------------------------------------------------------------------------

    async def tail(
        self, count: int = LEDGER_TAIL, before: str | None = None
    ) -> list[dict[str, Any]]:
        """The last ``count`` entries (strictly before the id ``before``, if given),
        oldest first. One XREVRANGE."""
        if count <= 0:
            return []
        rows = await self.redis.call(
            "xrevrange",
            self.key,
            max="+" if before is None else f"({before}",
            min="-",
            count=count,
            what=f"ledger of {self.workflow_id}: tail",
        )
        return [decode_entry(sid, fields) for sid, fields in reversed(rows)]

    async def range_after(self, after_id: str | None, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` entries strictly after ``after_id`` (None: from the start)."""
        start = "-" if after_id is None else f"({after_id}"
        rows = await self.redis.call(
            "xrange",
            self.key,
            min=start,
            max="+",
            count=count,
            what=f"ledger of {self.workflow_id}: range",
        )
        return [decode_entry(sid, fields) for sid, fields in rows]

    async def iter_history(
        self, *, after_id: str | None = None, page_size: int = 500
    ) -> AsyncIterator[dict[str, Any]]:
        """Every entry after ``after_id``, oldest first, fetched ``page_size`` at a time."""
        cursor = after_id
        while True:
            page = await self.range_after(cursor, page_size)
            for entry in page:
                yield entry
            if len(page) < page_size:
                return
            cursor = page[-1]["id"]

    async def full_history(self) -> list[dict[str, Any]]:
        """Every entry, oldest first (prefer :meth:`iter_history` for long ledgers)."""
        return [entry async for entry in self.iter_history()]

    async def length(self) -> int:
        """Number of entries currently in the stream."""
        what = f"ledger of {self.workflow_id}: length"
        return int(await self.redis.call("xlen", self.key, what=what))

    async def find_turn(self, step_id: str, agent_id: str, turn_id: str | int) -> str | None:
        """Stream id of a logged turn, or None."""
        field = KeySpace.turn_field(step_id, agent_id, turn_id)
        what = f"ledger of {self.workflow_id}: find turn"
        raw = await self.redis.call("hget", self.index_key, field, what=what)
        return None if raw is None else _text(raw)


def _chunks(
    turns: Sequence[tuple[list[str], str, int]], max_bytes: int
) -> list[Sequence[tuple[list[str], str, int]]]:
    """``turns`` split into runs of about ``max_bytes`` (at least one turn each), in order."""
    out: list[Sequence[tuple[list[str], str, int]]] = []
    start, size = 0, 0
    for i, (fields, field, _) in enumerate(turns):
        weight = len(field) + sum(len(str(value)) for value in fields)
        if i > start and size + weight > max_bytes:
            out.append(turns[start:i])
            start, size = i, 0
        size += weight
    if start < len(turns):
        out.append(turns[start:])
    return out


def stream_id_ms(stream_id: str) -> int | None:
    """The millisecond time of a stream id (``<ms>-<seq>``), or None if it is not one."""
    head = stream_id.partition("-")[0]
    return int(head) if head.isdigit() else None


@dataclass(frozen=True, slots=True)
class LedgerStats:
    """What ``jarvismem workflows`` shows of one ledger.

    ``entries``: entries the stream holds now (after trimming); ``turns``:
    distinct turns logged (the exactly-once index; a trimmed turn still
    counts); ``last_ms``: time of the newest entry (None when empty).
    """

    entries: int
    turns: int
    last_ms: int | None


async def ledger_stats(redis: Any, keyspace: KeySpace, workflow_id: str) -> LedgerStats:
    """Counts and last activity of a workflow's ledger: three reads of one slot, concurrently.

    ``redis``: a :class:`RedisBackend` (or a redis-py client).
    """
    backend = RedisBackend.adopt(redis)
    key = keyspace.ledger(workflow_id)
    what = f"ledger of {workflow_id}: stats"
    entries, turns, newest = await asyncio.gather(
        backend.call("xlen", key, what=what),
        backend.call("hlen", keyspace.turn_index(workflow_id), what=what),
        backend.call("xrevrange", key, count=1, what=what),
    )
    last = stream_id_ms(_text(newest[0][0])) if newest else None
    return LedgerStats(entries=int(entries), turns=int(turns), last_ms=last)


class WorkflowIndex:
    """The namespace's sorted set workflow id -> last write (ms): reads and upkeep.

    Appends keep it (see the module doc); this reads it, rebuilds it from the
    ledgers that exist (data written before the index, or by an import), and
    drops entries. One key, so on a Redis Cluster every command here goes to
    one node; the rebuild's SCAN visits every primary.
    """

    def __init__(self, redis: Any, keyspace: KeySpace) -> None:
        self.redis = RedisBackend.adopt(redis)
        self.keyspace = keyspace.live()
        self.key = self.keyspace.workflow_index()

    async def entries(self) -> dict[str, int]:
        """Every indexed workflow id with its score (last write, ms), newest first."""
        rows = await self.redis.call(
            "zrevrange", self.key, 0, -1, withscores=True, what="workflow index: read"
        )
        out: dict[str, int] = {}
        for member, score in rows:
            workflow = _text(member)
            try:
                out[validate_id(workflow, "workflow_id")] = int(score)
            except InvalidIdError:
                continue  # written by something else: not a workflow this namespace can name
        return out

    async def add(self, workflow_id: str, when_ms: int) -> None:
        """Record activity of ``workflow_id`` at ``when_ms`` (never moves a score back)."""
        member = validate_id(workflow_id, "workflow_id")
        await self.redis.call(
            "zadd", self.key, {member: when_ms}, gt=True, what="workflow index: add"
        )

    async def remove(self, workflow_id: str) -> bool:
        """Drop ``workflow_id`` from the index; True if it was there."""
        member = validate_id(workflow_id, "workflow_id")
        return bool(await self.redis.call("zrem", self.key, member, what="workflow index: remove"))

    async def rebuild(self) -> int:
        """Add every workflow whose ledger exists (SCAN); returns how many were found."""
        found = 0
        pattern = self.keyspace.ledger_pattern()
        async for raw in self.redis.scan(pattern, what="workflow index: scan ledgers"):
            workflow = self.keyspace.workflow_from_ledger(_text(raw))
            if workflow is None:
                continue
            stats = await ledger_stats(self.redis, self.keyspace, workflow)
            if stats.last_ms is not None:
                await self.redis.call(
                    "zadd", self.key, {workflow: stats.last_ms}, gt=True, what="workflow index: add"
                )
                found += 1
        return found
