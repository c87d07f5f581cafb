"""Frozen option groups of :class:`~jarvismem.memory.MemoryRuntime`.

The runtime's constructor takes the clients one by one and groups what belongs
together: how long its parts live (:class:`Lifecycle`) and where remembered
facts go and how they come back (:class:`RecallSetup`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jarvismem.engine.athena_agents import ATHENA_RECENT_AGENTS
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.recall.stores import RecallStore

__all__ = ["RECENT_WORKFLOWS", "Lifecycle", "RecallSetup"]

RECENT_WORKFLOWS = 256
"""Per-workflow states a runtime keeps alive without a user (an LRU)."""


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """Who closes the clients and how long the runtime's parts live.

    Attributes:
        owns_clients: close the clients (and a given summarizer) in ``close()``.
        background: run the outbox poller and keep the summarizer between uses;
            False for a runtime nobody closes (a drop-in view's own), which then
            leaves no task or HTTP client behind when it is dropped.
        recent_workflows: per-workflow states kept alive without a user (LRU).
        live_athena_agents: per-agent Athena states kept alive without a user (LRU).
    """

    owns_clients: bool = False
    background: bool = True
    recent_workflows: int = RECENT_WORKFLOWS
    live_athena_agents: int = ATHENA_RECENT_AGENTS

    def __post_init__(self) -> None:
        for name in ("owns_clients", "background"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Lifecycle.{name} must be a bool, got {getattr(self, name)!r}")
        for name in ("recent_workflows", "live_athena_agents"):
            bound = getattr(self, name)
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise ValueError(f"Lifecycle.{name} must be a positive int, got {bound!r}")


@dataclass(frozen=True, slots=True)
class RecallSetup:
    """Where remembered facts go and the policy that brings them back.

    Attributes:
        store: the recall store; None makes the default on first use (BM25 in
            Redis, wrapped in a hybrid store when ``RECALL_EMBEDDER`` names one).
        policy: what is captured and injected; :class:`MemoryPolicy`'s defaults.
    """

    store: RecallStore | None = None
    policy: MemoryPolicy = field(default_factory=MemoryPolicy)

    def __post_init__(self) -> None:
        if not isinstance(self.policy, MemoryPolicy):
            raise TypeError(
                f"RecallSetup.policy must be a MemoryPolicy, got {type(self.policy).__name__}"
            )
