"""Health: is each backend configured, reachable, how fast, and what is queued.

Used by ``UnifiedMemory.health()``, ``MemoryRuntime.health()`` and the
``jarvismem status`` command. Never includes a secret: URLs are masked and
error texts come from exception types and server messages only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from jarvismem.backends.redis import EMBEDDED_NOTE, is_embedded
from jarvismem.redaction import mask_url

if TYPE_CHECKING:
    from jarvismem.memory import UnifiedMemory
    from jarvismem.runtime import MemoryRuntime

PROBE_TIMEOUT = 3.0


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


async def _redis_health(rt: MemoryRuntime) -> dict[str, Any]:
    if rt.redis is None:
        return {"configured": False}
    s = rt.settings
    if is_embedded(rt.redis):
        backend, where = "embedded", EMBEDDED_NOTE
    else:
        backend = "redis-cluster" if s.redis_cluster else "redis"
        where = mask_url(s.redis_url or "") if s.redis_url else "client passed in"
    ok, latency, reason, _ = await _probe(rt.redis.ping)
    return {
        "configured": True,
        "backend": backend,
        "where": where,
        "reachable": ok,
        "latency_ms": latency,
        "reason": reason,
    }


async def _blob_health(rt: MemoryRuntime) -> dict[str, Any]:
    if rt.blob is None:
        return {"configured": False}
    blob = rt.blob
    ok, latency, reason, _ = await _probe(lambda: blob.exists("health/probe"))
    out: dict[str, Any] = {
        "configured": True,
        "backend": blob.name,
        "reachable": ok,
        "latency_ms": latency,
        "reason": reason,
    }
    if blob.name == "local":
        out["where"] = str(rt.settings.storage_base_path)
    elif blob.name == "azure":
        out["where"] = f"container {rt.settings.azure_storage_container}"
    return out


async def _athena_health(rt: MemoryRuntime) -> dict[str, Any]:
    if rt.athena is None:
        return {"configured": False}
    athena = rt.athena
    ok, latency, reason, value = await _probe(athena.health_detailed)
    out: dict[str, Any] = {
        "configured": True,
        "backend": "athena",
        "where": mask_url(athena.base_url),
        "reachable": ok,
        "latency_ms": latency,
        "reason": reason,
    }
    if value is not None:
        out["status"] = value.status
        out["dependencies"] = dict(value.dependencies)
    return out


async def _llm_health(rt: MemoryRuntime) -> dict[str, Any]:
    client = getattr(rt.summarizer, "client", None)
    if client is None:
        return {"configured": False, "summarizer": getattr(rt.summarizer, "name", "extractive")}
    ok, latency, reason, _ = await _probe(client.ping)
    return {
        "configured": True,
        "summarizer": rt.summarizer.name,
        "where": mask_url(rt.settings.llm_base_url or ""),
        "model": rt.settings.llm_model,
        "reachable": ok,
        "latency_ms": latency,
        "reason": reason,
    }


def _outboxes(rt: MemoryRuntime) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for writer in rt.open_writers():
        out[writer.name] = writer.health()
    for agent_id, task in rt._athena_memories.items():
        if task.done() and task.exception() is None:
            out[f"athena[{agent_id}]"] = task.result().health()
    return out


async def runtime_health(rt: MemoryRuntime) -> dict[str, Any]:
    """Health of every backend of a runtime and of its outboxes."""
    redis, blob, athena, llm = await asyncio.gather(
        _redis_health(rt), _blob_health(rt), _athena_health(rt), _llm_health(rt)
    )
    backends = {"redis": redis, "blob": blob, "athena": athena, "llm": llm}
    outboxes = _outboxes(rt)
    reasons = [
        f"{name}: {b['reason']}"
        for name, b in backends.items()
        if b.get("configured") and b.get("reason")
    ]
    for name, box in outboxes.items():
        if box.get("pending"):
            reasons.append(f"{name}: {box['pending']} write(s) queued in the local outbox")
        if box.get("dropped"):
            reasons.append(
                f"{name}: {box['dropped']} write(s) dropped (outbox full or local disk error)"
            )
        if box.get("dead_lettered"):
            reasons.append(
                f"{name}: {box['dead_lettered']} write(s) refused by the backend for good, "
                "kept in the outbox's .dead file"
            )
        if box.get("foreign"):
            reasons.append(
                f"{name}: {box['foreign']} record(s) stamped for another destination, not sent"
            )
    return {
        "ok": not reasons,
        "degraded": bool(reasons),
        "reasons": reasons,
        "namespace": rt.keyspace.namespace,
        "embedded": rt.embedded,
        "backends": backends,
        "outboxes": outboxes,
    }


async def memory_health(mem: UnifiedMemory) -> dict[str, Any]:
    """Runtime health plus which tiers are active for this view."""
    out = await runtime_health(mem.runtime)
    out["tiers"] = {
        "working": mem.working is not None,
        "episodic": mem.episodic is not None,
        "ltm": mem.ltm is not None,
        "athena": mem.runtime.athena is not None,
    }
    return out
