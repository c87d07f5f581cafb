"""jarvismem benchmark suite: ``python -m benchmarks`` (or ``jarvismem bench``).

Every figure is reported next to a raw ``redis.asyncio`` baseline measured in
the same run on the same client, because absolute numbers on a shared machine
are noise; the targets are ratios. See ``docs/performance.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BenchConfig", "main", "run_suite"]


def __getattr__(name: str) -> Any:
    # Lazy: `python -m benchmarks.recall` (and the other single-purpose modules)
    # should not pay for importing the throughput suite and its scenarios.
    if name in __all__:
        from benchmarks import suite

        return getattr(suite, name)
    raise AttributeError(f"module 'benchmarks' has no attribute {name!r}")
