"""Recall quality on LoCoMo: ``python -m benchmarks.recall [--data PATH] ...``.

Each conversation of the data is its own scope: every turn is written with the
store's ``write()``, then each answerable question is asked with ``recall()``
(``limit`` = the largest k) and scored on retrieval alone, with no LLM:
Recall@k, Hit@k and MRR, overall and per category (see
:mod:`benchmarks.recall_score`), plus recall latency (p50/p99), the index build
time (all writes) and its memory. Every store x mode asked for is one row of one
run, beside a textbook BM25 baseline row (``rank-bm25``). The method and the
current figures are in ``docs/recall.md``.

Output: a plain table (overall, then per category), ``--json`` with every
figure, ``--plot DIR`` for ``recall-at-k.png`` (R@k against k, a line per row)
and ``recall-at-k-by-category.png``. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.recall_data import (
    CATEGORIES,
    Conversation,
    DataError,
    default_data_path,
    load_conversations,
    take_slice,
)
from benchmarks.recall_rows import (
    BASELINE,
    Bm25Baseline,
    RedisTarget,
    Retriever,
    Unavailable,
    make_retriever,
    occurred_at_supported,
)
from benchmarks.recall_score import Scored, by_category, score_question
from benchmarks.stats import percentile, render_table
from jarvismem.errors import BackendUnavailableError

DEFAULT_KS = (1, 3, 5, 10, 20)
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
STORES = ("memory", "redis")
MODES = ("lexical", "hybrid")
PLOT_FILES = ("recall-at-k.png", "recall-at-k-by-category.png")


def _progress(message: str) -> None:
    print(f"[recall] {message}", file=sys.stderr, flush=True)


def row_name(store: str, mode: str) -> str:
    """The label of a row in the table, the JSON and the plot."""
    if store == BASELINE:
        return "textbook BM25 (rank-bm25)"
    return f"jarvismem {store} {mode}"


async def run_row(
    retriever: Retriever, conversations: Sequence[Conversation], ks: Sequence[int], label: str
) -> dict[str, Any]:
    """Build and ask every conversation with one retriever; the row's figures."""
    limit = max(ks)
    scored: list[Scored] = []
    latencies: list[float] = []
    cpu: list[float] = []
    build_s = 0.0
    entries = 0
    memory = 0
    memory_how = ""
    short = 0
    for number, conversation in enumerate(conversations, 1):
        built = await retriever.build(conversation)
        build_s += built.seconds
        entries += built.entries
        memory += built.memory_bytes
        memory_how = built.memory_how
        for question in conversation.questions:
            start, start_cpu = time.perf_counter(), time.process_time()
            ranked = await retriever.search(question.question, limit)
            latencies.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            if len(ranked) < limit:
                short += 1
            scored.append(score_question(ranked, question.evidence, ks, question.category))
        _progress(
            f"{label}: {conversation.sample_id} ({number}/{len(conversations)}): "
            f"{built.entries} turns in {built.seconds:.2f} s, "
            f"{len(conversation.questions)} questions"
        )
    embeds = list(getattr(retriever, "query_embed_seconds", []))
    return {
        "scores": by_category(scored, ks),
        "latency": {
            "queries": len(latencies),
            "p50_ms": statistics.median(latencies) * 1e3 if latencies else math.nan,
            "p99_ms": percentile(latencies, 99) * 1e3,
            # This process's CPU time per recall: on a busy machine the wall time
            # above grows with the load, this much less (a Redis server's share
            # of the work is not in it).
            "cpu_p50_ms": statistics.median(cpu) * 1e3 if cpu else math.nan,
            # A hybrid row's query embedding alone (inside the recall times above).
            "query_embed_p50_ms": statistics.median(embeds) * 1e3 if embeds else math.nan,
        },
        "build": {
            "seconds": build_s,
            "entries": entries,
            "per_entry_ms": build_s / entries * 1e3 if entries else math.nan,
        },
        "memory": {
            "bytes": memory,
            "per_entry_bytes": memory / entries if entries else math.nan,
            "how": memory_how,
        },
        "short_results": short,
    }


