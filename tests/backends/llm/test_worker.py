"""The summary worker: the same summaries as in-process, off the event loop, and never
a lost compaction when the worker dies, stalls, cannot start or is forked over."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import random
import signal
import sys
import time
from collections.abc import Iterator

import pytest

from jarvismem.backends.llm import ExtractiveSummarizer, create_summarizer
from jarvismem.backends.llm.worker import SummaryWorker, WorkerUnavailable, default_worker
from jarvismem.settings import Settings

WORDS = "deploy rollback cache shard latency budget invoice parser retry queue vendor".split()


def _text(seed: int, lines: int = 60) -> str:
    rng = random.Random(seed)
    out = []
    for n in range(lines):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 40)))
        out.append(f"[turn {seed}-{n}] {words}. Then {rng.choice(WORDS)} — ünïcode ✓.")
    return "\n".join(out)


# The start of a fake worker: it says it is ready like the real one, then does what
# the test appends (misbehaves).
FAKE_READY = (
    "import json, os, struct, sys\n"
    "out = sys.stdout.buffer\n"
    "def send(body):\n"
    "    data = json.dumps(body).encode()\n"
    "    out.write(struct.pack('>I', len(data)) + data); out.flush()\n"
    "send({'ready': os.getpid()})\n"
)


def fake_worker(then: str) -> SummaryWorker:
    """A worker whose process is :data:`FAKE_READY` followed by ``then``."""
    return SummaryWorker(command=[sys.executable, "-c", FAKE_READY + then])


@pytest.fixture
def worker() -> Iterator[SummaryWorker]:
    w = SummaryWorker(call_timeout=10.0, restart_backoff=30.0)
    yield w
    w.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): look at its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_worker_gives_the_in_process_summary(worker: SummaryWorker) -> None:
    local = ExtractiveSummarizer()
    previous = None
    for seed in range(6):
        text = _text(seed)
        for max_chars in (200, 1500, 4000):
            want = local.summarize_now(text, previous_summary=previous, max_chars=max_chars)
            assert worker.summarize([text], previous, max_chars) == want
        previous = local.summarize_now(text, previous_summary=previous, max_chars=1500)
    assert worker.pid is not None and worker.pid != os.getpid()
    assert worker.starts == 1  # one process served every call


async def test_offloaded_summary_is_not_computed_on_the_loop(
    worker: SummaryWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _text(1)
    want = ExtractiveSummarizer().summarize_now(text, max_chars=1000)

    def no_local_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("summarized in-process")

    monkeypatch.setattr(ExtractiveSummarizer, "_steps", no_local_work)
    summarizer = ExtractiveSummarizer(offload=True, worker=worker)
    assert await summarizer.summarize(text, max_chars=1000) == want


async def test_a_killed_worker_is_replaced_and_nothing_is_lost(
    worker: SummaryWorker, caplog: pytest.LogCaptureFixture
) -> None:
    summarizer = ExtractiveSummarizer(offload=True, worker=worker)
    text = _text(2)
    want = ExtractiveSummarizer().summarize_now(text, max_chars=800)
    assert await summarizer.summarize(text, max_chars=800) == want
    first = worker.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    for _ in range(500):  # the kill is asynchronous: wait until it took effect
        if not _alive(first):
            break
        await asyncio.sleep(0.01)
    with caplog.at_level(logging.WARNING):
        assert await summarizer.summarize(text, max_chars=800) == want
    assert worker.pid not in (None, first)
    assert worker.starts == 2
    assert "unavailable" not in caplog.text  # replaced in the same call, not skipped


@pytest.mark.serial  # bounds a wall-clock time, which a loaded machine stretches
async def test_a_stalled_worker_times_out_is_killed_and_the_loop_summarizes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = SummaryWorker(call_timeout=0.5)
    try:
        worker.summarize(["warm up. the worker starts."], None, 100)
        pid = worker.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        summarizer = ExtractiveSummarizer(offload=True, worker=worker)
        text = _text(3, lines=400)  # larger than a pipe buffer: the write stalls too
        want = ExtractiveSummarizer().summarize_now(text, max_chars=900)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING):
            assert await summarizer.summarize(text, max_chars=900) == want
        assert time.monotonic() - started < 10
        assert "summarizing in-process" in caplog.text
        assert not _alive(pid)  # killed, and reaped: no stopped process left behind
        assert worker.pid is None
    finally:
        worker.close()


async def test_a_worker_that_cannot_start_falls_back_and_backs_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = SummaryWorker(command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    summarizer = ExtractiveSummarizer(offload=True, worker=worker)
    text = _text(4)
    want = ExtractiveSummarizer().summarize_now(text, max_chars=700)
    with caplog.at_level(logging.WARNING):
        assert await summarizer.summarize(text, max_chars=700) == want
    assert "summary worker unavailable" in caplog.text
    assert worker.starts == 1 and not worker.available()
    # Within the back-off the worker is not tried again (no process per compaction).
    assert await summarizer.summarize(text, max_chars=700) == want
    assert worker.starts == 1
    with pytest.raises(WorkerUnavailable, match="recently"):
        worker.summarize([text], None, 700)


async def test_a_worker_answering_garbage_is_killed_and_the_loop_summarizes() -> None:
    # A child that says it is ready, then answers a request with a non-frame.
    worker = fake_worker(
        "sys.stdin.buffer.read(4)\n"
        "out.write(struct.pack('>I', 5) + b'nope!'); out.flush()\n"
        "sys.stdin.buffer.read()\n"
    )
    try:
        summarizer = ExtractiveSummarizer(offload=True, worker=worker)
        text = _text(5)
        want = ExtractiveSummarizer().summarize_now(text, max_chars=600)
        assert await summarizer.summarize(text, max_chars=600) == want
        assert worker.pid is None
    finally:
        worker.close()


def test_an_error_in_the_worker_is_raised_the_same_in_process(worker: SummaryWorker) -> None:
    with pytest.raises(WorkerUnavailable, match="failed"):
        worker.summarize(["text"], None, 0)  # max_chars < 1: the summarizer refuses it
    assert worker.pid is not None  # the worker survives a refused request


async def test_invalid_max_chars_is_refused_before_the_worker(worker: SummaryWorker) -> None:
    summarizer = ExtractiveSummarizer(offload=True, worker=worker)
    with pytest.raises(Exception, match="max_chars must be >= 1"):
        await summarizer.summarize("text", max_chars=0)
    assert worker.starts == 0


def _child_summary(queue: multiprocessing.Queue[object], text: str, parent_pid: int) -> None:
    worker = default_worker()
    queue.put((worker.summarize([text], None, 500), worker.pid, parent_pid))


def test_a_forked_process_gets_its_own_worker() -> None:
    # A second process forked while the first one's worker runs must not talk to
    # that worker over inherited pipes (replies would cross).
    worker = default_worker()
    text = _text(6)
    want = ExtractiveSummarizer().summarize_now(text, max_chars=500)
    assert worker.summarize([text], None, 500) == want
    parent_worker = worker.pid
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[object] = ctx.Queue()
    procs = [ctx.Process(target=_child_summary, args=(queue, text, os.getpid())) for _ in range(3)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    for summary, child_worker, _ in results:
        assert summary == want
        assert child_worker not in (None, parent_worker)
    # The parent's worker still answers, and correctly.
    assert worker.summarize([text], None, 500) == want
    assert worker.pid == parent_worker


def test_close_stops_the_worker(worker: SummaryWorker) -> None:
    worker.summarize(["start it."], None, 100)
    pid = worker.pid
    assert pid is not None
    worker.close()
    assert worker.pid is None and not _alive(pid)


def test_the_factory_offloads_unless_told_not_to() -> None:
    default = create_summarizer(Settings(_env_file=None))
    assert isinstance(default, ExtractiveSummarizer) and default.offload
    assert default.worker is default_worker()
    loop = create_summarizer(Settings(_env_file=None, compaction_worker="loop"))
    assert isinstance(loop, ExtractiveSummarizer) and loop.worker is None


def test_a_bad_worker_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="compaction_worker"):
        Settings(_env_file=None, compaction_worker="thread")


def test_the_worker_process_is_small(worker: SummaryWorker) -> None:
    # It loads the extractive summarizer alone, not all of jarvismem.
    pid = worker.start()
    with open(f"/proc/{pid}/status") as f:
        rss_kb = int(f.read().split("VmRSS:")[1].split()[0])
    assert rss_kb < 30_000, rss_kb


async def test_a_worker_dying_mid_call_is_retried_once_then_the_loop_summarizes() -> None:
    # Each worker says it is ready, reads the request's header, and dies.
    worker = fake_worker("sys.stdin.buffer.read(4)\nos._exit(1)\n")
    try:
        summarizer = ExtractiveSummarizer(offload=True, worker=worker)
        text = _text(7)
        want = ExtractiveSummarizer().summarize_now(text, max_chars=600)
        assert await summarizer.summarize(text, max_chars=600) == want
        assert worker.starts == 2  # one retry on a new worker, not a loop of restarts
    finally:
        worker.close()


def test_start_starts_once_and_the_first_summary_reuses_it(worker: SummaryWorker) -> None:
    pid = worker.start()
    assert pid == worker.pid and pid != os.getpid()
    assert worker.start() == pid  # idempotent
    assert worker.summarize(["[turn 1] started early."], None, 100) == "[turn 1] started early."
    assert worker.pid == pid and worker.starts == 1


def test_start_reports_a_worker_that_cannot_start() -> None:
    worker = SummaryWorker(command=[sys.executable, "-c", "pass"])
    with pytest.raises(WorkerUnavailable):
        worker.start()
    assert not worker.available()


def test_a_reply_that_is_not_a_summary_kills_the_worker() -> None:
    worker = fake_worker(
        "size = struct.unpack('>I', sys.stdin.buffer.read(4))[0]\n"
        "sys.stdin.buffer.read(size)\n"
        "send({'ok': ['a list']})\n"
        "sys.stdin.buffer.read()\n"
    )
    try:
        with pytest.raises(WorkerUnavailable, match="unexpected reply"):
            worker.summarize(["one", "two"], None, 100, ("password",))
        assert worker.pid is None
    finally:
        worker.close()


def test_the_worker_redacts_each_text_as_the_redactor_does_before_summarizing(
    worker: SummaryWorker,
) -> None:
    from jarvismem.backends.llm import ExtractiveSummarizer
    from jarvismem.redaction import redactor_for
    from tests.secret_corpus import SECRETS

    texts = [text for _, text, _ in SECRETS]
    names = ("password", "zebra_pin")
    redact = redactor_for(names)
    want = ExtractiveSummarizer().summarize_now(
        "\n".join(redact(t) for t in texts), max_chars=10**6
    )
    got = worker.summarize(texts, None, 10**6, names)
    assert got == want
    assert sum(secret not in got for _, _, secret in SECRETS) > len(SECRETS) // 2


def test_a_string_is_not_a_list_of_texts(worker: SummaryWorker) -> None:
    with pytest.raises(TypeError, match="list of str"):
        worker.summarize("one text", None, 100)  # type: ignore[arg-type]


async def test_waiting_summaries_hold_no_executor_thread(
    worker: SummaryWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Eight workflows compacting at once: one request in the worker at a time, and
    # the others wait on the loop, not each in a thread of the default executor.
    import threading

    inside = 0
    most = 0
    guard = threading.Lock()
    real = worker.summarize

    def counting(text: str, previous: str | None, max_chars: int) -> str:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        try:
            time.sleep(0.02)  # the worker busy: the other callers must wait meanwhile
            return real(text, previous, max_chars)
        finally:
            with guard:
                inside -= 1

    monkeypatch.setattr(worker, "summarize", counting)
    summarizer = ExtractiveSummarizer(offload=True, worker=worker)
    texts = [_text(seed) for seed in range(8)]
    got = await asyncio.gather(*(summarizer.summarize(t, max_chars=500) for t in texts))
    local = ExtractiveSummarizer()
    assert got == [local.summarize_now(t, max_chars=500) for t in texts]
    assert most == 1
