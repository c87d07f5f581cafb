"""The demo's verdict on a ledger: every turn 1..N exactly once."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from jarvismem.demo.child import AGENT_ID, STEP_ID
from jarvismem.demo.verify import check_ledger, read_ledger, turn_order
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from tests.conftest import REAL_REDIS_URL, real_redis_available, require_backend


def _history(*turns: str) -> list[dict[str, Any]]:
    return [{"id": f"{i}-0", "turn_id": t} for i, t in enumerate(turns, 1)]


def test_turn_order_puts_numbers_first_in_number_order() -> None:
    assert sorted(["10", "x", "2", "1"], key=turn_order) == ["1", "2", "10", "x"]


def test_every_turn_once_passes() -> None:
    check = check_ledger(_history("1", "2", "3"), 3, None)
    assert check.ok
    assert check.ledger == {
        "entries": 3,
        "turn_ids": ["1", "2", "3"],
        "duplicates": [],
        "missing": [],
        "unexpected": [],
    }
    assert check.lines == [
        "ledger entries: 3 (expected 3)",
        "turn ids: 1, 2, 3",
        "duplicates: none; missing: none",
        "long-term summary: none",
    ]
    assert check.summary is None


def test_a_duplicate_fails() -> None:
    check = check_ledger(_history("1", "2", "2", "3"), 3, None)
    assert not check.ok and check.ledger["duplicates"] == ["2"]
    assert check.lines[2] == "duplicates: 2; missing: none"


def test_a_missing_turn_fails() -> None:
    check = check_ledger(_history("1", "3"), 3, None)
    assert not check.ok and check.ledger["missing"] == ["2"]


def test_an_unexpected_turn_fails() -> None:
    check = check_ledger(_history("1", "2", "3", "4"), 3, None)
    assert not check.ok and check.ledger["unexpected"] == ["4"]


def test_the_summary_is_reported() -> None:
    summary = {"chars": 120, "turns": 3, "from_id": "1-0", "to_id": "3-0"}
    check = check_ledger(_history("1", "2", "3"), 3, summary)
    assert check.ok and check.summary == summary
    assert check.lines[-1] == "long-term summary: 120 chars covering 3 entries (1-0 .. 3-0)"


async def test_read_ledger_sees_what_a_runtime_logged(tmp_path: Path) -> None:
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    settings = load_settings(
        _env_file=None,
        redis_url=REAL_REDIS_URL,
        storage_backend="local",
        storage_base_path=str(tmp_path / "blobs"),
        outbox_path=str(tmp_path / "outbox"),
        jarvismem_namespace="t" + uuid.uuid4().hex[:12],
        compaction_enabled=False,
    )
    workflow = "wf-" + uuid.uuid4().hex[:8]
    async with await MemoryRuntime.from_env(settings) as rt:
        mem = rt.memory(workflow, STEP_ID, AGENT_ID)
        for turn in (1, 2):
            await mem.log_turn(turn, "t", "a", "r")
        history, summary = await read_ledger(settings, workflow)
        assert [e["turn_id"] for e in history] == ["1", "2"]
        assert summary is None
        await mem.compact_now()
        _, summary = await read_ledger(settings, workflow)
        assert summary is not None and summary["turns"] == 2 and summary["chars"] > 0
        assert rt.redis is not None
        keys = [k async for k in rt.redis.scan_iter(match=f"jm:{settings.jarvismem_namespace}:*")]
        if keys:
            await rt.redis.delete(*keys)
