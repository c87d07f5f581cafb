"""UI: the inspector's timeline page on a long ledger, over real HTTP.

One workflow's ledger is filled with ``ui_entries`` turns (1,000,000; quick:
20,000) spread over three agents, and the workflow is put in the workflow index
as ``log_turn`` would have. ``jarvismem.ui.app.create_app`` over the bench's
runtime (default configuration) is served on loopback by uvicorn
(``jarvismem.integrations.asgi.serve_asgi``) in this event loop, and one kept-open
``httpx.AsyncClient`` times, after 3 warm-up requests each:

- ``GET /w/<wf>``: the first page as HTML (50 entries);
- ``GET /w/<wf>?agent=agent-2``: filtered on an agent of one entry in three;
- ``GET /w/<wf>?format=json``: the same first page as JSON;
- ``GET /w/<wf>?before=+``: the newest page (read backward with XREVRANGE) as HTML.

Beside them, the floor: ``XRANGE key - + COUNT 50`` with ``redis.asyncio``
(same client, same run), and the ratio page / floor. Target: the HTML first
page's median <= 200 ms at full size. The filled keys are deleted (UNLINK: a
million-entry stream is freed off Redis's main thread) even when a step fails.

The client and the server share one process and one event loop, so each
latency includes the client's side of the request too (httpx, a few hundred µs).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from benchmarks.fixtures import fill_ledger
from benchmarks.stats import Target, percentile
from jarvismem.backends.blob.base import BlobStorage
from jarvismem.tiers.episodic import WorkflowIndex

if TYPE_CHECKING:
    from benchmarks.suite import Bench

WORKFLOW = "ui-timeline"
AGENTS = 3
FILTER_AGENT = "agent-2"
PAGE = 50
WARM_UP = 3
LIMIT_MS = 200.0


def _size_label(size: int) -> str:
    return "1M" if size == 1_000_000 else f"{size:,}"


async def ui_scenario(bench: Bench, blob: BlobStorage) -> None:
    """Run UI and record its measurements, figures, ratio and target in ``bench.report``."""
    try:
        import httpx

        from jarvismem.integrations.asgi import listen_socket, serve_asgi
        from jarvismem.ui.app import create_app
    except ImportError as exc:
        bench.report.notes.append(
            f"UI skipped: the inspector needs the ui extra (pip install -e '.[ui]'): {exc}"
        )
        return
    cfg, report, redis, ks = bench.cfg, bench.report, bench.redis, bench.keyspace
    size = cfg.ui_entries
    at = f"@ {size:,}"
    key = ks.ledger(WORKFLOW)
    index = WorkflowIndex(redis, ks)
    try:
        t0 = time.perf_counter()
        await fill_ledger(redis, ks, WORKFLOW, bench.turns, size, agents=AGENTS)
        report.figures[f"UI fill of the ledger {at} entries, s"] = time.perf_counter() - t0
        await index.add(WORKFLOW, int(time.time() * 1000))

        async with bench.runtime(blob) as rt:
            sock = listen_socket("127.0.0.1", 0)
            port = sock.getsockname()[1]
            stop = asyncio.Event()
            ready = asyncio.Event()
            server = asyncio.create_task(
                serve_asgi(create_app(rt), sock, stop=stop, on_ready=ready.set)
            )
            try:
                await _until_ready(server, ready)
                base = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                    await _check_pages(client)
                    rows = (
                        ("HTML", {}),
                        (f"HTML, ?agent= one in {AGENTS}", {"agent": FILTER_AGENT}),
                        ("JSON", {"format": "json"}),
                        ("HTML, newest page", {"before": "+"}),
                    )
                    medians: dict[str, float] = {}
                    for label, params in rows:
                        medians[label] = await _time_page(bench, client, label, params, at)
            finally:
                stop.set()
                await server
                sock.close()

        raw = await _time_raw(bench, key, at)
        report.ratios[f"UI timeline first page (HTML) / raw XRANGE COUNT {PAGE} {at}"] = (
            medians["HTML"] / raw if raw else float("nan")
        )
        report.targets.append(
            Target(
                f"UI timeline first page, {_size_label(size)}-entry ledger, median ms",
                medians["HTML"],
                LIMIT_MS,
                "<=",
            )
        )
    finally:
        await redis.unlink(key, ks.turn_index(WORKFLOW))
        await index.remove(WORKFLOW)


async def _until_ready(server: asyncio.Task[None], ready: asyncio.Event) -> None:
    """Wait for uvicorn to serve; its failure to start is raised, not waited on forever."""
    waiter = asyncio.create_task(ready.wait())
    done, _ = await asyncio.wait({server, waiter}, timeout=30, return_when="FIRST_COMPLETED")
    if waiter not in done:
        waiter.cancel()
        if server in done:
            server.result()  # raises what stopped it
        raise RuntimeError("UI: the inspector's server did not start within 30 s")


async def _check_pages(client: Any) -> None:
    """The pages answer 200 with a full first page: the timing measures a real page."""
    html = await client.get(f"/w/{WORKFLOW}")
    if html.status_code != 200 or html.text.count('class="entry"') != PAGE:
        raise RuntimeError(f"UI: GET /w/{WORKFLOW} answered {html.status_code}: {html.text[:300]}")
    page = (await client.get(f"/w/{WORKFLOW}", params={"format": "json"})).json()
    filtered = (
        await client.get(f"/w/{WORKFLOW}", params={"format": "json", "agent": FILTER_AGENT})
    ).json()
    if (
        len(page.get("entries", ())) != PAGE
        or len(filtered.get("entries", ())) != PAGE
        or {e["agent_id"] for e in filtered["entries"]} != {FILTER_AGENT}
        or page.get("next") is None
    ):
        raise RuntimeError(f"UI: unexpected timeline pages: {str(page)[:300]}")


async def _time_page(
    bench: Bench, client: Any, label: str, params: dict[str, str], at: str
) -> float:
    """``ui_reps`` sequential GETs of the first page; returns the median in ms."""
    clock = time.perf_counter
    path = f"/w/{WORKFLOW}"
    for _ in range(WARM_UP):
        (await client.get(path, params=params)).raise_for_status()
    lat: list[float] = []
    t_start = clock()
    for _ in range(bench.cfg.ui_reps):
        t0 = clock()
        response = await client.get(path, params=params)
        lat.append(clock() - t0)
        response.raise_for_status()
    name = f"UI timeline first page ({label}) {at}"
    summary = bench.measure(name, lat, clock() - t_start)
    bench.report.figures[f"{name}, p95 ms"] = percentile(lat, 95) * 1e3
    return summary["median_ms"]


async def _time_raw(bench: Bench, key: str, at: str) -> float:
    """The floor: ``XRANGE key - + COUNT 50`` with redis.asyncio; returns the median in ms."""
    redis, clock = bench.redis, time.perf_counter
    for _ in range(WARM_UP):
        await redis.xrange(key, "-", "+", count=PAGE)
    lat: list[float] = []
    t_start = clock()
    for _ in range(bench.cfg.ui_reps):
        t0 = clock()
        rows = await redis.xrange(key, "-", "+", count=PAGE)
        lat.append(clock() - t0)
        if len(rows) != PAGE:
            raise RuntimeError(f"UI: XRANGE COUNT {PAGE} returned {len(rows)} entries")
    name = f"UI raw XRANGE COUNT {PAGE} {at}"
    summary = bench.measure(name, lat, clock() - t_start)
    bench.report.figures[f"{name}, p95 ms"] = percentile(lat, 95) * 1e3
    return summary["median_ms"]
