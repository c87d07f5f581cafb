"""The fault-injection history checker: a CI-sized run, and its verifier on hand-made histories.

The run (real redis-server with AOF ``always``, worker processes, the Athena
fake, random faults) must find no violation; each invariant of the verifier is
shown to fail on a small history that breaks it, and to pass on one that does not.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import require_backend
from tests.harness.checker import CheckerConfig, Observed, run_checker, verify
from tests.harness.checker.disks import OutboxDisks
from tests.harness.checker.faults import FaultInjector
from tests.harness.checker.forwarders import Forwarders
from tests.harness.checker.history import Histogram, HistoryWriter, completed, read_history
from tests.harness.checker.verify import turn_text
from tests.harness.redis_server import RedisServerProcess

CI_SECONDS = float(os.environ.get("JARVISMEM_CHECKER_SECONDS", "25"))

WF, STEP, AGENT, TENANT = "wf0", "s0", "a0", "ta"
CKPT = f"ckpt:{WF}:{STEP}"


def op(kind: str, op_id: str, inv: int, done: int | None, status: str = "ok", **f: Any) -> Any:
    return {"kind": kind, "id": op_id, "inv": inv, "done": done, "status": status, **f}


def turn(op_id: str, n: int, inv: int, status: str = "ok", **f: Any) -> Any:
    fields = {"wf": WF, "step": STEP, "agent": AGENT, "turn": n, "tenant": TENANT, **f}
    return op("log_turn", op_id, inv, inv + 1, status, **fields)


def entry(n: int) -> dict[str, Any]:
    return {
        "turn_id": str(n),
        "step_id": STEP,
        "agent_id": AGENT,
        "thought": turn_text(TENANT, WF, STEP, AGENT, n)[0],
    }


def save(op_id: str, inv: int, done: int | None, status: str = "ok") -> Any:
    return op("save_ckpt", op_id, inv, done, status, reg=CKPT, val=op_id)


def read(op_id: str, inv: int, val: str | None) -> Any:
    return op("load_ckpt", op_id, inv, inv + 1, reg=CKPT, read=True, val=val)


def violations(ops: list[Any], obs: Observed, **kw: Any) -> dict[str, int]:
    return dict(verify(ops, obs, **kw).violations)


# --- the CI run ---------------------------------------------------------------------------


# Serial: one invariant bounds the event loop's stalls (1 s), which other tests
# loading the cores stretch.
@pytest.mark.serial
@pytest.mark.integration
def test_random_faults_over_processes_violate_no_invariant(tmp_path: Path) -> None:
    require_backend(shutil.which("redis-server") is not None, "the redis-server binary")
    report = run_checker(
        CheckerConfig(seed=20261126, seconds=CI_SECONDS, athena=True, workdir=tmp_path)
    )
    # Whatever it found, nothing it set up outlives it.
    assert not [p for p in (tmp_path / "outbox").iterdir() if os.path.ismount(p)]
    assert not [t for t in threading.enumerate() if t.name == "checker-forwarders"]
    assert report.problems == []
    assert report.acknowledged > 0 and sum(report.faults.values()) > 0
    assert report.violations == {}, report.examples


@pytest.mark.integration
def test_a_reintroduced_bug_is_caught_by_the_run(tmp_path: Path) -> None:
    """The run can fail: with random Athena idempotency keys, re-logged turns duplicate."""
    require_backend(shutil.which("redis-server") is not None, "the redis-server binary")
    report = run_checker(
        CheckerConfig(
            seed=20261127,
            seconds=min(CI_SECONDS, 15.0),
            athena=True,
            faults=(),
            mutation="random-athena-keys",
            workdir=tmp_path,
        )
    )
    assert report.violations.get("athena_duplicate", 0) > 0, report.violations


# --- the faults, one by one (checked while in force, through the injector's hold) ----------


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServerProcess]:
    require_backend(shutil.which("redis-server") is not None, "the redis-server binary")
    server = RedisServerProcess(tmp_path / "redis", appendfsync="always")
    server.start()
    try:
        yield server
    finally:
        server.kill()


def _write(port: int, key: str = "k") -> str:
    """'ok' or the error a SET meets."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
    try:
        client.set(key, "v")
        return "ok"
    except redis.RedisError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()


