"""DurableWriter: write-through, an ordered local queue during an outage, replay with backoff.

Unit tests over a real outbox on a temporary folder and an in-memory backend
whose outages and refusals the test controls. The multi-process and real-Redis
cases are in tests/system/test_durability.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.outbox import Outbox
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    BlobError,
    BlobRejectedError,
    BlobUnavailableError,
    InvalidBlobPathError,
    InvalidPayloadError,
)
from jarvismem.resilience import Backoff
from jarvismem.tiers.durable import (
    NOT_NOW,
    REPLAY_BACKOFF_BASE,
    DurableWriter,
    WriterPolicy,
    is_backend_failure,
    is_caller_error,
)


class FakeBackend:
    """Applies records in memory; ``down`` makes it an outage, some records it refuses."""

    def __init__(self) -> None:
        self.down = False
        self.applied: list[int] = []

    async def apply(self, record: dict[str, Any]) -> str:
        if record.get("caller_bug"):
            raise InvalidPayloadError("bad value")
        if self.down:
            raise BackendUnavailableError("backend down")
        if record.get("refuse"):
            raise BackendRejectedError("WRONGTYPE")
        if record.get("blob_refuse"):
            raise BlobRejectedError("append x: permission denied")
        if record.get("hang"):
            await asyncio.Event().wait()
        self.applied.append(record["n"])
        return f"ok {record['n']}"


MakeWriter = Callable[..., DurableWriter]


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
async def make_writer(tmp_path: Path, backend: FakeBackend) -> AsyncIterator[MakeWriter]:
    """Writers in front of ``backend`` on ``tmp_path/o.jsonl``; all closed after the test."""
    made: list[DurableWriter] = []

    def make(*, max_entries: int = 1000, **kwargs: Any) -> DurableWriter:
        # WriterPolicy's fields by name, the rest for the writer itself.
        bounds: dict[str, Any] = {"timeout": 5.0}
        bounds.update({k: kwargs.pop(k) for k in WriterPolicy.__dataclass_fields__ if k in kwargs})
        box = Outbox(tmp_path / "o.jsonl", max_entries=max_entries)
        made.append(
            DurableWriter(
                "backend[wf]", box, backend.apply, policy=WriterPolicy(**bounds), **kwargs
            )
        )
        return made[-1]

    yield make
    for writer in made:
        await writer.close()


# --- classification ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (BackendUnavailableError("down"), True),
        (BlobError("503"), True),
        (BlobUnavailableError("disk full"), True),
        (BlobRejectedError("permission denied"), False),  # would fail the same way again
        (ConnectionRefusedError(), True),
        (TimeoutError(), True),
        (BackendRejectedError("WRONGTYPE"), False),
        (InvalidPayloadError("bad"), False),
        (InvalidBlobPathError("../x"), False),  # a BlobError that is the caller's fault
        (RuntimeError("bug"), False),
    ],
)
def test_only_outages_are_backend_failures(exc: BaseException, transient: bool) -> None:
    assert is_backend_failure(exc) is transient


def test_caller_errors_are_jarvismem_value_errors() -> None:
    assert is_caller_error(InvalidPayloadError("bad"))
    assert not is_caller_error(ValueError("not ours"))
    assert not is_caller_error(BackendRejectedError("WRONGTYPE"))


# --- write-through and queueing --------------------------------------------------------------


async def test_a_write_goes_straight_through_while_the_backend_answers(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    writer = make_writer()
    assert await writer.submit({"n": 1}) == "ok 1"
    assert backend.applied == [1]
    assert not writer.degraded
    assert writer.health()["pending"] == 0


async def test_an_outage_queues_writes_and_replays_them_in_order(
    make_writer: MakeWriter, backend: FakeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    writer = make_writer()
    backend.down = True
    with caplog.at_level("WARNING", logger="jarvismem.tiers.durable"):
        for n in range(3):
            assert await writer.submit({"n": n}) is None
    assert writer.degraded
    assert await writer.pending_records() == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert "BackendUnavailableError" in (writer.health()["last_error"] or "")
    backend.down = False
    # Recovered, but records are pending: a new write joins the queue behind them.
    assert await writer.submit({"n": 3}) is None
    assert await writer.flush(timeout=5.0)
    assert backend.applied == [0, 1, 2, 3]
    assert writer.health()["replayed"] >= 3
    assert writer.last_error is None
    logged = [r.getMessage() for r in caplog.records]
    assert sum("queueing writes in the local outbox" in line for line in logged) == 1


class NowBackend(FakeBackend):
    """A backend that can apply some records at once (``now`` ones), as a local append."""

    def __init__(self) -> None:
        super().__init__()
        self.now_calls = 0
        self.awaited: list[int] = []

    def apply_now(self, record: dict[str, Any]) -> Any:
        self.now_calls += 1
        if record.get("caller_bug"):
            raise InvalidPayloadError("bad value")
        if self.down:
            raise BackendUnavailableError("backend down")
        if not record.get("now"):
            return NOT_NOW
        self.applied.append(record["n"])
        return f"now {record['n']}"

    async def apply(self, record: dict[str, Any]) -> str:
        self.awaited.append(record["n"])
        return await super().apply(record)


async def test_a_write_applied_at_once_skips_the_awaited_path(tmp_path: Path) -> None:
    backend = NowBackend()
    writer = DurableWriter(
        "now[wf]", Outbox(tmp_path / "o.jsonl"), backend.apply, policy=WriterPolicy(timeout=5.0),
        apply_now=backend.apply_now,
    )  # fmt: skip
    try:
        assert await writer.submit({"n": 1, "now": True}) == "now 1"
        assert await writer.submit({"n": 2}) == "ok 2"  # NOT_NOW: awaited as before
        assert backend.applied == [1, 2] and backend.awaited == [2]
        with pytest.raises(InvalidPayloadError):  # raised at once, as from apply
            await writer.submit({"n": 3, "now": True, "caller_bug": True})
        backend.down = True
        assert await writer.submit({"n": 4, "now": True}) is None  # an outage: queued
        assert writer.degraded
        calls = backend.now_calls
        # Degraded: new writes queue behind the backlog, never applied at once.
        backend.down = False
        assert await writer.submit({"n": 5, "now": True}) is None
        assert backend.now_calls == calls
        assert await writer.flush(timeout=5.0)
        assert backend.applied == [1, 2, 4, 5]  # replayed in order, by the awaited path
    finally:
        await writer.close()


async def test_a_hung_backend_times_out_into_the_queue(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    writer = make_writer(timeout=0.1)
    assert await asyncio.wait_for(writer.submit({"n": 1, "hang": True}), 5) is None
    assert writer.degraded


async def test_a_caller_error_raises_and_queues_nothing(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    writer = make_writer()
    with pytest.raises(InvalidPayloadError):
        await writer.submit({"n": 1, "caller_bug": True})
    assert not writer.degraded and writer.health()["dead_lettered"] == 0


async def test_a_live_refusal_is_dead_lettered_not_raised(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    writer = make_writer()
    assert await writer.submit({"n": 1, "refuse": True}) is None
    assert writer.health()["dead_lettered"] == 1
    assert not writer.degraded
    assert await writer.submit({"n": 2}) == "ok 2"


async def test_a_refused_record_in_the_queue_is_dead_lettered_and_the_rest_replayed(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    writer = make_writer()
    backend.down = True
    await writer.submit({"n": 0})
    await writer.submit({"n": 1, "refuse": True})
    await writer.submit({"n": 2})
    backend.down = False
    assert await writer.flush(timeout=5.0)
    assert backend.applied == [0, 2]
    assert writer.health()["dead_lettered"] == 1


async def test_a_refused_blob_write_is_dead_lettered_and_never_wedges_the_queue(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    # A blob refusal (permission denied, read-only file system, Azure 403) repeats
    # forever: like a refused Redis write it is dead-lettered, live or queued.
    writer = make_writer()
    assert await writer.submit({"n": 1, "blob_refuse": True}) is None
    assert writer.health()["dead_lettered"] == 1
    assert not writer.degraded and await writer.submit({"n": 2}) == "ok 2"
    backend.down = True
    await writer.submit({"n": 3})
    await writer.submit({"n": 4, "blob_refuse": True})
    await writer.submit({"n": 5})
    backend.down = False
    assert await writer.flush(timeout=5.0)
    assert backend.applied == [2, 3, 5]
    assert writer.health()["dead_lettered"] == 2


# --- replay in runs (apply_many) ---------------------------------------------------------------


class BatchBackend(FakeBackend):
    """Also applies runs of records in one call; ``fail_at`` makes one record of a run an outage."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[int]] = []
        self.fail_at: int | None = None
        self.refuse_whole = False

    async def apply_many(self, records: list[dict[str, Any]]) -> list[Any]:
        self.calls.append([r["n"] for r in records])
        if self.down:
            raise BackendUnavailableError("backend down")
        if self.refuse_whole and any(r.get("refuse") for r in records):
            raise BackendRejectedError("the script refused the call")
        outcomes: list[Any] = []
        for i, record in enumerate(records):
            if record["n"] == self.fail_at:
                self.fail_at = None  # once
                stop = BackendUnavailableError("connection lost")
                return outcomes + [stop] * (len(records) - i)
            if record.get("refuse"):
                outcomes.append(BackendRejectedError("WRONGTYPE"))
                continue
            self.applied.append(record["n"])
            outcomes.append(f"ok {record['n']}")
        return outcomes


