"""Durability levels: when a Redis write counts as done.

Redis replicates asynchronously: a primary that acknowledged a write and died
before its replica copied it loses that write on failover, silently. With
``REDIS_DURABILITY=replicated`` every acknowledged write of a tier (a ledger
append, a checkpoint, a summary, a space) is followed by ``WAIT <replicas>
<timeout>`` **on the connection that carried the write**, in the same pipelined
round trip. ``WAIT`` blocks until that many replicas acknowledged the
connection's last write (its replication offset) or the timeout passes, and
answers how many did. Too few is a *shortfall*: the write raises
:class:`~jarvismem.errors.BackendUnavailableError`, exactly like an outage, so
the durable writer queues it in the outbox and replays it later; the scripts'
operation ids (the ledger's exactly-once index, the checkpoint op ids) make the
replay harmless when the write had in fact landed.

Why the same connection: ``WAIT`` counts replicas that reached the *calling
connection's* offset. Sent on another connection, it waits for that
connection's own last write (often none: offset 0) and confirms nothing.

* A plain client (or a Sentinel-managed one) sends ``EVALSHA`` then ``WAIT`` as
  one non-transactional pipeline: one connection, one round trip.
* A Redis Cluster client sends one cluster pipeline whose two commands both
  name, as their target, the node that serves the key's slot: redis-py's
  cluster pipeline sends each node's commands as one batch on one connection
  of that node. A redirect (``MOVED``, ``ASK``) is not followed inside the
  pipeline (its ``WAIT`` would have confirmed the wrong node's connection): the
  slot map is refreshed and the pair is sent again, once, to the new owner
  (after ``ASKING`` on the same connection for an ``ASK``); a second redirect
  fails the write as an outage.

The level is attached to the client object where it enters a runtime
(:func:`jarvismem.backends.redis.adopt_redis`: a client built from settings by
``create_redis``, or one passed in to ``UnifiedMemory(redis_store=...)`` or
``MemoryRuntime(redis=...)``), so every surface that writes through the client
follows it without being told. A client used directly by an integration
(``JarvisMemSaver(client)``, ``JarvisMemStore(client)``, ``RedisRecallStore``)
follows the level the client carries: ``primary`` unless it came from
``create_redis`` or :func:`set_durability` was called on it.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

from redis.exceptions import AskError, MovedError, NoScriptError, RedisError

from jarvismem.errors import BackendUnavailableError


@dataclass(frozen=True, slots=True)
class Durability:
    """The ``replicated`` level of one client: ``WAIT replicas timeout_ms`` after each write."""

    replicas: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A write acknowledged by fewer replicas than required (or a failed WAIT)."""

    at: float
    wanted: int
    got: int
    timeout_ms: int
    what: str


class _State:
    __slots__ = ("durability", "few_since", "last_shortfall", "short_since", "shortfalls", "waits")

    def __init__(self, durability: Durability) -> None:
        self.durability = durability
        self.waits = 0
        self.shortfalls = 0
        self.last_shortfall: Shortfall | None = None
        # When the current run of shortfalls began (None: the last WAIT was confirmed).
        self.short_since: float | None = None
        # When a health check first saw too few replicas connected (None: enough now).
        self.few_since: float | None = None


_states: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()


def set_durability(client: Any, level: str, *, replicas: int = 1, timeout_ms: int = 1000) -> None:
    """Make ``client``'s tier writes ``primary`` or ``replicated`` (WAIT replicas timeout_ms)."""
    if level == "primary":
        _states.pop(client, None)
        return
    if level != "replicated":
        raise ValueError(f"durability level must be 'primary' or 'replicated', not {level!r}")
    if replicas < 1 or timeout_ms <= 0:
        raise ValueError("replicated durability needs replicas >= 1 and timeout_ms > 0")
    _states[client] = _State(Durability(replicas=replicas, timeout_ms=timeout_ms))


def durability_of(client: Any) -> Durability | None:
    """The client's ``replicated`` level, or None for ``primary`` (no WAIT)."""
    state = _states.get(client)
    return None if state is None else state.durability


def durability_health(client: Any) -> dict[str, Any]:
    """The level and, with ``replicated``, WAIT counts and the last shortfall (for health)."""
    state = _states.get(client)
    if state is None:
        return {"level": "primary"}
    last = state.last_shortfall
    return {
        "level": "replicated",
        "replicas": state.durability.replicas,
        "wait_timeout_ms": state.durability.timeout_ms,
        "waits": state.waits,
        "shortfalls": state.shortfalls,
        "last_shortfall": None
        if last is None
        else {
            "at": round(last.at, 3),
            "wanted": last.wanted,
            "got": last.got,
            "what": last.what,
        },
    }


def wait_shortfall(client: Any, reply: Any, what: str) -> BackendUnavailableError | None:
    """The error for a ``WAIT`` reply that confirmed too few replicas, else None.

    Counts the WAIT and records a shortfall for :func:`durability_health`. An
    error reply (the connection's server is not a primary any more...) is a
    shortfall with 0 replicas: nothing confirmed the write.
    """
    state = _states.get(client)
    if state is None:
        return None
    state.waits += 1
    wanted = state.durability.replicas
    got = reply if isinstance(reply, int) and not isinstance(reply, bool) else 0
    if got >= wanted:
        state.short_since = None
        return None
    state.shortfalls += 1
    if state.short_since is None:
        state.short_since = time.time()
    timeout_ms = state.durability.timeout_ms
    state.last_shortfall = Shortfall(time.time(), wanted, got, timeout_ms, what)
    why = (
        f"WAIT failed ({type(reply).__name__}: {str(reply)[:120]})"
        if isinstance(reply, BaseException)
        else f"WAIT confirmed {got} of {wanted} replicas in {timeout_ms} ms"
    )
    return BackendUnavailableError(
        f"{what}: not replicated ({why}); queued as for an outage (REDIS_DURABILITY=replicated)"
    )


