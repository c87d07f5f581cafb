"""The crash-recovery demo: a simulated agent kernel killed mid-turn and resumed.

:func:`run_demo` (``jarvismem demo``) runs a kernel loop in a child process, SIGKILLs it
while a turn is in the ledger but not yet checkpointed, resumes in a fresh child from
the checkpoint, and checks that the ledger holds turns 1..N exactly once (README,
"Crash and resume"). Parts: :mod:`~jarvismem.demo.run`, :mod:`~jarvismem.demo.steps`,
:mod:`~jarvismem.demo.process`, :mod:`~jarvismem.demo.protocol` (parent-child lines),
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
