"""A randomized fault-injection history checker, in the spirit of Jepsen's.

Several worker processes, each with several tasks and views, run random
operations (turns, re-logs, checkpoints with and without ``expected_rev``,
spaces writes and deletes, flushes, rehydrates, compactions) on overlapping
workflows, steps and agents, while the parent injects faults (worker SIGKILLs,
redis-server SIGSTOP/SIGCONT and kill + restart with AOF ``always``, an
unwritable blob root, Athena 401/500/hang). Every operation is recorded; after
a final recovery the history is checked against what Redis, the Athena fake and
the outbox files hold.

Run ``python -m tests.harness.checker --seed N --seconds S``, or
``run_checker(CheckerConfig(...))`` from Python.
"""

from tests.harness.checker.faults import ALL_FAULTS
from tests.harness.checker.run import (
    CheckerConfig,
    CheckerReport,
    format_report,
    run_checker,
)
from tests.harness.checker.verify import INVARIANTS, Observed, Verdict, verify

__all__ = [
    "ALL_FAULTS",
    "INVARIANTS",
    "CheckerConfig",
    "CheckerReport",
    "Observed",
    "Verdict",
    "format_report",
    "run_checker",
    "verify",
]