def _injector(server: RedisServerProcess, tmp_path: Path, probe: Any, **kw: Any) -> FaultInjector:
    def kill_worker(rng: random.Random) -> None:
        raise AssertionError("no worker here")

    return FaultInjector(
        random.Random(1), server, tmp_path / "blobs", None, kill_worker, sleep=probe, **kw
    )


def test_an_oom_window_refuses_writes_then_heals(
    private_redis: RedisServerProcess, tmp_path: Path
) -> None:
    seen: list[str] = []
    injector = _injector(private_redis, tmp_path, lambda s: seen.append(_write(private_redis.port)))
    injector.inject("redis_oom")
    # redis-py turns the "-OOM command not allowed ..." reply into OutOfMemoryError.
    assert len(seen) == 1 and seen[0].startswith("OutOfMemoryError: command not allowed"), seen
    assert _write(private_redis.port) == "ok"


def test_a_restart_from_the_aof_comes_back_out_of_memory(
    private_redis: RedisServerProcess, tmp_path: Path
) -> None:
    """The first writes after the restart (the outboxes' replays) meet OOM; the data is back."""
    assert _write(private_redis.port, "before") == "ok"
    pid = private_redis.proc.pid if private_redis.proc else None
    seen: list[tuple[str, Any]] = []

    def probe(seconds: float) -> None:
        if private_redis.running:
            client = redis.Redis(host="127.0.0.1", port=private_redis.port, socket_timeout=5)
            seen.append((_write(private_redis.port), client.get("before")))
            client.close()

    _injector(private_redis, tmp_path, probe).inject("redis_kill_oom")
    assert private_redis.proc is not None and private_redis.proc.pid != pid
    assert len(seen) == 1 and seen[0][0].startswith("OutOfMemoryError") and seen[0][1] == b"v"
    assert private_redis.extra_args == []  # a later restart is a plain one
    assert _write(private_redis.port) == "ok"


def test_per_worker_forwarders_reach_redis_on_their_own_addresses_and_partition(
    private_redis: RedisServerProcess, tmp_path: Path
) -> None:
    forwarders = Forwarders(private_redis.port, 2).start()
    try:
        urls = {forwarders.url(0), forwarders.url(1), private_redis.url}
        assert len(urls) == 3
        held_slot = random.Random(1).randrange(2)  # the injector's first draw
        ports = [forwarders.proxies[held_slot].port, forwarders.proxies[1 - held_slot].port]
        seen: list[list[str]] = []

        def through(port: int) -> str:
            client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5)
            try:
                client.set("held", "1")
                return "through"
            except redis.TimeoutError:
                return "held"
            finally:
                client.close()

        injector = _injector(
            private_redis,
            tmp_path,
            lambda s: seen.append([through(p) for p in ports]),
            forwarders=forwarders,
        )
        injector.inject("partition")
        assert seen == [["held", "through"]]  # one worker's address only
        assert _write(ports[0], "after") == "ok"
    finally:
        forwarders.close()
    port = ports[0]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def _disk_probe(directory: Path) -> str:
    try:
        fd = os.open(directory / "new.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, b"x" * 4096)
        finally:
            os.close(fd)
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))