@pytest.fixture
def batch_backend() -> BatchBackend:
    return BatchBackend()


@pytest.fixture
async def batch_writer(tmp_path: Path, batch_backend: BatchBackend) -> AsyncIterator[DurableWriter]:
    box = Outbox(tmp_path / "b.jsonl", max_entries=1000)
    writer = DurableWriter(
        "backend[wf]",
        box,
        batch_backend.apply,
        policy=WriterPolicy(timeout=5.0),
        apply_many=batch_backend.apply_many,
        batchable=lambda record: not record.get("lone"),
    )
    yield writer
    await writer.close()


async def queue_during_outage(
    writer: DurableWriter, backend: FakeBackend, records: list[Any]
) -> None:
    backend.down = True
    for record in records:
        assert await writer.submit(record) is None
    backend.down = False


async def test_a_backlog_is_replayed_in_one_call_per_run_in_order(
    batch_writer: DurableWriter, batch_backend: BatchBackend
) -> None:
    await queue_during_outage(batch_writer, batch_backend, [{"n": n} for n in range(50)])
    batch_backend.calls.clear()
    assert await batch_writer.flush(timeout=5.0)
    assert batch_backend.applied == list(range(50))
    assert batch_backend.calls == [list(range(50))]  # one call, not fifty
    assert batch_writer.replayed == 50


