"""The one Redis seam: a :class:`RedisBackend` owns a client and all that goes with it.

Tiers, the engine and the integrations are handed a backend and call its
methods; none of them talks to redis-py or translates its errors. The backend
holds the redis-py client (``backend.client``), its auto-pipeline (one per
event loop), its durability level with the ``WAIT`` handling and counts of
``REDIS_DURABILITY=replicated``, and its recovery probe. Connection helpers live
in :mod:`jarvismem.backends.redis_connect`, error classification in
:mod:`jarvismem.backends.redis_failures`.

**Durability.** Redis replicates asynchronously: a primary that acknowledged a
write and died before its replica copied it loses that write on failover. With
``replicated`` every tier write is followed by ``WAIT <replicas> <timeout>`` *on
the connection that carried it*, in the same round trip (``WAIT`` counts the
replicas that reached the calling connection's offset). Too few is a
*shortfall*: the write raises :class:`~jarvismem.errors.BackendUnavailableError`
like an outage, the durable writer queues it, and the scripts' op ids make the
replay harmless if it had landed. A Redis Cluster client sends the pair as one
cluster pipeline pinned to the key's node; a redirect refreshes the slot map and
sends the pair once more to the new owner.

**Auto-pipelining** (:class:`AutoPipeline`): a lone script call goes out at
once; calls issued while a round trip is in flight are coalesced into one
pipeline sent on the next loop iteration, in arrival order, each caller getting
its own reply or error. With ``replicated`` one ``WAIT`` ends each round trip.
Cluster clients are not coalesced (one command each).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from redis.exceptions import AskError, MovedError, NoScriptError, RedisError

from jarvismem.backends.redis_connect import (
    RedisClient,
    connect_redis,
    create_redis,
    is_in_process,
    mark_known_down,
    redis_destination,
)
from jarvismem.backends.redis_failures import (
    is_redis_failure,
    redis_errors,
    translate_redis_error,
)
from jarvismem.errors import BackendUnavailableError, ConfigError
from jarvismem.settings import Settings


@dataclass(frozen=True, slots=True)
class Durability:
    """The ``replicated`` level of one backend: ``WAIT replicas timeout_ms`` after each write."""

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


class _Waits:
    """The ``replicated`` level and what its WAITs found (for health)."""

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


PROBE_SECONDS = 0.1
"""How often, at most, a :class:`RecoveryProbe` PINGs its server (callers in between share
the last answer): while replay is backed off, recovery is noticed within about this long."""

PROBE_TIMEOUT_SECONDS = 1.0
"""How long a recovery PING may take before it counts as no answer."""


class RecoveryProbe:
    """Does the server answer now? One PING per :data:`PROBE_SECONDS` per backend, shared.

    Every durable writer of a backend waits on the same probe while its replay is
    backed off, so a thousand queued workflows cost one PING per interval, not a
    thousand. Never raises. A success also ends the client's "known down" window.
    """

    def __init__(self, client: Any, *, interval: float = PROBE_SECONDS) -> None:
        self._client = client
        self.interval = interval
        self._task: asyncio.Task[bool] | None = None
        self._at = float("-inf")
        self._ok = False
        self.pings = 0

    async def __call__(self) -> bool:
        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None and not task.done() and task.get_loop() is loop:
            return await asyncio.shield(task)  # a PING in flight: share its answer
        if loop.time() - self._at < self.interval:
            return self._ok
        task = self._task = loop.create_task(self._ping(), name="jarvismem-redis-probe")
        return await asyncio.shield(task)

    async def _ping(self) -> bool:
        self.pings += 1
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                await self._client.ping()
            ok = True
        except Exception:
            ok = False
        self._ok, self._at = ok, asyncio.get_running_loop().time()
        return ok


class RedisBackend:
    """One Redis server as jarvismem uses it: client, pipeline, durability, probe, errors.

    Build one with :meth:`connect` / :meth:`create` from settings, or
    :meth:`adopt` a caller's client. Every method raises jarvismem's errors only
    (:class:`~jarvismem.errors.BackendUnavailableError` for an outage or a
    replication shortfall, :class:`~jarvismem.errors.BackendRejectedError` for a
    refusal), naming the operation ``what``.
    """

    def __init__(self, client: RedisClient, *, durability: Durability | None = None) -> None:
        self.client: Any = client
        self.cluster = hasattr(client, "nodes_manager")
        self._waits = None if durability is None else _Waits(durability)
        self.probe = RecoveryProbe(client)
        self._pipeline: AutoPipeline | _Direct | None = None

    # --- making one -------------------------------------------------------------------------

    @classmethod
    def create(cls, settings: Settings) -> RedisBackend:
        """The backend of ``settings``, not connected (see :func:`create_redis`)."""
        return cls(create_redis(settings), durability=_wanted(settings))

    @classmethod
    async def connect(cls, settings: Settings, *, retries: int | None = None) -> RedisBackend:
        """The backend of ``settings`` once its server answers (see :func:`connect_redis`)."""
        return cls(await connect_redis(settings, retries=retries), durability=_wanted(settings))

    @classmethod
    def adopt(cls, given: Any, settings: Settings | None = None) -> RedisBackend:
        """The backend for a caller's redis-py client, or a backend used as is.

        A client gets a backend of its own with the durability level of
        ``settings`` (``primary`` without settings). A backend passed in keeps
        its level; one that disagrees with ``settings`` is refused with
        :class:`ConfigError` rather than silently changed, and so is
        ``replicated`` on the in-process stand-in (no replicas).
        """
        wanted = None if settings is None else _wanted(settings)
        if isinstance(given, RedisBackend):
            if settings is not None and given.durability != wanted:
                raise ConfigError(_disagreement(given.durability, wanted))
            return given
        if wanted is not None and is_in_process(given):
            raise ConfigError(
                "REDIS_DURABILITY=replicated needs a Redis server with replicas: the "
                "in-process stand-in has none"
            )
        return cls(given, durability=wanted)

    # --- what it is -------------------------------------------------------------------------

    @property
    def in_process(self) -> bool:
        """True for the in-process fakeredis stand-in (``REDIS_URL=memory://``)."""
        return is_in_process(self.client)

    @property
    def destination(self) -> str:
        """A secret-free description of the server(s): names the backend's outboxes."""
        return redis_destination(self.client)

    def mark_known_down(self) -> None:
        """The server was just found down: its commands skip retries for a while."""
        mark_known_down(self.client)

    async def aclose(self) -> None:
        """Close the client (and its pool)."""
        await self.client.aclose()

    # --- commands -----------------------------------------------------------------------------

    def script(self, source: str) -> Any:
        """A registered Lua script, for :meth:`run_script` and :meth:`evalsha`."""
        return self.client.register_script(source)

    async def call(
        self, command: str, *args: Any, what: str, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        """``client.<command>(*args, **kwargs)`` under ``timeout``, errors translated.

        Inside :meth:`batched_reads` the command joins the batch's next round trip.
        """
        batch = _READS.get()
        try:
            if batch is not None and batch.open and batch.backend is self:
                future = batch.add(command, args, kwargs, what)
                async with asyncio.timeout(timeout):
                    return await future
            if timeout is None:
                return await getattr(self.client, command)(*args, **kwargs)
            async with asyncio.timeout(timeout):
                return await getattr(self.client, command)(*args, **kwargs)
        except Exception as exc:
            if is_redis_failure(exc):
                raise translate_redis_error(exc, what) from exc
            raise

    @contextlib.asynccontextmanager
    async def batched_reads(self, timeout: float | None = None) -> AsyncIterator[None]:
        """Tasks started inside send their :meth:`call` commands together.

        The commands those tasks issue in one loop iteration go out as one
        pipelined round trip (bounded by ``timeout``) on the next; each caller
        still gets its own reply or its own error, under its own timeout, and
        one that gives up does not cancel the round trip the others wait for.
        Await the reads inside the block (``async with backend.batched_reads():
        await asyncio.gather(...)``); the rehydrate bundle reads its tiers this
        way: their normal read methods, one round trip. When the block ends the
        batch closes: a task started inside copied the context, batch and all,
        and from then on its commands go out on their own, under their own
        timeouts, not under this batch's for the rest of its life.
        """
        batch = _ReadBatch(self, timeout)
        token = _READS.set(batch)
        try:
            yield
        finally:
            _READS.reset(token)
            batch.open = False

    def guard(self, what: str, timeout: float | None = None) -> redis_errors:
        """A deadline over an operation of several calls (``async with``).

        Its expiry, and any redis-py failure inside, becomes jarvismem's error
        naming ``what``; the backend's own methods already raise those.
        """
        return redis_errors(what, timeout)

    async def pipeline(
        self,
        build: Callable[[Any], object],
        *,
        what: str,
        transaction: bool = False,
        timeout: float | None = None,
    ) -> list[Any]:
        """One round trip: ``build(pipe)`` queues commands, their replies come back in order."""
        try:
            async with asyncio.timeout(timeout):
                async with self.client.pipeline(transaction=transaction) as pipe:
                    build(pipe)
                    return list(await pipe.execute())
        except Exception as exc:
            if is_redis_failure(exc):
                raise translate_redis_error(exc, what) from exc
            raise

    async def scan(self, match: str, *, what: str, count: int = 1000) -> AsyncIterator[Any]:
        """The keys matching ``match`` (SCAN, every node of a cluster), errors translated."""
        try:
            async for key in self.client.scan_iter(match=match, count=count):
                yield key
        except Exception as exc:
            if is_redis_failure(exc):
                raise translate_redis_error(exc, what) from exc
            raise

    async def run_script(
        self,
        script: Any,
        keys: list[Any],
        args: list[Any],
        *,
        what: str,
        timeout: float | None = None,
        wait: bool = True,
    ) -> Any:
        """Run a registered script as a tier write (with its WAIT when ``replicated``).

        ``primary`` (or ``wait=False``, for a copy that can be rebuilt): the
        script, as redis-py runs it (it reloads a lost script). ``replicated``:
        the script and ``WAIT`` on one connection in one round trip; a shortfall
        raises :class:`BackendUnavailableError` (the write may have landed: the
        scripts are idempotent).
        """
        try:
            async with asyncio.timeout(timeout):
                if not wait:
                    return await script(keys=keys, args=args)
                return await self._run_script(script, keys, args, what)
        except Exception as exc:
            if is_redis_failure(exc):
                raise translate_redis_error(exc, what) from exc
            raise

    async def evalsha(self, script: Any, keys: list[Any], args: list[Any], *, what: str) -> Any:
        """Run ``script`` through the auto-pipeline of the running loop (coalesced)."""
        return await self.auto_pipeline().evalsha(script, keys, args, what)

    def auto_pipeline(self) -> AutoPipeline | _Direct:
        """The auto-pipeline of the running loop (a new loop gets a new one).

        A cluster client gets a pass-through that sends each call on its own.
        """
        found = self._pipeline
        if found is None or found.loop is not asyncio.get_running_loop():
            found = self._pipeline = _Direct(self) if self.cluster else AutoPipeline(self)
        return found

    async def _run_script(self, script: Any, keys: list[Any], args: list[Any], what: str) -> Any:
        waits = self._waits
        if waits is None:
            return await script(keys=keys, args=args)
        if self.cluster:
            return await self._cluster_pair(waits.durability, script, keys, args, what)
        flat = (*keys, *args)
        for attempt in range(2):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.execute_command("EVALSHA", script.sha, len(keys), *flat)
                pipe.execute_command(*wait_args(waits.durability))
                reply, acked = await pipe.execute(raise_on_error=False)
            if _is_noscript(reply) and attempt == 0:
                # A restarted or promoted server lost the script: load it, send again.
                await self.client.script_load(script.script)
                continue
            return self._settle(reply, acked, what)
        raise AssertionError("unreachable")

    def _settle(self, reply: Any, acked: Any, what: str) -> Any:
        """The script's reply, or its error, or the shortfall error of a landed write."""
        if isinstance(reply, BaseException):
            raise reply
        short = self.wait_shortfall(acked, what)
        if short is not None:
            raise short
        return reply

    async def _cluster_pair(
        self, durability: Durability, script: Any, keys: list[Any], args: list[Any], what: str
    ) -> Any:
        """EVALSHA + WAIT pinned to the node of ``keys[0]``'s slot (one connection of it)."""
        client = self.client
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
            return self._settle(reply, acked, what)
        raise AssertionError("unreachable")

    # --- durability -----------------------------------------------------------------------------

    @property
    def durability(self) -> Durability | None:
        """The ``replicated`` level, or None for ``primary`` (no WAIT)."""
        return None if self._waits is None else self._waits.durability

    def set_durability(self, level: str, *, replicas: int = 1, timeout_ms: int = 1000) -> None:
        """Make the backend's writes ``primary`` or ``replicated`` (WAIT replicas timeout_ms)."""
        if level == "primary":
            self._waits = None
            return
        if level != "replicated":
            raise ValueError(f"durability level must be 'primary' or 'replicated', not {level!r}")
        if replicas < 1 or timeout_ms <= 0:
            raise ValueError("replicated durability needs replicas >= 1 and timeout_ms > 0")
        self._waits = _Waits(Durability(replicas=replicas, timeout_ms=timeout_ms))

    def durability_health(self) -> dict[str, Any]:
        """The level and, with ``replicated``, WAIT counts and the last shortfall."""
        waits = self._waits
        if waits is None:
            return {"level": "primary"}
        last = waits.last_shortfall
        return {
            "level": "replicated",
            "replicas": waits.durability.replicas,
            "wait_timeout_ms": waits.durability.timeout_ms,
            "waits": waits.waits,
            "shortfalls": waits.shortfalls,
            "last_shortfall": None
            if last is None
            else {
                "at": round(last.at, 3),
                "wanted": last.wanted,
                "got": last.got,
                "what": last.what,
            },
        }

    def wait_shortfall(self, reply: Any, what: str) -> BackendUnavailableError | None:
        """The error for a ``WAIT`` reply that confirmed too few replicas, else None.

        Counts the WAIT and records a shortfall for :meth:`durability_health`. An
        error reply (the server is not a primary any more...) is a shortfall with
        0 replicas: nothing confirmed the write.
        """
        waits = self._waits
        if waits is None:
            return None
        waits.waits += 1
        wanted = waits.durability.replicas
        got = reply if isinstance(reply, int) and not isinstance(reply, bool) else 0
        if got >= wanted:
            waits.short_since = None
            return None
        waits.shortfalls += 1
        if waits.short_since is None:
            waits.short_since = time.time()
        timeout_ms = waits.durability.timeout_ms
        waits.last_shortfall = Shortfall(time.time(), wanted, got, timeout_ms, what)
        why = (
            f"WAIT failed ({type(reply).__name__}: {str(reply)[:120]})"
            if isinstance(reply, BaseException)
            else f"WAIT confirmed {got} of {wanted} replicas in {timeout_ms} ms"
        )
        return BackendUnavailableError(
            f"{what}: not replicated ({why}); queued as for an outage (REDIS_DURABILITY=replicated)"
        )

    async def connected_replicas(self) -> int | None:
        """How many replicas the primary has connected now, or None on a cluster.

        ``INFO replication``'s ``connected_slaves``; a cluster has one primary per
        shard, so there the WAIT shortfalls alone tell the state. Raises redis-py's
        errors (a health probe translates them itself).
        """
        if self.cluster:
            return None
        info = await self.client.info("replication")
        return int(info.get("connected_slaves", 0))

    def replica_state(self, connected: int | None, queued: int) -> dict[str, Any]:
        """Whether ``replicated`` writes can be confirmed now, for health (empty for ``primary``).

        ``state``: ``ok``; ``no replica: writes queued`` (or ``1 of 2 replicas: ...``)
        when fewer replicas than required are connected; ``replicas not
        confirming: writes queued`` when they are connected but the last WAIT fell
        short. ``queued``: the Redis writes waiting in this process's outboxes;
        ``since``: when this began (epoch seconds), else None.
        """
        waits = self._waits
        if waits is None:
            return {}
        wanted = waits.durability.replicas
        few = connected is not None and connected < wanted
        if not few:
            waits.few_since = None
        elif waits.few_since is None:
            waits.few_since = time.time()
        if few:
            label: str | None = (
                "no replica" if connected == 0 else f"{connected} of {wanted} replicas"
            )
        elif waits.short_since is not None:
            label = "replicas not confirming"
        else:
            label = None
        began = [t for t in (waits.short_since, waits.few_since) if t is not None]
        return {
            "state": "ok" if label is None else f"{label}: writes queued",
            "connected_replicas": connected,
            "queued": queued,
            "since": round(min(began), 3) if label is not None and began else None,
        }


# command, args, kwargs, what, future
_Read = tuple[str, tuple[Any, ...], dict[str, Any], str, "asyncio.Future[Any]"]


class _ReadBatch:
    """The commands of :meth:`RedisBackend.batched_reads`, sent a loop iteration at a time."""

    def __init__(self, backend: RedisBackend, timeout: float | None) -> None:
        self.backend = backend
        self.open = True
        self._timeout = timeout
        self._queue: list[_Read] = []
        self._sending: set[asyncio.Task[None]] = set()
        self.round_trips = 0

    def add(
        self, command: str, args: tuple[Any, ...], kwargs: dict[str, Any], what: str
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queue:
            # Sent on the next iteration: every read issued in this one joins it.
            loop.call_soon(self._start)
        self._queue.append((command, args, kwargs, what, future))
        return future

    def _start(self) -> None:
        batch, self._queue = self._queue, []
        task = asyncio.get_running_loop().create_task(self._send(batch), name="jarvismem-reads")
        self._sending.add(task)  # held until done (the loop keeps weak references only)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Read]) -> None:
        live = [item for item in batch if not item[4].done()]
        if not live:
            return
        self.round_trips += 1
        try:
            async with asyncio.timeout(self._timeout):
                async with self.backend.client.pipeline(transaction=False) as pipe:
                    for command, args, kwargs, _, _ in live:
                        getattr(pipe, command)(*args, **kwargs)
                    replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:
            _fail_all(live, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        _settle(live, replies)


_READS: ContextVar[_ReadBatch | None] = ContextVar("jarvismem_redis_reads", default=None)
"""The read batch the running task joins (set by :meth:`RedisBackend.batched_reads`)."""


def _wanted(settings: Settings) -> Durability | None:
    if settings.redis_durability != "replicated":
        return None
    return Durability(settings.redis_wait_replicas, settings.redis_wait_timeout_ms)


def _disagreement(held: Durability | None, wanted: Durability | None) -> str:
    told = (
        "REDIS_DURABILITY=primary"
        if wanted is None
        else f"REDIS_DURABILITY=replicated, REDIS_WAIT_REPLICAS={wanted.replicas}, "
        f"REDIS_WAIT_TIMEOUT_MS={wanted.timeout_ms}"
    )
    has = (
        "primary"
        if held is None
        else f"replicated ({held.replicas} replica(s), {held.timeout_ms} ms)"
    )
    return (
        f"the Redis backend passed in is already {has} but the settings say {told}: "
        "make them agree (one backend, one durability level)"
    )


def wait_args(durability: Durability) -> tuple[str, int, int]:
    """The ``WAIT`` command of ``durability``, for a pipeline."""
    return ("WAIT", durability.replicas, durability.timeout_ms)


def _is_noscript(reply: object) -> bool:
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, RedisError) and str(reply).startswith("NOSCRIPT")
    )


# --- auto-pipelining ------------------------------------------------------------------------

MAX_BATCH = 512
"""Most commands in one pipelined round trip (bounds one reply's parse on the loop)."""

# script, keys + args (flat), number of keys, what (for error messages), future.
_Pending = tuple[Any, tuple[Any, ...], int, str, "asyncio.Future[Any]"]


class AutoPipeline:
    """Coalesces one backend's script calls in one event loop; see the module doc.

    ``round_trips`` and ``commands`` count what was sent (tests assert on them,
    never on time).
    """

    def __init__(self, backend: RedisBackend, *, max_batch: int = MAX_BATCH) -> None:
        self._backend = backend
        self._redis = backend.client
        self._loop = asyncio.get_running_loop()
        self._max_batch = max(1, max_batch)
        self._queue: list[_Pending] = []
        self._busy = False
        self.round_trips = 0
        self.commands = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this pipeline belongs to."""
        return self._loop

    async def evalsha(self, script: Any, keys: list[Any], args: list[Any], what: str) -> Any:
        """Run the registered ``script`` (a redis-py ``Script``) with ``keys``/``args``.

        Returns the script's reply. Raises jarvismem's errors only:
        :class:`~jarvismem.errors.BackendUnavailableError` for an outage
        (the command may or may not have run) and
        :class:`~jarvismem.errors.BackendRejectedError` for a refusal, both
        naming ``what``.
        """
        flat = (*keys, *args)
        if self._busy:
            future: asyncio.Future[Any] = self._loop.create_future()
            self._queue.append((script, flat, len(keys), what, future))
            return await future
        self._busy = True
        try:
            return await self._lone(script, flat, len(keys), what)
        finally:
            self._release()

    async def _lone(self, script: Any, flat: tuple[Any, ...], nkeys: int, what: str) -> Any:
        """One plain EVALSHA (nothing else in flight), loading the script if it was lost."""
        if self._backend.durability is not None:
            # The append and its WAIT on one connection: a two-command pipeline.
            item = (script, flat, nkeys, what, self._loop.create_future())
            try:
                reply = (await self._send([item]))[0]
            except Exception as exc:
                if not is_redis_failure(exc):
                    raise
                raise _translate(exc, what) from exc
            if isinstance(reply, BaseException):
                raise _translate(reply, what) from reply
            return reply
        self.round_trips += 1
        self.commands += 1
        try:
            try:
                return await self._redis.execute_command("EVALSHA", script.sha, nkeys, *flat)
            except NoScriptError:
                await self._redis.script_load(script.script)
                self.round_trips += 1
                return await self._redis.execute_command("EVALSHA", script.sha, nkeys, *flat)
        except Exception as exc:
            if not is_redis_failure(exc):
                raise
            raise _translate(exc, what) from exc

    def _release(self) -> None:
        if self._queue:
            # Still busy: the queue goes out as one pipeline on the next
            # iteration, with whatever the resumed callers add meanwhile.
            self._loop.create_task(self._drain(), name="jarvismem-auto-pipeline")
        else:
            self._busy = False

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: len(batch)]
                live = [item for item in batch if not item[4].done()]
                if not live:
                    continue
                try:
                    replies = await self._send(live)
                except BaseException as exc:
                    # The connection failed (or the loop is shutting down).
                    _fail_all(live, exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                _settle(live, replies)
        finally:
            self._busy = False
            if self._queue:  # arrived during a cancellation: do not strand them
                self._busy = True
                self._loop.create_task(self._drain(), name="jarvismem-auto-pipeline")

    async def _send(self, items: list[_Pending]) -> list[Any]:
        """One pipeline of EVALSHAs; reloads a lost script once and resends what met it."""
        replies = await self._pipeline(items)
        again = [i for i, reply in enumerate(replies) if _is_noscript(reply)]
        if again:
            for source in {items[i][0].script for i in again}:
                await self._redis.script_load(source)
            resent = await self._pipeline([items[i] for i in again])
            for i, reply in zip(again, resent, strict=True):
                replies[i] = reply
        return replies

    async def _pipeline(self, items: list[_Pending]) -> list[Any]:
        """One round trip; with ``replicated``, a shortfall replaces each landed reply."""
        durability = self._backend.durability
        self.round_trips += 1
        self.commands += len(items)
        async with self._redis.pipeline(transaction=False) as pipe:
            for script, flat, nkeys, _, _ in items:
                pipe.execute_command("EVALSHA", script.sha, nkeys, *flat)
            if durability is not None:
                # One WAIT after the batch: same connection, it covers every append before it.
                pipe.execute_command(*wait_args(durability))
            replies = list(await pipe.execute(raise_on_error=False))
        if durability is None:
            return replies
        acked = replies.pop()
        landed = [i for i, reply in enumerate(replies) if not isinstance(reply, BaseException)]
        if landed:
            short = self._backend.wait_shortfall(acked, items[landed[0]][3])
            if short is not None:
                for i in landed:
                    replies[i] = BackendUnavailableError(
                        f"{items[i][3]}: {str(short).partition(': ')[2]}"
                    )
        return replies


class _Direct:
    """The pass-through for Redis Cluster clients: one plain command per call."""

    def __init__(self, backend: RedisBackend) -> None:
        self._backend = backend
        self._loop = asyncio.get_running_loop()
        self.round_trips = 0
        self.commands = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def evalsha(self, script: Any, keys: list[Any], args: list[Any], what: str) -> Any:
        self.round_trips += 1
        self.commands += 1
        try:
            # The Script object routes by its first key and reloads a lost script;
            # with replicated durability, the WAIT goes to that key's node.
            return await self._backend._run_script(script, keys, args, what)
        except Exception as exc:
            if not is_redis_failure(exc):
                raise
            raise _translate(exc, what) from exc


def _fail_all(items: Sequence[tuple[Any, ...]], exc: BaseException) -> None:
    """Every caller of a round trip that failed as a whole gets its own error."""
    for item in items:
        what, future = item[3], item[4]
        if not future.done():
            future.set_exception(_translate(exc, what))


def _settle(items: Sequence[tuple[Any, ...]], replies: Sequence[Any]) -> None:
    """Each caller of a round trip gets its own reply, or its own reply's error.

    A caller that gave up meanwhile (its own timeout) is skipped; its command
    may have run.
    """
    for item, reply in zip(items, replies, strict=True):
        what, future = item[3], item[4]
        if future.done():
            continue
        if isinstance(reply, BaseException):
            future.set_exception(_translate(reply, what))
        else:
            future.set_result(reply)


def _translate(exc: BaseException, what: str) -> Exception:
    """jarvismem's error for ``exc`` (each caller gets a new object: tracebacks are per raise)."""
    if isinstance(exc, BackendUnavailableError):
        return BackendUnavailableError(str(exc))
    if isinstance(exc, asyncio.CancelledError):
        return BackendUnavailableError(f"{what}: cancelled before Redis answered")
    return translate_redis_error(exc, what)
