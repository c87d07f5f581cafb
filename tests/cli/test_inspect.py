"""cli/inspect.py in process: argument checks, outbox reasons, and ``tail --follow``'s loop.

The commands end to end (through ``python -m jarvismem``) are in test_cli.py.
"""

from __future__ import annotations

import argparse
import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from jarvismem.cli.inspect import _follow, _outbox_reason, _positive
from jarvismem.keys import KeySpace
from jarvismem.records import encode_entry


class _Lines:
    """Stands in for the CLI's output: collects what ``line`` is given."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def line(self, entry: dict[str, Any], render: Any) -> None:
        assert callable(render)
        self.entries.append(entry)


def test_positive_accepts_zero_and_up() -> None:
    assert _positive("0") == 0 and _positive("12") == 12
    with pytest.raises(argparse.ArgumentTypeError):
        _positive("-1")


def test_outbox_reason_says_what_is_wrong() -> None:
    assert _outbox_reason({"path": "p", "error": "EACCES"}) == "outbox p: unreadable (EACCES)"
    assert _outbox_reason({"path": "p", "pending": 3}) == "outbox p: 3 queued"
    assert (
        _outbox_reason({"path": "p", "pending": 0, "dead_lettered": 2})
        == "outbox p: 0 queued, 2 dead-lettered"
    )


async def test_follow_decodes_new_entries_and_stops_at_count(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    key = keyspace.ledger(workflow_id)
    old = (await real_redis.xadd(key, encode_entry({"n": 0}))).decode()
    out = _Lines()
    follower = asyncio.create_task(
        _follow(SimpleNamespace(out=out), real_redis, key, old, max_wait=10.0, count=2)
    )
    await asyncio.sleep(0.05)
    for n in (1, 2, 3):
        await real_redis.xadd(key, encode_entry({"n": n, "text": f"é{n}"}))
    await asyncio.wait_for(follower, 10)
    assert [(e["n"], e["text"]) for e in out.entries] == [(1, "é1"), (2, "é2")]


async def test_follow_stops_after_max_wait_without_entries(
    real_redis: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    out = _Lines()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await _follow(
        SimpleNamespace(out=out), real_redis, keyspace.ledger(workflow_id), "0-0", 0.2, None
    )
    assert out.entries == [] and loop.time() - started < 2.0
