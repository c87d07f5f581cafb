"""DeliveryCircuit on a hand-driven clock: backoff, open at the threshold, half-open trial."""

from __future__ import annotations

import pytest

from jarvismem.resilience import Backoff
from jarvismem.tiers.athena.circuit import DeliveryCircuit


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _circuit(clock: _Clock, threshold: int = 3, cooldown: float = 30.0) -> DeliveryCircuit:
    return DeliveryCircuit(
        failure_threshold=threshold,
        cooldown=cooldown,
        backoff=Backoff(base=0.5, cap=1.5, jitter="none"),
        clock=clock,
    )


def test_circuit_backs_off_exponentially_below_the_threshold() -> None:
    clock = _Clock()
    circuit = _circuit(clock, threshold=4)
    assert [circuit.record_failure() for _ in range(3)] == [0.5, 1.0, 1.5]  # capped
    assert circuit.state == "closed" and circuit.failures == 3
    assert circuit.wait() == pytest.approx(1.5)


def test_circuit_opens_at_the_threshold_for_the_cooldown() -> None:
    clock = _Clock()
    circuit = _circuit(clock, threshold=2, cooldown=30.0)
    circuit.record_failure()
    assert circuit.record_failure() is None
    assert circuit.state == "open" and circuit.reported_state() == "open"
    assert circuit.wait() == pytest.approx(30.0)
    clock.now += 30.0
    assert circuit.reported_state() == "half_open"


def test_failed_trial_reopens_and_success_closes() -> None:
    clock = _Clock()
    circuit = _circuit(clock, threshold=5, cooldown=10.0)
    circuit.half_open()
    assert circuit.record_failure() is None  # one failed trial is enough
    assert circuit.state == "open"
    circuit.half_open()
    assert circuit.record_success() is True
    assert circuit.is_closed and circuit.failures == 0
    assert circuit.record_success() is False  # nothing to recover from


def test_pause_delays_without_counting_a_failure() -> None:
    clock = _Clock()
    circuit = _circuit(clock)
    circuit.pause(7.0)
    assert circuit.wait() == pytest.approx(7.0) and circuit.failures == 0


def test_the_longest_backoff_is_the_backoffs_cap() -> None:
    # The delivery loop pauses this long after an unexpected error.
    assert _circuit(_Clock()).longest_backoff == 1.5
