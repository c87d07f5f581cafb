"""LG: LangGraph savers side by side: ``aput`` and ``aget_tuple`` throughput and latency.

``python -m benchmarks.langgraph [--quick] [--json] [--redis-url URL] [--postgres-dsn DSN]``

Each saver stores ``--ops`` checkpoints in a row on one thread (each a new step whose
one channel, of 1 KB, 10 KB or 100 KB, changed: the worst case of LangGraph's
incremental scheme, which stores changed channels only), then reads the latest
checkpoint ``--ops`` times (``aget_tuple`` without an id: what a graph does before
every run). One sequential caller, one run. Savers:

* ``JarvisMemSaver`` on the real Redis at ``--redis-url`` (a fresh namespace, deleted
  afterwards), with the hiredis parser jarvismem requires, and beside it the floor of
  any Redis saver: a raw ``SET`` / ``GET`` of the state's bytes on the same server;
* LangGraph's ``InMemorySaver`` (a dict in this process: the floor);
* ``AsyncSqliteSaver`` (``langgraph-checkpoint-sqlite``) on a file in a temp folder;
* ``AsyncPostgresSaver`` (``langgraph-checkpoint-postgres``) on a PostgreSQL from
  Debian's packages that this benchmark initialises and starts on a free loopback
  port in a temp folder (stopped and deleted afterwards; default settings, so
  every commit is flushed to disk), or the server of ``--postgres-dsn``.

Needs the ``bench`` and ``langgraph`` extras.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from benchmarks.stats import Target, latency_summary
from jarvismem.integrations.langgraph import JarvisMemSaver
from jarvismem.keys import KeySpace
from tests.harness.redis_server import free_port

SIZES = (1_000, 10_000, 100_000)
SAVERS = ("JarvisMemSaver", "InMemorySaver", "AsyncSqliteSaver", "AsyncPostgresSaver")


# --- a private PostgreSQL ------------------------------------------------------------------


class PrivatePostgres:
    """initdb + pg_ctl of Debian's newest installed PostgreSQL, in ``root``, on loopback."""

    def __init__(self, root: Path) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not found:
            raise RuntimeError("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin")
        self.bin = Path(found[-1]).parent
        self.root = root
        self.data = root / "pgdata"
        self.port = free_port()
        # PostgreSQL refuses to run as root: as root, run it as the packages' user.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self.root.chmod(0o755)
        self.data.mkdir()
        if self._as:
            shutil.chown(self.data, "postgres", "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        log = str(self.data / "server.log")
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start"
        )

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")


# --- the measurement ----------------------------------------------------------------------------


def _checkpoint(step: int, value: str, version: Any) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=step)),
        ts=datetime.now(UTC).isoformat(),
        channel_values={"state": value},
        channel_versions={"state": version},
        versions_seen={"node": {"state": version}},
        updated_channels=["state"],
    )


async def measure(saver: BaseCheckpointSaver[Any], size: int, ops: int) -> dict[str, Any]:
    """``ops`` aputs then ``ops`` latest-checkpoint reads on one new thread."""
    thread = f"bench-{size}-{uuid.uuid4().hex[:8]}"
    base = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[: size - 8]
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    version: Any = None
    puts: list[float] = []
    start = time.perf_counter()
    for step in range(ops):
        version = saver.get_next_version(version, None)
        checkpoint = _checkpoint(step, base + f"{step:08d}", version)
        metadata: Any = {"source": "loop", "step": step, "parents": {}}
        t0 = time.perf_counter()
        config = await saver.aput(config, checkpoint, metadata, {"state": version})  # type: ignore[arg-type]
        puts.append(time.perf_counter() - t0)
    put_wall = time.perf_counter() - start
    latest: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    gets: list[float] = []
    start = time.perf_counter()
    for _ in range(ops):
        t0 = time.perf_counter()
        tup = await saver.aget_tuple(latest)
        gets.append(time.perf_counter() - t0)
        if tup is None or len(tup.checkpoint["channel_values"]["state"]) != size:
            raise RuntimeError(f"{type(saver).__name__} read back a wrong checkpoint")
    get_wall = time.perf_counter() - start
    return {"aput": latency_summary(puts, put_wall), "aget_tuple": latency_summary(gets, get_wall)}


async def measure_raw(redis_url: str, size: int, ops: int) -> dict[str, Any]:
    """The floor of any Redis saver: one SET, then one GET, of the state's bytes."""
    client = aioredis.from_url(redis_url)
    key = f"bench-lg-raw-{uuid.uuid4().hex}"
    payload = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size].encode()
    try:
        sets: list[float] = []
        start = time.perf_counter()
        for _ in range(ops):
            t0 = time.perf_counter()
            await client.set(key, payload)
            sets.append(time.perf_counter() - t0)
        set_wall = time.perf_counter() - start
        gets: list[float] = []
        start = time.perf_counter()
        for _ in range(ops):
            t0 = time.perf_counter()
            await client.get(key)
            gets.append(time.perf_counter() - t0)
        get_wall = time.perf_counter() - start
    finally:
        await client.delete(key)
        await client.aclose()
    return {"aput": latency_summary(sets, set_wall), "aget_tuple": latency_summary(gets, get_wall)}