async def test_a_record_that_is_not_batchable_splits_the_runs_and_keeps_its_place(
    batch_writer: DurableWriter, batch_backend: BatchBackend
) -> None:
    records = [{"n": 0}, {"n": 1}, {"n": 2, "lone": True}, {"n": 3}, {"n": 4}]
    await queue_during_outage(batch_writer, batch_backend, records)
    batch_backend.calls.clear()
    assert await batch_writer.flush(timeout=5.0)
    assert batch_backend.applied == [0, 1, 2, 3, 4]
    assert batch_backend.calls == [[0, 1], [3, 4]]


async def test_an_outage_inside_a_run_keeps_that_record_and_the_rest_queued_in_order(
    batch_writer: DurableWriter, batch_backend: BatchBackend
) -> None:
    await queue_during_outage(batch_writer, batch_backend, [{"n": n} for n in range(6)])
    batch_backend.fail_at = 3
    assert await batch_writer.flush(timeout=5.0)
    # 0-2 landed and were acknowledged; 3-5 stayed queued and came next: no repeat, no gap.
    assert batch_backend.applied == [0, 1, 2, 3, 4, 5]
    assert batch_writer.replayed == 6


async def test_a_refused_record_of_a_run_is_dead_lettered_and_the_rest_replayed(
    batch_writer: DurableWriter, batch_backend: BatchBackend
) -> None:
    records = [{"n": 0}, {"n": 1, "refuse": True}, {"n": 2}]
    await queue_during_outage(batch_writer, batch_backend, records)
    assert await batch_writer.flush(timeout=5.0)
    assert batch_backend.applied == [0, 2]
    assert batch_writer.health()["dead_lettered"] == 1


