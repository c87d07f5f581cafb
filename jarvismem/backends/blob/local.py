"""Blob storage in a local directory.

Every operation does all of its file work in ONE worker-thread hop
(:func:`asyncio.to_thread`), so the event loop never waits on the disk. Two
exceptions, because on the hot paths the hop costs more than the work: a small
append (``STORAGE_INLINE_APPEND_MAX_BYTES``, 16 KiB by default) to an existing
file whose lock is free is one non-blocking ``O_APPEND`` page-cache write
(``_append_inline``), and a read of at most 64 KiB is served on the loop only
if every byte is already in the page cache (``preadv`` with ``RWF_NOWAIT``,
``_read_inline``). Both fall back to the thread for anything else; setting
``STORAGE_INLINE_APPEND_MAX_BYTES=0`` turns both off.

Guarantees:

* ``write`` is an atomic replace (temp file in the same directory, fsync,
  ``os.replace``, fsync of the directory): after a crash or SIGKILL at any
  point the blob holds the old or the new content, never a mix.
* ``write`` with ``if_version``/``if_absent`` is atomic against other processes:
  the check and the replace happen under an exclusive ``flock`` on a per-path
  lock file ``.<name>.lock`` next to the blob.
* ``append`` opens with ``O_APPEND`` and writes the whole buffer under an
  exclusive ``flock`` on the file itself, so one call's bytes are never torn or
  interleaved with another writer's, in this process or any other.
* Paths are checked by construction: after :func:`validate_blob_path` the
  target is resolved (following symlinks) and must lie under the resolved root,
  component-wise. A symlink pointing outside the root is refused.

Internal files (lock files, temp files) start with a dot, which no valid blob
path segment can, so :meth:`LocalBlobStorage.list` skips them by name.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import fcntl
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from jarvismem.backends.blob.base import (
    BlobVersion,
    as_blob_bytes,
    validate_blob_path,
    validate_blob_prefix,
    validate_max_bytes,
    validate_write_conditions,
)
from jarvismem.backends.fileio import write_all
from jarvismem.defaults import FSYNC_APPENDS, INLINE_WRITE_MAX_BYTES
from jarvismem.errors import (
    BlobError,
    BlobNotFoundError,
    BlobPreconditionFailedError,
    BlobRejectedError,
    BlobUnavailableError,
    InvalidBlobPathError,
    InvalidPayloadError,
)

T = TypeVar("T")

_LOCK_SUFFIX = ".lock"
_TMP_MARK = ".tmp-"


def _version_of(st: os.stat_result) -> BlobVersion:
    # mtime_ns is forced strictly increasing per path by write(), the inode is
    # new on every replace, and the size completes the stamp: no sidecar file.
    return f"{st.st_mtime_ns:x}-{st.st_ino:x}-{st.st_size:x}"


def _read_all(fd: int, count: int) -> bytes:
    """Read up to ``count`` bytes from the current offset (fewer only at EOF)."""
    chunks: list[bytes] = []
    while count > 0:
        chunk = os.read(fd, min(count, 16 * 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# OS errors that can pass without anyone changing the files: the disk fills or
# fails for a while, the process runs out of descriptors or memory, a network
# file system stalls. Anything else (permissions, read-only, a name in the way,
# a symlink loop) fails the same way until someone intervenes.
_TRANSIENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "EAGAIN",
        "EBUSY",
        "EDQUOT",
        "EINTR",
        "EIO",
        "EMFILE",
        "ENFILE",
        "ENOBUFS",
        "ENOMEM",
        "ENOSPC",
        "ESTALE",
        "ETIMEDOUT",
    )
    if hasattr(errno, name)
)


def os_reason(exc: OSError) -> str:
    """``"Read-only file system (EROFS)"``: the OS's words plus the errno's name.

    The name is what one searches for and what differs between a read-only
    mount (EROFS) and a permission problem (EACCES, EPERM).
    """
    name = errno.errorcode.get(exc.errno) if exc.errno is not None else None
    text = exc.strerror or type(exc).__name__
    return f"{text} ({name})" if name else text


def folder_write_error(folder: Path) -> OSError | None:
    """None when a file can be created in ``folder``, else the OS error (blocking).

    Creates and deletes a probe file. When ``folder`` does not exist yet, the
    probe goes into its nearest existing ancestor (where the first write would
    create it), so the check leaves nothing behind, not even the folder.
    """
    target = Path(folder).absolute()
    while not target.exists() and target.parent != target:
        target = target.parent
    probe = target / f".jarvismem-probe-{secrets.token_hex(6)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return exc
    return None


def translate_os_error(exc: OSError, action: str, path: str) -> BlobError:
    """jarvismem's error for an OS failure to ``action`` the blob ``path``.

    Names the blob path, never the storage root. A missing file is
    :class:`BlobNotFoundError`; transient failures (:data:`_TRANSIENT_ERRNOS`,
    timeouts) :class:`BlobUnavailableError`; the rest :class:`BlobRejectedError`.
    """
    if isinstance(exc, FileNotFoundError):
        return BlobNotFoundError(f"blob {path!r} not found")
    if isinstance(exc, IsADirectoryError):
        if action in ("read", "stat"):
            return BlobNotFoundError(f"blob {path!r} not found (it is a folder)")
        return BlobRejectedError(f"cannot {action} blob {path!r}: a folder has that name")
    if isinstance(exc, NotADirectoryError):
        return BlobRejectedError(f"cannot {action} blob {path!r}: a parent is a file")
    reason = os_reason(exc)
    if isinstance(exc, TimeoutError) or exc.errno in _TRANSIENT_ERRNOS:
        return BlobUnavailableError(f"cannot {action} blob {path!r}: {reason}")
    return BlobRejectedError(f"cannot {action} blob {path!r}: {reason}")


@contextmanager
def _os_errors(action: str, path: str) -> Iterator[None]:
    """Turn OS errors into jarvismem errors (:func:`translate_os_error`)."""
    try:
        yield
    except (BlobError, InvalidPayloadError):
        raise
    except OSError as exc:
        raise translate_os_error(exc, action, path) from None


_INLINE_TARGET_CACHE = 4096
_INLINE_READ_MAX = 65_536
_HAVE_NOWAIT = hasattr(os, "preadv") and hasattr(os, "RWF_NOWAIT")


class LocalBlobStorage:
    """:class:`~jarvismem.backends.blob.base.BlobStorage` in a directory tree.

    ``root``: the folder holding the blobs (created on first write).
    ``fsync_appends``: fsync after every append, so appended lines survive a
    power loss (slower; a process crash never loses them either way).
    """

    def __init__(
        self,
        root: Path | str,
        *,
        fsync_appends: bool = FSYNC_APPENDS,
        inline_append_max_bytes: int = INLINE_WRITE_MAX_BYTES,
    ) -> None:
        self._root = Path(root)
        self._fsync_appends = fsync_appends
        if inline_append_max_bytes < 0:
            raise ValueError("inline_append_max_bytes must be >= 0")
        self._inline_max = inline_append_max_bytes
        self._inline_targets: dict[str, Path] = {}
        self._resolved_root: Path | None = None
        # Appends waiting for the in-flight thread hop (see append()).
        self._append_busy = False
        self._append_queue: list[tuple[str, bytes, asyncio.Future[None]]] = []

    @property
    def name(self) -> str:
        """Backend name for logs and status."""
        return "local"

    @property
    def max_append_bytes(self) -> int | None:
        """Largest ``append`` accepted: None, a file takes any size in one write."""
        return None

    @property
    def destination(self) -> str:
        """Where writes land (names this store's outboxes): the absolute root."""
        return f"local:{self._root.absolute()}"

    @property
    def root(self) -> Path:
        """The configured root folder (as given, not resolved)."""
        return self._root

    # --- helpers (run in the worker thread) ---------------------------------------

    def _root_dir(self) -> Path:
        if self._resolved_root is None:
            # resolve() touches the disk, so it happens here, in the worker thread.
            self._resolved_root = self._root.resolve()
        return self._resolved_root

    def _target(self, path: str) -> Path:
        """The resolved file for a validated path; refuses anything outside the root."""
        root = self._root_dir()
        try:
            resolved = (root / path).resolve()
        except RuntimeError:  # Python 3.11 reports a symlink loop this way, not as OSError
            raise BlobRejectedError(f"blob path {path!r}: symlink loop") from None
        if resolved == root or not resolved.is_relative_to(root):
            raise InvalidBlobPathError(f"blob path {path!r} resolves outside the storage root")
        return resolved

    @staticmethod
    @contextmanager
    def _path_lock(target: Path) -> Iterator[None]:
        """Exclusive cross-process lock for write/delete of one blob.

        The lock file may be unlinked by a delete while we wait on it; after
        locking we check it is still the file at that name, else retry, so two
        processes can never believe they hold the lock at the same time.
        """
        lock_path = target.parent / f".{target.name}{_LOCK_SUFFIX}"
        while True:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    try:
                        yield
                    finally:
                        fcntl.flock(fd, fcntl.LOCK_UN)
                    return
            finally:
                os.close(fd)

    async def _run(self, func: Callable[[], T]) -> T:
        return await asyncio.to_thread(func)

    async def probe_write(self) -> None:
        """Prove the root folder is writable: create and delete a probe file.

        When the root does not exist yet, the probe goes into its nearest
        existing ancestor (where the first write would create it), so checking
        leaves nothing behind, not even the folder. Raises
        :class:`BlobRejectedError` (or :class:`BlobUnavailableError`) naming
        the folder and the errno, e.g. ``Read-only file system (EROFS)``.
        """

        def work() -> None:
            exc = folder_write_error(self._root)
            if exc is not None:
                error = (
                    BlobUnavailableError if exc.errno in _TRANSIENT_ERRNOS else BlobRejectedError
                )
                raise error(f"blob folder {str(self._root)!r} is not writable: {os_reason(exc)}")

        await self._run(work)

    # --- reads ------------------------------------------------------------------------

    async def read(self, path: str) -> bytes:
        """Whole content. Raises ``BlobNotFoundError`` if absent."""
        validate_blob_path(path)
        if self._inline_max > 0:
            cached = self._read_inline(path, None)
            if cached is not None:
                return cached
        data, _ = await self.read_versioned(path)
        return data

    async def read_versioned(self, path: str) -> tuple[bytes, BlobVersion]:
        """Content and its version, read from one open file so they match."""
        validate_blob_path(path)

        def work() -> tuple[bytes, BlobVersion]:
            with _os_errors("read", path):
                fd = os.open(self._target(path), os.O_RDONLY | os.O_CLOEXEC)
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        raise BlobNotFoundError(f"blob {path!r} not found")
                    return _read_all(fd, st.st_size), _version_of(st)
                finally:
                    os.close(fd)

        return await self._run(work)

    async def tail(self, path: str, max_bytes: int) -> bytes:
        """The last ``max_bytes`` bytes; reads only that much from the disk."""
        validate_blob_path(path)
        wanted = validate_max_bytes(max_bytes)
        if wanted <= _INLINE_READ_MAX and self._inline_max > 0:
            cached = self._read_inline(path, wanted)
            if cached is not None:
                return cached

        def work() -> bytes:
            with _os_errors("read", path):
                target = self._target(path)
                fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        raise BlobNotFoundError(f"blob {path!r} not found")
                    self._remember_target(path, target)
                    start = max(0, st.st_size - wanted)
                    os.lseek(fd, start, os.SEEK_SET)
                    # Bounded by the size seen at open: a concurrent append after
                    # the fstat does not make us read more than asked.
                    return _read_all(fd, st.st_size - start)
                finally:
                    os.close(fd)

        return await self._run(work)

    async def size(self, path: str) -> int:
        """Size in bytes. Raises ``BlobNotFoundError`` if absent."""
        validate_blob_path(path)

        def work() -> int:
            with _os_errors("stat", path):
                st = os.stat(self._target(path))
                if not stat.S_ISREG(st.st_mode):
                    raise BlobNotFoundError(f"blob {path!r} not found")
                return st.st_size

        return await self._run(work)

    async def exists(self, path: str) -> bool:
        """Whether a blob (a regular file) exists at ``path``."""
        validate_blob_path(path)

        def work() -> bool:
            with _os_errors("stat", path):
                try:
                    return stat.S_ISREG(os.stat(self._target(path)).st_mode)
                except (FileNotFoundError, NotADirectoryError):
                    return False

        return await self._run(work)

    async def list(self, prefix: str = "") -> list[str]:
        """Sorted relative paths of the blobs whose path starts with ``prefix``."""
        validate_blob_prefix(prefix)

        def work() -> list[str]:
            # Walk only the deepest folder the prefix names, not the whole tree.
            base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
            found: list[str] = []
            with _os_errors("list", prefix):
                root = self._root_dir()
                start = root
                if base:
                    start = (root / base).resolve()
                    if not start.is_relative_to(root):
                        raise InvalidBlobPathError(f"prefix {prefix!r} resolves outside the root")
                try:
                    self._walk(start, base, prefix, found)
                except (FileNotFoundError, NotADirectoryError):
                    return []
            found.sort()
            return found

        return await self._run(work)

    @classmethod
    def _walk(cls, folder: Path, rel: str, prefix: str, found: builtins.list[str]) -> None:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue  # lock and temp files, never a blob
                name = f"{rel}/{entry.name}" if rel else entry.name
                if entry.is_dir(follow_symlinks=False):
                    # Descend only where a match is still possible.
                    if name.startswith(prefix) or prefix.startswith(name + "/"):
                        cls._walk(Path(entry.path), name, prefix, found)
                elif entry.is_file(follow_symlinks=False) and name.startswith(prefix):
                    found.append(name)

    # --- writes -----------------------------------------------------------------------

    async def write(
        self,
        path: str,
        data: bytes,
        *,
        if_version: BlobVersion | None = None,
        if_absent: bool = False,
    ) -> BlobVersion:
        """Atomically replace the content; optionally only if ``if_version``/``if_absent`` hold.

        Returns the new version. Raises ``BlobPreconditionFailedError`` (nothing
        changed) when a condition does not hold.
        """
        validate_blob_path(path)
        payload = as_blob_bytes(data)
        validate_write_conditions(if_version, if_absent)

        def work() -> BlobVersion:
            with _os_errors("write", path):
                target = self._target(path)
                target.parent.mkdir(parents=True, exist_ok=True)
                with self._path_lock(target):
                    return self._replace_locked(path, target, payload, if_version, if_absent)

        return await self._run(work)

    def _replace_locked(
        self,
        path: str,
        target: Path,
        payload: bytes,
        if_version: BlobVersion | None,
        if_absent: bool,
    ) -> BlobVersion:
        try:
            current: os.stat_result | None = os.stat(target)
        except FileNotFoundError:
            current = None
        if if_absent and current is not None:
            raise BlobPreconditionFailedError(f"blob {path!r} already exists")
        if if_version is not None and (current is None or _version_of(current) != if_version):
            raise BlobPreconditionFailedError(f"blob {path!r} changed (version mismatch)")
        tmp = target.parent / f".{target.name}{_TMP_MARK}{secrets.token_hex(6)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            try:
                write_all(fd, payload)
                # A strictly increasing mtime per path makes the version unique
                # even for two same-size writes within one clock tick.
                mtime = time.time_ns()
                if current is not None:
                    mtime = max(mtime, current.st_mtime_ns + 1)
                os.utime(fd, ns=(mtime, mtime))
                os.fsync(fd)
                version = _version_of(os.fstat(fd))
            finally:
                os.close(fd)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _fsync_dir(target.parent)
        return version

    async def append(self, path: str, data: bytes) -> None:
        """Append ``data`` as one unit, creating the blob (and folders) if needed.

        Appends made while another append's thread hop is in flight are written
        together in the next hop (one open and one write per path, each call's
        bytes contiguous and in call order), so concurrent agents do not pay a
        thread hop each.
        """
        validate_blob_path(path)
        payload = as_blob_bytes(data)
        if self._append_now(path, payload):
            return
        if self._append_busy:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._append_queue.append((path, payload, future))
            await future
            return
        self._append_busy = True
        try:
            await self._run(lambda: self._append_sync(path, payload))
        finally:
            if self._append_queue:
                asyncio.get_running_loop().create_task(self._drain_appends())
            else:
                self._append_busy = False

    def append_now(self, path: str, data: bytes) -> bool:
        """:meth:`append` done at once, without awaiting, or False (then call :meth:`append`).

        True when the bytes went in on the loop: a small append, no fsync asked,
        no thread hop of an earlier append still in flight (order), the file there
        and its lock free (see :meth:`_append_inline`). Raises what :meth:`append`
        raises for a bad path.
        """
        validate_blob_path(path)
        return self._append_now(path, as_blob_bytes(data))

    def _append_now(self, path: str, payload: bytes) -> bool:
        return (
            not self._append_busy
            and not self._fsync_appends
            and 0 < len(payload) <= self._inline_max
            and self._append_inline(path, payload)
        )

    async def _drain_appends(self) -> None:
        """Write every queued append, one thread hop per batch, until none is left."""
        try:
            while self._append_queue:
                batch, self._append_queue = self._append_queue, []
                by_path: dict[str, list[tuple[bytes, asyncio.Future[None]]]] = {}
                for path, payload, future in batch:
                    by_path.setdefault(path, []).append((payload, future))
                jobs = [(path, b"".join(p for p, _ in items)) for path, items in by_path.items()]

                def work(
                    jobs: builtins.list[tuple[str, bytes]] = jobs,
                ) -> builtins.list[BaseException | None]:
                    errors: builtins.list[BaseException | None] = []
                    for path, payload in jobs:
                        try:
                            self._append_sync(path, payload)
                            errors.append(None)
                        except Exception as exc:
                            errors.append(exc)
                    return errors

                try:
                    outcomes = await self._run(work)
                except BaseException as exc:
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(
                                BlobUnavailableError(f"append failed: {type(exc).__name__}")
                            )
                    raise
                for (_path, items), error in zip(by_path.items(), outcomes, strict=True):
                    for _, future in items:
                        if future.done():
                            continue
                        if error is None:
                            future.set_result(None)
                        else:
                            future.set_exception(error)
        finally:
            self._append_busy = False

    def _append_inline(self, path: str, payload: bytes) -> bool:
        """Write a small append from the event loop; False to take the thread path.

        Why on the loop: an ``O_APPEND`` write of a few KiB into the page cache
        is a bounded syscall (~10 us here), while a worker-thread hop costs
        ~150 us and, measured on this kind of machine, does not overlap with
        the ledger's network round trip. Nothing here can wait on another
        process: the lock is taken non-blocking, and when it is held (another
        writer mid-append), the file or its folder is missing, or fsync is
        wanted, the append goes through the worker thread as before. Set
        ``STORAGE_INLINE_APPEND_MAX_BYTES=0`` to always use the thread.
        """
        with _os_errors("append", path):
            # Path.resolve() costs ~35 us (an lstat per component); the resolved
            # target of a hot scratchpad is cached. O_NOFOLLOW refuses a final
            # component swapped for a symlink since; any failure drops the entry
            # and the thread path resolves afresh.
            target = self._inline_targets.get(path)
            if target is None:
                target = self._target(path)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
            try:
                fd = os.open(target, flags)
            except OSError:
                self._inline_targets.pop(path, None)
                return False  # first append, or anything unusual: take the thread path
            self._remember_target(path, target)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
                try:
                    write_all(fd, payload)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        return True

    def _remember_target(self, path: str, target: Path) -> None:
        """Cache a resolved, checked target for the inline paths (bounded)."""
        if path not in self._inline_targets:
            if len(self._inline_targets) >= _INLINE_TARGET_CACHE:
                self._inline_targets.clear()
            self._inline_targets[path] = target

    def _read_inline(self, path: str, wanted: int | None) -> bytes | None:
        """A read served from the page cache on the loop, or None for the thread.

        ``wanted``: the last that many bytes (a tail), or None for the whole
        blob when it is at most ``_INLINE_READ_MAX`` bytes. ``preadv`` with
        ``RWF_NOWAIT`` returns at once with EAGAIN instead of waiting for the
        disk, so this never stalls the loop on I/O: only bytes already in
        memory (a scratchpad being written is) are read here. A missing blob is
        answered here too (``BlobNotFoundError``); anything else (cold data, a
        short read, an odd file) goes through the worker thread as before.
        Same target cache and ``O_NOFOLLOW`` rule as inline appends.
        """
        if not _HAVE_NOWAIT:
            return None
        with _os_errors("read", path):
            return self._read_inline_cached(path, wanted)

    def _read_inline_cached(self, path: str, wanted: int | None) -> bytes | None:
        """The body of :meth:`_read_inline` (OS errors translated by the caller)."""
        target = self._inline_targets.get(path)
        if target is None:
            target = self._target(path)  # lstat-only metadata work; refuses escapes
        try:
            fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            self._inline_targets.pop(path, None)
            raise BlobNotFoundError(f"blob {path!r} not found") from None
        except OSError:
            self._inline_targets.pop(path, None)
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            if wanted is None:
                if st.st_size > _INLINE_READ_MAX:
                    return None
                start = 0
            else:
                start = max(0, st.st_size - wanted)
            buf = bytearray(st.st_size - start)
            if buf:
                try:
                    got = os.preadv(fd, [buf], start, os.RWF_NOWAIT)
                except OSError:
                    return None  # EAGAIN (not cached) or anything odd: use the thread
                if got != len(buf):
                    return None
            self._remember_target(path, target)
            return bytes(buf)
        finally:
            os.close(fd)

    def _append_sync(self, path: str, payload: bytes) -> None:
        """The file work of one append (runs in the worker thread)."""
        with _os_errors("append", path):
            target = self._target(path)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            try:
                fd = os.open(target, flags, 0o644)
            except FileNotFoundError:
                target.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(target, flags, 0o644)
            try:
                if not payload:
                    return
                # O_APPEND alone is atomic only for one complete write(); the
                # lock also covers the loop on short writes of big buffers.
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    write_all(fd, payload)
                    if self._fsync_appends:
                        os.fsync(fd)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    async def delete(self, path: str) -> bool:
        """Delete the blob (and its lock file); returns whether it existed."""
        validate_blob_path(path)
        self._inline_targets.pop(path, None)

        def work() -> bool:
            with _os_errors("delete", path):
                target = self._target(path)
                try:
                    with self._path_lock(target):
                        lock_path = target.parent / f".{target.name}{_LOCK_SUFFIX}"
                        try:
                            os.unlink(target)
                            deleted = True
                        except FileNotFoundError:
                            deleted = False
                        except IsADirectoryError:
                            deleted = False
                        os.unlink(lock_path)
                        return deleted
                except FileNotFoundError:
                    return False  # the folder does not exist: nothing to delete
                except NotADirectoryError:
                    return False

        return await self._run(work)

    async def close(self) -> None:
        """Nothing is held open between calls; present for the protocol."""
        return None
