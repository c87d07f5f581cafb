"""The parent: start redis-server, the Athena fake and the workers, inject faults,
recover, observe, verify.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from jarvismem.backends.outbox import Outbox
from jarvismem.errors import SpaceNotFoundError
from jarvismem.keys import KeySpace
from jarvismem.records import decode_entry
from jarvismem.runtime import MemoryRuntime
from jarvismem.testing.fake_athena import FakeAthenaServer
from tests.harness.checker.disks import FILLER, OutboxDisks
from tests.harness.checker.faults import (
    ALL_FAULTS,
    ATHENA_FAULTS,
    DISK_FAULTS,
    NET_FAULTS,
    FaultInjector,
)
from tests.harness.checker.forwarders import Forwarders
from tests.harness.checker.history import STATS, completed, history_files, read_history
from tests.harness.checker.verify import Observed, Verdict, parse_dead_letter, verify
from tests.harness.checker.worker import (
    ATHENA_KEY,
    NAMESPACE,
    WorkerSpec,
    worker_settings,
)
from tests.harness.redis_server import RedisServerProcess

TENANTS = ("ta", "tb")
PROGRESS_EVERY = 5.0
WORKER_EXIT_GRACE = 60.0
RECOVERY_FLUSH_TIMEOUT = 30.0

AMBIGUOUS_ATHENA_FAULTS = (
    "kill_worker",
    "athena_hang",
    "redis_stop",
    "redis_kill",
    "redis_oom",
    "redis_kill_oom",
    "partition",
    "outbox_readonly",
    "outbox_full",
)
"""Faults after which an Athena event may be delivered twice (documented at-least-once):
a deliverer killed or its "sent" mark unwritable (read-only or full outbox disk)
between its POST and that mark, a timed-out request the server stored, delivery
claims in a Redis that is down, refusing writes or out of reach."""

CLAIMLESS_FAULTS = ("redis_stop", "redis_kill", "redis_oom", "redis_kill_oom", "partition")
"""Faults during which a deliverer cannot take claims in Redis and sends without one:
every queued copy of a turn re-logged meanwhile may then reach Athena."""


@dataclass
class CheckerConfig:
    """What to run.

    ``seed`` decides every random choice (operations, delays, faults);
    ``seconds`` of operations; ``processes`` workers with ``tasks`` tasks each,
    over ``workflows`` x ``steps`` x ``agents``; ``athena`` runs the Athena fake
    and two tenants; ``faults`` to inject (Athena ones only with ``athena``),
    one every ``fault_gap`` seconds; ``max_lag_ms``: event-loop stall that
    counts as a violation; ``redis_port``: of the private redis-server (a free
    one when None); ``workdir``: kept when given, else a temp dir (removed when
    the run found nothing); ``mutation``: a bug every worker re-introduces on
    purpose (see ``worker.MUTATIONS``), to show it is caught; ``progress``:
    called with each progress line; ``forwarders``: each worker slot reaches
    Redis through its own loopback forwarder (its outboxes keyed by its own
    address; needed for ``partition``); ``outbox_disk_size``: of each slot's
    outbox tmpfs (where mounting is permitted; needed for the disk faults).
    """

    seed: int = 0
    seconds: float = 30.0
    processes: int = 4
    tasks: int = 3
    workflows: int = 2
    steps: int = 2
    agents: int = 3
    athena: bool = False
    faults: tuple[str, ...] = ALL_FAULTS
    fault_gap: tuple[float, float] = (0.5, 2.5)
    max_lag_ms: float = 1000.0
    redis_port: int | None = None
    workdir: Path | None = None
    mutation: str | None = None
    progress: Callable[[str], None] | None = None
    forwarders: bool = True
    outbox_disk_size: str = "32m"


@dataclass
class CheckerReport:
    """Figures and violations of one run; ``ok`` when no invariant was violated."""

    seed: int = 0
    mutation: str | None = None
    seconds: float = 0.0
    operations: int = 0
    acknowledged: int = 0
    unknown_outcome: int = 0
    ops_by_kind: dict[str, int] = field(default_factory=dict)
    ops_by_status: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    worker_incarnations: int = 0
    violations: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    errors_by_type: dict[str, int] = field(default_factory=dict)
    workdir: str = ""
    problems: list[str] = field(default_factory=list)
    skipped_faults: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.problems

    @property
    def total_violations(self) -> int:
        return sum(self.violations.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "total_violations": self.total_violations}


class _Workers:
    """The worker processes, by slot; a killed one is restarted as the next incarnation."""

    def __init__(
        self,
        config: CheckerConfig,
        root: Path,
        base: dict[str, Any],
        per_slot: Callable[[int], dict[str, Any]],
    ) -> None:
        self.config = config
        self.root = root
        self.base = base
        self.per_slot = per_slot
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.incarnation: dict[int, int] = {}
        self.started = 0
        self.log: IO[bytes] = (root / "workers.log").open("ab")
        (root / "specs").mkdir(exist_ok=True)

    def spawn(self, slot: int) -> None:
        inc = self.incarnation.get(slot, -1) + 1
        self.incarnation[slot] = inc
        fields = {**self.base, **self.per_slot(slot)}
        spec = WorkerSpec(slot=slot, incarnation=inc, tenant=_tenant(self.config, slot), **fields)
        path = self.root / "specs" / f"{spec.writer}.json"
        spec.save(path)
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
        self.procs[slot] = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.checker", "worker", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            cwd=self.root,
            env=env,
        )
        self.started += 1

    def kill(self, rng: random.Random) -> None:
        slot = rng.randrange(len(self.procs))
        proc = self.procs[slot]
        proc.kill()
        proc.wait()
        time.sleep(rng.uniform(0.0, 0.5))
        self.spawn(slot)

    def respawn_exited(self) -> None:
        """A worker that could not start (e.g. Redis down) is started again."""
        for slot, proc in list(self.procs.items()):
            if proc.poll() is not None:
                self.spawn(slot)

    def alive(self) -> int:
        return sum(1 for p in self.procs.values() if p.poll() is None)

    def wait_all(self, timeout: float) -> list[int]:
        """Wait for every worker; SIGKILL the ones still running. Returns the killed slots."""
        deadline = time.monotonic() + timeout
        killed = []
        for slot, proc in self.procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                killed.append(slot)
        self.log.close()
        return killed


class _Progress:
    """Counts history lines as they grow (each op is two lines)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets: dict[Path, int] = {}
        self.lines = 0

    def ops(self) -> int:
        for path in history_files(self.directory):
            start = self.offsets.get(path, 0)
            with path.open("rb") as fh:
                fh.seek(start)
                chunk = fh.read()
            self.lines += chunk.count(b"\n")
            self.offsets[path] = start + len(chunk)
        return self.lines // 2