async def test_a_run_refused_as_a_whole_is_replayed_one_by_one_to_find_the_culprit(
    batch_writer: DurableWriter, batch_backend: BatchBackend
) -> None:
    batch_backend.refuse_whole = True
    records = [{"n": 0}, {"n": 1, "refuse": True}, {"n": 2}]
    await queue_during_outage(batch_writer, batch_backend, records)
    assert await batch_writer.flush(timeout=5.0)
    assert batch_backend.applied == [0, 2]
    assert batch_writer.health()["dead_lettered"] == 1


async def test_a_run_that_timed_out_is_retried_smaller(
    tmp_path: Path, batch_backend: BatchBackend
) -> None:
    sizes: list[int] = []

    async def slow_when_big(records: list[dict[str, Any]]) -> list[Any]:
        sizes.append(len(records))
        if len(records) > 4:
            await asyncio.Event().wait()  # too big for the timeout
        return await batch_backend.apply_many(records)

    box = Outbox(tmp_path / "t.jsonl", max_entries=1000)
    writer = DurableWriter(
        "backend[wf]",
        box,
        batch_backend.apply,
        policy=WriterPolicy(timeout=0.05),
        apply_many=slow_when_big,
    )
    writer._backoff = Backoff(base=0.01, cap=0.01, jitter="none")
    try:
        await queue_during_outage(writer, batch_backend, [{"n": n} for n in range(16)])
        assert await writer.flush(timeout=10.0)
        assert batch_backend.applied == list(range(16))
        assert sizes[0] == 16 and min(sizes) <= 4
    finally:
        await writer.close()


