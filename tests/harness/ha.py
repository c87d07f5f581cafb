"""A high-availability test bed: Redis Cluster and Sentinel on loopback, faults, agents.

Real ``redis-server`` processes in a private directory on free ports:

* :class:`ClusterBed`: N primaries with R replicas each (``--cluster-replicas``),
  AOF on, a short ``cluster-node-timeout`` so a dead primary is replaced in
  about a second or two;
* :class:`SentinelBed`: a primary, its replica and three sentinels (quorum 2).

Faults: SIGKILL of a primary (:meth:`kill`), SIGSTOP past the failure timeout
then SIGCONT (:meth:`pause` / :meth:`resume`: a partition as seen from
everyone else), a replica held behind its primary before the kill
(:meth:`lag_replica`), and ``redis-cli --cluster reshard`` under load.

Agents: :func:`run_scenario` starts agent processes (``python -m
tests.harness.ha agents SPEC``) that call ``log_turn`` through a runtime
built from settings (``MemoryRuntime.from_env``) until told to stop, injects a
fault, then drains every outbox and counts acknowledged turns against the
ledgers: *lost* (acknowledged, absent) and *duplicated* (a turn id present
twice). ``tests/system/test_ha.py`` runs small scenarios; ``scripts/soak-ha``
runs big ones and prints the table of docs/reliability.md.

It asks servers about their state over bare redis-py connections (raw replies)
and drives ``redis-cli`` for ``--cluster create`` and ``--cluster reshard``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from redis.backoff import NoBackoff
from redis.connection import Connection
from redis.crc import key_slot as _key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from jarvismem.backends.outbox import Outbox
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings, load_settings
from tests.harness.ports import port_is_free, worker_port
from tests.harness.redis_server import RedisServerProcess, free_port

SLOTS = 16384
SENTINEL_SERVICE = "jm-ha"
"""The service name the sentinels of a :class:`SentinelBed` monitor."""

Topology = Literal["cluster", "sentinel"]
Durability = Literal["primary", "replicated"]
FAULTS: dict[str, tuple[str, ...]] = {
    "cluster": ("kill", "kill_lagging", "partition", "reshard"),
    "sentinel": ("kill", "kill_lagging", "partition"),
}
"""The faults :func:`run_scenario` can inject, per topology."""


# --- one command at a time, for asking servers about their state -----------------------------

ReplyError = ResponseError
"""A server answered with an error reply (``-ERR ...``)."""


def resp(port: int, *args: str | int, timeout: float = 2.0) -> Any:
    """Send one command to ``127.0.0.1:port`` and return its raw decoded reply.

    A bare connection, not a client: no response callbacks (``INFO`` stays text),
    no retries. A ``-`` reply raises :class:`ReplyError`; a refused or silent
    server raises ``OSError`` (``TimeoutError`` included), as a socket would.
    """
    conn = Connection(
        host="127.0.0.1",
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        conn.send_command(*args)
        return conn.read_response()
    except RedisTimeoutError as exc:
        raise TimeoutError(str(exc)) from exc
    except RedisConnectionError as exc:
        raise ConnectionError(str(exc)) from exc
    finally:
        conn.disconnect()


def answers(port: int, timeout: float = 0.5) -> bool:
    """Whether the server on ``port`` answers PING now."""
    try:
        return bool(resp(port, "PING", timeout=timeout) == "PONG")
    except (OSError, ReplyError):
        return False


def info(port: int, section: str = "replication", timeout: float = 2.0) -> dict[str, str]:
    """``INFO <section>`` as a dict."""
    text = str(resp(port, "INFO", section, timeout=timeout))
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {k: v for k, v in pairs}


def wait_until(check: Callable[[], bool], what: str, timeout: float) -> float:
    """Poll ``check`` until true; return the seconds it took. Raises TimeoutError."""
    started = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - started
        except (OSError, ReplyError, LookupError):
            pass  # a node down or mid-change: ask again
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what} did not happen within {timeout:g}s")
        time.sleep(0.02)


CLUSTER_PORTS = range(20000, 22768)
"""Where :func:`free_cluster_port` looks: a node's cluster bus listens 10000 higher
(30000-32767), below Linux's ephemeral range, so outgoing connections never hold it."""


def free_cluster_port(taken: set[int] | None = None) -> int:
    """A port free a moment ago whose cluster bus port (+10000) was free too.

    Under pytest-xdist, from the worker's own block (:mod:`tests.harness.ports`):
    a node killed by one worker's test is still gossiped to by its cluster's other
    nodes, and a node of another worker's cluster started on its port would be
    merged into that cluster.
    """
    taken = taken or set()
    rng = random.Random()
    for _ in range(200):
        port = worker_port() or rng.choice(CLUSTER_PORTS)
        if port in taken or not port_is_free(port) or not port_is_free(port + 10000):
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


# --- hash slots ------------------------------------------------------------------------------


def key_slot(key: str) -> int:
    """The Redis Cluster hash slot of ``key`` (its hash tag's CRC16, mod 16384)."""
    return int(_key_slot(key.encode()))


def workflow_slot(workflow_id: str) -> int:
    """The slot of every key of a workflow (they share the hash tag ``{workflow_id}``)."""
    return key_slot("{" + workflow_id + "}")


FAST_SYNC = ("--repl-diskless-sync-delay", "0")
"""A replica's full sync starts at once: the default waits 5 s for more replicas to
share the transfer, which would keep a returning node out of service that long."""


# --- Redis Cluster ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``."""

    id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: tuple[tuple[int, int], ...]

    @property
    def is_primary(self) -> bool:
        return "master" in self.flags and not self.failed

    @property
    def failed(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "noaddr"})

    def serves(self, slot: int) -> bool:
        return any(lo <= slot <= hi for lo, hi in self.slots)

    @property
    def slot_count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.slots)


