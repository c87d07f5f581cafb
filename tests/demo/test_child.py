"""The demo's kernel loop, run in-process against the real Redis server."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jarvismem.demo.child import AGENT_ID, PLAN, STEP_ID, run_child, turn_content
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings, load_settings
from tests.conftest import REAL_REDIS_URL, real_redis_available, require_backend


def test_turn_content_is_the_same_on_every_run() -> None:
    assert turn_content(3) == turn_content(3)
    thought, action, result = turn_content(1)
    assert thought == "I still need to understand tides."
    assert action == "search(query='tides')"
    assert result == "found 3 facts about tides"
    assert turn_content(13) == turn_content(1)  # the topics cycle


@dataclass
class Kernel:
    """A workflow the child loop runs in, and what it printed."""

    settings: Settings
    workflow: str
    capsys: pytest.CaptureFixture[str]

    async def run(self, turns: int) -> list[dict[str, Any]]:
        code = await run_child(
            self.workflow, turns, stall_after=None, env_file=None, think_seconds=0
        )
        assert code == 0
        return [json.loads(line) for line in self.capsys.readouterr().out.splitlines()]

    async def ledger_turns(self) -> list[str]:
        async with await MemoryRuntime.from_env(self.settings) as rt:
            mem = rt.memory(self.workflow, STEP_ID, AGENT_ID)
            assert mem.episodic is not None
            return [e["turn_id"] for e in await mem.episodic.full_history()]


@pytest.fixture
async def kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> AsyncIterator[Kernel]:
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    namespace = "t" + uuid.uuid4().hex[:12]
    env = {
        "REDIS_URL": REAL_REDIS_URL,
        "JARVISMEM_NAMESPACE": namespace,
        "STORAGE_BACKEND": "local",
        "STORAGE_BASE_PATH": str(tmp_path / "blobs"),
        "OUTBOX_PATH": str(tmp_path / "outbox"),
        "COMPACTION_ENABLED": "false",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("ATHENA_URL", "LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(_env_file=None)
    yield Kernel(settings, "wf-" + uuid.uuid4().hex[:8], capsys)
    async with await MemoryRuntime.from_env(settings) as rt:
        assert rt.redis is not None
        keys = [k async for k in rt.redis.scan_iter(match=f"jm:{namespace}:*")]
        if keys:
            await rt.redis.delete(*keys)


async def test_a_first_run_lays_out_the_plan_and_acknowledges_every_turn(kernel: Kernel) -> None:
    events = await kernel.run(3)
    start = events[0]
    assert start["event"] == "start" and not start["resumed"] and start["next_turn"] == 1
    assert start["bundle"] is None
    assert [e["turn"] for e in events if e["event"] == "ack"] == [1, 2, 3]
    assert events[-1]["event"] == "done"
    assert await kernel.ledger_turns() == ["1", "2", "3"]
    async with await MemoryRuntime.from_env(kernel.settings) as rt:
        mem = rt.memory(kernel.workflow, STEP_ID, AGENT_ID)
        assert mem.spaces is not None
        snapshot = await mem.spaces.snapshot()
    tasks = snapshot["spaces"]["tasks"]["data"]
    assert [t["text"] for t in tasks] == list(PLAN)
    # Turn 3 recorded a finding and completed the first task.
    assert [t["status"] for t in tasks] == ["done", "open", "open", "open"]


async def test_a_second_run_resumes_from_the_checkpoint(kernel: Kernel) -> None:
    await kernel.run(2)
    events = await kernel.run(4)
    start = events[0]
    assert start["resumed"] and start["next_turn"] == 3
    assert json.loads(start["bundle"]["checkpoint"]) == {"next_turn": 3, "done": 2}
    assert [e["turn"] for e in events if e["event"] == "ack"] == [3, 4]
    assert not [e for e in events if e["event"] == "rerun"]
    assert await kernel.ledger_turns() == ["1", "2", "3", "4"]


async def test_a_logged_but_unacknowledged_turn_is_rerun_once(kernel: Kernel) -> None:
    await kernel.run(2)
    # What a kill mid-turn leaves: turn 3 logged, the checkpoint still at 3.
    async with await MemoryRuntime.from_env(kernel.settings) as rt:
        await rt.memory(kernel.workflow, STEP_ID, AGENT_ID).log_turn(3, *turn_content(3))
    events = await kernel.run(3)
    reruns = [e for e in events if e["event"] == "rerun"]
    assert [e["turn"] for e in reruns] == [3]
    assert reruns[0]["ledger_id"] == reruns[0]["kept_id"]
    assert await kernel.ledger_turns() == ["1", "2", "3"]
