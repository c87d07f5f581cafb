"""Per-worker loopback forwarders to redis-server, run by the checker's parent.

Each worker slot reaches Redis through its own :class:`LostReplyProxy` (a
plain forwarder unless told otherwise), so every worker's Redis outboxes are
keyed by a different address, as runtimes on different hosts would be. A
forwarder can be held (nothing passes, a partition) and released. The
proxies live on one event loop in a background thread: the parent's own loop
is synchronous (it sleeps between faults).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from tests.harness.netfaults import LostReplyProxy

T = TypeVar("T")
CALL_TIMEOUT = 10.0


class Forwarders:
    """One forwarder per slot to ``127.0.0.1:<upstream_port>``; :meth:`close` stops them all."""

    def __init__(self, upstream_port: int, slots: int) -> None:
        self.upstream_port = upstream_port
        self.slots = slots
        self.proxies: list[LostReplyProxy] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="checker-forwarders", daemon=True
        )

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT)

    def start(self) -> Forwarders:
        """Start the loop thread and one listening forwarder per slot."""
        self._thread.start()
        for _ in range(self.slots):
            proxy = LostReplyProxy("127.0.0.1", self.upstream_port)
            self.proxies.append(self._call(proxy.start()))
        return self

    def url(self, slot: int) -> str:
        """The Redis URL slot ``slot``'s workers (and its final recovery) use."""
        return f"redis://127.0.0.1:{self.proxies[slot].port}/0"

    def hold(self, slot: int) -> None:
        """Partition slot ``slot`` from Redis (until :meth:`release`)."""
        self._loop.call_soon_threadsafe(self.proxies[slot].hold)

    def release(self, slot: int) -> None:
        self._loop.call_soon_threadsafe(self.proxies[slot].release)

    def release_all(self) -> None:
        for slot in range(len(self.proxies)):
            self.release(slot)

    def close(self) -> None:
        """Close every forwarder and its connections, stop the loop thread. Idempotent."""
        if not self._thread.is_alive():
            return
        try:
            for proxy in self.proxies:
                # One that will not close must not keep the others open.
                with contextlib.suppress(Exception):
                    self._call(proxy.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CALL_TIMEOUT)
            if not self._thread.is_alive():
                self._loop.close()
