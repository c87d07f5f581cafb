"""Outbox, the store: order, bounds, persistence, compaction, crash safety, dead letters."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jarvismem import defaults
from jarvismem.backends.outbox.store import COMPACT_MIN_BYTES, Outbox
from jarvismem.errors import InvalidPayloadError
from tests.backends.outbox.conftest import OpenOutbox, append_raw, file_size, pending_ids
from tests.conftest import ThreadHops

REPO = Path(__file__).resolve().parents[3]

# --- order, acks, reopening ---------------------------------------------------------------


async def test_peek_returns_records_oldest_first(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    for i in range(5):
        assert await ob.put({"i": i})
    pending = await ob.peek(3)
    assert [rec["i"] for _, rec in pending] == [0, 1, 2]
    assert [seq for seq, _ in pending] == sorted(seq for seq, _ in pending)
    assert len(ob) == 5


async def test_ack_removes_delivered_prefix(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    for i in range(4):
        await ob.put({"i": i})
    seqs = [seq for seq, _ in await ob.peek(2)]
    await ob.ack(seqs[-1])
    assert await pending_ids(ob) == [2, 3]
    assert len(ob) == 2


async def test_reopen_resumes_pending_in_order(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    for i in range(6):
        await ob.put({"i": i})
    await ob.ack((await ob.peek(1))[0][0])
    await ob.close()
    again = open_outbox()
    assert len(again) == 0  # construction does no I/O
    assert not again.loaded
    assert await again.load() == 5
    assert again.loaded
    assert len(again) == 5
    assert await pending_ids(again) == [1, 2, 3, 4, 5]


async def test_sequence_numbers_keep_growing_after_compaction(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    await ob.put({"i": 0})
    [(first, _)] = await ob.peek()
    await ob.ack(first)
    await ob.put({"i": 1})
    [(second, _)] = await ob.peek()
    assert second > first


async def test_two_outboxes_on_one_path_interleave_safely(open_outbox: OpenOutbox) -> None:
    a, b = open_outbox(), open_outbox()
    await asyncio.gather(*(ob.put({"i": i}) for i in range(40) for ob in [(a, b)[i % 2]]))
    ids = await pending_ids(a)
    assert sorted(ids) == list(range(40))
    assert await pending_ids(b) == ids


async def test_stale_sees_a_peers_append(open_outbox: OpenOutbox, outbox_path: Path) -> None:
    ob = open_outbox()
    assert ob.stale()  # never read: stale by definition
    await ob.put({"i": 0})
    await asyncio.sleep(0)  # a new turn of the loop: the file is looked at again
    assert not ob.stale()
    append_raw(outbox_path, b'{"seq":99,"rec":{"i":99}}\n')
    await asyncio.sleep(0)
    assert ob.stale()
    assert await ob.refresh() == 2
    assert await pending_ids(ob) == [0, 99]


class _StatCounter:
    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = os.stat
        target = os.fspath(path.resolve())

        def counting(p: object, *args: object, **kwargs: object) -> os.stat_result:
            if os.fspath(p) == target:  # type: ignore[arg-type]
                self.calls += 1
            return real(p, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "stat", counting)


async def test_stale_looks_once_per_turn_of_the_loop(
    open_outbox: OpenOutbox, outbox_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ob = open_outbox()  # one workflow's writer: every agent of it writes through it
    await ob.put({"i": 0})
    await asyncio.sleep(0)
    stats = _StatCounter(outbox_path, monkeypatch)
    # 64 agents' writes ready in one turn: one stat between them.
    assert not any(ob.stale() for _ in range(64))
    assert stats.calls == 1
    await asyncio.sleep(0)
    assert not ob.stale()
    assert stats.calls == 2


async def test_a_peers_append_in_the_same_turn_is_seen_at_the_next(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    ob = open_outbox()
    await ob.put({"i": 0})
    await asyncio.sleep(0)
    assert not ob.stale()
    append_raw(outbox_path, b'{"seq":99,"rec":{"i":99}}\n')
    # Concurrent with this turn's writes, so as good as not yet happened...
    assert not ob.stale()
    await asyncio.sleep(0)
    assert ob.stale()  # ...and seen from the next turn on


async def test_a_peers_append_we_heard_of_is_always_seen(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    # The promise the once-per-turn look keeps: a peer that appends and then tells
    # us (any I/O: here a socket) is seen, however recently we looked.
    ob = open_outbox()
    await ob.put({"i": 0})
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    try:
        for n in range(20):
            assert not ob.stale()  # looked at in this turn, found unchanged

            def peer(n: int = n) -> None:
                append_raw(outbox_path, b'{"seq":%d,"rec":{"i":%d}}\n' % (100 + n, 100 + n))
                theirs.sendall(b"x")

            await asyncio.to_thread(peer)
            assert await reader.readexactly(1) == b"x"
            assert ob.stale(), n
            await ob.refresh()
    finally:
        writer.close()
        theirs.close()
    assert await pending_ids(ob) == [0, *range(100, 120)]


def test_a_loop_closed_after_a_look_is_not_kept_alive(tmp_path: Path) -> None:
    # stale() in a loop's last turn: its clearing callback never runs. The outbox's
    # shared state must not keep that loop (and what its pending callbacks hold) alive.
    import gc
    import weakref

    path = tmp_path / "o.jsonl"
    box = Outbox(path)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(box.put({"i": 0}))
    looked: list[bool] = []

    def last_turn(running: asyncio.AbstractEventLoop) -> None:
        looked.append(box.stale())
        running.stop()  # the turn ends the loop: callbacks it scheduled never run

    loop.call_soon(last_turn, loop)
    loop.run_forever()
    assert looked == [False]
    assert box._state.unchanged_in is not None  # looked, and the mark was never cleared
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None

    async def later() -> bool:
        append_raw(path, b'{"seq":99,"rec":{"i":99}}\n')
        return box.stale()

    assert asyncio.run(later())  # a new loop looks for itself
    asyncio.run(box.close())


def test_stale_without_a_running_loop_looks_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "o.jsonl"

    async def prepare() -> Outbox:
        box = Outbox(path)
        await box.put({"i": 0})
        return box

    ob = asyncio.run(prepare())
    stats = _StatCounter(path, monkeypatch)
    assert not ob.stale() and not ob.stale()
    assert stats.calls == 2
    append_raw(path, b'{"seq":99,"rec":{"i":99}}\n')
    assert ob.stale()
    asyncio.run(ob.close())


async def test_each_event_loop_looks_for_itself(open_outbox: OpenOutbox, outbox_path: Path) -> None:
    # Two loops (threads) on one outbox: one loop's "unchanged" is not the other's.
    ob = open_outbox()
    await ob.put({"i": 0})
    await asyncio.sleep(0)
    assert not ob.stale()  # this loop looked, in this turn
    append_raw(outbox_path, b'{"seq":99,"rec":{"i":99}}\n')

    def other_loop() -> bool:
        async def check() -> bool:
            return ob.stale()

        return asyncio.run(check())

    assert await asyncio.to_thread(other_loop)


async def test_a_closed_outbox_refuses_use(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    await ob.close()
    await ob.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await ob.put({"i": 0})


# --- bounds --------------------------------------------------------------------------------------


def test_the_entry_bound_defaults_to_the_shared_default() -> None:
    default = inspect.signature(Outbox).parameters["max_entries"].default
    assert default == defaults.OUTBOX_MAX_ENTRIES


@pytest.mark.parametrize("kwargs", [{"max_entries": 0}, {"max_bytes": 0}])
def test_bounds_below_one_are_refused(tmp_path: Path, kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Outbox(tmp_path / "o.jsonl", **kwargs)


async def test_full_outbox_refuses_and_counts_drops(open_outbox: OpenOutbox) -> None:
    ob = open_outbox(max_entries=3)
    results = [await ob.put({"i": i}) for i in range(5)]
    assert results == [True, True, True, False, False]
    assert ob.dropped == 2
    assert await pending_ids(ob) == [0, 1, 2]


async def test_byte_bound_refuses_and_counts_drops(open_outbox: OpenOutbox) -> None:
    ob = open_outbox(max_bytes=2_000)
    results = [await ob.put({"blob": "x" * 500}) for _ in range(6)]
    assert results == [True, True, True, False, False, False]
    assert ob.dropped == 3 and ob.pending_bytes <= 2_000


async def test_dropped_count_survives_restart(open_outbox: OpenOutbox) -> None:
    ob = open_outbox(max_entries=1)
    await ob.put({"i": 0})
    await ob.put({"i": 1})
    await ob.close()
    again = open_outbox(max_entries=1)
    await again.load()
    assert again.dropped == 1


async def test_a_callers_own_drop_count_is_persisted_on_close(open_outbox: OpenOutbox) -> None:
    ob = open_outbox()
    await ob.load()
    ob.dropped += 4
    await ob.close()
    again = open_outbox()
    await again.load()
    assert again.dropped == 4


async def test_full_outbox_logs_one_warning_per_burst(
    open_outbox: OpenOutbox, caplog: pytest.LogCaptureFixture
) -> None:
    ob = open_outbox(max_entries=1)
    await ob.put({"i": 0})
    with caplog.at_level("WARNING", logger="jarvismem.backends.outbox"):
        for i in range(5):
            await ob.put({"i": i})
    assert sum("is full" in r.getMessage() for r in caplog.records) == 1


async def test_cursor_file_holds_acked_and_dropped(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    ob = open_outbox(max_entries=2)
    for i in range(3):
        await ob.put({"i": i})
    await ob.ack((await ob.peek(1))[0][0])
    cursor = json.loads(outbox_path.with_name("o.jsonl.cursor").read_text())
    assert cursor["acked"] == 1 and cursor["dropped"] == 1


# --- compaction ------------------------------------------------------------------------------


async def test_drained_outbox_file_is_compacted(open_outbox: OpenOutbox, outbox_path: Path) -> None:
    ob = open_outbox()
    for i in range(3):
        await ob.put({"i": i})
    await ob.ack((await ob.peek(10))[-1][0])
    assert file_size(outbox_path) == 0
    await ob.put({"i": 9})
    assert await pending_ids(ob) == [9]


async def test_a_mostly_delivered_large_file_is_rewritten(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    ob = open_outbox()
    pad = "x" * 10_000
    count = COMPACT_MIN_BYTES // 10_000 + 10
    for i in range(count):
        await ob.put({"i": i, "pad": pad})
    pending = await ob.peek(count)
    await ob.ack(pending[-3][0])  # all but the last two delivered
    assert file_size(outbox_path) < 3 * 10_100
    assert await pending_ids(ob) == [count - 2, count - 1]
    peer = open_outbox()  # another reader follows the rewrite (its generation changed)
    assert await pending_ids(peer) == [count - 2, count - 1]


async def test_outboxes_sharing_a_destination_file_record_it_at_once_without_failing(
    open_outbox: OpenOutbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every workflow's outbox of one backend records the same destination file: their
    # first puts, in two worker threads at once, both write and rename it. One
    # temporary name for both would leave the second rename without its file.
    where = tmp_path / "destination.json"
    info = {"kind": "redis", "address": "redis:127.0.0.1:6379/0"}
    boxes = [
        open_outbox(tmp_path / f"wf{n}.jsonl", destination_file=where, destination_info=info)
        for n in range(2)
    ]
    both_written = threading.Barrier(2, timeout=5)
    real_replace = os.replace

    def replace_together(src: Any, dst: Any) -> None:
        if Path(dst) == where:
            both_written.wait()  # each wrote its temporary file; now both rename
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_together)
    assert await asyncio.gather(*(box.put({"i": n}) for n, box in enumerate(boxes))) == [
        True,
        True,
    ]
    assert json.loads(where.read_text())["address"] == info["address"]
    assert [await pending_ids(box) for box in boxes] == [[0], [1]]
    assert [n for n in await asyncio.to_thread(os.listdir, tmp_path) if n.endswith(".tmp")] == []


async def test_an_append_by_another_object_waits_for_a_compaction_of_the_same_path(
    open_outbox: OpenOutbox, outbox_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two objects of one path in one process: each locks its own descriptor, so the
    # file lock excludes them as it does two processes. An append made between the
    # copy of the tail and the rename over the data file would be lost.
    compactor, appender = open_outbox(), open_outbox()
    pad = "x" * 10_000
    count = COMPACT_MIN_BYTES // 10_000 + 10
    for i in range(count):
        await compactor.put({"i": i, "pad": pad})
    assert await appender.load() == count
    pending = await compactor.peek(count)
    in_rewrite = threading.Event()
    real_replace = os.replace

    def slow_replace(src: Any, dst: Any) -> None:
        if Path(dst) == outbox_path.resolve() and not in_rewrite.is_set():
            in_rewrite.set()  # the tail is copied; the rename is next
            time.sleep(0.5)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", slow_replace)
    compaction = asyncio.ensure_future(compactor.ack(pending[-3][0]))
    assert await asyncio.to_thread(in_rewrite.wait, 5)
    append = asyncio.ensure_future(appender.put({"i": "late"}))
    await asyncio.sleep(0.2)
    assert not append.done()  # waits for the compaction's file lock
    await compaction
    assert await append
    assert file_size(outbox_path) < 4 * 10_100  # it was rewritten
    expected = [count - 2, count - 1, "late"]
    assert await pending_ids(compactor) == expected
    assert await pending_ids(open_outbox()) == expected


# --- damaged files --------------------------------------------------------------------------


async def test_torn_last_line_is_skipped_with_warning(
    open_outbox: OpenOutbox, outbox_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ob = open_outbox()
    await ob.put({"i": 0})
    await ob.close()
    append_raw(outbox_path, b'{"seq":2,"rec":{"i":')  # a writer killed mid-line
    with caplog.at_level("WARNING", logger="jarvismem.backends.outbox"):
        again = open_outbox()
        await again.load()
    assert any("torn" in r.getMessage() for r in caplog.records)
    await again.put({"i": 1})
    assert await pending_ids(again) == [0, 1]


async def test_corrupt_middle_line_is_skipped(open_outbox: OpenOutbox, outbox_path: Path) -> None:
    ob = open_outbox()
    await ob.put({"i": 0})
    await ob.close()
    append_raw(outbox_path, b"not json at all\n")
    again = open_outbox()
    await again.put({"i": 1})
    assert await pending_ids(again) == [0, 1]


async def test_an_unreadable_cursor_replays_from_the_start(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    ob = open_outbox()
    for i in range(3):
        await ob.put({"i": i})
    await ob.ack((await ob.peek(1))[0][0])
    await ob.close()
    outbox_path.with_name("o.jsonl.cursor").write_text("{garbage")
    again = open_outbox()
    # At-least-once: the delivered record is replayed again rather than risk losing any.
    assert await pending_ids(again) == [0, 1, 2]


async def test_non_json_record_refused_before_writing(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    ob = open_outbox()
    with pytest.raises(InvalidPayloadError):
        await ob.put({"when": object()})
    assert len(ob) == 0
    assert file_size(outbox_path) == 0


async def test_records_for_another_destination_stay_pending_marked_until_refused(
    open_outbox: OpenOutbox,
) -> None:
    # Pending like any record (a compaction never loses it), marked so that its
    # deliverer refuses it (tests/backends/outbox/test_deliver.py), never applies it.
    theirs = open_outbox(destination="aaaa")
    await theirs.put({"i": 0})
    await theirs.close()
    mine = open_outbox(destination="bbbb")
    await mine.put({"i": 1})
    assert await pending_ids(mine) == [0, 1]
    (first, _), (second, _) = await mine.peek(2)
    assert mine.misdirected_to(first) == "aaaa" and mine.misdirected_to(second) is None
    await mine.dead_letter(first, {"i": 0}, "MisdirectedRecordError: ...", misdirected=True)
    assert mine.foreign == 1 and mine.dead == 1 and await pending_ids(mine) == [1]


# --- dead letters -----------------------------------------------------------------------------


async def test_dead_letter_moves_the_head_record_out_of_the_queue(
    open_outbox: OpenOutbox, outbox_path: Path
) -> None:
    ob = open_outbox()
    for i in range(3):
        await ob.put({"i": i})
    [(head, record)] = await ob.peek(1)
    await ob.dead_letter(head, record, "WRONGTYPE")
    assert await pending_ids(ob) == [1, 2]
    assert ob.dead == 1
    [line] = outbox_path.with_name("o.jsonl.dead").read_text().splitlines()
    assert json.loads(line)["rec"] == {"i": 0} and json.loads(line)["reason"] == "WRONGTYPE"
    await ob.close()
    again = open_outbox()
    await again.load()
    assert again.dead == 1  # persisted with the cursor


async def test_a_live_refusal_is_dead_lettered_without_touching_the_queue(
    open_outbox: OpenOutbox,
) -> None:
    ob = open_outbox()
    await ob.put({"i": 0})
    await ob.dead_letter(None, {"i": 9}, "refused")
    assert await pending_ids(ob) == [0]
    assert ob.dead == 1


# --- crash safety and the event loop ---------------------------------------------------------


def _child_script(path: Path, record_size: int) -> str:
    return textwrap.dedent(
        f"""
        import asyncio, sys
        from pathlib import Path
        from jarvismem.backends.outbox import Outbox

        async def main():
            ob = Outbox(Path({str(path)!r}))
            i = 0
            while True:
                await ob.put({{"i": i, "pad": "x" * {record_size}}})
                sys.stdout.write(f"{{i}}\\n")
                sys.stdout.flush()
                i += 1

        asyncio.run(main())
        """
    )


def _run_and_kill(path: Path, after: int, record_size: int) -> list[int]:
    """Run a child that puts records forever; SIGKILL it; return the puts it saw return."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _child_script(path, record_size)],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    returned: list[int] = []
    try:
        for line in proc.stdout:
            returned.append(int(line))
            if len(returned) >= after:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    return returned


