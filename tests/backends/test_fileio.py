"""jarvismem.backends.fileio: whole-buffer writes through a raw descriptor."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jarvismem.backends import fileio
from jarvismem.backends.fileio import write_all


def test_writes_every_byte(tmp_path: Path) -> None:
    target = tmp_path / "f"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        write_all(fd, b"abc")
        write_all(fd, b"")
        write_all(fd, b"def\n")
    finally:
        os.close(fd)
    assert target.read_bytes() == b"abcdef\n"


def test_loops_on_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel may accept fewer bytes than asked (a signal, a full pipe): the
    # rest must still be written, in order.
    real_write = os.write
    calls: list[int] = []

    def short_write(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:3]))

    monkeypatch.setattr(fileio.os, "write", short_write)
    payload = bytes(range(256)) * 4
    target = tmp_path / "f"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        write_all(fd, payload)
    finally:
        os.close(fd)
    assert target.read_bytes() == payload
    assert len(calls) == -(-len(payload) // 3)
