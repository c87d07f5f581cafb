"""The :class:`BlobStorage` protocol every blob backend implements.

Paths are ``/``-separated relative names (:func:`validate_blob_path` refuses anything
else). Two kinds of blob behind one interface, never mixed on one path:

* *whole* blobs, :meth:`BlobStorage.write`: atomic replace, optionally conditional on
  a version (compare-and-set);
* *append* blobs, :meth:`BlobStorage.append`: O(1), and one call's bytes are never torn
  or interleaved with another's, across processes.

:meth:`read` and :meth:`tail` work on both. Check a backend with
:mod:`jarvismem.testing.blob_conformance`.
"""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable

from jarvismem.errors import InvalidBlobPathError, InvalidPayloadError

BlobVersion = str
"""Opaque version token (an ETag on Azure, a content stamp locally)."""

MAX_PATH_LENGTH = 1024
_SEGMENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def validate_blob_path(path: object) -> str:
    """Return ``path`` if it is a safe relative blob path, else raise.

    Each ``/``-separated segment must be a plain name (letters, digits, ``. _ -``,
    not starting with a dot, never ``..``). Absolute paths, empty segments,
    backslashes and NUL are refused.
    """
    if not isinstance(path, str):
        raise InvalidBlobPathError(f"blob path must be a string, got {type(path).__name__}")
    if not path or len(path) > MAX_PATH_LENGTH:
        raise InvalidBlobPathError("blob path must be 1-1024 characters")
    for segment in path.split("/"):
        if not _SEGMENT_RE.match(segment) or ".." in segment:
            shown = path[:80].encode("unicode_escape").decode("ascii")
            raise InvalidBlobPathError(f"unsafe blob path {shown!r}")
    return path


def as_blob_bytes(data: object) -> bytes:
    """Blob data as bytes: bytes-like only (a str would need an encoding decision)."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise InvalidPayloadError(f"blob data must be bytes, got {type(data).__name__}")


def validate_blob_prefix(prefix: object) -> str:
    """A listing prefix: ``""`` or a valid path, optionally ending with ``/``."""
    if prefix == "":
        return ""
    if not isinstance(prefix, str):
        raise InvalidBlobPathError("blob prefix must be a string")
    validate_blob_path(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


def validate_max_bytes(max_bytes: object) -> int:
    """The ``max_bytes`` of :meth:`BlobStorage.tail`: a non-negative int (not a bool)."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise InvalidPayloadError("max_bytes must be a non-negative int")
    return max_bytes


def validate_write_conditions(if_version: object, if_absent: object) -> None:
    """The conditions of :meth:`BlobStorage.write`: a version string or none, not both."""
    if if_version is not None and not isinstance(if_version, str):
        raise InvalidPayloadError("if_version must be a version string returned by the backend")
    if if_version is not None and if_absent:
        raise InvalidPayloadError("if_version and if_absent cannot be combined")


@runtime_checkable
class BlobStorage(Protocol):
    """Async blob storage. Every method is non-blocking for the event loop."""

    @property
    def name(self) -> str:
        """Short backend name for logs and status (``local``, ``azure``, ...)."""
        ...

    async def read(self, path: str) -> bytes:
        """Whole content. Raises ``BlobNotFoundError`` if absent."""
        ...

    async def read_versioned(self, path: str) -> tuple[bytes, BlobVersion]:
        """Content and its version token. Raises ``BlobNotFoundError`` if absent."""
        ...

    async def write(
        self,
        path: str,
        data: bytes,
        *,
        if_version: BlobVersion | None = None,
        if_absent: bool = False,
    ) -> BlobVersion:
        """Atomically replace the content: readers see old or new, never a mix.

        ``if_version``: only if the current version matches, and ``if_absent``:
        only if the blob does not exist; otherwise ``BlobPreconditionFailedError``
        and nothing is changed. Returns the new version.
        """
        ...

    async def append(self, path: str, data: bytes) -> None:
        """Append ``data`` as one unit (created if absent). O(1) in the blob's size."""
        ...

    async def tail(self, path: str, max_bytes: int) -> bytes:
        """The last ``max_bytes`` bytes (all of it if smaller; may start mid-line).

        Raises ``BlobNotFoundError`` if absent. Cost is bounded by ``max_bytes``.
        """
        ...

    async def size(self, path: str) -> int:
        """Size in bytes. Raises ``BlobNotFoundError`` if absent."""
        ...

    async def exists(self, path: str) -> bool:
        """Whether the blob exists."""
        ...

    async def list(self, prefix: str = "") -> list[str]:
        """Paths starting with ``prefix``, sorted."""
        ...

    async def delete(self, path: str) -> bool:
        """Delete; returns whether something was deleted."""
        ...

    async def close(self) -> None:
        """Release clients and file handles."""
        ...
