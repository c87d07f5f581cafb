"""Fixtures of the outbox tests: a data-file path and outboxes closed after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from jarvismem.backends.outbox.store import Outbox

OpenOutbox = Callable[..., Outbox]


@pytest.fixture
def outbox_path(tmp_path: Path) -> Path:
    """The data file of the test's outbox (its folder exists, the file does not)."""
    return tmp_path / "o.jsonl"


@pytest.fixture
async def open_outbox(outbox_path: Path) -> AsyncIterator[OpenOutbox]:
    """Open outboxes (on ``outbox_path`` unless ``path=`` is given); all closed afterwards."""
    opened: list[Outbox] = []

    def open_(path: Path | None = None, **kwargs: object) -> Outbox:
        opened.append(Outbox(path or outbox_path, **kwargs))  # type: ignore[arg-type]
        return opened[-1]

    yield open_
    for box in opened:
        await box.close()


def append_raw(path: Path, data: bytes) -> None:
    """Append bytes to a data file behind the outbox's back (a peer, a torn write)."""
    with open(path, "ab") as fh:
        fh.write(data)


async def pending_ids(outbox: Outbox) -> list[int]:
    """The ``i`` field of every pending record, oldest first."""
    return [rec["i"] for _, rec in await outbox.peek(10_000)]


def file_size(path: Path) -> int:
    """Size of a data file in bytes (0 when it does not exist)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
