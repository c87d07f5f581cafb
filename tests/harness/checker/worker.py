"""A checker worker: one OS process, one runtime, several tasks with their own views.

Started by the parent as ``python -m tests.harness.checker worker SPEC.json``.
It runs random operations until the spec's end time, recording each one in its
history file (see :mod:`~tests.harness.checker.history`), while a monitor
task measures event-loop lag. A restarted worker (next incarnation of the same
slot) reads its predecessors' histories to carry on with the next turn ids.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jarvismem.backends.outbox import Outbox
from jarvismem.errors import (
    CheckpointConflictError,
    JarvisMemError,
    LockNotAcquiredError,
    SpaceNotFoundError,
    TaskNotFoundError,
)
from jarvismem.keys import KeySpace
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings
from jarvismem.tiers.checkpoints import CheckpointStore
from tests.harness.checker.history import (
    FAIL,
    INFO,
    INVOKE,
    OK,
    STATS,
    Histogram,
    HistoryWriter,
    completed,
    read_history,
)
from tests.harness.checker.verify import CHECKER_TIMEOUT, turn_text
from tests.harness.harness_settings import HARNESS_TIER_TIMEOUT, harness_settings

ATHENA_KEY = "checker-key"
NAMESPACE = "chk"
SLOW_CALLBACK_SECONDS = 0.005
STATS_EVERY = 2.0

# Relative frequency of each operation kind.
WEIGHTS: dict[str, int] = {
    "log_turn": 30,
    "relog": 5,
    "save_ckpt": 12,
    "save_race": 4,
    "load_ckpt": 6,
    "rehydrate": 3,
    "world_put": 5,
    "world_delete": 2,
    "notes_put": 3,
    "notes_delete": 1,
    "tasks_add": 5,
    "tasks_remove": 3,
    "flush": 2,
    "compact": 1,
}
WORLD_KEYS = ("k0", "k1")
RACE_WINDOW = 0.5
"""Seconds in which every process's save races pick the same (workflow, step)."""
RACE_SAVES = (2, 4)


@dataclass
class WorkerSpec:
    """Everything a worker process needs (written as JSON by the parent)."""

    slot: int
    incarnation: int
    seed: int
    redis_url: str
    blob_root: str
    outbox_path: str
    history_dir: str
    tenant: str
    end_time: float
    tasks: int
    total_tasks: int
    workflows: list[str]
    steps: list[str]
    agents: list[str]
    athena_url: str | None = None
    op_timeout: float = 20.0
    mutation: str | None = None
    weights: dict[str, int] = field(default_factory=lambda: dict(WEIGHTS))

    @property
    def writer(self) -> str:
        return f"w{self.slot:02d}-{self.incarnation:03d}"

    def history_path(self) -> Path:
        return Path(self.history_dir) / f"{self.writer}.jsonl"

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> WorkerSpec:
        return cls(**json.loads(path.read_text()))

    def tuples(self) -> list[tuple[str, str, str]]:
        """Every (workflow, step, agent): turns of each are logged by one task only."""
        return [(w, s, a) for w in self.workflows for s in self.steps for a in self.agents]


def worker_settings(
    *,
    redis_url: str,
    blob_root: str,
    outbox_path: str,
    tenant: str,
    athena_url: str | None,
) -> Settings:
    """The settings every checker runtime uses (workers and the final recovery)."""
    return harness_settings(
        redis_url,
        blob_root=Path(blob_root),
        outbox_path=Path(outbox_path),
        namespace=NAMESPACE,
        redis_cluster=False,
        tier_timeout_ltm=HARNESS_TIER_TIMEOUT,
        tier_timeout_athena=HARNESS_TIER_TIMEOUT,
        redis_connect_retries=5,
        athena_url=athena_url,
        athena_tenant_id=tenant,
        athena_api_key=ATHENA_KEY if athena_url else None,
        athena_http_timeout=2.0,
        llm_base_url=None,
    )


