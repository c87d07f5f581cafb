"""LoopLocks: one asyncio lock per key and event loop, dropped when unused."""

from __future__ import annotations

import asyncio
import gc

from jarvismem.tiers.athena.locks import LoopLocks


async def test_one_key_gives_one_lock_and_keys_do_not_share() -> None:
    locks: LoopLocks[str] = LoopLocks()
    first = locks.get("a")
    assert locks.get("a") is first
    assert locks.get("b") is not first


async def test_the_lock_excludes_a_second_holder() -> None:
    locks: LoopLocks[str] = LoopLocks()
    order: list[str] = []

    async def hold(name: str) -> None:
        async with locks.get("k"):
            order.append(f"{name}+")
            await asyncio.sleep(0.01)
            order.append(f"{name}-")

    await asyncio.gather(hold("x"), hold("y"))
    assert order in (["x+", "x-", "y+", "y-"], ["y+", "y-", "x+", "x-"])


async def test_a_lock_nobody_holds_is_dropped() -> None:
    locks: LoopLocks[str] = LoopLocks()
    held = locks.get("k")
    registry = locks._by_loop[asyncio.get_running_loop()]
    assert len(registry) == 1
    del held
    gc.collect()
    assert len(registry) == 0


def test_each_event_loop_has_its_own_lock() -> None:
    locks: LoopLocks[str] = LoopLocks()

    async def lock_of_this_loop() -> asyncio.Lock:
        return locks.get("k")

    loop_a, loop_b = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        a = loop_a.run_until_complete(lock_of_this_loop())
        b = loop_b.run_until_complete(lock_of_this_loop())
        assert a is not b
        assert loop_a.run_until_complete(lock_of_this_loop()) is a
    finally:
        loop_a.close()
        loop_b.close()
