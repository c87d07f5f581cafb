"""Athena (tier 4): record events, read the memory context, search.

    ATHENA_URL=http://127.0.0.1:8080      # e.g. python -m jarvismem.testing.fake_athena --port 8080
    ATHENA_API_KEY=...                    # if your server wants one

Writes go through a durable outbox; reads return None/[] when Athena is down.
"""

import asyncio

from jarvismem.runtime import MemoryRuntime


async def main() -> None:
    async with await MemoryRuntime.from_env() as runtime:
        athena = await runtime.athena_memory("researcher")
        if athena is None:
            raise SystemExit("set ATHENA_URL to run this example")
        await athena.on_task_assigned("t1", "summarise the tide tables")
        await athena.record_thought("the tide tables cover twelve harbours")
        await athena.record_action("open('tides.csv')")
        await athena.record_observation("high tide at Brest is 6.1 m")
        await athena.flush(timeout=5)
        context = await athena.get_memory_context(limit=10)
        assert context is not None, "Athena did not answer"
        print("session:", context["session_id"])
        for event in context["short_term"]:
            print(f"  [{event['type']}] {event['content']}")
        hits = await athena.search("tide height", limit=3)
        print(f"search hits: {len(hits)}")


if __name__ == "__main__":
    asyncio.run(main())