async def connected_replicas(client: Any) -> int | None:
    """How many replicas the client's primary has connected now, or None on a cluster.

    ``INFO replication``'s ``connected_slaves``; a Redis Cluster client has one
    primary per shard, so there the WAIT shortfalls alone tell the state.
    """
    if is_cluster(client):
        return None
    info = await client.info("replication")
    return int(info.get("connected_slaves", 0))


def replica_state(client: Any, connected: int | None, queued: int) -> dict[str, Any]:
    """Whether ``replicated`` writes can be confirmed now, for health (empty for ``primary``).

    ``state``: ``ok``; ``no replica: writes queued`` (or ``1 of 2 replicas: ...``)
    when fewer replicas than ``REDIS_WAIT_REPLICAS`` are connected, as on a
    primary just promoted by a failover until the old one rejoins; ``replicas not
    confirming: writes queued`` when they are connected but the last WAIT fell
    short (a stalled replica). ``queued``: the Redis writes waiting in this
    process's outboxes; ``since``: when this began (the first shortfall of the
    run, or the first check that saw too few replicas), epoch seconds, else None.
    """
    state = _states.get(client)
    if state is None:
        return {}
    wanted = state.durability.replicas
    few = connected is not None and connected < wanted
    if not few:
        state.few_since = None
    elif state.few_since is None:
        state.few_since = time.time()
    if few:
        label: str | None = "no replica" if connected == 0 else f"{connected} of {wanted} replicas"
    elif state.short_since is not None:
        label = "replicas not confirming"
    else:
        label = None
    began = [t for t in (state.short_since, state.few_since) if t is not None]
    return {
        "state": "ok" if label is None else f"{label}: writes queued",
        "connected_replicas": connected,
        "queued": queued,
        "since": round(min(began), 3) if label is not None and began else None,
    }


def wait_args(durability: Durability) -> tuple[str, int, int]:
    """The ``WAIT`` command of ``durability``, for a pipeline."""
    return ("WAIT", durability.replicas, durability.timeout_ms)


def is_cluster(client: Any) -> bool:
    """True for a ``RedisCluster`` client (writes route by slot)."""
    return hasattr(client, "nodes_manager")


def _is_noscript(reply: object) -> bool:
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, RedisError) and str(reply).startswith("NOSCRIPT")
    )


async def run_script(client: Any, script: Any, keys: list[Any], args: list[Any], what: str) -> Any:
    """Run the registered ``script`` (a redis-py ``Script``) as a tier write.

    ``primary``: the script, as redis-py runs it (it reloads a lost script).
    ``replicated``: the script and ``WAIT`` on one connection in one round trip;
    a shortfall raises :class:`~jarvismem.errors.BackendUnavailableError` (the
    write may have landed: callers' scripts are idempotent). Other failures
    raise redis-py's errors, for the caller's ``redis_errors`` to translate.
    """
    durability = durability_of(client)
    if durability is None:
        return await script(keys=keys, args=args)
    if is_cluster(client):
        return await _cluster_pair(client, durability, script, keys, args, what)
    flat = (*keys, *args)
    for attempt in range(2):
        async with client.pipeline(transaction=False) as pipe:
            pipe.execute_command("EVALSHA", script.sha, len(keys), *flat)
            pipe.execute_command(*wait_args(durability))
            reply, acked = await pipe.execute(raise_on_error=False)
        if _is_noscript(reply) and attempt == 0:
            # A restarted or promoted server lost the script: load it, send again.
            await client.script_load(script.script)
            continue
        return _settle(client, reply, acked, what)
    raise AssertionError("unreachable")


def _settle(client: Any, reply: Any, acked: Any, what: str) -> Any:
    """The script's reply, or its error, or the shortfall error of a landed write."""
    if isinstance(reply, BaseException):
        raise reply
    short = wait_shortfall(client, acked, what)
    if short is not None:
        raise short
    return reply


async def _cluster_pair(
    client: Any, durability: Durability, script: Any, keys: list[Any], args: list[Any], what: str
) -> Any:
    """EVALSHA + WAIT pinned to the node of ``keys[0]``'s slot (one connection of it)."""
    await client.initialize()  # a no-op once the slot map is known
    node = client.get_node_from_key(keys[0])
    flat = (*keys, *args)
    asking = False
    for attempt in range(3):
        if node is None:
            raise BackendUnavailableError(f"{what}: no cluster node serves the key's slot")
        async with client.pipeline() as pipe:
            if asking:
                pipe.execute_command("ASKING", target_nodes=node)
            pipe.execute_command("EVALSHA", script.sha, len(keys), *flat, target_nodes=node)
            pipe.execute_command(*wait_args(durability), target_nodes=node)
            replies = await pipe.execute(raise_on_error=False, allow_redirections=False)
        reply, acked = replies[-2], replies[-1]
        last = attempt == 2
        if _is_noscript(reply) and not last:
            # SCRIPT LOAD goes to every primary of a cluster (redis-py routes it so).
            await client.script_load(script.script)
            asking = False
            continue
        if isinstance(reply, MovedError) and not last:
            # Let redis-py learn the new owner (one keyed read follows MOVED and
            # patches the slot map), then send the pair there.
            await client.exists(keys[0])
            node, asking = client.get_node_from_key(keys[0]), False
            continue
        if isinstance(reply, AskError) and not last:
            # The slot is migrating and the key already moved: ASKING lets the
            # importing node take this one command (same connection, just before it).
            node, asking = client.get_node(host=reply.host, port=reply.port), True
            continue
        return _settle(client, reply, acked, what)
    raise AssertionError("unreachable")
