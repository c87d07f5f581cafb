"""RequestGate: a per-client limit on write requests, counted in flight, stopped by close()."""

from __future__ import annotations

import asyncio

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.tiers.athena.gate import RequestGate


async def test_requests_of_one_client_share_the_limit(client: AthenaClient) -> None:
    gates = [RequestGate(client, limit=2) for _ in range(3)]
    running = peak = 0
    release = asyncio.Event()

    async def request() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    tasks = [asyncio.create_task(g.run(request)) for g in gates for _ in range(2)]
    await asyncio.sleep(0.05)
    assert peak == 2  # six requests from three memories, two at a time
    assert sum(g.in_flight for g in gates) == 2
    release.set()
    await asyncio.gather(*tasks)
    assert sum(g.in_flight for g in gates) == 0


async def test_closed_gate_sends_nothing(client: AthenaClient) -> None:
    gate = RequestGate(client)
    gate.close()
    sent: list[int] = []

    async def request() -> None:
        sent.append(1)

    with pytest.raises(asyncio.CancelledError):
        await gate.run(request)
    assert sent == []


async def test_failure_is_raised_and_uncounted(client: AthenaClient) -> None:
    gate = RequestGate(client)

    async def request() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await gate.run(request)
    assert gate.in_flight == 0
