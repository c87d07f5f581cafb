"""Rolling long-term compaction: when to compress the ledger, and doing it safely.

The ledger counts: its append script adds each new entry (one turn, its
tokens) to the workflow's shared counters in the same atomic call and returns
the totals, so every process of the workflow adds to the same totals at no extra
round trip, and a crash loses no count. The facade hands those totals to
:meth:`Compactor.note_counters`, which starts at most one background
:meth:`Compactor.compact` per workflow in this process when the
:class:`CompactionPolicy` says so.

:meth:`Compactor.compact` holds the workflow's compactor lock (one compactor per
workflow across processes; renewed while working; expires by itself if the holder
dies), reads only the ledger entries after the last summary's ``to_id`` (page by
page, each page folded into the rolling summary, so memory and LLM input stay
bounded), then saves the new summary with its provenance. If the summarizer fails
the old summary stays, the error is recorded in the state hash, and the result
says ``failed``.

The save is fenced (:meth:`~jarvismem.tiers.longterm.LongTermMemory.save_fenced`):
a lock check before saving cannot stop a compactor that stalls right after it
(GC pause, SIGSTOP, a stalled loop) and wakes up after its lock expired, so the
lock token, the summary generation read at the start and a forward-only
``to_id`` are checked again by the writes themselves. A fenced compaction writes
nothing over the newer summary and says ``fenced`` in its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from jarvismem import defaults, telemetry
from jarvismem.backends.llm import Summarizer
from jarvismem.backends.redis import RedisBackend
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    ConfigError,
    LLMError,
    LockNotAcquiredError,
)
from jarvismem.keys import KeySpace, validate_id
from jarvismem.records import entry_tokens
from jarvismem.settings import Settings
from jarvismem.tiers.longterm import LongTermMemory

log = telemetry.logger(__name__)

# KEYS: lock. ARGV: token, ttl ms. Take the lock if free; finding our own token
# counts as taken (a retry after the reply of the first attempt was lost).
_ACQUIRE_LUA = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
"""

# KEYS: lock. ARGV: token, ttl ms. Extend only our own lock.
_RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lock. ARGV: token. Delete only our own lock (compare-and-delete).
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: state hash. ARGV: turns covered, tokens covered, now, ttl seconds, op id.
# Subtract what the new summary covers (turns logged meanwhile keep counting),
# never below zero; stamp the success and clear the last error. The op id makes
# a retry after a lost reply subtract nothing more.
_SETTLE_LUA = """
if redis.call('HGET', KEYS[1], 'settled_op') == ARGV[5] then
  return {tonumber(redis.call('HGET', KEYS[1], 'turns') or '0'),
          tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0')}
end
local turns = tonumber(redis.call('HGET', KEYS[1], 'turns') or '0') - tonumber(ARGV[1])
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0') - tonumber(ARGV[2])
if turns < 0 then turns = 0 end
if tokens < 0 then tokens = 0 end
redis.call('HSET', KEYS[1], 'turns', turns, 'tokens', tokens, 'last_compacted_at', ARGV[3],
           'settled_op', ARGV[5])
redis.call('HDEL', KEYS[1], 'last_error', 'last_error_at')
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {turns, tokens}
"""


