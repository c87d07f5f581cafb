"""Loopback ports for the servers a test starts, safe when test processes run in parallel.

A port the kernel hands out (bind to port 0, then close) is free only "a moment ago":
another process asking at the same time may get the same one and start its server
there first, and a port a test relies on staying closed may be taken while it runs.
Under pytest-xdist every worker therefore takes its ports from a block of its own
(``PYTEST_XDIST_WORKER`` = ``gw<N>`` selects block N), below the kernel's ephemeral
range so that neither the kernel nor another worker hands them out, and walks the
block in turn from a random start, skipping any port something holds. Outside
xdist, or when the blocks would reach the ephemeral range, the kernel picks.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import socket
from collections.abc import Iterator
from pathlib import Path

WORKER_ENV = "PYTEST_XDIST_WORKER"
FIRST_BLOCK_PORT = 20000
"""Where worker 0's block starts: above the well-known services run next to the suite
(Redis 6379, its cluster nodes at 7000, Azurite at 10000)."""
BLOCK_SIZE = 400
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_LOW = 32768

_WORKER_RE = re.compile(r"gw(\d+)\Z")


def worker_index(environ: dict[str, str] | None = None) -> int | None:
    """The xdist worker number (``gw3`` -> 3), or None outside a worker."""
    found = _WORKER_RE.match((os.environ if environ is None else environ).get(WORKER_ENV, ""))
    return int(found.group(1)) if found else None


def ephemeral_low() -> int:
    """The lowest port the kernel hands out by itself (its ephemeral range's start)."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def worker_block(index: int, low: int | None = None) -> range | None:
    """Worker ``index``'s ports, or None when its block would reach the ephemeral range."""
    start = FIRST_BLOCK_PORT + index * BLOCK_SIZE
    block = range(start, start + BLOCK_SIZE)
    return block if block.stop <= (ephemeral_low() if low is None else low) else None


def port_is_free(port: int) -> bool:
    """Whether a socket could bind ``port`` on 127.0.0.1 now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _kernel_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PortPicker:
    """Hands out the ports of one block in turn, from a random start, skipping held ones.

    Turns, not random picks: a port this process handed out (a server's, or one a
    test relies on staying closed) comes back only after the whole block went round.
    The random start keeps a child process, which inherits the worker's variable,
    away from its parent's next ports.
    """

    def __init__(self, block: range, rng: random.Random | None = None) -> None:
        self.block = block
        start = (rng or random.Random()).randrange(len(block))
        self._turns: Iterator[int] = itertools.cycle([*block[start:], *block[:start]])

    def pick(self) -> int:
        for _ in range(len(self.block)):
            port = next(self._turns)
            if port_is_free(port):
                return port
        raise OSError(f"no free loopback port in {self.block.start}-{self.block.stop - 1}")


_pickers: dict[int, PortPicker] = {}
# A forked child would otherwise walk on from exactly where its parent is.
os.register_at_fork(after_in_child=_pickers.clear)


def worker_port() -> int | None:
    """The next free port of this xdist worker's block; None outside a worker (or when
    its block would reach the ephemeral range)."""
    index = worker_index()
    block = None if index is None else worker_block(index)
    if index is None or block is None:
        return None
    picker = _pickers.get(index)
    if picker is None:
        picker = _pickers[index] = PortPicker(block)
    return picker.pick()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing holds now, and that no other xdist worker
    of this run will pick (see the module's docstring)."""
    port = worker_port()
    return _kernel_port() if port is None else port
