"""Latency statistics, targets and the printed table."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any


def percentile(values: list[float], pct: float) -> float:
    """The ``pct`` percentile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(latencies_s: list[float], wall_s: float) -> dict[str, float]:
    """Median and p99 latency in ms and throughput in ops/s.

    ``latencies_s``: one duration per operation, seconds. ``wall_s``: the wall
    time the operations took together (differs from the sum when concurrent).
    """
    count = len(latencies_s)
    return {
        "ops": float(count),
        "median_ms": statistics.median(latencies_s) * 1e3 if latencies_s else math.nan,
        "p99_ms": percentile(latencies_s, 99) * 1e3,
        "ops_per_s": count / wall_s if wall_s > 0 else math.nan,
    }


def bucket_series(latencies_s: list[float], bucket: int) -> dict[str, list[float]]:
    """Per-``bucket``-call median and p99 latency in ms (a plot of latency over a run).

    ``turn`` is the index of each bucket's first call.
    """
    turn: list[float] = []
    median: list[float] = []
    p99: list[float] = []
    size = max(1, bucket)
    for start in range(0, len(latencies_s), size):
        chunk = latencies_s[start : start + size]
        turn.append(float(start))
        median.append(statistics.median(chunk) * 1e3)
        p99.append(percentile(chunk, 99) * 1e3)
    return {"turn": turn, "median_ms": median, "p99_ms": p99}


def lag_summary(lags_s: list[float]) -> dict[str, float]:
    """Loop-lag overshoots (seconds) as p50 / p99 / max in ms and the sample count."""
    return {
        "samples": float(len(lags_s)),
        "p50_ms": statistics.median(lags_s) * 1e3 if lags_s else math.nan,
        "p99_ms": percentile(lags_s, 99) * 1e3,
        "max_ms": max(lags_s) * 1e3 if lags_s else math.nan,
    }


@dataclass(frozen=True, slots=True)
class Target:
    """One benchmark target: ``value`` must be ``<=`` or ``>=`` ``limit``."""

    name: str
    value: float
    limit: float
    op: str  # ">=" or "<="
    note: str = ""

    @property
    def passed(self) -> bool:
        """True when the figure meets the target (NaN never does)."""
        if math.isnan(self.value):
            return False
        return self.value >= self.limit if self.op == ">=" else self.value <= self.limit

    def as_dict(self, *, judged: bool = True) -> dict[str, Any]:
        """JSON-ready form. ``judged=False`` (a quick run): ``passed`` is None, since
        a limit set for full-size runs says nothing of a figure measured at small sizes."""
        return {
            "name": self.name,
            "value": self.value,
            "limit": self.limit,
            "op": self.op,
            "judged": judged,
            "passed": self.passed if judged else None,
            "note": self.note,
        }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3f}"
    return str(value)


def render_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A Markdown table of ``rows`` (missing cells shown as blank)."""
    cells = [[_fmt(row.get(col, "")) for col in columns] for row in rows]
    widths = [max([len(col)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    line = "| " + " | ".join(col.ljust(w) for col, w in zip(columns, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    return "\n".join([line, sep, *body])


def _verdict(target: dict[str, Any]) -> str:
    """The result cell of a target: its verdict, or why there is none."""
    if not target.get("judged", True):
        return "(target judged at full size)"
    return "pass" if target["passed"] else "falls short"


def render_report(report: dict[str, Any]) -> str:
    """The human-readable report: measurements, ratios, then targets."""
    meas = [{"measurement": name, **fig} for name, fig in report["measurements"].items()]
    out = ["## Measurements (latency in ms, throughput in ops/s)", ""]
    out.append(render_table(meas, ["measurement", "ops", "median_ms", "p99_ms", "ops_per_s"]))
    extra = report.get("figures") or {}
    if extra:
        out += ["", "## Other figures", ""]
        out.append(
            render_table([{"figure": k, "value": v} for k, v in extra.items()], ["figure", "value"])
        )
    out += ["", "## Ratios (same run)", ""]
    out.append(
        render_table(
            [{"ratio": k, "value": v} for k, v in report["ratios"].items()], ["ratio", "value"]
        )
    )
    out += ["", "## Targets", ""]
    trows = [
        {
            "target": t["name"],
            "value": t["value"],
            "limit": f"{t['op']} {_fmt(t['limit'])}",
            "result": _verdict(t),
        }
        for t in report["targets"]
    ]
    if any(not t.get("judged", True) for t in report["targets"]):
        out += [
            "Quick run: the figures are of small sizes; targets are judged at full size only.",
            "",
        ]
    out.append(render_table(trows, ["target", "value", "limit", "result"]))
    notes = report.get("notes") or []
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(out)
