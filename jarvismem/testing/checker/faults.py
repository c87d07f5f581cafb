"""Faults the parent injects, one at a time, on a seeded schedule.

Each fault is applied, held for a random while, then healed; :meth:`heal_all`
undoes whatever is still in force (at the end of a run or on an error).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jarvismem.testing.redis_server import RedisServerProcess

WORKER_FAULTS = ("kill_worker",)
REDIS_FAULTS = ("redis_stop", "redis_kill")
BLOB_FAULTS = ("blob_unwritable",)
ATHENA_FAULTS = ("athena_401", "athena_500", "athena_hang")
ALL_FAULTS = WORKER_FAULTS + REDIS_FAULTS + BLOB_FAULTS + ATHENA_FAULTS


class FaultInjector:
    """Applies faults to redis-server, the blob root, the Athena fake and the workers.

    ``kill_worker(rng)`` is the parent's callback that SIGKILLs and restarts a
    worker (it owns the worker processes).
    """

    def __init__(
        self,
        rng: random.Random,
        redis: RedisServerProcess,
        blob_root: Path,
        athena: Any,
        kill_worker: Callable[[random.Random], None],
    ) -> None:
        self.rng = rng
        self.redis = redis
        self.blob_root = blob_root
        self.athena = athena
        self.kill_worker = kill_worker
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
            time.sleep(rng.uniform(0.5, 3.0))
            self.redis.resume()
        elif kind == "redis_kill":
            self.redis.kill()
            time.sleep(rng.uniform(0.0, 1.0))
            self.redis.start()
        elif kind == "blob_unwritable":
            # We may run as root, where chmod stops nothing: put a regular file
            # where the folder was, so every create/append under it fails.
            self.blob_root.mkdir(parents=True, exist_ok=True)
            self.blob_root.rename(self._blob_away)
            self.blob_root.write_bytes(b"not a directory\n")
            time.sleep(rng.uniform(0.5, 3.0))
            self._restore_blob()
        elif kind in ATHENA_FAULTS:
            if kind == "athena_401":
                self.athena.api_key = "a-key-the-workers-do-not-have"
            else:
                self.athena.mode = "error500" if kind == "athena_500" else "hang"
            time.sleep(rng.uniform(1.0, 4.0))
            self._restore_athena()
        else:
            raise ValueError(f"unknown fault {kind!r}")

    def _restore_blob(self) -> None:
        if self._blob_away.exists():
            if self.blob_root.is_file():
                self.blob_root.unlink()
            self._blob_away.rename(self.blob_root)

    def _restore_athena(self) -> None:
        if self.athena is not None:
            self.athena.api_key = self._athena_key
            self.athena.mode = "ok"

    def heal_all(self) -> None:
        """Undo every fault still in force."""
        self.redis.resume()
        if not self.redis.running:
            self.redis.start()
        self._restore_blob()
        self._restore_athena()
