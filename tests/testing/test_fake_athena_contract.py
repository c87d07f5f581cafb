"""The fake Athena against the server facts of ATHENA_API.md, over real HTTP.

One test (or parametrized case) per fact, named after it, so the fake cannot
drift from the real server again: a change that makes the fake friendlier than
Athena fails here. Fake-only conveniences are tested in test_fake_athena.py.
"""

from __future__ import annotations

import base64
import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from jarvismem.testing.fake_athena import FakeAthenaServer, embed

T0 = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Athena:
    """The fake and a plain HTTP client for it."""

    def __init__(self, server: FakeAthenaServer, clock: Clock) -> None:
        self.server = server
        self.clock = clock
        self.http = httpx.Client(base_url=server.url, timeout=10)

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, path, **kwargs)

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        reply = self.call(method, path, **kwargs)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def session(self, tenant: str = "t", user: str = "u", agent: str = "a", **meta: str) -> str:
        body: dict[str, Any] = {"tenant_id": tenant, "user_id": user, "agent_id": agent}
        if meta:
            body["metadata"] = meta
        return str(self.ok("POST", "/api/v1/sessions", json=body)["sessionId"])

    def event(self, sid: str, content: str, etype: str = "message", **body: Any) -> None:
        self.ok(
            "POST",
            f"/api/v1/sessions/{sid}/events",
            json={"type": etype, "content": content, **body},
        )

    def say(self, sid: str, content: str, **body: Any) -> None:
        self.event(sid, content, role="user", **body)

    def context(self, sid: str, **params: Any) -> Any:
        return self.ok("GET", f"/api/v1/sessions/{sid}/context", params=params)

    def search(self, sid: str, query: str, **body: Any) -> list[dict[str, Any]]:
        answer = self.ok(
            "POST", f"/api/v1/sessions/{sid}/context/search", json={"query": query, **body}
        )
        return list(answer["results"])


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def athena(clock: Clock) -> Iterator[Athena]:
    with FakeAthenaServer(clock=clock) as server:
        client = Athena(server, clock)
        yield client
        client.http.close()


def _error(reply: httpx.Response, status: int, code: int) -> str:
    """Assert the gateway's error shape and return its message."""
    body = reply.json()
    assert reply.status_code == status, reply.text
    assert set(body) == {"code", "message", "details"}
    assert body["code"] == code and body["details"] == []
    return str(body["message"])