class LedgerPager(Protocol):
    """The part of :class:`~jarvismem.tiers.episodic.EpisodicLedger` compaction uses."""

    async def range_after(self, after_id: str | None, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` entries strictly after ``after_id``, oldest first."""
        ...


@dataclass
class CompactionPolicy:
    """When to compact and with which bounds.

    ``every_turns``: compact after this many new turns; ``token_threshold``: or
    after this many estimated tokens, whichever comes first; ``chunk_chars``: most
    new text per summarizer call; ``lock_ttl``: compactor lock expiry in seconds
    (renewed every third of it while working); ``enabled``: background
    compaction on/off (explicit :meth:`Compactor.compact` always works);
    ``page_size``: ledger entries folded per step (per summarizer pass);
    ``read_size``: ledger entries per XRANGE (a page is read in several, so
    decoding one reply never holds the event loop for long and the kernel's
    own commands get in between); ``summary_chars``: length bound of the summary.
    """

    every_turns: int = defaults.COMPACTION_EVERY_TURNS
    token_threshold: int = defaults.COMPACTION_TOKEN_THRESHOLD
    chunk_chars: int = defaults.COMPACTION_CHUNK_CHARS
    lock_ttl: float = defaults.COMPACTION_LOCK_TTL
    enabled: bool = True
    page_size: int = 200
    summary_chars: int = defaults.SUMMARY_MAX_CHARS
    read_size: int = 32

    def __post_init__(self) -> None:
        if self.every_turns < 1:
            raise ConfigError("COMPACTION_EVERY_TURNS must be >= 1")
        if self.token_threshold < 1:
            raise ConfigError("COMPACTION_TOKEN_THRESHOLD must be >= 1")
        if self.chunk_chars < 100:
            raise ConfigError("COMPACTION_CHUNK_CHARS must be >= 100")
        if self.lock_ttl <= 0:
            raise ConfigError("COMPACTION_LOCK_TTL must be > 0")
        if self.page_size < 1 or self.summary_chars < 1 or self.read_size < 1:
            raise ConfigError("compaction page_size, read_size and summary_chars must be >= 1")

    @classmethod
    def from_settings(cls, settings: Settings) -> CompactionPolicy:
        """The policy configured by ``COMPACTION_*`` settings."""
        return cls(
            every_turns=settings.compaction_every_turns,
            token_threshold=settings.compaction_token_threshold,
            chunk_chars=settings.compaction_chunk_chars,
            lock_ttl=settings.compaction_lock_ttl,
            enabled=settings.compaction_enabled,
        )

    def is_due(self, turns: int, tokens: int) -> bool:
        """Whether ``turns``/``tokens`` since the last summary call for compaction."""
        return turns >= self.every_turns or tokens >= self.token_threshold


@dataclass
class CompactionResult:
    """Outcome of one :meth:`Compactor.compact` run.

    ``compacted``: a new summary was saved; ``entries``: ledger entries folded in
    by this run; ``from_id``/``to_id``: ledger ids the saved summary covers (the
    whole rolling range); ``chars``: summary length; ``reason``: why nothing was
    saved, or what happened; ``failed``: the summarizer failed and the old
    summary was kept; ``fenced``: another save came first (a compactor
    that took the lock after this one's expired, or a user's ``save_summary``) and
    this run's older summary was not written over it (``reason`` starts with
    ``fenced:``).
    """

    compacted: bool
    entries: int = 0
    from_id: str | None = None
    to_id: str | None = None
    chars: int = 0
    reason: str = ""
    failed: bool = False
    fenced: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (for JSON output)."""
        return asdict(self)


def _int(value: Any) -> int:
    try:
        return int(value.decode() if isinstance(value, bytes) else value)
    except (TypeError, ValueError, AttributeError):
        return 0


class _LockLost(Exception):
    """Internal: our lock expired or was taken while we worked."""


class Compactor:
    """Runs long-term compaction of one workflow."""

    def __init__(
        self,
        redis: Any,
        ltm: LongTermMemory,
        ledger: LedgerPager,
        summarizer: Summarizer,
        keyspace: KeySpace,
        workflow_id: str,
        policy: CompactionPolicy,
    ) -> None:
        """``redis``: backend (or client) holding the lock and the counters; ``ltm``: where
        summaries go; ``ledger``: where entries come from; ``summarizer``: who
        condenses them; ``policy``: when and with which bounds.
        """
        self.redis = RedisBackend.adopt(redis)
        self.ltm = ltm
        self.ledger = ledger
        self.summarizer = summarizer
        self.workflow_id = validate_id(workflow_id, "workflow_id")
        self.policy = policy
        self.lock_key = keyspace.ltm_lock(workflow_id)
        self.state_key = keyspace.ltm_state(workflow_id)
        self._take = self.redis.script(_ACQUIRE_LUA)
        self._renew = self.redis.script(_RENEW_LUA)
        self._release = self.redis.script(_RELEASE_LUA)
        self._settle = self.redis.script(_SETTLE_LUA)
        # Shared totals as last seen in Redis (None: not read yet in this process).
        self._known: tuple[int, int] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the policy ---------------------------------------------------------------------

    @property
    def turns_since_summary(self) -> int:
        """The workflow's shared turn counter as this process last saw it (0: not yet)."""
        return self._known[0] if self._known else 0

    @property
    def tokens_since_summary(self) -> int:
        """Same as :attr:`turns_since_summary`, for the token estimate."""
        return self._known[1] if self._known else 0

    @property
    def due(self) -> bool:
        """Whether the policy calls for compaction, from what this process knows."""
        return self.policy.is_due(self.turns_since_summary, self.tokens_since_summary)

    def note_counters(self, turns: int, tokens: int) -> asyncio.Task[None] | None:
        """The shared counters as an append just returned them; compacts when due.

        No I/O. Starts the background compaction if the policy calls for it and
        none of this compactor's runs is going (other runtimes and processes
        are kept out by the workflow's compaction lock in Redis). Returns the
        task, or None when nothing was started. Its failures are logged at
        WARNING, never raised to the caller.
        """
        self._known = (turns, tokens)
        if not self.policy.enabled or not self.due:
            return None
        loop = asyncio.get_running_loop()
        if any(not t.done() and t.get_loop() is loop for t in self._tasks):
            return None
        task = loop.create_task(
            self._background(), name=f"jarvismem-compaction[{self.workflow_id}]"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _background(self) -> None:
        try:
            result = await self.compact()
            if result.failed:
                log.warning(
                    "background compaction of %s failed: %s", self.workflow_id, result.reason
                )
        except LockNotAcquiredError:
            log.debug("compaction of %s already running elsewhere; skipped", self.workflow_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "background compaction of %s failed: %s: %s",
                self.workflow_id,
                type(exc).__name__,
                exc,
            )

    # --- the lock ------------------------------------------------------------------------

    async def _acquire(self) -> str:
        token = secrets.token_hex(16)
        ttl_ms = max(1, int(self.policy.lock_ttl * 1000))
        taken = await self._lock_script(self._take, [token, ttl_ms], "")
        if not taken:
            raise LockNotAcquiredError(
                f"compaction of workflow {self.workflow_id} is already running"
            )
        return token

    async def _keep_alive(self, token: str, lost: asyncio.Event) -> None:
        ttl_ms = max(1, int(self.policy.lock_ttl * 1000))
        while True:
            await asyncio.sleep(self.policy.lock_ttl / 3)
            try:
                renewed = await self._lock_script(self._renew, [token, ttl_ms], ": renew")
            except (BackendUnavailableError, BackendRejectedError) as exc:
                # The next renewal may get through; the fenced save is the real guard.
                log.warning("compaction of %s: lock renewal failed (%s)", self.workflow_id, exc)
                continue
            if not renewed:
                lost.set()
                return

    async def _check_lock(self, token: str, lost: asyncio.Event) -> None:
        # An early exit only: the fenced save checks the token again itself.
        ttl_ms = max(1, int(self.policy.lock_ttl * 1000))
        if lost.is_set():
            raise _LockLost
        renewed = await self._lock_script(self._renew, [token, ttl_ms], "")
        if not renewed:
            raise _LockLost

    async def _lock_script(self, script: Any, args: list[Any], step: str) -> Any:
        # The lock is not a write to keep: no WAIT, even with replicated durability.
        what = f"compaction lock of {self.workflow_id}{step}"
        return await self.redis.run_script(script, [self.lock_key], args, what=what, wait=False)

    # --- compaction --------------------------------------------------------------------------

    @telemetry.compaction
    async def compact(
        self, *, progress: Callable[[int, int], None] | None = None
    ) -> CompactionResult:
        """Fold the ledger entries newer than the summary into it, under the lock.

        ``progress(done, expected)`` is called after each page (``expected`` is the
        shared turn counter, an estimate). Raises ``LockNotAcquiredError`` if another
        compactor of this workflow is running; backend outages raise
        ``BackendUnavailableError`` (refusals ``BackendRejectedError``, blob failures
        ``BlobError``). A summarizer failure returns ``failed=True`` with the old
        summary kept. If this run lost its lock, or any newer summary was saved
        while it worked, it writes nothing over it and returns ``fenced=True``.
        """
        token = await self._acquire()
        lost = asyncio.Event()
        keeper = asyncio.get_running_loop().create_task(self._keep_alive(token, lost))
        try:
            return await self._compact_locked(token, lost, progress)
        except _LockLost:
            reason = "fenced: the compactor lock expired before the summary was saved"
            log.warning("compaction of %s: %s", self.workflow_id, reason)
            return CompactionResult(compacted=False, reason=reason, fenced=True)
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            try:
                await self._lock_script(self._release, [token], ": release")
            except (BackendUnavailableError, BackendRejectedError) as exc:
                # It expires on its own after lock_ttl.
                log.warning("compaction of %s: lock release failed (%s)", self.workflow_id, exc)

    async def _compact_locked(
        self,
        token: str,
        lost: asyncio.Event,
        progress: Callable[[int, int], None] | None,
    ) -> CompactionResult:
        policy = self.policy
        # The generation and blob versions read here are what the save is fenced on.
        base = await self.ltm.read_base()
        record = base.record
        summary = record.text if record else None
        after = record.to_id if record else None
        expected = self.turns_since_summary
        first_id: str | None = None
        count = 0
        covered_tokens = 0
        exhausted = False
        try:
            while not exhausted:
                page, exhausted = await self._read_page(after)
                if not page:
                    break
                summary = await self.ltm.compress(
                    page,
                    self.summarizer,
                    previous=summary,
                    chunk_chars=policy.chunk_chars,
                    max_chars=policy.summary_chars,
                )
                first_id = first_id or str(page[0]["id"])
                after = str(page[-1]["id"])
                count += len(page)
                covered_tokens += sum(entry_tokens(e) for e in page)
                if progress is not None:
                    progress(count, max(expected, count))
                if lost.is_set():
                    raise _LockLost
        except LLMError as exc:
            reason = f"summarizer failed, old summary kept: {exc}"
            await self._record_error(reason)
            return CompactionResult(compacted=False, entries=0, reason=reason, failed=True)
        if count == 0 or summary is None:
            await self._settle_counters(0, 0, reset=True)
            return CompactionResult(compacted=False, reason="no new ledger entries")
        from_id = record.from_id if record is not None and record.from_id else first_id
        await self._check_lock(token, lost)
        outcome = await self.ltm.save_fenced(
            summary,
            provenance={
                "from_id": from_id,
                "to_id": after,
                "turns": (record.turns if record else 0) + count,
                "summarizer": self.summarizer.name,
            },
            base=base,
            lock_key=self.lock_key,
            token=token,
        )
        if not outcome.saved:
            log.warning("compaction of %s: %s", self.workflow_id, outcome.reason)
            # Counters untouched: this run's turns are in no summary it saved.
            return CompactionResult(compacted=False, reason=outcome.reason, fenced=True)
        await self._settle_counters(count, covered_tokens)
        return CompactionResult(
            compacted=True,
            entries=count,
            from_id=from_id,
            to_id=after,
            chars=len(summary),
            reason=f"folded {count} new entries into the summary",
        )

    async def _read_page(self, after: str | None) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``page_size`` entries after ``after``, read ``read_size`` at a time.

        Returns them and whether the ledger's end was reached. Every entry is
        read once per compaction: the next page starts after this one's last id.
        """
        policy = self.policy
        page: list[dict[str, Any]] = []
        while len(page) < policy.page_size:
            want = min(policy.read_size, policy.page_size - len(page))
            batch = await self.ledger.range_after(after, want)
            page += batch
            if len(batch) < want:
                return page, True
            after = str(batch[-1]["id"])
        return page, False

    async def _settle_counters(self, turns: int, tokens: int, *, reset: bool = False) -> None:
        if reset:
            # Nothing left to compact: whatever the counters say is stale.
            turns = tokens = 2**53
        remaining = await self.redis.run_script(
            self._settle,
            [self.state_key],
            [turns, tokens, repr(time.time()), self.ltm.ttl_seconds, secrets.token_hex(8)],
            what=f"compaction counters of {self.workflow_id}",
            wait=False,
        )
        self._known = (_int(remaining[0]), _int(remaining[1]))

    async def _record_error(self, reason: str) -> None:
        try:

            def build(pipe: Any) -> None:
                pipe.hset(
                    self.state_key,
                    mapping={"last_error": reason[:500], "last_error_at": repr(time.time())},
                )
                pipe.expire(self.state_key, self.ltm.ttl_seconds)

            await self.redis.pipeline(build, what=f"compaction state of {self.workflow_id}")
        except (BackendUnavailableError, BackendRejectedError) as exc:
            log.warning("compaction of %s: could not record the error (%s)", self.workflow_id, exc)

    async def state(self) -> dict[str, Any]:
        """Shared compaction state: ``turns``, ``tokens`` since the last summary,
        ``last_compacted_at``, ``last_error``, ``last_error_at`` (absent when unset),
        and whether a compactor holds the lock (``running``).
        """
        what = f"compaction state of {self.workflow_id}"
        raw = await self.redis.call("hgetall", self.state_key, what=what)
        running = bool(await self.redis.call("exists", self.lock_key, what=what))
        fields = {
            (k.decode() if isinstance(k, bytes) else str(k)): (
                v.decode() if isinstance(v, bytes) else str(v)
            )
            for k, v in raw.items()
        }
        out: dict[str, Any] = {
            "turns": _int(fields.get("turns")),
            "tokens": _int(fields.get("tokens")),
            "running": running,
        }
        for name in ("last_compacted_at", "last_error_at"):
            if name in fields:
                out[name] = float(fields[name])
        if "last_error" in fields:
            out["last_error"] = fields["last_error"]
        return out

    async def aclose(self) -> None:
        """Cancel this compactor's background work (the counters are in Redis already)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = [
    "CompactionPolicy",
    "CompactionResult",
    "Compactor",
    "LedgerPager",
]
