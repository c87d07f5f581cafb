"""The per-object state, the file lock and the delivery claim."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from jarvismem.backends.outbox import Outbox
from jarvismem.backends.outbox.locks import (
    Locked,
    close_state,
    open_state,
    release_claim,
    try_claim,
    try_lock_inline,
    unlock_inline,
)


def test_two_states_of_one_path_exclude_each_other_like_two_processes(tmp_path: Path) -> None:
    # flock belongs to an open file description: each state opens its own, so a
    # second object of the path in this process waits like another process would.
    first = open_state(tmp_path / "o.jsonl")
    second = open_state(tmp_path / "sub" / ".." / "o.jsonl")  # same file, other spelling
    assert second is not first and second.path == first.path
    first.index.append((1, 0, 10))  # records pending: Locked keeps its descriptor
    second.index.append((1, 0, 10))
    with Locked(second):
        pass
    entered = threading.Event()

    def take_second() -> None:
        with Locked(second):
            entered.set()

    with Locked(first):
        assert not try_lock_inline(second)  # the file lock, not just a thread mutex
        thread = threading.Thread(target=take_second)
        thread.start()
        assert not entered.wait(0.3)  # blocked on first's flock
    assert entered.wait(5)
    thread.join()
    assert try_claim(first)
    assert not try_claim(second)  # one deliverer per path, whichever object asks
    release_claim(first)
    assert try_claim(second)
    close_state(first)
    close_state(second)
    assert first.lock_fd is None and second.lock_fd is None and second.claim_fd is None


def test_locked_makes_the_folder_and_gives_the_descriptor_back_when_idle(
    tmp_path: Path,
) -> None:
    shared = open_state(tmp_path / "new" / "o.jsonl")
    with Locked(shared) as s:
        assert s.lock_fd is not None
        assert (tmp_path / "new" / "o.jsonl.lock").exists()
    assert shared.lock_fd is None  # no pending records: no descriptor held
    shared.index.append((1, 0, 10))
    with Locked(shared):
        pass
    assert shared.lock_fd is not None  # records pending: kept for the next operation
    close_state(shared)
    assert shared.lock_fd is None


def test_the_inline_lock_never_waits(tmp_path: Path) -> None:
    shared = open_state(tmp_path / "o.jsonl")
    assert not try_lock_inline(shared)  # no lock file yet: the first use is a thread's
    shared.index.append((1, 0, 10))  # keep the descriptor open after Locked
    with Locked(shared):
        pass
    assert try_lock_inline(shared)
    unlock_inline(shared)
    held = threading.Event()
    done = threading.Event()

    def holder() -> None:
        with Locked(shared):
            held.set()
            done.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(5)
    assert not try_lock_inline(shared)  # refused at once, not after the holder is done
    done.set()
    thread.join()
    assert try_lock_inline(shared)
    unlock_inline(shared)
    close_state(shared)


def test_the_claim_is_exclusive_and_not_reentrant(tmp_path: Path) -> None:
    shared = open_state(tmp_path / "o.jsonl")
    assert try_claim(shared)
    assert not try_claim(shared)
    assert (tmp_path / "o.jsonl.deliver.lock").exists()
    release_claim(shared)
    release_claim(shared)  # idempotent
    assert try_claim(shared)
    release_claim(shared)
    close_state(shared)


def test_a_claim_held_by_another_descriptor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "o.jsonl.deliver.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # another process's claim
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    shared = open_state(tmp_path / "o.jsonl")
    try:
        assert not try_claim(shared)
        assert shared.claim_fd is None
    finally:
        os.close(fd)
    assert try_claim(shared)
    release_claim(shared)
    close_state(shared)


async def test_an_outbox_never_closed_gives_its_descriptors_back(tmp_path: Path) -> None:
    import gc

    box = Outbox(tmp_path / "o.jsonl")
    await box.put({"i": 0})  # a pending record: the lock file stays open
    assert box.try_claim_delivery()
    fds = (box._state.lock_fd, box._state.claim_fd)
    assert None not in fds
    del box
    gc.collect()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)  # type: ignore[arg-type]
    claim = os.open(tmp_path / "o.jsonl.deliver.lock", os.O_RDWR)
    try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
    finally:
        os.close(claim)