def _rfc3339(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    assert moment.tzinfo is not None
    return moment


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


# --- conventions ------------------------------------------------------------------------


def test_requests_accept_snake_case_or_camel_case_names(athena: Athena) -> None:
    sid = str(
        athena.ok(
            "POST", "/api/v1/sessions", json={"tenantId": "t", "userId": "u", "agentId": "a"}
        )["sessionId"]
    )
    athena.ok(
        "POST",
        f"/api/v1/sessions/{sid}/interactions",
        json={"userMessage": "hello", "agentResponse": "hi"},
    )
    assert athena.server.session_tenants() == {sid: "t"}
    assert [e["content"] for e in athena.server.stm("t", "u", "a")] == ["hello", "hi"]


def test_unknown_request_fields_are_dropped(athena: Athena) -> None:
    sid = athena.session()
    athena.event(sid, "x", surprise={"nested": [1]}, priority=9)
    [event] = athena.context(sid)["stmEvents"]
    assert event["content"] == "x" and "surprise" not in event and "priority" not in event


@pytest.mark.parametrize("value", [{"n": 1}, {"n": None}, {"n": {"deep": "x"}}, ["a"], "a=b"])
@pytest.mark.parametrize("route", ["sessions", "events", "interactions", "search"])
def test_metadata_and_filter_must_be_string_to_string_maps(
    athena: Athena, route: str, value: Any
) -> None:
    sid = athena.session()
    path, body = {
        "sessions": ("/api/v1/sessions", {"tenant_id": "t", "user_id": "u", "metadata": value}),
        "events": (f"/api/v1/sessions/{sid}/events", {"type": "thought", "metadata": value}),
        "interactions": (
            f"/api/v1/sessions/{sid}/interactions",
            {"user_message": "m", "metadata": value},
        ),
        "search": (f"/api/v1/sessions/{sid}/context/search", {"query": "q", "filter": value}),
    }[route]
    _error(athena.call("POST", path, json=body), 400, 3)


def test_timestamps_are_rfc3339(athena: Athena) -> None:
    sid = athena.session()
    athena.event(sid, "x")
    athena.server.add_chain("t", "u", "topic", "summary")
    assert _rfc3339(athena.ok("GET", "/health")["timestamp"]) == T0
    assert _rfc3339(athena.context(sid)["stmEvents"][0]["timestamp"]) == T0
    assert _rfc3339(athena.context(sid)["relevantPages"][0]["timestamp"]) == T0
    reply = athena.call(
        "POST", f"/api/v1/sessions/{sid}/events", json={"type": "thought", "timestamp": "yesterday"}
    )
    _error(reply, 400, 3)


def test_bytes_fields_are_base64(athena: Athena) -> None:
    sid = athena.session()
    payload = base64.b64encode(b"\x00\x01binary").decode()
    athena.event(sid, "with a blob", payload=payload, mime_type="application/octet-stream")
    [event] = athena.context(sid)["stmEvents"]
    assert event["blobMimeType"] == "application/octet-stream"
    bad = athena.call(
        "POST", f"/api/v1/sessions/{sid}/events", json={"type": "thought", "payload": "not base64!"}
    )
    _error(bad, 400, 3)


def test_success_is_always_200(athena: Athena) -> None:
    sid = athena.session()
    for method, path, body in [
        ("GET", "/health", None),
        ("GET", "/api/v1/health", None),
        ("POST", f"/api/v1/sessions/{sid}/events", {"type": "thought"}),
        ("POST", f"/api/v1/sessions/{sid}/interactions", {"user_message": "m"}),
        ("GET", f"/api/v1/sessions/{sid}/context", None),
        ("POST", f"/api/v1/sessions/{sid}/context/search", {"query": "q"}),
        ("POST", "/api/v1/admin/analytics/trigger", {}),
    ]:
        assert athena.call(method, path, json=body).status_code == 200, path


def test_errors_are_code_message_and_empty_details(athena: Athena) -> None:
    message = _error(athena.call("POST", "/api/v1/sessions", json={"user_id": "u"}), 400, 3)
    assert message


def test_there_is_no_pagination_only_limit(athena: Athena) -> None:
    sid = athena.session()
    for i in range(4):
        athena.event(sid, f"e{i}")
    ctx = athena.context(sid, limit=2, page=2, offset=1, pageToken="x")
    assert [e["content"] for e in ctx["stmEvents"]] == ["e2", "e3"]
    assert set(ctx) == {"stmEvents", "relevantPages", "segments", "userPersona", "ltpm"}


def test_the_tenant_is_a_body_field_not_a_header(athena: Athena) -> None:
    reply = athena.call(
        "POST", "/api/v1/sessions", json={"user_id": "u"}, headers={"X-Tenant-ID": "t"}
    )
    _error(reply, 400, 3)


def test_two_sessions_of_one_triple_share_one_short_term_window(athena: Athena) -> None:
    first, second = athena.session(), athena.session()
    other_agent = athena.session(agent="b")
    athena.event(first, "from the first session")
    athena.event(second, "from the second session")
    expected = ["from the first session", "from the second session"]
    assert [e["content"] for e in athena.context(first)["stmEvents"]] == expected
    assert [e["content"] for e in athena.context(second)["stmEvents"]] == expected
    assert athena.context(other_agent)["stmEvents"] == []


# --- auth -------------------------------------------------------------------------------


def test_auth_is_off_by_default(athena: Athena) -> None:
    assert athena.session()


@pytest.mark.parametrize(
    "headers",
    [{"X-API-Key": "key-1"}, {"Authorization": "Bearer key-1"}],
    ids=["x-api-key", "bearer"],
)
def test_api_key_goes_in_x_api_key_or_bearer(headers: dict[str, str]) -> None:
    with FakeAthenaServer(api_key="key-1") as server:
        body = {"tenant_id": "t", "user_id": "u"}
        assert httpx.post(server.url + "/api/v1/sessions", json=body, headers=headers).is_success


@pytest.mark.parametrize(
    "headers",
    [{"X-JWT-Token": "jwt-1"}, {"Authorization": "JWT jwt-1"}],
    ids=["x-jwt-token", "authorization-jwt"],
)
def test_jwt_goes_in_x_jwt_token_or_authorization_jwt(headers: dict[str, str]) -> None:
    with FakeAthenaServer(jwt_token="jwt-1") as server:
        body = {"tenant_id": "t", "user_id": "u"}
        assert httpx.post(server.url + "/api/v1/sessions", json=body, headers=headers).is_success


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/health"),
        ("POST", "/api/v1/sessions"),
        ("GET", "/api/v1/sessions/x/context"),
        ("POST", "/api/v1/admin/analytics/trigger"),
    ],
)
def test_auth_failures_are_401_authentication_failed(method: str, path: str) -> None:
    with FakeAthenaServer(api_key="key-1") as server:
        reply = httpx.request(method, server.url + path, headers={"X-API-Key": "wrong"})
    assert reply.status_code == 401
    body = reply.json()
    assert set(body) == {"error", "message"} and body["error"] == "authentication_failed"


