"""Named asyncio locks shared by every memory of this process.

Some coordination must outlive any one :class:`AthenaMemory`: two memories of
one agent (two runtimes, or a runtime and a CLI command, in one process) meet
only here. An asyncio lock serves one event loop, so the registry keeps one set
per loop, and holds both weakly: a lock nobody holds or waits for is dropped,
and so is the set of a loop that is gone.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LoopLocks"]

K = TypeVar("K", bound=Hashable)


class LoopLocks(Generic[K]):
    """One :class:`asyncio.Lock` per key and event loop, held weakly."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, weakref.WeakValueDictionary[K, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    def get(self, key: K) -> asyncio.Lock:
        """The lock of ``key`` on the running loop (made on first use)."""
        locks = self._by_loop.setdefault(asyncio.get_running_loop(), weakref.WeakValueDictionary())
        lock = locks.get(key)
        if lock is None:
            lock = locks[key] = asyncio.Lock()
        return lock
