"""The blob contract's shared helpers: path and prefix validation, byte coercion, the protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.blob.base import (
    MAX_PATH_LENGTH,
    BlobStorage,
    BlobVersion,
    as_blob_bytes,
    validate_blob_path,
    validate_blob_prefix,
    validate_max_bytes,
    validate_write_conditions,
)
from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.errors import InvalidBlobPathError, InvalidPayloadError

# --- validate_blob_path ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "a",
        "a.jsonl",
        "workflows/wf1/scratchpads/s1/a1.jsonl",
        "A-b_c.d/0",
        "x" * MAX_PATH_LENGTH,
    ],
)
def test_safe_relative_paths_pass_unchanged(path: str) -> None:
    assert validate_blob_path(path) == path


@pytest.mark.parametrize(
    "path",
    [
        "",
        "x" * (MAX_PATH_LENGTH + 1),
        "/abs",
        "a/",
        "a//b",
        "../x",
        "a/../b",
        "a/./b",
        "a..b",
        ".hidden",
        "a/.hidden",
        "-dash-first",
        "a\\b",
        "a\x00b",
        "a b",
        "a:b",
        "é",
    ],
)
def test_unsafe_paths_are_refused(path: str) -> None:
    with pytest.raises(InvalidBlobPathError):
        validate_blob_path(path)


@pytest.mark.parametrize("value", [None, 1, b"a", ["a"], Path("a")])
def test_a_path_must_be_a_string(value: Any) -> None:
    with pytest.raises(InvalidBlobPathError, match=type(value).__name__):
        validate_blob_path(value)


def test_the_refusal_escapes_control_characters_and_bounds_the_echo() -> None:
    # Paths may come from untrusted ids: the message must stay one short, printable line.
    with pytest.raises(InvalidBlobPathError) as info:
        validate_blob_path("bad\n\x00/" + "y" * 500)
    message = str(info.value)
    assert "\n" not in message and "\x00" not in message
    assert "\\n" in message and len(message) < 200


def test_path_errors_are_value_errors() -> None:
    # Callers that validate input catch ValueError; blob path refusals must be among them.
    with pytest.raises(ValueError):
        validate_blob_path("../x")


# --- validate_blob_prefix -------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "a", "a/", "workflows/wf1/", "a/b"])
def test_listing_prefixes_pass_unchanged(prefix: str) -> None:
    assert validate_blob_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["/", "//", "../", "a//", "/a/", ".x/", None, 3])
def test_bad_listing_prefixes_are_refused(prefix: Any) -> None:
    with pytest.raises(InvalidBlobPathError):
        validate_blob_prefix(prefix)


# --- as_blob_bytes --------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"abc", bytearray(b"abc"), memoryview(b"abc")])
def test_bytes_like_data_becomes_bytes(data: Any) -> None:
    converted = as_blob_bytes(data)
    assert converted == b"abc" and type(converted) is bytes


def test_bytes_are_passed_through_without_a_copy() -> None:
    data = b"x" * 1024
    assert as_blob_bytes(data) is data


@pytest.mark.parametrize("data", ["text", 5, None, [1, 2]])
def test_other_data_is_refused_naming_its_type(data: Any) -> None:
    with pytest.raises(InvalidPayloadError, match=type(data).__name__):
        as_blob_bytes(data)


# --- tail and write arguments (shared by every backend) --------------------------------------


@pytest.mark.parametrize("max_bytes", [0, 1, 1 << 40])
def test_a_non_negative_int_is_a_tail_size(max_bytes: int) -> None:
    assert validate_max_bytes(max_bytes) == max_bytes


@pytest.mark.parametrize("max_bytes", [-1, True, 1.5, "10", None])
def test_other_tail_sizes_are_refused(max_bytes: Any) -> None:
    with pytest.raises(InvalidPayloadError, match="max_bytes"):
        validate_max_bytes(max_bytes)


@pytest.mark.parametrize(("if_version", "if_absent"), [(None, False), (None, True), ("v1", False)])
def test_one_write_condition_or_none_is_accepted(if_version: Any, if_absent: bool) -> None:
    validate_write_conditions(if_version, if_absent)


def test_a_version_must_be_a_string() -> None:
    with pytest.raises(InvalidPayloadError, match="version string"):
        validate_write_conditions(3, False)


def test_both_write_conditions_are_refused() -> None:
    with pytest.raises(InvalidPayloadError, match="cannot be combined"):
        validate_write_conditions("v1", True)


# --- the protocol ---------------------------------------------------------------------------


def test_blob_version_is_an_opaque_string() -> None:
    assert BlobVersion is str


def test_the_local_backend_satisfies_the_protocol(tmp_path: Path) -> None:
    assert isinstance(LocalBlobStorage(tmp_path / "root"), BlobStorage)


def test_an_object_missing_a_method_is_not_blob_storage() -> None:
    class ReadOnly:
        name = "read-only"

        async def read(self, path: str) -> bytes:
            return b""

    assert not isinstance(ReadOnly(), BlobStorage)


async def test_versions_returned_by_a_backend_are_strings(local_blob: Any) -> None:
    version = await local_blob.write("v.txt", b"1")
    assert isinstance(version, str)
    assert (await local_blob.read_versioned("v.txt"))[1] == version
