"""Recall latency at scale: ``python -m benchmarks.recall_scale [--entries N] ...``.

One agent's scope on a real Redis holds ``--entries`` facts (default 10,000);
``--queries`` recalls (``limit`` 10) are timed one after the other, lexical
(:class:`RedisRecallStore`) and hybrid (:class:`HybridRecallStore` around it,
vectors in Redis). The texts are LoCoMo turns (cycled up to ``--entries``) and
its questions when the data file is found (``--data``, as ``benchmarks.recall``),
else deterministic synthetic sentences over a Zipf-distributed vocabulary.

The query embedding is **excluded** from the hybrid figures: the store is given
a stand-in embedder that returns a fixed pseudo-random unit vector per text
(384 floats, MiniLM's size) in microseconds, so what is timed is the lexical
recall, the vector search over the scope's cached matrix and the fusion. The
query embedding of a real embedder is timed apart (``--embedder NAME``, on the
same queries) and reported on its own line. Every key written is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.recall_data import DataError, default_data_path, load_conversations
from benchmarks.recall_rows import RedisTarget, Unavailable
from benchmarks.stats import percentile, render_table
from jarvismem.keys import KeySpace
from jarvismem.recall import RecallRequest, RedisRecallStore, WriteRequest
from jarvismem.recall.hybrid import HybridRecallStore
from jarvismem.recall.vectors import RedisVectorStore

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DIMENSIONS = 384


class FixedVectors:
    """A stand-in embedder: one fixed pseudo-random unit vector per text (no model)."""

    name = "bench:fixed"
    dimensions = DIMENSIONS

    async def embed(self, texts: Sequence[str]) -> list[Any]:
        """A unit vector seeded by each text's CRC-32."""
        out = []
        for text in texts:
            v = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(DIMENSIONS)
            out.append((v / np.linalg.norm(v)).astype(np.float32))
        return out


def _progress(message: str) -> None:
    print(f"[recall-scale] {message}", file=sys.stderr, flush=True)