def _tenant(config: CheckerConfig, slot: int) -> str:
    return TENANTS[slot % 2] if config.athena else TENANTS[0]


def run_checker(config: CheckerConfig) -> CheckerReport:
    """Run the workload and fault schedule of ``config``, then verify; returns the figures."""
    started = time.monotonic()
    rng = random.Random(config.seed)
    report = CheckerReport(seed=config.seed, mutation=config.mutation)
    owned = config.workdir is None
    root = config.workdir or Path(tempfile.mkdtemp(prefix="jarvismem-checker-"))
    root.mkdir(parents=True, exist_ok=True)
    report.workdir = str(root)
    say = config.progress or (lambda line: None)
    redis = RedisServerProcess(root / "redis", port=config.redis_port, appendfsync="always")
    athena: FakeAthenaServer | None = None
    workers: _Workers | None = None
    injector: FaultInjector | None = None
    forwarders: Forwarders | None = None
    disks = OutboxDisks(root / "outbox", config.processes, config.outbox_disk_size)
    try:
        redis.start()
        if config.forwarders:
            forwarders = Forwarders(redis.port, config.processes).start()
        if set(config.faults) & set(DISK_FAULTS):
            disks.mount()
            if disks.skipped:
                for kind in DISK_FAULTS:
                    report.skipped_faults[kind] = disks.skipped
        if forwarders is None:
            for kind in NET_FAULTS:
                report.skipped_faults[kind] = "no forwarders (CheckerConfig.forwarders False)"
        for kind, why in report.skipped_faults.items():
            if kind in config.faults:
                say(f"fault {kind} skipped: {why}")
        if config.athena:
            athena = FakeAthenaServer(api_key=ATHENA_KEY, hang_seconds=3.0).start()
        blob_root = root / "blobs"
        blob_root.mkdir(exist_ok=True)
        history_dir = root / "history"
        history_dir.mkdir(exist_ok=True)
        end_time = time.time() + config.seconds
        base = {
            "seed": config.seed,
            "redis_url": redis.url,
            "blob_root": str(blob_root),
            # The final recovery's own (direct address); each slot has its own folder.
            "outbox_path": str(root / "outbox" / "direct"),
            "history_dir": str(history_dir),
            "end_time": end_time,
            "tasks": config.tasks,
            "total_tasks": config.processes * config.tasks,
            "workflows": [f"wf{i}" for i in range(config.workflows)],
            "steps": [f"s{i}" for i in range(config.steps)],
            "agents": [f"a{i}" for i in range(config.agents)],
            "athena_url": athena.url if athena is not None else None,
            "mutation": config.mutation,
        }
        fwd = forwarders

        def per_slot(slot: int) -> dict[str, Any]:
            return {
                "redis_url": fwd.url(slot) if fwd is not None else redis.url,
                "outbox_path": str(disks.dirs[slot]),
            }

        workers = _Workers(config, root, base, per_slot)
        for slot in range(config.processes):
            workers.spawn(slot)
        faults = [
            f
            for f in config.faults
            if (config.athena or f not in ATHENA_FAULTS) and f not in report.skipped_faults
        ]
        injector = FaultInjector(
            rng, redis, blob_root, athena, workers.kill, forwarders=forwarders, disks=disks
        )
        progress = _Progress(history_dir)
        next_progress = time.monotonic() + PROGRESS_EVERY
        while time.time() < end_time - 1.0:
            time.sleep(min(rng.uniform(*config.fault_gap), max(0.0, end_time - time.time())))
            if faults and time.time() < end_time - 1.0:
                injector.inject(rng.choice(faults))
            workers.respawn_exited()
            if time.monotonic() >= next_progress:
                next_progress = time.monotonic() + PROGRESS_EVERY
                say(
                    f"[{time.monotonic() - started:6.1f}s] ops {progress.ops()} "
                    f"faults {sum(injector.counts.values())} "
                    f"workers {workers.alive()}/{config.processes} "
                    f"incarnations {workers.started}"
                )
        injector.heal_all()
        killed = workers.wait_all(max(0.0, end_time - time.time()) + WORKER_EXIT_GRACE)
        if killed:
            report.problems.append(f"workers {killed} did not exit; killed")
        report.faults = dict(injector.counts)
        report.worker_incarnations = workers.started
        say(f"[{time.monotonic() - started:6.1f}s] recovery and verification")
        tenants = TENANTS if config.athena else TENANTS[:1]
        # One recovery per Redis address: each slot's outboxes are keyed by its
        # forwarder's address and only a runtime at that address replays them.
        targets = [
            (str(per_slot(slot)["redis_url"]), str(disks.dirs[slot]), _tenant(config, slot))
            for slot in range(config.processes)
        ]
        targets += [(redis.url, str(base["outbox_path"]), tenant) for tenant in tenants]
        obs = asyncio.run(_recover_and_observe(base, targets, athena))
        events = read_history(history_files(history_dir))
        ops = list(completed(events))
        stats = [e for e in events if e.get("ev") == STATS]
        # Athena is at-least-once in the cases docs/reliability.md lists: a
        # deliverer killed between its POST and its "sent" mark, a request that
        # timed out although the server stored it (a hang), and delivery while
        # Redis (its claims) is down. Each such fault can repeat at most the
        # event in flight in each Athena outbox (one deliverer per outbox).
        ambiguous = sum(report.faults.get(f, 0) for f in AMBIGUOUS_ATHENA_FAULTS)
        outboxes = config.agents * len(tenants)
        verdict = verify(
            ops,
            obs,
            stats,
            max_lag_ms=config.max_lag_ms,
            athena_crash_duplicates=ambiguous * outboxes,
            athena_claims_unavailable=any(report.faults.get(f) for f in CLAIMLESS_FAULTS),
        )
        _fill(report, verdict, ops)
    except BaseException:
        report.problems.append(f"work directory kept: {root}")
        raise
    finally:
        if workers is not None:
            for proc in workers.procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        try:
            if injector is not None:
                injector.heal_all()
        finally:
            if disks.mounted:
                if not report.ok or not owned:
                    # The tmpfs contents go with the mounts: keep a copy to inspect.
                    shutil.copytree(
                        root / "outbox",
                        root / "outbox-kept",
                        ignore=shutil.ignore_patterns(FILLER),
                        dirs_exist_ok=True,
                    )
                failed = disks.unmount_all()
                if failed:
                    report.problems.append(f"could not unmount {failed}")
            if forwarders is not None:
                forwarders.close()
            if athena is not None:
                athena.stop()
            redis.kill()
    report.seconds = round(time.monotonic() - started, 2)
    if owned and report.ok:
        shutil.rmtree(root, ignore_errors=True)
    return report


