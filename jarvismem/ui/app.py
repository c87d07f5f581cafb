"""The inspector's web app: Starlette routes over :mod:`jarvismem.ui.data`.

Read-only by construction: only GET (and HEAD) are routed, and every page reads
through :mod:`jarvismem.ui.data`, which starts no replay and writes nothing.
Each page answers JSON too (``?format=json`` or ``Accept: application/json``),
from the same dict the template renders.

Requests are refused unless they come with the token when one is set, and
unless their ``Host`` is loopback when the server listens on loopback (a web
page elsewhere cannot reach it through DNS rebinding).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from jarvismem.errors import (
    BackendUnavailableError,
    ConfigError,
    InvalidIdError,
    JarvisMemError,
    WorkflowNotFoundError,
)
from jarvismem.keys import validate_id
from jarvismem.render import fmt_ts
from jarvismem.runtime import MemoryRuntime
from jarvismem.ui import data
from jarvismem.ui.security import COOKIE, allowed_host, is_loopback

HERE = Path(__file__).parent
TAIL_POLL_SECONDS = 0.5
"""How often the live tail asks the ledger for newer entries."""

Page = Callable[[Request, MemoryRuntime], Awaitable[tuple[str, dict[str, Any]]]]


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        # Every value on a page is the agent's data: escaped, always.
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["ts"] = lambda v: fmt_ts(v) if v else ""
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    env.filters["text"] = lambda v: v if isinstance(v, str) else json.dumps(v, default=str)
    env.globals["urlencode"] = urlencode
    return env


def _wants_json(request: Request) -> bool:
    if request.query_params.get("format") == "json":
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _error(request: Request, env: Environment, status: int, message: str) -> Response:
    if _wants_json(request):
        return JSONResponse({"error": message, "status": status}, status_code=status)
    html = env.get_template("error.html").render(status=status, message=message, page="error")
    return HTMLResponse(html, status_code=status)


def _status_of(exc: Exception) -> int:
    if isinstance(exc, WorkflowNotFoundError):
        return 404
    if isinstance(exc, InvalidIdError | ValueError | ConfigError):
        return 400
    if isinstance(exc, BackendUnavailableError):
        return 503
    return 500


def _view(env: Environment, template: str, page: Page) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        rt: MemoryRuntime = request.app.state.runtime
        try:
            name, payload = await page(request, rt)
        except (JarvisMemError, ValueError) as exc:
            return _error(request, env, _status_of(exc), str(exc))
        if _wants_json(request):
            return JSONResponse(json.loads(json.dumps(payload, default=str)))
        html = env.get_template(template).render(page=name, d=payload, request=request)
        return HTMLResponse(html)

    return endpoint


# --- pages ---------------------------------------------------------------------------------


async def _workflows(request: Request, rt: MemoryRuntime) -> tuple[str, dict[str, Any]]:
    return "workflows", await data.workflows(rt, request.query_params.get("q", ""))


def _filters(request: Request) -> tuple[str | None, str | None]:
    """The timeline's ``step`` and ``agent`` filters (None when empty)."""
    q = request.query_params
    return q.get("step") or None, q.get("agent") or None


async def _timeline(request: Request, rt: MemoryRuntime) -> tuple[str, dict[str, Any]]:
    q = request.query_params
    step, agent = _filters(request)
    page = await data.timeline(
        rt,
        request.path_params["workflow"],
        after=q.get("after") or None,
        before=q.get("before") or None,
        step=step,
        agent=agent,
    )
    return "timeline", page


async def _step(request: Request, rt: MemoryRuntime) -> tuple[str, dict[str, Any]]:
    agent = request.query_params.get("agent")
    if not agent:
        raise ValueError("the step page needs ?agent=<agent id>")
    state = await data.step_state(
        rt, request.path_params["workflow"], request.path_params["step"], agent
    )
    return "step", state


async def _summary(request: Request, rt: MemoryRuntime) -> tuple[str, dict[str, Any]]:
    return "summary", await data.summary(rt, request.path_params["workflow"])


async def _spaces(request: Request, rt: MemoryRuntime) -> tuple[str, dict[str, Any]]:
    return "spaces", await data.spaces(
        rt, request.path_params["workflow"], request.path_params["agent"]
    )


