"""The demo's child process: a simulated agent kernel loop (``python -m jarvismem.demo child``).

Each turn it logs the turn, every third turn records a goal finding and
completes a task of its agenda, saves a checkpoint holding the next turn
number, then acknowledges the turn on stdout (:mod:`jarvismem.demo.protocol`).
With ``--stall-after K`` it starts turn K+1, logs it, reports it in flight and
waits to be killed: that turn is in the ledger but not in the checkpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import traceback
from typing import Any

from jarvismem.demo.process import ERROR_PREFIX
from jarvismem.demo.protocol import encode_event
from jarvismem.errors import LockNotAcquiredError
from jarvismem.memory import UnifiedMemory
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings

__all__ = ["AGENT_ID", "PLAN", "STEP_ID", "TOPICS", "main", "run_child", "turn_content"]

STEP_ID = "research"
AGENT_ID = "kernel"
TOPICS = (
    "tides",
    "lunar orbit",
    "gravity",
    "ocean basins",
    "resonance",
    "coastlines",
    "tidal locking",
    "currents",
    "harmonics",
    "estuaries",
    "moon phases",
    "storm surge",
)
PLAN = ("gather sources", "extract facts", "cross-check findings", "write the report")

FINDING_EVERY = 3
"""A goal finding (and one completed task) every this many turns."""

ATHENA_HANDOVER_SECONDS = 10.0
"""How long a child waits, at its start and at its end, for Athena writes queued in the
outbox to be delivered (a crashed run's are delivered by the next one)."""

STALL_SECONDS = 3600
"""How long a stalled child waits; the parent kills it long before."""


def _emit(event: str, **data: Any) -> None:
    """One protocol line on stdout for the parent."""
    sys.stdout.write(encode_event(event, **data))
    sys.stdout.flush()


def user_message(turn: int) -> str:
    """What the (simulated) user asks at ``turn``: the conversation Athena learns from."""
    return f"Explain {TOPICS[(turn - 1) % len(TOPICS)]} for my tides report."


def turn_content(turn: int) -> tuple[str, str, str]:
    """The (thought, action, result) of ``turn``: the same on every run, so a re-run matches."""
    topic = TOPICS[(turn - 1) % len(TOPICS)]
    return (
        f"I still need to understand {topic}.",
        f"search(query={topic!r})",
        f"found {2 + turn % 3} facts about {topic}",
    )


async def run_child(
    workflow_id: str,
    turns: int,
    *,
    stall_after: int | None,
    env_file: str | None,
    think_seconds: float = 0.1,
) -> int:
    """Run the kernel loop for ``workflow_id`` up to turn ``turns``.

    Resumes from the checkpoint when there is one. ``stall_after``: after
    acknowledging that turn, start the next one, log it, report it in flight
    and wait to be killed (the parent's crash window). ``think_seconds``: the
    simulated model call of each turn. Returns an exit code.
    """
    settings = load_settings(_env_file=env_file)
    rt = await MemoryRuntime.from_env(settings)
    async with rt:
        mem = rt.memory(workflow_id, STEP_ID, AGENT_ID)
        await _athena_handover(rt)
        start = await _start(mem)
        stall_turn = None if stall_after is None else stall_after + 1
        for turn in range(start, turns + 1):
            await _run_turn(mem, turn, think_seconds, stall=turn == stall_turn)
            _emit("ack", turn=turn)
        summary = await _compact(mem, settings.compaction_lock_ttl)
        await _athena_handover(rt)
        _emit("done", compaction=summary)
    return 0


async def _athena_handover(rt: MemoryRuntime) -> None:
    """Deliver the Athena writes waiting in the outbox (bounded; no-op without Athena).

    At the start these are the crashed run's: delivered first, the mid-term memory
    Athena forms from them is in the bundle the resumed run reads. At the end, the
    run's own, so `jarvismem context` shows them after the demo. A kernel never
    waits for Athena per turn; this is the demo's choice at its two boundaries.
    """
    athena = await rt.athena_memory(AGENT_ID)
    if athena is not None:
        await athena.flush(timeout=ATHENA_HANDOVER_SECONDS)


async def _start(mem: UnifiedMemory) -> int:
    """Rehydrate, report where the run starts, and lay out the plan on a first run."""
    bundle = await mem.rehydrate_bundle(ledger_tail=5)
    state = json.loads(bundle["checkpoint"]) if bundle["checkpoint"] else None
    start = int(state["next_turn"]) if state else 1
    _emit(
        "start",
        pid=os.getpid(),
        resumed=state is not None,
        next_turn=start,
        bundle=bundle if state is not None else None,
    )
    spaces = mem.spaces
    if state is None and spaces is not None:
        for task in PLAN:
            await spaces.tasks_add(task)
        await spaces.world_put("subject", "how tides work")
    return start


async def _run_turn(mem: UnifiedMemory, turn: int, think_seconds: float, *, stall: bool) -> None:
    """One turn: think, log (exactly once), maybe stall, record findings, checkpoint."""
    assert mem.episodic is not None and mem.working is not None
    thought, action, result = turn_content(turn)
    await asyncio.sleep(think_seconds)  # the simulated model call
    earlier = await mem.episodic.find_turn(STEP_ID, AGENT_ID, turn)
    await mem.log_turn(
        turn, thought, action, result, tokens=40 + turn, user_message=user_message(turn)
    )
    if earlier is not None:
        now = await mem.episodic.find_turn(STEP_ID, AGENT_ID, turn)
        _emit("rerun", turn=turn, ledger_id=earlier, kept_id=now)
    if stall:
        _emit("inflight", turn=turn)
        await asyncio.sleep(STALL_SECONDS)  # the parent kills us here
    spaces = mem.spaces
    if turn % FINDING_EVERY == 0:
        await mem.working.write("finding", f"turn {turn}: {result}", scope="goal")
        if spaces is not None:
            nxt = await spaces.tasks_next()
            if nxt is not None:
                await spaces.tasks_complete(nxt["id"])
    if spaces is not None:
        await spaces.world_put("last_topic", TOPICS[(turn - 1) % len(TOPICS)])
    await mem.save_checkpoint(json.dumps({"next_turn": turn + 1, "done": turn}))


async def _compact(mem: UnifiedMemory, lock_ttl: float) -> dict[str, Any]:
    """Compact now, waiting out a background compaction that holds the lock."""
    deadline = time.monotonic() + lock_ttl + 5
    while True:
        try:
            result: dict[str, Any] = await mem.compact_now()
            return result
        except LockNotAcquiredError:
            if time.monotonic() > deadline:
                return {"compacted": False, "reason": "compactor lock still held"}
            await asyncio.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process (``python -m jarvismem.demo child ...``)."""
    parser = argparse.ArgumentParser(prog="python -m jarvismem.demo")
    sub = parser.add_subparsers(dest="role", required=True)
    child = sub.add_parser("child", help="run the simulated kernel loop (used by the demo)")
    child.add_argument("--workflow", required=True)
    child.add_argument("--turns", type=int, required=True)
    child.add_argument("--stall-after", type=int, default=None)
    child.add_argument("--env-file", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="child: %(levelname)s: %(name)s: %(message)s",
    )
    env_file = None if args.env_file in (None, os.devnull) else args.env_file
    try:
        return asyncio.run(
            run_child(args.workflow, args.turns, stall_after=args.stall_after, env_file=env_file)
        )
    except Exception as exc:
        # The traceback is for `jarvismem -v demo`; the last line is the reason the
        # parent puts in its one-line error.
        traceback.print_exc()
        reason = " ".join(str(exc).split()) or "no message"
        sys.stderr.write(f"{ERROR_PREFIX}{type(exc).__name__}: {reason}\n")
        sys.stderr.flush()
        return 1
