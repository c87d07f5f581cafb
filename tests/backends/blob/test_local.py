"""Local blob backend: path containment, crash safety and multi-process writers."""

from __future__ import annotations

import asyncio
import errno
import multiprocessing
import os
import random
import signal
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.blob import create_blob_storage
from jarvismem.backends.blob.local import LocalBlobStorage, translate_os_error
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    BlobError,
    BlobNotFoundError,
    BlobPreconditionFailedError,
    BlobRejectedError,
    BlobUnavailableError,
    InvalidBlobPathError,
)
from jarvismem.settings import load_settings
from tests.conftest import ThreadHops

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[LocalBlobStorage]:
    store = LocalBlobStorage(tmp_path / "root")
    yield store
    await store.close()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the root holding a file that must stay untouched."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_bytes(b"top secret")
    return folder


def _escaping_calls(storage: LocalBlobStorage) -> list[tuple[str, Callable[[str], Awaitable[Any]]]]:
    return [
        ("read", storage.read),
        ("read_versioned", storage.read_versioned),
        ("tail", lambda p: storage.tail(p, 4)),
        ("size", storage.size),
        ("exists", storage.exists),
        ("write", lambda p: storage.write(p, b"overwritten")),
        ("append", lambda p: storage.append(p, b"appended")),
        ("delete", storage.delete),
    ]


def _names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


async def _assert_refused(method: str, call: Callable[[str], Awaitable[Any]], path: str) -> None:
    try:
        await call(path)
    except InvalidBlobPathError:
        return
    pytest.fail(f"{method}({path!r}) followed a symlink out of the root")


# --- containment ---------------------------------------------------------------------------


async def test_a_symlinked_folder_pointing_outside_the_root_is_refused(
    storage: LocalBlobStorage, tmp_path: Path, outside: Path
) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "escape").symlink_to(outside, target_is_directory=True)
    for method, call in _escaping_calls(storage):
        for path in ("escape/secret.txt", "escape/new.txt"):
            await _assert_refused(method, call, path)
    assert _names(outside) == ["secret.txt"]
    assert (outside / "secret.txt").read_bytes() == b"top secret"


async def test_a_symlinked_file_pointing_outside_the_root_is_refused(
    storage: LocalBlobStorage, tmp_path: Path, outside: Path
) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link.txt").symlink_to(outside / "secret.txt")
    for method, call in _escaping_calls(storage):
        await _assert_refused(method, call, "link.txt")
    assert (outside / "secret.txt").read_bytes() == b"top secret"


async def test_a_hot_file_swapped_for_an_outside_symlink_is_refused(
    storage: LocalBlobStorage, tmp_path: Path, outside: Path
) -> None:
    # The first appends take the thread path, the next ones the inline path
    # with its cached target; swapping the file for a symlink must not let
    # either follow it.
    for _ in range(3):
        await storage.append("hot.jsonl", b"line\n")
    (tmp_path / "root" / "hot.jsonl").unlink()
    (tmp_path / "root" / "hot.jsonl").symlink_to(outside / "secret.txt")
    await _assert_refused("append", lambda p: storage.append(p, b"appended"), "hot.jsonl")
    assert (outside / "secret.txt").read_bytes() == b"top secret"


async def test_small_appends_skip_the_worker_thread_and_big_ones_use_it(
    tmp_path: Path, thread_hops: ThreadHops
) -> None:
    store = LocalBlobStorage(tmp_path / "root", inline_append_max_bytes=64)
    await store.append("a.jsonl", b"first\n")  # creates the file: thread
    await store.append("a.jsonl", b"small\n")  # inline
    await store.append("a.jsonl", b"x" * 100 + b"\n")  # over the limit: thread
    assert thread_hops.count == 2
    assert await store.read("a.jsonl") == b"first\nsmall\n" + b"x" * 100 + b"\n"
    never = LocalBlobStorage(tmp_path / "root2", inline_append_max_bytes=0)
    thread_hops.count = 0
    for _ in range(3):
        await never.append("a.jsonl", b"z\n")
    assert thread_hops.count == 3