async def test_a_full_outbox_drops_and_counts_without_raising(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    writer = make_writer(max_entries=2)
    backend.down = True
    for n in range(4):
        assert await writer.submit({"n": n}) is None
    assert writer.health()["pending"] == 2
    assert writer.health()["dropped"] == 2


async def test_a_local_disk_error_drops_and_counts_without_raising(
    make_writer: MakeWriter, backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = make_writer()
    backend.down = True

    async def disk_full(record: dict[str, Any]) -> bool:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.outbox, "put", disk_full)
    assert await writer.submit({"n": 0}) is None
    assert writer.health()["dropped"] == 1


async def read_only_puts(record: dict[str, Any]) -> bool:
    raise OSError(30, "Read-only file system")


async def backlog_in_a_long_backoff(
    make_writer: MakeWriter, backend: FakeBackend, probe: Callable[[], Any]
) -> DurableWriter:
    """A writer with records 0 and 1 queued while ``backend`` was down, its replay backed off."""
    writer = make_writer(max_backoff=60.0, probe=probe, probe_interval=0.01)
    writer._backoff = Backoff(base=30.0, cap=60.0, jitter="none")
    backend.down = True
    for n in range(2):
        assert await writer.submit({"n": n}) is None
    await asyncio.sleep(0.2)  # the replay failed, probed once more, and now waits 30 s
    assert writer.health()["pending"] == 2
    return writer


async def test_a_write_the_disk_refuses_goes_live_behind_a_backlog_the_backend_takes_again(
    make_writer: MakeWriter, backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Out of memory: the backend refuses writes while its probe (PING) answers, so
    # the replay backoff is not cut short when it takes writes again.
    async def answers() -> bool:
        return True

    writer = await backlog_in_a_long_backoff(make_writer, backend, answers)
    backend.down = False  # the backend takes writes again; the replay still waits
    monkeypatch.setattr(writer.outbox, "put", read_only_puts)  # and the disk turns read-only
    assert await writer.submit({"n": 2}) == "ok 2"
    # Replayed first, then the new write: in order, and nothing dropped.
    assert backend.applied == [0, 1, 2]
    assert writer.health()["dropped"] == 0
    assert not writer.degraded
    assert await writer.submit({"n": 3}) == "ok 3"  # live as usual from then on
    assert backend.applied == [0, 1, 2, 3]


def count_applies(backend: FakeBackend, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count ``backend.apply`` calls from now on: ``[count]``, read as it grows."""
    attempts = [0]
    real_apply = backend.apply

    async def counting_apply(record: dict[str, Any]) -> str:
        attempts[0] += 1
        return await real_apply(record)

    monkeypatch.setattr(backend, "apply", counting_apply)
    return attempts


async def test_a_write_the_disk_refuses_never_overtakes_a_backlog_the_backend_still_refuses(
    make_writer: MakeWriter, backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = count_applies(backend, monkeypatch)  # before the writer is made with it

    async def answers() -> bool:
        return True

    writer = await backlog_in_a_long_backoff(make_writer, backend, answers)
    monkeypatch.setattr(writer.outbox, "put", read_only_puts)
    before = attempts[0]
    assert await writer.submit({"n": 2}) is None  # still refused: dropped and counted
    assert attempts[0] == before + 1  # one replay pass tried the head of the queue
    assert backend.applied == []
    assert writer.health()["dropped"] == 1
    assert await writer.pending_records() == [{"n": 0}, {"n": 1}]


async def test_a_write_the_disk_refuses_is_dropped_without_a_replay_when_the_backend_is_down(
    make_writer: MakeWriter, backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = count_applies(backend, monkeypatch)
    writer = await backlog_in_a_long_backoff(make_writer, backend, Probe(backend))
    monkeypatch.setattr(writer.outbox, "put", read_only_puts)
    before = attempts[0]
    assert await writer.submit({"n": 2}) is None
    assert attempts[0] == before  # the probe says down: no replay pass, no live write
    assert writer.health()["dropped"] == 1
    assert await writer.pending_records() == [{"n": 0}, {"n": 1}]


async def test_an_ack_the_disk_refuses_is_logged_as_the_disk_not_as_the_backend(
    tmp_path: Path,
    make_writer: MakeWriter,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    earlier = Outbox(tmp_path / "o.jsonl")
    await earlier.put({"n": 0})
    await earlier.close()
    writer = make_writer()

    async def read_only_ack(upto_seq: int) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(writer.outbox, "ack", read_only_ack)
    with caplog.at_level("WARNING", logger="jarvismem.tiers.durable"):
        assert not await writer.flush(timeout=5.0, stop_at_failure=True)
    logged = [r.getMessage() for r in caplog.records]
    assert any("outbox disk refused" in line for line in logged), logged
    assert not any("unavailable" in line for line in logged), logged


# --- replay ---------------------------------------------------------------------------------------


async def test_a_record_stamped_for_another_destination_is_dead_lettered_never_applied(
    tmp_path: Path, backend: FakeBackend
) -> None:
    path = tmp_path / "o.jsonl"
    theirs = Outbox(path, destination="theirs")
    await theirs.put({"n": 0})
    await theirs.close()
    mine = Outbox(path, destination="mine")
    await mine.put({"n": 1})
    writer = DurableWriter("backend[wf]", mine, backend.apply, policy=WriterPolicy(timeout=5.0))
    try:
        assert await writer.flush(timeout=5.0)
        assert backend.applied == [1]
        dead = [json.loads(line) for line in path.with_name("o.jsonl.dead").open()]
        assert [d["rec"] for d in dead] == [{"n": 0}]
        assert dead[0]["reason"].startswith("MisdirectedRecordError")
        assert writer.health()["dead_lettered"] == 1 and writer.health()["foreign"] == 1
    finally:
        await writer.close()


async def test_a_leftover_of_an_earlier_process_is_replayed_on_first_use(
    tmp_path: Path, make_writer: MakeWriter, backend: FakeBackend
) -> None:
    earlier = Outbox(tmp_path / "o.jsonl")
    for n in range(3):
        await earlier.put({"n": n})
    await earlier.close()
    writer = make_writer()
    assert await writer.notice()  # degraded: the leftover is pending
    assert await writer.flush(timeout=5.0)
    assert backend.applied == [0, 1, 2]


async def test_replay_backs_off_by_doubling_up_to_max_backoff(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    writer = make_writer(max_backoff=0.2)
    pauses: list[float] = []

    async def record_pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 5:
            backend.down = False  # the outage ends after five failed passes
        await asyncio.sleep(0)

    writer._pause = record_pause  # type: ignore[method-assign]
    backend.down = True
    await writer.submit({"n": 0})
    assert await writer.flush(timeout=5.0)
    base = REPLAY_BACKOFF_BASE
    assert pauses == [base, base * 2, 0.2, 0.2, 0.2]
    assert backend.applied == [0]


async def test_flush_never_delivers_beside_the_drain_task(tmp_path: Path) -> None:
    """A flush during a replay waits for the drain task: every record is applied once."""
    gate = asyncio.Event()
    applied: list[int] = []
    in_flight = 0
    overlap = 0

    async def apply(record: dict[str, Any]) -> None:
        nonlocal in_flight, overlap
        in_flight += 1
        overlap = max(overlap, in_flight)
        if record["n"] == 0:
            await gate.wait()  # the replay is stuck on its first record
        applied.append(record["n"])
        in_flight -= 1

    box = Outbox(tmp_path / "o.jsonl")
    for n in range(5):
        await box.put({"n": n})
    writer = DurableWriter("redis[wf]", box, apply, policy=WriterPolicy(timeout=30.0))
    flushes = [asyncio.ensure_future(writer.flush(timeout=10.0))]  # the replay starts
    await asyncio.sleep(0.05)
    flushes += [asyncio.ensure_future(writer.flush(timeout=10.0)) for _ in range(2)]
    await asyncio.sleep(0.1)
    gate.set()
    assert all(await asyncio.gather(*flushes))
    assert applied == [0, 1, 2, 3, 4]
    assert overlap == 1
    await writer.close()


async def test_flush_gives_up_at_its_timeout_during_an_outage(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    writer = make_writer()
    backend.down = True
    await writer.submit({"n": 0})
    assert not await asyncio.wait_for(writer.flush(timeout=0.2), 5)
    assert writer.degraded


async def test_a_flush_that_stops_at_failure_returns_after_one_failed_pass(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    # A bundle or a shutdown during an outage must not wait out its whole timeout
    # for a replay that cannot succeed: one failed pass after the call is enough.
    writer = make_writer(max_backoff=60.0)
    backend.down = True
    await writer.submit({"n": 0})
    passes: list[float] = []
    real_pause = writer._pause

    async def counting_pause(seconds: float) -> None:
        passes.append(seconds)
        await real_pause(seconds)

    writer._pause = counting_pause  # type: ignore[method-assign]
    # The bound only keeps a regression from hanging the suite: the flush asks 60 s.
    assert not await asyncio.wait_for(writer.flush(timeout=60.0, stop_at_failure=True), 10)
    assert len(passes) == 1 and writer.degraded
    backend.down = False
    assert await writer.flush(timeout=5.0, stop_at_failure=True)  # answers again: replayed
    assert backend.applied == [0]


async def test_close_stops_the_replay_and_keeps_the_queue(
    tmp_path: Path, make_writer: MakeWriter, backend: FakeBackend
) -> None:
    writer = make_writer()
    backend.down = True
    await writer.submit({"n": 0})
    await writer.close()
    reopened = Outbox(tmp_path / "o.jsonl")
    assert await reopened.load() == 1
    await reopened.close()


# --- recovery: a grown backoff is cut short by a probe ------------------------------------------


class Probe:
    """Answers like the backend: False while it is down; counts the calls."""

    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend
        self.calls = 0

    async def __call__(self) -> bool:
        self.calls += 1
        return not self.backend.down


async def test_replay_resumes_soon_after_the_backend_answers_again_despite_a_long_backoff(
    make_writer: MakeWriter, backend: FakeBackend
) -> None:
    probe = Probe(backend)
    writer = make_writer(max_backoff=60.0, probe=probe, probe_interval=0.02)
    writer._backoff = Backoff(base=30.0, cap=60.0, jitter="none")  # the first pause is 30 s
    backend.down = True
    await writer.submit({"n": 1})
    await wait_for_value(lambda: probe.calls >= 2)  # backed off, probing
    backend.down = False
    # Far sooner than the 30 s backoff: the probe saw the backend answer again.
    await wait_for_value(lambda: backend.applied == [1], timeout=5.0)


async def test_a_backend_that_answers_the_probe_but_refuses_writes_is_not_retried_in_a_loop(
    make_writer: MakeWriter, backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PING answers, writes fail (short of replicas, out of memory): one early retry,
    # then the backoff holds (no replay pass per probe interval).
    attempts = 0

    async def apply(record: dict[str, Any]) -> str:
        nonlocal attempts
        attempts += 1
        raise BackendUnavailableError("NOREPLICAS")

    async def answers() -> bool:
        return True

    monkeypatch.setattr(backend, "apply", apply)  # what the writer is made with
    writer = make_writer(max_backoff=60.0, probe=answers, probe_interval=0.01)
    writer._backoff = Backoff(base=30.0, cap=60.0, jitter="none")
    await writer.submit({"n": 1})
    await asyncio.sleep(0.5)
    # The live write, the replay that starts at once, one probe-woken replay; then 30 s.
    assert attempts == 3


async def wait_for_value(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@pytest.mark.integration
async def test_a_record_queued_while_redis_was_down_lands_soon_after_it_restarts(
    tmp_path: Path,
) -> None:
    import redis.asyncio as aioredis

    from jarvismem.backends.redis import RedisBackend
    from jarvismem.backends.redis_failures import redis_errors
    from tests.harness.redis_server import RedisServerProcess

    server = RedisServerProcess(tmp_path / "redis", persistence=False)
    client = aioredis.from_url(server.url, socket_connect_timeout=0.5)

    async def apply(record: dict[str, Any]) -> int:
        async with redis_errors("probe test"):
            return int(await client.incr(f"jm:durable-probe:{record['n']}"))

    box = Outbox(tmp_path / "o.jsonl", max_entries=100)
    writer = DurableWriter(
        "redis[probe]",
        box,
        apply,
        policy=WriterPolicy(timeout=2.0, max_backoff=60.0),
        probe=RedisBackend(client).probe,
    )
    writer._backoff = Backoff(base=30.0, cap=60.0, jitter="none")
    server.start()  # only once nothing before the cleanup below can raise
    try:
        server.kill()
        await writer.submit({"n": 1})
        assert writer.degraded
        await asyncio.sleep(0.3)  # backed off for 30 s, probing
        server.start()
        await wait_for_value(lambda: not writer.degraded, timeout=5.0)
        assert writer.replayed == 1
    finally:
        await writer.close()
        await client.aclose()
        server.kill()


@pytest.mark.parametrize(
    "bounds",
    [{"timeout": 0}, {"timeout": 1.0, "max_backoff": -1.0}, {"timeout": 1.0, "batch": 0},
     {"timeout": 1.0, "probe_interval": 0.0}, {"timeout": True}],
)  # fmt: skip
def test_a_writer_policy_refuses_a_bound_that_would_spin_or_fail_every_write(
    bounds: dict[str, Any],
) -> None:
    with pytest.raises(ValueError, match="must be a positive"):
        WriterPolicy(**bounds)
