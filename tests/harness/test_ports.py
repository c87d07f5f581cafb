"""Ports for test servers: one block per xdist worker, handed out in turn, held ones skipped."""

from __future__ import annotations

import random
import socket

import pytest

from tests.harness import ports
from tests.harness.ports import PortPicker, free_port, worker_block, worker_index


@pytest.mark.parametrize(
    ("value", "index"), [("gw0", 0), ("gw12", 12), ("", None), ("master", None), ("gw", None)]
)
def test_the_worker_number_comes_from_xdist_s_variable(value: str, index: int | None) -> None:
    assert worker_index({"PYTEST_XDIST_WORKER": value}) == index
    assert worker_index({}) is None


def test_workers_blocks_are_disjoint_and_below_the_ephemeral_range() -> None:
    blocks = [worker_block(i, low=32768) for i in range(8)]
    assert all(b is not None and b.stop <= 32768 for b in blocks)
    taken = [p for b in blocks if b is not None for p in b]
    assert len(taken) == len(set(taken))
    assert min(taken) > 10002  # clear of Redis, its cluster nodes and Azurite


def test_a_block_that_would_reach_the_ephemeral_range_is_refused() -> None:
    assert worker_block(100, low=32768) is None


def test_the_picker_hands_out_every_port_of_its_block_before_any_twice() -> None:
    block = range(29000, 29010)
    picker = PortPicker(block, random.Random(3))
    first_round = [picker.pick() for _ in block]
    assert sorted(first_round) == list(block)
    assert picker.pick() == first_round[0]


def _held_port_before_a_free_one() -> socket.socket:
    """A socket bound to a port whose next port is free (tried until one is)."""
    for _ in range(50):
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        if ports.port_is_free(holder.getsockname()[1] + 1):
            return holder
        holder.close()
    raise AssertionError("no held port followed by a free one")


def test_the_picker_skips_a_port_something_holds() -> None:
    with _held_port_before_a_free_one() as holder:
        held = holder.getsockname()[1]
        picker = PortPicker(range(held, held + 2), random.Random(0))
        assert {picker.pick(), picker.pick()} == {held + 1}


def test_a_block_with_every_port_held_is_an_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        held = holder.getsockname()[1]
        with pytest.raises(OSError, match="no free loopback port"):
            PortPicker(range(held, held + 1)).pick()


def test_under_a_worker_free_ports_come_from_its_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    monkeypatch.setattr(ports, "_pickers", {})
    block = worker_block(5)
    assert block is not None
    picked = [free_port() for _ in range(5)]
    assert all(p in block for p in picked)
    assert len(set(picked)) == 5


def test_outside_a_worker_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    port = free_port()
    assert port > 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_under_a_worker_cluster_nodes_take_ports_of_its_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node of another worker's cluster on a killed node's port would join that cluster."""
    from tests.harness.ha import free_cluster_port

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    monkeypatch.setattr(ports, "_pickers", {})
    block = worker_block(2)
    assert block is not None
    assert all(free_cluster_port() in block for _ in range(5))


def test_outside_a_worker_there_is_no_worker_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert ports.worker_port() is None