@pytest.mark.parametrize(
    ("kind", "error"), [("outbox_readonly", "EROFS"), ("outbox_full", "ENOSPC")]
)
def test_an_outbox_disk_made_read_only_or_full_heals_and_is_unmounted(
    private_redis: RedisServerProcess, tmp_path: Path, kind: str, error: str
) -> None:
    disks = OutboxDisks(tmp_path / "outbox", 1, "1m").mount()
    if disks.skipped:
        pytest.skip(disks.skipped)
    directory = disks.dirs[0]
    try:
        assert os.path.ismount(directory)
        # Held open for writing, as the outbox holds its lock files.
        held = os.open(directory / "box.lock", os.O_RDWR | os.O_CREAT, 0o600)
        seen: list[str] = []
        injector = _injector(
            private_redis, tmp_path, lambda s: seen.append(_disk_probe(directory)), disks=disks
        )
        try:
            injector.inject(kind)
        finally:
            os.close(held)
        assert seen == [error]
        assert _disk_probe(directory) == "ok"
        injector.disks = disks
        disks.readonly(0)
        injector.heal_all()  # undoes a fault still in force, leaves the tmpfs
        assert _disk_probe(directory) == "ok" and os.path.ismount(directory)
    finally:
        assert disks.unmount_all() == []
    assert not os.path.ismount(directory)


# --- the verifier, invariant by invariant -------------------------------------------------


def test_a_clean_history_has_no_violation() -> None:
    ops = [turn("1", 1, 10), turn("2", 2, 20), save("c1", 30, 31), read("r1", 40, "c1")]
    obs = Observed(ledger={WF: [entry(1), entry(2)]}, registers={CKPT: "c1"})
    assert violations(ops, obs) == {}


def test_a_lost_acknowledged_turn_is_caught() -> None:
    ops = [turn("1", 1, 10), turn("2", 2, 20)]
    assert violations(ops, Observed(ledger={WF: [entry(1)]})) == {"lost_turn": 1}


def test_an_unacknowledged_turn_may_be_missing() -> None:
    ops = [turn("1", 1, 10), turn("2", 2, 20, status="info")]
    assert violations(ops, Observed(ledger={WF: [entry(1)]})) == {}


def test_a_duplicate_turn_is_caught() -> None:
    ops = [turn("1", 1, 10), {**turn("2", 1, 20), "kind": "relog"}]
    obs = Observed(ledger={WF: [entry(1), entry(1)]})
    assert violations(ops, obs) == {"duplicate_turn": 1}


def test_turns_out_of_per_agent_order_are_caught() -> None:
    ops = [turn("1", 1, 10), turn("2", 2, 20)]
    assert violations(ops, Observed(ledger={WF: [entry(2), entry(1)]})) == {"out_of_order": 1}


def test_a_turn_nobody_logged_is_caught() -> None:
    ops = [turn("1", 1, 10)]
    obs = Observed(ledger={WF: [entry(1), entry(7)]})
    assert violations(ops, obs) == {"invented_turn": 1}


def test_a_superseded_checkpoint_as_final_state_is_caught() -> None:
    ops = [save("x", 10, 20), save("y", 30, 40)]
    assert violations(ops, Observed(registers={CKPT: "x"})) == {"stale_final": 1}


def test_concurrent_saves_may_end_either_way() -> None:
    ops = [save("x", 10, 40), save("y", 20, 30)]
    assert violations(ops, Observed(registers={CKPT: "x"})) == {}
    assert violations(ops, Observed(registers={CKPT: "y"})) == {}


def test_an_unacknowledged_save_may_land_late() -> None:
    ops = [save("x", 10, None, status="info"), save("y", 30, 40)]
    assert violations(ops, Observed(registers={CKPT: "x"})) == {}


def test_a_lost_acknowledged_checkpoint_is_caught() -> None:
    assert violations([save("x", 10, 20)], Observed(registers={CKPT: None})) == {"lost_write": 1}


def test_a_stale_read_is_caught() -> None:
    ops = [save("x", 10, 20), save("y", 30, 40), read("r", 50, "x")]
    assert violations(ops, Observed(registers={CKPT: "y"})) == {"stale_read": 1}


