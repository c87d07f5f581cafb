"""The verifier: a recorded history against what the backends hold at the end.

Pure functions over plain data, so each invariant can be shown to fail on a
hand-made history. Operations are the merged records of
:func:`~tests.harness.checker.history.completed`: ``kind``, ``status``
(ok / fail / info), ``inv`` and ``done`` (ns; ``done`` None when unknown) and
the kind's own fields. Writes to a register carry ``reg`` and ``val`` (the
writer's op id, ``None`` for a delete); reads carry ``reg``, ``read`` and the
``val`` they returned.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.harness.checker.history import FAIL, INFO, OK, Histogram

TURN_KINDS = ("log_turn", "relog")
EXAMPLES_PER_INVARIANT = 3
CHECKER_TIMEOUT = "CheckerTimeout"
_TOOK = re.compile(r"took ([0-9.]+) seconds")
_NUMBERS = re.compile(r"[0-9a-f]{6,}|[0-9]+")
# Dead-letter reasons that name a passing condition, not a refusal for good: a
# write refused for one of these had to stay queued. Judged from the reason
# text itself, not with the library's classifier, which is what is under test.
TRANSIENT_REASON = re.compile(
    r"\b(OOM|BUSY|LOADING|MASTERDOWN|READONLY|NOREPLICAS|TRYAGAIN|CLUSTERDOWN)\b"
    r"|Connection\w*Error|Timeout\w*|BusyLoadingError|ReadOnlyError|OutOfMemoryError"
    r"|BackendUnavailableError|Connection (refused|reset|closed)|Errno (28|30)\b"
)

INVARIANTS = (
    "lost_turn",
    "duplicate_turn",
    "out_of_order",
    "invented_turn",
    "damaged_turn",
    "stale_final",
    "lost_write",
    "stale_read",
    "failed_write_visible",
    "invented_value",
    "lost_task",
    "duplicate_task",
    "invented_task",
    "resurrected_task",
    "stale_summary",
    "cross_tenant",
    "athena_duplicate",
    "outbox_not_drained",
    "duplicate_revision",
    "transient_dead_letter",
    "raw_exception",
    "log_turn_raised",
    "hung_op",
    "loop_lag",
)


def turn_text(tenant: str, wf: str, step: str, agent: str, turn: int) -> tuple[str, str, str]:
    """thought, action, result of a turn: deterministic, so a re-log is the same turn,
    and the thought names its tenant and place (what Athena events are matched by)."""
    return (f"T|{tenant}|{wf}|{step}|{agent}|{turn}", f"act {turn}", f"res {turn}")


def parse_thought(text: str) -> tuple[str, str, str, str, int] | None:
    parts = text.split("|")
    if len(parts) != 6 or parts[0] != "T":
        return None
    try:
        return parts[1], parts[2], parts[3], parts[4], int(parts[5])
    except ValueError:
        return None


@dataclass
class DeadLetter:
    """One line of an outbox's ``.dead`` file: where, why, and the turns it carried."""

    file: str
    reason: str
    turns: list[tuple[str, str, str, int]] = field(default_factory=list)
    """(workflow, step, agent, turn) of every turn thought found in the record."""


