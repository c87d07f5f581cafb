"""Blob storage in an Azure Blob container (``pip install 'jarvismem[azure]'``).

Whole blobs are block blobs replaced in one upload, versioned by ETag, so conditional
writes are enforced by the service. Append blobs grow by one atomic ``append_block`` per
:meth:`AzureBlobStorage.append` (never split: more than :data:`MAX_APPEND_BYTES` is
refused before anything is sent), and roll over to segments ``p.seg-000001``, ... before
the service's 50,000-block limit; listings hide the segments. Docs: docs/deployment.md,
"Azure Blob at scale".
"""

from __future__ import annotations

import asyncio
import builtins
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

try:
    import aiohttp
    from azure.core import MatchConditions
    from azure.core.exceptions import (
        AzureError,
        HttpResponseError,
        ResourceExistsError,
        ResourceModifiedError,
        ResourceNotFoundError,
    )
    from azure.storage.blob import BlobType
    from azure.storage.blob.aio import BlobServiceClient, ContainerClient
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the Azure blob backend needs the 'azure' extra: pip install 'jarvismem[azure]'"
    ) from exc

from jarvismem.backends.blob.base import (
    BlobVersion,
    as_blob_bytes,
    validate_blob_path,
    validate_blob_prefix,
    validate_max_bytes,
    validate_write_conditions,
)
from jarvismem.defaults import AZURE_APPEND_BLOCK_BYTES
from jarvismem.errors import (
    BlobError,
    BlobNotFoundError,
    BlobPreconditionFailedError,
    BlobRejectedError,
    BlobUnavailableError,
    InvalidBlobPathError,
    InvalidPayloadError,
    PayloadTooLargeError,
)

MAX_APPEND_BYTES = AZURE_APPEND_BLOCK_BYTES
"""Largest ``append`` payload: one append block on the service. Service versions
since 2022-11-02 accept up to 100 MiB per block, earlier ones (and the emulators
speaking them) 4 MiB: the smaller is the one every account honours."""

HARD_BLOCK_LIMIT = 50_000
"""Blocks an append blob can hold on the service."""

_APPEND_ATTEMPTS = 8
"""Bound on create/roll-over retries of one append (each retry follows a lost race)."""

_SEGMENT_SUFFIX = ".seg-"
_SEGMENT_RE = re.compile(r"\.seg-(\d{6})\Z")


def _segment_name(path: str, index: int) -> str:
    """Blob name of segment ``index`` of the logical blob ``path``."""
    return path if index == 0 else f"{path}{_SEGMENT_SUFFIX}{index:06d}"


def _validate_logical_path(path: object) -> str:
    """A valid blob path that is not itself a segment name."""
    checked = validate_blob_path(path)
    if _SEGMENT_RE.search(checked):
        raise InvalidBlobPathError(
            f"blob path {checked[:80]!r} ends with the reserved segment suffix '.seg-NNNNNN'"
        )
    return checked


def _error_code(exc: BaseException) -> str:
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


def _is_transient_status(status: int | None) -> bool:
    """HTTP statuses worth retrying later: timeout, throttling, server errors but 501."""
    return status is None or status in (408, 429) or (status >= 500 and status != 501)


