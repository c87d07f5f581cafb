"""The Athena write path under re-logs, tenant changes, refused credentials, many agents
and a broken local disk: ``log_turn`` never raises because of Athena, each event of a
turn reaches Athena once, and records reach only the destination they were queued for."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.keys import KeySpace
from jarvismem.runtime import ATHENA_RECENT_AGENTS, MemoryRuntime
from jarvismem.settings import Settings, load_settings
from jarvismem.testing.fake_athena import FakeAthenaServer
from tests.conftest import REAL_REDIS_URL

REPO = Path(__file__).resolve().parents[2]

WAIT_BOUND = 60.0


@pytest.fixture
def server() -> Iterator[FakeAthenaServer]:
    with FakeAthenaServer(hang_seconds=2.0) as srv:
        yield srv


def _settings(tmp_path: Path, keyspace: KeySpace, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "_env_file": None,
        "jarvismem_namespace": keyspace.namespace,
        "outbox_path": tmp_path / "outbox",
        "compaction_enabled": False,
        "athena_tenant_id": "acme",
    }
    values.update(overrides)
    return load_settings(**values)


async def _wait_for(predicate: Any) -> None:
    """Poll until ``predicate()`` is true; the bound only keeps a bug from hanging the suite."""
    async with asyncio.timeout(WAIT_BOUND):
        while not predicate():  # noqa: ASYNC110 (the condition changes in the fake's thread)
            await asyncio.sleep(0.02)


def _contents(server: FakeAthenaServer) -> list[str]:
    return [ev["content"] for _sid, ev in server.events]


def _session_tenants(server: FakeAthenaServer) -> dict[str, str]:
    """Session id -> tenant, from the recorded session-creation requests and answers."""
    return {sid: server._sessions[sid].tenant for sid in server.session_ids}


# --- item 3: a re-logged turn reaches Athena once ------------------------------------------------


async def test_a_turn_logged_six_times_reaches_athena_once(
    tmp_path: Path, keyspace: KeySpace, real_redis: Any, server: FakeAthenaServer
) -> None:
    # Two runtimes with their own outbox folders stand for two processes (or
    # machines) that share Redis; each logs the turn through two views.
    runtimes = []
    for name in ("p1", "p2"):
        s = _settings(tmp_path, keyspace, outbox_path=tmp_path / name)
        client = AthenaClient(server.url, max_retries=0)
        runtimes.append(MemoryRuntime(s, redis=real_redis, athena=client))
    views = [rt.memory("wf-1", "s1", "a1") for rt in runtimes for _ in range(2)]
    for i in range(6):  # same view twice, two views per runtime, two runtimes
        await views[[0, 0, 1, 2, 2, 3][i]].log_turn(7, "plan it", "do it", "done")
    for rt in runtimes:
        am = await rt.athena_memory("a1")
        assert am is not None
        await _wait_for(lambda am=am: am.health()["pending"] == 0)
        await am.flush(timeout=10)
    assert sorted(_contents(server)) == ["do it", "done", "plan it"]
    ledger = await views[0].rehydrate_bundle()
    assert [t["turn_id"] for t in ledger["recent_turns"]] == ["7"]
    for rt in runtimes:
        athena = rt.athena
        await rt.close()
        assert athena is not None
        await athena.aclose()


_RELOG_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    import redis.asyncio as aioredis
    from jarvismem.backends.athena import AthenaClient
    from jarvismem.runtime import MemoryRuntime
    from jarvismem.settings import load_settings

    async def main(url, redis_url, ns, outbox):
        s = load_settings(_env_file=None, jarvismem_namespace=ns, outbox_path=Path(outbox),
                          compaction_enabled=False, athena_tenant_id="acme")
        r = aioredis.Redis.from_url(redis_url)
        c = AthenaClient(url, max_retries=0)
        rt = MemoryRuntime(s, redis=r, athena=c)
        for view in (rt.memory("wf-1", "s1", "a1"), rt.memory("wf-1", "s1", "a1")):
            for _ in range(2):
                await view.log_turn(7, "plan it", "do it", "done")
        am = await rt.athena_memory("a1")
        while am.health()["pending"]:
            await am.flush()
            await asyncio.sleep(0.05)
        await rt.close(); await c.aclose(); await r.aclose()

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_a_turn_relogged_by_two_processes_reaches_athena_once(
    tmp_path: Path, keyspace: KeySpace, real_redis: Any, server: FakeAthenaServer
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(i: int) -> subprocess.Popen[bytes]:
        args = [server.url, REAL_REDIS_URL, keyspace.namespace, str(tmp_path / f"p{i}")]
        return subprocess.Popen([sys.executable, "-c", _RELOG_CHILD, *args], env=env)

    procs = [run(0), run(1)]
    codes = [await asyncio.to_thread(p.wait, 120) for p in procs]
    assert codes == [0, 0]
    assert sorted(_contents(server)) == ["do it", "done", "plan it"]


async def test_an_event_whose_send_failed_is_sent_again_once(
    tmp_path: Path, keyspace: KeySpace, redis_client: Any, server: FakeAthenaServer
) -> None:
    from jarvismem.backends.outbox import Outbox
    from jarvismem.tiers.athena import AthenaMemory

    client = AthenaClient(server.url, max_retries=0)
    mem = await AthenaMemory.create(
        "a1",
        client,
        redis_client,
        keyspace=keyspace,
        outbox=Outbox(tmp_path / "a.jsonl"),
        retry_base=0.01,
        retry_cap=0.05,
    )
    server.fail_next(1, status=500)  # the thought's send fails after its key was claimed
    await mem.record_turn(1, "t", "a", "o", workflow_id="wf-1", step_id="s1")
    await mem.record_turn(1, "t", "a", "o", workflow_id="wf-1", step_id="s1")  # a re-log
    await _wait_for(lambda: mem.health()["pending"] == 0)
    assert _contents(server) == ["t", "a", "o"]
    assert mem.health()["duplicates_skipped"] == 3
    await mem.close()
    await client.aclose()


# --- item 8: per-destination outboxes ------------------------------------------------------------


async def test_records_queued_for_one_tenant_never_reach_another(
    tmp_path: Path, keyspace: KeySpace, redis_client: Any, server: FakeAthenaServer
) -> None:
    server.mode = "error500"  # Athena down while acme's turns are logged
    acme = MemoryRuntime(
        _settings(tmp_path, keyspace, athena_tenant_id="acme"),
        redis=redis_client,
        athena=AthenaClient(server.url, max_retries=0),
    )
    for i in range(3):
        await acme.memory("wf-1", "s1", "a1").log_turn(i, f"acme secret {i}", "", "")
    await acme.close()
    assert acme.athena is not None
    await acme.athena.aclose()

    server.mode = "ok"  # the deployment is reconfigured for tenant globex
    globex = MemoryRuntime(
        _settings(tmp_path, keyspace, athena_tenant_id="globex"),
        redis=redis_client,
        athena=AthenaClient(server.url, max_retries=0),
    )
    await globex.memory("wf-2", "s1", "a1").log_turn(1, "globex thought", "", "")
    am = await globex.athena_memory("a1")
    assert am is not None
    await am.flush(timeout=10)
    await _wait_for(lambda: am.health()["pending"] == 0)
    tenants = _session_tenants(server)
    delivered = [(tenants[sid], ev["content"]) for sid, ev in server.events]
    assert delivered == [("globex", "globex thought")]
    await globex.close()
    assert globex.athena is not None
    await globex.athena.aclose()

    # acme's records were kept for acme: configured again, it gets them, in order.
    again = MemoryRuntime(
        _settings(tmp_path, keyspace, athena_tenant_id="acme"),
        redis=redis_client,
        athena=AthenaClient(server.url, max_retries=0),
    )
    am = await again.athena_memory("a1")
    assert am is not None
    await am.flush(timeout=10)
    tenants = _session_tenants(server)
    delivered = [(tenants[sid], ev["content"]) for sid, ev in server.events]
    assert delivered[1:] == [("acme", f"acme secret {i}") for i in range(3)]
    await again.close()
    assert again.athena is not None
    await again.athena.aclose()


async def test_a_record_stamped_for_another_destination_is_never_sent(
    tmp_path: Path, keyspace: KeySpace, redis_client: Any, server: FakeAthenaServer
) -> None:
    from jarvismem.backends.outbox import Outbox
    from jarvismem.tiers.athena import AthenaMemory

    shared = tmp_path / "one-file.jsonl"  # the same file given to two destinations by hand
    client = AthenaClient(server.url, max_retries=0)
    server.mode = "error500"
    acme = await AthenaMemory.create(
        "a1", client, redis_client, keyspace=keyspace, tenant_id="acme", outbox=Outbox(shared)
    )
    await acme.record_thought("for acme only")
    await acme.close()
    server.mode = "ok"
    globex = await AthenaMemory.create(
        "a1", client, redis_client, keyspace=keyspace, tenant_id="globex", outbox=Outbox(shared)
    )
    await globex.flush(timeout=10)
    assert server.events == []
    assert globex.health()["misdirected"] == 1
    assert globex.health()["pending"] == 0
    await globex.close()
    await client.aclose()


# --- item 9: 401 never breaks log_turn -----------------------------------------------------------


async def test_athena_refusing_credentials_never_breaks_log_turn(
    tmp_path: Path, keyspace: KeySpace, redis_client: Any
) -> None:
    with FakeAthenaServer(api_key="the-right-key") as server:
        settings = _settings(tmp_path, keyspace)
        wrong = AthenaClient(server.url, api_key="a-rotated-key", max_retries=0)
        rt = MemoryRuntime(settings, redis=redis_client, athena=wrong)
        mem = rt.memory("wf-1", "s1", "a1")
        for i in range(20):
            await mem.log_turn(i, f"thought {i}", "act", "res")  # never raises
        bundle = await mem.rehydrate_bundle(ledger_tail=50)
        assert [t["turn_id"] for t in bundle["recent_turns"]] == [str(i) for i in range(20)]
        assert "athena" in bundle["degraded"]
        health = await rt.health()
        athena_box = health["outboxes"]["athena[a1]"]
        assert "AthenaAuthError" in (athena_box["last_error"] or "")
        assert athena_box["pending"] == 20  # kept: the right key makes them deliverable
        assert health["degraded"]
        await rt.close()
        await wrong.aclose()

        right = AthenaClient(server.url, api_key="the-right-key", max_retries=0)
        rt = MemoryRuntime(settings, redis=redis_client, athena=right)
        am = await rt.athena_memory("a1")
        assert am is not None
        await am.flush(timeout=20)
        assert _contents(server)[::3] == [f"thought {i}" for i in range(20)]
        assert len(server.events) == 60
        await rt.close()
        await right.aclose()


# --- item 11: per-agent state is bounded ---------------------------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_many_agents_keep_open_files_bounded_and_all_events_delivered(
    tmp_path: Path, keyspace: KeySpace, server: FakeAthenaServer
) -> None:
    agents = 1_500
    client = AthenaClient(server.url, max_retries=0)
    rt = MemoryRuntime(_settings(tmp_path, keyspace), athena=client)
    before = _open_fds()
    peak = before
    for i in range(agents):
        await rt.memory("wf-1", "s1", f"agent-{i}").log_turn(1, f"hello from {i}", "", "")
        if i % 50 == 0:
            peak = max(peak, _open_fds())
    peak = max(peak, _open_fds())
    # Per live agent: its outbox lock and, while it delivers, its delivery claim;
    # plus the HTTP pool (100 connections, counted twice: the fake runs in this
    # process). The old code held one more file per agent ever seen.
    assert peak - before <= 2 * ATHENA_RECENT_AGENTS + 250
    await _wait_for(lambda: len(server.events) >= agents)
    await asyncio.sleep(0.2)  # a duplicate would arrive right after
    assert sorted(_contents(server)) == sorted(f"hello from {i}" for i in range(agents))
    await rt.close()
    await client.aclose()


# --- item 12: a local disk error in the Athena outbox --------------------------------------------


def _replace_athena_outbox_folder_by_a_file(root: Path) -> None:
    [data] = [p for p in root.rglob("*.jsonl") if "athena" in p.parts]
    shutil.rmtree(data.parent)
    data.parent.write_text("not a folder")


async def test_a_broken_athena_outbox_folder_never_breaks_log_turn(
    tmp_path: Path,
    keyspace: KeySpace,
    redis_client: Any,
    server: FakeAthenaServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = _settings(tmp_path, keyspace)
    client = AthenaClient(server.url, max_retries=0)
    rt = MemoryRuntime(settings, redis=redis_client, athena=client)
    mem = rt.memory("wf-1", "s1", "a1")
    await mem.log_turn(0, "before", "", "")
    am = await rt.athena_memory("a1")
    assert am is not None
    await am.flush(timeout=10)
    # The folder of the Athena outbox is replaced by a file: every append fails (ENOTDIR).
    await asyncio.to_thread(_replace_athena_outbox_folder_by_a_file, Path(settings.outbox_path))
    caplog.set_level(logging.WARNING)
    for i in range(1, 4):
        await mem.log_turn(i, f"during {i}", "", "")  # never raises
    bundle = await mem.rehydrate_bundle()
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["0", "1", "2", "3"]
    health = await rt.health()
    box = health["outboxes"]["athena[a1]"]
    assert box["dropped"] == 3
    assert "ENOTDIR" in (box["last_error"] or "")
    disk_warnings = [r for r in caplog.records if "ENOTDIR" in r.getMessage()]
    assert len(disk_warnings) == 1  # once per burst
    await rt.close()
    await client.aclose()


async def test_a_claim_left_by_a_dead_deliverer_delays_the_event_but_never_loses_it(
    tmp_path: Path, keyspace: KeySpace, redis_client: Any, server: FakeAthenaServer
) -> None:
    from jarvismem.backends.outbox import Outbox
    from jarvismem.tiers.athena import AthenaMemory

    client = AthenaClient(server.url, max_retries=0)
    mem = await AthenaMemory.create(
        "a1", client, redis_client, keyspace=keyspace, outbox=Outbox(tmp_path / "a.jsonl")
    )
    # A deliverer claimed the thought and died before sending it: its lease runs out.
    key = keyspace.athena_event_key("wf-1", "s1", "a1", "1", "thought")
    marker = keyspace.athena_sent(mem.destination, key)
    await redis_client.set(marker, "pending:dead-process", px=300)
    await mem.record_turn(1, "t", "", "", workflow_id="wf-1", step_id="s1")
    await _wait_for(lambda: mem.health()["pending"] == 0)
    assert _contents(server) == ["t"]
    assert (await redis_client.get(marker)) == b"sent"
    await mem.close()
    await client.aclose()


async def test_an_athena_outbox_folder_that_cannot_be_made_never_breaks_log_turn(
    tmp_path: Path,
    keyspace: KeySpace,
    redis_client: Any,
    server: FakeAthenaServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = _settings(tmp_path, keyspace)
    # Where the Athena outboxes would go is a file: opening one fails (ENOTDIR/EEXIST).
    blocker = Path(settings.outbox_path) / keyspace.namespace / "athena"
    await asyncio.to_thread(blocker.parent.mkdir, parents=True)
    await asyncio.to_thread(blocker.write_text, "not a folder")
    client = AthenaClient(server.url, max_retries=0)
    rt = MemoryRuntime(settings, redis=redis_client, athena=client)
    mem = rt.memory("wf-1", "s1", "a1")
    caplog.set_level(logging.WARNING)
    for i in range(3):
        await mem.log_turn(i, f"turn {i}", "", "")  # never raises
    bundle = await mem.rehydrate_bundle()
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["0", "1", "2"]
    # Outboxes are opened lazily: the first append meets the file and says so.
    failing = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(failing) == 1  # once per burst
    health = await rt.health()
    assert health["outboxes"]["athena[a1]"]["dropped"] == 3
    await rt.close()
    await client.aclose()
