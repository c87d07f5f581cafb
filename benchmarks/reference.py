"""``--with-reference``: the same workloads through the reference, beside jarvismem's.

The reference (``jarviscore-framework`` 3.0.0 from PyPI) pulls ~200 MB of LLM SDKs
and pins of its own, so it never enters jarvismem's environment: it is installed
once into ``<checkout>/.cache/jarviscore-venv`` (by
:func:`tests.harness.reference.build_reference_venv`, under a file lock) and
driven by ``benchmarks/reference_driver.py`` in a child process with that venv's
interpreter, on the same Redis (its own workflow ids, deleted afterwards) and a
blob root in the run's temporary folder.

jarvismem runs the very same workloads in this process with the default settings:

- ``REF/S1``: sequential ``log_turn`` into one workflow (5,000 turns);
- ``REF/S2``: 32 agents x 100 turns concurrently in one event loop;
- ``REF/S3``: ``rehydrate_bundle(ledger_tail=10)`` of the ``REF/S1`` workflow, i.e. at
  5,000 turns as logged (ledger and scratchpad as the turns left them);
- the agent sweep (1, 8, 32, 64 agents) for the throughput plot.

Targets: jarvismem >= 10x the reference at S1, >= 5x at S2, >= 10x at S3 (p50).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.fixtures import STEP
from benchmarks.stats import Target, latency_summary
from jarvismem.backends.blob.base import BlobStorage
from tests.harness.reference import build_reference_venv, driver_env

if TYPE_CHECKING:
    from benchmarks.suite import Bench

DRIVER = Path(__file__).with_name("reference_driver.py")
DRIVER_TIMEOUT = 1800.0
"""Seconds the reference may take for all its workloads (its S1 is quadratic)."""


VENV_DIR = Path(__file__).resolve().parents[1] / ".cache" / "jarviscore-venv"
"""The same venv the compatibility and migration tests use (built once for both)."""


def reference_interpreter() -> Path:
    """The reference venv's python (built on first use); raises with the reason if it cannot."""
    return build_reference_venv(VENV_DIR)


