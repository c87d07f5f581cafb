"""The engine: what a process holds to serve memory views (clients and shared state).

Re-exports only; the parts import each other directly.
"""

from jarvismem.engine.athena_agents import ATHENA_RECENT_AGENTS, AthenaAgents, AthenaFactory
from jarvismem.engine.core import RECENT_WORKFLOWS, MemoryEngine, shared_summarizer
from jarvismem.engine.workflow import WorkflowState

__all__ = [
    "ATHENA_RECENT_AGENTS",
    "RECENT_WORKFLOWS",
    "AthenaAgents",
    "AthenaFactory",
    "MemoryEngine",
    "WorkflowState",
    "shared_summarizer",
]
