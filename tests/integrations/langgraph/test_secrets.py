"""Secrets through the LangGraph saver and store: redacted before Redis sees them.

The same values through ``remember``, ``put_space`` and ``save_checkpoint`` are
redacted; a graph's state, its pending writes and a store's items and search
index must be too. Each test reads every raw byte the namespace holds on the real
Redis server (key names and values of every type) and looks for each secret of
``tests/secret_corpus.py``; the opt-out tests show the values kept as given.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph

from jarvismem.integrations.langgraph import JarvisMemSaver, JarvisMemStore
from jarvismem.runtime import MemoryRuntime
from tests.conftest import Factory
from tests.secret_corpus import SECRETS, STRIPE_LIVE

PASSWORD = "hunter2-Zq81"
CORPUS_TEXTS = [text for _, text, _ in SECRETS]
CORPUS_SECRETS = [secret for _, _, secret in SECRETS]


async def _raw(runtime: MemoryRuntime) -> bytes:
    """Every key name and stored value of the runtime's namespace, as one byte string."""
    redis = runtime.redis
    assert redis is not None
    parts: list[bytes] = []
    async for key in redis.scan_iter(match=f"jm:{runtime.keyspace.namespace}:*", count=1000):
        raw_key = key if isinstance(key, bytes) else key.encode()
        parts.append(raw_key)
        kind = await redis.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        values: list[Any]
        if kind == "string":
            values = [await redis.get(key)]
        elif kind == "hash":
            values = [x for pair in (await redis.hgetall(key)).items() for x in pair]
        elif kind == "zset":
            values = await redis.zrange(key, 0, -1)
        elif kind == "set":
            values = list(await redis.smembers(key))
        elif kind == "list":
            values = await redis.lrange(key, 0, -1)
        elif kind == "stream":
            values = [str(await redis.xrange(key)).encode()]
        else:
            values = []
        parts += [v if isinstance(v, bytes) else str(v).encode() for v in values]
    return b"\n".join(parts)


def _leaks(blob: bytes | str, secrets: list[str]) -> list[str]:
    text = blob if isinstance(blob, str) else blob.decode("utf-8", "replace")
    return [s for s in secrets if s in text]


# --- the store ------------------------------------------------------------------------------


async def test_store_items_and_their_search_index_hold_no_secret(
    real_runtime: MemoryRuntime,
) -> None:
    store = JarvisMemStore.from_runtime(real_runtime)
    await store.aput(
        ("users", "alice"), "creds", {"password": PASSWORD, "note": f"key {STRIPE_LIVE}"}
    )
    for i, text in enumerate(CORPUS_TEXTS):
        await store.aput(("users", "alice"), f"note-{i}", {"text": f"deploy notes {text}"})
    raw = await _raw(real_runtime)
    assert _leaks(raw, [PASSWORD, STRIPE_LIVE, *CORPUS_SECRETS]) == []

    item = await store.aget(("users", "alice"), "creds")
    assert item is not None
    assert item.value == {"password": "[REDACTED]", "note": "key [REDACTED]"}
    hits = await store.asearch(("users",), query="deploy notes key", limit=200)
    assert len(hits) == len(CORPUS_TEXTS) + 1
    assert _leaks(repr([h.value for h in hits]), [PASSWORD, STRIPE_LIVE, *CORPUS_SECRETS]) == []


async def test_store_keeps_values_as_given_when_redaction_is_off(
    real_redis: Any, make_settings: Any, make_runtime: Factory
) -> None:
    runtime: MemoryRuntime = make_runtime(
        redis=real_redis, settings=make_settings(redaction_enabled=False)
    )
    store = JarvisMemStore.from_runtime(runtime)
    value = {"password": PASSWORD, "note": f"key {STRIPE_LIVE}"}
    await store.aput(("users", "alice"), "creds", value)
    item = await store.aget(("users", "alice"), "creds")
    assert item is not None and item.value == value
    assert _leaks(await _raw(runtime), [PASSWORD, STRIPE_LIVE]) == [PASSWORD, STRIPE_LIVE]


