"""Athena commands: ``context`` (short-term events, mid-term chains) and ``search``.

Both go through ``runtime.athena_memory(agent)``, which reuses the agent's
cached session (shared across processes in Redis), never a throwaway one. They
are reads: they never create a session, so an agent that never wrote (no
cached session) gets an empty answer.
"""

from __future__ import annotations

import argparse
from typing import Any

from jarvismem.cli._args import positive
from jarvismem.cli._context import CliContext
from jarvismem.defaults import SEARCH_LIMIT
from jarvismem.errors import AthenaUnavailableError, ConfigError
from jarvismem.keys import validate_id
from jarvismem.render import render_athena_context, render_hits
from jarvismem.runtime import MemoryRuntime
from jarvismem.tiers.athena import AthenaMemory


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add this group's commands to the ``jarvismem`` parser."""
    p = sub.add_parser("context", parents=[common], help="an agent's Athena memory context")
    p.add_argument("--agent", required=True, help="agent id")
    p.add_argument("--limit", type=positive, default=10, help="short-term events to fetch")
    p.add_argument("--query", default=None, help="rank mid-term chains against this text")
    p.set_defaults(handler=context)

    p = sub.add_parser("search", parents=[common], help="search an agent's Athena memory")
    p.add_argument("--agent", required=True, help="agent id")
    p.add_argument("--query", required=True, help="text to search for")
    p.add_argument(
        "--limit", type=positive, default=SEARCH_LIMIT, help=f"most hits (default {SEARCH_LIMIT})"
    )
    p.set_defaults(handler=search)


async def _athena(rt: MemoryRuntime, agent: str) -> AthenaMemory:
    validate_id(agent, "agent_id")
    if rt.athena is None:
        raise ConfigError("Athena is not configured: set ATHENA_URL (see .env.example)")
    memory = await rt.athena_memory(agent)
    assert memory is not None
    return memory


async def context(ctx: CliContext) -> int:
    """Print the agent's context; exit 1 when Athena does not answer."""
    a = ctx.args
    async with ctx.runtime() as rt:
        memory = await _athena(rt, a.agent)
        data = await memory.get_memory_context(limit=a.limit, query=a.query)
        if data is None:
            health = memory.health()
            raise AthenaUnavailableError(
                f"Athena context unavailable: {health.get('last_error') or 'not supported'}"
            )
    ctx.out.result({"agent_id": a.agent, **data}, render_athena_context)
    return 0


async def search(ctx: CliContext) -> int:
    """Print search hits, best first."""
    a = ctx.args
    async with ctx.runtime() as rt:
        memory = await _athena(rt, a.agent)
        hits = await memory.search(a.query, limit=a.limit)
        last_error = memory.health().get("last_error")
    if not hits and last_error:
        raise AthenaUnavailableError(f"Athena search failed: {last_error}")
    data = {"agent_id": a.agent, "query": a.query, "results": hits}
    ctx.out.result(data, lambda d: render_hits(d["results"]))
    return 0
