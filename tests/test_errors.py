"""The error hierarchy: one root, transient vs rejected backend failures, readable messages."""

from __future__ import annotations

import inspect

import pytest

from jarvismem import errors
from jarvismem.errors import (
    AthenaError,
    AthenaUnavailableError,
    BackendRejectedError,
    BackendUnavailableError,
    BlobError,
    BlobNotFoundError,
    BlobPreconditionFailedError,
    BlobRejectedError,
    BlobUnavailableError,
    CheckpointConflictError,
    ConfigError,
    InvalidBlobPathError,
    InvalidPayloadError,
    JarvisMemError,
    NamespaceContextMissingError,
    SpaceNotFoundError,
    TaskNotFoundError,
)

ALL_ERRORS = [
    obj
    for _, obj in inspect.getmembers(errors, inspect.isclass)
    if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
]


def test_the_module_defines_errors() -> None:
    assert len(ALL_ERRORS) > 20


@pytest.mark.parametrize("error", ALL_ERRORS, ids=lambda e: e.__name__)
def test_every_error_is_a_jarvismem_error(error: type[BaseException]) -> None:
    # One ``except JarvisMemError`` catches anything the runtime raises on purpose.
    assert issubclass(error, JarvisMemError)


@pytest.mark.parametrize("error", ALL_ERRORS, ids=lambda e: e.__name__)
def test_no_error_is_both_transient_and_rejected(error: type[BaseException]) -> None:
    assert not (
        issubclass(error, BackendUnavailableError) and issubclass(error, BackendRejectedError)
    )


def test_blob_failures_say_whether_a_retry_can_help() -> None:
    unavailable = BlobUnavailableError("disk full")
    rejected = BlobRejectedError("permission denied")
    # Existing ``except BlobError`` handlers still catch both.
    assert isinstance(unavailable, BlobError) and isinstance(rejected, BlobError)
    assert isinstance(unavailable, BackendUnavailableError)
    assert not isinstance(unavailable, BackendRejectedError)
    assert isinstance(rejected, BackendRejectedError)
    assert not isinstance(rejected, BackendUnavailableError)


@pytest.mark.parametrize(
    "error",
    [BlobNotFoundError, BlobPreconditionFailedError, InvalidBlobPathError],
    ids=lambda e: e.__name__,
)
def test_specific_blob_errors_are_neither_transient_nor_rejected(error: type[BlobError]) -> None:
    # Callers decide what these mean (absent, lost race, caller bug): no retry class.
    assert issubclass(error, BlobError)
    assert not issubclass(error, BackendUnavailableError | BackendRejectedError)


@pytest.mark.parametrize(
    "error", [ConfigError, InvalidPayloadError, InvalidBlobPathError], ids=lambda e: e.__name__
)
def test_input_errors_are_value_errors(error: type[Exception]) -> None:
    with pytest.raises(ValueError):
        raise error("bad input")


@pytest.mark.parametrize(
    "error",
    [BlobNotFoundError, SpaceNotFoundError, TaskNotFoundError, NamespaceContextMissingError],
    ids=lambda e: e.__name__,
)
def test_key_errors_print_their_message_not_its_repr(error: type[KeyError]) -> None:
    with pytest.raises(KeyError) as caught:
        raise error("blob 'a/b' not found")
    assert str(caught.value) == "blob 'a/b' not found"
    assert str(error()) != ""


def test_errors_carry_their_details() -> None:
    conflict = CheckpointConflictError("stale", expected=3, actual=4)
    assert (conflict.expected, conflict.actual) == (3, 4)
    athena = AthenaUnavailableError("down", status=503, code=14)
    assert isinstance(athena, AthenaError)
    assert (athena.status, athena.code) == (503, 14)


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (errors.AthenaServerError, True),
        (errors.AthenaUnavailableError, True),  # also a 429: rate limited
        (errors.AthenaAuthError, True),  # fixed credentials make the same record deliverable
        (errors.AthenaBadRequestError, False),
        (errors.AthenaNotFoundError, False),
        (errors.AthenaUnsupportedError, False),
        (errors.MisdirectedRecordError, False),
    ],
    ids=lambda e: getattr(e, "__name__", str(e)),
)
def test_athena_errors_say_whether_a_queued_record_is_retried(
    error: type[errors.JarvisMemError], retryable: bool
) -> None:
    assert error("x").retryable is retryable