@pytest.mark.parametrize("record_size", [10, 200_000])
async def test_sigkill_mid_puts_keeps_every_returned_put_exactly_once(
    open_outbox: OpenOutbox, outbox_path: Path, record_size: int
) -> None:
    returned = await asyncio.to_thread(_run_and_kill, outbox_path, 30, record_size)
    ob = open_outbox()
    ids = await pending_ids(ob)
    assert len(ids) == len(set(ids))
    assert ids == sorted(ids)
    assert set(returned) <= set(ids)
    await ob.put({"i": -1})
    assert (await pending_ids(ob))[-1] == -1


async def test_sequence_holds_across_processes(open_outbox: OpenOutbox, outbox_path: Path) -> None:
    await asyncio.to_thread(_run_and_kill, outbox_path, 5, 10)
    ob = open_outbox()
    before = await ob.peek(10_000)
    await ob.put({"i": 1000})
    after = await ob.peek(10_000)
    assert after[:-1] == before
    assert after[-1][0] > before[-1][0]


async def test_small_puts_skip_the_thread_and_sequential_puts_keep_their_order(
    open_outbox: OpenOutbox, thread_hops: ThreadHops
) -> None:
    box = open_outbox()
    thread_hops.count = 0
    big = "x" * (defaults.INLINE_WRITE_MAX_BYTES + 1)  # over the inline limit: always the thread
    for i in range(10):  # sequential: small ones inline, every third one threaded
        assert await box.put({"i": i, "pad": big if i % 3 == 0 else ""})
    assert thread_hops.count == 4
    # Concurrent: a big put in flight makes every later put queue behind it.
    results = await asyncio.gather(
        *(box.put({"i": i, "pad": big if i == 12 else ""}) for i in range(10, 30))
    )
    assert all(results)
    assert thread_hops.count < 30
    order = [rec["i"] for _, rec in await box.peek(100)]
    # Sequential puts keep their order; concurrent ones are all there (their
    # relative order is not defined: they were made at the same time).
    assert order[:10] == list(range(10))
    assert sorted(order[10:]) == list(range(10, 30))
    await box.close()
    reopened = open_outbox()
    assert [rec["i"] for _, rec in await reopened.peek(100)] == order


