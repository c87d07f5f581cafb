"""The demo's orchestration: argument checks and the JSON summary.

The whole run (two child processes, a SIGKILL) is exercised end to end by
tests/cli/test_demo.py.
"""

from __future__ import annotations

import pytest

from jarvismem.demo.run import run_demo, summarize
from jarvismem.demo.steps import DemoSetup, KilledRun, ResumedRun
from jarvismem.demo.verify import LedgerCheck
from jarvismem.settings import load_settings


@pytest.mark.parametrize(("turns", "kill_after"), [(3, 3), (3, 0), (1, 1)])
async def test_the_kill_point_must_be_inside_the_run(turns: int, kill_after: int) -> None:
    with pytest.raises(ValueError, match="kill_after"):
        await run_demo(
            load_settings(_env_file=None), env_file=None, turns=turns, kill_after=kill_after
        )


def test_summarize_collects_every_stage() -> None:
    settings = load_settings(_env_file=None, jarvismem_namespace="ns1")
    setup = DemoSetup(
        workflow_id="wf",
        turns=3,
        kill_after=1,
        settings=settings,
        env={},
        child_args=[],
        redis_where="redis://127.0.0.1:1/0",
        embedded=True,
        blob="none",
    )
    killed = KilledRun(pid=11, exit_status=-9, acknowledged=[1], inflight_turn=2)
    resumed = ResumedRun(
        next_turn=2, reruns=[2], acknowledged=[2, 3], bundle={"b": 1}, compaction={"c": 1}
    )
    check = LedgerCheck(ok=True, lines=[], ledger={"entries": 3}, summary=None)
    summary = summarize(setup, killed, resumed, check, elapsed_s=1.234)
    assert summary == {
        "ok": True,
        "workflow_id": "wf",
        "namespace": "ns1",
        "turns": 3,
        "redis": {"url": "redis://127.0.0.1:1/0", "embedded_server": True},
        "blob": "none",
        "killed_child": {
            "pid": 11,
            "signal": "SIGKILL",
            "exit_status": -9,
            "acknowledged": [1],
            "inflight_turn": 2,
        },
        "resumed": {"next_turn": 2, "reruns": [2], "acknowledged": [2, 3]},
        "bundle": {"b": 1},
        "compaction": {"c": 1},
        "ledger": {"entries": 3},
        "summary": None,
        "elapsed_s": 1.23,
    }
