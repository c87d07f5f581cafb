"""The shared serving socket: a TCP socket asyncio recognises as TCP."""

from __future__ import annotations

import socket

import pytest

from jarvismem.integrations.asgi import listen_socket


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_listening_socket_says_it_is_tcp(host: str) -> None:
    # asyncio sets TCP_NODELAY on accepted connections only for IPPROTO_TCP sockets;
    # protocol 0 cost every kept-open request ~40 ms of delayed ACK (docs/performance.md).
    try:
        sock = listen_socket(host, 0)
    except OSError as exc:
        pytest.skip(f"{host} not available here: {exc}")
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.type == socket.SOCK_STREAM
        assert not sock.getblocking()
    finally:
        sock.close()


def test_a_taken_port_is_a_clear_error() -> None:
    first = listen_socket("127.0.0.1", 0)
    try:
        port = first.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            listen_socket("127.0.0.1", port)
    finally:
        first.close()
