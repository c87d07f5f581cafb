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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.keys import KeySpace
from jarvismem.runtime import ATHENA_RECENT_AGENTS
from jarvismem.settings import Settings
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena import TurnOrigin
from tests.conftest import REAL_REDIS_URL, Factory, MakeSettings, wait_for

REPO = Path(__file__).resolve().parents[2]

WAIT_BOUND = 60.0


@pytest.fixture
def settings(make_settings: MakeSettings) -> Settings:
    """The test's settings with Athena tenant ``acme``."""
    return make_settings(athena_tenant_id="acme")


@pytest.fixture
def athena_client(athena_server: FakeAthenaServer, make_athena_client: Factory) -> AthenaClient:
    """A client of the fake server that tries once (the outbox does the retrying)."""
    client: AthenaClient = make_athena_client(athena_server.url, max_retries=0)
    return client


async def _wait_for(predicate: Callable[[], bool]) -> None:
    """Poll until ``predicate()`` is true; the bound only keeps a bug from hanging the suite."""
    await wait_for(predicate, timeout=WAIT_BOUND)


def _contents(server: FakeAthenaServer) -> list[str]:
    return [ev["content"] for _sid, ev in server.events]


# --- item 3: a re-logged turn reaches Athena once ------------------------------------------------


async def test_a_turn_logged_six_times_reaches_athena_once(
    tmp_path: Path,
    real_redis: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_settings: Factory,
    make_runtime: Factory,
) -> None:
    # Two runtimes with their own outbox folders stand for two processes (or
    # machines) that share Redis; each logs the turn through two views.
    runtimes = [
        make_runtime(
            settings=make_settings(athena_tenant_id="acme", outbox_path=tmp_path / name),
            redis=real_redis,
            athena=make_athena_client(athena_server.url, max_retries=0),
        )
        for name in ("p1", "p2")
    ]
    views = [rt.memory("wf-1", "s1", "a1") for rt in runtimes for _ in range(2)]
    for i in range(6):  # same view twice, two views per runtime, two runtimes
        await views[[0, 0, 1, 2, 2, 3][i]].log_turn(7, "plan it", "do it", "done")
    for rt in runtimes:
        am = await rt.athena_memory("a1")
        assert am is not None
        await _wait_for(lambda am=am: am.health()["pending"] == 0)
        await am.flush(timeout=10)
    assert sorted(_contents(athena_server)) == ["do it", "done", "plan it"]
    ledger = await views[0].rehydrate_bundle()
    assert [t["turn_id"] for t in ledger["recent_turns"]] == ["7"]


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
    tmp_path: Path, keyspace: KeySpace, real_redis: Any, athena_server: FakeAthenaServer
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(i: int) -> subprocess.Popen[bytes]:
        args = [athena_server.url, REAL_REDIS_URL, keyspace.namespace, str(tmp_path / f"p{i}")]
        return subprocess.Popen([sys.executable, "-c", _RELOG_CHILD, *args], env=env)

    procs = [run(0), run(1)]
    codes = [await asyncio.to_thread(p.wait, 120) for p in procs]
    assert codes == [0, 0]
    assert sorted(_contents(athena_server)) == ["do it", "done", "plan it"]


async def test_an_event_whose_send_failed_is_sent_again_once(
    tmp_path: Path,
    keyspace: KeySpace,
    redis_client: Any,
    athena_server: FakeAthenaServer,
    athena_client: AthenaClient,
) -> None:
    from jarvismem.backends.outbox import Outbox
    from jarvismem.tiers.athena import AthenaMemory

    mem = await AthenaMemory.create(
        "a1",
        athena_client,
        redis_client,
        keyspace=keyspace,
        outbox=Outbox(tmp_path / "a.jsonl"),
        retry_base=0.01,
        retry_cap=0.05,
    )
    athena_server.fail_next(1, status=500)  # the thought's send fails after its key was claimed
    await mem.record_turn(1, "t", "a", "o", origin=TurnOrigin("wf-1", "s1"))
    await mem.record_turn(1, "t", "a", "o", origin=TurnOrigin("wf-1", "s1"))  # a re-log
    await _wait_for(lambda: mem.health()["pending"] == 0)
    assert _contents(athena_server) == ["t", "a", "o"]
    assert mem.health()["duplicates_skipped"] == 3
    await mem.close()


# --- item 8: per-destination outboxes ------------------------------------------------------------


async def test_records_queued_for_one_tenant_never_reach_another(
    redis_client: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_settings: Factory,
    make_runtime: Factory,
) -> None:
    def runtime_of(tenant: str) -> Any:
        """A fresh process configured for ``tenant``."""
        return make_runtime(
            settings=make_settings(athena_tenant_id=tenant),
            redis=redis_client,
            athena=make_athena_client(athena_server.url, max_retries=0),
        )

    athena_server.mode = "error500"  # Athena down while acme's turns are logged
    acme = runtime_of("acme")
    for i in range(3):
        await acme.memory("wf-1", "s1", "a1").log_turn(i, f"acme secret {i}", "", "")
    await acme.close()

    athena_server.mode = "ok"  # the deployment is reconfigured for tenant globex
    globex = runtime_of("globex")
    await globex.memory("wf-2", "s1", "a1").log_turn(1, "globex thought", "", "")
    am = await globex.athena_memory("a1")
    assert am is not None
    await am.flush(timeout=10)
    await _wait_for(lambda: am.health()["pending"] == 0)
    tenants = athena_server.session_tenants()
    delivered = [(tenants[sid], ev["content"]) for sid, ev in athena_server.events]
    assert delivered == [("globex", "globex thought")]
    await globex.close()

    # acme's records were kept for acme: configured again, it gets them, in order.
    again = runtime_of("acme")
    am = await again.athena_memory("a1")
    assert am is not None
    await am.flush(timeout=10)
    # flush waits for the delivery claim, which the background pass may hold while
    # it delivers: wait for the outbox to empty, as for globex above.
    await _wait_for(lambda: am.health()["pending"] == 0)
    tenants = athena_server.session_tenants()
    delivered = [(tenants[sid], ev["content"]) for sid, ev in athena_server.events]
    assert delivered[1:] == [("acme", f"acme secret {i}") for i in range(3)]


