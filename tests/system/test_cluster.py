"""The Redis tiers on a real 3-master Redis Cluster (started by scripts/redis-cluster).

A cluster refuses a Lua script whose keys live in different slots, so these
tests prove that each script's keys share the workflow's hash tag.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from jarvismem.errors import CheckpointConflictError
from jarvismem.keys import KeySpace
from jarvismem.tiers.checkpoints import CheckpointStore
from jarvismem.tiers.episodic import EpisodicLedger

pytestmark = pytest.mark.integration


@pytest.fixture
async def cleanup(cluster: RedisCluster) -> AsyncIterator[list[str]]:
    """Keys a test registers here are deleted after it (one slot per workflow)."""
    keys: list[str] = []
    yield keys
    for key in keys:
        await cluster.delete(key)


def ledger(
    cluster: Any, keyspace: KeySpace, workflow_id: str, cleanup: list[str]
) -> EpisodicLedger:
    led = EpisodicLedger(cluster, keyspace, workflow_id, ttl_seconds=300, max_len=1000)
    cleanup.extend([led.key, led.index_key])
    return led


async def test_the_cluster_has_three_masters(cluster: RedisCluster) -> None:
    assert len(cluster.get_primaries()) == 3


async def test_workflows_spread_over_several_nodes(
    cluster: RedisCluster, keyspace: KeySpace
) -> None:
    # Guards the other tests: if every key went to one node, they would prove nothing.
    nodes = {
        cluster.get_node_from_key(keyspace.ledger(f"wf-{i}")).name  # type: ignore[union-attr]
        for i in range(30)
    }
    assert len(nodes) > 1


async def test_append_turn_is_exactly_once_on_a_cluster(
    cluster: RedisCluster, keyspace: KeySpace, workflow_id: str, cleanup: list[str]
) -> None:
    led = ledger(cluster, keyspace, workflow_id, cleanup)
    first = await led.append_turn(
        step_id="s1", agent_id="a1", turn_id=1, thought="t", action="a", result="r"
    )
    again = await led.append_turn(
        step_id="s1", agent_id="a1", turn_id=1, thought="t", action="a", result="r"
    )
    assert first.created and not again.created
    assert again.id == first.id
    assert await led.length() == 1
    assert await led.find_turn("s1", "a1", 1) == first.id


async def test_tail_returns_the_last_turns_in_order_on_a_cluster(
    cluster: RedisCluster, keyspace: KeySpace, workflow_id: str, cleanup: list[str]
) -> None:
    led = ledger(cluster, keyspace, workflow_id, cleanup)
    for turn in range(5):
        await led.append_turn(
            step_id="s1", agent_id="a1", turn_id=turn, thought=f"t{turn}", action="", result=""
        )
    tail = await led.tail(3)
    assert [entry["thought"] for entry in tail] == ["t2", "t3", "t4"]
    assert [entry["turn_id"] for entry in tail] == ["2", "3", "4"]


async def test_ledger_keys_get_their_ttl_on_a_cluster(
    cluster: RedisCluster, keyspace: KeySpace, workflow_id: str, cleanup: list[str]
) -> None:
    led = ledger(cluster, keyspace, workflow_id, cleanup)
    await led.append_turn(step_id="s", agent_id="a", turn_id="t", thought="", action="", result="")
    assert 0 < await cluster.ttl(led.key) <= 300
    assert 0 < await cluster.ttl(led.index_key) <= 300


async def test_checkpoint_compare_and_set_on_a_cluster(
    cluster: RedisCluster, keyspace: KeySpace, workflow_id: str, cleanup: list[str]
) -> None:
    store = CheckpointStore(cluster, keyspace, workflow_id, "step-1", ttl_seconds=300)
    cleanup.append(store.key)
    assert await store.save('{"n": 1}') == 1
    assert await store.save('{"n": 2}', expected_rev=1) == 2
    with pytest.raises(CheckpointConflictError) as info:
        await store.save('{"n": "stale"}', expected_rev=1)
    assert info.value.actual == 2
    loaded = await store.load()
    assert loaded is not None
    assert (loaded.state, loaded.rev) == ('{"n": 2}', 2)


async def test_ledger_and_checkpoints_of_a_workflow_live_on_one_node(
    cluster: RedisCluster, keyspace: KeySpace, workflow_id: str, cleanup: list[str]
) -> None:
    led = ledger(cluster, keyspace, workflow_id, cleanup)
    store = CheckpointStore(cluster, keyspace, workflow_id, "other-step", ttl_seconds=300)
    cleanup.append(store.key)
    await led.append({"note": "x"})
    await store.save("{}")
    slots = {cluster.keyslot(key) for key in (led.key, led.index_key, store.key)}
    assert len(slots) == 1
