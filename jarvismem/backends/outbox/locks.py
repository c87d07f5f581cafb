"""Who may touch an outbox file when: the object's state, the file lock, the delivery claim.

* One :class:`OutboxState` per :class:`~jarvismem.backends.outbox.store.Outbox`
  object: its cached view of the files and its own lock descriptors. Two
  objects of one path in one process exclude each other exactly as two
  processes do: ``flock`` locks belong to an open file description, and each
  object opens its own.
* :class:`Locked`: a thread mutex (the object's worker threads) plus an
  ``flock`` on ``<path>.lock`` (every other object and process) around one
  file operation. The lock file's descriptor is open only while records are
  pending: an idle outbox holds no file descriptor.
* The delivery claim: a non-blocking ``flock`` on ``<path>.deliver.lock`` making
  one deliverer per path on the machine; not re-entrant (a second claim by the
  same object is refused like one by another object or process).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jarvismem.backends.outbox.format import sibling

__all__ = [
    "Locked",
    "OutboxState",
    "close_state",
    "open_lock_file",
    "open_state",
    "release_claim",
    "try_claim",
    "try_lock_inline",
    "unlock_inline",
]

_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
"""Errors of opening a lock file for writing on a read-only file system or folder."""


def open_lock_file(path: Path) -> int:
    """A descriptor of the lock file ``path`` (created, and its folder, if missing).

    ``flock`` works on a read-only descriptor too: when the folder or its file
    system refuses writes, an existing lock file is opened read-only, so the
    outbox can still be read and replayed under the lock (its writes fail on
    their own, as disk errors). Raises ``OSError`` when there is no way to lock.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:  # first use: make the folder
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno not in _READ_ONLY:
            raise
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


@dataclass
class OutboxState:
    """State of one Outbox object: its view of the files and its lock descriptors."""

    path: Path
    cursor_path: Path
    lock_path: Path
    mutex: threading.Lock = field(default_factory=threading.Lock)
    # Guards claim_fd only, and is never held across a wait: the event loop
    # takes it (try_claim) and must never block behind a worker thread
    # that holds ``mutex`` while it waits for another process's flock.
    claim_mutex: threading.Lock = field(default_factory=threading.Lock)
    lock_fd: int | None = None
    # Cached view of the files; valid while gen matches and the file did not shrink.
    gen: int = -1
    acked: int = 0
    dropped: int = 0
    dropped_dirty: bool = False
    known_size: int = 0
    last_seq: int = 0
    # Pending records as (seq, start offset, end offset) in the data file.
    index: deque[tuple[int, int, int]] = field(default_factory=deque)
    dead: int = 0
    foreign: int = 0
    # Pending records stamped for another destination than the scanning outbox's: seq -> it.
    stamped_for: dict[int, str] = field(default_factory=dict)
    pending_bytes: int = 0
    loaded: bool = False
    # The delivery claim held by this object (None = not held).
    claim_fd: int | None = None
    in_burst: bool = False
    burst_drops: int = 0
    # Puts handed to a worker thread and not finished: while any is in flight,
    # a new put must queue behind it (never go inline), to keep records in order.
    thread_puts: int = 0
    # A weak reference to the event loop that saw the data file unchanged during its
    # current turn (Outbox.stale); cleared by a callback at the loop's next turn.
    unchanged_in: Any = None
    # The last disk error met reading the files / taking the claim (None: none
    # since the last success); failed claims in a row, and when to try again.
    read_error: str | None = None
    claim_error: str | None = None
    claim_failures: int = 0
    claim_retry_at: float = 0.0
    # The destination file was seen or written by this object (Outbox.destination_file).
    destination_recorded: bool = False

    def pop_acked(self) -> None:
        """Forget the pending records the cursor says are delivered."""
        while self.index and self.index[0][0] <= self.acked:
            seq, start, end = self.index.popleft()
            self.pending_bytes -= end - start
            if self.stamped_for:
                self.stamped_for.pop(seq, None)


def open_state(path: Path) -> OutboxState:
    """A fresh state for an outbox at ``path`` (no I/O but resolving the path)."""
    resolved = path.resolve()
    return OutboxState(
        path=resolved,
        cursor_path=sibling(resolved, ".cursor"),
        lock_path=sibling(resolved, ".lock"),
    )


def close_state(state: OutboxState) -> None:
    """Close the state's descriptors (dropping its flocks). Idempotent."""
    with state.mutex:
        if state.lock_fd is not None:
            os.close(state.lock_fd)
            state.lock_fd = None
    release_claim(state)


class Locked:
    """The object's thread mutex + its flock (every other object and process) around one file op."""

    def __init__(self, state: OutboxState) -> None:
        self.state = state

    def __enter__(self) -> OutboxState:
        s = self.state
        s.mutex.acquire()
        try:
            if s.lock_fd is None:
                s.lock_fd = open_lock_file(s.lock_path)
            fcntl.flock(s.lock_fd, fcntl.LOCK_EX)
        except BaseException:
            s.mutex.release()
            raise
        return s

    def __exit__(self, *exc: object) -> None:
        s = self.state
        try:
            if s.lock_fd is not None:
                fcntl.flock(s.lock_fd, fcntl.LOCK_UN)
                if not s.index:
                    # Idle: give the descriptor back (a process serving thousands
                    # of workflows must not hold one per workflow it ever touched).
                    os.close(s.lock_fd)
                    s.lock_fd = None
        finally:
            s.mutex.release()


def try_lock_inline(state: OutboxState) -> bool:
    """Take the mutex and the flock without waiting (False: someone holds one).

    For the event loop, which must never wait: on True, release with
    :func:`unlock_inline`. Never creates the lock file (the first use of a
    path goes through :class:`Locked` in a worker thread).
    """
    if not state.mutex.acquire(blocking=False):
        return False
    if state.lock_fd is None:
        state.mutex.release()
        return False
    try:
        fcntl.flock(state.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        state.mutex.release()
        return False
    except BaseException:
        state.mutex.release()
        raise
    return True


def unlock_inline(state: OutboxState) -> None:
    """Release what :func:`try_lock_inline` took."""
    try:
        if state.lock_fd is not None:
            fcntl.flock(state.lock_fd, fcntl.LOCK_UN)
    finally:
        state.mutex.release()


def try_claim(state: OutboxState) -> bool:
    """Become the only deliverer of this path on the machine (non-blocking, not re-entrant)."""
    lock_path = sibling(state.path, ".deliver.lock")
    with state.claim_mutex:
        if state.claim_fd is not None:
            return False
        fd = open_lock_file(lock_path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        state.claim_fd = fd
        return True


def release_claim(state: OutboxState) -> None:
    """Give up this object's claim of the path (closing the descriptor drops its flock)."""
    with state.claim_mutex:
        fd, state.claim_fd = state.claim_fd, None
    if fd is not None:
        os.close(fd)