def _fill(report: CheckerReport, verdict: Verdict, ops: list[dict[str, Any]]) -> None:
    figures = dict(verdict.figures)
    report.operations = figures.pop("operations")
    report.acknowledged = figures.pop("acknowledged")
    report.unknown_outcome = figures.pop("unknown_outcome")
    report.ops_by_kind = figures.pop("by_kind")
    report.ops_by_status = figures.pop("by_status")
    report.figures = figures
    report.violations = dict(sorted(verdict.violations.items()))
    report.examples = {k: v for k, v in sorted(verdict.examples.items()) if v}
    report.errors_by_type = dict(Counter(op["err"] for op in ops if op.get("err")))


async def _recover_and_observe(
    base: dict[str, Any], targets: list[tuple[str, str, str]], athena: FakeAthenaServer | None
) -> Observed:
    """A fresh runtime per (Redis address, outbox folder, tenant) rehydrates and
    flushes every workflow; then the last one (the direct address) reads the state."""
    for redis_url, outbox_path, tenant in targets:
        settings = worker_settings(
            redis_url=redis_url,
            blob_root=base["blob_root"],
            outbox_path=outbox_path,
            tenant=tenant,
            athena_url=base["athena_url"],
        )
        rt = await MemoryRuntime.from_env(settings)
        try:
            for wf in base["workflows"]:
                for step in base["steps"]:
                    for agent in base["agents"]:
                        await rt.memory(wf, step, agent).rehydrate_bundle(ledger_tail=1)
                state = rt.workflow(wf)
                for writer in (state.redis_writer, state.blob_writer):
                    if writer is not None:
                        await writer.flush(timeout=RECOVERY_FLUSH_TIMEOUT)
            if athena is not None:
                for agent in base["agents"]:
                    memory = await rt.athena_memory(agent)
                    # A long run can leave a large backlog: keep flushing while
                    # each round makes progress (a stuck outbox still shows).
                    while memory is not None and await memory.outbox.load():
                        if not await memory.flush(timeout=RECOVERY_FLUSH_TIMEOUT):
                            break
            if (redis_url, outbox_path, tenant) == targets[-1]:
                obs = await _observe(rt, KeySpace(NAMESPACE), base, athena)
        finally:
            await rt.close()
    return obs


