"""An ephemeral Redis-protocol server on loopback, for other processes of this machine.

The in-process stand-in of :mod:`jarvismem.backends.redis` (``memory://``) lives
inside one process; a test that runs the CLI or kernels in child processes, and
wants no server binary, needs a server they can all reach and that outlives any
one of them. This hosts
fakeredis (Lua included) on ``127.0.0.1:<free port>`` in a daemon thread of the
calling process. Its data is lost when that process exits.
"""

from __future__ import annotations

import threading
from typing import Any

import fakeredis
from redis.exceptions import ResponseError

__all__ = ["LoopbackRedis"]


class LoopbackRedis:
    """A fakeredis server (Lua included) on ``127.0.0.1:<free port>``, in a thread.

    Ephemeral: its data lives in this process's memory. Usable as a context
    manager; :attr:`url` is the ``redis://`` URL to give to other processes.
    """

    def __init__(self) -> None:
        self._server = fakeredis.TcpFakeServer(("127.0.0.1", 0))
        # The stock handler drops the connection after any error reply (e.g.
        # NOSCRIPT before a script is loaded); reply with the error instead, as
        # a real server does, so clients keep their connection.
        base = self._server.RequestHandlerClass

        class _Handler(base):  # type: ignore[valid-type,misc]
            def setup(self) -> None:
                super().setup()
                inner: Any = self.current_client  # type: ignore[has-type]
                self.current_client = _ErrorsAsReplies(inner)

        self._server.RequestHandlerClass = _Handler
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="jarvismem-loopback-redis", daemon=True
        )

    @property
    def port(self) -> int:
        """The TCP port it listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> LoopbackRedis:
        """Serve in a daemon thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LoopbackRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _ErrorsAsReplies:
    """Wraps a fakeredis connection so a command error becomes an error reply."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read_response(self) -> Any:
        try:
            return self._inner.read_response()
        except ResponseError as exc:
            return exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