@pytest.mark.parametrize(
    ("headers", "accepted"),
    [
        ({"X-API-Key": "key-1"}, False),
        ({"X-JWT-Token": "jwt-1"}, False),
        ({"X-API-Key": "key-1", "X-JWT-Token": "jwt-1"}, True),
        ({"Authorization": "Bearer key-1", "X-JWT-Token": "jwt-1"}, True),
        ({"X-API-Key": "key-1", "Authorization": "JWT jwt-1"}, True),
    ],
)
def test_with_both_an_api_key_and_a_jwt_configured_both_are_required(
    headers: dict[str, str], accepted: bool
) -> None:
    with FakeAthenaServer(api_key="key-1", jwt_token="jwt-1") as server:
        body = {"tenant_id": "t", "user_id": "u"}
        reply = httpx.post(server.url + "/api/v1/sessions", json=body, headers=headers)
    assert reply.status_code == (200 if accepted else 401)


def test_health_is_never_authenticated() -> None:
    with FakeAthenaServer(api_key="key-1", jwt_token="jwt-1") as server:
        reply = httpx.get(server.url + "/health")
    assert reply.status_code == 200


# --- endpoints that work ----------------------------------------------------------------


def test_health_answers_status_timestamp_and_service(athena: Athena) -> None:
    assert athena.ok("GET", "/health") == {
        "status": "healthy",
        "timestamp": _stamp(T0),
        "service": "memory-os",
    }


def test_api_health_answers_status_and_each_dependency(athena: Athena) -> None:
    assert athena.ok("GET", "/api/v1/health") == {
        "status": "healthy",
        "dependencies": {"redis": "healthy", "mongodb": "healthy"},
        "timestamp": _stamp(T0),
    }
    athena.server.status = "degraded"
    athena.server.dependencies = {"redis": "unhealthy: refused", "mongodb": "healthy"}
    body = athena.ok("GET", "/api/v1/health")
    assert body["status"] == "degraded" and body["dependencies"]["redis"] == "unhealthy: refused"


def test_session_creation_answers_a_uuid4_and_a_null_created_at(athena: Athena) -> None:
    body = athena.ok("POST", "/api/v1/sessions", json={"tenant_id": "t", "user_id": "u"})
    assert set(body) == {"sessionId", "createdAt"} and body["createdAt"] is None
    assert uuid.UUID(body["sessionId"]).version == 4


def test_session_creation_is_not_idempotent(athena: Athena) -> None:
    assert athena.session() != athena.session()
    assert athena.server.sessions_created == 2


@pytest.mark.parametrize(
    "body",
    [{"user_id": "u"}, {"tenant_id": "t"}, {"tenant_id": "", "user_id": "u"}, {}],
    ids=["no-tenant", "no-user", "empty-tenant", "nothing"],
)
def test_session_creation_without_tenant_or_user_is_400(
    athena: Athena, body: dict[str, str]
) -> None:
    _error(athena.call("POST", "/api/v1/sessions", json=body), 400, 3)


