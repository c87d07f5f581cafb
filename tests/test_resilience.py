"""The one backoff policy, the circuit breaker and the tenacity adapter."""

from __future__ import annotations

import pytest

from jarvismem.resilience import Backoff, CircuitBreaker, retrying


def test_backoff_ceiling_doubles_and_caps() -> None:
    b = Backoff(0.1, 1.0, jitter="none")
    assert [b.delay(n) for n in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert b.delay(10_000) == 1.0  # no float overflow on a long outage


@pytest.mark.parametrize("jitter, low", [("equal", 0.5), ("full", 0.0)])
def test_backoff_jitter_stays_in_its_window(jitter: str, low: float) -> None:
    b = Backoff(1.0, 8.0, jitter=jitter)  # type: ignore[arg-type]
    delays = [b.delay(2) for _ in range(500)]
    assert all(low * 4.0 <= d <= 4.0 for d in delays)
    assert len(set(delays)) > 100  # really jittered


def test_backoff_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Backoff(-1, 1)
    with pytest.raises(ValueError):
        Backoff(1, 1, factor=0.5)


def test_breaker_opens_for_the_backoff_and_closes_on_success() -> None:
    now = [100.0]
    breaker = CircuitBreaker(Backoff(1.0, 4.0, jitter="none"), clock=lambda: now[0])
    assert not breaker.is_open and breaker.retry_in() == 0
    assert breaker.record_failure() == 1.0
    assert breaker.is_open and breaker.retry_in() == 1.0
    assert breaker.record_failure() == 2.0 and breaker.failures == 2
    now[0] += 2.0
    assert not breaker.is_open
    breaker.record_success()
    assert breaker.failures == 0 and not breaker.is_open


class _Flaky(Exception):
    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("flaky")
        self.retry_after = retry_after


async def test_retrying_retries_then_reraises_the_last_error() -> None:
    slept: list[float] = []
    seen: list[int] = []

    async def sleep(d: float) -> None:
        slept.append(d)

    calls = 0
    with pytest.raises(_Flaky):
        async for attempt in retrying(
            attempts=3,
            backoff=Backoff(0.5, 8.0, jitter="none"),
            retry_if=lambda e: isinstance(e, _Flaky),
            sleep=sleep,
            on_retry=lambda e, n, d: seen.append(n),
        ):
            with attempt:
                calls += 1
                raise _Flaky(retry_after=7.0 if calls == 2 else None)
    assert calls == 3
    assert slept == [0.5, 7.0]  # backoff, then the server's Retry-After
    assert seen == [1, 2]


async def test_retrying_does_not_repeat_what_it_must_not() -> None:
    calls = 0
    with pytest.raises(KeyError):
        async for attempt in retrying(
            attempts=5, backoff=Backoff(0, 0), retry_if=lambda e: isinstance(e, _Flaky)
        ):
            with attempt:
                calls += 1
                raise KeyError("no")
    assert calls == 1


async def test_retrying_caps_retry_after() -> None:
    slept: list[float] = []

    async def sleep(d: float) -> None:
        slept.append(d)

    result = None
    async for attempt in retrying(
        attempts=2,
        backoff=Backoff(0.1, 1),
        retry_if=lambda e: True,
        sleep=sleep,
        retry_after_cap=3.0,
    ):
        with attempt:
            if not slept:
                raise _Flaky(retry_after=3600)
            result = "ok"
    assert result == "ok" and slept == [3.0]