async def run_benchmark(
    conversations: Sequence[Conversation],
    *,
    stores: Sequence[str],
    modes: Sequence[str],
    ks: Sequence[int],
    redis_url: str,
    embedder: str | None = None,
    baseline: bool = True,
) -> dict[str, Any]:
    """Every row, one after the other; the whole report (JSON-ready)."""
    redis = RedisTarget(redis_url)
    rows: list[dict[str, Any]] = []
    specs = [(s, m) for m in modes for s in stores]
    if baseline:
        specs.append((BASELINE, "lexical"))
    try:
        for store, mode in specs:
            label = row_name(store, mode)
            row: dict[str, Any] = {"name": label, "store": store, "mode": mode}
            retriever: Retriever | None = None
            try:
                if store == BASELINE:
                    retriever = Bm25Baseline()
                else:
                    retriever = await make_retriever(store, mode, redis, embedder)
                    row["namespace"] = retriever.namespace
                row.update(await run_row(retriever, conversations, ks, label))
                row["available"] = True
            except Unavailable as exc:
                row.update(available=False, note=f"{label}: {exc}")
                _progress(f"{label}: {exc}")
            except BackendUnavailableError as exc:
                # A backend lost mid-run (Redis, an embeddings server): this row has
                # no figures, the others still run. Anything else is a bug: it stops.
                row.update(available=False, note=f"{label}: failed: {exc}")
                _progress(f"{label}: failed: {exc}")
            finally:
                if retriever is not None:
                    await retriever.close()
            rows.append(row)
    finally:
        await redis.close()
    questions = sum(len(c.questions) for c in conversations)
    return {
        "ks": list(ks),
        "mrr_at": max(ks),
        "conversations": len(conversations),
        "questions": questions,
        "entries": sum(len(c.turns) for c in conversations),
        "occurred_at": occurred_at_supported(),
        "rows": rows,
        "notes": [r["note"] for r in rows if not r["available"]],
    }


def render(report: dict[str, Any]) -> str:
    """The plain-text report: overall table, per-category table, notes."""
    ks = report["ks"]
    k10 = 10 if 10 in ks else ks[-1]
    rows = [r for r in report["rows"] if r["available"]]
    overall = []
    for row in rows:
        fig = row["scores"]["overall"]
        overall.append(
            {
                "row": row["name"],
                **{f"R@{k}": fig[f"R@{k}"] for k in ks},
                f"Hit@{k10}": fig[f"Hit@{k10}"],
                f"MRR@{report['mrr_at']}": fig["MRR"],
                "p50 ms": row["latency"]["p50_ms"],
                "p99 ms": row["latency"]["p99_ms"],
                "cpu p50 ms": row["latency"]["cpu_p50_ms"],
                "embed p50 ms": row["latency"].get("query_embed_p50_ms", math.nan),
                "build s": row["build"]["seconds"],
                "memory KB": row["memory"]["bytes"] / 1024,
            }
        )
    head = (
        f"Recall on {report['conversations']} conversations, {report['questions']} questions, "
        f"{report['entries']} turns (data: {report.get('data', '?')})"
    )
    out = [head, "", "## Overall", ""]
    out.append(
        render_table(
            overall,
            [
                "row",
                *[f"R@{k}" for k in ks],
                f"Hit@{k10}",
                f"MRR@{report['mrr_at']}",
                "p50 ms",
                "p99 ms",
                "cpu p50 ms",
                "embed p50 ms",
                "build s",
                "memory KB",
            ],
        )
    )
    per = []
    for row in rows:
        for category in ("overall", *CATEGORIES.values()):
            fig = row["scores"].get(category)
            if fig is None:
                continue
            per.append(
                {
                    "row": row["name"],
                    "category": category,
                    "questions": int(fig["questions"]),
                    "R@5": fig.get("R@5", math.nan),
                    f"R@{k10}": fig[f"R@{k10}"],
                    f"Hit@{k10}": fig[f"Hit@{k10}"],
                    f"MRR@{report['mrr_at']}": fig["MRR"],
                }
            )
    out += ["", "## By category", ""]
    mrr = f"MRR@{report['mrr_at']}"
    cols = ["row", "category", "questions", "R@5", f"R@{k10}", f"Hit@{k10}", mrr]
    if 5 not in ks or k10 == 5:
        cols.remove("R@5")
    out.append(render_table(per, cols))
    notes = list(report["notes"])
    if report.get("plots"):
        notes += [f"plot written: {p}" for p in report["plots"]]
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(out)