def test_a_queued_save_is_owed_only_to_reads_through_its_own_outbox() -> None:
    """Outboxes are per machine and Redis address: another one may not see it yet."""
    x = {**save("x", 10, 20), "rev": 1, "box": "A"}
    queued = {**save("y", 30, 40), "rev": None, "box": "A"}
    obs = Observed(registers={CKPT: "y"})
    other = {**read("r", 50, "x"), "box": "B"}
    own = {**read("r", 50, "x"), "box": "A"}
    assert violations([x, queued, other], obs) == {}
    assert violations([x, queued, own], obs) == {"stale_read": 1}
    stored = {**queued, "rev": 2}  # acknowledged with a revision: stored, owed to all
    assert violations([x, stored, other], obs) == {"stale_read": 1}
    assert violations([x, queued, other], Observed(registers={CKPT: "x"})) == {"stale_final": 1}


def test_a_read_overlapping_the_newer_save_may_see_the_older_one() -> None:
    ops = [save("x", 10, 20), save("y", 30, 60), read("r", 50, "x")]
    assert violations(ops, Observed(registers={CKPT: "y"})) == {}


def test_a_read_that_finds_nothing_after_an_ack_is_counted_not_judged() -> None:
    ops = [save("x", 10, 20), read("r1", 5, None), read("r2", 30, None)]
    verdict = verify(ops, Observed(registers={CKPT: "x"}))
    assert dict(verdict.violations) == {}
    assert verdict.figures["empty_reads_after_ack"] == 1


def test_a_refused_save_that_is_visible_is_caught() -> None:
    ops = [save("x", 10, 20), save("y", 30, 40, status="fail")]
    assert violations(ops, Observed(registers={CKPT: "y"})) == {"failed_write_visible": 1}


def test_a_value_nobody_wrote_is_caught() -> None:
    assert violations([], Observed(registers={CKPT: "<unreadable 'x'>"})) == {"invented_value": 1}


def test_a_deleted_space_may_be_absent_and_a_stale_one_is_caught() -> None:
    reg = f"world:{WF}:{AGENT}:k0"
    put = op("world_put", "p", 10, 20, reg=reg, val="p")
    delete = op("world_delete", "d", 30, 40, reg=reg, val=None)
    assert violations([put, delete], Observed(registers={reg: None})) == {}
    assert violations([put, delete], Observed(registers={reg: "p"})) == {"stale_final": 1}


def test_a_lost_or_resurrected_task_is_caught() -> None:
    space = f"{WF}:{AGENT}"
    add1 = op("tasks_add", "1", 10, 11, space=space, text="task 1", task_id="t1")
    add2 = op("tasks_add", "2", 12, 13, space=space, text="task 2", task_id="t2")
    rm2 = op("tasks_remove", "3", 14, 15, space=space, text="task 2", task_id="t2")
    ops = [add1, add2, rm2]
    assert violations(ops, Observed(tasks={space: ["task 1"]})) == {}
    assert violations(ops, Observed(tasks={space: []})) == {"lost_task": 1}
    assert violations(ops, Observed(tasks={space: ["task 1", "task 2"]})) == {"resurrected_task": 1}


def test_a_summary_older_than_an_acknowledged_compaction_is_caught() -> None:
    ops = [op("compact", "c", 10, 20, wf=WF, compacted=True, to_id="1700-5")]
    assert violations(ops, Observed(summaries={WF: "1700-9"})) == {}
    assert violations(ops, Observed(summaries={WF: "1700-2"})) == {"stale_summary": 1}


def test_an_event_in_another_tenants_session_is_caught() -> None:
    thought = turn_text("ta", WF, STEP, AGENT, 1)[0]
    assert violations([], Observed(athena_events=[("ta", thought)])) == {}
    assert violations([], Observed(athena_events=[("tb", thought)])) == {"cross_tenant": 1}


def test_a_turn_delivered_twice_to_athena_is_counted() -> None:
    thought = turn_text("ta", WF, STEP, AGENT, 1)[0]
    verdict = verify([], Observed(athena_events=[("ta", thought)] * 3))
    assert dict(verdict.violations) == {"athena_duplicate": 2}
    assert verdict.figures["athena_duplicate_events"] == 2


