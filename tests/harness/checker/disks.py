"""Each worker slot's outbox folder on its own small tmpfs, made read-only or full on demand.

Mounting needs root (``mount -t tmpfs``); where it is not permitted the
checker runs with plain folders and skips the disk faults, saying why.
Read-only is a read-only bind mount laid over the tmpfs: ``mount -o
remount,ro`` refuses while a file there is open for writing, and the outbox
keeps its lock files open. New opens (every append, the cursor, the dead
letters) then fail with EROFS while descriptors opened before keep working,
as on a disk remounted read-only under a running process. Full is a filler
file written until ENOSPC. :meth:`OutboxDisks.unmount_all` undoes everything.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

FILLER = ".checker-fill"
CHUNK = 1 << 16


def _run(*args: str) -> str | None:
    """Run a mount command; None on success, else why it failed."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{args[0]}: {exc}"
    if done.returncode != 0:
        return f"{' '.join(args)}: {(done.stderr or done.stdout).strip()[:200]}"
    return None


class OutboxDisks:
    """The slots' outbox folders ``root/w00`` ...; tmpfs mounts when permitted."""

    def __init__(self, root: Path, slots: int, size: str = "32m") -> None:
        self.root = root
        self.size = size
        self.dirs = [root / f"w{slot:02d}" for slot in range(slots)]
        self.mounted: list[Path] = []
        self._readonly: set[int] = set()
        self.skipped: str | None = None
        """Why the disk faults are skipped (mount not permitted), or None."""

    def mount(self) -> OutboxDisks:
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            self.skipped = "not root: mount -t tmpfs is not permitted"
            return self
        for d in self.dirs:
            why = _run("mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(d))
            if why is not None:
                self.skipped = f"mount not permitted here ({why})"
                self.unmount_all()
                return self
            self.mounted.append(d)
        return self

    @property
    def available(self) -> bool:
        return self.skipped is None and bool(self.mounted)

    def readonly(self, slot: int) -> None:
        """Make slot ``slot``'s outbox disk read-only (a read-only bind mount on top)."""
        d = str(self.dirs[slot])
        why = _run("mount", "--bind", d, d)
        if why is None:
            self._readonly.add(slot)
            why = _run("mount", "-o", "remount,bind,ro", d)
        if why is not None:
            raise RuntimeError(why)

    def writable(self, slot: int) -> None:
        """Undo :meth:`readonly` (only that layer): the tmpfs under it shows again."""
        if slot in self._readonly:
            self._readonly.discard(slot)
            _run("umount", "-l", str(self.dirs[slot]))

    def fill(self, slot: int) -> int:
        """Fill slot ``slot``'s outbox disk to ENOSPC; returns the bytes written."""
        path = self.dirs[slot] / FILLER
        written = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            block = b"\0" * CHUNK
            while True:
                try:
                    n = os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(block) == 1:
                        return written
                    block = block[: len(block) // 2]  # down to the last byte
                    continue
                written += n
        finally:
            os.close(fd)

    def unfill(self, slot: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dirs[slot] / FILLER).unlink()

    def unmount_all(self) -> list[str]:
        """Detach every mount (read-only layers and tmpfs); returns what failed."""
        failed = []
        for d in self.mounted:
            for _ in range(4):  # a read-only layer over the tmpfs, then the tmpfs
                if not os.path.ismount(d):
                    break
                if _run("umount", str(d)) is not None:
                    _run("umount", "-l", str(d))
            if os.path.ismount(d):
                failed.append(str(d))
        self.mounted = []
        self._readonly.clear()
        return failed
