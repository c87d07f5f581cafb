"""Faults the parent injects, one at a time, on a seeded schedule.

Each fault is applied, held for a random while, then healed; :meth:`heal_all`
undoes whatever is still in force (at the end of a run or on an error).

OOM windows: ``CONFIG SET maxmemory 1`` with ``noeviction`` (real Redis then
refuses every write with ``OOM command not allowed``), 1-3 s, then
``maxmemory 0``; ``redis_kill_oom`` restarts a killed server from its AOF
with ``--maxmemory 1`` already in force, so the first writes after the
restart (the outboxes' replays) meet OOM. ``partition`` holds one worker's
forwarder; ``outbox_readonly`` / ``outbox_full`` make one worker's outbox
disk read-only or full (see :mod:`~tests.harness.checker.disks`).
"""

from __future__ import annotations

import random
import socket
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.harness.checker.disks import OutboxDisks
from tests.harness.checker.forwarders import Forwarders
from tests.harness.redis_server import RedisServerProcess

WORKER_FAULTS = ("kill_worker",)
REDIS_FAULTS = ("redis_stop", "redis_kill", "redis_oom", "redis_kill_oom")
NET_FAULTS = ("partition",)
DISK_FAULTS = ("outbox_readonly", "outbox_full")
BLOB_FAULTS = ("blob_unwritable",)
ATHENA_FAULTS = ("athena_401", "athena_500", "athena_hang")
ALL_FAULTS = WORKER_FAULTS + REDIS_FAULTS + NET_FAULTS + DISK_FAULTS + BLOB_FAULTS + ATHENA_FAULTS
OOM_ARGS = ["--maxmemory", "1", "--maxmemory-policy", "noeviction"]


def _command(port: int, *words: str) -> None:
    """Send one command to the server on ``port`` and require ``+OK``.

    Plain RESP over a socket: the testing package keeps the Redis client library
    in the backends.
    """
    request = f"*{len(words)}\r\n" + "".join(f"${len(w.encode())}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode())
        reply = sock.recv(256)
    if not reply.startswith(b"+OK"):
        raise RuntimeError(f"{' '.join(words)}: {reply[:200]!r}")


def set_oom(port: int, on: bool) -> None:
    """Make the server on ``port`` refuse writes (``maxmemory 1``, noeviction) or stop that."""
    if on:
        _command(port, "CONFIG", "SET", "maxmemory-policy", "noeviction")
    _command(port, "CONFIG", "SET", "maxmemory", "1" if on else "0")


class FaultInjector:
    """Applies faults to redis-server, the blob root, the Athena fake and the workers.

    ``kill_worker(rng)`` is the parent's callback that SIGKILLs and restarts a
    worker (it owns the worker processes); ``forwarders`` and ``disks`` are
    needed by ``partition`` and the outbox disk faults.
    """

    def __init__(
        self,
        rng: random.Random,
        redis: RedisServerProcess,
        blob_root: Path,
        athena: Any,
        kill_worker: Callable[[random.Random], None],
        forwarders: Forwarders | None = None,
        disks: OutboxDisks | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rng = rng
        self.redis = redis
        self.blob_root = blob_root
        self.athena = athena
        self.kill_worker = kill_worker
        self.forwarders = forwarders
        self.disks = disks
        self.sleep = sleep
        """Waits out each hold (a test passes its own, to look while a fault is in force)."""
        self.counts: Counter[str] = Counter()
        self._blob_away = blob_root.with_name(blob_root.name + ".away")
        self._athena_key = getattr(athena, "api_key", None)

    def inject(self, kind: str) -> None:
        """Apply ``kind``, hold it, heal it (blocks for the hold)."""
        rng = self.rng
        self.counts[kind] += 1
        if kind == "kill_worker":
            self.kill_worker(rng)
        elif kind == "redis_stop":
            self.redis.pause()
            self.sleep(rng.uniform(0.5, 3.0))
            self.redis.resume()
        elif kind == "redis_kill":
            self.redis.kill()
            self.sleep(rng.uniform(0.0, 1.0))
            self.redis.start()
        elif kind == "redis_oom":
            set_oom(self.redis.port, True)
            self.sleep(rng.uniform(1.0, 3.0))
            set_oom(self.redis.port, False)
        elif kind == "redis_kill_oom":
            self.redis.kill()
            self.sleep(rng.uniform(0.0, 1.0))
            # Started with the limit in force: no write slips in before it.
            self.redis.extra_args += OOM_ARGS
            try:
                self.redis.start()
            finally:
                del self.redis.extra_args[-len(OOM_ARGS) :]
            self.sleep(rng.uniform(1.0, 3.0))
            set_oom(self.redis.port, False)
        elif kind == "partition":
            assert self.forwarders is not None
            slot = rng.randrange(self.forwarders.slots)
            self.forwarders.hold(slot)
            self.sleep(rng.uniform(0.5, 3.0))
            self.forwarders.release(slot)
        elif kind in DISK_FAULTS:
            assert self.disks is not None
            slot = rng.randrange(len(self.disks.dirs))
            if kind == "outbox_readonly":
                self.disks.readonly(slot)
            else:
                self.disks.fill(slot)
            self.sleep(rng.uniform(0.5, 3.0))
            self._restore_disk(slot)
        elif kind == "blob_unwritable":
            # We may run as root, where chmod stops nothing: put a regular file
            # where the folder was, so every create/append under it fails.
            self.blob_root.mkdir(parents=True, exist_ok=True)
            self.blob_root.rename(self._blob_away)
            self.blob_root.write_bytes(b"not a directory\n")
            self.sleep(rng.uniform(0.5, 3.0))
            self._restore_blob()
        elif kind in ATHENA_FAULTS:
            if kind == "athena_401":
                self.athena.api_key = "a-key-the-workers-do-not-have"
            else:
                self.athena.mode = "error500" if kind == "athena_500" else "hang"
            self.sleep(rng.uniform(1.0, 4.0))
            self._restore_athena()
        else:
            raise ValueError(f"unknown fault {kind!r}")

    def _restore_blob(self) -> None:
        if self._blob_away.exists():
            if self.blob_root.is_file():
                self.blob_root.unlink()
            self._blob_away.rename(self.blob_root)

    def _restore_disk(self, slot: int) -> None:
        if self.disks is not None and self.disks.available:
            self.disks.writable(slot)
            self.disks.unfill(slot)

    def _restore_athena(self) -> None:
        if self.athena is not None:
            self.athena.api_key = self._athena_key
            self.athena.mode = "ok"

    def heal_all(self) -> None:
        """Undo every fault still in force."""
        self.redis.resume()
        if not self.redis.running:
            self.redis.start()
        set_oom(self.redis.port, False)
        if self.forwarders is not None:
            self.forwarders.release_all()
        if self.disks is not None:
            for slot in range(len(self.disks.dirs)):
                self._restore_disk(slot)
        self._restore_blob()
        self._restore_athena()
