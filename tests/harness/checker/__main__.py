"""``python -m tests.harness.checker``: run the checker (or be one of its workers)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tests.harness.checker.faults import ALL_FAULTS
from tests.harness.checker.run import CheckerConfig, format_report, run_checker
from tests.harness.checker.worker import MUTATIONS, worker_main


def main(argv: list[str] | None = None) -> int:
    """Exit 1 on any violation, 0 otherwise."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return worker_main(Path(argv[1]))
    parser = argparse.ArgumentParser(prog="python -m tests.harness.checker")
    parser.add_argument("--seed", type=int, default=None, help="default: the current time")
    parser.add_argument("--seconds", type=float, default=30.0, help="of operations")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=3, help="per process")
    parser.add_argument("--workflows", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--athena", action="store_true", help="Athena fake, two tenants")
    parser.add_argument(
        "--faults",
        default=",".join(ALL_FAULTS),
        help=f"comma-separated subset of {','.join(ALL_FAULTS)} ('' for none)",
    )
    parser.add_argument("--max-lag-ms", type=float, default=1000.0)
    parser.add_argument("--redis-port", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None, help="keep files here")
    parser.add_argument(
        "--mutate",
        choices=MUTATIONS,
        default=None,
        help="re-introduce a known bug in every worker (the run must then fail)",
    )
    parser.add_argument(
        "--no-forwarders",
        action="store_true",
        help="workers reach Redis directly (no per-worker address; no partition fault)",
    )
    parser.add_argument(
        "--outbox-disk-size", default="32m", help="of each worker's outbox tmpfs (root only)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    faults = tuple(f for f in args.faults.split(",") if f)
    unknown = sorted(set(faults) - set(ALL_FAULTS))
    if unknown:
        parser.error(f"unknown faults: {', '.join(unknown)}")
    # With --json, stdout carries the report alone; the seed and progress go to stderr.
    chatter = sys.stderr if args.json else sys.stdout
    print(f"checker seed {seed} (replay with --seed {seed})", file=chatter, flush=True)
    report = run_checker(
        CheckerConfig(
            seed=seed,
            seconds=args.seconds,
            processes=args.processes,
            tasks=args.tasks,
            workflows=args.workflows,
            steps=args.steps,
            agents=args.agents,
            athena=args.athena,
            faults=faults,
            max_lag_ms=args.max_lag_ms,
            redis_port=args.redis_port,
            workdir=args.workdir,
            mutation=args.mutate,
            progress=lambda line: print(line, file=chatter, flush=True),
            forwarders=not args.no_forwarders,
            outbox_disk_size=args.outbox_disk_size,
        )
    )
    print(json.dumps(report.as_dict(), indent=2) if args.json else format_report(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
