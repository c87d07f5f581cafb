"""LostReplyProxy against the real Redis: forwards, then loses exactly one reply on demand."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

from jarvismem.keys import KeySpace
from tests.conftest import REAL_REDIS_URL
from tests.harness.netfaults import LostReplyProxy


async def test_forwards_and_loses_one_marked_reply_after_the_command_ran(
    real_redis: Any, keyspace: KeySpace
) -> None:
    parts = urlsplit(REAL_REDIS_URL)
    key = keyspace.ledger("wf-proxy")
    async with LostReplyProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        client = aioredis.Redis(port=proxy.port, retry=None)
        try:
            assert await client.ping()
            proxy.lose_next_reply(b"INCR")
            with pytest.raises(aioredis.ConnectionError):
                await client.execute_command("INCR", key)
            # The command ran although its reply was lost; the marker fired once.
            assert await real_redis.get(key) == b"1" and proxy.lost == 1
            assert await client.execute_command("INCR", key) == 2
            assert proxy.lost == 1
        finally:
            await client.aclose()


async def test_an_unreachable_upstream_closes_the_client() -> None:
    async with LostReplyProxy("127.0.0.1", 1) as proxy:
        client = aioredis.Redis(port=proxy.port, retry=None)
        try:
            with pytest.raises(aioredis.ConnectionError):
                await client.ping()
        finally:
            await client.aclose()


async def test_a_held_proxy_passes_nothing_until_released(
    real_redis: Any, keyspace: KeySpace
) -> None:
    """A partition: the command is sent but never reaches the server while held."""
    parts = urlsplit(REAL_REDIS_URL)
    key = keyspace.ledger("wf-proxy-hold")
    async with LostReplyProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        client = aioredis.Redis(port=proxy.port, retry=None)
        try:
            assert await client.ping()
            proxy.hold()
            pending = asyncio.ensure_future(client.execute_command("INCR", key))
            await asyncio.sleep(0.3)
            assert not pending.done() and await real_redis.get(key) is None
            proxy.release()
            assert await pending == 1
        finally:
            await client.aclose()
