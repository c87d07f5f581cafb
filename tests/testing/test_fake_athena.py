"""The fake Athena's own behaviour: auth, faults, unimplemented routes, restarts.

The client's tests (tests/backends/test_athena_client.py) cover the routes' answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from jarvismem.testing.fake_athena import FakeAthenaServer

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
