"""SUMMARY WORKER: the summarizer's own child against ``ProcessPoolExecutor`` with spawn.

Compaction runs the extractive summarizer in a child process. This compares the
child jarvismem starts (``backends/llm/worker.py``: a fresh interpreter that loads
only the summarizer, frames over stdin/stdout) with the standard library's
``concurrent.futures.ProcessPoolExecutor`` on a ``spawn`` context, for the same
first summary of the same text:

* wall time from "no child" to the first summary back, median of N runs, the two
  taking turns so load drift touches both alike;
* the child's resident memory after that first summary (``VmRSS`` from ``/proc``);
* whether a kernel script without an ``if __name__ == "__main__"`` guard runs its
  top level again in the child (spawn imports the parent's main module as
  ``__mp_main__``; the own child never imports it).

``python -m benchmarks.summary_worker [--runs N] [--json]``; needs no Redis.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

RUNS = 7
TEXT = "\n".join(
    f"turn {i}: the agent read file {i % 7}, found the config key timeout={i}, and moved on."
    for i in range(400)
)


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _summarize(text: str) -> tuple[int, str]:
    from jarvismem.backends.llm.extractive import ExtractiveSummarizer

    return os.getpid(), ExtractiveSummarizer().summarize_now(text, max_chars=2000)


def own_child() -> tuple[float, int]:
    """Seconds to the first summary, and the child's RSS in KB, with the own worker."""
    from jarvismem.backends.llm.worker import SummaryWorker

    worker = SummaryWorker()
    started = time.perf_counter()
    worker.summarize([TEXT], None, 2000)
    took = time.perf_counter() - started
    pid = worker.pid
    rss = _rss_kb(pid) if pid else 0
    worker.close()
    return took, rss


def spawn_pool() -> tuple[float, int]:
    """The same with ``ProcessPoolExecutor(mp_context=spawn)``."""
    started = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pid, _ = pool.submit(_summarize, TEXT).result()
        took = time.perf_counter() - started
        rss = _rss_kb(pid)
    return took, rss


_UNGUARDED = textwrap.dedent(
    """
    import multiprocessing, sys
    from concurrent.futures import ProcessPoolExecutor
    sys.path.insert(0, {root!r})
    print("kernel top level ran", flush=True)
    from benchmarks.summary_worker import _summarize, TEXT
    if multiprocessing.current_process().name == "MainProcess":
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            pool.submit(_summarize, TEXT).result()
    """
)


def unguarded_main_reruns() -> int:
    """How often an unguarded kernel script's top level runs when spawn starts a child."""
    root = str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "kernel.py"
        script.write_text(_UNGUARDED.format(root=root))
        out = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
        ).stdout
    return out.count("kernel top level ran")


def run(runs: int) -> dict[str, Any]:
    own: list[tuple[float, int]] = []
    pool: list[tuple[float, int]] = []
    for _ in range(runs):
        own.append(own_child())
        pool.append(spawn_pool())
    return {
        "runs": runs,
        "own_child_first_summary_s": statistics.median(t for t, _ in own),
        "spawn_pool_first_summary_s": statistics.median(t for t, _ in pool),
        "own_child_rss_mb": statistics.median(r for _, r in own) / 1024,
        "spawn_pool_rss_mb": statistics.median(r for _, r in pool) / 1024,
        "unguarded_kernel_top_level_runs_with_spawn": unguarded_main_reruns(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="alternating runs of each (median)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    figures = run(args.runs)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    own, pool = figures["own_child_first_summary_s"], figures["spawn_pool_first_summary_s"]
    print(
        f"first summary, median of {args.runs} (s): own child {own:.3f}, spawn pool {pool:.3f}"
        f" (pool/own {pool / own:.2f}x)"
    )
    print(
        f"child RSS (MB): own child {figures['own_child_rss_mb']:.1f}, "
        f"spawn pool {figures['spawn_pool_rss_mb']:.1f}"
    )
    print(
        "an unguarded kernel script's top level ran "
        f"{figures['unguarded_kernel_top_level_runs_with_spawn']} times with the spawn pool "
        "(1 = only in the parent)"
    )


if __name__ == "__main__":
    main()