async def _observe(
    rt: Any, ks: Any, base: dict[str, Any], athena: FakeAthenaServer | None
) -> Observed:
    redis = rt.redis
    obs = Observed()
    for wf in base["workflows"]:
        rows = await redis.xrange(ks.ledger(wf), "-", "+")
        obs.ledger[wf] = [decode_entry(sid, fields) for sid, fields in rows]
        to_id = await redis.hget(ks.ltm_summary(wf), "to_id")
        obs.summaries[wf] = to_id.decode() if isinstance(to_id, bytes) else to_id
        for step in base["steps"]:
            raw = await redis.hget(ks.checkpoint(wf, step), "state")
            obs.registers[f"ckpt:{wf}:{step}"] = _writer(raw)
        for agent in base["agents"]:
            spaces = rt.memory(wf, base["steps"][0], agent).spaces
            world = await spaces.world_items()
            for key in ("k0", "k1"):
                obs.registers[f"world:{wf}:{agent}:{key}"] = _writer_value(world.get(key))
            try:
                notes = (await spaces.get_space("notes")).data
            except SpaceNotFoundError:
                notes = None
            obs.registers[f"notes:{wf}:{agent}"] = _writer_value(notes)
            try:
                tasks = (await spaces.get_space("tasks")).data
            except SpaceNotFoundError:
                tasks = []
            obs.tasks[f"{wf}:{agent}"] = [str(t.get("text")) for t in tasks]
    if athena is not None:
        tenant_of = athena.session_tenants()
        for sid, event in athena.events:
            if event.get("type") == "thought":
                obs.athena_events.append((tenant_of.get(sid, "?"), str(event.get("content"))))
    # Every slot's folder and the direct one: the parent of the direct one.
    outbox_root = Path(base["outbox_path"]).parent
    paths = await asyncio.to_thread(lambda: sorted(outbox_root.rglob("*.jsonl")))
    obs.dead_letters = await asyncio.to_thread(_dead_letters, outbox_root)
    for path in paths:
        box = await asyncio.to_thread(Outbox, path)
        try:
            await box.refresh()
            obs.outbox_pending[str(path.relative_to(outbox_root))] = len(box)
        finally:
            await box.close()
    return obs


