"""Fixtures of the Athena tier's tests: a fake Athena server over loopback, a
client of it, and a factory of memories that closes what it made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.outbox import Outbox
from jarvismem.keys import KeySpace
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena import AthenaMemory

TENANT, USER, AGENT = "acme", "alice", "agent1"
WAIT_BOUND = 5.0


class MakeMemory(Protocol):
    def __call__(
        self, redis: Any = ..., *, client: AthenaClient | None = ..., **kwargs: Any
    ) -> Awaitable[AthenaMemory]: ...


@pytest.fixture
def server() -> Iterator[FakeAthenaServer]:
    with FakeAthenaServer(hang_seconds=2.0) as srv:
        yield srv


@pytest.fixture
async def client(server: FakeAthenaServer) -> AsyncIterator[AthenaClient]:
    c = AthenaClient(server.url, timeout=2.0, max_retries=1, backoff=0.01)
    yield c
    await c.aclose()


@pytest.fixture
async def make_memory(
    client: AthenaClient, keyspace: KeySpace, tmp_path: Path
) -> AsyncIterator[MakeMemory]:
    """``await make_memory(redis, **kwargs)``: an agent1 memory of acme/alice with fast
    retries and an outbox under tmp_path (kwargs override any of it)."""
    made: list[AthenaMemory] = []

    async def make(
        redis: Any = None, *, client: AthenaClient = client, **kwargs: Any
    ) -> AthenaMemory:
        kwargs.setdefault("outbox", Outbox(tmp_path / "athena.jsonl"))
        kwargs.setdefault("retry_base", 0.01)
        kwargs.setdefault("retry_cap", 0.05)
        kwargs.setdefault("tenant_id", TENANT)
        kwargs.setdefault("user_id", USER)
        kwargs.setdefault("keyspace", keyspace)
        memory = await AthenaMemory.create(AGENT, client, redis, **kwargs)
        made.append(memory)
        return memory

    yield make
    for memory in made:
        await memory.close()


async def wait_for(predicate: Callable[[], bool]) -> None:
    """Poll until ``predicate()`` is true; the bound only keeps a bug from hanging the suite.

    Polling (not an Event): the condition changes in the fake's server thread.
    """
    async with asyncio.timeout(WAIT_BOUND):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def contents(server: FakeAthenaServer) -> list[str]:
    """The content of every event the server received, in order."""
    return [ev["content"] for _, ev in server.events]
