"""UnifiedMemory with the Athena tier, against the fake Athena server over real HTTP."""

from __future__ import annotations

import time
from typing import Any

import pytest

from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings
from jarvismem.testing.fake_athena import FakeAthenaServer
from tests.conftest import Factory, MakeSettings, wait_for


@pytest.fixture
def settings(make_settings: MakeSettings) -> Settings:
    """A short Athena tier timeout (the hang tests measure it) and a tenant for chains."""
    return make_settings(tier_timeout_athena=0.5, athena_tenant_id="acme")


@pytest.fixture
def athena_runtime(
    redis_client: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_runtime: Factory,
) -> MemoryRuntime:
    """A runtime on Redis and the fake Athena server (a client with a 2 s timeout)."""
    client = make_athena_client(athena_server.url, timeout=2.0)
    runtime: MemoryRuntime = make_runtime(redis=redis_client, athena=client)
    return runtime


async def test_all_four_tiers_are_active_and_turns_reach_athena_as_events(
    workflow_id: str,
    redis_client: Any,
    blob_storage: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_runtime: Factory,
) -> None:
    client = make_athena_client(athena_server.url, timeout=2.0)
    rt = make_runtime(redis=redis_client, blob=blob_storage, athena=client)
    mem = rt.memory(workflow_id, "s1", "a1")
    assert (mem.working, mem.episodic, mem.ltm) != (None, None, None)
    await rt.athena_memory("a1")  # session resolved once, before the turns
    await mem.log_turn(1, "look up the invoice", "search(invoice 42)", "found invoice 42")
    await wait_for(lambda: len(athena_server.events) >= 3)
    types = [ev["type"] for _sid, ev in athena_server.events]
    assert types == ["thought", "action", "observation"]
    assert athena_server.events[2][1]["content"] == "found invoice 42"
    assert athena_server.sessions_created == 1


async def test_bundle_carries_athena_short_term_events_and_mid_term_chains(
    workflow_id: str, athena_server: FakeAthenaServer, athena_runtime: MemoryRuntime
) -> None:
    rt = athena_runtime
    user = rt.athena_agents.factory.user_id("a1")  # ATHENA_USER_ID.<namespace>
    athena_server.add_chain("acme", user, "billing", "Invoices are paid on the 5th.")
    mem = rt.memory(workflow_id, "s1", "a1")
    am = await rt.athena_memory("a1")
    assert am is not None
    await mem.log_turn(1, "check billing", "read docs", "ok")
    await am.flush(timeout=5.0)
    bundle = await mem.rehydrate_bundle()
    ctx = bundle["athena_context"]
    assert ctx is not None and bundle["degraded"] == {}
    assert [c["summary"] for c in ctx["mid_term"]] == ["Invoices are paid on the 5th."]
    assert [e["content"] for e in ctx["short_term"]] == ["check billing", "read docs", "ok"]


async def test_turns_logged_before_the_session_exists_reach_athena_in_order(
    workflow_id: str, athena_server: FakeAthenaServer, athena_runtime: MemoryRuntime
) -> None:
    rt = athena_runtime
    mem = rt.memory(workflow_id, "s1", "a1")
    for i in range(3):  # no await of rt.athena_memory(): the session is still being made
        await mem.log_turn(i, f"thought {i}", "", "")
    await wait_for(lambda: len(athena_server.events) >= 3)
    assert [ev["content"] for _sid, ev in athena_server.events] == [
        "thought 0",
        "thought 1",
        "thought 2",
    ]
    assert athena_server.sessions_created == 1


