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
from jarvismem.testing._fake_server import FakeHttpServer, Request, Response
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


class ScriptedAthena(FakeHttpServer):
    """A minimal Athena for fault scripts the shared fake does not offer.

    Sessions are created on ``POST /api/v1/sessions``; every other session
    route answers from ``script[(method, last path part)]`` (a list of statuses
    consumed one per request; 200 once it is empty). ``health_status`` is what
    ``GET /api/v1/health`` reports. Events answered 200 are kept in ``events``.
    """

    def __init__(self) -> None:
        self.script: dict[tuple[str, str], list[int]] = {}
        self.health_status = "healthy"
        self.sessions: list[str] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        super().__init__()

    def handle(self, request: Request) -> Response:
        path, method = request.path, request.method
        if path == "/health":
            return Response.of_json(200, {"status": "healthy", "timestamp": "", "service": "x"})
        if path == "/api/v1/health":
            body = {"status": self.health_status, "dependencies": {}, "timestamp": ""}
            return Response.of_json(200, body)
        if path == "/api/v1/sessions" and method == "POST":
            with self._lock:
                self.sessions.append(f"s{len(self.sessions) + 1}")
                sid = self.sessions[-1]
            return Response.of_json(200, {"sessionId": sid, "createdAt": None})
        parts = path.strip("/").split("/")  # api v1 sessions <id> <route...>
        sid, route = parts[3], parts[-1]
        with self._lock:
            queue = self.script.get((method, route), [])
            status = queue.pop(0) if queue else 200
        if status == 404:
            return Response.of_json(404, {"code": 5, "message": "session not found", "details": []})
        if status == 501:
            body = {"code": 12, "message": "method X not implemented", "details": []}
            return Response.of_json(501, body)
        if status != 200:
            return Response.of_json(status, {"code": 13, "message": "boom", "details": []})
        if route == "events":
            with self._lock:
                self.events.append((sid, dict(request.json)))
            return Response.of_json(200, {"success": True, "eventId": ""})
        if route == "context":
            body = {"stmEvents": [], "relevantPages": [], "segments": [], "userPersona": None}
            return Response.of_json(200, body)
        return Response.of_json(200, {"results": []})

    def calls(self, method: str, route: str) -> int:
        """Requests received for ``route`` (the last path part) with ``method``."""
        return sum(1 for r in self.requests if r.method == method and r.path.endswith(route))


@pytest.fixture
def scripted() -> Iterator[ScriptedAthena]:
    with ScriptedAthena() as srv:
        yield srv
