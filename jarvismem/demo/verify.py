"""The demo's verdict: read the ledger from outside the children and check it.

Pass means every turn 1..N is in the ledger exactly once: no duplicate from
the turn that ran twice, none missing from the kill, nothing unexpected.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jarvismem.demo.child import AGENT_ID, STEP_ID
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings

__all__ = ["LedgerCheck", "check_ledger", "read_existing", "read_ledger", "turn_order"]


@dataclass(frozen=True)
class LedgerCheck:
    """The verdict on a workflow's ledger.

    ``ok``: every turn 1..N exactly once; ``lines``: the verdict for humans;
    ``ledger``: entry count and turn ids (duplicates, missing, unexpected);
    ``summary``: the long-term summary's size and span, None when there is none.
    """

    ok: bool
    lines: list[str]
    ledger: dict[str, Any]
    summary: dict[str, Any] | None


def turn_order(turn: str) -> tuple[int, str]:
    """Sort key of turn ids: numeric ids in number order, then any others."""
    return (int(turn), "") if turn.isdigit() else (1 << 30, turn)


def check_ledger(
    history: Sequence[Mapping[str, Any]], turns: int, summary: Mapping[str, Any] | None
) -> LedgerCheck:
    """Check that ``history`` holds turns 1..``turns`` exactly once.

    ``summary``: the long-term summary's ``chars``/``turns``/``from_id``/``to_id``
    (None when nothing was compacted); reported, not judged.
    """
    counts = Counter(str(entry.get("turn_id")) for entry in history)
    expected = [str(t) for t in range(1, turns + 1)]
    turn_ids = sorted(counts, key=turn_order)
    duplicates = [k for k in turn_ids if counts[k] > 1]
    missing = [t for t in expected if t not in counts]
    extra = [k for k in turn_ids if k not in expected]
    ok = not duplicates and not missing and not extra and len(history) == turns
    lines = [
        f"ledger entries: {len(history)} (expected {turns})",
        f"turn ids: {', '.join(turn_ids)}",
        f"duplicates: {', '.join(duplicates) or 'none'}; missing: {', '.join(missing) or 'none'}",
        "long-term summary: "
        + (
            f"{summary['chars']} chars covering {summary['turns']} entries "
            f"({summary['from_id']} .. {summary['to_id']})"
            if summary
            else "none"
        ),
    ]
    ledger = {
        "entries": len(history),
        "turn_ids": turn_ids,
        "duplicates": duplicates,
        "missing": missing,
        "unexpected": extra,
    }
    return LedgerCheck(ok, lines, ledger, dict(summary) if summary else None)


async def read_ledger(
    settings: Settings, workflow_id: str
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The workflow's full ledger and its long-term summary's size and span."""
    async with await MemoryRuntime.from_env(settings) as rt:
        mem = rt.memory(workflow_id, STEP_ID, AGENT_ID)
        assert mem.episodic is not None
        history = await mem.episodic.full_history()
        record = await mem.ltm.load_summary_record() if mem.ltm is not None else None
    if record is None:
        return history, None
    return history, {
        "chars": len(record.text),
        "turns": record.turns,
        "from_id": record.from_id,
        "to_id": record.to_id,
    }


async def read_existing(settings: Settings, workflow_id: str) -> tuple[int, dict[str, Any] | None]:
    """What a workflow already holds before a demo starts: its ledger length and the
    demo kernel's checkpoint (decoded; None when there is none or it is not the demo's)."""
    async with await MemoryRuntime.from_env(settings) as rt:
        ledger = rt.workflow(workflow_id).ledger
        length = await ledger.length() if ledger is not None else 0
        raw = await rt.memory(workflow_id, STEP_ID, AGENT_ID).load_checkpoint()
    try:
        state = json.loads(raw) if raw else None
    except ValueError:
        state = None
    return length, state if isinstance(state, dict) else None
