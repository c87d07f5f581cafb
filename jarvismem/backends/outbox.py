"""A durable, bounded, ordered local outbox: JSON lines on disk plus a cursor file.

Writes that cannot reach a remote backend right now (Athena events, ledger
turns while Redis is down) are appended here and replayed later, in order.

Files for an outbox at ``path``:

* ``path`` — one line per record, ``{"seq": N, "rec": {...}}\\n``, seq strictly
  increasing across the outbox's whole life (compaction never reuses one);
* ``path.cursor`` — ``{"acked": N, "dropped": D, "gen": G}``, replaced
  atomically: every record with ``seq <= acked`` was delivered; ``dropped``
  counts refused records (survives restarts); ``gen`` changes on every
  compaction so other processes know to re-read the data file;
* ``path.lock`` — held with ``fcntl.flock`` during every operation, so several
  processes can share one outbox without interleaving or losing lines.

Crash safety: a record is one ``write()`` of a whole line, done before
:meth:`Outbox.put` returns. A torn last line (a writer killed mid-write, or a
power cut) is cut off with a warning when the file is next read; its ``put``
never returned. A corrupt line elsewhere is skipped with a warning. Reopening
the path resumes the pending records in order.

Delivery is at-least-once: a crash between a successful send and its ``ack``
replays that record. One deliverer at a time per path, across processes:
:meth:`Outbox.try_claim_delivery` (used by :class:`OutboxDrainer` and the
durable writers) makes the others wait for their turn.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jarvismem.errors import InvalidPayloadError

__all__ = ["Outbox", "OutboxDrainer", "deliver_pending"]

log = logging.getLogger(__name__)

# Rewrite the data file when at least this many bytes of it are delivered records
# and they make up at least half of it (a fully drained file is emptied at once).
_COMPACT_MIN_BYTES = 1 << 20


@dataclass
class _Shared:
    """State of one outbox path, shared by every Outbox object of this process."""

    path: Path
    cursor_path: Path
    lock_path: Path
    mutex: threading.Lock = field(default_factory=threading.Lock)
    lock_fd: int | None = None
    users: int = 0
    # Cached view of the files; valid while gen matches and the file did not shrink.
    gen: int = -1
    acked: int = 0
    dropped: int = 0
    dropped_dirty: bool = False
    known_size: int = 0
    last_seq: int = 0
    # Pending records as (seq, start offset, end offset) in the data file.
    index: deque[tuple[int, int, int]] = field(default_factory=deque)
    in_burst: bool = False
    burst_drops: int = 0
    # Puts handed to a worker thread and not finished: while any is in flight,
    # a new put must queue behind it (never go inline), to keep records in order.
    thread_puts: int = 0


_CLAIM_RETRY = 0.2
"""Seconds a deliverer waits when another one holds the delivery claim."""

_INLINE_PUT_MAX = 16_384
"""Puts up to this many bytes of JSON may be written from the event loop."""

_registry: dict[Path, _Shared] = {}
_registry_lock = threading.Lock()


def _acquire_shared(path: Path) -> _Shared:
    resolved = path.resolve()
    with _registry_lock:
        shared = _registry.get(resolved)
        if shared is None:
            shared = _Shared(
                path=resolved,
                cursor_path=resolved.with_name(resolved.name + ".cursor"),
                lock_path=resolved.with_name(resolved.name + ".lock"),
            )
            _registry[resolved] = shared
        shared.users += 1
        return shared


def _release_shared(shared: _Shared) -> None:
    with _registry_lock:
        shared.users -= 1
        if shared.users > 0:
            return
        _registry.pop(shared.path, None)
    with shared.mutex:
        if shared.lock_fd is not None:
            os.close(shared.lock_fd)
            shared.lock_fd = None


class _Locked:
    """Thread mutex (this process) + flock (other processes) around one file operation."""

    def __init__(self, shared: _Shared) -> None:
        self.shared = shared

    def __enter__(self) -> _Shared:
        s = self.shared
        s.mutex.acquire()
        try:
            if s.lock_fd is None:
                s.path.parent.mkdir(parents=True, exist_ok=True)
                s.lock_fd = os.open(s.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(s.lock_fd, fcntl.LOCK_EX)
        except BaseException:
            s.mutex.release()
            raise
        return s

    def __exit__(self, *exc: object) -> None:
        s = self.shared
        try:
            if s.lock_fd is not None:
                fcntl.flock(s.lock_fd, fcntl.LOCK_UN)
        finally:
            s.mutex.release()


class Outbox:
    """A durable FIFO of JSON records on the local disk.

    Construction reads the files once (synchronously) to learn the pending
    count; every other operation runs in a worker thread.

    Args:
        path: the data file (its folder is created on first use).
        max_entries: pending records allowed; :meth:`put` refuses more.
        fsync: fsync every append and cursor update (survives power loss, slower).
            Without it a record survives a process crash but not an OS crash.
    """

    def __init__(self, path: Path, *, max_entries: int = 100_000, fsync: bool = False) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.path = Path(path)
        self.max_entries = max_entries
        self.fsync = fsync
        self._shared = _acquire_shared(self.path)
        self._deliver_lock = self._shared.path.with_name(self._shared.path.name + ".deliver.lock")
        self._deliver_fd: int | None = None
        self._closed = False
        # Release the registry entry even if close() is never awaited.
        self._finalizer = weakref.finalize(self, _release_shared, self._shared)
        # Load the pending index once, so len() is right from the start (a leftover
        # outbox must look non-empty to whoever decides to replay it). This is the
        # only blocking read; create outboxes at start-up.
        self._refresh_sync()

    # --- public API ------------------------------------------------------------------

    async def put(self, record: dict[str, Any]) -> bool:
        """Append ``record`` durably. False when the outbox is full (the drop is counted).

        Raises :class:`InvalidPayloadError` (nothing written) if ``record`` is not
        a JSON-serialisable dict.
        """
        self._check_open()
        if not isinstance(record, dict):
            raise InvalidPayloadError(f"outbox record must be a dict, got {type(record).__name__}")
        try:
            encoded = json.dumps(record, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidPayloadError(f"outbox record is not JSON-serialisable: {exc}") from None
        shared = self._shared
        if shared.thread_puts == 0 and not self.fsync and len(encoded) <= _INLINE_PUT_MAX:
            done = self._try_put_inline(encoded)
            if done is not None:
                return done
        shared.thread_puts += 1
        try:
            return await asyncio.to_thread(self._put_sync, encoded)
        finally:
            shared.thread_puts -= 1

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
        """Pending records, as last seen by this process."""
        return len(self._shared.index)

    @property
    def dropped(self) -> int:
        """Records refused because the outbox was full (persisted with the cursor)."""
        return self._shared.dropped

    @dropped.setter
    def dropped(self, value: int) -> None:
        # Callers may count their own drops (e.g. an unreplayable record); the new
        # value is persisted with the next cursor update (ack, drop or close).
        self._shared.dropped = int(value)
        self._shared.dropped_dirty = True

    async def refresh(self) -> int:
        """Re-read the files (records appended by other processes); returns pending count."""
        self._check_open()
        return await asyncio.to_thread(self._refresh_sync)

    def try_claim_delivery(self) -> bool:
        """Become the only deliverer of this path, across processes, until released.

        Non-blocking (``flock`` with ``LOCK_NB`` on ``<path>.deliver.lock``):
        False when another deliverer (this process or another) holds it. Two
        deliverers replaying one file at once would send records twice and
        could apply an older checkpoint after a newer one.
        """
        if self._deliver_fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._deliver_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._deliver_fd = fd
        return True

    def release_delivery(self) -> None:
        """Give up the claim taken by :meth:`try_claim_delivery` (idempotent)."""
        fd, self._deliver_fd = self._deliver_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops its flock

    async def close(self) -> None:
        """Persist pending counters and release the file lock. Idempotent."""
        self.release_delivery()
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._close_sync)

    # --- implementation (runs in a worker thread) ---------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"outbox {self.path.name} is closed")

    def _close_sync(self) -> None:
        if self._shared.dropped_dirty:
            with _Locked(self._shared) as s:
                self._sync(s)
                self._write_cursor(s)
        self._finalizer()

    def _refresh_sync(self) -> int:
        with _Locked(self._shared) as s:
            self._sync(s)
            return len(s.index)

    def _try_put_inline(self, encoded: str) -> bool | None:
        """A small put from the event loop, or None to take the worker thread.

        A put is on the hot path (``log_turn`` with Athena on): the file work
        is a few page-cache syscalls, cheaper than a thread hop. Nothing here
        can wait: the mutex and the flock are taken non-blocking, and the first
        put (which creates folders and the lock file) always uses the thread.
        """
        s = self._shared
        if not s.mutex.acquire(blocking=False):
            return None
        try:
            if s.lock_fd is None:
                return None
            try:
                fcntl.flock(s.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            try:
                return self._put_locked(s, encoded)
            finally:
                fcntl.flock(s.lock_fd, fcntl.LOCK_UN)
        finally:
            s.mutex.release()

    def _put_sync(self, encoded: str) -> bool:
        with _Locked(self._shared) as s:
            return self._put_locked(s, encoded)

    def _put_locked(self, s: _Shared, encoded: str) -> bool:
        """Append one record; the caller holds the mutex and the flock."""
        self._sync(s)
        if len(s.index) >= self.max_entries:
            s.dropped += 1
            s.burst_drops += 1
            if not s.in_burst:
                s.in_burst = True
                log.warning(
                    "outbox %s is full (%d pending); dropping new records until it drains",
                    s.path.name,
                    len(s.index),
                )
            self._write_cursor(s)
            return False
        if s.in_burst:
            log.warning("outbox %s accepts records again; %d dropped", s.path.name, s.burst_drops)
            s.in_burst = False
            s.burst_drops = 0
        seq = max(s.last_seq, s.acked) + 1
        line = (f'{{"seq":{seq},"rec":{encoded}}}\n').encode()
        fd = os.open(s.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            start = os.fstat(fd).st_size
            _write_all(fd, line)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        s.index.append((seq, start, start + len(line)))
        s.last_seq = seq
        s.known_size = start + len(line)
        return True

    def _peek_sync(self, n: int) -> list[tuple[int, dict[str, Any]]]:
        with _Locked(self._shared) as s:
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
            entry = json.loads(blob[start - base : end - base])
            out.append((seq, entry["rec"]))
        return out

    def _ack_sync(self, upto_seq: int) -> None:
        with _Locked(self._shared) as s:
            self._sync(s)
            if upto_seq <= s.acked and not s.dropped_dirty:
                return
            s.acked = max(s.acked, upto_seq)
            while s.index and s.index[0][0] <= s.acked:
                s.index.popleft()
            self._maybe_compact(s)
            s.in_burst = s.in_burst and len(s.index) >= self.max_entries

    def _maybe_compact(self, s: _Shared) -> None:
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
        if head >= _COMPACT_MIN_BYTES and head * 2 >= s.known_size:
            s.gen += 1
            self._write_cursor(s)
            tmp = s.path.with_name(s.path.name + ".tmp")
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

    def _write_cursor(self, s: _Shared) -> None:
        tmp = s.cursor_path.with_name(s.cursor_path.name + ".tmp")
        payload = json.dumps({"acked": s.acked, "dropped": s.dropped, "gen": s.gen})
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(payload)
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, s.cursor_path)
        s.dropped_dirty = False

    def _read_cursor(self, s: _Shared) -> tuple[int, int, int]:
        try:
            raw = s.cursor_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return 0, 0, 0
        try:
            data = json.loads(raw)
            return int(data["acked"]), int(data["dropped"]), int(data.get("gen", 0))
        except (ValueError, KeyError, TypeError):
            log.warning(
                "outbox cursor %s is unreadable; replaying from the start", s.cursor_path.name
            )
            return 0, s.dropped, s.gen + 1

    def _sync(self, s: _Shared) -> None:
        """Bring the cached view up to date with the files (we hold the lock)."""
        acked, dropped, gen = self._read_cursor(s)
        if not s.dropped_dirty:
            s.dropped = dropped
        else:
            s.dropped = max(s.dropped, dropped)
        try:
            size = s.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if gen != s.gen or size < s.known_size:
            # First use, or another process compacted: read the whole file again.
            s.gen, s.acked = gen, acked
            s.index.clear()
            s.known_size = 0
            s.last_seq = acked
            self._scan(s, 0, size)
        else:
            s.acked = max(s.acked, acked)
            while s.index and s.index[0][0] <= s.acked:
                s.index.popleft()
            if size > s.known_size:
                self._scan(s, s.known_size, size)

    def _scan(self, s: _Shared, start: int, size: int) -> None:
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
                # A torn last line: its writer died mid-write, so its put() never returned.
                log.warning(
                    "outbox %s: skipping a torn last record (%d bytes)",
                    s.path.name,
                    len(blob) - pos,
                )
                with open(s.path, "r+b") as fh:
                    fh.truncate(start + pos)
                size = start + pos
                break
            line = blob[pos:nl]
            offset = start + pos
            pos = nl + 1
            seq = _line_seq(line)
            if seq is None:
                log.warning("outbox %s: skipping a corrupt record at byte %d", s.path.name, offset)
                continue
            if seq <= s.last_seq or seq <= s.acked:
                continue
            s.index.append((seq, offset, start + pos))
            s.last_seq = seq
        s.known_size = size


def _line_seq(line: bytes) -> int | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("rec"), dict):
        return None
    seq = entry.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# --- delivery ---------------------------------------------------------------------------------

Send = Callable[[dict[str, Any]], Awaitable[None]]


class OutboxDrainer:
    """Replays an outbox in order through ``send``, stopping at the first failure.

    Delivered records are acked every ``ack_every`` records and whenever a run
    stops, so a crash replays at most ``ack_every`` records (at-least-once).
    ``last_error`` holds the exception that stopped the last run (None when it
    emptied the outbox or reached its limit).
    """

    def __init__(
        self, outbox: Outbox, send: Send, *, batch: int = 100, ack_every: int = 10
    ) -> None:
        self.outbox = outbox
        self.send = send
        self.batch = max(1, batch)
        self.ack_every = max(1, ack_every)
        self.delivered = 0
        self.last_error: BaseException | None = None

    async def run_once(self, max_records: int | None = None) -> int:
        """Deliver pending records until empty, a failure, or ``max_records``.

        Returns how many were delivered in this run.
        """
        self.last_error = None
        if not self.outbox.try_claim_delivery():
            # Another deliverer is replaying this file right now: let it.
            await asyncio.sleep(_CLAIM_RETRY)
            await self.outbox.refresh()
            return 0
        try:
            return await self._run_claimed(max_records)
        finally:
            self.outbox.release_delivery()

    async def _run_claimed(self, max_records: int | None) -> int:
        done = 0
        while max_records is None or done < max_records:
            want = self.batch if max_records is None else min(self.batch, max_records - done)
            pending = await self.outbox.peek(want)
            if not pending:
                break
            unacked: int | None = None
            try:
                for seq, record in pending:
                    try:
                        await self.send(record)
                    except Exception as exc:
                        self.last_error = exc
                        return done
                    unacked = seq
                    done += 1
                    self.delivered += 1
                    if done % self.ack_every == 0:
                        await self.outbox.ack(seq)
                        unacked = None
            finally:
                # Acks are a file write each: one per ``ack_every`` records, and
                # always before returning, even on a failure or a cancellation.
                if unacked is not None:
                    await self.outbox.ack(unacked)
        return done


async def deliver_pending(outbox: Outbox, send: Send, *, batch: int = 100) -> int:
    """Replay ``outbox`` in order through ``send``; stop at the first failure.

    The failed record and everything after it stay pending. Returns how many
    records were delivered.
    """
    drainer = OutboxDrainer(outbox, send, batch=batch)
    delivered = await drainer.run_once()
    if drainer.last_error is not None:
        log.warning(
            "outbox %s: delivery stopped after %d records (%s)",
            outbox.path.name,
            delivered,
            type(drainer.last_error).__name__,
        )
    return delivered