def translate_azure_error(
    exc: BaseException,
    action: str,
    path: str,
    on_container_missing: Callable[[], None] | None = None,
) -> BlobError:
    """jarvismem's error for an Azure SDK, aiohttp or OS failure to ``action`` ``path``.

    Not found and failed conditions keep their specific errors; the rest is
    :class:`BlobUnavailableError` when it may pass (connection, timeout,
    throttling, 5xx, a container that vanished and is created again next time)
    and :class:`BlobRejectedError` when it would repeat (other 4xx: auth,
    wrong blob type, bad request). Messages carry status and code, never URLs
    or keys. ``on_container_missing`` is called when the service says the
    container itself is gone (e.g. an emulator restarted empty), so it is
    created again on the next call instead of every retry failing forever.
    """
    if isinstance(exc, ResourceNotFoundError):
        if _error_code(exc) == "ContainerNotFound":
            if on_container_missing is not None:
                on_container_missing()
            if action in ("read", "stat", "list"):
                return BlobNotFoundError(f"blob {path!r} not found (no container)")
            return BlobUnavailableError(f"cannot {action} blob {path!r}: container not found")
        return BlobNotFoundError(f"blob {path!r} not found")
    if isinstance(exc, ResourceExistsError | ResourceModifiedError):
        code = _error_code(exc) or "conflict"
        if action == "write":
            return BlobPreconditionFailedError(f"blob {path!r}: condition not met ({code})")
        return BlobRejectedError(f"cannot {action} blob {path!r}: {code}")
    if isinstance(exc, HttpResponseError):
        status = exc.status_code
        if status == 412:
            return BlobPreconditionFailedError(f"blob {path!r}: condition not met")
        message = f"cannot {action} blob {path!r}: HTTP {status} {_error_code(exc)}".rstrip()
        if _is_transient_status(status):
            return BlobUnavailableError(message)
        return BlobRejectedError(message)
    # Transport failures: the SDK's own (ServiceRequestError, ...), or aiohttp's
    # and the OS's when one slips past the SDK (e.g. while a body streams).
    return BlobUnavailableError(f"cannot {action} blob {path!r}: {type(exc).__name__}")


@asynccontextmanager
async def _azure_errors(
    action: str, path: str, on_container_missing: Callable[[], None] | None = None
) -> AsyncIterator[None]:
    """Run a block of SDK calls with their errors translated (:func:`translate_azure_error`)."""
    try:
        yield
    except (BlobError, InvalidPayloadError, PayloadTooLargeError):
        raise
    except (AzureError, aiohttp.ClientError, OSError) as exc:
        raise translate_azure_error(exc, action, path, on_container_missing) from None


