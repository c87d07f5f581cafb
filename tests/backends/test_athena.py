"""AthenaClient against the fake Athena server over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.errors import (
    AthenaAuthError,
    AthenaBadRequestError,
    AthenaError,
    AthenaNotFoundError,
    AthenaServerError,
    AthenaUnavailableError,
    AthenaUnsupportedError,
    InvalidIdError,
    InvalidPayloadError,
)
from jarvismem.testing.fake_athena import FakeAthenaServer, embed

API_KEY = "test-key-0123456789"


@pytest.fixture
def server() -> Iterator[FakeAthenaServer]:
    with FakeAthenaServer(hang_seconds=3.0) as srv:
        yield srv


@pytest.fixture
async def client(server: FakeAthenaServer) -> AsyncIterator[AthenaClient]:
    c = AthenaClient(server.url, timeout=2.0, max_retries=2, backoff=0.01)
    yield c
    await c.aclose()


async def _session(client: AthenaClient) -> str:
    return await client.create_session("acme", "alice", "agent1")


async def test_health_returns_status_without_auth_headers() -> None:
    with FakeAthenaServer(api_key=API_KEY) as srv:
        async with AthenaClient(srv.url, api_key=API_KEY) as c:
            body = await c.health()
        assert body["status"] == "healthy"
        assert body["service"] == "memory-os"
        assert "x-api-key" not in srv.requests_to("GET", "/health")[0].headers


async def test_health_detailed_parses_dependencies(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    server.status = "degraded"
    server.dependencies = {"redis": "healthy", "mongodb": "unhealthy: timeout"}
    health = await client.health_detailed()
    assert health.status == "degraded"
    assert not health.healthy
    assert health.dependencies["mongodb"] == "unhealthy: timeout"


async def test_create_session_returns_new_id_each_call(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    first = await _session(client)
    second = await _session(client)
    assert first != second
    assert server.sessions_created == 2
    body = server.requests_to("POST", "/api/v1/sessions")[0].json
    assert body["tenant_id"] == "acme" and body["agent_id"] == "agent1"


async def test_add_event_sends_type_role_metadata_and_idempotency_key(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    await client.add_event(
        sid, "thought", "plan the day", role="agent", metadata={"k": "v"}, idempotency_key="ik-1"
    )
    [event] = server.stm("acme", "alice", "agent1")
    assert (event["type"], event["role"], event["content"]) == ("thought", "agent", "plan the day")
    assert event["metadata"] == {"k": "v", "idempotency_key": "ik-1"}


async def test_add_interaction_appends_user_and_agent_messages(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    await client.add_interaction(sid, "hello", "hi there")
    roles = [(e["role"], e["content"]) for e in server.stm("acme", "alice", "agent1")]
    # Athena stores the agent's response with role "agent", never "assistant".
    assert roles == [("user", "hello"), ("agent", "hi there")]


async def test_get_context_parses_stm_events_oldest_first_capped_at_ten(
    client: AthenaClient,
) -> None:
    sid = await _session(client)
    for i in range(12):
        await client.add_event(sid, "observation", f"fact {i}")
    ctx = await client.get_context(sid, limit=10)
    assert [e.content for e in ctx.stm_events] == [f"fact {i}" for i in range(2, 12)]
    assert ctx.stm_events[0].type == "observation"
    assert ctx.stm_events[0].blob_uri == ""


async def test_get_context_returns_relevant_pages_as_mid_term_chains(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    chain_id = server.add_chain("acme", "alice", "travel", "trip to Lisbon in May")
    ctx = await client.get_context(sid)
    [chain] = ctx.relevant_pages
    assert ctx.mid_term == ctx.relevant_pages
    assert (chain.id, chain.topic, chain.summary) == (chain_id, "travel", "trip to Lisbon in May")
    assert chain.to_dict()["summary"] == "trip to Lisbon in May"
    assert ctx.to_dict()["relevant_pages"][0]["id"] == chain_id


async def test_get_context_with_query_returns_nearest_chain_first(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    server.add_chain("acme", "alice", "food", "pasta recipe with basil")
    server.add_chain("acme", "alice", "travel", "flight booking to Lisbon")
    ctx = await client.get_context(sid, limit=1, query="flight to Lisbon")
    assert [c.topic for c in ctx.relevant_pages] == ["travel"]
    sent = server.requests_to("GET", "/context")[-1].query
    assert sent == {"limit": "1", "query": "flight to Lisbon"}


async def test_search_reports_raw_distance_and_derived_similarity(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    server.add_chain("acme", "alice", "a", "budget for the marketing plan")
    server.add_chain("acme", "alice", "b", "garden tomatoes need water")
    server.add_ltm_node("acme", "alice", "Alice", "Person")
    results = await client.search(sid, "marketing budget", limit=5)
    chains = {r.content: r for r in results if r.source_type == "cognitive_chain"}
    near = chains["budget for the marketing plan"]
    far = chains["garden tomatoes need water"]
    assert near.distance < far.distance
    assert near.similarity > far.similarity
    assert near.similarity == pytest.approx(1 / (1 + near.similarity_score))
    assert results[-1].content == "Alice [Person]" and results[-1].source_type == "ltm_node"


async def test_search_sends_filter_and_limit(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    server.add_chain("acme", "alice", "a", "one", metadata={"project": "x"})
    server.add_chain("acme", "alice", "b", "two", metadata={"project": "y"})
    results = await client.search(sid, "one two", limit=3, filter={"project": "y"})
    assert [r.content for r in results] == ["two"]
    assert server.requests_to("POST", "/context/search")[0].json["filter"] == {"project": "y"}


async def test_trigger_analytics_succeeds(server: FakeAthenaServer, client: AthenaClient) -> None:
    await client.trigger_analytics()
    assert server.requests_to("POST", "/api/v1/admin/analytics/trigger")


async def test_get_session_is_unsupported(client: AthenaClient) -> None:
    sid = await _session(client)
    with pytest.raises(AthenaUnsupportedError) as info:
        await client.get_session(sid)
    assert info.value.status == 501 and info.value.code == 12


async def test_unknown_session_raises_not_found(client: AthenaClient) -> None:
    with pytest.raises(AthenaNotFoundError) as info:
        await client.get_context("0b7c4a5e-0000-4000-8000-000000000000")
    assert "session not found" in str(info.value)


async def test_event_type_rejected_by_server_is_bad_request(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    # Bypass the client's own check to see the server's 400 mapped to a typed error.
    with pytest.raises(AthenaBadRequestError) as info:
        await client._call(
            "POST", f"/api/v1/sessions/{sid}/events", json_body={"type": "dream"}, policy="write"
        )
    assert info.value.status == 400
    assert "invalid event type" in str(info.value)


async def test_invalid_event_type_refused_before_sending(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    with pytest.raises(InvalidPayloadError):
        await client.add_event(sid, "dream", "x")  # type: ignore[arg-type]
    assert not server.requests_to("POST", "/events")


async def test_non_string_metadata_refused_before_sending(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    with pytest.raises(InvalidPayloadError):
        await client.add_event(sid, "thought", "x", metadata={"n": 1})  # type: ignore[dict-item]
    assert not server.requests_to("POST", "/events")


async def test_session_id_that_changes_the_route_is_refused(client: AthenaClient) -> None:
    with pytest.raises(InvalidIdError):
        await client.get_context("../admin")


async def test_missing_api_key_raises_auth_error() -> None:
    with FakeAthenaServer(api_key=API_KEY) as srv:
        async with AthenaClient(srv.url) as c:
            with pytest.raises(AthenaAuthError) as info:
                await _session(c)
    assert info.value.status == 401
    assert API_KEY not in str(info.value)


@pytest.mark.parametrize("header", ["x-api-key", "x-jwt-token"])
async def test_credentials_sent_in_headers(header: str) -> None:
    key = API_KEY if header == "x-api-key" else None
    jwt = API_KEY if header == "x-jwt-token" else None
    with FakeAthenaServer(api_key=key, jwt_token=jwt) as srv:
        async with AthenaClient(srv.url, api_key=key, jwt_token=jwt) as c:
            await _session(c)
        assert srv.requests_to("POST", "/api/v1/sessions")[0].headers[header] == API_KEY


async def test_server_error_on_get_is_retried(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    server.fail_next(2, status=500)
    ctx = await client.get_context(sid)
    assert ctx.stm_events == []
    assert len(server.requests_to("GET", "/context")) == 3


async def test_server_error_on_get_raises_after_retries(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    server.mode = "error500"
    with pytest.raises(AthenaServerError) as info:
        await client.get_context(sid)
    assert info.value.status == 500
    assert len(server.requests_to("GET", "/context")) == 3


async def test_event_post_not_retried_on_server_error(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    sid = await _session(client)
    server.fail_next(1, status=500)
    with pytest.raises(AthenaServerError):
        await client.add_event(sid, "thought", "once")
    assert len(server.requests_to("POST", "/events")) == 1
    assert server.stm("acme", "alice", "agent1") == []


async def test_unsupported_is_not_retried(server: FakeAthenaServer, client: AthenaClient) -> None:
    sid = await _session(client)
    with pytest.raises(AthenaUnsupportedError):
        await client.get_session(sid)
    assert len(server.requests_to("GET", f"/sessions/{sid}")) == 1


async def test_garbage_body_raises_unavailable(
    server: FakeAthenaServer, client: AthenaClient
) -> None:
    server.mode = "garbage"
    with pytest.raises(AthenaUnavailableError, match="not JSON"):
        await client.health_detailed()


async def test_malformed_json_shape_raises_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"stmEvents": "not-a-list"})

    async with AthenaClient("http://athena.test", transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(AthenaUnavailableError, match="malformed"):
            await c.get_context("s1")


async def test_missing_session_id_in_answer_raises_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"createdAt": None})

    async with AthenaClient("http://athena.test", transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(AthenaUnavailableError):
            await c.create_session("t", "u")


async def test_hanging_server_raises_unavailable_after_timeout(server: FakeAthenaServer) -> None:
    server.mode = "hang"
    async with AthenaClient(server.url, timeout=0.2, max_retries=0) as c:
        with pytest.raises(AthenaUnavailableError, match="timed out"):
            # The outer guard only keeps a broken client from hanging the suite.
            await asyncio.wait_for(c.health(), timeout=2.5)


async def test_event_post_not_retried_on_timeout(server: FakeAthenaServer) -> None:
    async with AthenaClient(server.url, timeout=0.2, max_retries=3, backoff=0.01) as c:
        sid = await _session(c)
        server.mode = "hang"
        with pytest.raises(AthenaUnavailableError):
            await c.add_event(sid, "thought", "x")
    assert len(server.requests_to("POST", "/events")) == 1


async def test_connection_refused_raises_unavailable() -> None:
    srv = FakeAthenaServer().start()
    url = srv.url
    srv.stop()
    async with AthenaClient(url, max_retries=1, backoff=0.01) as c:
        with pytest.raises(AthenaUnavailableError, match="cannot connect"):
            await c.create_session("t", "u")


async def test_event_post_retried_when_connection_refused(server: FakeAthenaServer) -> None:
    class RefuseOnce(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.AsyncHTTPTransport()
            self.refused = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/events") and not self.refused:
                self.refused += 1
                raise httpx.ConnectError("connection refused", request=request)
            return await self.inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    transport = RefuseOnce()
    async with AthenaClient(server.url, transport=transport, backoff=0.01) as c:
        sid = await _session(c)
        await c.add_event(sid, "action", "deliver once")
    assert transport.refused == 1
    assert [e["content"] for e in server.stm("acme", "alice", "agent1")] == ["deliver once"]


class _Failing(httpx.AsyncBaseTransport):
    """Fails the first ``times`` requests with ``failure`` (an exception or a status)."""

    def __init__(self, failure: Exception | int, times: int = 100) -> None:
        self.failure = failure
        self.times = times
        self.calls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.times:
            if isinstance(self.failure, int):
                return httpx.Response(self.failure, json={"message": "busy"})
            raise self.failure
        return httpx.Response(200, json={"sessionId": "s1", "status": "ok"})


def _unsent(kind: type[httpx.TransportError]) -> httpx.TransportError:
    return kind("simulated", request=httpx.Request("GET", "http://athena.test/"))


@pytest.mark.parametrize(
    ("failure", "read_calls", "write_calls"),
    [
        # Never reached the server: repeated for every route.
        (httpx.ConnectError, 3, 3),
        (httpx.ConnectTimeout, 3, 3),
        # May have reached it: repeated for reads only.
        (httpx.ReadTimeout, 3, 1),
        (httpx.ReadError, 3, 1),
        (429, 3, 1),
        (503, 3, 1),
        # A refusal repeats the same way: never repeated.
        (400, 1, 1),
        (501, 1, 1),
    ],
)
async def test_retry_policy_per_failure_and_route(
    failure: type[httpx.TransportError] | int, read_calls: int, write_calls: int
) -> None:
    for call, expected in (("read", read_calls), ("write", write_calls)):
        transport = _Failing(failure if isinstance(failure, int) else _unsent(failure))
        async with AthenaClient(
            "http://athena.test", transport=transport, max_retries=2, backoff=0.001
        ) as c:
            with pytest.raises(AthenaError) as info:
                if call == "read":
                    await c.health()
                else:
                    await c.create_session("t", "u")
        # The caller sees the translated error itself, never a retry wrapper.
        assert type(info.value).__module__ == "jarvismem.errors"
        assert transport.calls == expected, call


async def test_retry_succeeds_once_the_failure_passes() -> None:
    transport = _Failing(503, times=2)
    async with AthenaClient(
        "http://athena.test", transport=transport, max_retries=2, backoff=0.001
    ) as c:
        assert (await c.health())["status"] == "ok"
    assert transport.calls == 3


async def test_retry_waits_grow_with_equal_jitter(caplog: pytest.LogCaptureFixture) -> None:
    transport = _Failing(503)
    caplog.set_level(logging.INFO, logger="jarvismem.backends.athena")
    async with AthenaClient(
        "http://athena.test", transport=transport, max_retries=3, backoff=0.04
    ) as c:
        with pytest.raises(AthenaServerError):
            await c.health()
    delays = [float(r.getMessage().rsplit(" in ", 1)[1].rstrip("s")) for r in caplog.records]
    assert len(delays) == 3
    for attempt, delay in enumerate(delays):
        ceiling = min(2.0, 0.04 * 2**attempt)
        # Logged with two decimals: allow the rounding.
        assert ceiling / 2 - 0.005 <= delay <= ceiling + 0.005


async def test_cancelled_request_is_not_retried(server: FakeAthenaServer) -> None:
    # Cancellation (close(), a caller's timeout) must end the call, never start another attempt.
    server.mode = "hang"
    async with AthenaClient(server.url, timeout=2.0, max_retries=3, backoff=0.01) as c:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await c.health()
    assert len(server.requests_to("GET", "/health")) == 1


async def test_redirect_not_followed_so_credentials_stay_home() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        return httpx.Response(307, headers={"Location": "http://evil.test/api/v1/sessions"})

    transport = httpx.MockTransport(handler)
    async with AthenaClient("http://athena.test", api_key=API_KEY, transport=transport) as c:
        with pytest.raises(AthenaUnavailableError, match="redirect"):
            await c.create_session("t", "u")
    assert seen == ["athena.test"]


def test_repr_hides_credentials() -> None:
    c = AthenaClient("http://athena.test", api_key=API_KEY)
    assert API_KEY not in repr(c)


def test_fake_embedding_is_deterministic_unit_vector() -> None:
    vec = embed("hello world hello")
    assert vec == embed("hello world hello")
    assert sum(v * v for v in vec) == pytest.approx(1.0)


def test_write_slots_and_session_locks_serve_the_loop_they_run_on() -> None:
    # A client used from a second asyncio.run() gets primitives of that loop:
    # one made on the first loop would raise when awaited on the second.
    client = AthenaClient("http://127.0.0.1:9")

    async def use() -> tuple[asyncio.Semaphore, asyncio.Lock]:
        slots, lock = client.write_slots(2), client.session_lock("k")
        assert client.write_slots(5) is slots and client.session_lock("k") is lock
        assert client.session_lock("other") is not lock
        async with slots, lock:
            blocked = asyncio.create_task(lock.acquire())
            await asyncio.sleep(0)
            assert not blocked.done()
        await blocked
        lock.release()
        return slots, lock

    first = asyncio.run(use())
    second = asyncio.run(use())
    assert second[0] is not first[0] and second[1] is not first[1]
    client.remember_session("k", "s1")
    assert client.known_session("k") == "s1" and client.known_session("x") is None
    asyncio.run(client.aclose())
