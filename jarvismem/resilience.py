"""Backoff, circuit breaking and retries: one policy for every retrying loop.

Every place that waits before trying a backend again (HTTP clients, outbox
drainers, optimistic-concurrency loops, the Athena delivery loop) takes its
delay from a :class:`Backoff`, so the formula is written once and tuned in one
place. :class:`CircuitBreaker` counts consecutive failures of one destination
and says how long to leave it alone. HTTP request retries run on ``tenacity``
through :func:`retrying`, which adds the two things every client here needs:
a server's ``Retry-After`` overrides the backoff, and the sleep is injectable
so tests can observe delays without waiting for them.

Nothing here imports a backend library: this module sits below ``backends/``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
)

from jarvismem.defaults import RETRY_AFTER_CAP

__all__ = ["Backoff", "CircuitBreaker", "retrying"]

Jitter = Literal["none", "equal", "full"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff: ``min(cap, base * factor**attempt)``, jittered.

    ``jitter``:
      * ``"none"``: the ceiling itself (a single deliverer; nothing to spread);
      * ``"equal"``: uniform in ``[ceiling/2, ceiling]`` (many clients hit by one
        outage retry apart, yet never sooner than half the ceiling);
      * ``"full"``: uniform in ``[0, ceiling]`` (racing optimistic writers: the
        shortest expected wait that still breaks lock-step).
    """

    base: float
    cap: float
    factor: float = 2.0
    jitter: Jitter = "equal"

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < 0 or self.factor < 1:
            raise ValueError("Backoff needs base >= 0, cap >= 0 and factor >= 1")

    def ceiling(self, attempt: int) -> float:
        """The un-jittered delay before retry number ``attempt`` (0-based)."""
        # Exponent bounded: a long outage must not overflow a float.
        return min(self.cap, self.base * self.factor ** min(max(attempt, 0), 64))

    def delay(self, attempt: int) -> float:
        """The delay before retry number ``attempt`` (0-based), in seconds."""
        ceiling = self.ceiling(attempt)
        if self.jitter == "full":
            return random.uniform(0.0, ceiling)
        if self.jitter == "equal":
            return random.uniform(ceiling / 2, ceiling)
        return ceiling


class CircuitBreaker:
    """Consecutive-failure counter of one destination, with a backoff window.

    After a failure the destination is left alone for ``backoff.delay(n - 1)``
    seconds (``n`` consecutive failures); one success closes the circuit. It
    only keeps time: the caller decides what "leave alone" means (queue writes,
    skip a delivery pass). The clock is injectable for tests.
    """

    def __init__(self, backoff: Backoff, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff = backoff
        self.failures = 0
        self._clock = clock
        self._open_until = 0.0

    @property
    def is_open(self) -> bool:
        """True while the destination is being left alone."""
        return self._clock() < self._open_until

    def retry_in(self) -> float:
        """Seconds until the next attempt is allowed (0 when closed)."""
        return max(0.0, self._open_until - self._clock())

    def record_success(self) -> None:
        self.failures = 0
        self._open_until = 0.0

    def record_failure(self) -> float:
        """Count a failure and open the circuit; returns the wait it set."""
        self.failures += 1
        wait = self.backoff.delay(self.failures - 1)
        self._open_until = self._clock() + wait
        return wait


def retrying(
    *,
    attempts: int,
    backoff: Backoff,
    retry_if: Callable[[BaseException], bool],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    on_retry: Callable[[BaseException, int, float], None] | None = None,
    retry_after_cap: float = RETRY_AFTER_CAP,
) -> AsyncRetrying:
    """A ``tenacity.AsyncRetrying`` with this package's conventions.

    ``attempts``: total attempts (1 = no retry). ``retry_if(exc)``: whether a
    failed attempt may be repeated. An error with a numeric ``retry_after``
    attribute (a server's ``Retry-After``) sets the wait instead of the
    backoff, capped at ``retry_after_cap``. The last error is re-raised as it is (not
    wrapped in ``RetryError``). ``on_retry(exc, attempt, delay)`` is called
    before each wait (to log it). Use as::

        async for attempt in retrying(...):
            with attempt:
                ...
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = getattr(exc, "retry_after", None)
        if isinstance(hinted, int | float) and hinted >= 0:
            return min(float(hinted), retry_after_cap)
        return backoff.delay(state.attempt_number - 1)

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is None or state.outcome is None or state.next_action is None:
            return
        exc = state.outcome.exception()
        if exc is not None:
            on_retry(exc, state.attempt_number, state.next_action.sleep)

    return AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait,
        retry=retry_if_exception(retry_if),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