class AzureBlobStorage:
    """:class:`~jarvismem.backends.blob.base.BlobStorage` in one Azure Blob container.

    ``connection_string``: the storage account's connection string (kept only
    inside the SDK client, never logged). ``container``: created on first use.
    ``max_blocks_per_segment``: append blocks per segment before rolling over
    (1-49,999; small values are for tests).
    """

    def __init__(
        self,
        connection_string: str,
        container: str,
        *,
        max_blocks_per_segment: int = 49_000,
    ) -> None:
        if not 1 <= max_blocks_per_segment < HARD_BLOCK_LIMIT:
            raise InvalidPayloadError(
                f"max_blocks_per_segment must be between 1 and {HARD_BLOCK_LIMIT - 1}"
            )
        self._service = BlobServiceClient.from_connection_string(connection_string)
        self._container: ContainerClient = self._service.get_container_client(container)
        self._container_name = container
        self._max_blocks = max_blocks_per_segment
        self._container_ready = False
        self._container_lock = asyncio.Lock()
        # path -> (current segment index, its committed block count as last seen)
        self._segments: dict[str, tuple[int, int]] = {}

    @property
    def name(self) -> str:
        """Backend name for logs and status."""
        return "azure"

    @property
    def max_append_bytes(self) -> int:
        """Largest ``append`` accepted (:data:`MAX_APPEND_BYTES`): what a record must fit."""
        return MAX_APPEND_BYTES

    @property
    def destination(self) -> str:
        """Where writes land (names this store's outboxes): account URL and container."""
        return f"azure:{self._service.url}/{self._container_name}"

    # --- helpers ----------------------------------------------------------------------

    def _errors(self, action: str, path: str) -> AbstractAsyncContextManager[None]:
        return _azure_errors(action, path, self._forget_container)

    def _forget_container(self) -> None:
        self._container_ready = False
        self._segments.clear()

    async def _ensure_container(self) -> None:
        """Create the container once per instance (an existing one is fine)."""
        if self._container_ready:
            return
        async with self._container_lock:
            if self._container_ready:
                return
            async with self._errors("create container for", self._container_name):
                try:
                    await self._container.create_container()
                except ResourceExistsError:
                    pass
            self._container_ready = True

    async def _segment_sizes(self, path: str) -> list[int]:
        """Sizes of the segments of ``path`` in order; ``BlobNotFoundError`` if absent."""

        async def first() -> int:
            props = await self._container.get_blob_client(path).get_blob_properties()
            return int(props.size)

        async def rest() -> builtins.list[tuple[int, int]]:
            found = []
            async for item in self._container.list_blobs(name_starts_with=path + _SEGMENT_SUFFIX):
                match = _SEGMENT_RE.search(item.name)
                if match and item.name == _segment_name(path, int(match.group(1))):
                    found.append((int(match.group(1)), int(item.size)))
            return sorted(found)

        # Two requests in parallel: segment 0's properties and the other segments.
        size0, others = await asyncio.gather(first(), rest())
        return [size0, *(size for _, size in others)]

    async def _last_segment_index(self, path: str) -> int:
        last = 0
        async for item in self._container.list_blobs(name_starts_with=path + _SEGMENT_SUFFIX):
            match = _SEGMENT_RE.search(item.name)
            if match and item.name == _segment_name(path, int(match.group(1))):
                last = max(last, int(match.group(1)))
        return last

    async def _create_append_blob(self, name: str) -> None:
        """Create an empty append blob unless it exists (a racing creator is fine)."""
        try:
            await self._container.get_blob_client(name).create_append_blob(
                match_condition=MatchConditions.IfMissing
            )
        except (ResourceExistsError, ResourceModifiedError):
            pass
        except HttpResponseError as exc:
            if exc.status_code not in (409, 412):
                raise

    # --- reads ------------------------------------------------------------------------

    async def read(self, path: str) -> bytes:
        """Whole content (all segments, in order). Raises ``BlobNotFoundError`` if absent."""
        data, _ = await self.read_versioned(path)
        return data

    async def read_versioned(self, path: str) -> tuple[bytes, BlobVersion]:
        """Content and its ETag (for an append blob with several segments, a combined tag)."""
        _validate_logical_path(path)
        await self._ensure_container()
        async with self._errors("read", path):
            stream = await self._container.get_blob_client(path).download_blob()
            data = await stream.readall()
            etag = str(stream.properties.etag)
            if stream.properties.blob_type != BlobType.APPENDBLOB:
                return data, etag
            # Only append blobs have further segments: one listing finds them.
            parts = [data]
            tags = [etag]
            last = await self._last_segment_index(path)
            for index in range(1, last + 1):
                part = await self._container.get_blob_client(
                    _segment_name(path, index)
                ).download_blob()
                parts.append(await part.readall())
                tags.append(str(part.properties.etag))
            return b"".join(parts), tags[0] if len(tags) == 1 else "+".join(tags)

    async def tail(self, path: str, max_bytes: int) -> bytes:
        """The last ``max_bytes`` bytes, fetched with ranged downloads of the last segment(s)."""
        _validate_logical_path(path)
        validate_max_bytes(max_bytes)
        await self._ensure_container()
        async with self._errors("read", path):
            sizes = await self._segment_sizes(path)
            parts: builtins.list[bytes] = []
            remaining = max_bytes
            for index in range(len(sizes) - 1, -1, -1):
                if remaining <= 0:
                    break
                take = min(remaining, sizes[index])
                if take > 0:
                    stream = await self._container.get_blob_client(
                        _segment_name(path, index)
                    ).download_blob(offset=sizes[index] - take, length=take)
                    parts.append(await stream.readall())
                remaining -= take
            parts.reverse()
            return b"".join(parts)

    async def size(self, path: str) -> int:
        """Total size of all segments. Raises ``BlobNotFoundError`` if absent."""
        _validate_logical_path(path)
        await self._ensure_container()
        async with self._errors("stat", path):
            return sum(await self._segment_sizes(path))

    async def exists(self, path: str) -> bool:
        """Whether the blob exists (segment 0 always exists while any segment does)."""
        _validate_logical_path(path)
        await self._ensure_container()
        async with self._errors("stat", path):
            try:
                await self._container.get_blob_client(path).get_blob_properties()
            except ResourceNotFoundError:
                return False
            return True

    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Sorted logical paths starting with ``prefix`` (segments are hidden)."""
        validate_blob_prefix(prefix)
        await self._ensure_container()
        names: builtins.list[str] = []
        async with self._errors("list", prefix):
            async for item in self._container.list_blobs(name_starts_with=prefix or None):
                if not _SEGMENT_RE.search(item.name):
                    names.append(item.name)
        names.sort()
        return names

    # --- writes -----------------------------------------------------------------------

    async def write(
        self,
        path: str,
        data: bytes,
        *,
        if_version: BlobVersion | None = None,
        if_absent: bool = False,
    ) -> BlobVersion:
        """Replace the content with one block-blob upload; returns the new ETag.

        ``if_version`` sends ``If-Match``, ``if_absent`` sends ``If-None-Match: *``;
        a failed condition raises ``BlobPreconditionFailedError`` and changes nothing.
        """
        _validate_logical_path(path)
        payload = as_blob_bytes(data)
        validate_write_conditions(if_version, if_absent)
        await self._ensure_container()
        kwargs: dict[str, Any] = {"overwrite": True}
        if if_version is not None:
            kwargs.update(etag=if_version, match_condition=MatchConditions.IfNotModified)
        elif if_absent:
            kwargs.update(overwrite=False, match_condition=MatchConditions.IfMissing)
        async with self._errors("write", path):
            result = await self._container.get_blob_client(path).upload_blob(
                payload, blob_type=BlobType.BLOCKBLOB, **kwargs
            )
        return str(result["etag"])

    async def append(self, path: str, data: bytes) -> None:
        """Append ``data`` with exactly one append block (created, or rolled over, as needed).

        Raises ``PayloadTooLargeError`` for more than :data:`MAX_APPEND_BYTES`.
        """
        _validate_logical_path(path)
        payload = as_blob_bytes(data)
        if len(payload) > MAX_APPEND_BYTES:
            raise PayloadTooLargeError(
                f"append of {len(payload)} bytes exceeds the {MAX_APPEND_BYTES}-byte limit "
                "of one Azure append block"
            )
        await self._ensure_container()
        async with self._errors("append", path):
            cached = self._segments.get(path)
            if cached is None:
                cached = (await self._last_segment_index(path), 0)
            index, blocks = cached
            if blocks >= self._max_blocks:
                index, blocks = index + 1, 0
            if not payload:
                await self._create_append_blob(_segment_name(path, index))
                self._segments[path] = (index, blocks)
                return
            for attempt in range(_APPEND_ATTEMPTS):
                client = self._container.get_blob_client(_segment_name(path, index))
                try:
                    result = await client.append_block(payload, length=len(payload))
                    break
                except ResourceNotFoundError:
                    if attempt == _APPEND_ATTEMPTS - 1:
                        raise
                    await self._create_append_blob(_segment_name(path, index))
                except HttpResponseError as exc:
                    if (
                        _error_code(exc) != "BlockCountExceedsLimit"
                        or attempt == _APPEND_ATTEMPTS - 1
                    ):
                        raise
                    index += 1  # full (other writers filled it): move on
            committed = result.get("blob_committed_block_count")
            self._segments[path] = (index, committed if isinstance(committed, int) else 0)

    async def delete(self, path: str) -> bool:
        """Delete every segment (segment 0 last); returns whether anything existed."""
        _validate_logical_path(path)
        await self._ensure_container()
        self._segments.pop(path, None)
        deleted = False
        async with self._errors("delete", path):
            last = await self._last_segment_index(path)
            for index in range(last, -1, -1):
                try:
                    await self._container.get_blob_client(_segment_name(path, index)).delete_blob()
                    deleted = True
                except ResourceNotFoundError:
                    pass
        return deleted

    async def close(self) -> None:
        """Close the SDK client and its HTTP session."""
        await self._container.close()
        await self._service.close()
