"""The crash-recovery demo: a simulated agent kernel killed mid-turn and resumed.

The parent (:func:`run_demo`, behind ``jarvismem demo``) starts a child process
(``python -m jarvismem.demo child ...``, :mod:`jarvismem.demo.child`) that runs
a small kernel loop: each turn it logs the turn, sometimes records a goal
finding and updates its task agenda, saves a checkpoint holding the next turn
number, then acknowledges the turn with a line on stdout. Compaction runs with
low thresholds so a long-term summary appears. After ``kill_after``
acknowledged turns the child starts the next turn, logs it, and reports that it
is in flight; the parent SIGKILLs it right there, so that turn is in the ledger
but not in the checkpoint. A fresh child rehydrates, resumes from the
checkpoint, re-runs that one unacknowledged turn (exactly-once logging keeps a
single copy) and finishes. The parent then checks that the ledger holds turns
1..N exactly once (:mod:`jarvismem.demo.verify`).

With no ``REDIS_URL`` the children use the embedded Redis server
(:mod:`jarvismem.backends.redis_embedded`), as any kernel with nothing
configured does: a process of its own, so it outlives the killed child, and
persistent.

Parts: :mod:`~jarvismem.demo.run` (the whole demo), :mod:`~jarvismem.demo.steps`
(its stages), :mod:`~jarvismem.demo.process` (a child process seen from the
parent), :mod:`~jarvismem.demo.protocol` (their line protocol),
:mod:`~jarvismem.demo.child` (the kernel loop), :mod:`~jarvismem.demo.verify`.
"""

from jarvismem.demo.child import run_child
from jarvismem.demo.process import DemoFailure, WorkflowInUse
from jarvismem.demo.run import DEFAULT_TURNS, MIN_TURNS, default_kill_after, run_demo
from jarvismem.demo.steps import CHILD_ENV_OVERRIDES

__all__ = [
    "CHILD_ENV_OVERRIDES",
    "DEFAULT_TURNS",
    "MIN_TURNS",
    "DemoFailure",
    "WorkflowInUse",
    "default_kill_after",
    "run_child",
    "run_demo",
]
