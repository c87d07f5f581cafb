"""Crash harness: SIGKILL an agent loop (and Redis itself) at random points, then verify.

The parent starts its own ``redis-server`` (AOF, ``appendfsync always``, a
loopback port and a private directory) and a long-lived child process that runs
an agent loop against it and a local blob root. The child prints one line per
acknowledged operation and flushes it before going on:

* ``ACK <turn>`` after ``log_turn`` returned;
* ``TRYCKPT <turn>`` / ``CKPT <turn>`` around ``save_checkpoint``;
* ``TRYSUM <turn>`` / ``SUM <turn>`` around ``save_summary``;
* ``REHY <json>`` once at start, with what ``rehydrate_bundle`` returned.

The parent kills the child (or ``redis-server``, or both) with SIGKILL after a
random delay, sometimes tears the scratchpad's tail by hand (as a write cut by
a power loss would), restarts what it killed, and at the end verifies:

* every acknowledged turn is in the ledger exactly once, in order, and whole;
* the scratchpad parses: exactly the torn lines are skipped, every
  acknowledged turn is present after them;
* the checkpoint is the last acknowledged one (or one tried after it);
* the summary is whole (its checksum matches) and is the last acknowledged one
  (or one tried after it);
* the outboxes are drained with nothing dropped.

Run ``python -m tests.harness.crash --kills 25 --seed 1 [--soak] [--json]``;
``run_crash_harness(CrashConfig(...))`` does the same from Python.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jarvismem.errors import BackendUnavailableError, BlobError, BlobNotFoundError
from jarvismem.keys import KeySpace
from jarvismem.records import encode_record, parse_records, turn_record
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings

# The private redis-server moved to its own module; crash's names stay importable.
from tests.harness.harness_settings import harness_settings
from tests.harness.redis_server import RedisServerProcess

WORKFLOW = "crash-wf"
STEP = "s1"
AGENT = "a1"
NAMESPACE = "crash"
CHECKPOINT_EVERY = 3
SUMMARY_EVERY = 7


# --- deterministic content, so a re-logged turn is the same turn ------------------------


def turn_fields(turn: int) -> tuple[str, str, str]:
    """thought, action, result of ``turn``."""
    return (f"thinking about step {turn}", f"act-{turn}", f"result of turn {turn}")


def summary_text(turn: int) -> str:
    """A recognisable, self-checking summary: a partial one fails its checksum."""
    body = " ".join(f"w{(turn * 7919 + i * 104729) % 100003}" for i in range(300))
    digest = hashlib.sha256(body.encode()).hexdigest()
    return f"SUMMARY {turn} | {body} | END sha256:{digest}"


def parse_summary(text: str) -> int | None:
    """The turn of a whole summary, or None when it is not a whole one."""
    try:
        head, body, tail = text.split(" | ")
        turn = int(head.removeprefix("SUMMARY "))
        digest = tail.removeprefix("END sha256:")
    except ValueError:
        return None
    if hashlib.sha256(body.encode()).hexdigest() != digest or text != summary_text(turn):
        return None
    return turn


def checkpoint_state(turn: int) -> str:
    """The checkpoint saved after ``turn``."""
    return json.dumps({"turn": turn, "next": turn + 1, "check": f"ckpt-{turn}"})


# --- the child: a long-lived agent loop ---------------------------------------------------


def _child_settings(redis_url: str, root: Path) -> Settings:
    return harness_settings(
        redis_url,
        blob_root=root / "blobs",
        outbox_path=root / "outbox",
        namespace=NAMESPACE,
        redis_connect_retries=40,
    )


def _emit(line: str) -> None:
    # One small write to a pipe the parent drains: the ack is out before the
    # next turn starts, which is the whole point (a few bytes never block here).
    os.write(1, (line + "\n").encode())


async def _child_loop(redis_url: str, root: Path, start_turn: int) -> None:
    rt = await MemoryRuntime.from_env(_child_settings(redis_url, root))
    mem = rt.memory(WORKFLOW, STEP, AGENT)
    bundle = await mem.rehydrate_bundle(ledger_tail=5)
    summary = bundle["ltm_summary"]
    ckpt = bundle["checkpoint"]
    _emit(
        "REHY "
        + json.dumps(
            {
                "checkpoint": json.loads(ckpt)["turn"] if ckpt else None,
                "summary": parse_summary(summary) if summary else None,
                "summary_whole": summary is None or parse_summary(summary) is not None,
                "recent": [t.get("turn_id") for t in bundle["recent_turns"]],
                "degraded": sorted(bundle["degraded"]),
            }
        )
    )
    assert mem.ltm is not None
    turn = start_turn
    while True:
        thought, action, result = turn_fields(turn)
        await mem.log_turn(turn, thought, action, result, tokens=turn % 97)
        _emit(f"ACK {turn}")
        if turn % CHECKPOINT_EVERY == 0:
            _emit(f"TRYCKPT {turn}")
            await mem.save_checkpoint(checkpoint_state(turn))
            _emit(f"CKPT {turn}")
        if turn % SUMMARY_EVERY == 0:
            _emit(f"TRYSUM {turn}")
            try:
                await mem.ltm.save_summary(summary_text(turn))
            except (BackendUnavailableError, BlobError):
                _emit(f"SUMFAIL {turn}")
            else:
                _emit(f"SUM {turn}")
        turn += 1


# --- the parent -------------------------------------------------------------------------------


@dataclass
class CrashConfig:
    """What to run. ``kills``: SIGKILLs in total; ``seed``: makes the schedule repeatable;
    ``redis_kill_ratio``: share of kills aimed at redis-server (half of those kill the
    child too); ``max_delay``: longest run before a kill, s; ``max_outage``: longest
    time redis-server stays dead, s; ``torn_ratio``: share of child kills after which
    the scratchpad tail is torn by hand; ``workdir``: kept when given, else a temp dir.
    """

    kills: int = 25
    seed: int = 0
    redis_kill_ratio: float = 0.3
    max_delay: float = 0.6
    max_outage: float = 0.5
    torn_ratio: float = 0.3
    workdir: Path | None = None


@dataclass
class CrashReport:
    """Figures of one run; ``ok`` when nothing acknowledged was lost or damaged."""

    kills: int = 0
    child_kills: int = 0
    redis_kills: int = 0
    startup_kills: int = 0
    turns_acked: int = 0
    checkpoints_acked: int = 0
    summaries_acked: int = 0
    summaries_failed: int = 0
    torn_tails_injected: int = 0
    rehydrate_checks: int = 0
    rehydrate_degraded: int = 0
    ledger_entries: int = 0
    unacked_in_flight: int = 0
    lost_turns: int = 0
    duplicate_turns: int = 0
    out_of_order: int = 0
    damaged_turns: int = 0
    scratchpad_skipped_lines: int = 0
    scratchpad_missing_turns: int = 0
    scratchpad_damaged: int = 0
    checkpoint_ok: bool = False
    summary_ok: bool = False
    outbox_pending: int = 0
    outbox_dropped: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


class _Acks:
    """What the children acknowledged, as read from their stdout."""

    def __init__(self) -> None:
        self.turns: list[int] = []
        self.ckpt_acked: int | None = None
        self.ckpt_tried: set[int] = set()
        self.sum_acked: int | None = None
        self.sum_tried: set[int] = set()
        self.sum_failed = 0
        self.checkpoints = 0
        self.summaries = 0

    def feed(self, line: str) -> dict[str, Any] | None:
        word, _, rest = line.strip().partition(" ")
        if word == "ACK":
            self.turns.append(int(rest))
        elif word == "TRYCKPT":
            self.ckpt_tried.add(int(rest))
        elif word == "CKPT":
            self.ckpt_acked = int(rest)
            self.ckpt_tried = set()
            self.checkpoints += 1
        elif word == "TRYSUM":
            self.sum_tried.add(int(rest))
        elif word == "SUM":
            self.sum_acked = int(rest)
            self.sum_tried = set()
            self.summaries += 1
        elif word == "SUMFAIL":
            self.sum_failed += 1
        elif word == "REHY":
            value: dict[str, Any] = json.loads(rest)
            return value
        return None

    @property
    def last_turn(self) -> int:
        return max(self.turns, default=0)

    def valid_checkpoints(self) -> set[int | None]:
        return {self.ckpt_acked, *self.ckpt_tried}

    def valid_summaries(self) -> set[int | None]:
        return {self.sum_acked, *self.sum_tried}


class _Child:
    """One child process and the thread reading its acks."""

    def __init__(self, redis_url: str, root: Path, start_turn: int, log: Any) -> None:
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.harness.crash",
                "--child",
                "--redis-url",
                redis_url,
                "--root",
                str(root),
                "--start-turn",
                str(start_turn),
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=root,
            env=env,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            if line:
                self.lines.append(line)
                if line.startswith("REHY "):
                    self.ready.set()
        self.ready.set()

    def kill(self) -> list[str]:
        """SIGKILL, wait, and return every line it printed."""
        self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return self.lines


def _check_rehydrate(rehy: dict[str, Any], acks: _Acks, report: CrashReport) -> None:
    report.rehydrate_checks += 1
    if rehy["degraded"]:
        report.rehydrate_degraded += 1
        return
    if not rehy["summary_whole"]:
        report.problems.append("rehydrate: summary not whole")
    if rehy["checkpoint"] not in acks.valid_checkpoints():
        report.problems.append(
            f"rehydrate: checkpoint {rehy['checkpoint']} not in {acks.valid_checkpoints()}"
        )
    if rehy["summary"] not in acks.valid_summaries():
        report.problems.append(
            f"rehydrate: summary {rehy['summary']} not in {acks.valid_summaries()}"
        )


def _tear_tail(root: Path, rng: random.Random) -> bool:
    """Append a cut-off record to the scratchpad, as a torn write would leave it."""
    path = root / "blobs" / KeySpace(NAMESPACE).scratchpad(WORKFLOW, STEP, AGENT)
    if not path.exists():
        return False
    record = encode_record(turn_record("torn", {"thought": "x" * 200}, 0.0))
    cut = rng.randrange(2, len(record) - 2)
    with path.open("ab") as fh:
        fh.write(record[:cut])
    return True


async def verify(redis_url: str, root: Path, acks: _Acks, report: CrashReport) -> None:
    """Replay what the outboxes hold, then check every tier against the acks."""
    rt = await MemoryRuntime.from_env(_child_settings(redis_url, root))
    try:
        mem = rt.memory(WORKFLOW, STEP, AGENT)
        wf = rt.workflow(WORKFLOW)
        for writer in (wf.redis_writer, wf.blob_writer):
            assert writer is not None
            await writer.flush(timeout=30.0)
            report.outbox_pending += len(writer.outbox)
            report.outbox_dropped += writer.outbox.dropped
        if report.outbox_pending:
            report.problems.append(f"{report.outbox_pending} outbox record(s) not replayed")
        if report.outbox_dropped:
            report.problems.append(f"{report.outbox_dropped} outbox record(s) dropped")

        # Ledger: every ack exactly once, in order, whole.
        assert mem.episodic is not None
        entries = await mem.episodic.full_history()
        report.ledger_entries = len(entries)
        ids = [int(e["turn_id"]) for e in entries]
        acked = set(acks.turns)
        report.lost_turns = len(acked - set(ids))
        report.duplicate_turns = len(ids) - len(set(ids))
        report.out_of_order = sum(1 for a, b in itertools.pairwise(ids) if b <= a)
        # A turn may reach the ledger and its process die before acknowledging
        # it. Mid-run the next child re-runs it (then it is acked); only the turn
        # in flight at the final kill can stay unacknowledged. Anything else is
        # a turn nobody logged: a problem.
        unacked = set(ids) - acked
        report.unacked_in_flight = len(unacked)
        last = max(acked, default=0)
        stray = sorted(unacked - {last + 1})[:5]
        if stray:
            report.problems.append(f"ledger: unacknowledged turns besides the last: {stray}")
        report.damaged_turns = sum(
            1
            for e in entries
            if (e["thought"], e["action"], e["result"]) != turn_fields(int(e["turn_id"]))
        )
        for name in ("lost_turns", "duplicate_turns", "out_of_order", "damaged_turns"):
            if getattr(report, name):
                report.problems.append(f"ledger: {name} = {getattr(report, name)}")

        # Scratchpad: the torn lines are skipped, nothing else is, every ack is there.
        assert mem.working is not None
        try:
            raw = await rt.blob.read(mem.working.path)  # type: ignore[union-attr]
        except BlobNotFoundError:
            raw = b""
        lines = [ln for ln in raw.split(b"\n") if ln.strip()]
        records = parse_records(raw, source="crash-verify")
        report.scratchpad_skipped_lines = len(lines) - len(records)
        seen: set[int] = set()
        for rec in records:
            turn = int(rec["turn_id"])
            data = rec["data"]
            if (data["thought"], data["action"], data["result"]) != turn_fields(turn):
                report.scratchpad_damaged += 1
            seen.add(turn)
        report.scratchpad_missing_turns = len(acked - seen)
        if report.scratchpad_skipped_lines != report.torn_tails_injected:
            report.problems.append(
                f"scratchpad: {report.scratchpad_skipped_lines} unreadable line(s), "
                f"{report.torn_tails_injected} torn by hand"
            )
        if report.scratchpad_missing_turns or report.scratchpad_damaged:
            report.problems.append(
                f"scratchpad: {report.scratchpad_missing_turns} acked turn(s) missing, "
                f"{report.scratchpad_damaged} damaged"
            )

        # Checkpoint: the last acknowledged one (or one tried after it).
        state = await mem.load_checkpoint()
        ckpt = json.loads(state)["turn"] if state else None
        report.checkpoint_ok = ckpt in acks.valid_checkpoints() and (
            ckpt is None or state == checkpoint_state(ckpt)
        )
        if not report.checkpoint_ok:
            report.problems.append(f"checkpoint {ckpt} not in {acks.valid_checkpoints()}")

        # Summary: whole, and the last acknowledged one (or one tried after it).
        assert mem.ltm is not None
        text = await mem.ltm.load_summary()
        turn_of = parse_summary(text) if text is not None else None
        report.summary_ok = (text is None or turn_of is not None) and (
            turn_of in acks.valid_summaries()
        )
        if not report.summary_ok:
            report.problems.append(
                f"summary {'damaged' if text and turn_of is None else turn_of} "
                f"not in {acks.valid_summaries()}"
            )
    finally:
        await rt.close()


def run_crash_harness(config: CrashConfig) -> CrashReport:
    """Run the kill/restart schedule of ``config`` and verify; returns the figures."""
    rng = random.Random(config.seed)
    report = CrashReport()
    started = time.monotonic()
    owned = config.workdir is None
    root = config.workdir or Path(tempfile.mkdtemp(prefix="jarvismem-crash-"))
    root.mkdir(parents=True, exist_ok=True)
    redis = RedisServerProcess(root / "redis", appendfsync="always")
    acks = _Acks()
    log = (root / "children.log").open("ab")
    child: _Child | None = None
    try:
        redis.start()

        def collect(c: _Child) -> None:
            rehy_checked = False
            for line in c.kill():
                rehy = acks.feed(line)
                if rehy is not None and not rehy_checked:
                    rehy_checked = True
                    _check_rehydrate(rehy, acks, report)

        # Acks must be interpreted in order across children, so each child's lines
        # are fed only after it dies; its REHY is checked against what came before.
        while report.kills < config.kills:
            if child is None:
                child = _Child(redis.url, root, acks.last_turn + 1, log)
                if rng.random() < 0.1:
                    # Sometimes kill during start-up (imports, connect, rehydrate).
                    time.sleep(rng.uniform(0.0, 0.4))
                    collect(child)
                    child = None
                    report.kills += 1
                    report.child_kills += 1
                    report.startup_kills += 1
                    continue
                if not child.ready.wait(timeout=60):
                    report.problems.append("child did not become ready in 60 s")
                    break
            time.sleep(rng.uniform(0.02, config.max_delay))
            if rng.random() < config.redis_kill_ratio:
                redis.kill()
                report.kills += 1
                report.redis_kills += 1
                time.sleep(rng.uniform(0.0, config.max_outage))
                if rng.random() < 0.5:
                    # The child dies during the outage too: its outbox must survive.
                    collect(child)
                    child = None
                    report.kills += 1
                    report.child_kills += 1
                redis.start()
            else:
                collect(child)
                child = None
                report.kills += 1
                report.child_kills += 1
                if rng.random() < config.torn_ratio and _tear_tail(root, rng):
                    report.torn_tails_injected += 1
        if child is not None:
            collect(child)
            child = None
        redis.start()
        report.turns_acked = len(set(acks.turns))
        report.checkpoints_acked = acks.checkpoints
        report.summaries_acked = acks.summaries
        report.summaries_failed = acks.sum_failed
        if len(set(acks.turns)) == 0:
            report.problems.append("no turn was ever acknowledged")
        asyncio.run(verify(redis.url, root, acks, report))
    finally:
        if child is not None:
            child.kill()
        log.close()
        redis.kill()
        if owned and report.ok:
            shutil.rmtree(root, ignore_errors=True)
        elif not report.ok:
            report.problems.append(f"work directory kept: {root}")
    report.seconds = round(time.monotonic() - started, 2)
    return report


def format_report(report: CrashReport) -> str:
    """Human-readable figures, one per line."""
    d = report.as_dict()
    problems = d.pop("problems")
    lines = [f"{k:28} {v}" for k, v in d.items()]
    lines += [f"PROBLEM: {p}" for p in problems]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: run the harness (or, with ``--child``, be the agent loop). Exit 1 on a problem."""
    parser = argparse.ArgumentParser(prog="python -m tests.harness.crash")
    parser.add_argument("--kills", type=int, default=None, help="SIGKILLs (default 25, soak 2000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--soak", action="store_true", help="thousands of kills, longer runs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--workdir", type=Path, default=None, help="keep files here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--start-turn", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        asyncio.run(_child_loop(args.redis_url, args.root, args.start_turn))
        return 0
    kills = args.kills if args.kills is not None else (2000 if args.soak else 25)
    config = CrashConfig(kills=kills, seed=args.seed, workdir=args.workdir)
    if args.soak:
        config.max_delay = 1.5
        config.max_outage = 2.0
    report = run_crash_harness(config)
    print(json.dumps(report.as_dict(), indent=2) if args.json else format_report(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
