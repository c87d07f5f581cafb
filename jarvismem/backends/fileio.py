"""Low-level file writes shared by the local backends (blob store, outbox).

Both write whole records through a raw file descriptor (``O_APPEND`` under a
lock, or a temp file before a replace); a short ``os.write`` must not leave a
record half written, so both loop through this one helper.
"""

from __future__ import annotations

import os

__all__ = ["write_all"]


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte of ``data`` is written (loops on short writes)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
