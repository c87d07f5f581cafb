"""Serving an ASGI app with uvicorn on a socket bound beforehand.

Shared by the MCP server's HTTP transport and the inspector (``jarvismem ui``):
the socket is bound first so that the real port is known and printed before the
first request, and SIGINT/SIGTERM end the serve call instead of the process, so
that the caller still closes its runtime. uvicorn comes with the ``mcp`` and
``ui`` extras; only those commands import this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: any free port).

    Bound here rather than by uvicorn so that the real port is known (and
    printed) before the first request, and a port in use is a clear error.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family = infos[0][0]
        created = socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {reason}") from None
    # create_server leaves the socket's protocol number 0, and asyncio sets
    # TCP_NODELAY on accepted connections only when it reads IPPROTO_TCP there:
    # without it, a response whose head and body go out in two writes waits
    # ~40 ms for the client's delayed ACK on every request of a kept-open
    # connection (measured: a timeline page 52 ms -> 5 ms). Re-wrapping the
    # descriptor makes Python read the real protocol back from the kernel.
    sock = socket.socket(fileno=created.detach())
    sock.setblocking(False)
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn, with SIGINT/SIGTERM ending the serve call instead of the process,
    and a callback once it serves.

    uvicorn's own handling re-raises the signal once it has stopped, which would
    end the process before the caller closes its runtime (and drains outboxes).
    """

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.handle_exit, sig, None)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (a test), or a platform without it
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Within capture_signals: a signal sent once "ready" is seen stops serving cleanly.
        if self._on_ready is not None and not self.should_exit:
            self._on_ready()


async def serve_asgi(
    app: Any,
    sock: socket.socket,
    *,
    log_level: str = "warning",
    on_ready: Callable[[], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve ``app`` on ``sock`` (:func:`listen_socket`) until SIGINT/SIGTERM or ``stop``.

    ``on_ready`` is called once requests are served and those signals are
    handled (a client could connect earlier: the socket listens already, so it
    would wait in the backlog). ``log_level``: uvicorn's (its access log only at
    ``info`` and below).
    """
    config = uvicorn.Config(
        app,
        log_config=None,  # keep the process's logging (the CLI's one-line format on stderr)
        log_level=log_level,
        access_log=log_level in ("info", "debug", "trace"),
        lifespan="on",
        # An open live tail (server-sent events) never ends by itself: give open
        # responses this long after SIGINT, then close them.
        timeout_graceful_shutdown=2,
    )
    web = _Uvicorn(config, on_ready)
    watcher = None if stop is None else asyncio.create_task(_exit_on(web, stop))
    try:
        await web.serve(sockets=[sock])
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


async def _exit_on(web: uvicorn.Server, stop: asyncio.Event) -> None:
    await stop.wait()
    web.should_exit = True