def test_session_agent_defaults_to_default(athena: Athena) -> None:
    sid = str(
        athena.ok("POST", "/api/v1/sessions", json={"tenant_id": "t", "user_id": "u"})["sessionId"]
    )
    athena.event(sid, "x")
    assert [e["content"] for e in athena.server.stm("t", "u", "default")] == ["x"]


def test_event_answer_is_success_and_an_empty_event_id(athena: Athena) -> None:
    sid = athena.session()
    body = athena.ok("POST", f"/api/v1/sessions/{sid}/events", json={"type": "thought"})
    assert body == {"success": True, "eventId": ""}


@pytest.mark.parametrize("etype", ["message", "thought", "action", "observation"])
def test_the_four_event_types_are_accepted(athena: Athena, etype: str) -> None:
    sid = athena.session()
    athena.event(sid, "x", etype=etype)
    assert athena.context(sid)["stmEvents"][0]["type"] == etype


@pytest.mark.parametrize("body", [{"type": "dream"}, {"type": ""}, {}, {"type": "MESSAGE"}])
def test_an_invalid_event_type_is_400(athena: Athena, body: dict[str, str]) -> None:
    sid = athena.session()
    reply = athena.call("POST", f"/api/v1/sessions/{sid}/events", json=body)
    assert _error(reply, 400, 3).startswith("invalid event type: ")


def test_event_role_defaults_to_system(athena: Athena) -> None:
    sid = athena.session()
    athena.event(sid, "no role given")
    assert athena.context(sid)["stmEvents"][0]["role"] == "system"


def test_event_time_is_the_delivery_time_request_timestamp_ignored(
    athena: Athena, clock: Clock
) -> None:
    sid = athena.session()
    clock.now = T0 + timedelta(minutes=5)
    athena.event(sid, "late", timestamp="2020-01-01T00:00:00Z", metadata={"occurred_at": "x"})
    [event] = athena.context(sid)["stmEvents"]
    assert event["timestamp"] == _stamp(T0 + timedelta(minutes=5))
    assert event["metadata"] == {"occurred_at": "x"}


def test_interaction_answer_is_success_and_an_empty_interaction_id(athena: Athena) -> None:
    sid = athena.session()
    body = athena.ok("POST", f"/api/v1/sessions/{sid}/interactions", json={"user_message": "m"})
    assert body == {"success": True, "interactionId": ""}


def test_interaction_is_a_user_message_then_the_agent_response_with_role_agent(
    athena: Athena,
) -> None:
    sid = athena.session()
    athena.ok(
        "POST",
        f"/api/v1/sessions/{sid}/interactions",
        json={"user_message": "hello", "agent_response": "hi there"},
    )
    events = athena.context(sid)["stmEvents"]
    assert [(e["role"], e["type"], e["content"]) for e in events] == [
        ("user", "message", "hello"),
        ("agent", "message", "hi there"),
    ]


def test_interactions_drop_metadata_and_timestamp(athena: Athena, clock: Clock) -> None:
    sid = athena.session()
    athena.ok(
        "POST",
        f"/api/v1/sessions/{sid}/interactions",
        json={
            "user_message": "hello",
            "agent_response": "hi",
            "metadata": {"idempotency_key": "k1", "workflow_id": "w"},
            "timestamp": "2020-01-01T00:00:00Z",
        },
    )
    for event in athena.context(sid)["stmEvents"]:
        assert event["metadata"] == {} and event["timestamp"] == _stamp(T0)


def test_context_answers_every_field(athena: Athena) -> None:
    sid = athena.session()
    assert athena.context(sid) == {
        "stmEvents": [],
        "relevantPages": [],
        "segments": [],
        "userPersona": None,
        "ltpm": {"status": "not_implemented"},
    }


