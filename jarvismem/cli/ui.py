"""``jarvismem ui``: the read-only inspector in the browser (:mod:`jarvismem.ui`).

Binds to loopback by default; anywhere else it needs ``JARVISMEM_UI_TOKEN`` and
refuses to start without it. Prints the URL once it serves (``--json``: one JSON
object). Needs the ``ui`` extra; without it the command says how to install it.
"""

from __future__ import annotations

import argparse
import logging
import webbrowser
from typing import Any

from jarvismem.cli._args import port
from jarvismem.cli._context import CliContext
from jarvismem.errors import ConfigError
from jarvismem.runtime import MemoryRuntime
from jarvismem.ui.security import check_bind, is_loopback

log = logging.getLogger(__name__)

INSTALL_HINT = "the ui extra is not installed: pip install 'jarvismem[ui]' (jarvismem ui needs it)"
DEFAULT_PORT = 8765


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``ui`` to the ``jarvismem`` parser."""
    p = sub.add_parser(
        "ui",
        parents=[common],
        help="a read-only inspector of workflows, turns, state, summary, spaces, recall, health",
        description="Serves a read-only inspector of the namespace's memory in the browser: "
        "workflows, a workflow's timeline with a live tail, a step's checkpoint and bundle, "
        "the long-term summary, spaces, recall and health with every outbox. Each page also "
        "answers JSON (?format=json). Loopback only unless JARVISMEM_UI_TOKEN is set. "
        "Needs the ui extra: pip install 'jarvismem[ui]'.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=port,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"port (default {DEFAULT_PORT}; 0 takes a free one)",
    )
    p.add_argument("--open", action="store_true", help="open the inspector in a browser")
    p.set_defaults(handler=ui, interrupt_exit=0)


async def ui(ctx: CliContext) -> int:
    """Serve until SIGINT/SIGTERM; exit 0."""
    a = ctx.args
    settings = ctx.settings()
    token = settings.jarvismem_ui_token.get_secret_value() if settings.jarvismem_ui_token else None
    check_bind(a.host, token)
    try:
        # Lazy on purpose: the web stack is the optional ui extra.
        from jarvismem.integrations.asgi import listen_socket, serve_asgi
        from jarvismem.ui.app import create_app
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    sock = listen_socket(a.host, a.port)
    try:
        # No outbox poller: the inspector never replays (writes) anything.
        rt = await MemoryRuntime.from_env(
            settings, require_redis=False, warn_degraded=False, background=False
        )
        try:
            app = create_app(rt, token=token, loopback=is_loopback(a.host))
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            url = f"http://{shown}:{port}/"
            info = {
                "url": url,
                "namespace": rt.keyspace.namespace,
                "token_required": token is not None,
            }

            def ready() -> None:
                ctx.out.result(info, lambda d: f"jarvismem inspector at {d['url']} (read-only)")
                if a.open:
                    webbrowser.open(url)

            verbosity = int(getattr(a, "verbose", 0) or 0)
            level = "warning" if verbosity == 0 else "info" if verbosity == 1 else "debug"
            await serve_asgi(app, sock, log_level=level, on_ready=ready)
        finally:
            await rt.close()
    finally:
        sock.close()
    return 0
