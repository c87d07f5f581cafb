"""The engine package re-exports its public names from the modules that define them."""

from __future__ import annotations

import jarvismem.engine as engine
from jarvismem.engine import athena_agents, summarizer, workflow


def test_the_package_reexports_the_engine_parts() -> None:
    assert engine.WorkflowState is workflow.WorkflowState
    assert engine.AthenaAgents is athena_agents.AthenaAgents
    assert engine.OnDemandSummarizer is summarizer.OnDemandSummarizer
    assert engine.ATHENA_RECENT_AGENTS == athena_agents.ATHENA_RECENT_AGENTS
    assert sorted(engine.__all__) == sorted(set(engine.__all__))
