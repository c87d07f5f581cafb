"""Every exception jarvismem raises on purpose.

One hierarchy so callers can catch ``JarvisMemError`` for "anything from the
memory runtime" or a specific subclass for one condition. Messages never carry
secrets (API keys, tokens, passwords in URLs): build them from ids and reasons.
"""

from __future__ import annotations

from typing import ClassVar


class JarvisMemError(Exception):
    """Base class of every error raised by jarvismem."""

    retryable: ClassVar[bool] = False
    """Whether the same operation may succeed later unchanged (an outage, a server
    short of memory). The one policy for queued writes: a write that meets a
    retryable error stays queued and is replayed; any other error is final (a
    refusal is dead-lettered, a caller error raised). Declared here, per class,
    and nowhere else; :func:`is_retryable` reads it for any exception."""


def is_retryable(exc: BaseException) -> bool:
    """Whether a queued write that met ``exc`` stays queued (else it is refused for good).

    A jarvismem error answers with its class's :attr:`~JarvisMemError.retryable`.
    Of the rest, only a time-out and an OS error (a connection refused or reset
    below a client that did not translate it) are outages; anything else (a
    bug, an unexpected reply) would fail the same way again.
    """
    if isinstance(exc, JarvisMemError):
        return exc.retryable
    return isinstance(exc, TimeoutError | OSError)


# --- configuration and input -------------------------------------------------


class ConfigError(JarvisMemError, ValueError):
    """A setting is missing or invalid. The message names the variable."""


class InvalidIdError(JarvisMemError, ValueError):
    """A workflow/step/agent/turn/tenant id cannot be used in a key or a path."""


class PayloadTooLargeError(JarvisMemError, ValueError):
    """A value is larger than its documented limit; nothing was written."""


class InvalidPayloadError(JarvisMemError, ValueError):
    """A value has the wrong type or cannot be serialised; nothing was written."""


# --- backends: what every backend failure is translated into ----------------------
#
# The backends (Redis, blob storage, HTTP services) translate their client
# libraries' errors at the edge: nothing above jarvismem.backends sees a
# redis-py, httpx, Azure SDK or OS error. Each failure is either *transient*
# (worth retrying later: ``retryable``) or *rejected* (would fail the same way again).


class BackendUnavailableError(JarvisMemError):
    """A configured backend cannot be reached right now (transient: retry later).

    Also a server that answers "not now": out of memory, loading, busy,
    read-only or short of replicas during a failover, a cluster resharding."""

    retryable = True


class BackendRejectedError(JarvisMemError):
    """The backend answered but refused the operation (wrong key type, script
    error, malformed record): retrying later would fail the same way, so a
    queued write that meets it is dead-lettered rather than retried forever."""

    retryable = False


class MisdirectedRecordError(JarvisMemError):
    """An outbox record is stamped for another destination than the outbox's
    backend (a copied or misplaced file, another tenant's records): never sent
    there, refused like any record that can never be delivered."""

    retryable = False


# --- blob storage --------------------------------------------------------------


class BlobError(JarvisMemError):
    """A blob backend failed (I/O error, service error); retryable unless a
    subclass says otherwise."""

    retryable = True


class BlobUnavailableError(BlobError, BackendUnavailableError):
    """Blob storage failed in a way that may pass (disk full, I/O error, timeout,
    connection lost, throttled, service error 5xx)."""

    retryable = True


class BlobRejectedError(BlobError, BackendRejectedError):
    """Blob storage refused the operation (permission denied, read-only, a folder
    in the way, an HTTP 4xx other than not-found/conflict)."""

    retryable = False


class BlobNotFoundError(BlobError, KeyError):
    """The blob does not exist."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "blob not found"


class BlobPreconditionFailedError(BlobError):
    """A conditional write lost: the blob's version/etag is not the expected one."""


class InvalidBlobPathError(BlobError, ValueError):
    """A blob path is malformed or would escape the storage root."""

    retryable = False


# --- redis-side tiers ------------------------------------------------------------


class CheckpointConflictError(JarvisMemError):
    """A checkpoint save carried a stale revision (someone saved in between)."""

    def __init__(self, message: str, *, expected: int | None, actual: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class WorkflowNotFoundError(JarvisMemError, LookupError):
    """No workflow of that id holds anything in the namespace (no Redis key, no
    blob, no queued write). ``suggestions``: indexed workflow ids close to it."""

    def __init__(self, workflow_id: str, namespace: str, suggestions: tuple[str, ...] = ()) -> None:
        message = f"no workflow {workflow_id!r} in namespace {namespace!r}"
        if suggestions:
            message += f" (did you mean {' or '.join(repr(s) for s in suggestions)}?)"
        super().__init__(message)
        self.workflow_id = workflow_id
        self.namespace = namespace
        self.suggestions = suggestions


class LockNotAcquiredError(JarvisMemError):
    """Another process holds the lock (e.g. the workflow's compactor)."""


# --- LLM ------------------------------------------------------------------------------


class LLMError(JarvisMemError):
    """The LLM endpoint failed, timed out or returned an unusable answer."""


# --- Athena ---------------------------------------------------------------------------


class AthenaError(JarvisMemError):
    """The Athena service answered with an error or could not be reached."""

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class AthenaBadRequestError(AthenaError):
    """HTTP 400: invalid argument or failed precondition."""


class AthenaAuthError(AthenaError):
    """HTTP 401/403: the API key or JWT was refused.

    Retryable: the record is fine, the credentials are not; once they are fixed
    (a rotated key put back) the same record is delivered, so it stays queued."""

    retryable = True


class AthenaNotFoundError(AthenaError):
    """HTTP 404: unknown session or route."""


class AthenaUnsupportedError(AthenaError):
    """HTTP 501: the server does not implement this endpoint (not an outage)."""


class AthenaServerError(AthenaError):
    """HTTP 5xx (other than 501): datastore or LLM failure on the server."""

    retryable = True


class AthenaUnavailableError(AthenaError):
    """Connection refused, timeout, open circuit breaker, or a malformed answer."""

    retryable = True


# --- cognitive spaces ------------------------------------------------------------


class SpaceError(JarvisMemError):
    """Base class of cognitive-space errors."""


class SpaceNotFoundError(SpaceError, KeyError):
    """The named space does not exist."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "space not found"


class SpaceTypeError(SpaceError, TypeError):
    """A map operation on a list space or the other way round."""


class ReservedSpaceError(SpaceError):
    """The reserved spaces ``world`` and ``tasks`` cannot be deleted or retyped."""


class SpaceConflictError(SpaceError):
    """Strict mode: the space changed since it was read (stale revision)."""


class SpaceIndexError(SpaceError, IndexError):
    """A list-space position is out of range."""


class SpaceItemNotFoundError(SpaceError, KeyError):
    """No item with that id in the list space (``remove_from_space``, ``update_in_space``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "item not found"


class TaskNotFoundError(SpaceItemNotFoundError):
    """No task with that id in the ``tasks`` space."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "task not found"


# --- recall ---------------------------------------------------------------------------


class RecallError(JarvisMemError):
    """Base class of recall/policy errors."""


class RecallStoreMissingError(RecallError):
    """Recall is enabled but no store was configured."""


class InvalidPolicyError(RecallError, ValueError):
    """A memory policy value is invalid. The message names the field."""


class SessionIdRequiredError(RecallError, ValueError):
    """The policy's scope is ``session`` but no session id was given."""


class NamespaceContextMissingError(RecallError, KeyError):
    """The policy takes its namespace from a context key that is absent."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "namespace context missing"
