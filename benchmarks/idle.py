"""S8: idle cost — process memory per idle workflow and per idle agent in one runtime.

A long-lived service keeps many workflows open while their agents wait (for a
user, a tool, a schedule). Each is a view the kernel holds (``rt.memory(...)``)
that has logged a turn and now does nothing. In one runtime with the default
settings:

1. N workflows, one agent each: RSS growth / N = cost of an idle workflow (with
   its first agent);
2. then one more agent in each of those N workflows: RSS growth / N = cost of an
   idle agent.

RSS (``/proc/self/statm``) after ``gc.collect()``; a warm-up of a few hundred
workflows first, so one-time costs (imports, scripts, pools) are not counted.
Target: <= 2 KB each.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

from benchmarks.fixtures import STEP, rss_bytes
from benchmarks.stats import Target
from jarvismem.backends.blob.base import BlobStorage

if TYPE_CHECKING:
    from benchmarks.suite import Bench

LIMIT_KB = 2.0
WARM_UP = 200


async def idle_scenario(bench: Bench, blob: BlobStorage) -> None:
    """Run S8 and record its figures and targets in ``bench.report``."""
    n = bench.cfg.s8_workflows
    report = bench.report
    turn = bench.turns[0]
    held: list[Any] = []  # the views a kernel would hold for its waiting agents

    async with bench.runtime(blob) as rt:

        async def touch(workflow: str, agent: str) -> None:
            mem = rt.memory(workflow, STEP, agent)
            await mem.log_turn(0, turn.thought, turn.action, turn.result, turn.tokens)
            held.append(mem)

        for i in range(WARM_UP):
            await touch(f"s8-warm-{i}", "agent-1")
        gc.collect()
        rss0 = rss_bytes()
        for i in range(n):
            await touch(f"s8-wf-{i}", "agent-1")
        gc.collect()
        rss1 = rss_bytes()
        for i in range(n):
            await touch(f"s8-wf-{i}", "agent-2")
        gc.collect()
        rss2 = rss_bytes()
        per_wf = (rss1 - rss0) / n / 1024
        per_agent = (rss2 - rss1) / n / 1024
        report.figures[f"S8 RSS per idle workflow (1 agent) @ {n:,} workflows, KB"] = per_wf
        report.figures[f"S8 RSS per further idle agent @ {n:,} workflows, KB"] = per_agent
        report.figures["S8 RSS of the process after, MB"] = rss2 / 1024 / 1024
        report.targets.append(
            Target(f"S8 RSS per idle workflow <= {LIMIT_KB:g} KB", per_wf, LIMIT_KB, "<=")
        )
        report.targets.append(
            Target(f"S8 RSS per idle agent <= {LIMIT_KB:g} KB", per_agent, LIMIT_KB, "<=")
        )
        held.clear()