async def test_append_now_writes_at_once_or_says_to_await(
    tmp_path: Path, thread_hops: ThreadHops
) -> None:
    store = LocalBlobStorage(tmp_path / "root", inline_append_max_bytes=64)
    assert not store.append_now("a.jsonl", b"first\n")  # no file yet: the awaited path
    assert not (tmp_path / "root" / "a.jsonl").exists()  # and nothing written
    await store.append("a.jsonl", b"first\n")
    assert store.append_now("a.jsonl", b"now\n")
    assert not store.append_now("a.jsonl", b"x" * 100)  # over the inline limit
    # An append on its thread hop: a later one must not overtake it.
    thread_hops.count = 0
    big = asyncio.ensure_future(store.append("a.jsonl", b"y" * 100 + b"\n"))
    await asyncio.sleep(0)
    assert not store.append_now("a.jsonl", b"after\n")
    await big
    await store.append("a.jsonl", b"after\n")
    assert await store.read("a.jsonl") == b"first\nnow\n" + b"y" * 100 + b"\nafter\n"
    with pytest.raises(InvalidBlobPathError):
        store.append_now("../escape.jsonl", b"x\n")
    synced = LocalBlobStorage(tmp_path / "root", fsync_appends=True)
    assert not synced.append_now("a.jsonl", b"z\n")  # fsync wanted: the thread does it


async def test_hot_reads_skip_the_worker_thread_and_missing_blobs_are_not_found(
    tmp_path: Path, thread_hops: ThreadHops
) -> None:
    store = LocalBlobStorage(tmp_path / "root")
    await store.write("s.jsonl", b"0123456789")
    thread_hops.count = 0
    assert await store.tail("s.jsonl", 4) == b"6789"
    assert await store.read("s.jsonl") == b"0123456789"
    with pytest.raises(BlobNotFoundError):
        await store.tail("missing.jsonl", 4)
    with pytest.raises(BlobNotFoundError):
        await store.read("missing.jsonl")
    assert thread_hops.count == 0
    off = LocalBlobStorage(tmp_path / "root", inline_append_max_bytes=0)
    assert await off.tail("s.jsonl", 4) == b"6789"
    assert thread_hops.count == 1


async def test_listing_never_follows_a_symlink_out_of_the_root(
    storage: LocalBlobStorage, tmp_path: Path, outside: Path
) -> None:
    await storage.write("inside.txt", b"x")
    (tmp_path / "root" / "escape").symlink_to(outside, target_is_directory=True)
    assert await storage.list("") == ["inside.txt"]
    with pytest.raises(InvalidBlobPathError):
        await storage.list("escape/")


async def test_unsafe_paths_are_refused_before_touching_the_disk(tmp_path: Path) -> None:
    # The root lies under a regular file: any disk access would fail with BlobError.
    (tmp_path / "file").write_bytes(b"")
    storage = LocalBlobStorage(tmp_path / "file" / "root")
    with pytest.raises(BlobError):
        await storage.write("ok.txt", b"x")
    for path in ("../x", "/abs", "a//b", "a/./b", "a\x00b", "a\\b", ".hidden"):
        with pytest.raises(InvalidBlobPathError):
            await storage.write(path, b"x")
        with pytest.raises(InvalidBlobPathError):
            await storage.append(path, b"x")


async def test_parent_folders_are_created_on_write_and_append(
    storage: LocalBlobStorage, tmp_path: Path
) -> None:
    await storage.write("a/b/c/doc.txt", b"w")
    await storage.append("d/e/f/log.jsonl", b"a\n")
    assert (tmp_path / "root" / "a" / "b" / "c" / "doc.txt").read_bytes() == b"w"
    assert (tmp_path / "root" / "d" / "e" / "f" / "log.jsonl").read_bytes() == b"a\n"


async def test_leftover_temp_and_lock_files_are_not_listed(
    storage: LocalBlobStorage, tmp_path: Path
) -> None:
    await storage.write("w/doc.txt", b"x")
    # What a writer killed mid-replace leaves behind.
    (tmp_path / "root" / "w" / ".doc.txt.tmp-deadbeef0000").write_bytes(b"half")
    assert await storage.list("") == ["w/doc.txt"]
    assert await storage.list("w/") == ["w/doc.txt"]


