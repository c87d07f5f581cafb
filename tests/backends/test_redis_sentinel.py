"""Redis Sentinel: redis+sentinel:// URLs, the client that follows failovers, outbox naming.

The URL and naming tests need nothing; the failover tests run a primary, its
replica and one sentinel of their own (tests/ha_servers.py) and switch them with
``SENTINEL FAILOVER``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis

from jarvismem.backends.redis_connect import create_redis, redis_destination
from jarvismem.backends.redis_sentinel import (
    BlockingSentinelPool,
    SentinelTarget,
    parse_sentinel_url,
    sentinel_destination,
)
from jarvismem.errors import ConfigError
from jarvismem.keys import KeySpace
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from tests.conftest import wait_for
from tests.ha_servers import SERVICE, sentinel_set

# --- the URL --------------------------------------------------------------------------------------


def test_a_full_url_gives_sentinels_service_db_and_credentials() -> None:
    target = parse_sentinel_url("redis+sentinel://me:p%40ss@10.0.0.1:26380,sentinel-b/svc.main/3")
    assert target.sentinels == (("10.0.0.1", 26380), ("sentinel-b", 26379))
    assert (target.service, target.db) == ("svc.main", 3)
    assert (target.username, target.password) == ("me", "p@ss")
    assert "p@ss" not in repr(target)


def test_ipv6_sentinels_and_a_password_without_user() -> None:
    target = parse_sentinel_url("redis+sentinel://:pw@[::1]:26379,[fe80::2]/svc")
    assert target.sentinels == (("::1", 26379), ("fe80::2", 26379))
    assert (target.username, target.password, target.db) == (None, "pw", 0)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h:26379", "no service name"),
        ("redis+sentinel://h:26379/", "no service name"),
        ("redis+sentinel:///svc", "no sentinel address"),
        ("redis+sentinel://h:notaport/svc", "invalid port"),
        ("redis+sentinel://h:70000/svc", "invalid port"),
        ("redis+sentinel://h/svc/x", "database 'x' is not a number"),
        ("redis+sentinel://h/svc/0/more", "too many path parts"),
        ("redis+sentinel://h/s vc", "service name"),
        ("redis+sentinel://h/svc?x=1", "query strings"),
        ("redis+sentinel://[::1/svc", "unclosed ["),
    ],
)
def test_a_malformed_url_is_a_config_error_naming_the_problem(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match="invalid REDIS_URL") as caught:
        parse_sentinel_url(url)
    assert says in str(caught.value)


def test_a_malformed_url_fails_when_the_client_is_built_and_hides_the_password() -> None:
    settings = load_settings(_env_file=None, redis_url="redis+sentinel://:hunter2@h/bad name")
    with pytest.raises(ConfigError) as caught:
        create_redis(settings)
    assert "hunter2" not in str(caught.value)


# --- the destination names the service ---------------------------------------------------------


def test_the_destination_is_the_service_whatever_the_sentinel_order() -> None:
    a = SentinelTarget((("h2", 26380), ("h1", 26379)), "svc", 1)
    b = SentinelTarget((("h1", 26379), ("h2", 26380)), "svc", 1)
    assert sentinel_destination(a) == sentinel_destination(b) == "sentinel:svc@h1:26379,h2:26380/1"


def test_a_sentinel_client_is_named_by_its_service_not_by_a_server() -> None:
    settings = load_settings(
        _env_file=None, redis_url="redis+sentinel://:pw@127.0.0.1:26390,127.0.0.1:26391/svc/2"
    )
    client = create_redis(settings)
    assert isinstance(client.connection_pool, BlockingSentinelPool)
    assert redis_destination(client) == "sentinel:svc@127.0.0.1:26390,127.0.0.1:26391/2"
    assert "pw" not in redis_destination(client)


# --- real failover -------------------------------------------------------------------------------


@pytest.mark.integration
async def test_writes_follow_a_sentinel_failover_and_queued_turns_land_in_the_new_primary(
    tmp_path: Path, keyspace: KeySpace
) -> None:
    with sentinel_set(tmp_path) as (primary, replica, sentinel):
        url = f"redis+sentinel://127.0.0.1:{sentinel.port}/{SERVICE}/0"
        settings = load_settings(
            _env_file=None,
            redis_url=url,
            jarvismem_namespace=keyspace.namespace,
            outbox_path=tmp_path / "outbox",
            storage_base_path=tmp_path / "blobs",
            compaction_enabled=False,
        )
        runtime = await MemoryRuntime.from_env(settings)
        try:
            memory = runtime.memory("wf-sentinel", "s1", "a1")
            await memory.log_turn(1, "t", "a", "r")
            writer = runtime.workflow("wf-sentinel").redis_writer
            assert writer is not None
            assert writer.outbox.destination == runtime.destination("redis")

            # The old primary dies: turns queue; the sentinel promotes the replica.
            # (Killed, not paused and resumed: a resumed old primary is still a primary
            # until the failover demotes it, and a replay it took in between would be
            # discarded on demotion, the loss `primary` durability allows.)
            primary.kill()
            await memory.log_turn(2, "t", "a", "r")
            assert writer.health()["pending"] >= 1
            await wait_for(lambda: sentinel.primary_port() == replica.port, timeout=20)

            await memory.log_turn(3, "t", "a", "r")
            await wait_for(lambda: writer.health()["pending"] == 0, timeout=15)
            ledger = runtime.workflow("wf-sentinel").ledger
            assert ledger is not None
            turns = [entry["turn_id"] for entry in await ledger.full_history()]
            assert turns == ["1", "2", "3"]
            # Written into the new primary. (Not asked through the runtime's client: a
            # pooled connection to the demoted primary still answers reads.)
            direct = aioredis.Redis(port=replica.port)
            try:
                assert await direct.xlen(ledger.key) == 3
                assert (await direct.info("replication"))["role"] == "master"
            finally:
                await direct.aclose()
            health = (await runtime.health())["backends"]["redis"]
            assert health["backend"] == "redis-sentinel"
        finally:
            await runtime.close()