def _thoughts(value: Any) -> Iterator[tuple[str, str, str, str, int]]:
    """Every turn thought inside a decoded record (queued ledger args are JSON strings)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _thoughts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _thoughts(item)
    elif isinstance(value, str):
        parsed = parse_thought(value)
        if parsed is None and value.startswith('"'):
            try:
                inner = json.loads(value)
            except ValueError:
                inner = None
            parsed = parse_thought(inner) if isinstance(inner, str) else None
        if parsed is not None:
            yield parsed


def parse_dead_letter(file: str, line: bytes) -> DeadLetter | None:
    """A ``.dead`` file line (``{"seq", "reason", "at", "rec"}``); None when unreadable.

    The record of a Redis turn holds the thought among its ledger fields, an
    Athena record in its event: either way the thought names the turn.
    """
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    turns = sorted(
        {(wf, step, agent, turn) for _, wf, step, agent, turn in _thoughts(data.get("rec"))}
    )
    return DeadLetter(file=file, reason=str(data.get("reason", "")), turns=turns)


@dataclass
class Observed:
    """What the backends hold after the final recovery.

    ``ledger``: workflow -> entries in stream order (``turn_id``, ``step_id``,
    ``agent_id``, ``thought``); ``registers``: register -> value id (None when
    absent); ``tasks``: space -> task texts in order; ``summaries``: workflow ->
    the stored summary's ``to_id``; ``athena_events``: (session tenant, thought
    content) of each delivered thought event; ``outbox_pending``: file -> records;
    ``dead_letters``: every line of every outbox's ``.dead`` file.
    """

    ledger: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    registers: dict[str, str | None] = field(default_factory=dict)
    tasks: dict[str, list[str]] = field(default_factory=dict)
    summaries: dict[str, str | None] = field(default_factory=dict)
    athena_events: list[tuple[str, str]] = field(default_factory=list)
    outbox_pending: dict[str, int] = field(default_factory=dict)
    dead_letters: list[DeadLetter] = field(default_factory=list)


@dataclass
class Verdict:
    """Violations by invariant with the first examples, plus figures."""

    violations: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    figures: dict[str, Any] = field(default_factory=dict)

    def add(self, invariant: str, example: str, n: int = 1) -> None:
        self.violations[invariant] += n
        if len(self.examples[invariant]) < EXAMPLES_PER_INVARIANT:
            self.examples[invariant].append(example)

    @property
    def total(self) -> int:
        return sum(self.violations.values())


def _stream_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def _never(op: dict[str, Any]) -> float:
    """When an op finished (ns); an unknown outcome may take effect at any later time."""
    done = op.get("done")
    return float("inf") if done is None else float(done)


def check_errors(ops: list[dict[str, Any]], v: Verdict) -> None:
    """No raw (non-jarvismem) exception, no log_turn exception, no op hung past the guard.

    ``log_turn`` may raise only for bad input (a jarvismem input error, which
    the workload never causes): anything else it raises (a backend outage, OOM,
    a full or read-only outbox disk, raw or translated) is ``log_turn_raised``,
    counted once (not also as ``raw_exception``).
    """
    for op in ops:
        err = op.get("err")
        if not err:
            continue
        where = f"{op['kind']} {op['id']}: {err}: {op.get('msg', '')}"[:300]
        if err == CHECKER_TIMEOUT:
            v.add("hung_op", where)
        elif op["kind"] in TURN_KINDS:
            if not op.get("input"):
                v.add("log_turn_raised", where)
        elif not op.get("jm"):
            v.add("raw_exception", where)


def check_revisions(ops: list[dict[str, Any]], v: Verdict) -> None:
    """No two different saves of one checkpoint acknowledged with one revision.

    An acknowledged revision is an int returned by ``save_checkpoint``; a save
    that returned None (queued, or skipped because a newer save was stored)
    acknowledges none. Each save's state is unique to its op id.
    """
    by_rev: dict[tuple[str, int], list[str]] = defaultdict(list)
    for op in ops:
        rev = op.get("rev")
        if op["kind"] != "save_ckpt" or op["status"] != OK:
            continue
        if isinstance(rev, int) and not isinstance(rev, bool):
            by_rev[(op["reg"], rev)].append(op["id"])
    for (reg, rev), ids in sorted(by_rev.items()):
        if len(set(ids)) > 1:
            v.add(
                "duplicate_revision",
                f"{reg}: revision {rev} returned to saves {', '.join(sorted(set(ids))[:4])}",
                len(set(ids)) - 1,
            )


def check_dead_letters(ops: list[dict[str, Any]], obs: Observed, v: Verdict) -> None:
    """No acknowledged turn dead-lettered for a transient condition (it had to stay queued)."""
    acked: set[tuple[str, str, str, int]] = set()
    for op in ops:
        if op["kind"] in TURN_KINDS and op["status"] == OK:
            acked.add((op["wf"], op["step"], op["agent"], int(op["turn"])))
    transient = 0
    for dead in obs.dead_letters:
        if not TRANSIENT_REASON.search(dead.reason):
            continue
        transient += 1
        for turn in dead.turns:
            if turn in acked:
                v.add(
                    "transient_dead_letter",
                    f"{dead.file}: acknowledged turn {turn} dead-lettered: {dead.reason[:160]}",
                )
    v.figures["dead_letters"] = len(obs.dead_letters)
    v.figures["dead_letters_transient_reason"] = transient
    # What the rest were refused for (numbers and ids cut out so alike ones group).
    reasons = Counter(_NUMBERS.sub("#", d.reason)[:120] for d in obs.dead_letters)
    v.figures["dead_letter_reasons"] = [f"{n} x {why}" for why, n in reasons.most_common(5)]


def check_turns(ops: list[dict[str, Any]], obs: Observed, v: Verdict) -> None:
    """Every acknowledged turn exactly once, in per-agent order, nothing invented."""
    acked: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    invoked: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    tenant_of: dict[tuple[str, str, str], str] = {}
    for op in ops:
        if op["kind"] not in TURN_KINDS:
            continue
        key = (op["wf"], op["step"], op["agent"])
        invoked[key].add(int(op["turn"]))
        tenant_of[key] = op.get("tenant", "")
        if op["status"] == OK:
            acked[key].add(int(op["turn"]))
    stored: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for wf, entries in obs.ledger.items():
        for e in entries:
            key = (wf, str(e["step_id"]), str(e["agent_id"]))
            turn = int(e["turn_id"])
            stored[key].append(turn)
            if turn not in invoked.get(key, ()):
                v.add("invented_turn", f"{key} turn {turn} in the ledger, never logged")
                continue
            expected = turn_text(tenant_of[key], *key, turn)[0]
            if e.get("thought") != expected:
                v.add("damaged_turn", f"{key} turn {turn}: {str(e.get('thought'))[:80]!r}")
    for key, acked_turns in acked.items():
        present = Counter(stored.get(key, []))
        for turn in sorted(acked_turns):
            if present[turn] == 0:
                v.add("lost_turn", f"{key} acknowledged turn {turn} not in the ledger")
    for key, turns in stored.items():
        for turn, n in Counter(turns).items():
            if n > 1:
                v.add("duplicate_turn", f"{key} turn {turn} stored {n} times", n - 1)
        # First occurrences only: a duplicate is counted above, not as disorder too.
        ordered = [t for t in dict.fromkeys(turns) if t in acked.get(key, ())]
        for a, b in itertools.pairwise(ordered):
            if b <= a:
                v.add("out_of_order", f"{key} acknowledged turn {b} stored after turn {a}")


def check_registers(ops: list[dict[str, Any]], obs: Observed, v: Verdict) -> None:
    """No acknowledged value replaced by an older one; no stale read; nothing invented.

    A write X acknowledged before an acknowledged write Y was invoked is superseded:
    it may be neither the final value nor what a read started after Y's ack returns.
    """
    writes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_val: dict[str, dict[str, Any]] = {}
    reads: list[dict[str, Any]] = []
    for op in ops:
        if "reg" not in op:
            continue
        if op.get("read"):
            if op["status"] == OK:
                reads.append(op)
            continue
        for reg in op.get("regs") or [op["reg"]]:
            writes[reg].append(op)
        if op.get("val") is not None:
            by_val[op["val"]] = op

    # Acked writes of each register sorted by invoke time, with the earliest
    # completion among those invoked at or after each position: "is there an
    # acked write invoked after t and acked before b" is then one bisect. One
    # index per (register, outbox) a read may come from (None: every write).
    Index = tuple[list[float], list[dict[str, Any]], list[float]]
    indexes: dict[tuple[str, str | None], Index] = {}

    def index(reg: str, box: str | None) -> Index:
        found = indexes.get((reg, box))
        if found is None:
            ok = sorted(
                (w for w in writes.get(reg, []) if w["status"] == OK and _visible(w, box)),
                key=lambda w: w["inv"],
            )
            suffix = [float("inf")] * (len(ok) + 1)
            for i in range(len(ok) - 1, -1, -1):
                suffix[i] = min(suffix[i + 1], ok[i]["done"])
            found = indexes[(reg, box)] = ([w["inv"] for w in ok], ok, suffix)
        return found

    def superseded(
        x: dict[str, Any], reg: str, before: float | None, box: str | None = None
    ) -> dict[str, Any] | None:
        """An acked write of ``reg`` invoked after ``x`` was acked (and acked before
        ``before``), visible from outbox ``box``."""
        acked_inv, ok, min_done_after = index(reg, box)
        i = bisect.bisect_right(acked_inv, x["done"])
        limit = float("inf") if before is None else before
        if i >= len(acked_inv) or min_done_after[i] >= limit:
            return None
        return next(ok[j] for j in range(i, len(ok)) if ok[j]["done"] < limit)

    def check_value(
        reg: str, val: str | None, what: str, before: float | None, box: str | None = None
    ) -> None:
        if val is None:
            return
        x = by_val.get(val)
        if x is None or reg not in (x.get("regs") or [x["reg"]]):
            v.add("invented_value", f"{reg}: {what} {val!r} was never written there")
            return
        if x["status"] == FAIL:
            v.add("failed_write_visible", f"{reg}: {what} {val} whose save was refused")
            return
        if x["status"] != OK:
            return
        y = superseded(x, reg, before, box)
        if y is not None:
            inv = "stale_read" if before is not None else "stale_final"
            queued = (
                " (queued: returned None)"
                if y["kind"] == "save_ckpt" and y.get("rev") is None
                else ""
            )
            v.add(
                inv,
                f"{reg}: {what} {val} although {y['kind']} {y['id']}{queued} was acked after it",
            )

    for reg in sorted(set(writes) | set(obs.registers)):
        val = obs.registers.get(reg)
        check_value(reg, val, "final value", None)
        if val is None:
            deletes = [d for d in writes[reg] if d.get("val") is None and d["status"] != FAIL]
            for x in writes[reg]:
                if x["status"] != OK or x.get("val") is None:
                    continue
                if not any(_never(d) > x["inv"] for d in deletes):
                    v.add("lost_write", f"{reg}: acknowledged {x['kind']} {x['id']} is gone")
                    break
    # A read that found nothing although a value was acknowledged before it began
    # (e.g. Redis stalled): counted as a figure, not judged stale.
    first_value_ack = {
        reg: min((w["done"] for w in ok if w.get("val") is not None), default=float("inf"))
        for reg, ok in ((reg, index(reg, None)[1]) for reg in writes)
    }
    empty = 0
    for r in reads:
        if r.get("val") is None:
            empty += r["inv"] > first_value_ack.get(r["reg"], float("inf"))
            continue
        what = f"{r['kind']} {r['id']} read"
        check_value(r["reg"], r.get("val"), what, r["inv"], r.get("box"))
    v.figures["empty_reads_after_ack"] = empty


def _visible(write: dict[str, Any], box: str | None) -> bool:
    """Whether a read through outbox ``box`` must see acknowledged ``write`` once acked.

    A save that returned no revision was queued in its writer's outbox (or
    skipped behind a newer save): until replayed, only reads through that same
    outbox (same folder, same Redis address) merge it. Outboxes are per machine
    and address, so a read from another one may miss it; every write counts for
    the final state (after the recovery replayed every outbox) and when ``box``
    is None (histories without outbox names: one shared outbox).
    """
    if box is None or write["kind"] != "save_ckpt" or write.get("rev") is not None:
        return True
    return write.get("box") in (None, box)


def check_tasks(ops: list[dict[str, Any]], obs: Observed, v: Verdict) -> None:
    """Every acknowledged task present once unless a removal of it may have applied."""
    invoked: dict[str, set[str]] = defaultdict(set)
    acked: dict[str, set[str]] = defaultdict(set)
    removed_maybe: dict[str, set[str]] = defaultdict(set)
    removed_ok: dict[str, set[str]] = defaultdict(set)
    for op in ops:
        if op["kind"] == "tasks_add":
            invoked[op["space"]].add(op["text"])
            if op["status"] == OK:
                acked[op["space"]].add(op["text"])
        elif op["kind"] == "tasks_remove" and op["status"] != FAIL:
            removed_maybe[op["space"]].add(op["text"])
            if op["status"] == OK:
                removed_ok[op["space"]].add(op["text"])
    for space in sorted(set(invoked) | set(obs.tasks)):
        present = Counter(obs.tasks.get(space, []))
        for text, n in present.items():
            if text not in invoked[space]:
                v.add("invented_task", f"{space}: task {text!r} never added")
            elif n > 1:
                v.add("duplicate_task", f"{space}: task {text!r} present {n} times", n - 1)
            if text in removed_ok[space]:
                v.add("resurrected_task", f"{space}: task {text!r} back after its removal")
        for text in sorted(acked[space] - removed_maybe[space]):
            if present[text] == 0:
                v.add("lost_task", f"{space}: acknowledged task {text!r} is gone")


def check_summaries(ops: list[dict[str, Any]], obs: Observed, v: Verdict) -> None:
    """The stored summary covers at least what every acknowledged compaction saved."""
    for op in ops:
        if op["kind"] != "compact" or op["status"] != OK or not op.get("to_id"):
            continue
        final = obs.summaries.get(op["wf"])
        if final is None or _stream_key(final) < _stream_key(op["to_id"]):
            v.add(
                "stale_summary",
                f"{op['wf']}: stored summary up to {final}, compaction {op['id']} "
                f"acknowledged one up to {op['to_id']}",
            )


def check_athena(
    obs: Observed,
    v: Verdict,
    *,
    crash_duplicates: int = 0,
    logged: Counter[tuple[str, str, str, str, int]] | None = None,
) -> None:
    """No event in another tenant's session; each turn's event delivered once.

    Up to ``crash_duplicates`` extra deliveries are explained by the faults
    that make delivery at-least-once; only the excess is a violation.
    ``logged`` (given when Redis, which holds the delivery claims, was down,
    out of memory or out of reach during the run): how many times each turn was
    logged or re-logged. While claims cannot be taken every queued copy of a turn
    is sent (docs/reliability.md, Athena tier), so a turn delivered up to that
    many times is explained; only deliveries beyond it count against
    ``crash_duplicates``.
    """
    seen: Counter[tuple[str, str, str, str, int]] = Counter()
    for session_tenant, content in obs.athena_events:
        parsed = parse_thought(content)
        if parsed is None:
            continue
        if parsed[0] != session_tenant:
            v.add("cross_tenant", f"turn of tenant {parsed[0]} in a {session_tenant} session")
        seen[parsed] += 1
    dups = {k: n for k, n in seen.items() if n > 1}
    extra = sum(n - 1 for n in dups.values())
    relogged = 0
    if logged is not None:
        # Copies re-logged while claims were out of reach: one delivery each, explained.
        relogged = sum(min(n, max(1, logged[k])) - 1 for k, n in dups.items())
    v.figures["athena_events"] = sum(seen.values())
    v.figures["athena_duplicate_events"] = extra
    v.figures["athena_duplicates_of_relogs_without_claims"] = relogged
    v.figures["athena_duplicates_explained_by_faults"] = relogged + min(
        extra - relogged, crash_duplicates
    )
    extra -= relogged
    if extra > crash_duplicates:
        for key, n in sorted(dups.items())[:EXAMPLES_PER_INVARIANT]:
            v.add("athena_duplicate", f"{key} delivered {n} times", 0)
        v.violations["athena_duplicate"] += extra - crash_duplicates


def check_outbox(obs: Observed, v: Verdict) -> None:
    for path, pending in sorted(obs.outbox_pending.items()):
        if pending:
            v.add("outbox_not_drained", f"{path}: {pending} record(s) pending", pending)


def check_loop(stats: list[dict[str, Any]], v: Verdict, max_lag_ms: float) -> None:
    """Merge each incarnation's last stats line; lag past ``max_lag_ms`` is a violation."""
    last: dict[str, dict[str, Any]] = {}
    for s in stats:
        last[s["writer"]] = s
    lag, turn_latency = Histogram(), Histogram()
    slow = 0
    slowest: list[tuple[float, str]] = []
    for s in last.values():
        lag.merge(Histogram.from_json(s.get("lag", {})))
        turn_latency.merge(Histogram.from_json(s.get("log_turn", {})))
        slow += int(s.get("slow_callbacks", 0))
        for text in s.get("slow_examples", []):
            took = _TOOK.search(text)
            slowest.append((float(took.group(1)) if took else 0.0, text))
    max_lag = max(lag.counts, default=0) / 1000
    v.figures.update(
        loop_lag_p50_ms=lag.quantile(0.5) / 1000,
        loop_lag_p99_ms=lag.quantile(0.99) / 1000,
        loop_lag_max_ms=max_lag,
        loop_lag_samples=len(lag),
        slow_callbacks_over_5ms=slow,
        log_turn_p50_ms=turn_latency.quantile(0.5) / 1000,
        log_turn_p99_ms=turn_latency.quantile(0.99) / 1000,
        log_turn_samples=len(turn_latency),
        slowest_callbacks=[text for _, text in sorted(slowest, reverse=True)[:3]],
    )
    if max_lag > max_lag_ms:
        v.add("loop_lag", f"event loop stalled {max_lag:.0f} ms (bound {max_lag_ms:g} ms)")