@pytest.mark.serial  # bounds a wall-clock time, which a loaded machine stretches
@pytest.mark.parametrize("mode", ["error500", "hang", "garbage"])
async def test_a_failing_athena_marks_the_tier_degraded_within_its_timeout(
    workflow_id: str,
    redis_client: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_runtime: Factory,
    mode: str,
) -> None:
    client = make_athena_client(athena_server.url, timeout=2.0, max_retries=0)
    rt = make_runtime(redis=redis_client, athena=client)
    mem = rt.memory(workflow_id, "s1", "a1")
    await rt.athena_memory("a1")
    athena_server.mode = mode  # type: ignore[assignment]
    await mem.log_turn(1, "t", "a", "r")  # never raises
    start = time.monotonic()
    bundle = await mem.rehydrate_bundle()
    elapsed = time.monotonic() - start
    assert bundle["athena_context"] is None
    assert "athena" in bundle["degraded"]
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["1"]
    # Bounded by the tier timeout (0.5 s), not the HTTP timeout (2 s) nor the hang (3 s).
    assert elapsed < 1.9
    athena_server.mode = "ok"


async def test_refused_connections_never_break_log_turn_or_the_bundle(
    workflow_id: str, redis_client: Any, make_athena_client: Factory, make_runtime: Factory
) -> None:
    client = make_athena_client("http://127.0.0.1:9", timeout=0.5, max_retries=0)
    rt = make_runtime(redis=redis_client, athena=client)
    mem = rt.memory(workflow_id, "s1", "a1")
    for i in range(3):
        await mem.log_turn(i, "t", "a", "r")
    bundle = await mem.rehydrate_bundle()
    assert len(bundle["recent_turns"]) == 3
    assert "athena" in bundle["degraded"]


def _posted_events(server: FakeAthenaServer) -> list[dict[str, Any]]:
    """The bodies of every event the client posted, in order."""
    return [r.json for r in server.requests_to("POST", "/events")]


async def test_a_turns_user_message_reaches_athena_as_a_user_message_before_the_agents_events(
    workflow_id: str, athena_server: FakeAthenaServer, athena_runtime: MemoryRuntime
) -> None:
    # Mid-term memory forms on the server only from role:user messages.
    rt = athena_runtime
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(1, "plan", "book(flight)", "booked", user_message="book me a flight")
    await wait_for(lambda: len(_posted_events(athena_server)) >= 4)
    bodies = _posted_events(athena_server)
    assert [(b["type"], b["role"]) for b in bodies] == [
        ("message", "user"),
        ("thought", "agent"),
        ("action", "agent"),
        ("observation", "agent"),
    ]
    assert bodies[0]["content"] == "book me a flight"
    meta = bodies[0]["metadata"]
    assert (meta["workflow_id"], meta["step_id"], meta["turn_id"]) == (workflow_id, "s1", "1")
    assert meta["idempotency_key"] and meta["occurred_at"].endswith("Z")


async def test_capture_reaches_athena_and_a_turns_user_message_is_sent_once(
    workflow_id: str, athena_server: FakeAthenaServer, athena_runtime: MemoryRuntime
) -> None:
    rt = athena_runtime
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(2, "think", "", "", user_message="what is the tide?")
    await mem.capture("what is the tide?", "High tide at noon.", turn_id=2)
    await mem.capture("and tomorrow?", "At one.")
    am = await rt.athena_memory("a1")
    assert am is not None
    await am.flush(timeout=5.0)
    sent = [(b["role"], b["content"]) for b in _posted_events(athena_server)]
    assert sent == [
        ("user", "what is the tide?"),
        ("agent", "think"),
        ("agent", "High tide at noon."),
        ("user", "and tomorrow?"),
        ("agent", "At one."),
    ]
    assert athena_server.requests_to("POST", "/interactions") == []


async def test_the_bundle_asks_athena_for_chains_relevant_to_the_current_goal(
    workflow_id: str, athena_server: FakeAthenaServer, athena_runtime: MemoryRuntime
) -> None:
    rt = athena_runtime
    mem = rt.memory(workflow_id, "s1", "a1")
    am = await rt.athena_memory("a1")
    assert am is not None
    await mem.rehydrate_bundle()  # no goal known yet: the newest chains
    await mem.log_turn(1, "t", "a", "r", user_message="renew the passport")
    await am.flush(timeout=5.0)
    await mem.rehydrate_bundle()
    await mem.rehydrate_bundle(query="visa rules")
    queries = [r.query.get("query") for r in athena_server.requests_to("GET", "/context")]
    assert queries == ["renew the passport", "visa rules"]
