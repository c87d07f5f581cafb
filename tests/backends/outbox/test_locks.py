"""The per-path registry, the file lock and the delivery claim."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from jarvismem.backends.outbox import locks
from jarvismem.backends.outbox.locks import (
    Locked,
    acquire_shared,
    release_claim,
    release_shared,
    try_claim,
    try_lock_inline,
    unlock_inline,
)


def test_one_shared_state_per_path_until_its_last_user_leaves(tmp_path: Path) -> None:
    first = acquire_shared(tmp_path / "o.jsonl")
    second = acquire_shared(tmp_path / "sub" / ".." / "o.jsonl")  # same file, other spelling
    assert second is first and first.users == 2
    release_shared(first)
    assert acquire_shared(tmp_path / "o.jsonl") is first
    release_shared(first)
    release_shared(first)
    fresh = acquire_shared(tmp_path / "o.jsonl")
    assert fresh is not first
    release_shared(fresh)


def test_locked_makes_the_folder_and_gives_the_descriptor_back_when_idle(
    tmp_path: Path,
) -> None:
    shared = acquire_shared(tmp_path / "new" / "o.jsonl")
    with Locked(shared) as s:
        assert s.lock_fd is not None
        assert (tmp_path / "new" / "o.jsonl.lock").exists()
    assert shared.lock_fd is None  # no pending records: no descriptor held
    shared.index.append((1, 0, 10))
    with Locked(shared):
        pass
    assert shared.lock_fd is not None  # records pending: kept for the next operation
    release_shared(shared)
    assert shared.lock_fd is None


def test_the_inline_lock_never_waits(tmp_path: Path) -> None:
    shared = acquire_shared(tmp_path / "o.jsonl")
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
    release_shared(shared)


def test_the_claim_is_exclusive_and_not_reentrant(tmp_path: Path) -> None:
    shared = acquire_shared(tmp_path / "o.jsonl")
    assert try_claim(shared)
    assert not try_claim(shared)
    assert (tmp_path / "o.jsonl.deliver.lock").exists()
    release_claim(shared)
    release_claim(shared)  # idempotent
    assert try_claim(shared)
    release_claim(shared)
    release_shared(shared)


def test_a_claim_held_by_another_descriptor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "o.jsonl.deliver.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # another process's claim
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    shared = acquire_shared(tmp_path / "o.jsonl")
    try:
        assert not try_claim(shared)
        assert shared.claim_fd is None
    finally:
        os.close(fd)
    assert try_claim(shared)
    release_claim(shared)
    release_shared(shared)


def test_a_finalizer_releasing_during_an_acquire_does_not_deadlock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An Outbox's weakref finalizer calls release_shared. The garbage collector may
    # run it at any allocation, including inside acquire_shared while the registry
    # lock is held (seen: a test run hung in release_shared called from
    # acquire_shared, from Outbox.__init__). Simulated: the allocation of a new
    # state runs the release of another path's last user.
    dying = acquire_shared(tmp_path / "dying.jsonl")
    real_state = locks.SharedState

    def state_with_a_collection(*args: object, **kwargs: object) -> object:
        release_shared(dying)  # what the collector would run here
        return real_state(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(locks, "SharedState", state_with_a_collection)
    got: list[object] = []
    worker = threading.Thread(
        target=lambda: got.append(acquire_shared(tmp_path / "new.jsonl")), daemon=True
    )
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "acquire_shared deadlocked on its own registry lock"
    assert len(got) == 1
    monkeypatch.setattr(locks, "SharedState", real_state)
    release_shared(got[0])  # type: ignore[arg-type]
    # The dying path was forgotten: a new user gets a fresh state.
    fresh = acquire_shared(tmp_path / "dying.jsonl")
    assert fresh is not dying
    release_shared(fresh)