def test_stm_events_carry_every_field_and_never_a_blob_uri(athena: Athena) -> None:
    sid = athena.session()
    payload = base64.b64encode(b"blob").decode()
    athena.event(sid, "c", etype="observation", role="agent", metadata={"k": "v"})
    athena.event(sid, "b", etype="action", payload=payload, mime_type="image/png")
    first, second = athena.context(sid)["stmEvents"]
    assert first == {
        "role": "agent",
        "type": "observation",
        "content": "c",
        "timestamp": _stamp(T0),
        "metadata": {"k": "v"},
        "blobUri": "",
        "blobMimeType": "",
    }
    assert second["blobUri"] == "" and second["blobMimeType"] == "image/png"


@pytest.mark.parametrize(("limit", "expected"), [(3, 3), (0, 10), (-1, 10), (25, 10)])
def test_stm_events_are_the_newest_limit_oldest_first_at_most_ten(
    athena: Athena, limit: int, expected: int
) -> None:
    sid = athena.session()
    for i in range(12):
        athena.event(sid, f"e{i}")
    contents = [e["content"] for e in athena.context(sid, limit=limit)["stmEvents"]]
    assert contents == [f"e{i}" for i in range(12 - expected, 12)]


def test_the_short_term_window_keeps_ten_entries(athena: Athena) -> None:
    sid = athena.session()
    for i in range(15):
        athena.event(sid, f"e{i}")
    assert [e["content"] for e in athena.server.stm("t", "u", "a")] == [
        f"e{i}" for i in range(5, 15)
    ]


def test_short_term_entries_expire_after_two_hours(athena: Athena, clock: Clock) -> None:
    sid = athena.session()
    athena.event(sid, "old")
    clock.now = T0 + timedelta(hours=1)
    athena.event(sid, "newer")
    clock.now = T0 + timedelta(hours=2, seconds=1)
    assert [e["content"] for e in athena.context(sid)["stmEvents"]] == ["newer"]
    clock.now = T0 + timedelta(hours=3, seconds=1)
    assert athena.context(sid)["stmEvents"] == []


def test_relevant_pages_carry_empty_embedding_and_metadata_and_session_id_equal_to_id(
    athena: Athena,
) -> None:
    sid = athena.session()
    chain_id = athena.server.add_chain(
        "t", "u", "travel", "trip to Lisbon", metadata={"project": "x"}, session_id=sid
    )
    assert athena.context(sid)["relevantPages"] == [
        {
            "id": chain_id,
            "sessionId": chain_id,
            "topic": "travel",
            "summary": "trip to Lisbon",
            "timestamp": _stamp(T0),
            "embedding": [],
            "metadata": {},
        }
    ]


def test_context_without_query_lists_chains_with_a_summary_newest_first(
    athena: Athena, clock: Clock
) -> None:
    sid = athena.session()
    athena.server.add_chain("t", "u", "a", "oldest chain")
    clock.now = T0 + timedelta(minutes=1)
    athena.server.add_chain("t", "u", "b", "")  # no summary: not listed
    clock.now = T0 + timedelta(minutes=2)
    athena.server.add_chain("t", "u", "c", "newest chain")
    assert [p["topic"] for p in athena.context(sid)["relevantPages"]] == ["c", "a"]


def test_context_with_query_is_a_vector_search(athena: Athena) -> None:
    sid = athena.session()
    athena.server.add_chain("t", "u", "food", "pasta recipe with basil")
    athena.server.add_chain("t", "u", "travel", "flight booking to Lisbon")
    pages = athena.context(sid, query="flight to Lisbon", limit=1)["relevantPages"]
    assert [p["topic"] for p in pages] == ["travel"]


def test_search_without_query_is_400_query_is_required(athena: Athena) -> None:
    sid = athena.session()
    for body in ({}, {"query": ""}, {"limit": 3}):
        reply = athena.call("POST", f"/api/v1/sessions/{sid}/context/search", json=body)
        assert _error(reply, 400, 3) == "query is required"


def test_search_limit_defaults_to_five(athena: Athena) -> None:
    sid = athena.session()
    for i in range(8):
        athena.server.add_chain("t", "u", f"c{i}", f"chain number {i}")
    assert len(athena.search(sid, "chain")) == 5
    assert len(athena.search(sid, "chain", limit=7)) == 7