def write_plots(report: dict[str, Any], folder: Path) -> tuple[list[str], str | None]:
    """R@k against k, a line per row (and a panel per category); the files written
    and a note when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "plots not written: matplotlib is not installed (pip install -e '.[bench]')"
    folder.mkdir(parents=True, exist_ok=True)
    ks = report["ks"]
    rows = [r for r in report["rows"] if r["available"]]
    written = []

    # Rows may coincide (the two lexical stores rank alike): styles keep each visible.
    styles = ("o-", "s--", "^:", "D-.", "v-", "P--")

    def curve(ax: Any, category: str) -> None:
        for index, row in enumerate(rows):
            fig = row["scores"].get(category)
            if fig:
                style = styles[index % len(styles)]
                ax.plot(ks, [fig[f"R@{k}"] for k in ks], style, label=row["name"])
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    curve(ax, "overall")
    ax.set_xlabel("k (turns recalled)")
    ax.set_ylabel("Recall@k (share of evidence turns found)")
    ax.set_title(f"LoCoMo recall, {report['questions']} questions")
    ax.legend()
    fig.tight_layout()
    path = folder / PLOT_FILES[0]
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(str(path))

    fig, axes = plt.subplots(2, 2, figsize=(9.6, 7.0), sharex=True, sharey=True)
    for ax, category in zip(axes.flat, CATEGORIES.values(), strict=True):
        curve(ax, category)
        ax.set_title(category)
    for ax in axes[1]:
        ax.set_xlabel("k")
    for ax in axes[:, 0]:
        ax.set_ylabel("Recall@k")
    axes.flat[0].legend(fontsize="small")
    fig.tight_layout()
    path = folder / PLOT_FILES[1]
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(str(path))
    return written, None


def _choices(text: str, allowed: Sequence[str], what: str) -> list[str]:
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [c for c in chosen if c not in allowed]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"{what}: {', '.join(unknown) or 'none given'}; choose from {', '.join(allowed)}"
        )
    return list(dict.fromkeys(chosen))


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k {text!r}: comma-separated whole numbers") from None
    if not ks or ks[0] <= 0:
        raise argparse.ArgumentTypeError(f"--k {text!r}: at least one k, every k positive")
    return ks


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.recall``."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.recall",
        description="Recall quality on LoCoMo-shaped data, scored on retrieval alone.",
    )
    parser.add_argument(
        "--data",
        help="LoCoMo JSON file (default: $JARVISMEM_LOCOMO, else ../shared/data/locomo-dev.json "
        "beside the repository, else /work/shared/data/locomo-dev.json)",
    )
    parser.add_argument(
        "--slice", help="N = the first N conversations; N:Q = and the first Q questions of each"
    )
    parser.add_argument(
        "--stores",
        type=lambda t: _choices(t, STORES, "--stores"),
        default=list(STORES),
        help="comma-separated: memory,redis (default both)",
    )
    parser.add_argument(
        "--modes",
        type=lambda t: _choices(t, MODES, "--modes"),
        default=["lexical"],
        help="comma-separated: lexical,hybrid (default lexical)",
    )
    parser.add_argument("--embedder", help="embedder name for hybrid mode (create_embedder)")
    parser.add_argument("--k", type=_ks, default=list(DEFAULT_KS), help="default 1,3,5,10,20")
    parser.add_argument("--no-baseline", action="store_true", help="skip the BM25 baseline row")
    parser.add_argument(
        "--no-captions",
        action="store_true",
        help="store a turn's text without the caption of the image it shares",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", DEFAULT_REDIS_URL),
        help=f"Redis for the redis store (default $REDIS_URL or {DEFAULT_REDIS_URL})",
    )
    parser.add_argument("--json", action="store_true", help="print every figure as JSON")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="write the PNG plots here")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 on a completed run, 2 on bad arguments or data."""
    args = build_parser().parse_args(argv)
    try:
        path = default_data_path(args.data)
        conversations = take_slice(load_conversations(path, not args.no_captions), args.slice)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _progress(
        f"{path}: {len(conversations)} conversations, "
        f"{sum(len(c.questions) for c in conversations)} questions"
    )
    report = asyncio.run(
        run_benchmark(
            conversations,
            stores=args.stores,
            modes=args.modes,
            ks=args.k,
            redis_url=args.redis_url,
            embedder=args.embedder,
            baseline=not args.no_baseline,
        )
    )
    report["data"] = str(path)
    report["slice"] = args.slice
    report["captions"] = not args.no_captions
    report["plots"] = []
    if args.plot is not None:
        written, note = write_plots(report, args.plot)
        report["plots"] = written
        if note:
            report["notes"].append(note)
    if args.json:
        print(json.dumps(report, indent=2, default=float))
    else:
        print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