async def _recall(request: Request, rt: MemoryRuntime) -> tuple[str, dict[str, Any]]:
    return "recall", await data.recall(
        rt,
        request.path_params["workflow"],
        request.path_params["agent"],
        request.query_params.get("q", ""),
        step=request.query_params.get("step") or None,
    )


async def _health(request: Request, rt: MemoryRuntime) -> tuple[str, dict[str, Any]]:
    return "health", await data.health(rt)


async def _tail(request: Request) -> Response:
    """Server-sent events: each new ledger entry (filtered like the page) as one event."""
    rt: MemoryRuntime = request.app.state.runtime
    workflow = request.path_params["workflow"]
    step, agent = _filters(request)
    after = request.query_params.get("after") or None
    try:
        if after is None:
            after = await data.last_id(rt, workflow)
        # Checks the ids and the cursor once; the polls then read the ledger only.
        await data.timeline(rt, workflow, after=after, limit=1, step=step, agent=agent)
        workflow = validate_id(workflow, "workflow_id")
    except (JarvisMemError, ValueError) as exc:
        return PlainTextResponse(str(exc), status_code=_status_of(exc))

    async def events() -> AsyncIterator[str]:
        cursor = after
        yield ": tail open\n\n"
        while not await request.is_disconnected():
            try:
                entries, cursor, more = await data.newer_entries(
                    rt, workflow, cursor, step=step, agent=agent
                )
            except BackendUnavailableError:
                yield "event: outage\ndata: {}\n\n"
                await asyncio.sleep(TAIL_POLL_SECONDS * 4)
                continue
            for entry in entries:
                yield f"data: {json.dumps(entry, default=str)}\n\n"
            if not more:
                await asyncio.sleep(TAIL_POLL_SECONDS)

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )


# --- the app -------------------------------------------------------------------------------


def create_app(runtime: MemoryRuntime, *, token: str | None = None, loopback: bool = True) -> Any:
    """The inspector as an ASGI app over ``runtime`` (which the caller opens and closes).

    ``token``: required of every request (``Authorization: Bearer``, a ``token``
    query parameter that sets a cookie, or the cookie). ``loopback``: the server
    listens on loopback only, so requests must name a loopback ``Host``.
    """
    env = _templates()
    routes = [
        Route("/", _view(env, "workflows.html", _workflows)),
        Route("/health", _view(env, "health.html", _health)),
        Route("/w/{workflow}", _view(env, "timeline.html", _timeline)),
        Route("/w/{workflow}/tail", _tail),
        Route("/w/{workflow}/summary", _view(env, "summary.html", _summary)),
        Route("/w/{workflow}/step/{step}", _view(env, "step.html", _step)),
        Route("/w/{workflow}/spaces/{agent}", _view(env, "spaces.html", _spaces)),
        Route("/w/{workflow}/recall/{agent}", _view(env, "recall.html", _recall)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.runtime = runtime
    return _Guard(app, token=token, loopback=loopback)


class _Guard:
    """ASGI middleware: GET/HEAD only, loopback ``Host``, the token, security headers.

    Plain ASGI rather than Starlette's ``BaseHTTPMiddleware``, which buffers
    nothing but hides client disconnects from a streaming endpoint (the live tail).
    """

    def __init__(self, app: Any, *, token: str | None, loopback: bool) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in _SECURITY_HEADERS]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, request: Request) -> Response | None:
        if request.method not in ("GET", "HEAD"):
            # Nothing here writes: no form, no API, no state-changing verb.
            return PlainTextResponse("read-only", status_code=405, headers={"Allow": "GET, HEAD"})
        if self.loopback and not allowed_host(request.headers.get("host", "")):
            return PlainTextResponse("this inspector answers to loopback names only", 421)
        if self.token is None:
            return None
        given = _token_of(request)
        if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
            return PlainTextResponse("a valid token is required", status_code=401)
        if request.query_params.get("token"):
            # Trade the token in the address for a cookie, and drop it from the URL.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            url = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            redirect = RedirectResponse(url, status_code=303)
            redirect.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
            return redirect
        return None


_SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)


def _token_of(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.query_params.get("token") or request.cookies.get(COOKIE)


__all__ = ["create_app", "is_loopback"]