def test_copies_relogged_while_claims_were_out_of_reach_may_each_reach_athena() -> None:
    # Redis (the delivery claims) down, out of memory or partitioned: each queued copy
    # of a turn is sent without a claim (documented at-least-once). A turn logged
    # once and re-logged twice may arrive three times, and no more.
    thought = turn_text(TENANT, WF, STEP, AGENT, 1)[0]
    relogs = [turn(op_id, 1, inv) | {"kind": "relog"} for op_id, inv in (("b", 2), ("c", 4))]
    ops = [turn("a", 1, 0), *relogs]
    thrice = Observed(athena_events=[(TENANT, thought)] * 3, ledger={WF: [entry(1)]})
    assert violations(ops, thrice, athena_claims_unavailable=True) == {}
    assert violations(ops, thrice) == {"athena_duplicate": 2}  # claims were there: a bug
    four = Observed(athena_events=[(TENANT, thought)] * 4, ledger={WF: [entry(1)]})
    assert violations(ops, four, athena_claims_unavailable=True) == {"athena_duplicate": 1}
    assert violations(ops, four, athena_claims_unavailable=True, athena_crash_duplicates=1) == {}


def test_athena_duplicates_explained_by_faults_are_only_a_figure() -> None:
    thought = turn_text("ta", WF, STEP, AGENT, 1)[0]
    observed = Observed(athena_events=[("ta", thought)] * 3)
    explained = verify([], observed, athena_crash_duplicates=2)
    assert dict(explained.violations) == {}
    assert explained.figures["athena_duplicates_explained_by_faults"] == 2
    assert dict(verify([], observed, athena_crash_duplicates=1).violations) == {
        "athena_duplicate": 1
    }


def test_a_raw_backend_exception_is_caught() -> None:
    raw = save("x", 10, 20, status="info")
    raw.update(err="ConnectionError", jm=False)
    ours = save("y", 30, 40, status="info")
    ours.update(err="BackendUnavailableError", jm=True)
    assert violations([raw, ours], Observed(registers={CKPT: None})) == {"raw_exception": 1}


def test_log_turn_raising_or_hanging_is_caught() -> None:
    failed = turn("1", 1, 10, status="info", err="BackendUnavailableError", jm=True)
    hung = turn("2", 2, 20, status="info", err="CheckerTimeout", jm=False)
    obs = Observed(ledger={WF: []})
    assert violations([failed, hung], obs) == {"log_turn_raised": 1, "hung_op": 1}


def test_log_turn_raising_for_a_disk_or_backend_condition_is_caught_once() -> None:
    """A raw OSError from a full outbox disk is one log_turn violation, not also a raw one;
    an input error (bad arguments) is the one exception log_turn may raise."""
    disk = turn("1", 1, 10, status="info", err="OSError", jm=False, msg="[Errno 28] No space")
    oom = turn("2", 2, 20, status="info", err="OutOfMemoryError", jm=False, msg="OOM command")
    bad = turn("3", 3, 30, status="info", err="InvalidIdError", jm=True, input=True)
    obs = Observed(ledger={WF: []})
    assert violations([disk, oom, bad], obs) == {"log_turn_raised": 2}


def ckpt_save(op_id: str, inv: int, rev: Any, cond: bool = False) -> Any:
    return op("save_ckpt", op_id, inv, inv + 5, reg=CKPT, val=op_id, cond=cond, rev=rev)


def test_two_saves_acknowledged_with_one_revision_are_caught() -> None:
    obs = Observed(registers={CKPT: "y"})
    ops = [ckpt_save("x", 10, 3), ckpt_save("y", 12, 3, cond=True)]
    assert violations(ops, obs) == {"duplicate_revision": 1}
    # None acknowledges no revision (queued, or skipped behind a newer save).
    assert violations([ckpt_save("x", 10, None), ckpt_save("y", 12, 3)], obs) == {}
    assert violations([ckpt_save("x", 10, 2), ckpt_save("y", 12, 3)], obs) == {}
    # The same revision of another step is no conflict.
    other = {**ckpt_save("x", 10, 3), "reg": "ckpt:wf0:s1"}
    both = Observed(registers={CKPT: "y", "ckpt:wf0:s1": "x"})
    assert violations([other, ckpt_save("y", 12, 3)], both) == {}


