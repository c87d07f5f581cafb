"""LangGraph on jarvismem: a graph killed mid-run resumes; it recalls an earlier thread's facts.

1. Thread ``onboarding`` stores facts about a user in the JarvisMemStore.
2. Thread ``trip`` runs a five-node graph (deterministic nodes, no LLM) in a child
   process, which is killed with SIGKILL inside node 4, after node 3 finished.
3. The same graph, given the same thread id and no input, resumes from the last
   checkpoint: nodes 4 and 5 run, 1-3 do not run again; node 4 recalls the
   facts thread ``onboarding`` stored, by a lexical query through the store.

The child runs with ``durability="sync"``: each step's checkpoint is in Redis before
the next step starts (LangGraph's default, ``"async"``, saves in the background and a
kill may lose the newest steps).

Uses ``REDIS_URL`` when set; otherwise the embedded Redis server jarvismem starts in
``.jarvismem/redis`` (a process of its own: it outlives the killed child, and keeps
its data). Needs ``pip install 'jarvismem[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import sys
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from jarvismem import MemoryRuntime
from jarvismem.integrations.langgraph import JarvisMemSaver, JarvisMemStore

KILL_AFTER = 3
USER = ("users", "alice")
TRIP = {"configurable": {"thread_id": "trip"}}


class State(TypedDict):
    log: Annotated[list[str], operator.add]  # each node appends; a re-run would show twice
    recalled: list[str]


def make_node(n: int) -> Any:
    async def node(state: State, runtime: Runtime[Any]) -> dict[str, Any]:
        update: dict[str, Any] = {"log": [f"node {n}"]}
        if n == 4:  # uses what another thread (another day) stored about the user
            assert runtime.store is not None
            hits = await runtime.store.asearch(USER, query="coffee preference")
            update["recalled"] = [hit.value["fact"] for hit in hits]
        if os.environ.get("LG_CHILD") and n == KILL_AFTER + 1:
            print(f"finished node {KILL_AFTER}", flush=True)
            await asyncio.sleep(60)  # the parent kills us here, mid-run
        return update

    return node


def build(saver: JarvisMemSaver, store: JarvisMemStore) -> Any:
    graph = StateGraph(State)
    for n in range(1, 6):
        graph.add_node(f"node{n}", make_node(n))
    graph.add_edge(START, "node1")
    for n in range(1, 5):
        graph.add_edge(f"node{n}", f"node{n + 1}")
    graph.add_edge("node5", END)
    return graph.compile(checkpointer=saver, store=store)


async def child() -> None:
    async with await MemoryRuntime.from_env(require_redis=True) as runtime:
        graph = build(JarvisMemSaver.from_runtime(runtime), JarvisMemStore.from_runtime(runtime))
        await graph.ainvoke({"log": [], "recalled": []}, TRIP, durability="sync")


async def parent() -> int:
    async with await MemoryRuntime.from_env(require_redis=True) as runtime:
        saver = JarvisMemSaver.from_runtime(runtime)
        store = JarvisMemStore.from_runtime(runtime)
        await saver.adelete_thread("trip")  # a fresh run each time
        # Thread "onboarding": facts learnt earlier, in another conversation.
        await store.aput(USER, "drink", {"fact": "prefers oat milk coffee, no sugar"})
        await store.aput(USER, "seat", {"fact": "wants a window seat"})

        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            env={**os.environ, "LG_CHILD": "1"},
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = (await proc.stdout.readline()).decode()
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        print(f"child said {line.strip()!r}; killed it with SIGKILL")

        graph = build(saver, store)
        before = await graph.aget_state(TRIP)
        done = before.values["log"]
        print(f"checkpoint after the kill: {done}, next: {list(before.next)}")
        final = await graph.ainvoke(None, TRIP)  # no input: resume from the checkpoint
        print(f"resumed and ran: {final['log'][len(done) :]}")
        print(f"recalled: {final['recalled']}")
        ok = (
            done == [f"node {n}" for n in range(1, KILL_AFTER + 1)]
            and final["log"] == [f"node {n}" for n in range(1, 6)]
            and any("oat milk" in fact for fact in final["recalled"])
        )
        print("verified" if ok else "VERIFICATION FAILED")
        return 0 if ok else 1


def main() -> int:
    if os.environ.get("LG_CHILD"):
        asyncio.run(child())
        return 0
    return asyncio.run(parent())


if __name__ == "__main__":
    sys.exit(main())
