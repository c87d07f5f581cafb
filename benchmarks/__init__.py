"""jarvismem benchmark suite: ``python -m benchmarks`` (or ``jarvismem bench``).

Every figure is reported next to a raw ``redis.asyncio`` baseline measured in
the same run on the same client, because absolute numbers on a shared machine
are noise; the targets are ratios. See ``docs/performance.md``.
"""

from benchmarks.suite import BenchConfig, main, run_suite

__all__ = ["BenchConfig", "main", "run_suite"]