def synthetic_texts(entries: int, queries: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """Sentences of 8-20 words over a 5,000-word Zipf vocabulary, and 3-8 word queries."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(5000)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]

    def sentence(low: int, high: int) -> str:
        return " ".join(rng.choices(vocabulary, weights, k=rng.randint(low, high)))

    return [sentence(8, 20) for _ in range(entries)], [sentence(3, 8) for _ in range(queries)]


def locomo_texts(path: Any, entries: int, queries: int) -> tuple[list[str], list[str]]:
    """The data's turns cycled up to ``entries``, its first ``queries`` questions."""
    conversations = load_conversations(path)
    turns = [t.content for c in conversations for t in c.turns]
    questions = [q.question for c in conversations for q in c.questions]
    return [turns[i % len(turns)] for i in range(entries)], questions[:queries]


async def _timed(store: Any, agent: str, namespace: str, queries: list[str]) -> list[float]:
    seconds = []
    for query in queries:
        start = time.perf_counter()
        await store.recall(
            RecallRequest(agent_id=agent, namespace=namespace, query=query, limit=10)
        )
        seconds.append(time.perf_counter() - start)
    return seconds


def _row(name: str, seconds: list[float], note: str = "") -> dict[str, Any]:
    return {
        "row": name,
        "queries": len(seconds),
        "p50 ms": statistics.median(seconds) * 1e3,
        "p99 ms": percentile(seconds, 99) * 1e3,
        "note": note,
    }


async def run(
    *,
    entries: int,
    queries: int,
    redis_url: str,
    data: str | None = None,
    embedder: str | None = None,
    synthetic: bool = False,
) -> dict[str, Any]:
    """Write the scope, time the recalls; the report (JSON-ready).

    Texts: synthetic when asked, else the LoCoMo file (``data``, or found as
    ``benchmarks.recall`` finds it); synthetic when no file is found and none was
    named (a named file that is missing is :class:`DataError`).
    """
    path = None
    if not synthetic:
        try:
            path = default_data_path(data)
        except DataError:
            if data is not None:
                raise
    if path is not None:
        texts, asked = locomo_texts(path, entries, queries)
        source = "LoCoMo turns (cycled) and questions"
    else:
        texts, asked = synthetic_texts(entries, queries)
        source = "synthetic Zipf sentences"
    target = RedisTarget(redis_url)
    namespace = f"bench-recall-scale-{uuid.uuid4().hex[:10]}"
    agent = "scale-agent"
    rows: list[dict[str, Any]] = []
    try:
        client = await target.client()
        keyspace = KeySpace(namespace)
        lexical = RedisRecallStore(client, keyspace)
        hybrid = HybridRecallStore(
            lexical, FixedVectors(), vectors=RedisVectorStore(client, keyspace)
        )
        start = time.perf_counter()
        for number, text in enumerate(texts, 1):
            await hybrid.write(WriteRequest(agent_id=agent, namespace=namespace, content=text))
            if number % 2000 == 0:
                _progress(f"{number}/{len(texts)} written")
        await hybrid.flush(600)
        build = time.perf_counter() - start
        _progress(f"{len(texts)} entries written and embedded in {build:.1f} s")
        await _timed(lexical, agent, namespace, asked[:20])  # warm the scripts
        rows.append(
            _row("lexical (RedisRecallStore)", await _timed(lexical, agent, namespace, asked))
        )
        # A new vector store: its first search loads the whole scope (the cold case).
        hybrid = HybridRecallStore(
            lexical, FixedVectors(), vectors=RedisVectorStore(client, keyspace)
        )
        cold = await _timed(hybrid, agent, namespace, asked[:1])
        rows.append(
            _row(
                "hybrid, query embedding excluded",
                await _timed(hybrid, agent, namespace, asked),
                f"first recall of a new process (loads {len(texts)} vectors): "
                f"{cold[0] * 1e3:.0f} ms",
            )
        )
        await hybrid.aclose()
        if embedder:
            rows.append(await _embedding_row(embedder, asked))
    except Unavailable as exc:
        raise SystemExit(f"error: {exc}") from None
    finally:
        if target._client is not None:
            await target.delete(namespace)
        await target.close()
    return {"entries": len(texts), "source": source, "build_s": build, "rows": rows}


async def _embedding_row(name: str, queries: list[str]) -> dict[str, Any]:
    from jarvismem.backends.embeddings.factory import create_embedder

    model = create_embedder(name)
    if model is None:
        return _row(f"query embedding ({name})", [0.0], "no embedder")
    await model.embed(queries[:2])  # loads the weights
    seconds = []
    for query in queries:
        start = time.perf_counter()
        await model.embed([query])
        seconds.append(time.perf_counter() - start)
    close = getattr(model, "aclose", None)
    if close is not None:
        await close()
    return _row(f"query embedding alone ({name})", seconds)


def main(argv: list[str] | None = None) -> int:
    """Entry point: prints a table (or ``--json``); 0 on a completed run."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recall_scale")
    parser.add_argument("--entries", type=int, default=10_000, help="entries in the scope")
    parser.add_argument("--queries", type=int, default=300, help="recalls timed per row")
    parser.add_argument("--data", help="LoCoMo JSON (found as benchmarks.recall finds it)")
    parser.add_argument("--synthetic", action="store_true", help="synthetic texts, not LoCoMo")
    parser.add_argument("--embedder", help="also time this embedder's query embedding")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", DEFAULT_REDIS_URL), help="Redis"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.entries < 1 or args.queries < 1:
        parser.error("--entries and --queries must be >= 1")
    try:
        report = asyncio.run(
            run(
                entries=args.entries,
                queries=args.queries,
                redis_url=args.redis_url,
                data=args.data,
                embedder=args.embedder,
                synthetic=args.synthetic,
            )
        )
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['entries']} entries in one scope ({report['source']}), limit 10")
        print(render_table(report["rows"], ["row", "queries", "p50 ms", "p99 ms", "note"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