@asynccontextmanager
async def _jarvismem(redis_url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    client = aioredis.from_url(redis_url)
    namespace = "bench-lg-" + uuid.uuid4().hex[:8]
    try:
        yield JarvisMemSaver(client, KeySpace(namespace))
    finally:
        keys = [k async for k in client.scan_iter(match=f"jm:{namespace}:*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@asynccontextmanager
async def _memory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    yield InMemorySaver()


@asynccontextmanager
async def _sqlite(tmp: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    async with AsyncSqliteSaver.from_conn_string(str(tmp / "lg.sqlite")) as saver:
        await saver.setup()
        yield saver


@asynccontextmanager
async def _postgres(dsn: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        yield saver


async def run(
    *, redis_url: str, postgres_dsn: str | None, ops: int, only: tuple[str, ...] = SAVERS
) -> dict[str, Any]:
    """Every saver at every size; returns the report (rows, ratios, targets, notes)."""
    tmp = Path(tempfile.mkdtemp(prefix="jarvismem-bench-lg-"))
    server: PrivatePostgres | None = None
    report: dict[str, Any] = {"ops": ops, "rows": {}, "ratios": {}, "targets": [], "notes": []}
    try:
        dsn = postgres_dsn
        if dsn is None and "AsyncPostgresSaver" in only:
            server = PrivatePostgres(tmp)
            server.start()
            dsn = server.dsn
            report["notes"].append(f"PostgreSQL: private server from {server.bin}")
        makers: dict[str, Callable[[], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]] = {
            "JarvisMemSaver": lambda: _jarvismem(redis_url),
            "InMemorySaver": _memory,
            "AsyncSqliteSaver": lambda: _sqlite(tmp),
            "AsyncPostgresSaver": lambda: _postgres(dsn or ""),
        }
        if "JarvisMemSaver" in only:
            for size in SIZES:
                row = await measure_raw(redis_url, size, ops)
                report["rows"][f"raw Redis SET / GET @ {size // 1000} KB"] = row
        for name in only:
            async with makers[name]() as saver:
                for size in SIZES:
                    report["rows"][f"{name} @ {size // 1000} KB"] = await measure(saver, size, ops)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    _compare(report)
    return report


def _compare(report: dict[str, Any]) -> None:
    rows = report["rows"]
    for size in SIZES:
        kb = f"{size // 1000} KB"
        ours = rows.get(f"JarvisMemSaver @ {kb}")
        if ours is None:
            continue
        for other, op in (("InMemorySaver", "aput"), ("AsyncPostgresSaver", "aput"),
                          ("AsyncPostgresSaver", "aget_tuple")):  # fmt: skip
            theirs = rows.get(f"{other} @ {kb}")
            if theirs is None:
                continue
            ratio = ours[op]["median_ms"] / theirs[op]["median_ms"]
            name = f"JarvisMemSaver / {other} {op} p50 @ {kb}"
            report["ratios"][name] = ratio
            limit = 2.0 if other == "InMemorySaver" else 1.0
            report["targets"].append(
                Target(
                    f"{op} p50 @ {kb} {'<= 2 x' if limit == 2 else '<'} {other}", ratio, limit, "<="
                )
            )


def render(report: dict[str, Any], *, judged: bool = True) -> str:
    """The report as markdown tables; ``judged=False`` (a quick run) shows the
    targets' figures without a verdict, since their limits are set for full size."""
    lines = [
        f"LG: LangGraph savers, {report['ops']} sequential operations per row",
        "",
        "| saver @ state | aput ops/s | aput p50 ms | aput p99 ms "
        "| aget_tuple ops/s | aget_tuple p50 ms | aget_tuple p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in report["rows"].items():
        put, get = row["aput"], row["aget_tuple"]
        lines.append(
            f"| {name} | {put['ops_per_s']:,.0f} | {put['median_ms']:.3f} | {put['p99_ms']:.3f} "
            f"| {get['ops_per_s']:,.0f} | {get['median_ms']:.3f} | {get['p99_ms']:.3f} |"
        )
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in report["ratios"].items()]
    lines += ["", "| target | measured | pass |", "|---|---:|---|"]
    for t in report["targets"]:
        verdict = ("yes" if t.passed else "no") if judged else "(target judged at full size)"
        lines.append(f"| {t.name} | {t.value:.2f} | {verdict} |")
    if not judged:
        lines.append(
            "\nQuick run: the figures are of small sizes; targets are judged at full size only."
        )
    lines += [f"\nnote: {n}" for n in report["notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.langgraph", description=__doc__)
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    p.add_argument("--postgres-dsn", default=None, help="use this server instead of a private one")
    p.add_argument("--ops", type=int, default=1000, help="operations per row (default 1000)")
    p.add_argument("--quick", action="store_true", help="100 operations per row (smoke run)")
    p.add_argument("--only", default=",".join(SAVERS), help="comma-separated savers")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    only = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = sorted(set(only) - set(SAVERS))
    if unknown:
        print(f"unknown saver(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    ops = 100 if args.quick else args.ops
    report = asyncio.run(
        run(redis_url=args.redis_url, postgres_dsn=args.postgres_dsn, ops=ops, only=only)
    )
    if args.json:
        report["targets"] = [t.as_dict(judged=not args.quick) for t in report["targets"]]
        print(json.dumps(report, indent=2, default=float))
    else:
        print(render(report, judged=not args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
