"""Hostile ids at every public method of the LangGraph saver and store.

Every id a caller hands in (thread id, checkpoint namespace and id, task id, run
id, channel names, store namespace labels and keys) is checked once, at the
edge, by :func:`jarvismem.keys.lg_text`: a lone surrogate, a NUL, an over-long
or a path-like id raises :class:`InvalidIdError` and nothing is written (the
tenant's namespace is SCANned after each call). Real Redis: what matters is what
the server holds afterwards.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from jarvismem.errors import InvalidIdError
from jarvismem.integrations.langgraph import JarvisMemSaver, JarvisMemStore
from jarvismem.keys import MAX_LG_TOKEN_LENGTH, KeySpace

pytestmark = pytest.mark.integration

HOSTILE = {
    "lone-surrogate": "t\ud800",
    "nul": "t\x00x",
    "too-long": "t" * (MAX_LG_TOKEN_LENGTH + 1),
    "path-like": "../../etc/passwd",
}
GOOD = "thread-1"


async def _keys(redis: Any, keyspace: KeySpace) -> list[bytes]:
    return [k async for k in redis.scan_iter(match=f"jm:{keyspace.namespace}:*", count=1000)]


def _checkpoint(checkpoint_id: str = "1ef-0001") -> Any:
    cp = empty_checkpoint()
    cp["id"] = checkpoint_id
    cp["channel_values"] = {"x": "v"}
    cp["channel_versions"] = {"x": "1"}
    return cp


def _config(thread: str = GOOD, ns: str = "", checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _saver_calls(bad: str) -> dict[str, Callable[[JarvisMemSaver], Awaitable[Any]]]:
    """One call per (public method, id position) with ``bad`` in that position."""

    async def listed(saver: JarvisMemSaver, config: Any, **kw: Any) -> list[Any]:
        return [t async for t in saver.alist(config, **kw)]

    return {
        "aput.thread_id": lambda s: s.aput(_config(bad), _checkpoint(), {}, {"x": "1"}),
        "aput.checkpoint_ns": lambda s: s.aput(_config(ns=bad), _checkpoint(), {}, {"x": "1"}),
        "aput.checkpoint_id": lambda s: s.aput(_config(), _checkpoint(bad), {}, {"x": "1"}),
        "aput.parent_id": lambda s: s.aput(
            _config(checkpoint_id=bad), _checkpoint(), {}, {"x": "1"}
        ),
        "aput.run_id": lambda s: s.aput(_config(), _checkpoint(), {"run_id": bad}, {"x": "1"}),
        "aput_writes.thread_id": lambda s: s.aput_writes(
            _config(bad, checkpoint_id="c1"), [("x", 1)], "task-1"
        ),
        "aput_writes.checkpoint_ns": lambda s: s.aput_writes(
            _config(ns=bad, checkpoint_id="c1"), [("x", 1)], "task-1"
        ),
        "aput_writes.checkpoint_id": lambda s: s.aput_writes(
            _config(checkpoint_id=bad), [("x", 1)], "task-1"
        ),
        "aput_writes.task_id": lambda s: s.aput_writes(
            _config(checkpoint_id="c1"), [("x", 1)], bad
        ),
        "aput_writes.task_path": lambda s: s.aput_writes(
            _config(checkpoint_id="c1"), [("x", 1)], "task-1", bad
        ),
        "aput_writes.channel": lambda s: s.aput_writes(
            _config(checkpoint_id="c1"), [(bad, 1)], "task-1"
        ),
        "aget_tuple.thread_id": lambda s: s.aget_tuple(_config(bad)),
        "aget_tuple.checkpoint_ns": lambda s: s.aget_tuple(_config(ns=bad)),
        "aget_tuple.checkpoint_id": lambda s: s.aget_tuple(_config(checkpoint_id=bad)),
        "alist.thread_id": lambda s: listed(s, _config(bad)),
        "alist.checkpoint_ns": lambda s: listed(s, _config(ns=bad, checkpoint_id="c1")),
        "alist.checkpoint_id": lambda s: listed(s, _config(checkpoint_id=bad)),
        "alist.before": lambda s: listed(s, _config(), before=_config(checkpoint_id=bad)),
        "adelete_thread": lambda s: s.adelete_thread(bad),
        "adelete_for_runs": lambda s: s.adelete_for_runs([bad]),
        "acopy_thread.source": lambda s: s.acopy_thread(bad, GOOD),
        "acopy_thread.target": lambda s: s.acopy_thread(GOOD, bad),
        "aprune": lambda s: s.aprune([bad]),
        "aprune.delete": lambda s: s.aprune([bad], strategy="delete"),
    }


def _store_calls(bad: str) -> dict[str, Callable[[JarvisMemStore], Awaitable[Any]]]:
    return {
        "aput.namespace": lambda s: s.aput(("users", bad), "k", {"v": "x"}),
        "aput.key": lambda s: s.aput(("users",), bad, {"v": "x"}),
        "aget.namespace": lambda s: s.aget(("users", bad), "k"),
        "aget.key": lambda s: s.aget(("users",), bad),
        "adelete.namespace": lambda s: s.adelete(("users", bad), "k"),
        "adelete.key": lambda s: s.adelete(("users",), bad),
        "asearch.prefix": lambda s: s.asearch(("users", bad)),
        "asearch.prefix+query": lambda s: s.asearch(("users", bad), query="tea"),
        "alist_namespaces.prefix": lambda s: s.alist_namespaces(prefix=("users", bad)),
        "alist_namespaces.suffix": lambda s: s.alist_namespaces(suffix=(bad,)),
        # A batch is refused whole: its good put is not written either.
        "abatch": lambda s: s.abatch(
            [
                PutOp(("users",), "good", {"v": "x"}),
                GetOp(("users",), bad),
                SearchOp(("users",)),
                ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("users",)),)),
            ]
        ),
    }


SAVER_CALLS = sorted(_saver_calls("x"))
STORE_CALLS = sorted(_store_calls("x"))


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("call", SAVER_CALLS)
async def test_the_saver_refuses_a_hostile_id_and_writes_nothing(
    real_redis: Any, keyspace: KeySpace, call: str, kind: str
) -> None:
    if (call, kind) == ("aput.run_id", "nul"):
        pytest.skip("LangGraph strips NUL from metadata strings before a saver sees them")
    saver = JarvisMemSaver(real_redis, keyspace)
    with pytest.raises(InvalidIdError):
        await _saver_calls(HOSTILE[kind])[call](saver)
    assert await _keys(real_redis, keyspace) == []


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("call", STORE_CALLS)
async def test_the_store_refuses_a_hostile_id_and_writes_nothing(
    real_redis: Any, keyspace: KeySpace, call: str, kind: str
) -> None:
    expected: type[Exception] = InvalidIdError
    label = ".namespace" in call or ".prefix" in call or "suffix" in call
    if label and kind in ("path-like", "nul"):
        # LangGraph itself refuses '.' and NUL in a namespace label, before the store runs.
        expected = InvalidNamespaceError
    store = JarvisMemStore(real_redis, keyspace)
    with pytest.raises(expected):
        await _store_calls(HOSTILE[kind])[call](store)
    assert await _keys(real_redis, keyspace) == []


async def test_ordinary_langgraph_ids_still_work(real_redis: Any, keyspace: KeySpace) -> None:
    """The rule refuses only the hostile: uuids, subgraph namespaces and file-like
    store keys pass, and a non-ASCII id round-trips."""
    saver = JarvisMemSaver(real_redis, keyspace)
    thread = "ü-thread/ä 1"
    ns = "parent:5f1e|child:9a2b"
    await saver.aput(_config(thread, ns), _checkpoint("1ef-0002"), {}, {"x": "1"})
    await saver.aput_writes(_config(thread, ns, "1ef-0002"), [("x", 2)], "task:é", "~a, b")
    found = await saver.aget_tuple(_config(thread, ns))
    assert found is not None and found.config["configurable"]["checkpoint_id"] == "1ef-0002"
    assert [w[0] for w in found.pending_writes or []] == ["task:é"]
    store = JarvisMemStore(real_redis, keyspace)
    await store.aput(("users", "ü"), "/memories/notes.txt", {"v": "green tea"})
    item = await store.aget(("users", "ü"), "/memories/notes.txt")
    assert item is not None and item.value == {"v": "green tea"}