def test_search_similarity_score_is_the_squared_l2_distance(athena: Athena) -> None:
    sid = athena.session()
    athena.server.add_chain("t", "u", "a", "budget for the marketing plan")
    [hit] = athena.search(sid, "marketing budget")
    q, c = embed("marketing budget"), embed("budget for the marketing plan")
    squared = sum((x - y) ** 2 for x, y in zip(q, c, strict=True))
    assert hit["similarityScore"] == pytest.approx(squared)
    assert hit["similarityScore"] != pytest.approx(math.sqrt(squared))


def test_search_results_carry_every_field(athena: Athena) -> None:
    sid = athena.session()
    chain_id = athena.server.add_chain("t", "u", "a", "budget plan")
    [hit] = athena.search(sid, "budget")
    assert set(hit) == {"content", "similarityScore", "sourceType", "sourceId", "timestamp"}
    assert (hit["content"], hit["sourceType"], hit["sourceId"]) == (
        "budget plan",
        "cognitive_chain",
        chain_id,
    )
    assert hit["timestamp"] == _stamp(T0)


def test_search_hits_are_the_vector_search_top_k_in_its_order_not_resorted(
    athena: Athena,
) -> None:
    sid = athena.session()
    for summary in ["garden tomatoes", "budget plan", "marketing budget plan", "sports cars"]:
        athena.server.add_chain("t", "u", summary, summary)
    hits = athena.search(sid, "marketing budget plan", limit=2)
    assert [h["content"] for h in hits] == ["marketing budget plan", "budget plan"]
    assert hits[0]["similarityScore"] == pytest.approx(0)  # lower is closer: a distance


def test_search_filter_applies_after_the_top_k_so_hits_can_be_fewer_or_none(
    athena: Athena,
) -> None:
    sid = athena.session()
    athena.server.add_chain("t", "u", "a", "budget plan", metadata={"project": "x"})
    athena.server.add_chain("t", "u", "b", "budget plan review", metadata={"project": "x"})
    athena.server.add_chain("t", "u", "c", "garden tomatoes", metadata={"project": "y"})
    assert len(athena.search(sid, "budget plan", limit=2, filter={"project": "x"})) == 2
    # The y chain exists but is not among the 2 nearest: the filter leaves nothing.
    assert athena.search(sid, "budget plan", limit=2, filter={"project": "y"}) == []
    assert len(athena.search(sid, "budget plan", limit=3, filter={"project": "y"})) == 1


def test_ltm_nodes_come_after_the_chain_hits_unlimited_with_score_zero_and_null_timestamp(
    athena: Athena,
) -> None:
    sid = athena.session()
    athena.server.add_chain("t", "u", "a", "budget plan")
    athena.server.add_chain("t", "u", "b", "budget review")
    for name in ("Alice", "Bob", "Carol"):
        athena.server.add_ltm_node("t", "u", name, "Person")
    results = athena.search(sid, "budget", limit=1)
    assert [r["sourceType"] for r in results] == ["cognitive_chain"] + ["ltm_node"] * 3
    for node in results[1:]:
        assert node["similarityScore"] == 0 and node["timestamp"] is None
    assert [r["content"] for r in results[1:]] == [
        "Alice [Person]",
        "Bob [Person]",
        "Carol [Person]",
    ]


def test_ltm_nodes_are_not_scoped_by_tenant_user_or_agent(athena: Athena) -> None:
    athena.server.add_ltm_node("acme", "alice", "Secret Project", "Project")
    stranger = athena.session(tenant="globex", user="mallory", agent="z")
    assert [r["content"] for r in athena.search(stranger, "anything")] == [
        "Secret Project [Project]"
    ]


def test_search_similarity_threshold_is_ignored(athena: Athena) -> None:
    sid = athena.session()
    athena.server.add_chain("t", "u", "a", "garden tomatoes")
    assert len(athena.search(sid, "marketing budget", similarity_threshold=0.0001)) == 1


