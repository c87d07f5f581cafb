"""The delivery circuit of one Athena outbox: closed, open, half-open.

Consecutive failures back off exponentially (one
:class:`~jarvismem.resilience.Backoff`, counted by a
:class:`~jarvismem.resilience.CircuitBreaker`); past a threshold the circuit
opens for a cooldown, then one trial delivery decides whether it closes again.
It only keeps time: the delivery loop decides what to do with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from jarvismem import telemetry
from jarvismem.resilience import Backoff, CircuitBreaker

__all__ = ["CircuitState", "DeliveryCircuit"]

CircuitState = Literal["closed", "open", "half_open"]


class DeliveryCircuit:
    """Closed, open or half-open, with the time of the next delivery attempt.

    Below ``failure_threshold`` consecutive failures, the next attempt waits
    out ``backoff`` (through a :class:`CircuitBreaker`); at the threshold (or
    when a half-open trial fails) the circuit opens for ``cooldown`` seconds.
    One success closes it. The clock is injectable for tests.
    """

    def __init__(
        self,
        *,
        failure_threshold: int,
        cooldown: float,
        backoff: Backoff,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._breaker = CircuitBreaker(backoff, clock=clock)
        self._longest_backoff = backoff.cap
        self._threshold = max(1, failure_threshold)
        self._cooldown = cooldown
        self._clock = clock
        self.state: CircuitState = "closed"
        self.open_until = 0.0
        self.next_attempt = 0.0
        telemetry.watch_circuit(self)  # the athena.circuit gauge counts circuits per state

    @property
    def longest_backoff(self) -> float:
        """The longest wait the backoff gives, in seconds (its cap)."""
        return self._longest_backoff

    @property
    def failures(self) -> int:
        """Consecutive failures so far."""
        return self._breaker.failures

    @property
    def is_closed(self) -> bool:
        """True while deliveries flow normally."""
        return self.state == "closed"

    def reported_state(self) -> CircuitState:
        """The state as ``health()`` shows it: an open circuit past its cooldown is half-open."""
        if self.state == "open" and self._clock() >= self.open_until:
            return "half_open"
        return self.state

    def wait(self) -> float:
        """Seconds until the next attempt (<= 0: now)."""
        return self.next_attempt - self._clock()

    def half_open(self) -> None:
        """The cooldown is over: the next delivery is a trial."""
        self.state = "half_open"

    def record_success(self) -> bool:
        """Close the circuit; True if it was recovering (worth a log line)."""
        recovering = self.state != "closed" or self._breaker.failures > 0
        self.state = "closed"
        self._breaker.record_success()
        return recovering

    def record_failure(self) -> float | None:
        """Count a failure; the backoff it set, or None when the circuit is now open."""
        backoff = self._breaker.record_failure()
        now = self._clock()
        if self.state == "half_open" or self._breaker.failures >= self._threshold:
            self.state = "open"
            self.open_until = self.next_attempt = now + self._cooldown
            return None
        self.next_attempt = now + backoff
        return backoff

    def pause(self, seconds: float) -> None:
        """No attempt for ``seconds`` (an unexpected error; not a delivery failure)."""
        self.next_attempt = self._clock() + seconds
