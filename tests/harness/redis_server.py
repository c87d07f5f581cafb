"""A ``redis-server`` of a test's own: loopback port, private directory, killable.

The crash harness, the checker and the durability/outage tests use it to kill
Redis (SIGKILL, no shutdown save), hang it (SIGSTOP) and restart it from its AOF.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.harness.ports import free_port

__all__ = ["RedisServerProcess", "free_port"]


def _ping(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"PING\r\n")
            # A server still loading its AOF answers -LOADING: not ready yet.
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServerProcess:
    """A ``redis-server`` of our own on loopback, killable and restartable.

    ``directory``: where its AOF (and log) live; ``appendfsync``: ``always``,
    ``everysec`` or ``no``; ``persistence``: False runs without AOF or RDB.
    ``extra_args``: more ``--option value`` words for redis-server.
    """

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        appendfsync: str = "always",
        persistence: bool = True,
        extra_args: list[str] | None = None,
    ) -> None:
        self.directory = Path(directory)
        # A port picked here may be taken by another process before the server
        # binds it (parallel test runs): the first start then moves to another.
        self._port_chosen = port is None
        self.port = port or free_port()
        self.appendfsync = appendfsync
        self.persistence = persistence
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        """The redis-server command line."""
        binary = shutil.which("redis-server") or "redis-server"
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.directory / "redis.log"),
        ]
        if self.persistence:
            args += ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        else:
            args += ["--appendonly", "no"]
        return args + self.extra_args

    def start(self, timeout: float = 20.0) -> None:
        """Start (or restart from its AOF) and wait until it answers PING."""
        if self.proc is not None and self.proc.poll() is None:
            return
        for attempt in range(4):
            try:
                self._start_once(timeout)
            except RuntimeError:
                if not (self._port_chosen and attempt < 3 and self._lost_the_port()):
                    raise
                self.port = free_port()
            else:
                # Started once: a restart must come back where the clients look.
                self._port_chosen = False
                return

    def _lost_the_port(self) -> bool:
        log = self.directory / "redis.log"
        return log.exists() and "Address already in use" in log.read_text(errors="replace")

    def _start_once(self, timeout: float) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._port_chosen:
            # Not started yet: an earlier attempt's log must not count for this one.
            (self.directory / "redis.log").unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self.proc.returncode}; see "
                    f"{self.directory / 'redis.log'}"
                )
            if _ping(self.port):
                return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer in {timeout:g}s")

    def kill(self) -> None:
        """SIGKILL, as a crash would (no shutdown save)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process must die too
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the port stays open but nothing answers (a hung server)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> RedisServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