def test_analytics_trigger_answers_success_and_a_message(athena: Athena) -> None:
    body = athena.ok("POST", "/api/v1/admin/analytics/trigger")
    assert set(body) == {"success", "message"} and body["success"] is True


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("POST", "/events", {"type": "thought"}),
        ("POST", "/interactions", {"user_message": "m"}),
        ("GET", "/context", None),
        ("POST", "/context/search", {"query": "q"}),
    ],
)
def test_an_unknown_session_is_404_session_not_found_on_every_session_route(
    athena: Athena, method: str, suffix: str, body: Any
) -> None:
    path = f"/api/v1/sessions/{uuid.uuid4()}{suffix}"
    message = _error(athena.call(method, path, json=body), 404, 5)
    assert message.startswith("session not found or invalid: ")


# --- endpoints that return 501 ----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "suffix", "rpc"),
    [
        ("GET", "", "GetSession"),
        ("DELETE", "", "DeleteSession"),
        ("GET", "/analysis/topics", "GetTopics"),
        ("GET", "/analysis/heat", "GetHeat"),
        ("GET", "/segments", "GetSegments"),
    ],
)
def test_unimplemented_endpoints_answer_501_code_12(
    athena: Athena, method: str, suffix: str, rpc: str
) -> None:
    sid = athena.session()
    message = _error(athena.call(method, f"/api/v1/sessions/{sid}{suffix}"), 501, 12)
    assert message == f"method {rpc} not implemented"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/sessions"),
        ("PUT", "/api/v1/sessions/s1"),
        ("GET", "/api/v1/sessions/s1/events"),
        ("DELETE", "/api/v1/sessions/s1/interactions"),
        ("POST", "/api/v1/sessions/s1/context"),
        ("GET", "/api/v1/sessions/s1/context/search"),
        ("GET", "/api/v1/admin/analytics/trigger"),
        ("POST", "/api/v1/health"),
    ],
)
def test_a_known_path_with_the_wrong_method_is_501_code_12(
    athena: Athena, method: str, path: str
) -> None:
    _error(athena.call(method, path), 501, 12)


@pytest.mark.parametrize(
    "path", ["/api/v1/nope", "/api/v2/sessions", "/api/v1/sessions/s1/memories", "/nope"]
)
def test_an_unknown_path_is_404(athena: Athena, path: str) -> None:
    _error(athena.call("GET", path), 404, 5)


# --- error mapping and datastore failures ----------------------------------------------


@pytest.mark.parametrize(
    ("code", "status"),
    [(3, 400), (5, 404), (9, 400), (12, 501), (13, 500), (2, 500), (4, 504), (8, 429), (16, 401)],
)
def test_grpc_codes_map_to_http_statuses_as_grpc_gateway_maps_them(
    athena: Athena, code: int, status: int
) -> None:
    athena.server.fail_next_grpc(1, code, "boom")
    assert _error(athena.call("GET", "/api/v1/health"), status, code) == "boom"


@pytest.mark.parametrize(("status", "code"), [(400, 3), (404, 5), (500, 13), (501, 12), (504, 4)])
def test_injected_statuses_carry_the_grpc_code_behind_them(
    athena: Athena, status: int, code: int
) -> None:
    athena.server.fail_next(1, status=status)
    _error(athena.call("GET", "/api/v1/health"), status, code)


def test_a_datastore_error_on_a_session_lookup_is_answered_404_session_not_found(
    athena: Athena,
) -> None:
    sid = athena.session()
    athena.server.fail_session_lookup(1)
    message = _error(athena.call("GET", f"/api/v1/sessions/{sid}/context"), 404, 5)
    assert message.startswith("session not found or invalid: ")
    # Transient: the same session answers on the next try.
    assert athena.context(sid)["stmEvents"] == []


# --- what decides what a client must send -----------------------------------------------


def test_mid_term_memory_forms_only_from_user_messages(athena: Athena) -> None:
    sid = athena.session()
    athena.say(sid, "plan the marketing budget")
    assert athena.context(sid)["relevantPages"] == []  # one user message: nothing yet
    athena.say(sid, "the marketing budget needs numbers")
    [page] = athena.context(sid)["relevantPages"]
    assert "marketing budget" in page["summary"]


