"""Redis failures: which errors are outages, which refusals, and jarvismem's error for each.

Every redis-py failure becomes :class:`~jarvismem.errors.BackendUnavailableError`
(not now: the tiers queue and retry) or :class:`~jarvismem.errors.BackendRejectedError`
(never), here and nowhere else. The command retry that skips retries while the
server is known down lives here too: it decides which failures are worth a retry.
"""

from __future__ import annotations

import asyncio
import copy
import os
import re
import time
from typing import Any

import redis
from redis.asyncio.retry import Retry
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    ClusterError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jarvismem.errors import BackendRejectedError, BackendUnavailableError

KNOWN_DOWN_SECONDS = 5.0
"""After a command failed every retry, how long later commands skip their retries."""


class CommandRetry(Retry):
    """redis-py's command retry, minus credential refusals, and once only while down.

    redis-py files ``AuthenticationError`` (NOAUTH, WRONGPASS) under
    ``ConnectionError``, so a stock ``Retry`` resends a refused command three
    times with backoff: a wrong password then looks like a slow, flaky server
    ("timed out after 3s") instead of the configuration error it is.

    A command that failed after every retry means the server is down, not
    blipping: for :data:`KNOWN_DOWN_SECONDS` after that, commands try once and
    fail at once (the tiers then queue writes in the outbox and mark reads
    degraded). Without this, each of the dozen commands of a turn or a bundle
    waited out the whole backoff again, and an agent started with Redis down
    spent seconds per turn learning the same fact. Any success ends it.
    """

    def __init__(self, backoff: Any, retries: int, *, shared: list[float] | None = None) -> None:
        super().__init__(backoff, retries)
        # [monotonic time until which the server counts as down]; one list for
        # all the client's connections, see __deepcopy__.
        self._down = shared if shared is not None else [0.0]

    def __deepcopy__(self, memo: dict[int, Any]) -> CommandRetry:
        # redis-py deep-copies the retry into every connection; what one
        # connection learnt about the server must hold for all of them.
        return CommandRetry(copy.deepcopy(self._backoff, memo), self._retries, shared=self._down)

    def known_down(self) -> bool:
        """Whether a recent command found the server down (retries are skipped)."""
        return time.monotonic() < self._down[0]

    def mark_down(self) -> None:
        """The server was just found down: skip retries for a while."""
        self._down[0] = time.monotonic() + KNOWN_DOWN_SECONDS

    async def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        given = kwargs.pop("is_retryable", None) if "is_retryable" in kwargs else None
        if args:  # positional is_retryable (redis-py passes it by keyword today)
            given, args = args[0], args[1:]
        with_failure_count = bool(kwargs.pop("with_failure_count", False))
        retries = 0 if self.known_down() else self._retries
        failures = 0
        try:
            while True:
                try:
                    result = await do()
                except self._supported_errors as error:
                    if is_auth_error(error) or (given is not None and not given(error)):
                        raise
                    failures += 1
                    # redis-py's handler closes the connection (and may raise itself).
                    if with_failure_count:
                        await fail(error, failures)
                    else:
                        await fail(error)
                    if failures > retries:
                        raise error
                    await asyncio.sleep(self._backoff.compute(failures))
                else:
                    self._down[0] = 0.0
                    return result
        except self._supported_errors as error:
            if failures and not is_auth_error(error):
                self.mark_down()
            raise


def is_auth_error(exc: BaseException) -> bool:
    """True when Redis refused the credentials (NOAUTH, WRONGPASS, AUTH misuse)."""
    if isinstance(exc, AuthenticationError | AuthenticationWrongNumberOfArgsError):
        return True
    if isinstance(exc, ResponseError):
        return str(exc).lstrip("-").split(" ", 1)[0].upper() in ("NOAUTH", "WRONGPASS")
    return False


# Error replies that mean "not now" rather than "never": the server is loading,
# busy with a script, short of memory or replicas, read-only during a failover,
# or the cluster is resharding. A write that meets one is queued and retried.
TRANSIENT_REPLIES = frozenset(
    {
        "LOADING",
        "BUSY",
        "OOM",
        "NOREPLICAS",
        "READONLY",
        "MASTERDOWN",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "MOVED",
        "ASK",
        "NOSCRIPT",
    }
)

# redis-py prefixes a command refused inside MULTI/EXEC (or a raising pipeline)
# with "Command # N (...) of pipeline caused error: ".
_PIPELINE_NOTE = re.compile(r"Command # \d+ \(.*?\) of pipeline caused error: ", re.S)
# Redis 6 wraps the error of a redis.call inside a script: "ERR Error running
# script (call to f_...): @user_script:12: @user_script: 12: -OOM command not ...".
_SCRIPT_INNER = re.compile(r": -([A-Z]+) ")


def reply_code(text: str) -> str:
    """The error code (``OOM``, ``WRONGTYPE``, ...) of a Redis error reply's text.

    Found wherever the reply comes back: a plain reply, a script's error reply
    (also the older servers' ``ERR Error running script ... -OOM ...`` form), a
    per-command reply of a pipeline, a command refused inside MULTI/EXEC.
    """
    text = text.lstrip("-")
    note = _PIPELINE_NOTE.match(text)
    if note is not None:
        text = text[note.end() :].lstrip("-")
    code = text.split(" ", 1)[0].upper()
    if code == "ERR" and "script" in text:
        inner = _SCRIPT_INNER.search(text)
        if inner is not None:
            return inner.group(1)
    return code