class _SlowCallbacks(logging.Filter):
    """Counts asyncio's debug-mode "Executing <callback> took N seconds" warnings.

    A filter on the ``asyncio`` logger, so the (many) warnings are counted and
    the slowest few kept for the stats, without filling the workers' log.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.worst: list[tuple[float, str]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Executing"):
            return True
        self.count += 1
        args = record.args if isinstance(record.args, tuple) else ()
        took = float(args[-1]) if args and isinstance(args[-1], float) else 0.0
        # The slowest few say what blocked the loop, if anything did.
        self.worst.append((took, record.getMessage()[:300]))
        self.worst = sorted(self.worst, reverse=True)[:5]
        return False


def _is_definite_refusal(exc: BaseException) -> bool:
    """Errors whose contract is "nothing was written" (a fail, not an unknown outcome)."""
    return isinstance(
        exc,
        CheckpointConflictError | LockNotAcquiredError | SpaceNotFoundError | TaskNotFoundError,
    )


class Worker:
    """One worker incarnation: the runtime, its tasks, the history and the monitors."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        # The outbox this process's queued writes wait in (folder and Redis
        # address): only reads through it merge them before they are replayed.
        self.box = f"{spec.redis_url} {spec.outbox_path}"
        self.history = HistoryWriter(spec.history_path())
        self.rt: Any = None
        self.counter = 0
        self.lag = Histogram()
        self.turn_latency = Histogram()
        self.slow = _SlowCallbacks()
        self.next_turn: dict[tuple[str, str, str], int] = defaultdict(lambda: 1)
        self.acked_turns: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        self.known_tasks: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self._load_predecessors()

    def _load_predecessors(self) -> None:
        """Carry on where earlier incarnations of this slot stopped."""
        spec = self.spec
        earlier = [
            Path(spec.history_dir) / f"w{spec.slot:02d}-{i:03d}.jsonl"
            for i in range(spec.incarnation)
        ]
        ops = completed(read_history(p for p in earlier if p.exists()))
        removed: set[str] = set()
        for op in ops:
            if op["kind"] in ("log_turn", "relog"):
                key = (op["wf"], op["step"], op["agent"])
                self.next_turn[key] = max(self.next_turn[key], int(op["turn"]) + 1)
                if op["status"] == OK:
                    self.acked_turns[key].append(int(op["turn"]))
            elif op["kind"] == "tasks_add" and op["status"] == OK:
                self.known_tasks[op["space"]].append((op["task_id"], op["text"]))
            elif op["kind"] == "tasks_remove":
                removed.add(op["task_id"])
        for space, tasks in self.known_tasks.items():
            self.known_tasks[space] = [t for t in tasks if t[0] not in removed]

    # --- recording ---------------------------------------------------------------------

    def new_id(self) -> str:
        self.counter += 1
        return f"{self.spec.slot}.{self.spec.incarnation}.{self.counter}"

    async def record(
        self,
        op_id: str,
        kind: str,
        fields: dict[str, Any],
        fn: Callable[[], Awaitable[dict[str, Any] | None]],
    ) -> tuple[str, dict[str, Any]]:
        """Run ``fn`` as operation ``op_id``, writing its invoke and completion."""
        self.history.write(
            {"ev": INVOKE, "id": op_id, "ts": time.time_ns(), "kind": kind, **fields}
        )
        result: dict[str, Any] = {}
        guard = asyncio.timeout(self.spec.op_timeout)
        try:
            async with guard:
                result = await fn() or {}
            status = OK
        except Exception as exc:
            if guard.expired():
                status, result = INFO, {"err": CHECKER_TIMEOUT, "jm": False}
            else:
                status = FAIL if _is_definite_refusal(exc) else INFO
                jm = isinstance(exc, JarvisMemError)
                result = {
                    "err": type(exc).__name__,
                    "jm": jm,
                    # jarvismem's input errors (bad arguments) are ValueError/TypeError too.
                    "input": jm and isinstance(exc, ValueError | TypeError),
                    "msg": str(exc)[:200],
                }
        self.history.write({"ev": status, "id": op_id, "ts": time.time_ns(), **result})
        return status, result

    def write_stats(self) -> None:
        self.history.write(
            {
                "ev": STATS,
                "writer": self.spec.writer,
                "ts": time.time_ns(),
                "lag": self.lag.to_json(),
                "log_turn": self.turn_latency.to_json(),
                "slow_callbacks": self.slow.count,
                "slow_examples": [text for _, text in self.slow.worst],
            }
        )

    # --- monitors ----------------------------------------------------------------------

    async def monitor_lag(self) -> None:
        """Sleep 1 ms over and over; the overshoot is how long the loop was busy."""
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            self.lag.add((time.perf_counter() - t0 - 0.001) * 1e6)

    async def dump_stats(self) -> None:
        while True:
            await asyncio.sleep(STATS_EVERY)
            self.write_stats()

    # --- operations --------------------------------------------------------------------

    async def run_task(self, task: int) -> None:
        spec = self.spec
        g = spec.slot * spec.tasks + task
        owned = [t for i, t in enumerate(spec.tuples()) if i % spec.total_tasks == g]
        rng = random.Random(f"{spec.seed}:{spec.slot}:{spec.incarnation}:{task}")
        kinds = list(spec.weights)
        weights = [spec.weights[k] for k in kinds]
        # A restarted agent rehydrates before it carries on.
        for tup in owned:
            await self.rehydrate(tup[0], tup[1], tup[2])
        while time.time() < spec.end_time:
            kind = rng.choices(kinds, weights)[0]
            await self.one(kind, rng, owned)
            await asyncio.sleep(rng.uniform(0.0, 0.02))

    async def one(self, kind: str, rng: random.Random, owned: list[tuple[str, str, str]]) -> None:
        spec = self.spec
        wf = rng.choice(spec.workflows)
        step = rng.choice(spec.steps)
        agent = rng.choice(spec.agents)
        if kind in ("log_turn", "relog"):
            if not owned:
                return
            tup = rng.choice(owned)
            if kind == "relog":
                if not self.acked_turns[tup]:
                    return
                await self.log_turn(tup, rng.choice(self.acked_turns[tup]), relog=True)
            else:
                turn = self.next_turn[tup]
                self.next_turn[tup] = turn + 1
                await self.log_turn(tup, turn, relog=False)
        elif kind == "save_ckpt":
            await self.save_ckpt(wf, step, agent, conditional=rng.random() < 0.5)
        elif kind == "save_race":
            await self.save_race(rng)
        elif kind == "load_ckpt":
            await self.load_ckpt(wf, step, agent)
        elif kind == "rehydrate":
            await self.rehydrate(wf, step, agent)
        elif kind in ("world_put", "world_delete"):
            await self.world(wf, agent, rng.choice(WORLD_KEYS), delete=kind == "world_delete")
        elif kind in ("notes_put", "notes_delete"):
            await self.notes(wf, agent, delete=kind == "notes_delete")
        elif kind == "tasks_add":
            await self.tasks_add(wf, agent)
        elif kind == "tasks_remove":
            await self.tasks_remove(wf, agent, rng)
        elif kind == "flush":
            await self.flush(wf)
        elif kind == "compact":
            await self.compact(wf, step, agent)

    async def log_turn(self, tup: tuple[str, str, str], turn: int, *, relog: bool) -> None:
        wf, step, agent = tup
        mem = self.rt.memory(wf, step, agent)
        thought, action, result = turn_text(self.spec.tenant, wf, step, agent, turn)

        async def call() -> None:
            t0 = time.perf_counter()
            await mem.log_turn(turn, thought, action, result, tokens=turn % 50 + 1)
            self.turn_latency.add((time.perf_counter() - t0) * 1e6)

        fields = {"wf": wf, "step": step, "agent": agent, "turn": turn, "tenant": self.spec.tenant}
        status, _ = await self.record(self.new_id(), "relog" if relog else "log_turn", fields, call)
        if status == OK and not relog:
            self.acked_turns[tup].append(turn)

    async def save_race(self, rng: random.Random) -> None:
        """Several saves of one (workflow, step) at once, conditional and not.

        The target is a function of the seed and the current time window, so the
        races of every process in the same window hit the same checkpoint: saves
        concurrent within and across processes, each with its returned revision.
        """
        spec = self.spec
        shared = random.Random(f"{spec.seed}:race:{int(time.time() / RACE_WINDOW)}")
        wf, step = shared.choice(spec.workflows), shared.choice(spec.steps)
        saves = [
            self.save_ckpt(
                wf, step, rng.choice(spec.agents), conditional=rng.random() < 0.5, race=True
            )
            for _ in range(rng.randint(*RACE_SAVES))
        ]
        await asyncio.gather(*saves)

    async def save_ckpt(
        self, wf: str, step: str, agent: str, *, conditional: bool, race: bool = False
    ) -> None:
        mem = self.rt.memory(wf, step, agent)
        op_id = self.new_id()
        state = json.dumps({"w": op_id, "n": self.counter})

        async def call() -> dict[str, Any]:
            expected = None
            if conditional:
                record = await mem.load_checkpoint_record()
                expected = record.rev if record is not None else 0
            rev = await mem.save_checkpoint(state, expected_rev=expected)
            return {"rev": rev, "expected": expected}

        fields = {
            "reg": f"ckpt:{wf}:{step}",
            "val": op_id,
            "cond": conditional,
            "race": race,
            "box": self.box,
        }
        await self.record(op_id, "save_ckpt", fields, call)

    async def load_ckpt(self, wf: str, step: str, agent: str) -> None:
        mem = self.rt.memory(wf, step, agent)

        async def call() -> dict[str, Any]:
            return {"val": _writer_of(await mem.load_checkpoint())}

        fields = {"reg": f"ckpt:{wf}:{step}", "read": True, "box": self.box}
        await self.record(self.new_id(), "load_ckpt", fields, call)

    async def rehydrate(self, wf: str, step: str, agent: str) -> None:
        mem = self.rt.memory(wf, step, agent)

        async def call() -> dict[str, Any]:
            bundle = await mem.rehydrate_bundle(ledger_tail=5)
            return {
                "val": _writer_of(bundle.get("checkpoint")),
                "degraded": sorted(bundle.get("degraded") or {}),
            }

        fields = {"reg": f"ckpt:{wf}:{step}", "read": True, "box": self.box}
        await self.record(self.new_id(), "rehydrate", fields, call)

    async def world(self, wf: str, agent: str, key: str, *, delete: bool) -> None:
        spaces = self.rt.memory(wf, self.spec.steps[0], agent).spaces
        op_id = self.new_id()

        async def call() -> None:
            if delete:
                await spaces.world_delete(key)
            else:
                await spaces.world_put(key, {"w": op_id})

        fields = {"reg": f"world:{wf}:{agent}:{key}", "val": None if delete else op_id}
        await self.record(op_id, "world_delete" if delete else "world_put", fields, call)

    async def notes(self, wf: str, agent: str, *, delete: bool) -> None:
        spaces = self.rt.memory(wf, self.spec.steps[0], agent).spaces
        op_id = self.new_id()

        async def call() -> None:
            if delete:
                await spaces.delete_space("notes")
            else:
                await spaces.put_space("notes", {"w": op_id})

        fields = {"reg": f"notes:{wf}:{agent}", "val": None if delete else op_id}
        await self.record(op_id, "notes_delete" if delete else "notes_put", fields, call)

    async def tasks_add(self, wf: str, agent: str) -> None:
        spaces = self.rt.memory(wf, self.spec.steps[0], agent).spaces
        op_id = self.new_id()
        text = f"task {op_id}"
        space = f"{wf}:{agent}"

        async def call() -> dict[str, Any]:
            task = await spaces.tasks_add(text)
            return {"task_id": str(task["id"])}

        status, result = await self.record(op_id, "tasks_add", {"space": space, "text": text}, call)
        if status == OK:
            self.known_tasks[space].append((result["task_id"], text))

    async def tasks_remove(self, wf: str, agent: str, rng: random.Random) -> None:
        space = f"{wf}:{agent}"
        if not self.known_tasks[space]:
            return
        task_id, text = self.known_tasks[space].pop(rng.randrange(len(self.known_tasks[space])))
        spaces = self.rt.memory(wf, self.spec.steps[0], agent).spaces

        async def call() -> None:
            await spaces.tasks_remove(task_id)

        fields = {"space": space, "task_id": task_id, "text": text}
        await self.record(self.new_id(), "tasks_remove", fields, call)

    async def flush(self, wf: str) -> None:
        state = self.rt.workflow(wf)

        async def call() -> dict[str, Any]:
            empty = True
            for writer in (state.redis_writer, state.blob_writer):
                if writer is not None:
                    empty = await writer.flush(timeout=2.0) and empty
            return {"empty": empty}

        await self.record(self.new_id(), "flush", {"wf": wf}, call)

    async def compact(self, wf: str, step: str, agent: str) -> None:
        mem = self.rt.memory(wf, step, agent)

        async def call() -> dict[str, Any]:
            result = await mem.compact_now()
            saved = bool(result.get("compacted"))
            return {"compacted": saved, "to_id": result.get("to_id") if saved else None}

        await self.record(self.new_id(), "compact", {"wf": wf}, call)

    # --- lifecycle ---------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = SLOW_CALLBACK_SECONDS
        asyncio_log = logging.getLogger("asyncio")
        asyncio_log.addFilter(self.slow)
        asyncio_log.setLevel(logging.WARNING)
        spec = self.spec
        settings = worker_settings(
            redis_url=spec.redis_url,
            blob_root=spec.blob_root,
            outbox_path=spec.outbox_path,
            tenant=spec.tenant,
            athena_url=spec.athena_url,
        )

        async def start() -> None:
            self.rt = await MemoryRuntime.from_env(settings)

        status, _ = await self.record(self.new_id(), "start", {}, start)
        if status != OK:
            self.history.close()
            return 3
        monitors = [
            asyncio.create_task(self.monitor_lag()),
            asyncio.create_task(self.dump_stats()),
        ]
        try:
            await asyncio.gather(*(self.run_task(t) for t in range(spec.tasks)))
        finally:
            for m in monitors:
                m.cancel()
            self.write_stats()
            await self.record(self.new_id(), "close", {}, self.rt.close)
            self.history.close()
        return 0