def verify(
    ops: list[dict[str, Any]],
    obs: Observed,
    stats: list[dict[str, Any]] | None = None,
    *,
    max_lag_ms: float = 1000.0,
    athena_crash_duplicates: int = 0,
    athena_claims_unavailable: bool = False,
) -> Verdict:
    """Check every invariant; returns the violations and figures.

    ``athena_crash_duplicates``: Athena events that may be sent twice after the
    faults that make delivery at-least-once (a deliverer killed mid-send, a
    timed-out request the server stored, Redis down); the server does not
    deduplicate. Duplicates beyond it are violations. ``athena_claims_unavailable``:
    Redis (the delivery claims) was down, out of memory or out of reach at some
    point, so each copy of a re-logged turn may have been sent (see :func:`check_athena`).
    """
    v = Verdict()
    check_errors(ops, v)
    check_revisions(ops, v)
    check_dead_letters(ops, obs, v)
    check_turns(ops, obs, v)
    check_registers(ops, obs, v)
    check_tasks(ops, obs, v)
    check_summaries(ops, obs, v)
    logged: Counter[tuple[str, str, str, str, int]] | None = None
    if athena_claims_unavailable:
        logged = Counter(
            (str(op.get("tenant")), op["wf"], op["step"], op["agent"], int(op["turn"]))
            for op in ops
            if op["kind"] in TURN_KINDS and op["status"] != FAIL
        )
    check_athena(obs, v, crash_duplicates=athena_crash_duplicates, logged=logged)
    check_outbox(obs, v)
    check_loop(stats or [], v, max_lag_ms)
    v.figures["operations"] = len(ops)
    v.figures["by_status"] = dict(Counter(op["status"] for op in ops))
    v.figures["by_kind"] = dict(Counter(op["kind"] for op in ops))
    v.figures["acknowledged"] = sum(1 for op in ops if op["status"] == OK)
    v.figures["unknown_outcome"] = sum(1 for op in ops if op["status"] == INFO)
    return v
