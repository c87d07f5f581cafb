"""Azure blob backend on Azurite: segment rollover, ranged tails, multi-process appends."""

from __future__ import annotations

import asyncio
import multiprocessing
import subprocess
import sys
import uuid
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError

from jarvismem.backends.blob import create_blob_storage
from jarvismem.backends.blob.azure import (
    MAX_APPEND_BYTES,
    AzureBlobStorage,
    translate_azure_error,
)
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    BlobError,
    BlobNotFoundError,
    BlobPreconditionFailedError,
    BlobRejectedError,
    BlobUnavailableError,
    InvalidBlobPathError,
    PayloadTooLargeError,
)
from jarvismem.settings import load_settings

SPAWN = multiprocessing.get_context("spawn")
# Nothing listens here: any request would fail, so only pre-I/O checks can pass.
UNREACHABLE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
    "KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:9/devstoreaccount1;"
)

Factory = Callable[..., AzureBlobStorage]


def _container() -> str:
    return "t" + uuid.uuid4().hex[:20]


@pytest.fixture
async def make_storage(azurite_connection_string: str) -> AsyncIterator[Factory]:
    """Build storages on Azurite (one fresh container unless given); close them after."""
    made: list[AzureBlobStorage] = []
    default = _container()

    def make(container: str | None = None, **kwargs: Any) -> AzureBlobStorage:
        storage = AzureBlobStorage(azurite_connection_string, container or default, **kwargs)
        made.append(storage)
        return storage

    yield make
    for storage in made:
        await storage.close()


async def _raw_names(storage: AzureBlobStorage) -> list[str]:
    """Blob names as stored on the service (segments included)."""
    return sorted([item.name async for item in storage._container.list_blobs()])


# --- segments ---------------------------------------------------------------------------------


@pytest.mark.integration
async def test_appends_roll_over_to_new_segments_at_the_block_limit(
    make_storage: Factory,
) -> None:
    storage = make_storage(max_blocks_per_segment=3)
    lines = [f"line {i}\n".encode() for i in range(10)]
    for line in lines:
        await storage.append("wf/log.jsonl", line)
    assert await _raw_names(storage) == [
        "wf/log.jsonl",
        "wf/log.jsonl.seg-000001",
        "wf/log.jsonl.seg-000002",
        "wf/log.jsonl.seg-000003",
    ]
    assert await storage.read("wf/log.jsonl") == b"".join(lines)
    assert await storage.size("wf/log.jsonl") == len(b"".join(lines))
    assert await storage.list("") == ["wf/log.jsonl"]


@pytest.mark.integration
async def test_tail_spans_segments_exactly(make_storage: Factory) -> None:
    storage = make_storage(max_blocks_per_segment=2)
    lines = [f"entry-{i:03d}\n".encode() for i in range(9)]
    for line in lines:
        await storage.append("log.jsonl", line)
    content = b"".join(lines)
    for n in (1, 10, 11, 25, 40, len(content), len(content) + 5):
        assert await storage.tail("log.jsonl", n) == content[-n:], n


