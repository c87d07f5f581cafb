"""UnifiedMemory with the Athena tier, against the fake Athena server over real HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.keys import KeySpace
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings, load_settings
from jarvismem.testing.fake_athena import FakeAthenaServer


@pytest.fixture
def athena_server() -> Iterator[FakeAthenaServer]:
    server = FakeAthenaServer(hang_seconds=3.0).start()
    yield server
    server.stop()


@pytest.fixture
def settings(tmp_path: Path, keyspace: KeySpace) -> Settings:
    return load_settings(
        _env_file=None,
        jarvismem_namespace=keyspace.namespace,
        outbox_path=tmp_path / "outbox",
        compaction_enabled=False,
        tier_timeout_athena=0.5,
        athena_tenant_id="acme",
    )


async def _wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def test_all_four_tiers_are_active_and_turns_reach_athena_as_events(
    settings: Settings,
    workflow_id: str,
    redis_client: Any,
    blob_storage: Any,
    athena_server: FakeAthenaServer,
) -> None:
    client = AthenaClient(athena_server.url, timeout=2.0)
    rt = MemoryRuntime(settings, redis=redis_client, blob=blob_storage, athena=client)
    mem = rt.memory(workflow_id, "s1", "a1")
    assert (mem.working, mem.episodic, mem.ltm) != (None, None, None)
    await rt.athena_memory("a1")  # session resolved once, before the turns
    await mem.log_turn(1, "look up the invoice", "search(invoice 42)", "found invoice 42")
    await _wait_for(lambda: len(athena_server.events) >= 3)
    types = [ev["type"] for _sid, ev in athena_server.events]
    assert types == ["thought", "action", "observation"]
    assert athena_server.events[2][1]["content"] == "found invoice 42"
    assert athena_server.sessions_created == 1
    await rt.close()
    await client.aclose()


async def test_bundle_carries_athena_short_term_events_and_mid_term_chains(
    settings: Settings,
    workflow_id: str,
    redis_client: Any,
    athena_server: FakeAthenaServer,
) -> None:
    athena_server.add_chain("acme", "jarvismem", "billing", "Invoices are paid on the 5th.")
    client = AthenaClient(athena_server.url, timeout=2.0)
    rt = MemoryRuntime(settings, redis=redis_client, athena=client)
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
    await rt.close()
    await client.aclose()


async def test_turns_logged_before_the_session_exists_reach_athena_in_order(
    settings: Settings,
    workflow_id: str,
    redis_client: Any,
    athena_server: FakeAthenaServer,
) -> None:
    client = AthenaClient(athena_server.url, timeout=2.0)
    rt = MemoryRuntime(settings, redis=redis_client, athena=client)
    mem = rt.memory(workflow_id, "s1", "a1")
    for i in range(3):  # no await of rt.athena_memory(): the session is still being made
        await mem.log_turn(i, f"thought {i}", "", "")
    await _wait_for(lambda: len(athena_server.events) >= 3)
    assert [ev["content"] for _sid, ev in athena_server.events] == [
        "thought 0",
        "thought 1",
        "thought 2",
    ]
    assert athena_server.sessions_created == 1
    await rt.close()
    await client.aclose()


@pytest.mark.parametrize("mode", ["error500", "hang", "garbage"])
async def test_a_failing_athena_marks_the_tier_degraded_within_its_timeout(
    settings: Settings,
    workflow_id: str,
    redis_client: Any,
    athena_server: FakeAthenaServer,
    mode: str,
) -> None:
    client = AthenaClient(athena_server.url, timeout=2.0, max_retries=0)
    rt = MemoryRuntime(settings, redis=redis_client, athena=client)
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
    await rt.close()
    await client.aclose()


async def test_refused_connections_never_break_log_turn_or_the_bundle(
    settings: Settings, workflow_id: str, redis_client: Any
) -> None:
    client = AthenaClient("http://127.0.0.1:9", timeout=0.5, max_retries=0)
    rt = MemoryRuntime(settings, redis=redis_client, athena=client)
    mem = rt.memory(workflow_id, "s1", "a1")
    for i in range(3):
        await mem.log_turn(i, "t", "a", "r")
    bundle = await mem.rehydrate_bundle()
    assert len(bundle["recent_turns"]) == 3
    assert "athena" in bundle["degraded"]
    await rt.close()
    await client.aclose()