def _dead_line(record: dict[str, Any], reason: str) -> bytes:
    from jarvismem.backends.outbox.format import encode_dead_letter

    return encode_dead_letter(4, record, reason, 1.0).encode()


def _queued_turn(n: int) -> dict[str, Any]:
    """A Redis outbox turn record: ledger fields as name / JSON value pairs."""
    thought = turn_text(TENANT, WF, STEP, AGENT, n)[0]
    fields = {"turn_id": str(n), "step_id": STEP, "agent_id": AGENT, "thought": thought}
    args = [x for name, value in fields.items() for x in (name, json.dumps(value))]
    return {"op": "turn", "args": args, "field": "x"}


def test_an_acknowledged_turn_dead_lettered_for_a_transient_reason_is_caught() -> None:
    from tests.harness.checker.verify import parse_dead_letter

    oom = "OutOfMemoryError: OOM command not allowed when used memory > 'maxmemory'."
    athena = {"event": {"type": "thought", "content": turn_text(TENANT, WF, STEP, AGENT, 2)[0]}}
    lines = [
        (_queued_turn(1), oom),
        (athena, "ConnectionError: Error 111 connecting to 127.0.0.1:6379"),
        (_queued_turn(1), "BackendRejectedError: WRONGTYPE Operation against a key"),
        (_queued_turn(3), "BusyLoadingError: LOADING Redis is loading"),  # never acknowledged
    ]
    dead = [parse_dead_letter("chk/redis/wf0.jsonl.dead", _dead_line(r, why)) for r, why in lines]
    assert all(d is not None for d in dead)
    ops = [turn("1", 1, 10), turn("2", 2, 20), turn("3", 3, 30, status="info")]
    obs = Observed(ledger={WF: [entry(1), entry(2)]}, dead_letters=[d for d in dead if d])
    verdict = verify(ops, obs)
    assert dict(verdict.violations) == {"transient_dead_letter": 2}
    assert verdict.figures["dead_letters"] == 4
    assert verdict.figures["dead_letters_transient_reason"] == 3


def test_a_non_empty_outbox_after_recovery_is_caught() -> None:
    obs = Observed(outbox_pending={"chk/redis/wf0.jsonl": 3, "chk/blob/wf0.jsonl": 0})
    assert violations([], obs) == {"outbox_not_drained": 3}


def test_a_stalled_event_loop_is_caught() -> None:
    lag = Histogram()
    for us in (50, 80, 1_500_000):
        lag.add(us)
    stats = [{"writer": "w00-000", "lag": lag.to_json(), "log_turn": {}, "slow_callbacks": 1}]
    verdict = verify([], Observed(), stats, max_lag_ms=1000)
    assert dict(verdict.violations) == {"loop_lag": 1}
    assert verdict.figures["loop_lag_max_ms"] == 1500.0
    assert verdict.figures["slow_callbacks_over_5ms"] == 1


# --- the history format ---------------------------------------------------------------------


def test_an_op_whose_worker_died_has_an_unknown_outcome_and_a_torn_line_is_skipped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w00-000.jsonl"
    writer = HistoryWriter(path)
    writer.write({"ev": "invoke", "id": "a", "ts": 1, "kind": "log_turn", "turn": 1})
    writer.write({"ev": "ok", "id": "a", "ts": 2})
    writer.write({"ev": "invoke", "id": "b", "ts": 3, "kind": "log_turn", "turn": 2})
    writer.close()
    with path.open("ab") as fh:
        fh.write(b'{"ev":"ok","id":"b","t')  # cut by the SIGKILL
    ops = list(completed(read_history([path])))
    assert [(o["id"], o["status"], o["inv"], o["done"]) for o in ops] == [
        ("a", "ok", 1, 2),
        ("b", "info", 3, None),
    ]