async def run_driver(python: Path, args: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """Run the driver with ``python``; its JSON answer (``args`` go in on stdin)."""
    env = driver_env()
    proc = await asyncio.create_subprocess_exec(
        str(python),
        str(DRIVER),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,  # the reference may create .jarviscore/ in its working directory
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(json.dumps(args).encode()), DRIVER_TIMEOUT
        )
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"the reference driver took over {DRIVER_TIMEOUT:g}s") from None
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"the reference driver exited {proc.returncode}: {' '.join(tail)}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def reference_scenario(bench: Bench, blob: BlobStorage) -> None:
    """Run the reference comparison and record it in ``bench.report``."""
    cfg, report = bench.cfg, bench.report
    try:
        python = await asyncio.to_thread(reference_interpreter)
    except Exception as exc:  # no network, no pip: say why, keep the rest of the report
        report.notes.append(f"reference comparison skipped: {type(exc).__name__}: {exc}")
        return

    # jarvismem first, the same workloads, defaults.
    s1_wf = "ref-s1-wf"
    async with bench.runtime(blob) as rt:
        mem = rt.memory(s1_wf, STEP, "agent-1")
        t0 = time.perf_counter()
        lat = await bench.log_sequential(mem, cfg.ref_s1_turns)
        ours_s1 = bench.measure(
            f"REF/S1 jarvismem sequential log_turn x {cfg.ref_s1_turns:,}",
            lat,
            time.perf_counter() - t0,
        )
    ours_s2 = await bench.s2(blob, "REF/S2 jarvismem", cfg.ref_s2_turns, cfg.ref_s2_agents)
    async with bench.runtime(blob) as rt:
        mem = rt.memory(s1_wf, STEP, "agent-1")
        await mem.rehydrate_bundle(ledger_tail=10)
        lat = []
        clock = time.perf_counter
        t_start = clock()
        for _ in range(cfg.ref_s3_reps):
            t0 = clock()
            await mem.rehydrate_bundle(ledger_tail=10)
            lat.append(clock() - t0)
        ours_s3 = bench.measure(
            f"REF/S3 jarvismem rehydrate_bundle @ {cfg.ref_s1_turns:,} logged turns",
            lat,
            clock() - t_start,
        )

    work = bench.tmp / "reference"
    work.mkdir(exist_ok=True)
    sweep = list(cfg.s2_agent_counts)
    args = {
        "redis_url": cfg.redis_url,
        "blob_root": str(work / "blobs"),
        "prefix": "jmbench" + uuid.uuid4().hex[:10],
        "turns": [
            {"thought": t.thought, "action": t.action, "result": t.result, "tokens": t.tokens}
            for t in bench.turns
        ],
        "s1_turns": cfg.ref_s1_turns,
        "s2_agents": cfg.ref_s2_agents,
        "s2_turns": cfg.ref_s2_turns,
        "sweep": sweep,
        "sweep_turns": cfg.ref_sweep_turns,
        "workflows": cfg.s2_workflows,
        "s3_reps": cfg.ref_s3_reps,
    }
    print("[bench] reference driver running (its S1 is quadratic)", file=sys.stderr)
    try:
        got = await run_driver(python, args, work)
    except Exception as exc:
        report.notes.append(f"reference comparison failed: {type(exc).__name__}: {exc}")
        return

    def summary(name: str, part: dict[str, Any]) -> dict[str, float]:
        return bench.measure(name, part["lat"], part["wall"])

    ref_s1 = summary(f"REF/S1 reference sequential log_turn x {cfg.ref_s1_turns:,}", got["S1"])
    ref_s2 = summary(
        f"REF/S2 reference {cfg.ref_s2_agents} agents x {cfg.ref_s2_turns} turns", got["S2"]
    )
    ref_s3 = summary(
        f"REF/S3 reference rehydrate_bundle @ {cfg.ref_s1_turns:,} logged turns", got["S3"]
    )
    sweep_tp = [
        latency_summary(got["sweep"][str(n)]["lat"], got["sweep"][str(n)]["wall"])["ops_per_s"]
        for n in sweep
    ]
    for n, tp in zip(sweep, sweep_tp, strict=True):
        report.figures[f"REF reference {n} agents x {cfg.ref_sweep_turns} turns, turns/s"] = tp
    plot = report.series.get("throughput vs agents")
    if plot is not None and plot["agents"] == [float(n) for n in sweep]:
        plot["reference"] = sweep_tp
    else:
        report.series["reference throughput vs agents"] = {
            "agents": [float(n) for n in sweep],
            "reference": sweep_tp,
        }
    report.series["rehydrate p50, jarvismem and reference"] = {
        "entries": [float(cfg.ref_s1_turns)],
        "jarvismem": [ours_s3["median_ms"]],
        "reference": [ref_s3["median_ms"]],
    }

    def ratio(a: float, b: float) -> float:
        return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan

    n1, n2 = f"{cfg.ref_s1_turns:,}", f"{cfg.ref_s2_agents}"
    checks = (
        (f"REF S1 jarvismem / reference throughput @ {n1} turns",
         ratio(ours_s1["ops_per_s"], ref_s1["ops_per_s"]), 10.0),
        (f"REF S2 jarvismem / reference throughput, {n2} agents",
         ratio(ours_s2["ops_per_s"], ref_s2["ops_per_s"]), 5.0),
        (f"REF S3 reference / jarvismem rehydrate p50 @ {n1} turns",
         ratio(ref_s3["median_ms"], ours_s3["median_ms"]), 10.0),
    )  # fmt: skip
    for name, value, limit in checks:
        report.ratios[name] = value
        report.targets.append(Target(f"{name} >= {limit:g}", value, limit, ">="))