def _dead_letters(outbox_root: Path) -> list[Any]:
    """Every line of every ``.dead`` file under ``outbox_root``."""
    dead = []
    for path in sorted(outbox_root.rglob("*.dead")):
        name = str(path.relative_to(outbox_root))
        for line in path.read_bytes().splitlines():
            letter = parse_dead_letter(name, line)
            if letter is not None:
                dead.append(letter)
    return dead


def _writer(raw: Any) -> str | None:
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        return str(json.loads(text)["w"])
    except (ValueError, KeyError, TypeError):
        return f"<unreadable {text[:40]!r}>"


def _writer_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict) and "w" in value:
        return str(value["w"])
    return f"<unreadable {str(value)[:40]!r}>"


def format_report(report: CheckerReport) -> str:
    """The summary table: operations, faults, figures, violations with examples."""
    lines = [
        f"seed {report.seed}   {report.seconds:.1f} s   "
        f"{report.operations} operations, {report.acknowledged} acknowledged, "
        f"{report.unknown_outcome} unknown outcome, {report.worker_incarnations} worker starts",
        *([f"mutation (re-introduced bug): {report.mutation}"] if report.mutation else []),
        "",
        f"{'operation':16} {'count':>7}",
    ]
    lines += [f"{k:16} {v:7}" for k, v in sorted(report.ops_by_kind.items())]
    lines += ["", f"{'fault':16} {'count':>7}"]
    lines += [f"{k:16} {v:7}" for k, v in sorted(report.faults.items())] or ["(none)"]
    lines += [f"{k:16} skipped: {why}" for k, why in sorted(report.skipped_faults.items())]
    lines += ["", "figures"]
    for key, value in report.figures.items():
        if isinstance(value, list):
            lines.append(f"  {key}:")
            lines += [f"      {item}" for item in value]
        else:
            lines.append(f"  {key:26} {value}")
    if report.errors_by_type:
        lines += ["", "errors by type (op outcomes)"]
        lines += [f"  {k:26} {v}" for k, v in sorted(report.errors_by_type.items())]
    lines += ["", f"violations: {report.total_violations}"]
    for name, count in report.violations.items():
        lines.append(f"  {name:26} {count}")
        lines += [f"      e.g. {ex}" for ex in report.examples.get(name, [])]
    lines += [f"PROBLEM: {p}" for p in report.problems]
    if not report.ok:
        lines.append(f"work directory kept: {report.workdir}")
    return "\n".join(lines)