@pytest.mark.integration
async def test_tail_downloads_only_ranges_of_the_last_segments(
    make_storage: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.storage.blob.aio import BlobClient

    storage = make_storage(max_blocks_per_segment=4)
    lines = [b"%05d" % i + b"x" * 994 + b"\n" for i in range(12)]  # 1000 bytes each
    for line in lines:
        await storage.append("log.jsonl", line)
    content = b"".join(lines)
    downloads: list[tuple[str, Any, Any]] = []
    original = BlobClient.download_blob

    async def spy(self: Any, offset: Any = None, length: Any = None, **kwargs: Any) -> Any:
        downloads.append((self.blob_name, offset, length))
        return await original(self, offset=offset, length=length, **kwargs)

    monkeypatch.setattr(BlobClient, "download_blob", spy)
    assert await storage.tail("log.jsonl", 1500) == content[-1500:]
    assert downloads == [("log.jsonl.seg-000002", 2500, 1500)]
    downloads.clear()
    assert await storage.tail("log.jsonl", 4500) == content[-4500:]
    assert downloads == [("log.jsonl.seg-000002", 0, 4000), ("log.jsonl.seg-000001", 3500, 500)]


@pytest.mark.integration
async def test_a_new_instance_continues_in_the_last_segment(make_storage: Factory) -> None:
    first = make_storage(max_blocks_per_segment=3)
    for i in range(7):
        await first.append("log.jsonl", b"a%d\n" % i)
    second = make_storage(max_blocks_per_segment=3)
    await second.append("log.jsonl", b"b0\n")
    assert await _raw_names(second) == [
        "log.jsonl",
        "log.jsonl.seg-000001",
        "log.jsonl.seg-000002",
    ]
    assert (await second.read("log.jsonl")).endswith(b"a6\nb0\n")


@pytest.mark.integration
async def test_a_container_that_vanished_is_created_again(make_storage: Factory) -> None:
    storage = make_storage()
    await storage.append("log.jsonl", b"one\n")
    await storage._container.delete_container()  # as an emulator restarted empty would
    with pytest.raises(BlobError):
        await storage.append("log.jsonl", b"lost\n")
    with pytest.raises(BlobNotFoundError):
        await storage.read("log.jsonl")
    await storage.append("log.jsonl", b"two\n")
    assert await storage.read("log.jsonl") == b"two\n"


@pytest.mark.integration
async def test_delete_removes_every_segment(make_storage: Factory) -> None:
    storage = make_storage(max_blocks_per_segment=2)
    for i in range(5):
        await storage.append("log.jsonl", b"%d\n" % i)
    await storage.write("keep.txt", b"x")
    assert await storage.delete("log.jsonl") is True
    assert await _raw_names(storage) == ["keep.txt"]
    await storage.append("log.jsonl", b"again\n")
    assert await storage.read("log.jsonl") == b"again\n"


@pytest.mark.integration
async def test_an_append_above_one_block_is_refused_and_writes_nothing(
    make_storage: Factory,
) -> None:
    storage = make_storage()
    with pytest.raises(PayloadTooLargeError):
        await storage.append("log.jsonl", b"x" * (MAX_APPEND_BYTES + 1))
    assert not await storage.exists("log.jsonl")


# --- before any I/O ------------------------------------------------------------------------------


async def test_unsafe_and_reserved_paths_are_refused_before_any_request() -> None:
    storage = AzureBlobStorage(UNREACHABLE, _container())
    try:
        for path in ("../x", "/abs", "a//b", "a/./b", "a\x00b", "a\\b", ".hidden"):
            with pytest.raises(InvalidBlobPathError):
                await storage.write(path, b"x")
        for path in ("log.jsonl.seg-000001", "a/b.seg-123456"):
            with pytest.raises(InvalidBlobPathError):
                await storage.append(path, b"x")
            with pytest.raises(InvalidBlobPathError):
                await storage.read(path)
        with pytest.raises(PayloadTooLargeError):
            await storage.append("ok.jsonl", b"x" * (MAX_APPEND_BYTES + 1))
    finally:
        await storage.close()


def test_importing_without_the_azure_extra_says_how_to_install_it() -> None:
    code = "import sys; sys.modules['azure'] = None; import jarvismem.backends.blob.azure"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode != 0
    assert "pip install 'jarvismem[azure]'" in result.stderr


async def test_factory_builds_the_azure_backend_from_settings() -> None:
    settings = load_settings(
        _env_file=None,
        storage_backend="azure",
        azure_storage_connection_string=UNREACHABLE,
        azure_storage_container="memories",
    )
    storage = create_blob_storage(settings)
    try:
        assert isinstance(storage, AzureBlobStorage)
        assert storage._container_name == "memories"
    finally:
        assert storage is not None
        await storage.close()


# --- several processes ---------------------------------------------------------------------------

WRITERS = 4
LINES_PER_WRITER = 1000


def _line(writer: int, seq: int) -> bytes:
    body = (f"{writer}-{seq}-" * (2 + (seq * 7919 + writer) % 40)).encode()
    return b"%d:%d:%d:%s\n" % (writer, seq, zlib.crc32(body), body)


def _append_lines(connection_string: str, container: str, writer: int) -> None:
    async def run() -> None:
        # A small segment limit makes the writers race through several rollovers.
        storage = AzureBlobStorage(connection_string, container, max_blocks_per_segment=700)
        try:
            for seq in range(LINES_PER_WRITER):
                await storage.append("shared/log.jsonl", _line(writer, seq))
        finally:
            await storage.close()

    asyncio.run(run())


@pytest.mark.integration
@pytest.mark.slow  # ~20 s: Azurite serves ~200 appends/s on two shared cores
async def test_appends_from_four_processes_are_all_kept_intact(
    make_storage: Factory, azurite_connection_string: str
) -> None:
    container = _container()
    children = [
        SPAWN.Process(target=_append_lines, args=(azurite_connection_string, container, w))
        for w in range(WRITERS)
    ]
    for child in children:
        child.start()
    for child in children:
        await asyncio.to_thread(child.join, 300)
        assert child.exitcode == 0
    storage = make_storage(container)
    content = await storage.read("shared/log.jsonl")
    lines = content.split(b"\n")
    assert lines[-1] == b""
    seen: dict[int, set[int]] = {w: set() for w in range(WRITERS)}
    for raw in lines[:-1]:
        writer, seq, _, _ = raw.split(b":", 3)
        assert raw + b"\n" == _line(int(writer), int(seq))
        seen[int(writer)].add(int(seq))
    assert len(lines) - 1 == WRITERS * LINES_PER_WRITER
    assert all(seen[w] == set(range(LINES_PER_WRITER)) for w in range(WRITERS))
    assert len(await _raw_names(storage)) >= 5  # it really rolled over


# --- SDK errors translated at the edge -----------------------------------------------------------


def _http_error(status: int, code: str = "") -> HttpResponseError:
    error = HttpResponseError(message=f"HTTP {status}")
    error.status_code = status
    error.error_code = code
    return error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_http_error(500), BlobUnavailableError),
        (_http_error(503, "ServerBusy"), BlobUnavailableError),
        (_http_error(429), BlobUnavailableError),
        (_http_error(408), BlobUnavailableError),
        (_http_error(403, "AuthorizationFailure"), BlobRejectedError),
        (_http_error(400, "InvalidHeaderValue"), BlobRejectedError),
        (_http_error(501), BlobRejectedError),
        (_http_error(412), BlobPreconditionFailedError),
        (ServiceRequestError("connection refused"), BlobUnavailableError),
        (ServiceResponseError("connection reset"), BlobUnavailableError),
        (aiohttp.ClientPayloadError("body cut short"), BlobUnavailableError),
        (TimeoutError(), BlobUnavailableError),
        (ConnectionResetError(104, "reset"), BlobUnavailableError),
    ],
)
def test_sdk_errors_become_transient_or_rejected_blob_errors(
    error: BaseException, expected: type[BlobError]
) -> None:
    translated = translate_azure_error(error, "read", "a/b.txt")
    assert type(translated) is expected
    assert "a/b.txt" in str(translated)
    assert "127.0.0.1" not in str(translated) and "AccountKey" not in str(translated)


@pytest.mark.integration
async def test_appending_to_a_whole_blob_is_a_rejection(make_storage: Factory) -> None:
    storage = make_storage()
    await storage.write("doc.txt", b"whole")
    # The service refuses an append block on a block blob: retrying cannot help.
    with pytest.raises(BlobRejectedError) as caught:
        await storage.append("doc.txt", b"more")
    assert isinstance(caught.value, BackendRejectedError)
    assert not isinstance(caught.value, BackendUnavailableError)
    assert await storage.read("doc.txt") == b"whole"


@pytest.mark.integration
async def test_a_wrong_account_key_is_a_rejection(azurite_connection_string: str) -> None:
    wrong = azurite_connection_string.replace("AccountKey=Eby8", "AccountKey=Xby8")
    assert wrong != azurite_connection_string
    storage = AzureBlobStorage(wrong, _container())
    try:
        with pytest.raises(BlobRejectedError, match="HTTP 403"):
            await storage.write("doc.txt", b"x")
    finally:
        await storage.close()