@pytest.mark.parametrize("role", ["system", "agent", None])
def test_a_client_sending_no_user_role_gets_no_chains_even_past_twenty_events(
    athena: Athena, role: str | None
) -> None:
    sid = athena.session()
    for i in range(25):
        body = {"role": role} if role else {}
        athena.event(sid, f"marketing budget step {i}", etype="thought", **body)
    athena.ok("POST", "/api/v1/admin/analytics/trigger")
    assert athena.context(sid)["relevantPages"] == []
    assert athena.search(sid, "marketing budget") == []


def test_interactions_count_as_user_messages(athena: Athena) -> None:
    sid = athena.session()
    for question in ("what is the marketing budget", "raise the marketing budget"):
        athena.ok(
            "POST",
            f"/api/v1/sessions/{sid}/interactions",
            json={"user_message": question, "agent_response": "noted"},
        )
    assert len(athena.context(sid)["relevantPages"]) == 1


def test_nothing_of_a_system_only_client_outlives_two_hours(athena: Athena, clock: Clock) -> None:
    sid = athena.session()
    athena.event(sid, "the marketing budget is 40k")
    clock.now = T0 + timedelta(hours=2, seconds=1)
    ctx = athena.context(sid)
    assert ctx["stmEvents"] == [] and ctx["relevantPages"] == []


def test_chains_split_when_the_topic_changes_between_user_messages(athena: Athena) -> None:
    sid = athena.session()
    athena.say(sid, "plan a trip to Lisbon")
    athena.say(sid, "book the Lisbon flights")
    athena.say(sid, "pasta recipe with basil")
    athena.say(sid, "basil pesto recipe")
    summaries = sorted(p["summary"] for p in athena.context(sid)["relevantPages"])
    assert summaries == [
        "pasta recipe with basil | basil pesto recipe",
        "plan a trip to Lisbon | book the Lisbon flights",
    ]


def test_chains_inherit_session_metadata_and_search_filter_matches_it(athena: Athena) -> None:
    alpha = athena.session(project="alpha")
    beta = athena.session(agent="b", project="beta")
    for sid in (alpha, beta):
        athena.say(sid, "quarterly budget review")
        athena.say(sid, "quarterly budget numbers")
    found = athena.search(alpha, "quarterly budget", filter={"project": "beta"})
    [chain] = [c for c in athena.server.chains("t", "u") if c["metadata"] == {"project": "beta"}]
    assert [r["sourceId"] for r in found] == [chain["id"]]


def test_a_workflow_id_keeps_one_workflows_turns_in_one_chain(athena: Athena) -> None:
    sid = athena.session()
    topics = ["plan a trip to Lisbon", "pasta with basil", "quarterly budget", "sports cars"]
    for text in topics:
        athena.say(sid, text, metadata={"workflow_id": "wf-1"})
    [page] = athena.context(sid)["relevantPages"]
    assert page["summary"] == " | ".join(topics)


def test_an_observation_with_an_execution_id_replaces_the_entry_with_that_id(
    athena: Athena,
) -> None:
    sid = athena.session()
    step = {"execution_id": "x1", "step_id": "s1"}
    athena.event(sid, "first result", etype="observation", metadata=step)
    athena.event(sid, "unrelated", etype="thought")
    athena.event(sid, "second result", etype="observation", metadata=step)
    athena.event(sid, "other step", etype="observation", metadata={**step, "step_id": "s2"})
    contents = [e["content"] for e in athena.context(sid)["stmEvents"]]
    assert contents == ["second result", "unrelated", "other step"]


def test_mid_term_isolation_is_by_tenant_and_user_not_by_agent(athena: Athena) -> None:
    writer = athena.session(agent="a")
    other_agent = athena.session(agent="b")
    other_user = athena.session(user="v", agent="a")
    other_tenant = athena.session(tenant="t2", agent="a")
    athena.say(writer, "quarterly budget review")
    athena.say(writer, "quarterly budget numbers")
    assert len(athena.context(other_agent)["relevantPages"]) == 1
    assert len(athena.search(other_agent, "quarterly budget")) == 1
    for sid in (other_user, other_tenant):
        assert athena.context(sid)["relevantPages"] == []
        assert athena.search(sid, "quarterly budget") == []
