"""WorkflowState: which parts exist per backend, the outbox appliers, durable appends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.llm import create_summarizer
from jarvismem.backends.outbox import Outbox
from jarvismem.backends.redis import RedisBackend
from jarvismem.engine.workflow import WorkflowState, _BlobApplier, _RedisApplier
from jarvismem.errors import BackendRejectedError
from jarvismem.keys import KeySpace
from jarvismem.payload import PayloadPolicy
from jarvismem.settings import Settings
from jarvismem.tiers.episodic import EpisodicLedger, encode_fields
from tests.conftest import Factory


@pytest.fixture
def common(settings: Settings) -> dict[str, Any]:
    """The WorkflowState arguments that do not depend on the backends."""
    return {
        "settings": settings,
        "policy": PayloadPolicy(),
        "summarizer": create_summarizer(settings),
    }


@pytest.fixture
async def make_state(common: dict[str, Any], tmp_path: Path) -> AsyncIterator[Factory]:
    """``make_state(redis=..., blob=...)``: workflow "wf" with an outbox per backend given;
    closed when the test ends (request the client fixtures first)."""
    made: list[WorkflowState] = []

    def build(*, redis: Any = None, blob: Any = None) -> WorkflowState:
        state = WorkflowState(
            "wf",
            redis=redis,
            blob=blob,
            redis_outbox=None if redis is None else Outbox(tmp_path / "redis.jsonl"),
            blob_outbox=None if blob is None else Outbox(tmp_path / "blob.jsonl"),
            **common,
        )
        made.append(state)
        return state

    yield build
    for state in made:
        await state.close()


async def test_redis_alone_gives_ledger_checkpoints_and_a_redis_writer(
    redis_client: Any, make_state: Factory
) -> None:
    state = make_state(redis=redis_client)
    assert state.ledger is not None and state.redis_writer is not None
    assert (state.blob_writer, state.ltm, state.compactor) == (None, None, None)
    assert state.writers == (state.redis_writer,)
    assert state.checkpoints("s1") is state.checkpoints("s1")
    assert state.checkpoints("s1") is not state.checkpoints("s2")


async def test_the_redis_writers_replay_on_the_backends_shared_recovery_probe(
    redis_client: Any, make_state: Factory
) -> None:
    # Without the probe a replay after an outage waits out a backoff grown to its cap;
    # one probe per backend: a thousand queued workflows cost one PING per interval.
    backend = RedisBackend(redis_client)
    state = make_state(redis=backend)
    assert state.redis_writer is not None
    assert state.redis_writer._probe is backend.probe


async def test_both_backends_add_long_term_memory_and_its_compactor(
    redis_client: Any, blob_storage: Any, make_state: Factory
) -> None:
    state = make_state(redis=redis_client, blob=blob_storage)
    assert state.ltm is not None and state.compactor is not None
    assert state.writers == (state.redis_writer, state.blob_writer)


def test_a_backend_without_its_outbox_is_refused(
    redis_client: Any, blob_storage: Any, common: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match="Redis outbox"):
        WorkflowState("wf", redis=redis_client, **common)
    with pytest.raises(ValueError, match="blob outbox"):
        WorkflowState("wf", blob=blob_storage, **common)


async def test_durable_appends_reach_the_blob_in_order(
    blob_storage: Any, make_state: Factory
) -> None:
    state = make_state(blob=blob_storage)
    for n in range(3):
        assert await state.durable_append("notes/a.txt", f"{n}\n".encode())
    assert await blob_storage.read("notes/a.txt") == b"0\n1\n2\n"


async def test_the_redis_applier_replays_turns_and_checkpoints(
    settings: Settings, redis_client: Any, keyspace: KeySpace
) -> None:
    ledger = EpisodicLedger(redis_client, keyspace, "wf")
    apply = _RedisApplier(redis_client, keyspace, settings, "wf", ledger)
    entry = {"turn_id": "1", "step_id": "s1", "agent_id": "a1", "thought": "t"}
    field = KeySpace.turn_field("s1", "a1", "1")
    await apply({"op": "turn", "args": encode_fields(entry), "field": field})
    await apply({"op": "checkpoint", "step": "s1", "state": '{"n": 1}', "ts": 1.0})
    assert len(await ledger.tail(5)) == 1
    stored = await apply.checkpoint_store("s1").load()
    assert stored is not None and stored.state == '{"n": 1}'
    with pytest.raises(BackendRejectedError, match="unknown outbox record op"):
        await apply({"op": "drop-table"})


async def test_a_backlog_of_queued_turns_replays_in_one_script_call(
    redis_client: Any, make_state: Factory
) -> None:
    state = make_state(redis=redis_client)
    writer, ledger = state.redis_writer, state.ledger
    assert writer is not None and ledger is not None
    await writer.outbox.load()
    for n in range(1, 6):  # what an outage leaves queued
        entry = {"turn_id": str(n), "step_id": "s1", "agent_id": "a1", "thought": f"t{n}"}
        field = KeySpace.turn_field("s1", "a1", str(n))
        assert await writer.outbox.put({"op": "turn", "args": encode_fields(entry), "field": field})
    runs: list[int] = []
    singles: list[str] = []
    many, one = ledger.append_encoded_many, ledger.append_encoded

    async def counted_many(turns: Any) -> Any:
        runs.append(len(turns))
        return await many(turns)

    async def counted_one(args: Any, field: str, tokens: int = 0) -> Any:
        singles.append(field)
        return await one(args, field, tokens)

    ledger.append_encoded_many = counted_many  # type: ignore[method-assign]
    ledger.append_encoded = counted_one  # type: ignore[method-assign]
    assert await writer.flush(timeout=10)
    assert (runs, singles) == ([5], [])
    assert [e["turn_id"] for e in await ledger.tail(10)] == ["1", "2", "3", "4", "5"]


async def test_the_blob_applier_refuses_unknown_records(blob_storage: Any) -> None:
    apply = _BlobApplier(blob_storage)
    assert await apply({"op": "append", "path": "x.txt", "data": "hi"})
    assert await blob_storage.read("x.txt") == b"hi"
    with pytest.raises(BackendRejectedError):
        await apply({"op": "delete", "path": "x.txt"})