def parse_cluster_nodes(text: str) -> list[ClusterNode]:
    """Parse ``CLUSTER NODES`` (slots being imported/migrated, ``[...]``, are left out)."""
    nodes = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        address = parts[1].split("@", 1)[0]
        slots: list[tuple[int, int]] = []
        for word in parts[8:]:
            if word.startswith("["):
                continue
            lo, _, hi = word.partition("-")
            slots.append((int(lo), int(hi or lo)))
        nodes.append(
            ClusterNode(
                id=parts[0],
                port=int(address.rsplit(":", 1)[1]) if ":" in address else 0,
                flags=frozenset(parts[2].split(",")),
                master_id=None if parts[3] == "-" else parts[3],
                slots=tuple(slots),
            )
        )
    return nodes


class ClusterBed:
    """A Redis Cluster of our own: ``masters`` primaries with ``replicas`` replicas each.

    ``directory``: one sub-folder per node (AOF, ``nodes.conf``, log);
    ``node_timeout_ms``: ``cluster-node-timeout`` (how long before a silent
    primary is failed over); ``full_coverage``: ``cluster-require-full-coverage``
    (``yes`` stops the whole cluster while any slot is unserved); ``ports``: fixed
    ports (free ones when None).
    """

    def __init__(
        self,
        directory: Path,
        *,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
        full_coverage: bool = True,
        appendfsync: str = "always",
        ports: list[int] | None = None,
    ) -> None:
        if masters < 3:
            raise ValueError("a Redis Cluster needs at least 3 primaries")
        count = masters * (1 + replicas)
        if ports is not None and len(ports) != count:
            raise ValueError(f"{count} ports needed, {len(ports)} given")
        self.directory = Path(directory)
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.full_coverage = full_coverage
        if ports is None:
            ports = []
            while len(ports) < count:
                ports.append(free_cluster_port(set(ports)))
        self.servers = [
            RedisServerProcess(
                self.directory / f"node{i}",
                port=ports[i],
                appendfsync=appendfsync,
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(node_timeout_ms),
                    "--cluster-require-full-coverage",
                    "yes" if full_coverage else "no",
                    *FAST_SYNC,
                    # A replica restarted after its primary died may still be
                    # promoted (the default refuses one whose link has been down
                    # long, which a restart counts as forever).
                    "--cluster-replica-validity-factor",
                    "0",
                ],
            )
            for i in range(count)
        ]
        self.paused: set[int] = set()

    # lifecycle

    def start(self, timeout: float = 60.0) -> ClusterBed:
        """Start every node, create the cluster, wait until it is whole and replicated."""
        for server in self.servers:
            server.start()
        addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
        run = subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses,
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if run.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {run.stdout[-500:]}")
        # Right after `--cluster create` the node asked may not have heard yet that
        # the others replicate (all show as masters, some with no slots), which
        # wait_healthy's slot count does not see: first wait until every replica is
        # known, then until the cluster is whole with every replica's link up.
        wanted = self.masters * self.replicas
        wait_until(
            lambda: sum(n.master_id is not None for n in self.nodes()) >= wanted,
            f"{wanted} replicas known to the cluster",
            timeout,
        )
        self.wait_healthy(timeout)
        return self

    def stop(self) -> None:
        """SIGKILL every node (the directory stays; the caller owns it)."""
        for server in self.servers:
            server.kill()
        self.paused.clear()

    def __enter__(self) -> ClusterBed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # state

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    def server(self, port: int) -> RedisServerProcess:
        for candidate in self.servers:
            if candidate.port == port:
                return candidate
        raise KeyError(f"no node on port {port}")

    def live_ports(self) -> list[int]:
        """Ports of nodes running and not paused."""
        return [s.port for s in self.servers if s.running and s.port not in self.paused]

    def url(self, avoid: tuple[int, ...] = ()) -> str:
        """``redis://`` URL of a live node (not one of ``avoid``): the client's seed node."""
        port = next(p for p in self.live_ports() if p not in avoid)
        return f"redis://127.0.0.1:{port}/0"

    def nodes(self, via: int | None = None) -> list[ClusterNode]:
        """The cluster as node ``via`` (a live node when None) sees it."""
        ports = [via] if via is not None else self.live_ports()
        last: Exception | None = None
        for port in ports:
            try:
                return parse_cluster_nodes(str(resp(port, "CLUSTER", "NODES")))
            except (OSError, ReplyError) as exc:
                last = exc
        raise ConnectionError(f"no cluster node answered CLUSTER NODES: {last}")

    def primary_for_slot(self, slot: int, via: int | None = None) -> ClusterNode:
        for node in self.nodes(via):
            if node.is_primary and node.serves(slot):
                return node
        raise LookupError(f"no primary serves slot {slot}")

    def primary_for_workflow(self, workflow_id: str) -> ClusterNode:
        return self.primary_for_slot(workflow_slot(workflow_id))

    def replicas_of(self, primary_id: str) -> list[ClusterNode]:
        return [n for n in self.nodes() if n.master_id == primary_id and not n.failed]

    def state_ok(self, port: int) -> bool:
        return info_cluster(port).get("cluster_state") == "ok"

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Every live node says ``cluster_state:ok`` and every replica's link is up."""

        def healthy() -> bool:
            for port in self.live_ports():
                if not self.state_ok(port):
                    return False
            nodes = self.nodes()
            primaries = [n for n in nodes if n.is_primary and n.slots]
            if sum(p.slot_count for p in primaries) != SLOTS:
                return False
            for node in nodes:
                if node.master_id is not None and node.port in self.live_ports():
                    if info(node.port).get("master_link_status") != "up":
                        return False
            return True

        wait_until(healthy, "the cluster becoming whole", timeout)

    # faults

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port`` (no shutdown save, as a crash)."""
        self.paused.discard(port)
        self.server(port).kill()

    def restart(self, port: int) -> None:
        """Start a killed node again from its directory (it rejoins the cluster)."""
        self.server(port).start()

    def pause(self, port: int) -> None:
        """SIGSTOP: the node's port stays open and nothing answers (a partition)."""
        self.server(port).pause()
        self.paused.add(port)

    def resume(self, port: int) -> None:
        """SIGCONT after :meth:`pause`."""
        self.server(port).resume()
        self.paused.discard(port)

    def wait_promoted(self, slot: int, old_port: int, timeout: float = 30.0) -> int:
        """Wait until a node other than ``old_port`` serves ``slot`` as primary and every
        live node reports ``cluster_state:ok``; returns the new primary's port."""
        found: list[int] = []

        def promoted() -> bool:
            node = self.primary_for_slot(slot)
            if node.port == old_port or node.port not in self.live_ports():
                return False
            if info(node.port).get("role") != "master":
                return False
            if not all(self.state_ok(p) for p in self.live_ports()):
                return False
            found[:] = [node.port]
            return True

        wait_until(promoted, f"promotion of a replica for slot {slot}", timeout)
        return found[0]

    def wait_replica(self, port: int, timeout: float = 30.0) -> None:
        """Wait until the node on ``port`` is a replica with its link up (after a rejoin)."""

        def replica() -> bool:
            state = info(port)
            return state.get("role") == "slave" and state.get("master_link_status") == "up"

        wait_until(replica, f"node {port} rejoining as a replica", timeout)

    def reshard(self, source: ClusterNode, target: ClusterNode, slots: int) -> list[int]:
        """``redis-cli --cluster reshard``: move ``slots`` slots (keys and all) from
        ``source`` to ``target``; returns the slots that moved."""
        before = set(_expand(source.slots))
        run = subprocess.run(
            ["redis-cli", "--cluster", "reshard", f"127.0.0.1:{target.port}",
             "--cluster-from", source.id, "--cluster-to", target.id,
             "--cluster-slots", str(slots), "--cluster-yes"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if run.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster reshard failed: {run.stdout[-800:]}")
        after = {n.id: n for n in self.nodes(via=target.port)}
        moved = sorted(before - set(_expand(after[source.id].slots)))
        return moved


def info_cluster(port: int) -> dict[str, str]:
    """``CLUSTER INFO`` of a node, as a dict."""
    text = str(resp(port, "CLUSTER", "INFO"))
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {k: v.strip() for k, v in pairs}


def _expand(ranges: tuple[tuple[int, int], ...]) -> Iterator[int]:
    for lo, hi in ranges:
        yield from range(lo, hi + 1)


def slots_taken_first(node: ClusterNode, count: int) -> list[int]:
    """The ``count`` slots ``redis-cli --cluster reshard`` takes first from a single
    source: its lowest ones."""
    return sorted(_expand(node.slots))[:count]


# --- Sentinel --------------------------------------------------------------------------------


class SentinelProcess(RedisServerProcess):
    """A ``redis-server --sentinel`` of our own, watching ``service`` at ``primary_port``.

    The config file is written once: a sentinel rewrites it with what it learnt
    (the current primary, the other sentinels), which a restart must keep.
    """

    def __init__(
        self,
        directory: Path,
        *,
        primary_port: int,
        service: str = SENTINEL_SERVICE,
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        port: int | None = None,
    ) -> None:
        super().__init__(directory, port=port, persistence=False)
        self.service = service
        self.primary_port = primary_port
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    @property
    def config(self) -> Path:
        return self.directory / "sentinel.conf"

    def command(self) -> list[str]:
        if not self.config.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            s = self.service
            self.config.write_text(
                "\n".join(
                    [
                        f"port {self.port}",
                        "bind 127.0.0.1",
                        f"dir {self.directory}",
                        f"logfile {self.directory / 'redis.log'}",
                        f"sentinel monitor {s} 127.0.0.1 {self.primary_port} {self.quorum}",
                        f"sentinel down-after-milliseconds {s} {self.down_after_ms}",
                        f"sentinel failover-timeout {s} {self.failover_timeout_ms}",
                        f"sentinel parallel-syncs {s} 1",
                        "",
                    ]
                )
            )
        binary = shutil.which("redis-server") or "redis-server"
        return [binary, str(self.config), "--sentinel"]


class SentinelBed:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels (quorum ``quorum``).

    ``down_after_ms``: how long a silent primary takes to count as down;
    ``failover_timeout_ms``: Sentinel's failover timeout. AOF on every data node.
    """

    def __init__(
        self,
        directory: Path,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        appendfsync: str = "always",
        service: str = SENTINEL_SERVICE,
        ports: list[int] | None = None,
    ) -> None:
        count = 1 + replicas + sentinels
        if ports is not None and len(ports) != count:
            raise ValueError(f"{count} ports needed, {len(ports)} given")
        picked = list(ports) if ports else [free_port() for _ in range(count)]
        self.directory = Path(directory)
        self.service = service
        primary_port = picked[0]
        self.servers = [
            RedisServerProcess(
                self.directory / "data0",
                port=primary_port,
                appendfsync=appendfsync,
                extra_args=list(FAST_SYNC),
            )
        ] + [
            RedisServerProcess(
                self.directory / f"data{i}",
                port=picked[i],
                appendfsync=appendfsync,
                extra_args=[*FAST_SYNC, "--replicaof", "127.0.0.1", str(primary_port)],
            )
            for i in range(1, 1 + replicas)
        ]
        self.sentinels = [
            SentinelProcess(
                self.directory / f"sentinel{i}",
                primary_port=primary_port,
                service=service,
                quorum=quorum,
                down_after_ms=down_after_ms,
                failover_timeout_ms=failover_timeout_ms,
                port=picked[1 + replicas + i],
            )
            for i in range(sentinels)
        ]
        self.paused: set[int] = set()

    def start(self, timeout: float = 60.0) -> SentinelBed:
        """Start the data nodes, then the sentinels; wait until they all know each other."""
        for server in self.servers:
            server.start()
        for sentinel in self.sentinels:
            sentinel.start()
        expected_replicas = len(self.servers) - 1
        others = len(self.sentinels) - 1

        def ready() -> bool:
            for server in self.servers[1:]:
                if info(server.port).get("master_link_status") != "up":
                    return False
            for sentinel in self.sentinels:
                if (
                    len(resp(sentinel.port, "SENTINEL", "REPLICAS", self.service))
                    < expected_replicas
                ):
                    return False
                if len(resp(sentinel.port, "SENTINEL", "SENTINELS", self.service)) < others:
                    return False
            return True

        # Sentinels find each other through hello messages every 2 s: a failover
        # needs a majority of them to know each other first.
        wait_until(ready, "the sentinels discovering the replica and each other", timeout)
        return self

    def stop(self) -> None:
        for process in [*self.sentinels, *self.servers]:
            process.kill()
        self.paused.clear()

    def __enter__(self) -> SentinelBed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``redis+sentinel://`` URL of the sentinels and the service."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def server(self, port: int) -> RedisServerProcess:
        for candidate in self.servers:
            if candidate.port == port:
                return candidate
        raise KeyError(f"no data node on port {port}")

    def primary_port(self) -> int:
        """The primary's port as the first sentinel that answers says."""
        last: Exception | None = None
        for sentinel in self.sentinels:
            if not sentinel.running:
                continue
            try:
                return self._asked(sentinel.port)
            except (OSError, ReplyError, TypeError, ValueError) as exc:
                last = exc
        raise ConnectionError(f"no sentinel answered: {last}")

    def _asked(self, sentinel_port: int) -> int:
        _, port = resp(sentinel_port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        return int(port)

    def replica_ports(self) -> list[int]:
        primary = self.primary_port()
        return [s.port for s in self.servers if s.port != primary]

    def kill(self, port: int) -> None:
        self.paused.discard(port)
        self.server(port).kill()

    def restart(self, port: int) -> None:
        """Start a killed data node again, as a replica of the current primary.

        Told so on its command line, as an operator's config would: left to
        themselves the sentinels convert a returning old primary only after it
        has been seen up for a while (8 s or more), and until then it is a
        second primary nobody should write to.
        """
        server = self.server(port)
        primary = self.primary_port()
        words = server.extra_args
        if "--replicaof" in words:
            at = words.index("--replicaof")
            del words[at : at + 3]
        if primary != port:
            words += ["--replicaof", "127.0.0.1", str(primary)]
        server.start()

    def pause(self, port: int) -> None:
        self.server(port).pause()
        self.paused.add(port)

    def resume(self, port: int) -> None:
        self.server(port).resume()
        self.paused.discard(port)

    def wait_promoted(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until every live sentinel names a primary other than ``old_port`` and that
        server says it is a primary; returns its port."""
        found: list[int] = []

        def promoted() -> bool:
            ports = set()
            for sentinel in self.sentinels:
                if sentinel.running:
                    _, port = resp(
                        sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
                    )
                    ports.add(int(port))
            if len(ports) != 1 or old_port in ports:
                return False
            (new,) = ports
            if info(new).get("role") != "master":
                return False
            found[:] = [new]
            return True

        wait_until(promoted, "the sentinels promoting a replica", timeout)
        return found[0]

    def wait_replica(self, port: int, timeout: float = 30.0) -> None:
        """Wait until the node on ``port`` is a replica with its link up."""

        def replica() -> bool:
            state = info(port)
            return state.get("role") == "slave" and state.get("master_link_status") == "up"

        wait_until(replica, f"node {port} rejoining as a replica", timeout)


# --- what the HA cases need from jarvismem's settings ----------------------------------------


def durability_supported() -> bool:
    """Whether this jarvismem has ``REDIS_DURABILITY`` (the ``replicated`` level)."""
    return "redis_durability" in Settings.model_fields


def sentinel_supported() -> bool:
    """Whether this jarvismem accepts ``redis+sentinel://`` URLs."""
    try:
        load_settings(_env_file=None, redis_url="redis+sentinel://127.0.0.1:26379/svc")
    except ValueError:
        return False
    return True


# --- agents ----------------------------------------------------------------------------------


@dataclass
class LoadSpec:
    """What one agent process runs (written as JSON by the parent).

    ``settings``: Settings fields (the runtime is built with ``from_env`` from
    them); each of ``agents`` is a task that logs turn 1, 2, 3... of step
    ``step``, turn ``n`` into ``workflows[n % len(workflows)]``, pausing
    ``pace`` seconds between turns, until ``stop_file`` exists; then it drains
    its outboxes (up to ``flush_timeout`` s) and writes ``result_file``.
    """

    settings: dict[str, Any]
    workflows: list[str]
    agents: list[str]
    stop_file: str
    result_file: str
    step: str = "s1"
    pace: float = 0.002
    flush_timeout: float = 60.0

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> LoadSpec:
        return cls(**json.loads(path.read_text()))


@dataclass
class LoadResult:
    """What one agent process did: acknowledged turn ids per ``workflow|agent``, calls
    that raised (must be none), the longest ``log_turn``, the wall-clock intervals
    during which any of its outboxes held records, and when replay started moving
    again (the first record replayed after a pause of :data:`REPLAY_PAUSE_SECONDS`)."""

    acked: dict[str, list[int]] = field(default_factory=dict)
    raised: int = 0
    errors: list[str] = field(default_factory=list)
    longest: float = 0.0
    longest_by_workflow: dict[str, float] = field(default_factory=dict)
    degraded: list[list[float]] = field(default_factory=list)
    replay_starts: list[float] = field(default_factory=list)
    pending_after_flush: int = 0

    @property
    def acknowledged(self) -> int:
        return sum(len(v) for v in self.acked.values())


DEGRADED_SAMPLE_SECONDS = 0.02
"""How often an agent process looks whether any of its outboxes holds records."""

REPLAY_PAUSE_SECONDS = 0.5
"""Replay that moved again after this long without progress counts as resuming."""


async def run_load(spec: LoadSpec) -> LoadResult:
    """Run the agents of ``spec`` in this process until its stop file appears."""
    settings = load_settings(_env_file=None, **spec.settings)
    rt = await MemoryRuntime.from_env(settings)
    await asyncio.to_thread(Path(spec.stop_file + "." + spec.agents[0] + ".up").touch)
    result = LoadResult()
    stop = asyncio.Event()
    stop_file = Path(spec.stop_file)
    open_since: list[float | None] = [None]
    # [records replayed so far, wall time of the last progress]
    replay: list[float] = [0.0, float("-inf")]

    def sample() -> None:
        writers = rt.open_writers()
        degraded = any(w.degraded for w in writers)
        now = time.time()
        replayed = float(sum(w.replayed for w in writers))
        if replayed > replay[0]:
            if now - replay[1] > REPLAY_PAUSE_SECONDS:
                result.replay_starts.append(now)
            replay[1] = now
        replay[0] = replayed
        if degraded and open_since[0] is None:
            open_since[0] = now
        elif not degraded and open_since[0] is not None:
            result.degraded.append([open_since[0], now])
            open_since[0] = None

    async def watch() -> None:
        while not stop.is_set():
            sample()
            if await asyncio.to_thread(stop_file.exists):
                stop.set()
            await asyncio.sleep(DEGRADED_SAMPLE_SECONDS)

    async def agent(agent_id: str) -> None:
        views = {wf: rt.memory(wf, spec.step, agent_id) for wf in spec.workflows}
        turn = 0
        while not stop.is_set():
            turn += 1
            wf = spec.workflows[turn % len(spec.workflows)]
            began = time.monotonic()
            try:
                await views[wf].log_turn(turn, f"thought {turn}", "act", "result")
            except Exception as exc:  # the contract under test: this never happens
                result.raised += 1
                if len(result.errors) < 5:
                    result.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            else:
                result.acked.setdefault(f"{wf}|{agent_id}", []).append(turn)
            took = time.monotonic() - began
            result.longest = max(result.longest, took)
            by_wf = result.longest_by_workflow
            by_wf[wf] = max(by_wf.get(wf, 0.0), took)
            await asyncio.sleep(spec.pace)

    try:
        watcher = asyncio.create_task(watch())
        await asyncio.gather(*(agent(a) for a in spec.agents))
        await watcher
        for writer in rt.open_writers():
            await writer.flush(timeout=spec.flush_timeout)
        sample()
        if open_since[0] is not None:
            result.degraded.append([open_since[0], time.time()])
        result.pending_after_flush = sum(len(w.outbox) for w in rt.open_writers())
    finally:
        await rt.close()
    return result


def _agents_main(spec_path: str) -> int:
    spec = LoadSpec.load(Path(spec_path))
    result = asyncio.run(run_load(spec))
    Path(spec.result_file).write_text(json.dumps(asdict(result)))
    return 0


# --- counting --------------------------------------------------------------------------------


@dataclass
class Tally:
    """Acknowledged turns against what the ledgers hold after every outbox drained."""

    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    unacknowledged_present: int = 0
    raised: int = 0
    errors: list[str] = field(default_factory=list)
    longest: float = 0.0
    stranded: int = 0
    lost_examples: list[str] = field(default_factory=list)


async def count_turns(
    settings_fields: dict[str, Any],
    workflows: list[str],
    step: str,
    results: list[LoadResult],
    *,
    flush_timeout: float = 60.0,
) -> Tally:
    """Drain what any outbox still holds (a fresh runtime, as a restarted process would),
    then compare the ledgers with the acknowledged turns of ``results``."""
    settings = load_settings(_env_file=None, **settings_fields)
    rt = await MemoryRuntime.from_env(settings, require_redis=True)
    present: Counter[tuple[str, str, int]] = Counter()
    try:
        for wf in workflows:
            state = rt.workflow(wf)
            for writer in state.writers:
                await writer.flush(timeout=flush_timeout)
            view = rt.memory(wf, step, "counter")
            assert view.episodic is not None
            for entry in await view.episodic.full_history():
                if entry.get("step_id") == step and str(entry.get("turn_id", "")).isdigit():
                    present[(wf, str(entry["agent_id"]), int(entry["turn_id"]))] += 1
        stranded = await _pending_records(Path(settings.outbox_path))
    finally:
        await rt.close()
    tally = Tally(stranded=stranded)
    acked: set[tuple[str, str, int]] = set()
    for result in results:
        tally.raised += result.raised
        tally.errors += result.errors
        tally.longest = max(tally.longest, result.longest)
        for pair, turns in result.acked.items():
            wf, agent = pair.split("|", 1)
            acked.update((wf, agent, t) for t in turns)
    tally.acknowledged = len(acked)
    missing = sorted(acked - set(present))
    tally.lost = len(missing)
    tally.lost_examples = [f"{wf}/{agent}/{turn}" for wf, agent, turn in missing[:5]]
    tally.duplicated = sum(n - 1 for n in present.values() if n > 1)
    tally.unacknowledged_present = len(set(present) - acked)
    return tally


async def _pending_records(root: Path) -> int:
    paths = await asyncio.to_thread(lambda: sorted(root.rglob("*.jsonl")) if root.exists() else [])
    pending = 0
    for path in paths:
        box = await asyncio.to_thread(Outbox, path)
        try:
            await box.refresh()
            pending += len(box)
        finally:
            await box.close()
    return pending


# --- scenarios -------------------------------------------------------------------------------


@dataclass
class ScenarioConfig:
    """One run: a topology, a durability level, a fault (repeated ``repeats`` times).

    ``processes`` agent processes with ``agents`` agent tasks each, writing over
    ``workflows`` workflows; ``warmup`` seconds of load before the first fault,
    ``settle`` seconds after each fault heals (and between repeats);
    ``reshard_slots``: slots a ``reshard`` moves; ``extra_settings``: more
    Settings fields for every runtime; ``full_coverage``: the cluster's
    ``cluster-require-full-coverage``.
    """

    topology: Topology = "cluster"
    durability: Durability = "primary"
    fault: str = "kill"
    processes: int = 1
    agents: int = 2
    workflows: int = 4
    repeats: int = 1
    warmup: float = 1.0
    settle: float = 1.0
    pace: float = 0.002
    lag_seconds: float = 0.5
    reshard_slots: int = 64
    node_timeout_ms: int = 1000
    full_coverage: bool = True
    wait_replicas: int = 1
    wait_timeout_ms: int = 500
    extra_settings: dict[str, Any] = field(default_factory=dict)
    workdir: Path | None = None


@dataclass
class ScenarioResult:
    """The figures of a run: the tally, how long each promotion took after its fault,
    and how long after each promotion the outboxes were empty again (replay lag)."""

    config: ScenarioConfig
    tally: Tally
    promotion_seconds: list[float] = field(default_factory=list)
    replay_lag_seconds: list[float] = field(default_factory=list)
    replay_resume_seconds: list[float] = field(default_factory=list)
    """Per promotion that found records queued: seconds until replay moved again."""
    moved_workflows: int = 0
    longest_elsewhere: float = 0.0
    """The longest ``log_turn`` of a workflow whose slot the fault did not touch (cluster)."""
    seconds: float = 0.0

    def row(self) -> dict[str, Any]:
        c, t = self.config, self.tally
        return {
            "topology": c.topology,
            "durability": c.durability,
            "fault": c.fault + (f" x{c.repeats}" if c.repeats > 1 else ""),
            "acknowledged": t.acknowledged,
            "lost": t.lost,
            "duplicated": t.duplicated,
            "raised": t.raised,
            "longest_log_turn_s": round(t.longest, 3),
            "longest_elsewhere_s": round(self.longest_elsewhere, 3),
            "promotion_s": round(max(self.promotion_seconds, default=0.0), 2),
            "replay_resume_s": round(max(self.replay_resume_seconds, default=0.0), 2),
            "replay_lag_s": round(max(self.replay_lag_seconds, default=0.0), 2),
        }


def scenario_settings(config: ScenarioConfig, url: str, root: Path) -> dict[str, Any]:
    """The Settings fields of every runtime of a scenario (agents and the counter)."""
    fields: dict[str, Any] = {
        "redis_url": url,
        "redis_cluster": config.topology == "cluster",
        "jarvismem_namespace": "ha" + uuid.uuid4().hex[:8],
        "outbox_path": str(root / "outbox"),
        "storage_backend": "none",
        "compaction_enabled": False,
    }
    if config.durability != "primary" or durability_supported():
        fields["redis_durability"] = config.durability
    if config.durability == "replicated":
        fields["redis_wait_replicas"] = config.wait_replicas
        fields["redis_wait_timeout_ms"] = config.wait_timeout_ms
    fields.update(config.extra_settings)
    return fields


def _workflow_ids(count: int, wanted: Callable[[str], bool] | None = None) -> list[str]:
    """``count`` workflow ids; with ``wanted``, the first half pass it and the rest do not."""
    if wanted is None:
        return [f"wf{i}" for i in range(count)]
    inside = (count + 1) // 2
    picked_in: list[str] = []
    picked_out: list[str] = []
    i = 0
    while len(picked_in) < inside or len(picked_out) < count - inside:
        wf = f"wf{i}"
        i += 1
        if wanted(wf):
            if len(picked_in) < inside:
                picked_in.append(wf)
        elif len(picked_out) < count - inside:
            picked_out.append(wf)
    return picked_in + picked_out


class _Agents:
    """The agent processes of a scenario."""

    def __init__(self, config: ScenarioConfig, root: Path, fields: dict[str, Any], wfs: list[str]):
        self.root = root
        self.stop_file = root / "stop"
        self.specs: list[LoadSpec] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        for p in range(config.processes):
            self.specs.append(
                LoadSpec(
                    settings=fields,
                    workflows=wfs,
                    agents=[f"p{p}a{a}" for a in range(config.agents)],
                    stop_file=str(self.stop_file),
                    result_file=str(root / f"result{p}.json"),
                    pace=config.pace,
                )
            )

    def start(self) -> None:
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
        log = (self.root / "agents.log").open("ab")
        for i, spec in enumerate(self.specs):
            path = self.root / f"spec{i}.json"
            spec.save(path)
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.harness.ha", "agents", str(path)],
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    env=env,
                )
            )
        log.close()

    def wait_writing(self, timeout: float = 60.0) -> None:
        """Wait until every process has started (its runtime is up and logging)."""
        # Each process touches "<stop file>.<its first agent>.up" once its runtime is up.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"an agent process exited early; see {self.root}/agents.log")
            if all(Path(f"{s.stop_file}.{s.agents[0]}.up").exists() for s in self.specs):
                return
            time.sleep(0.05)
        raise TimeoutError("agent processes did not start")

    def finish(self, timeout: float = 180.0) -> list[LoadResult]:
        self.stop_file.touch()
        results = []
        for proc, spec in zip(self.procs, self.specs, strict=True):
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"an agent process did not stop; see {self.root}") from None
            if code != 0:
                raise RuntimeError(f"an agent process exited {code}; see {self.root}/agents.log")
            results.append(LoadResult(**json.loads(Path(spec.result_file).read_text())))
        return results

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _replay_resume(
    promoted_at: float, results: list[LoadResult], fault_at: float | None = None
) -> float | None:
    """Seconds from a promotion until some process replayed a queued record again, counting
    replay that moved after the fault (``fault_at``; default: the promotion) (None: nothing
    was queued). 0 when replay moved before the bed saw the promotion complete (it polls
    every node's state)."""
    if _replay_lag(promoted_at, results) == 0.0:
        return None
    since = promoted_at if fault_at is None else fault_at
    starts = [t for r in results for t in r.replay_starts if t >= since]
    if not starts:
        return None
    return max(0.0, min(starts) - promoted_at)


def _replay_lag(promoted_at: float, results: list[LoadResult]) -> float:
    """Seconds from a promotion until no process had records queued (0: none were)."""
    lag = 0.0
    for result in results:
        for start, end in result.degraded:
            if start <= promoted_at < end:
                lag = max(lag, end - promoted_at)
    return lag


def run_scenario(
    config: ScenarioConfig, progress: Callable[[str], None] | None = None
) -> ScenarioResult:
    """Start a bed, keep agents writing through the fault(s), drain, count."""
    say = progress or (lambda line: None)
    started = time.monotonic()
    owned = config.workdir is None
    root = Path(config.workdir or tempfile.mkdtemp(prefix="jarvismem-ha-"))
    root.mkdir(parents=True, exist_ok=True)
    bed: ClusterBed | SentinelBed
    if config.topology == "cluster":
        bed = ClusterBed(
            root / "bed",
            node_timeout_ms=config.node_timeout_ms,
            full_coverage=config.full_coverage,
        )
    else:
        bed = SentinelBed(root / "bed", down_after_ms=config.node_timeout_ms)
    agents: _Agents | None = None
    promotions: list[float] = []
    promoted_at: list[float] = []
    moved = 0
    try:
        bed.start()
        say(f"{config.topology} bed up in {time.monotonic() - started:.1f}s")
        wanted: Callable[[str], bool] | None = None
        reshard_from: ClusterNode | None = None
        if isinstance(bed, ClusterBed):
            # The primary of slot 0: the reshard takes its lowest slots (0, 1, ...),
            # which stay the lowest of whichever node holds them, so every round
            # moves the same slots, back and forth, with half the workflows in them.
            first = bed.primary_for_slot(0)
            if config.fault == "reshard":
                reshard_from = first
                taken = set(slots_taken_first(first, config.reshard_slots))
                wanted = lambda wf: workflow_slot(wf) in taken  # noqa: E731
            else:
                wanted = lambda wf: first.serves(workflow_slot(wf))  # noqa: E731
        workflows = _workflow_ids(config.workflows, wanted)
        original = reshard_from
        if isinstance(bed, ClusterBed):
            # The seed node must outlive the faults: a runtime started later (the
            # counter) reaches the cluster through it, and it names the outboxes.
            url = _stable_seed(bed, workflows[0])
        else:
            url = bed.url
        fields = scenario_settings(config, url, root)
        agents = _Agents(config, root, fields, workflows)
        agents.start()
        agents.wait_writing()
        time.sleep(config.warmup)
        for round_ in range(config.repeats):
            say(f"fault {config.fault} #{round_ + 1}")
            if config.fault == "reshard":
                assert isinstance(bed, ClusterBed)
                assert reshard_from is not None and original is not None
                nodes = bed.nodes()
                source = next(n for n in nodes if n.id == reshard_from.id)
                target = next(n for n in nodes if n.is_primary and n.id != source.id)
                if round_ % 2:
                    target = next(n for n in nodes if n.id == original.id)
                began = time.monotonic()
                slots = set(bed.reshard(source, target, config.reshard_slots))
                moved += sum(1 for wf in workflows if workflow_slot(wf) in slots)
                promotions.append(time.monotonic() - began)
                # The next round moves them back: every round migrates keys under load.
                reshard_from = target
            else:
                took, at = _fail_over(bed, config, workflows[0])
                promotions.append(took)
                promoted_at.append(at)
            time.sleep(config.settle)
        results = agents.finish()
        say("agents stopped; counting")
        tally = asyncio.run(count_turns(fields, workflows, "s1", results))
        lags = [_replay_lag(at, results) for at in promoted_at]
        resumes = [
            r
            for r in (
                _replay_resume(at, results, at - took)
                for at, took in zip(promoted_at, promotions, strict=False)
            )
            if r is not None
        ]
        # The first half of the workflows sit on the failed primary (or the moved
        # slots); the rest only share the cluster with them.
        untouched = workflows[(len(workflows) + 1) // 2 :] if wanted is not None else []
        elsewhere = max(
            (r.longest_by_workflow.get(wf, 0.0) for r in results for wf in untouched),
            default=0.0,
        )
    except BaseException:
        if agents is not None:
            agents.kill_all()
        owned = False
        say(f"work directory kept: {root}")
        raise
    finally:
        bed.stop()
    if owned:
        shutil.rmtree(root, ignore_errors=True)
    return ScenarioResult(
        config=config,
        tally=tally,
        promotion_seconds=promotions,
        replay_lag_seconds=lags,
        replay_resume_seconds=resumes,
        moved_workflows=moved,
        longest_elsewhere=elsewhere,
        seconds=time.monotonic() - started,
    )


def _stable_seed(bed: ClusterBed, workflow: str) -> str:
    """A seed node no fault of a scenario touches: a primary not serving ``workflow``."""
    victim = bed.primary_for_workflow(workflow)
    others = [n for n in bed.nodes() if n.is_primary and n.id != victim.id]
    return f"redis://127.0.0.1:{others[0].port}/0"


def _fail_over(
    bed: ClusterBed | SentinelBed, config: ScenarioConfig, workflow: str
) -> tuple[float, float]:
    """Inject one failover fault; return (seconds from fault to promotion, wall time of the
    promotion). The failed node is back (as a replica) when this returns."""
    if isinstance(bed, ClusterBed):
        slot = workflow_slot(workflow)
        primary = bed.primary_for_slot(slot)
        old = primary.port
        replica_ports = [r.port for r in bed.replicas_of(primary.id)]
    else:
        old = bed.primary_port()
        replica_ports = bed.replica_ports()
    if config.fault == "kill_lagging":
        # The replica falls behind, then the primary dies. A SIGSTOPped replica
        # alone would not do: what it did not read waits in its socket buffer and
        # is applied on SIGCONT. So it is held still while the primary acknowledges
        # writes, then both die, and the replica restarts from its own AOF, without
        # what its socket held: the replica promoted next lacks those writes.
        for port in replica_ports:
            bed.pause(port)
        time.sleep(config.lag_seconds)
        began = time.monotonic()
        bed.kill(old)
        for port in replica_ports:
            bed.kill(port)
            bed.restart(port)
    elif config.fault == "kill":
        began = time.monotonic()
        bed.kill(old)
    elif config.fault == "partition":
        began = time.monotonic()
        bed.pause(old)
    else:
        raise ValueError(f"unknown fault {config.fault!r}")
    if isinstance(bed, ClusterBed):
        new = bed.wait_promoted(workflow_slot(workflow), old)
    else:
        new = bed.wait_promoted(old)
    took = time.monotonic() - began
    at = time.time()
    del new
    if config.fault == "partition":
        bed.resume(old)
    else:
        bed.restart(old)
    bed.wait_replica(old)
    return took, at


# --- command line ----------------------------------------------------------------------------

TABLE_COLUMNS = (
    ("topology", "topology"),
    ("durability", "durability"),
    ("fault", "fault"),
    ("acknowledged", "acknowledged"),
    ("lost", "lost"),
    ("duplicated", "duplicated"),
    ("raised", "raised"),
    ("longest_log_turn_s", "longest log_turn (s)"),
    ("longest_elsewhere_s", "longest, other slots (s)"),
    ("promotion_s", "promotion (s)"),
    ("replay_resume_s", "replay resumed (s)"),
    ("replay_lag_s", "replay drained (s)"),
)


def table_header() -> str:
    names = [title for _, title in TABLE_COLUMNS]
    return "| " + " | ".join(names) + " |\n|" + "---|" * len(names)


def table_row(row: dict[str, Any]) -> str:
    cells = []
    for key, _ in TABLE_COLUMNS:
        value = row.get(key, "")
        cells.append(
            f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
        )
    return "| " + " | ".join(cells) + " |"


def soak(argv: list[str]) -> int:
    """The soak matrix: every topology x durability x fault, one table row each."""
    parser = argparse.ArgumentParser(prog="python -m tests.harness.ha soak")
    parser.add_argument("--topologies", default="cluster,sentinel")
    parser.add_argument("--durabilities", default="primary,replicated")
    parser.add_argument(
        "--faults", default="", help="comma-separated; default: all of each topology"
    )
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--agents", type=int, default=4, help="agent tasks per process")
    parser.add_argument("--workflows", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="faults per run")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds of load after a fault")
    parser.add_argument("--lag", type=float, default=0.5, help="kill_lagging: replica held (s)")
    parser.add_argument("--full-coverage", choices=("yes", "no"), default="yes")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    print(table_header(), flush=True)
    for topology in args.topologies.split(","):
        if topology not in FAULTS:
            parser.error(f"unknown topology {topology!r}")
        faults = [f for f in args.faults.split(",") if f] or list(FAULTS[topology])
        for durability in args.durabilities.split(","):
            for fault in faults:
                if fault not in FAULTS[topology]:
                    continue
                skip = _unsupported(topology, durability)
                if skip:
                    print(f"| {topology} | {durability} | {fault} | skipped: {skip} |", flush=True)
                    continue
                config = ScenarioConfig(
                    topology=topology,  # type: ignore[arg-type]
                    durability=durability,  # type: ignore[arg-type]
                    fault=fault,
                    processes=args.processes,
                    agents=args.agents,
                    workflows=args.workflows,
                    repeats=args.repeats,
                    settle=args.settle,
                    lag_seconds=args.lag,
                    full_coverage=args.full_coverage == "yes",
                )
                result = run_scenario(
                    config, progress=lambda line: print(f"  {line}", file=sys.stderr)
                )
                row = result.row()
                rows.append(row)
                print(table_row(row), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


def _unsupported(topology: str, durability: str) -> str | None:
    if durability == "replicated" and not durability_supported():
        return "REDIS_DURABILITY unknown to this jarvismem"
    if topology == "sentinel" and not sentinel_supported():
        return "redis+sentinel:// unknown to this jarvismem"
    return None


def main(argv: list[str]) -> int:
    """``python -m tests.harness.ha agents SPEC.json`` (an agent process) or
    ``python -m tests.harness.ha soak [options]`` (the soak table)."""
    if len(argv) == 2 and argv[0] == "agents":
        return _agents_main(argv[1])
    if argv and argv[0] == "soak":
        return soak(argv[1:])
    print("usage: python -m tests.harness.ha agents SPEC.json | soak [options]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
