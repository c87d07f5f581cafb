"""``jarvismem mcp``: serve one agent's memory in one workflow to MCP clients.

Over stdio (the default: an IDE or agent host starts the command and speaks MCP
on its stdin/stdout, so nothing else is printed there) or streamable HTTP at
``http://HOST:PORT/mcp``, where the address is printed once it listens (``--json``:
one JSON object). Workflow, agent and namespace are fixed here, for the life of
the server; ``--read-only`` leaves out the tools that write. The tools are
described in :mod:`jarvismem.integrations.mcp`.

It needs the ``mcp`` extra; without it the command says how to install it
(exit 2, like any other configuration error) and the rest of the CLI is unaffected.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from jarvismem.cli._args import port
from jarvismem.cli._context import CliContext
from jarvismem.cli._output import error_line
from jarvismem.errors import ConfigError
from jarvismem.keys import validate_id
from jarvismem.ui.security import is_loopback

log = logging.getLogger(__name__)

TRANSPORTS = ("stdio", "http")

INSTALL_HINT = (
    "the mcp extra is not installed: pip install 'jarvismem[mcp]' (jarvismem mcp needs it)"
)

_HTTP_PORT = 8765
"""The HTTP transport's port when none is given (one that local tools seldom take)."""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``mcp`` to the ``jarvismem`` parser."""
    p = sub.add_parser(
        "mcp",
        parents=[common],
        help="serve an agent's memory to MCP clients (stdio or streamable HTTP)",
        description="Serves the memory of one agent in one workflow as MCP tools: remember, "
        "recall, bundle, tail, spaces_get, spaces_put, and context/search when Athena is "
        "configured. Workflow, agent and namespace are fixed for the server's life. Over "
        "stdio nothing but MCP is written on stdout; over HTTP the endpoint's URL is printed "
        "once it listens. Needs the mcp extra: pip install 'jarvismem[mcp]'.",
    )
    p.add_argument("--workflow", required=True, help="workflow id every tool acts on")
    p.add_argument("--agent", required=True, help="agent id every tool acts on")
    p.add_argument(
        "--step",
        default=None,
        help="step id `bundle` reads when the caller names none (default: mcp)",
    )
    p.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="stdio",
        help="stdio (default: for a client that starts the command) or http (streamable HTTP)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="with --transport http: the address to listen on (default 127.0.0.1; the server "
        "has no authentication, so keep it on loopback)",
    )
    p.add_argument(
        "--port",
        type=port,
        default=_HTTP_PORT,
        metavar="N",
        help=f"with --transport http: the port (default {_HTTP_PORT}; 0 takes a free one)",
    )
    p.add_argument(
        "--read-only",
        action="store_true",
        help="leave out the tools that write (remember, spaces_put)",
    )
    p.add_argument(
        "--recall-scope",
        choices=("workflow", "agent"),
        default="workflow",
        help="remembered facts of this workflow only (default), or the agent's facts of "
        "every workflow (the memory policy's agent scope)",
    )
    # Ctrl-C is how a server is stopped by hand: not an interruption.
    p.set_defaults(handler=mcp, interrupt_exit=0)


async def mcp(ctx: CliContext) -> int:
    """Serve until the client goes away (stdio) or SIGINT/SIGTERM (HTTP); exit 0."""
    a = ctx.args
    workflow = validate_id(a.workflow, "workflow_id")
    agent = validate_id(a.agent, "agent_id")
    step = None if a.step is None else validate_id(a.step, "step_id")
    try:
        # Lazy on purpose: the module needs the optional mcp extra, which only
        # this command uses.
        from jarvismem.integrations import mcp as server_mod
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    if step is None:
        step = server_mod.VIEW_STEP
    scope = server_mod.McpScope(
        workflow, agent, step_id=step, read_only=a.read_only, recall_scope=a.recall_scope
    )
    sock = server_mod.listen_socket(a.host, a.port) if a.transport == "http" else None
    try:
        async with ctx.runtime() as rt:
            server = server_mod.build_server(rt, scope)
            tools = [tool.name for tool in await server.list_tools()]
            info = {
                "transport": a.transport,
                "url": None if sock is None else server_mod.http_url(sock),
                "namespace": rt.keyspace.namespace,
                "workflow_id": workflow,
                "agent_id": agent,
                "step_id": step,
                "read_only": scope.read_only,
                "recall_scope": scope.recall_scope,
                "tools": tools,
            }
            if sock is None:
                # stdout is the protocol channel: what would be printed goes to the log.
                log.info("serving MCP over stdio: %s", _describe(info))
                await server_mod.serve_stdio(server)
                return 0
            if not is_loopback(a.host):
                error_line(
                    f"warning: listening on {a.host}, not a loopback address; the MCP server "
                    "has no authentication: anyone who reaches the port reads this memory"
                )
            verbosity = int(getattr(a, "verbose", 0) or 0)
            level = "warning" if verbosity == 0 else "info" if verbosity == 1 else "debug"

            def ready() -> None:
                # Printed once it serves: a client (or a script) may connect on seeing it.
                ctx.out.result(info, lambda d: f"serving MCP at {d['url']}: {_describe(d)}")

            await server_mod.serve_http(server, sock, log_level=level, on_ready=ready)
    finally:
        if sock is not None:
            sock.close()
    return 0


def _describe(info: dict[str, Any]) -> str:
    mode = "read-only" if info["read_only"] else "read-write"
    return (
        f"agent {info['agent_id']} in workflow {info['workflow_id']} "
        f"(namespace {info['namespace']}), {mode}; tools: {', '.join(info['tools'])}"
    )
