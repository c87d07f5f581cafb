"""The parts the runtime is made of: per-workflow state, Athena agents, clients, poller.

The runtime itself (:class:`~jarvismem.memory.MemoryRuntime`) lives beside its
views. Re-exports only; the parts import each other directly.
"""

from jarvismem.engine.athena_agents import ATHENA_RECENT_AGENTS, AthenaAgents, AthenaFactory
from jarvismem.engine.summarizer import OnDemandSummarizer
from jarvismem.engine.workflow import WorkflowState

__all__ = [
    "ATHENA_RECENT_AGENTS",
    "AthenaAgents",
    "AthenaFactory",
    "OnDemandSummarizer",
    "WorkflowState",
]
