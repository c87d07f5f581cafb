"""PNG plots of a report's series (``--plots DIR``), when matplotlib is importable.

matplotlib is not a jarvismem dependency: it comes with the ``bench`` extra
(``pip install -e '.[bench]'``). Without it the run says so in its notes and
writes nothing; every figure is in the report either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PLOTS = {
    "throughput vs agents": "throughput_vs_agents.png",
    "rehydrate p50 vs ledger size": "rehydrate_vs_ledger_size.png",
    "S1 per-turn latency": "s1_latency_over_run.png",
}


def write_plots(report: dict[str, Any], folder: Path) -> tuple[list[str], str | None]:
    """Write the plots the report has data for into ``folder``.

    Returns the files written and a note (why nothing was written), or None.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "plots not written: matplotlib is not installed (pip install -e '.[bench]')"
    series: dict[str, dict[str, list[float]]] = report.get("series") or {}
    folder.mkdir(parents=True, exist_ok=True)
    written: list[str] = []

    def save(fig: Any, name: str) -> None:
        path = folder / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))

    data = series.get("throughput vs agents")
    if data:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for column, style in (("raw redis.asyncio", "s--"), ("jarvismem", "o-"),
                              ("reference", "^:")):  # fmt: skip
            if column in data:
                label = "raw XADD (redis.asyncio)" if column.startswith("raw") else column
                if column == "reference":
                    label = "reference (JarvisCore 3.0.0)"
                ax.plot(data["agents"], data[column], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(data["agents"], [f"{a:g}" for a in data["agents"]])
        ax.set_xlabel("agents (tasks) in one event loop")
        ax.set_ylabel("turns / s (writes / s)")
        ax.set_title("Throughput vs number of agents, same Redis, same run")
        ax.grid(True, alpha=0.3)
        ax.legend()
        save(fig, PLOTS["throughput vs agents"])

    data = series.get("rehydrate p50 vs ledger size")
    if data:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        ax.plot(data["entries"], data["jarvismem"], "o-", label="jarvismem rehydrate_bundle p50")
        ax.plot(data["entries"], data["raw XREVRANGE"], "s--", label="raw XREVRANGE COUNT 10 p50")
        ref = series.get("rehydrate p50, jarvismem and reference")
        if ref:
            ax.plot(ref["entries"], ref["reference"], "^", markersize=9,
                    label="reference rehydrate_bundle p50 (as logged)")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("turns in the workflow (ledger retention on)")
        ax.set_ylabel("latency, ms")
        ax.set_title("Rehydrate latency vs ledger size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        save(fig, PLOTS["rehydrate p50 vs ledger size"])

    on = series.get("S1 per-turn latency")
    if on:
        fig, ax = plt.subplots(figsize=(7.2, 4.2))
        ax.plot(on["turn"], on["p99_ms"], "-", alpha=0.5, label="p99 (compaction on)")
        ax.plot(on["turn"], on["median_ms"], "-", label="median (compaction on, default)")
        off = series.get("S1/compaction off per-turn latency")
        if off:
            ax.plot(off["turn"], off["median_ms"], "-", label="median (compaction off)")
        width = on["turn"][1] - on["turn"][0] if len(on["turn"]) > 1 else 1
        ax.set_xlabel(f"turn (each point: {width:g} turns)")
        ax.set_ylabel("log_turn latency, ms")
        ax.set_title("Per-turn latency over a sequential run (S1)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
        save(fig, PLOTS["S1 per-turn latency"])
    return written, None