async def test_fsync_appends_still_appends(tmp_path: Path) -> None:
    storage = LocalBlobStorage(tmp_path / "root", fsync_appends=True)
    await storage.append("log.jsonl", b"one\n")
    await storage.append("log.jsonl", b"two\n")
    assert await storage.read("log.jsonl") == b"one\ntwo\n"


async def test_reading_a_folder_is_not_found(storage: LocalBlobStorage) -> None:
    await storage.write("folder/doc.txt", b"x")
    assert not await storage.exists("folder")
    with pytest.raises(KeyError):
        await storage.read("folder")


def test_factory_builds_the_configured_local_backend(tmp_path: Path) -> None:
    settings = load_settings(
        _env_file=None,
        storage_backend="local",
        storage_base_path=tmp_path / "blobs",
        storage_fsync_appends=True,
    )
    storage = create_blob_storage(settings)
    assert isinstance(storage, LocalBlobStorage)
    assert storage.root == tmp_path / "blobs"
    assert create_blob_storage(load_settings(_env_file=None, storage_backend="none")) is None


# --- crash safety of write ---------------------------------------------------------------------

BIG = 4 * 1024 * 1024
OLD = b"A" * BIG
NEW = b"B" * BIG


def _replace_forever(root: str, started: Any) -> None:
    """Child: alternate two large contents on one blob until killed."""

    async def run() -> None:
        storage = LocalBlobStorage(root)
        turn = 0
        while True:
            await storage.write("big.bin", NEW if turn % 2 == 0 else OLD)
            turn += 1
            started.set()

    asyncio.run(run())


