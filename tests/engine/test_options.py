"""Lifecycle and RecallSetup: the runtime's frozen option groups refuse bad values."""

from __future__ import annotations

import dataclasses

import pytest

from jarvismem.recall.policy import MemoryPolicy
from jarvismem.runtime import Lifecycle, MemoryRuntime, RecallSetup


@pytest.mark.parametrize("bound", [0, -1, True, 2.5, "8"])
@pytest.mark.parametrize("name", ["recent_workflows", "live_athena_agents"])
def test_a_lifecycle_bound_must_be_a_positive_int(name: str, bound: object) -> None:
    with pytest.raises(ValueError, match=rf"Lifecycle\.{name} must be a positive int"):
        Lifecycle(**{name: bound})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["owns_clients", "background"])
def test_a_lifecycle_flag_must_be_a_bool(name: str) -> None:
    with pytest.raises(TypeError, match=rf"Lifecycle\.{name} must be a bool"):
        Lifecycle(**{name: "yes"})  # type: ignore[arg-type]


def test_option_groups_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Lifecycle().background = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        RecallSetup().store = None  # type: ignore[misc]


def test_a_recall_setup_needs_a_memory_policy() -> None:
    with pytest.raises(TypeError, match=r"RecallSetup\.policy must be a MemoryPolicy"):
        RecallSetup(policy={"capture": "conversation"})  # type: ignore[arg-type]


def test_the_runtime_takes_its_groups_and_refuses_anything_else() -> None:
    policy = MemoryPolicy.parse({"capture": "conversation"})
    rt = MemoryRuntime(
        recall=RecallSetup(policy=policy), lifecycle=Lifecycle(background=False, recent_workflows=3)
    )
    assert rt.policy is policy and rt.recent_workflows == 3 and rt.background is False
    with pytest.raises(TypeError, match="lifecycle must be a Lifecycle"):
        MemoryRuntime(lifecycle={"background": False})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="recall must be a RecallSetup"):
        MemoryRuntime(recall=policy)  # type: ignore[arg-type]
