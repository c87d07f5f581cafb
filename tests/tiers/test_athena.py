"""AthenaMemory: session reuse, ordered durable delivery, circuit breaker, reads."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.outbox import Outbox
from jarvismem.keys import KeySpace
from jarvismem.redaction import default_redactor
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena import AthenaMemory
from tests.conftest import REAL_REDIS_URL

REPO = Path(__file__).resolve().parents[2]
TENANT, USER, AGENT = "acme", "alice", "agent1"
WAIT_BOUND = 5.0


@pytest.fixture
def server() -> Iterator[FakeAthenaServer]:
    with FakeAthenaServer(hang_seconds=2.0) as srv:
        yield srv


@pytest.fixture
async def client(server: FakeAthenaServer) -> AsyncIterator[AthenaClient]:
    c = AthenaClient(server.url, timeout=2.0, max_retries=1, backoff=0.01)
    yield c
    await c.aclose()


async def _memory(
    client: AthenaClient,
    redis: Any,
    keyspace: KeySpace,
    tmp_path: Path,
    **kwargs: Any,
) -> AthenaMemory:
    kwargs.setdefault("outbox", Outbox(tmp_path / "athena.jsonl"))
    kwargs.setdefault("retry_base", 0.01)
    kwargs.setdefault("retry_cap", 0.05)
    return await AthenaMemory.create(
        AGENT, client, redis, keyspace=keyspace, tenant_id=TENANT, user_id=USER, **kwargs
    )


async def _wait_for(predicate: Any) -> None:
    """Poll until ``predicate()`` is true; the bound only keeps a bug from hanging the suite.

    Polling (not an Event): the condition changes in the fake's server thread.
    """
    async with asyncio.timeout(WAIT_BOUND):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def _contents(server: FakeAthenaServer) -> list[str]:
    return [ev["content"] for _, ev in server.events]


async def test_session_created_once_under_concurrent_creates(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    memories = await asyncio.gather(
        *(
            _memory(
                client, redis_client, keyspace, tmp_path, outbox=Outbox(tmp_path / f"{i}.jsonl")
            )
            for i in range(20)
        )
    )
    assert server.sessions_created == 1
    assert len({m.session_id for m in memories}) == 1
    for m in memories:
        await m.close()


async def test_session_created_once_without_redis_in_one_process(
    server: FakeAthenaServer, client: AthenaClient, tmp_path: Path
) -> None:
    keyspace = KeySpace("t" + os.urandom(6).hex())
    memories = await asyncio.gather(
        *(
            _memory(client, None, keyspace, tmp_path, outbox=Outbox(tmp_path / f"{i}.jsonl"))
            for i in range(5)
        )
    )
    assert server.sessions_created == 1
    for m in memories:
        await m.close()


async def test_cached_session_reused_by_new_memory(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    first = await _memory(client, redis_client, keyspace, tmp_path)
    await first.close()
    second = await _memory(client, redis_client, keyspace, tmp_path)
    assert second.session_id == first.session_id
    assert server.sessions_created == 1
    stored = await redis_client.get(keyspace.athena_session(TENANT, USER, AGENT))
    assert stored.decode() == first.session_id
    await second.close()


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    import redis.asyncio as aioredis
    from jarvismem.backends.athena import AthenaClient
    from jarvismem.backends.outbox import Outbox
    from jarvismem.keys import KeySpace
    from jarvismem.tiers.athena import AthenaMemory

    async def main(url, redis_url, ns, outbox):
        r = aioredis.Redis.from_url(redis_url)
        c = AthenaClient(url)
        m = await AthenaMemory.create("agent1", c, r, keyspace=KeySpace(ns), tenant_id="acme",
                                      user_id="alice", outbox=Outbox(Path(outbox)))
        print(m.session_id)
        await m.close(); await c.aclose(); await r.aclose()

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_session_created_once_across_two_processes(
    server: FakeAthenaServer, real_redis: Any, keyspace: KeySpace, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(i: int) -> subprocess.Popen[bytes]:
        args = [server.url, REAL_REDIS_URL, keyspace.namespace, str(tmp_path / f"p{i}.jsonl")]
        return subprocess.Popen(
            [sys.executable, "-c", _CHILD, *args], stdout=subprocess.PIPE, env=env
        )

    procs = [run(0), run(1)]
    outs = [await asyncio.to_thread(p.communicate, timeout=60) for p in procs]
    ids = {out.decode().strip() for out, _ in outs}
    assert all(p.returncode == 0 for p in procs)
    assert len(ids) == 1
    assert server.sessions_created == 1


async def test_forgotten_session_is_recreated_and_cache_replaced(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    mem = await _memory(client, redis_client, keyspace, tmp_path)
    old = mem.session_id
    server.forget_session(old)
    await mem.record_thought("after restart of the server")
    await _wait_for(lambda: len(server.events) == 1)
    assert mem.session_id != old
    assert server.events[0][0] == mem.session_id
    stored = await redis_client.get(keyspace.athena_session(TENANT, USER, AGENT))
    assert stored.decode() == mem.session_id
    await mem.close()


async def test_writes_delivered_in_order_with_idempotency_keys(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    mem = await _memory(client, redis_client, keyspace, tmp_path)
    await mem.record_thought("t0")
    await mem.record_action("a1", tool="search")
    await mem.record_observation("o2")
    await mem.on_task_assigned("task-1", "write report")
    await mem.record_interaction("hello", "hi")
    await _wait_for(lambda: len(server.events) == 6)
    assert _contents(server) == [
        "t0",
        "a1",
        "o2",
        "Task task-1 assigned: write report",
        "hello",
        "hi",
    ]
    events = [ev for _, ev in server.events]
    keys = [ev["metadata"]["idempotency_key"] for ev in events[:4]]
    assert len(set(keys)) == 4
    assert events[1]["metadata"]["tool"] == "search"
    assert events[3]["metadata"]["task_id"] == "task-1"
    await mem.close()


async def test_writes_kept_in_outbox_during_outage_and_delivered_after(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    mem = await _memory(client, redis_client, keyspace, tmp_path, failure_threshold=100)
    server.mode = "error500"
    for i in range(5):
        await mem.record_observation(f"fact {i}")
    await _wait_for(lambda: mem.health()["consecutive_failures"] >= 2)
    assert mem.health()["pending"] == 5
    assert server.events == []
    server.mode = "ok"
    await _wait_for(lambda: mem.health()["pending"] == 0)
    assert _contents(server) == [f"fact {i}" for i in range(5)]
    await mem.close()


async def test_pending_writes_survive_close_and_are_sent_by_next_memory(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    mem = await _memory(client, redis_client, keyspace, tmp_path, cooldown=60)
    server.mode = "error500"
    await mem.record_thought("left behind")
    await _wait_for(lambda: mem.health()["consecutive_failures"] >= 1)
    await mem.close()
    server.mode = "ok"
    again = await _memory(client, redis_client, keyspace, tmp_path)
    await _wait_for(lambda: len(server.events) == 1)
    assert _contents(server) == ["left behind"]
    await again.close()


async def test_circuit_opens_after_consecutive_failures(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    mem = await _memory(client, redis_client, keyspace, tmp_path, failure_threshold=3, cooldown=60)
    server.mode = "error500"
    await mem.record_thought("x")
    await _wait_for(lambda: mem.health()["circuit"] == "open")
    attempts = len(server.requests_to("POST", "/events"))
    assert attempts == 3
    await mem.record_thought("y")
    await asyncio.sleep(0.1)  # give a (wrong) closed-circuit loop the chance to retry
    assert len(server.requests_to("POST", "/events")) == attempts
    await mem.close()


async def test_circuit_half_opens_and_closes_after_cooldown(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    mem = await _memory(client, redis_client, keyspace, tmp_path, failure_threshold=1, cooldown=0.2)
    server.mode = "error500"
    await mem.record_thought("x")
    await _wait_for(lambda: mem.health()["consecutive_failures"] >= 1)
    server.mode = "ok"
    await _wait_for(lambda: len(server.events) == 1)
    await _wait_for(lambda: mem.health()["circuit"] == "closed")
    await mem.close()


async def test_flush_delivers_now_and_returns_count(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    mem = await _memory(client, redis_client, keyspace, tmp_path, failure_threshold=1, cooldown=60)
    server.mode = "error500"
    await mem.record_thought("a")
    await _wait_for(lambda: mem.health()["circuit"] == "open")
    await mem.record_thought("b")
    server.mode = "ok"
    assert await mem.flush(timeout=5) == 2
    assert _contents(server) == ["a", "b"]
    assert mem.health()["circuit"] == "closed"
    await mem.close()


async def test_rejected_record_is_dropped_and_queue_moves_on(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    mem = await _memory(client, redis_client, keyspace, tmp_path)
    await mem.flush()
    server.fail_next(1, status=400)
    await mem.record_thought("refused")
    await mem.record_thought("accepted")
    await _wait_for(lambda: len(server.events) == 1)
    assert _contents(server) == ["accepted"]
    assert mem.health()["rejected"] == 1
    await mem.close()


async def test_redaction_applied_before_queueing(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    outbox = Outbox(tmp_path / "athena.jsonl")
    mem = await _memory(
        client, redis_client, keyspace, tmp_path, outbox=outbox, redactor=default_redactor
    )
    secret = "sk-" + "A" * 30
    server.mode = "error500"
    await mem.record_observation(f"the key is {secret}")
    on_disk = (tmp_path / "athena.jsonl").read_text()
    assert secret not in on_disk and "[REDACTED]" in on_disk
    server.mode = "ok"
    await _wait_for(lambda: len(server.events) == 1)
    assert secret not in server.events[0][1]["content"]
    await mem.close()


async def test_get_memory_context_returns_seeded_mid_term_chains(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    chain_id = server.add_chain(TENANT, USER, "budget", "Q3 budget approved at 40k")
    mem = await _memory(client, redis_client, keyspace, tmp_path)
    await mem.record_observation("budget noted")
    await mem.flush()
    ctx = await mem.get_memory_context(limit=5)
    assert ctx is not None
    assert ctx["session_id"] == mem.session_id
    assert [c["id"] for c in ctx["mid_term"]] == [chain_id]
    assert ctx["mid_term"][0]["summary"] == "Q3 budget approved at 40k"
    assert [e["content"] for e in ctx["short_term"]] == ["budget noted"]
    await mem.close()


async def test_get_memory_context_is_none_when_server_down(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    mem = await _memory(client, redis_client, keyspace, tmp_path)
    server.mode = "error500"
    assert await mem.get_memory_context() is None
    assert "AthenaServerError" in (mem.health()["last_error"] or "")
    await mem.close()


async def test_search_returns_distance_and_similarity(
    server: FakeAthenaServer,
    client: AthenaClient,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    server.add_chain(TENANT, USER, "budget", "Q3 budget approved")
    mem = await _memory(client, redis_client, keyspace, tmp_path)
    [hit] = await mem.search("budget")
    assert hit["source_type"] == "cognitive_chain"
    assert hit["similarity"] == pytest.approx(1 / (1 + hit["distance"]))
    await mem.close()


async def test_memory_created_while_athena_down_queues_writes(
    client: AthenaClient,
    server: FakeAthenaServer,
    redis_client: Any,
    keyspace: KeySpace,
    tmp_path: Path,
) -> None:
    server.mode = "error500"
    mem = await _memory(client, redis_client, keyspace, tmp_path)
    assert mem.session_id == ""
    await mem.record_thought("early")
    server.mode = "ok"
    await _wait_for(lambda: len(server.events) == 1)
    assert mem.session_id and server.sessions_created == 1
    await mem.close()


async def test_non_string_metadata_refused_before_queueing(
    client: AthenaClient, redis_client: Any, keyspace: KeySpace, tmp_path: Path
) -> None:
    from jarvismem.errors import InvalidPayloadError

    mem = await _memory(client, redis_client, keyspace, tmp_path)
    with pytest.raises(InvalidPayloadError):
        await mem.record_thought("x", count=3)  # type: ignore[arg-type]
    assert mem.health()["pending"] == 0
    await mem.close()


async def test_health_has_no_secrets(
    server: FakeAthenaServer, redis_client: Any, keyspace: KeySpace, tmp_path: Path
) -> None:
    c = AthenaClient(server.url.replace("http://", "http://user:pw-secret@"), api_key="k-secret-1")
    mem = await _memory(c, redis_client, keyspace, tmp_path)
    text = str(mem.health())
    assert "pw-secret" not in text and "k-secret-1" not in text
    await mem.close()
    await c.aclose()