# --- the saver ------------------------------------------------------------------------------


class State(TypedDict, total=False):
    creds: dict[str, Any]
    notes: Annotated[list[str], operator.add]


def _graph(saver: JarvisMemSaver) -> Any:
    def leak(state: State) -> State:
        return {
            "creds": {"password": PASSWORD, "api_key": STRIPE_LIVE, "user": "alice"},
            "notes": [f"tool said: {text}" for text in CORPUS_TEXTS],
        }

    return (
        StateGraph(State).add_node("leak", leak).add_edge(START, "leak").compile(checkpointer=saver)
    )


async def test_saver_state_and_pending_writes_hold_no_secret(real_runtime: MemoryRuntime) -> None:
    saver = JarvisMemSaver.from_runtime(real_runtime)
    config = {"configurable": {"thread_id": "t-secrets"}}
    await _graph(saver).ainvoke({"notes": []}, config)
    # A task's writes are stored before the next checkpoint: they hold the node's output.
    pending = await _checkpoint(saver, "t-writes")
    await saver.aput_writes(
        pending,  # type: ignore[arg-type]
        [("creds", {"password": PASSWORD, "token": STRIPE_LIVE}), ("notes", CORPUS_TEXTS)],
        "task-1",
    )
    raw = await _raw(real_runtime)
    assert b"t-secrets" in raw  # the thread is there, so the scan saw its keys
    assert _leaks(raw, [PASSWORD, STRIPE_LIVE, *CORPUS_SECRETS]) == []

    state = (await _graph(saver).aget_state(config)).values
    assert state["creds"] == {"password": "[REDACTED]", "api_key": "[REDACTED]", "user": "alice"}
    assert len(state["notes"]) == len(CORPUS_TEXTS)
    found = await saver.aget_tuple(pending)  # type: ignore[arg-type]
    assert found is not None and found.pending_writes is not None
    assert found.pending_writes[0][1:] == (
        "creds",
        {"password": "[REDACTED]", "token": "[REDACTED]"},
    )


async def test_saver_keeps_state_as_given_with_redact_checkpoints_off(
    real_redis: Any, make_settings: Any, make_runtime: Factory
) -> None:
    runtime: MemoryRuntime = make_runtime(
        redis=real_redis, settings=make_settings(redact_checkpoints=False)
    )
    saver = JarvisMemSaver.from_runtime(runtime)
    config = {"configurable": {"thread_id": "t-exact"}}
    await _graph(saver).ainvoke({"notes": []}, config)
    state = (await _graph(saver).aget_state(config)).values
    assert state["creds"] == {"password": PASSWORD, "api_key": STRIPE_LIVE, "user": "alice"}
    assert state["notes"] == [f"tool said: {text}" for text in CORPUS_TEXTS]


async def _checkpoint(saver: JarvisMemSaver, thread_id: str) -> dict[str, Any]:
    """The config of a fresh empty checkpoint of ``thread_id`` (for pending writes)."""
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    stored: dict[str, Any] = await saver.aput(config, empty_checkpoint(), {}, {})  # type: ignore[arg-type]
    return stored


@pytest.mark.parametrize(
    "value", [("a", "b"), {"k": ("x", 1), "n": [1, 2]}, b"bytes", 3.5, None, "plain text"]
)
async def test_saver_keeps_secret_free_values_and_their_types(
    real_runtime: MemoryRuntime, value: Any
) -> None:
    saver = JarvisMemSaver.from_runtime(real_runtime)
    config = await _checkpoint(saver, "t-types")
    await saver.aput_writes(config, [("v", value)], "task-1")  # type: ignore[arg-type]
    found = await saver.aget_tuple(config)  # type: ignore[arg-type]
    # Exactly what the serializer alone gives back (msgpack turns tuples into lists).
    expected = saver.serde.loads_typed(saver.serde.dumps_typed(value))
    assert found is not None and found.pending_writes == [("task-1", "v", expected)]
