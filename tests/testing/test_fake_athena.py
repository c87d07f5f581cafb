"""The fake Athena's own behaviour: auth, faults, restarts and its test-only knobs.

What the real server does is pinned by test_fake_athena_contract.py; the client's
tests (tests/backends/test_athena.py) cover how it reads the answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from jarvismem.testing.fake_athena import SUMMARY_MAX_CHARS, FakeAthenaServer, embed, keywords

KEY = "k-123"


@pytest.fixture
def athena() -> Iterator[FakeAthenaServer]:
    with FakeAthenaServer(api_key=KEY, hang_seconds=0.2) as server:
        yield server


def _session(athena: FakeAthenaServer) -> str:
    reply = httpx.post(
        athena.url + "/api/v1/sessions",
        json={"tenantId": "t", "userId": "u"},
        headers={"X-API-Key": KEY},
    )
    assert reply.status_code == 200
    return str(reply.json()["sessionId"])


def test_health_needs_no_key_and_everything_else_does(athena: FakeAthenaServer) -> None:
    assert httpx.get(athena.url + "/health").json()["status"] == "healthy"
    refused = httpx.post(athena.url + "/api/v1/sessions", json={"tenant_id": "t"})
    assert refused.status_code == 401 and refused.json()["error"] == "authentication_failed"
    assert _session(athena) in athena.session_ids  # camelCase accepted like the gateway


def test_unimplemented_routes_answer_501_with_a_grpc_code(athena: FakeAthenaServer) -> None:
    sid = _session(athena)
    reply = httpx.delete(athena.url + f"/api/v1/sessions/{sid}", headers={"X-API-Key": KEY})
    assert reply.status_code == 501
    assert reply.json() == {
        "code": 12,
        "message": "method DeleteSession not implemented",
        "details": [],
    }


def test_faults_then_recovery(athena: FakeAthenaServer) -> None:
    athena.fail_next(1, status=503)
    assert httpx.get(athena.url + "/health").status_code == 503
    athena.mode = "hang"
    assert httpx.get(athena.url + "/health", timeout=5).status_code == 504
    athena.mode = "ok"
    assert httpx.get(athena.url + "/health").status_code == 200
    assert [r.path for r in athena.requests_to("GET", "/health")] == ["/health"] * 3


def test_query_and_headers_are_recorded(athena: FakeAthenaServer) -> None:
    sid = _session(athena)
    httpx.get(
        athena.url + f"/api/v1/sessions/{sid}/context",
        params={"limit": "3", "query": "x y"},
        headers={"X-API-Key": KEY},
    )
    [request] = athena.requests_to("GET", "/context")
    assert request.query == {"limit": "3", "query": "x y"}
    assert request.headers["x-api-key"] == KEY


def test_a_restarted_fake_keeps_its_port_and_its_memory(athena: FakeAthenaServer) -> None:
    sid = _session(athena)
    port = athena.port
    athena.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(athena.url + "/health")
    athena.start()
    assert athena.port == port and sid in athena.session_ids
    assert httpx.get(athena.url + "/health").status_code == 200


def test_session_tenants_map_each_session_to_its_tenant(athena: FakeAthenaServer) -> None:
    sid = _session(athena)
    assert athena.session_tenants() == {sid: "t"}
    athena.forget_session(sid)
    assert athena.session_tenants() == {}


# --- fake-only knobs (the server facts are in test_fake_athena_contract.py) -------------


def _post(athena: FakeAthenaServer, path: str, body: object) -> httpx.Response:
    return httpx.post(athena.url + path, json=body, headers={"X-API-Key": KEY})


def _get(athena: FakeAthenaServer, path: str, **params: str) -> httpx.Response:
    return httpx.get(athena.url + path, params=params, headers={"X-API-Key": KEY})


def _say(athena: FakeAthenaServer, sid: str, text: str) -> None:
    reply = _post(
        athena,
        f"/api/v1/sessions/{sid}/events",
        {"type": "message", "role": "user", "content": text},
    )
    assert reply.status_code == 200


def test_advance_moves_the_clock_and_expires_short_term_entries(athena: FakeAthenaServer) -> None:
    sid = _session(athena)
    _say(athena, sid, "hello there")
    before = athena.now()
    athena.advance(7201)
    assert (athena.now() - before).total_seconds() >= 7201
    assert athena.stm("t", "u", "default") == []


def test_chains_form_only_on_the_trigger_when_auto_form_is_off(athena: FakeAthenaServer) -> None:
    athena.auto_form = False
    sid = _session(athena)
    _say(athena, sid, "quarterly budget review")
    _say(athena, sid, "quarterly budget numbers")
    assert athena.chains("t", "u") == []
    assert _post(athena, "/api/v1/admin/analytics/trigger", {}).status_code == 200
    [chain] = athena.chains("t", "u")
    assert chain["topic"] == "quarterly budget review" and not chain["seeded"]
    assert chain["summary"] == "quarterly budget review | quarterly budget numbers"
    assert chain["embedding"] == embed(chain["summary"])


def test_an_agent_entry_after_the_last_user_message_waits_for_the_next_pass(
    athena: FakeAthenaServer,
) -> None:
    sid = _session(athena)
    _say(athena, sid, "quarterly budget review")
    _say(athena, sid, "quarterly budget numbers")
    _post(
        athena,
        f"/api/v1/sessions/{sid}/events",
        {"type": "thought", "role": "agent", "content": "ok"},
    )
    assert athena.chains("t", "u")[0]["summary"].endswith("numbers")
    _say(athena, sid, "quarterly budget approved")
    _say(athena, sid, "quarterly budget shared")
    [chain] = athena.chains("t", "u")
    assert chain["summary"].endswith(
        "numbers | ok | quarterly budget approved | quarterly budget shared"
    )


def test_a_formed_summary_is_bounded(athena: FakeAthenaServer) -> None:
    sid = _session(athena)
    for _ in range(2):
        _say(athena, sid, "budget " * 200)
    [chain] = athena.chains("t", "u")
    assert len(chain["summary"]) == SUMMARY_MAX_CHARS and chain["summary"].endswith("…")


def test_keywords_are_the_long_words_without_stop_words() -> None:
    assert keywords("Please plan THE trip to Lisbon, the Lisbon trip! 2024") == [
        "plan",
        "trip",
        "lisbon",
    ]


def test_datastore_down_answers_404_on_sessions_500_on_creation_and_a_degraded_health(
    athena: FakeAthenaServer,
) -> None:
    sid = _session(athena)
    athena.mode = "datastore_down"
    assert _get(athena, f"/api/v1/sessions/{sid}/context").status_code == 404
    assert _post(athena, "/api/v1/sessions", {"tenant_id": "t", "user_id": "u"}).status_code == 500
    health = _get(athena, "/api/v1/health").json()
    assert health["status"] == "degraded" and health["dependencies"]["mongodb"].startswith(
        "unhealthy"
    )
    assert httpx.get(athena.url + "/health").status_code == 200
    athena.mode = "ok"
    assert _get(athena, f"/api/v1/sessions/{sid}/context").status_code == 200


def test_fail_next_replaces_pending_faults_and_401_is_gins_body(athena: FakeAthenaServer) -> None:
    athena.fail_next(5, status=500)
    athena.fail_next(1, status=401)
    reply = httpx.get(athena.url + "/health")
    assert reply.status_code == 401 and reply.json()["error"] == "authentication_failed"
    assert httpx.get(athena.url + "/health").status_code == 200


def test_a_lookup_failure_is_spent_only_on_an_existing_session(athena: FakeAthenaServer) -> None:
    sid = _session(athena)
    athena.fail_session_lookup(1, error="datastore error: boom")
    assert _get(athena, "/api/v1/sessions/unknown/context").json()["message"].endswith("unknown")
    reply = _get(athena, f"/api/v1/sessions/{sid}/context")
    assert reply.status_code == 404
    assert reply.json()["message"] == "session not found or invalid: datastore error: boom"


def test_bad_bodies_and_query_parameters_are_400(athena: FakeAthenaServer) -> None:
    sid = _session(athena)
    raw = httpx.post(
        athena.url + f"/api/v1/sessions/{sid}/events",
        content=b"{not json",
        headers={"X-API-Key": KEY},
    )
    assert raw.status_code == 400 and raw.json()["code"] == 3
    assert _post(athena, f"/api/v1/sessions/{sid}/events", ["a"]).status_code == 400
    assert (
        _post(
            athena, f"/api/v1/sessions/{sid}/events", {"type": "thought", "content": 5}
        ).status_code
        == 400
    )
    assert _get(athena, f"/api/v1/sessions/{sid}/context", limit="lots").status_code == 400
    search = f"/api/v1/sessions/{sid}/context/search"
    assert _post(athena, search, {"query": "q", "limit": "3"}).status_code == 200
    assert _post(athena, search, {"query": "q", "limit": True}).status_code == 400


def test_seeded_chains_keep_their_metadata_and_embedding_off_the_wire(
    athena: FakeAthenaServer,
) -> None:
    sid = _session(athena)
    chain_id = athena.add_chain("t", "u", "x", "summary", embedding=[1.0, 0.0], metadata={"k": "v"})
    [chain] = athena.chains("t", "u")
    assert (chain["id"], chain["metadata"], chain["embedding"], chain["seeded"]) == (
        chain_id,
        {"k": "v"},
        [1.0, 0.0],
        True,
    )
    # An embedding of the wrong width falls back to the summary's for the vector search.
    hits = _post(athena, f"/api/v1/sessions/{sid}/context/search", {"query": "summary"}).json()
    assert hits["results"][0]["similarityScore"] == pytest.approx(0)
