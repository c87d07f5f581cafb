"""The outbox store: :class:`Outbox`, a durable, bounded, ordered FIFO of JSON records.

Files for an outbox at ``path`` (encodings in :mod:`.format`, locks in :mod:`.locks`):

* ``path``: one line per record, seq strictly increasing across the outbox's
  whole life (compaction never reuses one);
* ``path.cursor``: replaced atomically; every record with ``seq <= acked`` was
  delivered or dead-lettered; ``dropped`` counts records refused for lack of
  room, ``dead`` records moved to the dead-letter file (both survive restarts);
  ``gen`` changes on every compaction so other processes re-read the data file;
* ``path.dead``: records the backend refused for good, kept for an operator
  instead of wedging the queue;
* ``path.lock`` and ``path.deliver.lock``: see :mod:`.locks`.

A record line may carry the destination the outbox was opened for (a digest of
the backend's address). A line stamped for another destination stays pending,
marked (:meth:`Outbox.misdirected_to`), until its deliverer refuses it into the
dead-letter file like any record that can never be delivered (counted as
``foreign``); it is never delivered, and never lost to a compaction.

Crash safety: a record is one ``write()`` of a whole line, done before
:meth:`Outbox.put` returns. A torn last line (a writer killed mid-write, or a
power cut) is cut off with a warning when the file is next read; its ``put``
never returned. A corrupt line elsewhere is skipped with a warning. Reopening
the path resumes the pending records in order.

Disk errors (a full or read-only file system, a data file replaced by a
directory, a folder replaced by a file) are handled at this boundary, by what
the operation is for. An operation that *keeps* something (:meth:`Outbox.put`,
:meth:`Outbox.dead_letter`) or *moves the queue* (:meth:`Outbox.peek`,
:meth:`Outbox.ack`) raises the ``OSError``: its caller counts a dropped
record or backs off its replay. An operation that only *looks* at the files
(:meth:`Outbox.load`, :meth:`Outbox.refresh`, :meth:`Outbox.stale`,
:meth:`Outbox.try_claim_delivery`) never raises one: it keeps the last view,
logs the condition once (and its end), shows it in :attr:`Outbox.disk_error`,
and failed claims are retried with a capped backoff. A write cut short is
taken back at once, so the file only ever holds whole lines.

Nothing here blocks the event loop: construction does no I/O, the first use
(:meth:`Outbox.load`) and every locked operation run in a worker thread, and
the only calls made from the loop never wait (a non-blocking ``flock``, one
``stat``, a small append when both locks are free).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
import weakref
from collections import deque
from pathlib import Path
from typing import Any

from jarvismem.backends.fileio import write_all
from jarvismem.backends.outbox.format import (
    Cursor,
    decode_cursor,
    decode_line,
    destination_stamp,
    encode_cursor,
    encode_dead_letter,
    encode_line,
    encode_record,
    line_record,
    sibling,
)
from jarvismem.backends.outbox.locks import (
    Locked,
    OutboxState,
    close_state,
    open_state,
    release_claim,
    try_claim,
    try_lock_inline,
    unlock_inline,
)
from jarvismem.defaults import FSYNC_APPENDS, INLINE_WRITE_MAX_BYTES, OUTBOX_MAX_ENTRIES
from jarvismem.resilience import Backoff

__all__ = ["COMPACT_MIN_BYTES", "Outbox"]

log = logging.getLogger(__name__)

COMPACT_MIN_BYTES = 1 << 20
"""Rewrite the data file when at least this many bytes of it are delivered records
and they make up at least half of it (a fully drained file is emptied at once)."""

CLAIM_RETRY = Backoff(base=0.2, cap=5.0, jitter="none")
"""Wait before trying again a delivery claim the disk refused (one deliverer: no jitter)."""


def _describe(exc: OSError) -> str:
    return f"{type(exc).__name__} (errno {exc.errno}: {exc.strerror or exc})"


def _forget_unchanged(state: OutboxState, mark: weakref.ref[asyncio.AbstractEventLoop]) -> None:
    # The loop's next turn: the next stale() stats the file again.
    if state.unchanged_in is mark:
        state.unchanged_in = None


class Outbox:
    """A durable FIFO of JSON records on the local disk.

    Construction does no I/O. :meth:`load` (awaited once before the pending
    count means anything; :meth:`put`, :meth:`peek` and :meth:`refresh` load
    too) reads the files in a worker thread.

    Args:
        path: the data file (its folder is created on first use).
        max_entries: pending records allowed; :meth:`put` refuses more.
        max_bytes: pending bytes allowed (the data lines); :meth:`put` refuses
            a record that would pass it. ``None``: no byte bound.
        fsync: fsync every append and cursor update (survives power loss, slower).
            Without it a record survives a process crash but not an OS crash.
        destination: a short digest of where the records go; stamped on each
            record and checked when the file is read: a line stamped for
            another is marked (:meth:`misdirected_to`) for its deliverer to
            refuse (None: no stamp, no check).
        legacy_path: where an earlier version kept this outbox; a leftover
            there is moved here (with its cursor) on first load, so records
            queued before an upgrade are still replayed.
        destination_file: a JSON file recording ``destination_info`` (which
            backend the records are for, in words), written by the first put
            when missing, so an operator can tell where a leftover belongs.
        destination_info: what to record there (``kind``, ``address``).
    """

    def __init__(
        self,
        path: Path,
        *,
        max_entries: int = OUTBOX_MAX_ENTRIES,
        max_bytes: int | None = None,
        fsync: bool = FSYNC_APPENDS,
        destination: str | None = None,
        legacy_path: Path | None = None,
        destination_file: Path | None = None,
        destination_info: dict[str, str] | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be >= 1 or None")
        self.path = Path(path)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.fsync = fsync
        self.destination = destination
        self.legacy_path = None if legacy_path is None else Path(legacy_path)
        self.destination_file = None if destination_file is None else Path(destination_file)
        self._destination_info = dict(destination_info or {})
        if destination is not None:
            self._destination_info["digest"] = destination
        self._dst = destination_stamp(destination)
        self._state = open_state(self.path)
        self._dead_path = sibling(self._state.path, ".dead")
        self._claimed = False
        self._closed = False
        # Close its descriptors even if close() is never awaited.
        self._finalizer = weakref.finalize(self, close_state, self._state)

    # --- public API ------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        """True once this object has read the files (the pending count is known)."""
        return self._state.loaded

    async def load(self) -> int:
        """Read the files once (in a worker thread); returns the pending count."""
        if not self._state.loaded:
            return await self.refresh()
        return len(self._state.index)

    def stale(self) -> bool:
        """True when the data file changed behind this object's view (one ``stat``).

        Another process or object appended records (a leftover of a crashed peer, or a
        peer's outage) or delivered some; :meth:`refresh` re-reads. Cheap
        enough to call on every write: a metadata syscall, no read, no lock, and
        at most one per outbox per turn of the event loop (an unchanged file is
        not looked at again until the loop's next turn).
        """
        s = self._state
        if not s.loaded:
            return True
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        mark = s.unchanged_in
        if loop is not None and mark is not None and mark() is loop:
            # Seen unchanged earlier in this same turn of this event loop. Nothing
            # this process does in one turn can follow from a peer's write made
            # meanwhile (hearing of it takes I/O, which the loop does between
            # turns), so the check is as good as a new stat. With many agents
            # ready in the same turn this is one stat for all their writes.
            return False
        try:
            size = os.stat(s.path).st_size
        except FileNotFoundError:
            size = 0
        except OSError:
            return False
        if size != s.known_size:
            return True
        holder = mark() if mark is not None else None
        if loop is not None and (holder is None or holder.is_closed()):
            # A weak reference: a loop closed before its next turn (its callback
            # never ran) must not be kept alive, nor what its pending callbacks hold.
            s.unchanged_in = weakref.ref(loop)
            loop.call_soon(_forget_unchanged, s, s.unchanged_in)
        return False

    async def put(self, record: dict[str, Any]) -> bool:
        """Append ``record`` durably. False when the outbox is full (the drop is counted).

        Raises :class:`InvalidPayloadError` (nothing written) if ``record`` is not
        a JSON-serialisable dict, and ``OSError`` when the local disk refuses
        the write (the caller decides whether that is a drop).
        """
        self._check_open()
        encoded = encode_record(record)
        state = self._state
        if (
            state.loaded
            and state.thread_puts == 0
            and not self.fsync
            and len(encoded) <= INLINE_WRITE_MAX_BYTES
        ):
            done = self._try_put_inline(encoded)
            if done is not None:
                return done
        state.thread_puts += 1
        try:
            return await asyncio.to_thread(self._put_sync, encoded)
        finally:
            state.thread_puts -= 1

    async def peek(self, n: int = 100) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``n`` pending records, oldest first, as ``(seq, record)``."""
        self._check_open()
        if n < 1:
            return []
        return await asyncio.to_thread(self._peek_sync, n)

    async def ack(self, upto_seq: int) -> None:
        """Mark every record with ``seq <= upto_seq`` delivered (persisted before returning)."""
        self._check_open()
        await asyncio.to_thread(self._ack_sync, upto_seq)

    def __len__(self) -> int:
        """Pending records, as last seen by this object."""
        return len(self._state.index)

    @property
    def pending_bytes(self) -> int:
        """Bytes of pending record lines, as last seen by this object."""
        return self._state.pending_bytes

    @property
    def dead(self) -> int:
        """Records moved to the dead-letter file ``<path>.dead`` (persisted)."""
        return self._state.dead

    @property
    def foreign(self) -> int:
        """Records stamped for another destination, dead-lettered by this object."""
        return self._state.foreign

    def misdirected_to(self, seq: int) -> str | None:
        """The other destination pending record ``seq`` is stamped for (None: it is ours)."""
        return self._state.stamped_for.get(seq)

    @property
    def dropped(self) -> int:
        """Records refused because the outbox was full (persisted with the cursor)."""
        return self._state.dropped

    @dropped.setter
    def dropped(self, value: int) -> None:
        # Callers may count their own drops (e.g. an unreplayable record); the new
        # value is persisted with the next cursor update (ack, drop or close).
        self._state.dropped = int(value)
        self._state.dropped_dirty = True

    async def refresh(self) -> int:
        """Re-read the files (appended by other processes or objects); returns pending count.

        Never raises for a disk error: the view stays as last read (see
        :attr:`disk_error`), and the next write or delivery meets the error
        where it can be counted or retried.
        """
        self._check_open()
        try:
            pending = await asyncio.to_thread(self._refresh_sync)
        except OSError as exc:
            self._state.read_error = self._note_disk_error(
                self._state.read_error, "read its files", exc
            )
            return len(self._state.index)
        if self._state.read_error is not None:
            log.warning("outbox %s: its files can be read again", self.path)
            self._state.read_error = None
        return pending

    @property
    def disk_error(self) -> str | None:
        """The disk error that stops reading the files or taking the claim (None: none)."""
        return self._state.read_error or self._state.claim_error

    def _note_disk_error(self, previous: str | None, what: str, exc: OSError) -> str:
        """Log a disk error once (again only when it changes); returns its description."""
        reason = _describe(exc)
        if reason != previous:
            log.warning(
                "outbox %s: cannot %s (%s); writes are dropped and counted, replay retries",
                self.path,
                what,
                reason,
            )
        return reason

    def try_claim_delivery(self) -> bool:
        """Become the only deliverer of this path on the machine, until released.

        Not re-entrant: False when any deliverer holds the claim, including
        this very object or another :class:`Outbox` of the same path in this
        process (each object locks its own descriptor). Non-blocking (``flock`` with ``LOCK_NB`` on
        ``<path>.deliver.lock``; the loop never waits for another process).
        Two deliverers replaying one file at once would send records twice
        and could apply an older write after a newer one. False too (logged,
        retried after a capped backoff) when the disk refuses the lock file.
        """
        s = self._state
        if s.claim_error is not None and time.monotonic() < s.claim_retry_at:
            return False  # the disk refused the last try: wait out its backoff
        try:
            claimed = try_claim(s)
        except OSError as exc:
            # No lock file to take (its folder is gone or is a file, the file
            # system refuses to create one): nobody can deliver this file now.
            s.claim_error = self._note_disk_error(s.claim_error, "take its delivery claim", exc)
            s.claim_retry_at = time.monotonic() + CLAIM_RETRY.delay(s.claim_failures)
            s.claim_failures += 1
            return False
        if s.claim_error is not None:
            log.warning("outbox %s: its delivery claim can be taken again", self.path)
            s.claim_error, s.claim_failures = None, 0
        if not claimed:
            return False
        self._claimed = True
        return True

    @property
    def claimed(self) -> bool:
        """True while this object holds the delivery claim."""
        return self._claimed

    def release_delivery(self) -> None:
        """Give up the claim taken by this object (idempotent; never another's claim)."""
        if not self._claimed:
            return
        self._claimed = False
        release_claim(self._state)

    async def dead_letter(
        self, seq: int | None, record: dict[str, Any], reason: str, *, misdirected: bool = False
    ) -> None:
        """Keep ``record`` in ``<path>.dead``; with ``seq``, also ack that pending record.

        For a record the backend refuses for good: it is kept for an operator,
        counted in :attr:`dead`, and no longer blocks the records behind it.
        With a ``seq``, only the holder of the delivery claim may call this
        (``seq`` is the head of the queue); ``seq=None`` records a live write
        that was refused before it was ever queued. ``misdirected``: refused
        for its destination (also counted in :attr:`foreign`).
        """
        self._check_open()
        line = encode_dead_letter(seq, record, reason, time.time())
        await asyncio.to_thread(self._dead_letter_sync, seq, line, misdirected)

    def _dead_letter_sync(self, seq: int | None, line: str, misdirected: bool) -> None:
        with Locked(self._state) as s:
            self._sync(s)
            fd = os.open(self._dead_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                write_all(fd, (line + "\n").encode())
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            s.dead += 1
            if misdirected:
                s.foreign += 1
            if seq is not None:
                self._ack_locked(s, seq)
            else:
                self._write_cursor(s)  # persist the count now

    async def close(self) -> None:
        """Persist pending counters and release the file lock. Idempotent."""
        self.release_delivery()
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.to_thread(self._close_sync)
        except OSError as exc:
            # The counters stay unpersisted; the records on disk are untouched.
            log.warning("outbox %s: could not persist its counters on close (%s)", self.path, exc)
            self._finalizer()

    # --- implementation (runs in a worker thread) ---------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"outbox {self.path.name} is closed")

    def _close_sync(self) -> None:
        if self._state.dropped_dirty:
            with Locked(self._state) as s:
                self._sync(s)
                self._write_cursor(s)
        self._finalizer()

    def _refresh_sync(self) -> int:
        if self._nothing_on_disk():
            return 0
        with Locked(self._state) as s:
            if not s.loaded and self.legacy_path is not None:
                self._adopt_legacy(s, self.legacy_path)
            self._sync(s)
            return len(s.index)

    def _nothing_on_disk(self) -> bool:
        """True (and the view marked loaded and empty) when no file of this outbox exists.

        A read must not create files: a workflow that was only queried, or
        a read-only working folder, gets no folder, lock or cursor. Without
        the lock this is a snapshot, which is all a reader needs: a peer that
        creates the file later changes its size, so :meth:`stale` notices.
        """
        s = self._state
        with s.mutex:
            if s.index or s.lock_fd is not None or s.dropped_dirty:
                return False
            candidates = [s.path, s.cursor_path, self._dead_path]
            if self.legacy_path is not None:
                candidates.append(self.legacy_path)
            if any(path.exists() for path in candidates):
                return False
            s.loaded = True
            s.known_size = 0
            return True

    def _adopt_legacy(self, s: OutboxState, legacy: Path) -> None:
        """Move an earlier version's outbox (data and cursor) here, if this one is new."""
        if s.path.exists() or not legacy.exists():
            return
        if legacy.stat().st_size == 0:
            return
        cursor = sibling(legacy, ".cursor")
        if cursor.exists():
            os.replace(cursor, s.cursor_path)
        os.replace(legacy, s.path)  # same OUTBOX_PATH: an atomic rename
        log.warning(
            "outbox %s: adopted the records an earlier version queued in %s", s.path, legacy
        )

    def _try_put_inline(self, encoded: str) -> bool | None:
        """A small put from the event loop, or None to take the worker thread.

        A put is on the hot path (``log_turn`` with Athena on): the file work
        is a few page-cache syscalls, cheaper than a thread hop. Nothing here
        can wait: the mutex and the flock are taken non-blocking, and the first
        put (which creates folders and the lock file) always uses the thread.
        """
        s = self._state
        if self.destination_file is not None and not s.destination_recorded:
            return None  # the first put records the destination: worker-thread work
        if not try_lock_inline(s):
            return None
        try:
            if os.stat(s.path).st_size != s.known_size:
                # Another process or object changed the file: catching up may mean a
                # scan of its records, which is worker-thread work.
                return None
            return self._put_locked(s, encoded)
        except FileNotFoundError:
            return None
        finally:
            unlock_inline(s)

    def _put_sync(self, encoded: str) -> bool:
        with Locked(self._state) as s:
            return self._put_locked(s, encoded)

    def _put_locked(self, s: OutboxState, encoded: str) -> bool:
        """Append one record; the caller holds the mutex and the flock."""
        self._sync(s)
        seq = max(s.last_seq, s.acked) + 1
        line = encode_line(seq, self._dst, encoded)
        if len(s.index) >= self.max_entries or (
            self.max_bytes is not None and s.pending_bytes + len(line) > self.max_bytes
        ):
            s.dropped += 1
            s.burst_drops += 1
            if not s.in_burst:
                s.in_burst = True
                log.warning(
                    "outbox %s is full (%d pending, %d bytes); dropping new records until it drains",  # noqa: E501
                    s.path.name,
                    len(s.index),
                    s.pending_bytes,
                )
            self._write_cursor(s)
            return False
        if self.destination_file is not None and not s.destination_recorded:
            self._record_destination(s, self.destination_file)
        if s.in_burst:
            log.warning("outbox %s accepts records again; %d dropped", s.path.name, s.burst_drops)
            s.in_burst = False
            s.burst_drops = 0
        fd = os.open(s.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            start = os.fstat(fd).st_size
            try:
                write_all(fd, line)
                if self.fsync:
                    os.fsync(fd)
            except OSError:
                # A write cut short (a full disk) must not leave half a line: the
                # next record would be glued to it and lost. The put failed, so
                # the whole line goes, even one fully written but not fsynced.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)
        s.index.append((seq, start, start + len(line)))
        s.pending_bytes += len(line)
        s.last_seq = seq
        s.known_size = start + len(line)
        return True

    def _record_destination(self, s: OutboxState, where: Path) -> None:
        """Write the destination file if missing (atomically: a reader sees all or nothing)."""
        if not where.exists():
            where.parent.mkdir(parents=True, exist_ok=True)
            # Every outbox of one backend records this file, each under its own lock:
            # a temporary name per thread, so two first puts never share one.
            tmp = sibling(where, f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(self._destination_info, sort_keys=True), encoding="utf-8")
            os.replace(tmp, where)
        s.destination_recorded = True

    def _peek_sync(self, n: int) -> list[tuple[int, dict[str, Any]]]:
        if self._nothing_on_disk():
            return []
        with Locked(self._state) as s:
            self._sync(s)
            wanted = [s.index[i] for i in range(min(n, len(s.index)))]
            if not wanted:
                return []
            with open(s.path, "rb") as fh:
                fh.seek(wanted[0][1])
                blob = fh.read(wanted[-1][2] - wanted[0][1])
        base = wanted[0][1]
        out: list[tuple[int, dict[str, Any]]] = []
        for seq, start, end in wanted:
            out.append((seq, line_record(blob[start - base : end - base])))
        return out

    def _ack_sync(self, upto_seq: int) -> None:
        with Locked(self._state) as s:
            self._sync(s)
            self._ack_locked(s, upto_seq)

    def _ack_locked(self, s: OutboxState, upto_seq: int) -> None:
        if upto_seq <= s.acked and not s.dropped_dirty:
            return
        s.acked = max(s.acked, upto_seq)
        s.pop_acked()
        self._maybe_compact(s)
        s.in_burst = s.in_burst and len(s.index) >= self.max_entries

    def _maybe_compact(self, s: OutboxState) -> None:
        """Persist the cursor; rewrite the data file when drained or mostly delivered."""
        if not s.index:
            # Cursor first: if we die before truncating, every line is <= acked anyway.
            s.gen += 1
            self._write_cursor(s)
            with open(s.path, "ab") as fh:
                fh.truncate(0)
            s.known_size = 0
            return
        head = s.index[0][1]
        if head >= COMPACT_MIN_BYTES and head * 2 >= s.known_size:
            s.gen += 1
            self._write_cursor(s)
            tmp = sibling(s.path, ".tmp")
            with open(s.path, "rb") as src, open(tmp, "wb") as dst:
                src.seek(head)
                dst.write(src.read(s.known_size - head))
                if self.fsync:
                    dst.flush()
                    os.fsync(dst.fileno())
            os.replace(tmp, s.path)
            s.index = deque((seq, a - head, b - head) for seq, a, b in s.index)
            s.known_size -= head
            return
        self._write_cursor(s)

    def _write_cursor(self, s: OutboxState) -> None:
        tmp = sibling(s.cursor_path, ".tmp")
        payload = encode_cursor(Cursor(acked=s.acked, dropped=s.dropped, gen=s.gen, dead=s.dead))
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(payload)
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, s.cursor_path)
        s.dropped_dirty = False

    def _read_cursor(self, s: OutboxState) -> Cursor:
        try:
            raw = s.cursor_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Cursor(acked=0, dropped=0, gen=0, dead=0)
        try:
            return decode_cursor(raw)
        except (ValueError, KeyError, TypeError):
            log.warning(
                "outbox cursor %s is unreadable; replaying from the start", s.cursor_path.name
            )
            return Cursor(acked=0, dropped=s.dropped, gen=s.gen + 1, dead=s.dead)

    def _sync(self, s: OutboxState) -> None:
        """Bring the cached view up to date with the files (we hold the lock)."""
        acked, dropped, gen, dead = self._read_cursor(s)
        s.loaded = True
        s.dead = max(s.dead, dead)
        if not s.dropped_dirty:
            s.dropped = dropped
        else:
            s.dropped = max(s.dropped, dropped)
        try:
            size = s.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if gen != s.gen or size < s.known_size:
            # First use, or another process or object compacted: read the whole file again.
            s.gen, s.acked = gen, acked
            s.index.clear()
            s.stamped_for.clear()
            s.pending_bytes = 0
            s.known_size = 0
            s.last_seq = acked
            self._scan(s, 0, size)
        else:
            s.acked = max(s.acked, acked)
            s.pop_acked()
            if size > s.known_size:
                self._scan(s, s.known_size, size)

    def _scan(self, s: OutboxState, start: int, size: int) -> None:
        if size <= start:
            s.known_size = size
            return
        with open(s.path, "rb") as fh:
            fh.seek(start)
            blob = fh.read(size - start)
        pos = 0
        while pos < len(blob):
            nl = blob.find(b"\n", pos)
            if nl < 0:
                # A torn last line: its writer died mid-write, so its put() never
                # returned. The view ends before it; the bytes must go before
                # anything is appended (a new line would be glued to them), so
                # when the disk refuses the cut, the OSError goes to the caller
                # (a put fails and is counted; a read keeps this view).
                s.known_size = start + pos
                os.truncate(s.path, start + pos)
                log.warning(
                    "outbox %s: cut off a torn last record (%d bytes)",
                    s.path.name,
                    len(blob) - pos,
                )
                return
            line = blob[pos:nl]
            offset = start + pos
            pos = nl + 1
            seq, dst = decode_line(line)
            if seq is None:
                log.warning("outbox %s: skipping a corrupt record at byte %d", s.path.name, offset)
                continue
            if seq <= s.last_seq or seq <= s.acked:
                continue
            s.last_seq = seq
            if self.destination is not None and dst is not None and dst != self.destination:
                # Written for another backend (a copied or misplaced file): pending
                # like any record, so it is kept until its deliverer refuses it.
                s.stamped_for[seq] = dst
            s.index.append((seq, offset, start + pos))
            s.pending_bytes += start + pos - offset
        s.known_size = size