async def test_fsync_puts_always_take_the_thread(
    open_outbox: OpenOutbox, thread_hops: ThreadHops
) -> None:
    box = open_outbox(fsync=True)
    await box.put({"i": 0})
    thread_hops.count = 0
    for i in range(1, 4):
        await box.put({"i": i})
    assert thread_hops.count == 3


# --- reads create no files ----------------------------------------------------------


async def test_loading_an_outbox_that_never_held_a_record_creates_no_file(tmp_path: Path) -> None:
    folder = tmp_path / "outbox" / "default" / "redis-x"
    ob = Outbox(folder / "wf.jsonl")
    try:
        assert await ob.load() == 0
        assert await ob.refresh() == 0
        assert not ob.stale()
        assert await ob.peek(10) == []
        # Before: the load took the file lock, creating the folder and wf.jsonl.lock
        # (for every workflow a read command merely looked at).
        assert not (tmp_path / "outbox").exists()
    finally:
        await ob.close()
    assert not (tmp_path / "outbox").exists()


async def test_an_outbox_loaded_empty_sees_records_a_peer_appends_later(tmp_path: Path) -> None:
    path = tmp_path / "o" / "wf.jsonl"
    reader = Outbox(path)
    assert await reader.load() == 0
    writer_script = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from jarvismem.backends.outbox import Outbox\n"
        "async def main():\n"
        f"    ob = Outbox(Path({str(path)!r}))\n"
        "    await ob.put({'n': 1})\n"
        "    await ob.close()\n"
        "asyncio.run(main())\n"
    )
    await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", writer_script], check=True, timeout=60
    )
    try:
        assert reader.stale()
        assert await reader.refresh() == 1
        assert [r for _, r in await reader.peek(5)] == [{"n": 1}]
    finally:
        await reader.close()


async def test_the_first_put_after_an_empty_load_creates_the_folder(tmp_path: Path) -> None:
    ob = Outbox(tmp_path / "new" / "wf.jsonl")
    try:
        await ob.load()
        assert await ob.put({"n": 1})
        assert len(ob) == 1 and (tmp_path / "new" / "wf.jsonl").exists()
    finally:
        await ob.close()