def _writer_of(state: Any) -> str | None:
    """The op id a checkpoint state was written by (a marker when unreadable)."""
    if not state:
        return None
    try:
        return str(json.loads(state)["w"])
    except (ValueError, KeyError, TypeError):
        return f"<unreadable {str(state)[:40]!r}>"


MUTATIONS = ("shared-delivery-claim", "unfenced-replay", "random-athena-keys")
"""Bugs a worker can re-introduce on purpose, to show the checker catches them."""


def apply_mutation(name: str) -> None:
    """Break the library in this process on purpose (``--mutate``).

    * ``shared-delivery-claim``: every outbox delivery claim succeeds, so several
      deliverers (in this process and others) replay one outbox at once. Alone it
      is masked by the monotonic, idempotent replay (that is the point of it);
    * ``unfenced-replay``: the shared claim *and* replays written like live saves
      (no stamp check, a fresh op id each time): the bug pair that let an older
      queued checkpoint land over a newer one;
    * ``random-athena-keys``: a fresh idempotency key per Athena event, so a
      re-logged turn reaches Athena again.
    """
    if name not in MUTATIONS:
        raise ValueError(f"unknown mutation {name!r}; known: {', '.join(MUTATIONS)}")
    if name == "random-athena-keys":

        def random_key(self: KeySpace, *args: Any, **kwargs: Any) -> str:
            return uuid.uuid4().hex

        KeySpace.athena_event_key = random_key  # type: ignore[method-assign]
        return
    if name == "unfenced-replay":
        save = CheckpointStore.save_validated

        async def unfenced(self: CheckpointStore, state: str, **kwargs: Any) -> int | None:
            kwargs.update(replay=False, op_id=None)
            return await save(self, state, **kwargs)

        CheckpointStore.save_validated = unfenced  # type: ignore[method-assign]
    if not hasattr(Outbox, "try_claim_delivery"):
        raise RuntimeError("Outbox.try_claim_delivery is gone: update this mutation")

    def claim(self: Outbox, *args: Any, **kwargs: Any) -> bool:
        return True

    def release(self: Outbox, *args: Any, **kwargs: Any) -> None:
        return None

    Outbox.try_claim_delivery = claim  # type: ignore[method-assign]
    Outbox.release_delivery = release  # type: ignore[method-assign]


def worker_main(spec_path: Path) -> int:
    """Entry point of a worker process."""
    logging.basicConfig(level=logging.WARNING)
    spec = WorkerSpec.load(spec_path)
    if spec.mutation:
        apply_mutation(spec.mutation)
    return asyncio.run(Worker(spec).run())
