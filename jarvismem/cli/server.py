"""``jarvismem server start|stop|status``: the embedded Redis server of this folder.

The server jarvismem runs when ``REDIS_URL`` is unset (see
:mod:`jarvismem.backends.redis_embedded`). ``start`` is what any process does on
its first connection; ``stop`` is the only way it stops (SHUTDOWN: the AOF is
fsynced), and it refuses while other clients are connected unless ``--force``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from jarvismem.backends.redis_embedded import EmbeddedServer, embedded_server
from jarvismem.cli._context import CliContext
from jarvismem.errors import ConfigError
from jarvismem.render import embedded_server_lines


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``server`` command to the ``jarvismem`` parser."""
    p = sub.add_parser(
        "server",
        parents=[common],
        help="the embedded Redis server (used when REDIS_URL is unset): start, stop, status",
    )
    p.add_argument("action", choices=("start", "stop", "status"), help="what to do")
    p.add_argument(
        "--force",
        action="store_true",
        help="stop: even while other clients (running kernels) are connected",
    )
    p.set_defaults(handler=server_command)


def _server(ctx: CliContext) -> EmbeddedServer:
    settings = ctx.settings()
    if settings.redis_url:
        raise ConfigError(
            "REDIS_URL is set, so no embedded server is used: the server command manages "
            "the one jarvismem runs when REDIS_URL is unset"
        )
    return embedded_server(settings)


async def server_command(ctx: CliContext) -> int:
    """Start, stop or describe the embedded server; exit 1 when status finds it down."""
    server = _server(ctx)
    action = ctx.args.action
    if action == "start":
        started = await asyncio.to_thread(server.start)
        status = {**await server.status(), "started": started}
    elif action == "stop":
        status = {**await server.status(), **await server.stop(force=bool(ctx.args.force))}
        status["running"] = False
    else:
        status = await server.status()
    ctx.out.result(status, lambda s: _render(action, s))
    return 1 if action == "status" and not status["running"] else 0


def _render(action: str, status: dict[str, Any]) -> str:
    lines = embedded_server_lines(status)
    if action == "start":
        lines.insert(0, "started" if status.get("started") else "already running")
    elif action == "stop":
        lines = [
            f"stopped (pid {status.get('pid')}); data kept in {status['folder']}"
            if status.get("stopped")
            else f"not running; data in {status['folder']}"
        ]
    return "\n".join(lines)