def is_transient_reply(text: str) -> bool:
    """True when an error reply means "not now" (see :data:`TRANSIENT_REPLIES`)."""
    return reply_code(text) in TRANSIENT_REPLIES


_REDIS_PACKAGE = os.path.dirname(os.path.abspath(redis.__file__)) + os.sep


def closed_under_command(exc: BaseException) -> bool:
    """True for redis-py's own ``AttributeError`` on a connection closed mid-command.

    When a command fails during a failover, redis-py closes connections other tasks
    are using (the cluster client closes every connection on ``CLUSTERDOWN``); a
    command between its "connected?" check and its write then meets the closed
    connection's ``None`` writer and raises ``AttributeError: 'NoneType' object has
    no attribute 'writelines'`` from redis-py's connection code. That is an outage
    (the command never reached the server), not a refusal: taken for one, a queued
    turn was dead-lettered, an acknowledged turn lost.
    """
    if not isinstance(exc, AttributeError) or "'NoneType'" not in str(exc):
        return False
    tb, innermost = exc.__traceback__, None
    while tb is not None:
        innermost, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    return innermost is not None and os.path.abspath(innermost).startswith(_REDIS_PACKAGE)


def cluster_unreachable(exc: BaseException) -> bool:
    """True for the cluster client's "Redis Cluster cannot be connected" error.

    redis-py raises it (a ``RedisClusterException``, outside its ``RedisError``
    hierarchy) when no node it knows answers while it loads the cluster layout:
    at start with every seed down, or mid-failover. An outage, not a refusal; left
    untranslated it escaped the tiers as a raw library error.
    """
    if not isinstance(exc, RedisClusterException) or isinstance(exc, SlotNotCoveredError):
        return False
    cause = exc.__cause__ or exc.__context__
    return "cannot be connected" in str(exc) or isinstance(
        cause, RedisConnectionError | RedisTimeoutError | TimeoutError | OSError
    )


def is_transient_redis_error(exc: BaseException) -> bool:
    """True when ``exc`` (from redis-py) is an outage worth retrying later."""
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | TimeoutError | OSError):
        return True
    if cluster_unreachable(exc):
        return True
    if isinstance(exc, SlotNotCoveredError) or closed_under_command(exc):
        # No node serves the slot yet (mid-failover); a connection closed under us.
        return True
    if isinstance(
        exc,
        OutOfMemoryError | ReadOnlyError | TryAgainError | AskError | ClusterError | NoScriptError,
    ):
        return True
    if isinstance(exc, ResponseError):
        return is_transient_reply(str(exc))
    return isinstance(exc, RedisError) and not isinstance(exc, ResponseError)


def translate_redis_error(exc: BaseException, what: str) -> Exception:
    """jarvismem's own error for a redis-py failure of operation ``what``.

    Transient failures become :class:`BackendUnavailableError`; a refusal that
    would repeat (WRONGTYPE, a script error) becomes :class:`BackendRejectedError`.
    The message names the operation and the error class, never a URL or value.
    """
    first = str(exc).split("\n", 1)[0][:200]
    if is_transient_redis_error(exc):
        return BackendUnavailableError(f"{what}: Redis unavailable ({type(exc).__name__}: {first})")
    return BackendRejectedError(f"{what}: Redis refused it ({type(exc).__name__}: {first})")


_FAILURES = (RedisError, TimeoutError, OSError)


def is_redis_failure(exc: BaseException) -> bool:
    """A failure of a Redis call, to translate: redis-py's errors, timeouts, socket
    errors, and the outages redis-py raises outside its hierarchy (see
    :func:`closed_under_command`, :func:`cluster_unreachable`, ``SlotNotCoveredError``)."""
    return (
        isinstance(exc, (*_FAILURES, SlotNotCoveredError))
        or closed_under_command(exc)
        or cluster_unreachable(exc)
    )


class redis_errors:
    """Run a block of Redis calls under ``timeout`` with errors translated.

    Inside, redis-py and timeout errors become :class:`BackendUnavailableError`
    or :class:`BackendRejectedError`; jarvismem's own errors pass unchanged.
    A plain class rather than a generator-based context manager: it wraps
    every ledger append, and costs a few hundred nanoseconds instead of microseconds.
    """

    __slots__ = ("_timeout", "what")

    def __init__(self, what: str, timeout: float | None = None) -> None:
        self.what = what
        self._timeout = None if timeout is None else asyncio.timeout(timeout)

    async def __aenter__(self) -> None:
        if self._timeout is not None:
            await self._timeout.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if self._timeout is not None:
            try:
                # Turns the cancellation of an expired deadline into TimeoutError.
                await self._timeout.__aexit__(exc_type, exc, tb)
            except TimeoutError as expired:
                raise translate_redis_error(expired, self.what) from expired
        if exc is not None and is_redis_failure(exc):
            raise translate_redis_error(exc, self.what) from exc
