"""A loopback TCP proxy that loses replies on purpose.

Put between a client and a real server (Redis here), it forwards bytes both
ways until told to lose the next reply to a request containing some bytes
(e.g. ``b"EVALSHA"``): it forwards that request, lets the server apply it,
then closes both connections instead of passing the reply on. The client sees
a dropped connection for a command that *did* run, which is exactly the case
an idempotent retry must survive (redis-py resends the command on a new
connection; a replayed outbox record does the same).

Usage::

    async with LostReplyProxy("127.0.0.1", redis_port) as proxy:
        client = redis.asyncio.Redis(port=proxy.port, ...)
        proxy.lose_next_reply(b"EVALSHA")
        await client.evalsha(...)      # applied once, reply lost, retried
        assert proxy.lost == 1
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType


class LostReplyProxy:
    """Forward ``127.0.0.1:<port>`` to ``host:upstream_port``, losing replies on demand."""

    def __init__(self, host: str, upstream_port: int) -> None:
        self.host = host
        self.upstream_port = upstream_port
        self.port = 0
        self.dropped: list[bytes] = []
        """The replies thrown away, as the server sent them."""
        self._marker: bytes | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    @property
    def lost(self) -> int:
        """How many replies were lost so far."""
        return len(self.dropped)

    def lose_next_reply(self, marker: bytes) -> None:
        """Lose the reply to the next request whose bytes contain ``marker`` (once)."""
        self._marker = marker

    def hold(self) -> None:
        """Stop passing bytes either way, on every connection, until :meth:`release`.

        A partition: connections stay open (new ones are accepted) but nothing
        arrives, so clients meet their own timeouts; bytes sent meanwhile are
        delivered after the release, as TCP would. Call from the proxy's loop.
        """
        self._flowing.clear()

    def release(self) -> None:
        """End a :meth:`hold`: the held bytes go through."""
        self._flowing.set()

    async def start(self) -> LostReplyProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def __aenter__(self) -> LostReplyProxy:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        armed = asyncio.Event()  # set when the request whose reply is lost went upstream

        marker: bytes | None = None

        async def client_to_server() -> None:
            nonlocal marker
            while data := await reader.read(65536):
                if self._marker is not None and self._marker in data:
                    marker, self._marker = self._marker, None
                    armed.set()
                await self._flowing.wait()
                up_writer.write(data)
                await up_writer.drain()

        async def server_to_client() -> None:
            while data := await up_reader.read(65536):
                await self._flowing.wait()
                if armed.is_set() and data.startswith(b"-"):
                    # An error reply (NOSCRIPT: the script did not run) is passed
                    # on; the request sent next with the marker is the target.
                    armed.clear()
                    self._marker = marker
                elif armed.is_set():
                    # The server ran the command; its reply never arrives.
                    self.dropped.append(data)
                    writer.transport.abort()
                    return
                writer.write(data)
                await writer.drain()

        pumps = [
            asyncio.ensure_future(client_to_server()),
            asyncio.ensure_future(server_to_client()),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()
            self._tasks.discard(task)