async def test_a_record_stamped_for_another_destination_is_never_sent(
    tmp_path: Path,
    keyspace: KeySpace,
    redis_client: Any,
    athena_server: FakeAthenaServer,
    athena_client: AthenaClient,
) -> None:
    from jarvismem.backends.outbox import Outbox
    from jarvismem.tiers.athena import AthenaMemory

    shared = tmp_path / "one-file.jsonl"  # the same file given to two destinations by hand
    client = athena_client
    athena_server.mode = "error500"
    acme = await AthenaMemory.create(
        "a1", client, redis_client, keyspace=keyspace, tenant_id="acme", outbox=Outbox(shared)
    )
    await acme.record_thought("for acme only")
    await acme.close()
    athena_server.mode = "ok"
    globex = await AthenaMemory.create(
        "a1", client, redis_client, keyspace=keyspace, tenant_id="globex", outbox=Outbox(shared)
    )
    await globex.flush(timeout=10)
    assert athena_server.events == []
    assert globex.health()["misdirected"] == 1
    assert globex.health()["pending"] == 0
    await globex.close()


# --- item 9: 401 never breaks log_turn -----------------------------------------------------------


async def test_athena_refusing_credentials_never_breaks_log_turn(
    redis_client: Any, make_athena_client: Factory, make_runtime: Factory
) -> None:
    with FakeAthenaServer(api_key="the-right-key") as server:
        wrong = make_athena_client(server.url, api_key="a-rotated-key", max_retries=0)
        rt = make_runtime(redis=redis_client, athena=wrong)
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
        await rt.close()  # the process ends; the key is rotated back

        right = make_athena_client(server.url, api_key="the-right-key", max_retries=0)
        rt = make_runtime(redis=redis_client, athena=right)
        am = await rt.athena_memory("a1")
        assert am is not None
        await am.flush(timeout=20)
        assert _contents(server)[::3] == [f"thought {i}" for i in range(20)]
        assert len(server.events) == 60
        await rt.close()  # before the server stops


# --- item 11: per-agent state is bounded ---------------------------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_many_agents_keep_open_files_bounded_and_all_events_delivered(
    athena_server: FakeAthenaServer, athena_client: AthenaClient, make_runtime: Factory
) -> None:
    agents = 1_500
    rt = make_runtime(athena=athena_client)
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
    await _wait_for(lambda: len(athena_server.events) >= agents)
    await asyncio.sleep(0.2)  # a duplicate would arrive right after
    assert sorted(_contents(athena_server)) == sorted(f"hello from {i}" for i in range(agents))


# --- item 12: a local disk error in the Athena outbox --------------------------------------------


def _replace_athena_outbox_folder_by_a_file(root: Path) -> None:
    [data] = [p for p in root.rglob("*.jsonl") if "athena" in p.parts]
    shutil.rmtree(data.parent)
    data.parent.write_text("not a folder")


async def test_a_broken_athena_outbox_folder_never_breaks_log_turn(
    settings: Settings,
    redis_client: Any,
    athena_client: AthenaClient,
    make_runtime: Factory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = make_runtime(redis=redis_client, athena=athena_client)
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


async def test_a_claim_left_by_a_dead_deliverer_delays_the_event_but_never_loses_it(
    tmp_path: Path,
    keyspace: KeySpace,
    redis_client: Any,
    athena_server: FakeAthenaServer,
    athena_client: AthenaClient,
) -> None:
    from jarvismem.backends.outbox import Outbox
    from jarvismem.tiers.athena import AthenaMemory

    mem = await AthenaMemory.create(
        "a1", athena_client, redis_client, keyspace=keyspace, outbox=Outbox(tmp_path / "a.jsonl")
    )
    # A deliverer claimed the thought and died before sending it: its lease runs out.
    key = keyspace.athena_event_key("wf-1", "s1", "a1", "1", "thought")
    marker = keyspace.athena_sent(mem.destination, key)
    await redis_client.set(marker, "pending:dead-process", px=300)
    await mem.record_turn(1, "t", "", "", origin=TurnOrigin("wf-1", "s1"))
    await _wait_for(lambda: mem.health()["pending"] == 0)
    assert _contents(athena_server) == ["t"]
    assert (await redis_client.get(marker)) == b"sent"
    await mem.close()


async def test_an_athena_outbox_folder_that_cannot_be_made_never_breaks_log_turn(
    settings: Settings,
    keyspace: KeySpace,
    redis_client: Any,
    athena_client: AthenaClient,
    make_runtime: Factory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Where the Athena outboxes would go is a file: opening one fails (ENOTDIR/EEXIST).
    blocker = Path(settings.outbox_path) / keyspace.namespace / "athena"
    await asyncio.to_thread(blocker.parent.mkdir, parents=True)
    await asyncio.to_thread(blocker.write_text, "not a folder")
    rt = make_runtime(redis=redis_client, athena=athena_client)
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
