"""The HA test bed: slots, CLUSTER NODES parsing, RESP, and the two topologies' faults."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import require_backend
from tests.harness.ha import (
    ClusterBed,
    LoadResult,
    ReplyError,
    SentinelBed,
    SentinelProcess,
    _replay_lag,
    _replay_resume,
    _workflow_ids,
    info,
    key_slot,
    main,
    parse_cluster_nodes,
    resp,
    table_header,
    table_row,
    workflow_slot,
)
from tests.harness.redis_server import RedisServerProcess


def test_key_slot_follows_the_cluster_spec() -> None:
    # Values of the Redis Cluster specification (CRC16/XMODEM mod 16384).
    assert key_slot("123456789") == 0x31C3 % 16384
    assert key_slot("foo") == 12182
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")
    assert key_slot("{}foo") == key_slot("{}foo")  # an empty tag hashes the whole key
    assert key_slot("{}foo") != key_slot("foo")


def test_a_workflow_slot_is_the_slot_of_its_keys() -> None:
    assert workflow_slot("wf-7") == key_slot("jm:ns:{wf-7}:ledger") == key_slot("jm:x:{wf-7}:ltm")


NODES = """\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 [5461->-67ed]
6ec2 127.0.0.1:30003@40003 master,fail - 1426238316232 0 3 connected 10923 10924-16383
"""


def test_cluster_nodes_are_parsed_with_roles_slots_and_failures() -> None:
    nodes = {n.id: n for n in parse_cluster_nodes(NODES)}
    assert nodes["07c3"].master_id == "e7d1" and not nodes["07c3"].is_primary
    assert nodes["e7d1"].slots == ((0, 5460),)  # a slot being migrated is left out
    assert nodes["e7d1"].serves(0) and not nodes["e7d1"].serves(5461)
    assert nodes["67ed"].slot_count == 5462 and nodes["67ed"].port == 30002
    assert nodes["6ec2"].failed and not nodes["6ec2"].is_primary
    assert nodes["6ec2"].slots == ((10923, 10923), (10924, 16383))


def test_workflow_ids_put_half_inside_what_is_wanted() -> None:
    ids = _workflow_ids(5, lambda wf: workflow_slot(wf) < 8192)
    assert [workflow_slot(wf) < 8192 for wf in ids] == [True, True, True, False, False]
    assert _workflow_ids(3) == ["wf0", "wf1", "wf2"]


def test_replay_resume_is_the_first_replay_after_the_fault_measured_from_the_promotion() -> None:
    results = [
        LoadResult(degraded=[[10.0, 14.0]], replay_starts=[5.0, 12.4]),
        LoadResult(degraded=[[10.5, 13.0]], replay_starts=[12.2]),
    ]
    assert _replay_resume(12.0, results, fault_at=10.0) == pytest.approx(0.2)
    # Replay that moved before the bed saw the promotion complete: resumed at once.
    assert _replay_resume(12.3, results, fault_at=10.0) == 0.0
    assert _replay_resume(20.0, results) is None  # nothing was queued then


def test_replay_lag_is_the_time_a_promotion_found_records_queued() -> None:
    results = [LoadResult(degraded=[[10.0, 12.5]]), LoadResult(degraded=[[11.0, 13.0], [20, 21]])]
    assert _replay_lag(12.0, results) == 1.0
    assert _replay_lag(15.0, results) == 0.0


def test_a_sentinel_config_names_the_service_and_its_timeouts(tmp_path: Path) -> None:
    proc = SentinelProcess(tmp_path, primary_port=1234, down_after_ms=700, port=2345)
    words = proc.command()
    assert words[-1] == "--sentinel"
    text = proc.config.read_text()
    assert "sentinel monitor jm-ha 127.0.0.1 1234 2" in text
    assert "sentinel down-after-milliseconds jm-ha 700" in text and "port 2345" in text
    proc.config.write_text("what the sentinel rewrote\n")
    proc.command()  # a restart keeps what the sentinel learnt
    assert proc.config.read_text() == "what the sentinel rewrote\n"


# --- real servers ------------------------------------------------------------------------------


@pytest.fixture
def binaries() -> None:
    for binary in ("redis-server", "redis-cli"):
        require_backend(shutil.which(binary) is not None, f"the {binary} binary")


@pytest.mark.integration
def test_resp_speaks_to_a_real_server(tmp_path: Path, binaries: None) -> None:
    with RedisServerProcess(tmp_path, persistence=False) as server:
        assert resp(server.port, "SET", "k", "v") == "OK"
        assert resp(server.port, "GET", "k") == "v"
        assert resp(server.port, "GET", "absent") is None
        assert resp(server.port, "RPUSH", "l", "a", "b") == 2
        assert resp(server.port, "LRANGE", "l", 0, -1) == ["a", "b"]
        assert info(server.port)["role"] == "master"
        with pytest.raises(ReplyError, match="unknown command"):
            resp(server.port, "NO-SUCH-COMMAND")


@pytest.mark.integration
def test_a_cluster_bed_promotes_a_replica_of_a_killed_primary(
    tmp_path: Path, binaries: None
) -> None:
    with ClusterBed(tmp_path) as bed:
        primaries = [n for n in bed.nodes() if n.is_primary]
        assert len(primaries) == 3 and len(bed.nodes()) == 6
        assert all(len(bed.replicas_of(p.id)) == 1 for p in primaries)
        slot = workflow_slot("wf0")
        old = bed.primary_for_slot(slot)
        assert old.serves(slot)
        replica = bed.replicas_of(old.id)[0]
        bed.kill(old.port)
        assert bed.wait_promoted(slot, old.port) == replica.port
        bed.restart(old.port)
        bed.wait_replica(old.port)  # the old primary is back, as a replica


@pytest.mark.integration
def test_a_sentinel_bed_promotes_the_replica_of_a_killed_primary(
    tmp_path: Path, binaries: None
) -> None:
    with SentinelBed(tmp_path) as bed:
        old = bed.primary_port()
        (replica,) = bed.replica_ports()
        assert bed.url.startswith("redis+sentinel://") and bed.url.endswith("/jm-ha")
        bed.kill(old)
        assert bed.wait_promoted(old) == replica
        bed.restart(old)
        bed.wait_replica(old)
        assert bed.primary_port() == replica


def test_a_soak_row_renders_in_the_table_columns() -> None:
    row = {
        "topology": "cluster",
        "durability": "primary",
        "fault": "kill x3",
        "acknowledged": 12345,
        "lost": 0,
        "duplicated": 0,
        "raised": 0,
        "longest_log_turn_s": 1.1,
        "longest_elsewhere_s": 1.0,
        "promotion_s": 2.4,
        "replay_resume_s": 0.1,
        "replay_lag_s": 0.3,
    }
    assert table_row(row) == (
        "| cluster | primary | kill x3 | 12,345 | 0 | 0 | 0 | 1.1 | 1.0 | 2.4 | 0.1 | 0.3 |"
    )
    assert table_header().count("|---") == len(row)


def test_the_command_line_refuses_what_it_does_not_know() -> None:
    assert main(["bogus"]) == 2
