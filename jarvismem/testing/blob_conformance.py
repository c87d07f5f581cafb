"""A conformance suite for :class:`~jarvismem.backends.blob.base.BlobStorage` implementations.

Subclass :class:`BlobStorageConformance` with a ``storage`` fixture (pytest), or
``await run_blob_conformance(storage)`` without pytest. Every check works under its own
random prefix, so the checks can share one storage that already holds other blobs.
Usage: docs/architecture.md, "Checking your own backends".
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from jarvismem.backends.blob.base import BlobStorage, validate_blob_path
from jarvismem.errors import (
    BlobNotFoundError,
    BlobPreconditionFailedError,
    InvalidBlobPathError,
    InvalidPayloadError,
)
from jarvismem.testing._conformance import PYTEST_MARKS, raises, run_checks, unique_name

UNSAFE_PATHS: tuple[str, ...] = (
    "../x",
    "a/../../x",
    "/abs",
    "/etc/passwd",
    "a//b",
    "a/./b",
    "a/b/",
    ".",
    "..",
    "",
    "a\x00b",
    "a\\b",
    "..\\x",
    ".hidden",
    "a/.hidden",
)
"""Paths every backend must refuse with ``InvalidBlobPathError``."""


class BlobStorageConformance:
    """The blob storage contract, one behaviour per ``test_`` method.

    Each method takes the ``storage`` under test; subclasses supply it as a
    pytest fixture.
    """

    pytestmark = PYTEST_MARKS

    # --- whole blobs ----------------------------------------------------------------

    async def test_is_a_blob_storage_with_a_name(self, storage: BlobStorage) -> None:
        assert isinstance(storage, BlobStorage)
        assert isinstance(storage.name, str) and storage.name

    async def test_write_then_read_returns_the_same_bytes(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/doc.txt"
        await storage.write(path, b"hello world\n")
        assert await storage.read(path) == b"hello world\n"

    async def test_reading_a_missing_blob_raises_not_found(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/missing.txt"
        with raises(BlobNotFoundError, "read"):
            await storage.read(path)
        with raises(BlobNotFoundError, "read_versioned"):
            await storage.read_versioned(path)
        with raises(BlobNotFoundError, "tail"):
            await storage.tail(path, 10)
        with raises(BlobNotFoundError, "size"):
            await storage.size(path)

    async def test_write_replaces_the_whole_content(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/doc.txt"
        await storage.write(path, b"a much longer first version")
        await storage.write(path, b"short")
        assert await storage.read(path) == b"short"

    async def test_write_returns_the_version_read_versioned_reports(
        self, storage: BlobStorage
    ) -> None:
        path = f"{unique_name()}/doc.txt"
        version = await storage.write(path, b"v1")
        assert await storage.read_versioned(path) == (b"v1", version)

    async def test_every_write_gets_a_new_version_even_with_equal_content(
        self, storage: BlobStorage
    ) -> None:
        path = f"{unique_name()}/doc.txt"
        versions = [await storage.write(path, b"same") for _ in range(5)]
        assert len(set(versions)) == len(versions)

    async def test_write_if_version_succeeds_when_version_is_current(
        self, storage: BlobStorage
    ) -> None:
        path = f"{unique_name()}/doc.txt"
        first = await storage.write(path, b"v1")
        second = await storage.write(path, b"v2", if_version=first)
        assert second != first
        assert await storage.read_versioned(path) == (b"v2", second)

    async def test_write_if_stale_version_fails_and_changes_nothing(
        self, storage: BlobStorage
    ) -> None:
        path = f"{unique_name()}/doc.txt"
        stale = await storage.write(path, b"v1")
        current = await storage.write(path, b"v2")
        with raises(BlobPreconditionFailedError, "write with a stale version"):
            await storage.write(path, b"v3", if_version=stale)
        assert await storage.read_versioned(path) == (b"v2", current)

    async def test_write_if_version_on_a_missing_blob_fails(self, storage: BlobStorage) -> None:
        prefix = unique_name()
        version = await storage.write(f"{prefix}/other.txt", b"x")
        path = f"{prefix}/missing.txt"
        with raises(BlobPreconditionFailedError, "write if_version on a missing blob"):
            await storage.write(path, b"v", if_version=version)
        assert not await storage.exists(path)

    async def test_write_if_absent_creates_a_new_blob(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/new.txt"
        version = await storage.write(path, b"first", if_absent=True)
        assert await storage.read_versioned(path) == (b"first", version)

    async def test_write_if_absent_fails_when_present_and_changes_nothing(
        self, storage: BlobStorage
    ) -> None:
        path = f"{unique_name()}/doc.txt"
        version = await storage.write(path, b"original")
        with raises(BlobPreconditionFailedError, "write if_absent on an existing blob"):
            await storage.write(path, b"intruder", if_absent=True)
        assert await storage.read_versioned(path) == (b"original", version)

    async def test_racing_if_absent_writes_have_exactly_one_winner(
        self, storage: BlobStorage
    ) -> None:
        path = f"{unique_name()}/claim.txt"

        async def claim(i: int) -> bool:
            try:
                await storage.write(path, f"writer {i}".encode(), if_absent=True)
            except BlobPreconditionFailedError:
                return False
            return True

        wins = await asyncio.gather(*(claim(i) for i in range(8)))
        assert wins.count(True) == 1
        assert await storage.read(path) == f"writer {wins.index(True)}".encode()

    async def test_binary_bytes_round_trip_unchanged(self, storage: BlobStorage) -> None:
        prefix = unique_name()
        data = bytes(range(256)) + b"\xff\xfe\x00\r\n\x80"
        await storage.write(f"{prefix}/bin.dat", data)
        await storage.append(f"{prefix}/bin.log", data)
        assert await storage.read(f"{prefix}/bin.dat") == data
        assert await storage.read(f"{prefix}/bin.log") == data

    async def test_empty_data_is_a_valid_blob(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/empty.txt"
        await storage.write(path, b"")
        assert await storage.exists(path)
        assert await storage.read(path) == b""
        assert await storage.size(path) == 0
        assert await storage.tail(path, 10) == b""

    async def test_non_bytes_data_is_refused(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/doc.txt"
        with raises(InvalidPayloadError, "write of a str"):
            await storage.write(path, "text", if_absent=False)  # type: ignore[arg-type]
        with raises(InvalidPayloadError, "append of a str"):
            await storage.append(path, "text")  # type: ignore[arg-type]
        assert not await storage.exists(path)

    # --- append blobs -------------------------------------------------------------------

    async def test_append_creates_a_missing_blob(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/deep/nested/log.jsonl"
        await storage.append(path, b'{"n": 1}\n')
        assert await storage.exists(path)
        assert await storage.read(path) == b'{"n": 1}\n'

    async def test_appends_grow_the_blob_in_call_order(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/log.jsonl"
        lines = [f"line {i}\n".encode() for i in range(20)]
        for line in lines:
            await storage.append(path, line)
        assert await storage.read(path) == b"".join(lines)

    async def test_empty_append_changes_nothing(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/log.jsonl"
        await storage.append(path, b"one\n")
        await storage.append(path, b"")
        assert await storage.read(path) == b"one\n"

    async def test_concurrent_appends_are_never_torn_or_interleaved(
        self, storage: BlobStorage
    ) -> None:
        path = f"{unique_name()}/log.jsonl"
        lines = [(f"{i:03d}:" + "x" * (50 + i * 7) + "\n").encode() for i in range(40)]
        await asyncio.gather(*(storage.append(path, line) for line in lines))
        content = await storage.read(path)
        assert sorted(content.splitlines(keepends=True)) == sorted(lines)

    async def test_tail_returns_exactly_the_last_bytes(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/log.jsonl"
        lines = [f"entry {i:04d}\n".encode() for i in range(50)]
        for line in lines:
            await storage.append(path, line)
        content = b"".join(lines)
        for n in (0, 1, 7, 11, 100, len(content) - 1, len(content)):
            assert await storage.tail(path, n) == content[len(content) - n :], n
        assert await storage.tail(path, len(content) * 3) == content

    async def test_tail_works_on_whole_blobs(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/doc.txt"
        await storage.write(path, b"0123456789")
        assert await storage.tail(path, 4) == b"6789"

    async def test_tail_refuses_a_negative_size(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/doc.txt"
        await storage.write(path, b"0123456789")
        with raises(InvalidPayloadError, "tail with max_bytes=-1"):
            await storage.tail(path, -1)

    async def test_size_counts_written_and_appended_bytes(self, storage: BlobStorage) -> None:
        prefix = unique_name()
        await storage.write(f"{prefix}/doc.txt", b"x" * 1234)
        assert await storage.size(f"{prefix}/doc.txt") == 1234
        for _ in range(3):
            await storage.append(f"{prefix}/log.jsonl", b"y" * 100)
        assert await storage.size(f"{prefix}/log.jsonl") == 300

    # --- namespace ----------------------------------------------------------------------

    async def test_exists_reports_presence(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/doc.txt"
        assert not await storage.exists(path)
        await storage.write(path, b"x")
        assert await storage.exists(path)

    async def test_list_returns_sorted_paths_under_a_prefix(self, storage: BlobStorage) -> None:
        prefix = unique_name()
        paths = [f"{prefix}/b/2.txt", f"{prefix}/a.txt", f"{prefix}/b/1.txt", f"{prefix}/c/d/e.j"]
        for path in paths:
            await storage.write(path, b"x")
        await storage.write(f"{unique_name()}/unrelated.txt", b"x")
        assert await storage.list(prefix + "/") == sorted(paths)
        assert await storage.list(f"{prefix}/b/") == [f"{prefix}/b/1.txt", f"{prefix}/b/2.txt"]

    async def test_list_prefix_may_end_mid_name(self, storage: BlobStorage) -> None:
        prefix = unique_name()
        for name in ("report-1.txt", "report-2.txt", "summary.txt"):
            await storage.write(f"{prefix}/{name}", b"x")
        assert await storage.list(f"{prefix}/report") == [
            f"{prefix}/report-1.txt",
            f"{prefix}/report-2.txt",
        ]

    async def test_list_of_an_unknown_prefix_is_empty(self, storage: BlobStorage) -> None:
        assert await storage.list(unique_name() + "/") == []

    async def test_list_shows_no_internal_files(self, storage: BlobStorage) -> None:
        prefix = unique_name()
        version = await storage.write(f"{prefix}/doc.txt", b"v1")
        await storage.write(f"{prefix}/doc.txt", b"v2", if_version=version)
        await storage.write(f"{prefix}/gone.txt", b"x")
        await storage.delete(f"{prefix}/gone.txt")
        for i in range(30):
            await storage.append(f"{prefix}/log.jsonl", f"{i}\n".encode())
        assert await storage.list(prefix + "/") == [f"{prefix}/doc.txt", f"{prefix}/log.jsonl"]
        for path in await storage.list(""):
            validate_blob_path(path)

    async def test_delete_removes_the_blob_and_reports_it(self, storage: BlobStorage) -> None:
        prefix = unique_name()
        await storage.write(f"{prefix}/doc.txt", b"x")
        await storage.append(f"{prefix}/log.jsonl", b"y\n")
        assert await storage.delete(f"{prefix}/doc.txt") is True
        assert await storage.delete(f"{prefix}/log.jsonl") is True
        assert not await storage.exists(f"{prefix}/doc.txt")
        assert await storage.list(prefix + "/") == []
        with raises(BlobNotFoundError, "read after delete"):
            await storage.read(f"{prefix}/log.jsonl")

    async def test_delete_of_a_missing_blob_returns_false(self, storage: BlobStorage) -> None:
        assert await storage.delete(f"{unique_name()}/missing.txt") is False

    async def test_a_deleted_blob_can_be_created_again(self, storage: BlobStorage) -> None:
        path = f"{unique_name()}/doc.txt"
        await storage.write(path, b"old")
        await storage.delete(path)
        await storage.write(path, b"new", if_absent=True)
        assert await storage.read(path) == b"new"

    # --- unsafe paths ------------------------------------------------------------------------

    async def test_unsafe_paths_are_refused_by_every_method(self, storage: BlobStorage) -> None:
        before = await storage.list("")
        calls: list[tuple[str, Callable[[Any], Awaitable[object]]]] = [
            ("read", storage.read),
            ("read_versioned", storage.read_versioned),
            ("write", lambda p: storage.write(p, b"x")),
            ("write if_absent", lambda p: storage.write(p, b"x", if_absent=True)),
            ("append", lambda p: storage.append(p, b"x")),
            ("tail", lambda p: storage.tail(p, 1)),
            ("size", storage.size),
            ("exists", storage.exists),
            ("delete", storage.delete),
        ]
        for path in (*UNSAFE_PATHS, 42, None):
            for method, call in calls:
                with raises(InvalidBlobPathError, f"{method}({path!r})"):
                    await call(path)
        assert await storage.list("") == before

    async def test_unsafe_list_prefixes_are_refused(self, storage: BlobStorage) -> None:
        for prefix in ("../", "/abs", "a//", "a/./", ".hidden", "a\\b"):
            with raises(InvalidBlobPathError, f"list({prefix!r})"):
                await storage.list(prefix)


async def run_blob_conformance(storage: BlobStorage) -> None:
    """Run every check of :class:`BlobStorageConformance` against ``storage``.

    Raises ``AssertionError`` naming the first failing check; returns ``None``
    when the storage conforms. The storage is left open (close it yourself).
    """
    await run_checks(BlobStorageConformance(), storage)