async def test_sigkill_during_replaces_leaves_old_or_new_content_never_a_mix(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    storage = LocalBlobStorage(root)
    await storage.write("big.bin", OLD)
    rng = random.Random(1234)
    for _ in range(3):
        started = SPAWN.Event()
        child = SPAWN.Process(target=_replace_forever, args=(str(root), started))
        child.start()
        try:
            assert await asyncio.to_thread(started.wait, 60)
            # Readers during the replaces see whole contents only.
            for _ in range(3):
                assert await storage.read("big.bin") in (OLD, NEW)
            await asyncio.sleep(rng.uniform(0, 0.05))
        finally:
            os.kill(child.pid or 0, signal.SIGKILL)
            await asyncio.to_thread(child.join, 30)
        assert child.exitcode == -signal.SIGKILL
        assert await storage.read("big.bin") in (OLD, NEW)
        assert await storage.list("") == ["big.bin"]
    # The blob is still writable after the crashes (no stale lock left held).
    await storage.write(
        "big.bin", b"after", if_version=(await storage.read_versioned("big.bin"))[1]
    )
    assert await storage.read("big.bin") == b"after"


# --- several processes ---------------------------------------------------------------------------

WRITERS = 4
LINES_PER_WRITER = 1000


def _line(writer: int, seq: int) -> bytes:
    # Lengths vary (some lines are large) so a torn or interleaved write shows up.
    body = (f"{writer}-{seq}-" * (3 + (seq * 7919 + writer) % 200)).encode()
    if seq % 250 == 0:
        body *= 40
    return b"%d:%d:%d:%s\n" % (writer, seq, zlib.crc32(body), body)


def _append_lines(root: str, writer: int) -> None:
    async def run() -> None:
        storage = LocalBlobStorage(root)
        for seq in range(LINES_PER_WRITER):
            await storage.append("shared/log.jsonl", _line(writer, seq))

    asyncio.run(run())


def _check_lines(content: bytes) -> None:
    """Every line intact, each writer's lines complete and in order."""
    seen: dict[int, list[int]] = {w: [] for w in range(WRITERS)}
    lines = content.split(b"\n")
    assert lines[-1] == b""
    for raw in lines[:-1]:
        writer, seq, crc, body = raw.split(b":", 3)
        assert zlib.crc32(body) == int(crc)
        assert raw + b"\n" == _line(int(writer), int(seq))
        seen[int(writer)].append(int(seq))
    assert len(lines) - 1 == WRITERS * LINES_PER_WRITER
    for number in range(WRITERS):
        assert seen[number] == list(range(LINES_PER_WRITER))


async def test_appends_from_four_processes_are_all_kept_intact(tmp_path: Path) -> None:
    root = tmp_path / "root"
    children = [SPAWN.Process(target=_append_lines, args=(str(root), w)) for w in range(WRITERS)]
    for child in children:
        child.start()
    for child in children:
        await asyncio.to_thread(child.join, 120)
        assert child.exitcode == 0
    storage = LocalBlobStorage(root)
    _check_lines(await storage.read("shared/log.jsonl"))


def _increment(root: str, times: int) -> None:
    """Child: compare-and-set increments of a counter blob, retrying lost races."""

    async def run() -> None:
        storage = LocalBlobStorage(root)
        for _ in range(times):
            while True:
                data, version = await storage.read_versioned("counter.txt")
                try:
                    await storage.write("counter.txt", b"%d" % (int(data) + 1), if_version=version)
                    break
                except BlobPreconditionFailedError:
                    continue

    asyncio.run(run())


async def test_conditional_writes_from_several_processes_lose_no_update(tmp_path: Path) -> None:
    root = tmp_path / "root"
    storage = LocalBlobStorage(root)
    await storage.write("counter.txt", b"0")
    children = [SPAWN.Process(target=_increment, args=(str(root), 60)) for _ in range(3)]
    for child in children:
        child.start()
    for child in children:
        await asyncio.to_thread(child.join, 120)
        assert child.exitcode == 0
    assert await storage.read("counter.txt") == b"180"


# --- OS errors translated at the edge -------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (FileNotFoundError(errno.ENOENT, "gone"), BlobNotFoundError),
        (OSError(errno.ENOSPC, "No space left on device"), BlobUnavailableError),
        (OSError(errno.EIO, "Input/output error"), BlobUnavailableError),
        (OSError(errno.EMFILE, "Too many open files"), BlobUnavailableError),
        (TimeoutError("stalled"), BlobUnavailableError),
        (PermissionError(errno.EACCES, "Permission denied"), BlobRejectedError),
        (OSError(errno.EROFS, "Read-only file system"), BlobRejectedError),
        (NotADirectoryError(errno.ENOTDIR, "Not a directory"), BlobRejectedError),
        (IsADirectoryError(errno.EISDIR, "Is a directory"), BlobRejectedError),
    ],
)
def test_os_errors_become_transient_or_rejected_blob_errors(
    error: OSError, expected: type[BlobError]
) -> None:
    translated = translate_os_error(error, "write", "a/b.txt")
    assert type(translated) is expected
    assert "a/b.txt" in str(translated)


async def test_a_full_disk_is_unavailable_and_leaves_the_old_content(
    storage: LocalBlobStorage, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    await storage.write("doc.txt", b"old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(BlobUnavailableError, match="No space left") as caught:
        await storage.write("doc.txt", b"new")
    # The durable writer queues what a transient failure refused.
    assert isinstance(caught.value, BackendUnavailableError)
    monkeypatch.undo()
    assert await storage.read("doc.txt") == b"old"
    assert _names(tmp_path / "root") == [".doc.txt.lock", "doc.txt"]  # no temp file left


async def test_a_file_in_the_way_is_a_rejection(storage: LocalBlobStorage) -> None:
    await storage.write("a", b"file")
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: storage.write("a/b.txt", b"x"),
        lambda: storage.append("a/b.jsonl", b"x"),
        lambda: storage.read("a/b.txt"),
    ]
    for call in calls:
        # Retrying cannot help until someone moves the file: not a transient failure.
        with pytest.raises(BlobRejectedError, match="a/b") as caught:
            await call()
        assert isinstance(caught.value, BackendRejectedError)
        assert not isinstance(caught.value, BackendUnavailableError)


async def test_a_symlink_loop_is_a_rejection_not_a_runtime_error(
    storage: LocalBlobStorage, tmp_path: Path
) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "loop").symlink_to(tmp_path / "root" / "loop")
    with pytest.raises(BlobError):
        await storage.read("loop/x.txt")
