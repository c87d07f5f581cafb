"""Health: is each backend configured, reachable, how fast, and what is queued.

Functions over a runtime's clients and outboxes (and a view's tiers), used by
``UnifiedMemory.health()``, ``MemoryRuntime.health()`` and the ``jarvismem
status`` command. Never includes a secret: URLs are masked and error texts come
from exception types and server messages only.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from jarvismem.backends.blob import BlobStorage, LocalBlobStorage
from jarvismem.backends.llm import Summarizer
from jarvismem.backends.redis import RedisBackend
from jarvismem.backends.redis_connect import (
    IN_PROCESS_NOTE,
    is_embedded_server,
    ping_redis,
    probe_redis_call,
    redis_destination,
)
from jarvismem.backends.redis_embedded import NO_SERVER_HINT, embedded_server
from jarvismem.backends.redis_sentinel import is_sentinel_url
from jarvismem.engine.athena_agents import AthenaAgents
from jarvismem.engine.summarizer import OnDemandSummarizer
from jarvismem.engine.workflow import WorkflowState
from jarvismem.keys import KeySpace
from jarvismem.redaction import mask_url
from jarvismem.settings import Settings
from jarvismem.tiers.durable import DurableWriter
from jarvismem.tiers.working import WorkingScratchpad

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient


class Monitored(Protocol):
    """What health reads of a :class:`~jarvismem.memory.MemoryRuntime` (which sits above)."""

    settings: Settings
    keyspace: KeySpace
    backend: RedisBackend | None
    blob: BlobStorage | None
    athena: AthenaClient | None
    summarizer: Summarizer
    athena_agents: AthenaAgents | None

    @property
    def in_process(self) -> bool:
        """True when Redis is the ephemeral in-process stand-in (``REDIS_URL=memory://``)."""
        ...

    def open_writers(self) -> list[DurableWriter]:
        """The durable writers alive now."""
        ...

    def redis_writers(self) -> list[DurableWriter]:
        """The Redis durable writers alive now."""
        ...


PROBE_TIMEOUT = 3.0
"""Seconds a backend has to answer a health probe before it counts as unreachable."""


async def _probe(fn: Callable[[], Awaitable[Any]]) -> tuple[bool, float | None, str | None, Any]:
    start = time.perf_counter()
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            value = await fn()
    except TimeoutError:
        return False, None, f"timed out after {PROBE_TIMEOUT:g}s", None
    except Exception as exc:
        return False, None, f"{type(exc).__name__}: {exc}"[:300], None
    return True, round((time.perf_counter() - start) * 1000, 3), None, value


def _reason(exc_reason: str | None) -> str | None:
    # Our own errors carry a full sentence; a class name in front adds nothing.
    if exc_reason is None:
        return None
    for prefix in (
        "ConfigError: ",
        "BackendUnavailableError: ",
        "BlobRejectedError: ",
        "BlobUnavailableError: ",
    ):
        exc_reason = exc_reason.removeprefix(prefix)
    return exc_reason


async def _write_probe(out: dict[str, Any], fn: Callable[[], Awaitable[Any]]) -> None:
    """Run a write probe; record ``writable`` and, on failure, the reason."""
    ok, _latency, reason, _ = await _probe(fn)
    out["writable"] = ok
    if not ok:
        out["reason"] = _not_writable(reason)


def _not_writable(reason: str | None) -> str:
    text = _reason(reason) or "write refused"
    return text if "not writable" in text else f"not writable: {text}"


Step = tuple[str, Callable[[], Awaitable[Any]]]

CLEANUP_STEP = "clean up"
"""The write check's last step: run whenever its write landed, even after a failed read."""


async def _write_check(out: dict[str, Any], steps: list[Step]) -> None:
    """Run the write check's ``steps`` in order; record them and ``writable``.

    ``out["write_check"]`` is ``{"ok", "ms", "failed_step", "steps": [{"step", "ok",
    "ms", "reason"}]}``: ``ok`` None for a step not run (after an earlier failure),
    ``ms`` its time. The clean-up step still runs after a failed read-back, so a
    probe that was written is removed. ``writable`` is whether every step passed;
    on a failure ``reason`` names the step.
    """
    results: list[dict[str, Any]] = []
    failed: str | None = None
    reason: str | None = None
    wrote = False
    for name, fn in steps:
        if failed is not None and not (name == CLEANUP_STEP and wrote):
            results.append({"step": name, "ok": None, "ms": None, "reason": None})
            continue
        ok, ms, why, _ = await _probe(fn)
        results.append({"step": name, "ok": ok, "ms": ms, "reason": _reason(why)})
        wrote = wrote or (ok and name == "write")
        if not ok and failed is None:
            failed, reason = name, why
    total = sum(r["ms"] for r in results if r["ms"] is not None)
    out["write_check"] = {
        "ok": failed is None,
        "ms": round(total, 3),
        "failed_step": failed,
        "steps": results,
    }
    out["writable"] = failed is None
    if failed is not None:
        out["reason"] = f"{_not_writable(reason)} (write check failed at: {failed})"


def _write_check_not_run(out: dict[str, Any], why: str) -> None:
    """Record that the write check was asked for but could not run (``writable`` unknown)."""
    out["write_check"] = {"ok": None, "ms": None, "failed_step": None, "steps": [], "why": why}


def _expect(value: bytes) -> Callable[[Any], None]:
    """A check that what was read back is ``value`` (bytes or, decoded, str)."""

    def check(got: Any) -> None:
        if got is None:
            raise LookupError("the probe written just before is not there")
        if (got if isinstance(got, bytes) else str(got).encode()) != value:
            raise ValueError("the probe read back differs from what was written")

    return check


def _redis_steps(redis: Any, key: str, url: str | None) -> list[Step]:
    value = secrets.token_hex(8).encode()
    check = _expect(value)

    async def read_back() -> None:
        check(await probe_redis_call(lambda: redis.get(key), url))

    async def clean_up() -> None:
        if not await probe_redis_call(lambda: redis.delete(key), url):
            raise LookupError("the probe key was already gone")

    return [
        # A TTL as well: a probe whose DEL never comes (a crash) does not stay.
        ("write", lambda: probe_redis_call(lambda: redis.set(key, value, px=30_000), url)),
        ("read back", read_back),
        (CLEANUP_STEP, clean_up),
    ]


def _blob_steps(blob: Any, path: str) -> list[Step]:
    value = secrets.token_hex(8).encode()
    check = _expect(value)

    async def read_back() -> None:
        check(await blob.read(path))

    return [
        ("write", lambda: blob.write(path, value)),
        ("read back", read_back),
        (CLEANUP_STEP, lambda: blob.delete(path)),
    ]


async def _redis_health(engine: Monitored, write_check: bool) -> dict[str, Any]:
    if engine.backend is None:
        return {"configured": False}
    s = engine.settings
    rb = engine.backend
    redis = rb.client
    url = s.redis_url
    server = None
    if rb.in_process:
        backend, where = "in-process", IN_PROCESS_NOTE
    elif is_embedded_server(s) and _is_client_of(redis, embedded_server(s).socket_address()):
        server = embedded_server(s)
        backend, where, url = "embedded-server", str(server.socket_path), server.url
    else:
        backend = "redis-cluster" if s.redis_cluster else "redis"
        if is_sentinel_url(s.redis_url):
            backend = "redis-sentinel"
        where = mask_url(s.redis_url or "") if s.redis_url else "client passed in"
    ok, latency, reason, _ = await _probe(lambda: ping_redis(redis, url))
    out: dict[str, Any] = {
        "configured": True,
        "backend": backend,
        "where": where,
        "reachable": ok,
        "latency_ms": latency,
        "reason": _reason(reason),
    }
    if server is not None:
        # Binary, version, pid, data folder, AOF size: what runs, and where its data is.
        out["server"] = await server.status()
        if not ok and out["server"]["binary"] is None:
            out["reason"] = f"no Redis server binary for this platform: {NO_SERVER_HINT}"
    if not rb.in_process:
        out["durability"] = rb.durability_health()
        if ok and out["durability"]["level"] == "replicated":
            seen, _, _, connected = await _probe(rb.connected_replicas)
            # The replica count and queue are filled in by engine_health (it has the outboxes).
            out["_replicas"] = connected if seen else None
    if write_check and ok:
        key = engine.keyspace.health_probe(secrets.token_hex(6))
        await _write_check(out, _redis_steps(redis, key, url))
    elif write_check:
        _write_check_not_run(out, "not reachable")
    return out


def _is_client_of(client: Any, socket_address: str) -> bool:
    """True when ``client`` talks to the unix socket ``socket_address`` (not one passed in
    for another server while REDIS_URL is unset)."""
    return redis_destination(client) == f"redis:{socket_address}/0"


def _replicas_reason(durability: dict[str, Any]) -> str | None:
    """``no replica: writes queued (N queued since HH:MM:SS UTC)``, or None when all is well."""
    state = durability.get("state")
    if not state or state == "ok":
        return None
    since = durability.get("since")
    when = "" if since is None else " since " + time.strftime("%H:%M:%S UTC", time.gmtime(since))
    return f"{state} ({durability.get('queued', 0)} queued{when})"


def durability_line(durability: dict[str, Any]) -> str:
    """One line for ``jarvismem status``: the level, the replica state and the last shortfall."""
    if durability.get("level") != "replicated":
        return "durability: primary (a failover may lose the last acknowledged writes)"
    replicas = durability["replicas"]
    line = (
        f"durability: replicated (WAIT {replicas} replica{'s' if replicas != 1 else ''}, "
        f"{durability['wait_timeout_ms']} ms)"
    )
    reason = _replicas_reason(durability)
    if reason is not None:
        line += f"; {reason}"
    last = durability.get("last_shortfall")
    if last:
        ago = max(0.0, time.time() - float(last["at"]))
        line += (
            f"; {durability['shortfalls']} shortfall(s), last {ago:.0f}s ago: "
            f"{last['got']} of {last['wanted']} replicas ({last['what']})"
        )
    return line


async def _blob_health(engine: Monitored, write_check: bool) -> dict[str, Any]:
    if engine.blob is None:
        return {"configured": False}
    blob = engine.blob
    ok, latency, reason, _ = await _probe(lambda: blob.exists("health/probe"))
    out: dict[str, Any] = {
        "configured": True,
        "backend": blob.name,
        "reachable": ok,
        "latency_ms": latency,
        "reason": _reason(reason),
    }
    if blob.name == "local":
        out["where"] = str(engine.settings.storage_base_path)
    elif blob.name == "azure":
        out["where"] = f"container {engine.settings.azure_storage_container}"
    if not ok:
        if write_check:
            _write_check_not_run(out, "not reachable")
    elif write_check:
        steps = _blob_steps(blob, engine.keyspace.health_probe_blob(secrets.token_hex(6)))
        if isinstance(blob, LocalBlobStorage):
            # The folder probe first: its errno says why a folder refuses writes.
            steps.insert(0, ("folder", blob.probe_write))
        await _write_check(out, steps)
    elif isinstance(blob, LocalBlobStorage):
        # A folder one can list but not write to (read-only mount, wrong owner)
        # is not healthy: every scratchpad append would fail. A local probe is
        # one create and one unlink, cheap enough to run on every check.
        await _write_probe(out, blob.probe_write)
    return out


async def _athena_health(engine: Monitored, write_check: bool) -> dict[str, Any]:
    if engine.athena is None:
        return {"configured": False}
    athena = engine.athena
    # GET /api/v1/health carries the credentials (unlike /health): a refused
    # key shows here as an AthenaAuthError, which is the write check's proof
    # of auth without creating a session or an event on the server.
    ok, latency, reason, value = await _probe(athena.health_detailed)
    out: dict[str, Any] = {
        "configured": True,
        "backend": "athena",
        "where": mask_url(athena.base_url),
        "reachable": ok,
        "latency_ms": latency,
        "reason": reason,
    }
    if write_check:
        # Athena has no probe write: the authenticated request above is the check
        # (a refused key fails it), with that request's own time.
        out["writable"] = ok
        step = {"step": "authenticated request", "ok": ok, "ms": latency, "reason": reason}
        out["write_check"] = {
            "ok": ok,
            "ms": latency,
            "failed_step": None if ok else step["step"],
            "steps": [step],
        }
    if value is not None:
        out["status"] = value.status
        out["dependencies"] = dict(value.dependencies)
    return out


async def _llm_health(engine: Monitored) -> dict[str, Any]:
    summarizer = engine.summarizer
    if isinstance(summarizer, OnDemandSummarizer):
        # The runtime's own: probed through the one it keeps (or one made for the probe).
        async with summarizer.using() as made:
            return await _summarizer_health(engine, made)
    return await _summarizer_health(engine, summarizer)


async def _summarizer_health(engine: Monitored, summarizer: Summarizer) -> dict[str, Any]:
    client = getattr(summarizer, "client", None)
    if client is None:
        return {"configured": False, "summarizer": getattr(summarizer, "name", "extractive")}
    ok, latency, reason, _ = await _probe(client.ping)
    return {
        "configured": True,
        "summarizer": summarizer.name,
        "where": mask_url(engine.settings.llm_base_url or ""),
        "model": engine.settings.llm_model,
        "reachable": ok,
        "latency_ms": latency,
        "reason": reason,
    }


def _outboxes(engine: Monitored) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for writer in engine.open_writers():
        out[writer.name] = writer.health()
    if engine.athena_agents is not None:
        for agent_id, memory in engine.athena_agents.started():
            out[f"athena[{agent_id}]"] = memory.health()
    return out


def _replicated_state(engine: Monitored, redis: dict[str, Any]) -> str | None:
    """Fill in the replica state of a ``replicated`` client; its reason when not ok."""
    connected = redis.pop("_replicas", None)
    durability = redis.get("durability")
    if engine.backend is None or not durability:
        return None
    if durability.get("level") == "replicated":
        queued = sum(len(writer.outbox) for writer in engine.redis_writers())
        durability.update(engine.backend.replica_state(connected, queued))
    redis["status"] = durability_line(durability)
    return _replicas_reason(durability)


async def engine_health(engine: Monitored, *, write_check: bool = False) -> dict[str, Any]:
    """Health of every backend of an engine and of its outboxes.

    ``ok`` is False (and ``reasons`` says why) when a configured backend does
    not answer, a local blob folder is not writable, or an outbox holds,
    dropped or dead-lettered writes. ``write_check=True`` also proves write
    access and credentials on every backend (``writable`` per backend): a
    SET/DEL of a probe key in the namespace, a blob written and deleted, an
    authenticated Athena request.
    """
    redis, blob, athena, llm = await asyncio.gather(
        _redis_health(engine, write_check),
        _blob_health(engine, write_check),
        _athena_health(engine, write_check),
        _llm_health(engine),
    )
    backends = {"redis": redis, "blob": blob, "athena": athena, "llm": llm}
    outboxes = _outboxes(engine)
    replica_reason = _replicated_state(engine, redis)
    reasons = [
        f"{name}: {b['reason']}"
        for name, b in backends.items()
        if b.get("configured") and b.get("reason")
    ]
    if replica_reason is not None:
        reasons.append(f"redis: {replica_reason}")
    for name, box in outboxes.items():
        if box.get("pending"):
            reasons.append(f"{name}: {box['pending']} write(s) queued in the local outbox")
        if box.get("dropped"):
            reasons.append(
                f"{name}: {box['dropped']} write(s) dropped (outbox full or local disk error)"
            )
        if box.get("disk_error"):
            reasons.append(f"{name}: local outbox disk: {box['disk_error']}")
        if box.get("dead_lettered"):
            reasons.append(
                f"{name}: {box['dead_lettered']} write(s) refused by the backend for good, "
                "kept in the outbox's .dead file"
            )
        if box.get("foreign"):
            reasons.append(
                f"{name}: {box['foreign']} of them stamped for another destination, never sent"
            )
    return {
        "ok": not reasons,
        "degraded": bool(reasons),
        "reasons": reasons,
        "namespace": engine.keyspace.namespace,
        "in_process": engine.in_process,
        "backends": backends,
        "outboxes": outboxes,
    }


async def memory_health(
    engine: Monitored, workflow: WorkflowState, working: WorkingScratchpad | None
) -> dict[str, Any]:
    """Engine health plus which tiers are active for one view (its workflow and scratchpad)."""
    out = await engine_health(engine)
    out["tiers"] = {
        "working": working is not None,
        "episodic": workflow.ledger is not None,
        "ltm": workflow.ltm is not None,
        "athena": engine.athena is not None,
    }
    return out
