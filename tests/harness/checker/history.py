"""The history a checker run records: one JSONL file per worker incarnation.

Every operation is written twice: an ``invoke`` line before the call and an
``ok`` / ``fail`` / ``info`` line after it (``info``: the outcome is unknown, e.g.
a backend error that may or may not have applied the write). A worker killed
mid-call leaves an ``invoke`` with no completion, which the verifier reads as
``info``. Times are ``time.time_ns()``, comparable across processes of one
machine. ``stats`` lines carry loop-lag and latency histograms.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
INFO = "info"
STATS = "stats"


class HistoryWriter:
    """Appends events to one JSONL file; each line is written whole and flushed.

    A plain ``os.write`` of one line: a SIGKILL leaves at most a torn last line,
    which :func:`read_history` skips.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: dict[str, Any]) -> None:
        """Append one event (a few hundred bytes to a local file: not worth a thread hop)."""
        os.write(self._fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def read_history(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every whole event of ``paths``, in file order (a torn last line is skipped)."""
    events: list[dict[str, Any]] = []
    for path in paths:
        for line in path.read_bytes().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
    return events


def history_files(directory: Path) -> list[Path]:
    """The history files of a run, sorted by name (slot, then incarnation)."""
    return sorted(directory.glob("w*.jsonl"))


class Histogram:
    """Counts of values rounded to two significant digits (microseconds): mergeable."""

    def __init__(self, counts: dict[int, int] | None = None) -> None:
        self.counts: Counter[int] = Counter(counts or {})

    @staticmethod
    def bucket(value_us: float) -> int:
        v = max(0, int(value_us))
        if v < 100:
            return v
        digits = len(str(v)) - 2
        return int(round(v, -digits))

    def add(self, value_us: float) -> None:
        self.counts[self.bucket(value_us)] += 1

    def merge(self, other: Histogram) -> None:
        self.counts.update(other.counts)

    def __len__(self) -> int:
        return sum(self.counts.values())

    def quantile(self, q: float) -> float:
        """The ``q`` quantile in microseconds (0 when empty)."""
        total = len(self)
        if total == 0:
            return 0.0
        rank = q * (total - 1)
        seen = 0
        for value, count in sorted(self.counts.items()):
            seen += count
            if seen > rank:
                return float(value)
        return float(max(self.counts))

    def count_above(self, threshold_us: float) -> int:
        return sum(c for v, c in self.counts.items() if v > threshold_us)

    def to_json(self) -> dict[str, int]:
        return {str(k): v for k, v in self.counts.items()}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> Histogram:
        return cls({int(k): int(v) for k, v in data.items()})


def completed(events: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """One record per operation: the invoke merged with its completion.

    Operations with no completion (their worker was killed) get ``status`` info
    and ``done`` None (they may take effect at any later time).
    """
    invokes: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for event in events:
        kind = event.get("ev")
        if kind == INVOKE:
            invokes[event["id"]] = dict(event)
            order.append(event["id"])
        elif kind in (OK, FAIL, INFO):
            op = invokes.get(event["id"])
            if op is None:
                continue
            op["status"] = kind
            op["done"] = event["ts"]
            for key, value in event.items():
                if key not in ("ev", "ts", "id"):
                    op[key] = value
    for op_id in order:
        op = invokes[op_id]
        if "status" not in op:
            op["status"] = INFO
            op["done"] = None
        op["inv"] = op.pop("ts")
        op.pop("ev", None)
        yield op
