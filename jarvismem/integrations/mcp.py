"""An MCP server over memory (the ``mcp`` extra): what ``jarvismem mcp`` serves.

:func:`build_server` exposes one agent's memory in one workflow as MCP tools
(``remember``/``recall``, ``bundle``, ``tail``, ``spaces_get``/``spaces_put``, and
``context``/``search`` with Athena). Namespace, workflow and agent are fixed when the
server is built (:class:`McpScope`) and no tool takes them, so a client cannot reach
another workflow's or agent's memory; recalled facts are scoped to the workflow by
default. Every result passes through the redactor. Docs: docs/integrations.md, "MCP".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from jarvismem import __version__
from jarvismem.defaults import LEDGER_TAIL, RECALL_CONTENT_MAX_CHARS, SEARCH_LIMIT
from jarvismem.errors import AthenaUnavailableError, ConfigError, JarvisMemError
from jarvismem.integrations.asgi import listen_socket, serve_asgi
from jarvismem.keys import validate_id
from jarvismem.memory import UnifiedMemory
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.redaction import redact_value
from jarvismem.render import to_json
from jarvismem.runtime import MemoryRuntime
from jarvismem.spaces.models import validate_space_name
from jarvismem.spaces.store import SpacesStore
from jarvismem.tiers.athena import AthenaMemory

__all__ = [
    "ATHENA_TOOLS",
    "MAX_HITS",
    "MAX_TAIL",
    "VIEW_STEP",
    "WRITE_TOOLS",
    "McpScope",
    "build_server",
    "http_url",
    "listen_socket",
    "serve_http",
    "serve_stdio",
]

log = logging.getLogger(__name__)

VIEW_STEP = "mcp"
"""Step id of the view behind the step-independent tools (recall, spaces, Athena)
and the default step of ``bundle``. Those tools write nothing under it."""

MAX_TAIL = 1000
"""Most ledger entries or bundle turns one call returns: a model's context is finite."""

MAX_HITS = 100
"""Most Athena search hits or context events one call asks for."""

WRITE_TOOLS = ("remember", "spaces_put")
"""The tools that change memory: left out with ``read_only``."""

ATHENA_TOOLS = ("context", "search")
"""The tools that read Athena: listed only when Athena is configured."""


@dataclass(frozen=True)
class McpScope:
    """What every tool of one server acts on, fixed at start-up.

    ``workflow_id``, ``agent_id``: whose memory; ``step_id``: the step ``bundle``
    reads when the caller names none; ``read_only``: no write tools;
    ``recall_scope``: ``"workflow"`` (the default: remembered facts of this
    workflow only) or ``"agent"`` (the agent's facts of every workflow, the memory
    policy's own scope). The namespace is the runtime's (``JARVISMEM_NAMESPACE`` /
    ``--namespace``). Ids are checked on construction
    (:class:`~jarvismem.errors.InvalidIdError`).
    """

    workflow_id: str
    agent_id: str
    step_id: str = VIEW_STEP
    read_only: bool = False
    recall_scope: Literal["workflow", "agent"] = "workflow"

    def __post_init__(self) -> None:
        validate_id(self.workflow_id, "workflow_id")
        validate_id(self.agent_id, "agent_id")
        validate_id(self.step_id, "step_id")
        if self.recall_scope not in ("workflow", "agent"):
            raise ValueError(
                f"recall_scope must be 'workflow' or 'agent', got {str(self.recall_scope)[:40]!r}"
            )


# --- argument types: the input schemas the SDK derives and validates -----------------------

_Content = Annotated[
    str,
    Field(
        description="the fact to store, in plain words",
        min_length=1,
        max_length=RECALL_CONTENT_MAX_CHARS,
    ),
]
_EntryId = Annotated[
    str | None,
    Field(description="an existing entry's id to replace it (an upsert); omit for a new entry"),
]
_Metadata = Annotated[dict[str, str] | None, Field(description="string labels kept with the entry")]
_Query = Annotated[str, Field(description="what to look for, in plain words", min_length=1)]
_Step = Annotated[
    str | None, Field(description="the step of this workflow to rehydrate (default: the server's)")
]
_Turns = Annotated[int, Field(description="recent ledger turns to include", ge=0, le=MAX_TAIL)]
_Goal = Annotated[
    str | None, Field(description="the current goal; Athena's mid-term memory is ranked by it")
]
_TailN = Annotated[int, Field(description="how many of the newest entries", ge=1, le=MAX_TAIL)]
_SpaceName = Annotated[
    str | None,
    Field(description="one space's name (e.g. 'world', 'tasks'); omit for every space"),
]
_SpaceToPut = Annotated[
    str, Field(description="the space to create or replace ('world', 'tasks' or your own)")
]
_SpaceData = Annotated[
    dict[str, Any] | list[Any],
    Field(
        description="the space's whole new content: an object (a map space, as 'world') "
        "or an array (a list space; 'tasks' holds {id, text, status} items)"
    ),
]
_SpaceMetadata = Annotated[
    dict[str, Any] | None, Field(description="free JSON kept with the space (omit to keep it)")
]
_Events = Annotated[
    int | None,
    Field(description="short-term events to fetch (default: the tier's)", ge=1, le=MAX_HITS),
]
_Hits = Annotated[int, Field(description="most hits, best first", ge=1, le=MAX_HITS)]

_READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


class _Memory:
    """The tools' bodies: one scope's memory on one runtime, results as plain dicts."""

    def __init__(self, runtime: MemoryRuntime, scope: McpScope) -> None:
        self.rt = runtime
        self.scope = scope
        # Built once: a view costs no I/O and its spaces store is reused.
        self.view = runtime.memory(scope.workflow_id, scope.step_id, scope.agent_id)
        # Workflow scope: the policy's namespace, entries of the session named by the
        # workflow id (a scope of its own in every recall store), whatever the
        # policy's scope; agent scope: the runtime's policy as it is.
        self.policy: MemoryPolicy = runtime.policy
        self.session_id: str | None = None
        if scope.recall_scope == "workflow":
            self.policy = runtime.policy.model_copy(update={"scope": "session"})
            self.session_id = scope.workflow_id

    def _writable(self, tool: str) -> None:
        if self.scope.read_only:
            raise ToolError(f"{tool} is refused: this server is read-only")

    async def remember(
        self, content: str, entry_id: str | None, metadata: dict[str, str] | None
    ) -> dict[str, Any]:
        self._writable("remember")
        if entry_id is not None:
            validate_id(entry_id, "entry_id")
        entry = await self.view.remember(
            content,
            entry_id=entry_id,
            metadata=metadata,
            session_id=self.session_id,
            policy=self.policy,
        )
        return {"entry": entry.model_dump(mode="json")}

    async def recall(self, query: str) -> dict[str, Any]:
        results = await self.view.recall(query, session_id=self.session_id, policy=self.policy)
        return {"query": query, "results": [r.model_dump(mode="json") for r in results]}

    async def bundle(self, step: str | None, turns: int, query: str | None) -> dict[str, Any]:
        view = self.view
        if step is not None and step != self.scope.step_id:
            view = UnifiedMemory(
                self.scope.workflow_id,
                validate_id(step, "step_id"),
                self.scope.agent_id,
                runtime=self.rt,
            )
        data = await view.rehydrate_bundle(turns, query=query)
        return {
            "workflow_id": view.workflow_id,
            "step_id": view.step_id,
            "agent_id": view.agent_id,
            **data,
        }

    async def tail(self, n: int) -> dict[str, Any]:
        ledger = self.rt.workflow(self.scope.workflow_id).ledger
        if ledger is None:
            raise ConfigError("the ledger needs Redis; set REDIS_URL")
        return {"workflow_id": self.scope.workflow_id, "entries": await ledger.tail(n)}

    def _spaces(self) -> SpacesStore:
        store = self.view.spaces
        if store is None:
            raise ConfigError("cognitive spaces need Redis; set REDIS_URL")
        return store

    async def spaces_get(self, space: str | None) -> dict[str, Any]:
        store = self._spaces()
        head = {"workflow_id": self.scope.workflow_id, "agent_id": self.scope.agent_id}
        if space is not None:
            found = await store.get_space(validate_space_name(space))
            return {**head, "space": space, "kind": found.kind, **found.to_dict()}
        # A container never written reads as a fresh one with a new random id on
        # every call: say there is none instead (as `jarvismem spaces` does).
        exists = await store.exists()
        snapshot = await store.snapshot() if exists else {}
        return {**head, "exists": exists, **snapshot}

    async def spaces_put(
        self, space: str, data: dict[str, Any] | list[Any], metadata: dict[str, Any] | None
    ) -> dict[str, Any]:
        self._writable("spaces_put")
        saved = await self._spaces().put_space(space, data, metadata)
        return {
            "workflow_id": self.scope.workflow_id,
            "agent_id": self.scope.agent_id,
            "space": space,
            "kind": saved.kind,
            **saved.to_dict(),
        }

    async def _athena(self) -> AthenaMemory:
        memory = await self.rt.athena_memory(self.scope.agent_id)
        if memory is None:
            raise ConfigError("Athena is not configured: set ATHENA_URL")
        return memory

    async def context(self, limit: int | None, query: str | None) -> dict[str, Any]:
        memory = await self._athena()
        if limit is None:
            data = await memory.get_memory_context(query=query)
        else:
            data = await memory.get_memory_context(limit=limit, query=query)
        if data is None:
            reason = memory.health().get("last_error") or "not supported by the server"
            raise AthenaUnavailableError(f"Athena context unavailable: {reason}")
        return {"agent_id": self.scope.agent_id, **data}

    async def search(self, query: str, limit: int) -> dict[str, Any]:
        memory = await self._athena()
        hits = await memory.search(query, limit=limit)
        last_error = memory.health().get("last_error")
        if not hits and last_error:
            # An outage reads as "no hits" in the tier; a caller must tell them apart.
            raise AthenaUnavailableError(f"Athena search failed: {last_error}")
        return {"agent_id": self.scope.agent_id, "query": query, "results": hits}


# --- the server -----------------------------------------------------------------------------


def build_server(runtime: MemoryRuntime, scope: McpScope) -> MCPServer:
    """An MCP server whose tools act on ``scope`` through ``runtime`` (which it does not close).

    The runtime must stay open while the server runs; the caller closes it after.
    """
    memory = _Memory(runtime, scope)
    workflow = f"workflow {scope.workflow_id!r} (namespace {runtime.keyspace.namespace!r})"
    where = f"agent {scope.agent_id!r} in {workflow}"
    athena = runtime.athena is not None
    notes = [f"Memory of {where}; every tool acts on it alone."]
    if scope.read_only:
        notes.append("Read-only: remember and spaces_put are off.")
    if not athena:
        notes.append("Athena is not configured: context and search are off.")
    server: MCPServer = MCPServer(
        "jarvismem",
        title="jarvismem memory",
        instructions=" ".join(notes),
        version=__version__,
    )

    def result(data: dict[str, Any]) -> CallToolResult:
        return _result(runtime, data)

    def errors() -> contextlib.AbstractContextManager[None]:
        return _tool_errors(runtime)

    async def remember(
        content: _Content, entry_id: _EntryId = None, metadata: _Metadata = None
    ) -> CallToolResult:
        with errors():
            return result(await memory.remember(content, entry_id, metadata))

    async def recall(query: _Query) -> CallToolResult:
        with errors():
            return result(await memory.recall(query))

    async def bundle(
        step: _Step = None, turns: _Turns = LEDGER_TAIL, query: _Goal = None
    ) -> CallToolResult:
        with errors():
            return result(await memory.bundle(step, turns, query))

    async def tail(n: _TailN = LEDGER_TAIL) -> CallToolResult:
        with errors():
            return result(await memory.tail(n))

    async def spaces_get(space: _SpaceName = None) -> CallToolResult:
        with errors():
            return result(await memory.spaces_get(space))

    async def spaces_put(
        space: _SpaceToPut, data: _SpaceData, metadata: _SpaceMetadata = None
    ) -> CallToolResult:
        with errors():
            return result(await memory.spaces_put(space, data, metadata))

    async def context(limit: _Events = None, query: _Goal = None) -> CallToolResult:
        with errors():
            return result(await memory.context(limit, query))

    async def search(query: _Query, limit: _Hits = SEARCH_LIMIT) -> CallToolResult:
        with errors():
            return result(await memory.search(query, limit))

    tools: list[tuple[Callable[..., Any], str, ToolAnnotations]] = [
        (
            remember,
            f"Store a fact in the recall memory of {where}, for `recall` to find later. "
            "With entry_id, replace that entry. Secrets in it are redacted before storing.",
            ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
        ),
        (
            recall,
            f"The remembered facts of {where} most relevant to a query (the newest when "
            "none matches), best first, with scores.",
            _READ,
        ),
        (
            bundle,
            f"Everything needed to carry on a step of {where} after a crash: long-term "
            "summary, recent turns, the step's checkpoint and scratchpad, Athena context, "
            "cognitive spaces, and which tiers are degraded.",
            _READ,
        ),
        (
            tail,
            f"The newest entries of the ledger of {workflow} (every agent's "
            "turns: thought, action, result), oldest first.",
            _READ,
        ),
        (
            spaces_get,
            f"The cognitive spaces of {where}: beliefs ('world', a map), the agenda "
            "('tasks', a list) and custom spaces, with revisions; or one space by name.",
            _READ,
        ),
        (
            spaces_put,
            f"Create or replace one cognitive space of {where} with new data (the whole "
            "space). Returns it with its new revision.",
            ToolAnnotations(
                read_only_hint=False,
                destructive_hint=True,
                idempotent_hint=True,
                open_world_hint=False,
            ),
        ),
        (
            context,
            f"Athena memory context of {where}: short-term events and mid-term chains "
            "(ranked against query when given).",
            _READ,
        ),
        (
            search,
            f"Search the Athena memory of {where}; hits best first with their similarity.",
            _READ,
        ),
    ]
    for fn, description, hints in tools:
        name = fn.__name__
        if scope.read_only and name in WRITE_TOOLS:
            continue
        if not athena and name in ATHENA_TOOLS:
            continue
        server.add_tool(fn, name=name, description=description, annotations=hints)
    return server


def _result(runtime: MemoryRuntime, data: dict[str, Any]) -> CallToolResult:
    """``data`` redacted, as JSON text and as the same structured content."""
    clean = redact_value(data, runtime.redactor, runtime.is_secret_key)
    text = to_json(clean)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=json.loads(text)
    )


@contextlib.contextmanager
def _tool_errors(runtime: MemoryRuntime) -> Iterator[None]:
    """jarvismem's expected failures (and bad values) as tool errors, redacted, on one line.

    Anything else propagates: the SDK reports it as a crash without its text.
    """
    try:
        yield
    except ToolError:
        raise
    except (JarvisMemError, ValueError) as exc:
        # KeyError subclasses (SpaceNotFoundError) print their message quoted.
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        text = " ".join((text or type(exc).__name__).split())
        raise ToolError(runtime.redactor(text)) from None


# --- transports -----------------------------------------------------------------------------


async def serve_stdio(server: MCPServer) -> None:
    """Serve ``server`` on stdin/stdout until stdin ends (the client went away)."""
    await server.run_stdio_async()


def http_url(sock: socket.socket) -> str:
    """The MCP endpoint's URL for a socket from :func:`listen_socket`."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/mcp"


async def serve_http(
    server: MCPServer,
    sock: socket.socket,
    *,
    log_level: str = "warning",
    on_ready: Callable[[], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve ``server`` over streamable HTTP at ``/mcp`` on ``sock`` (:func:`listen_socket`).

    Runs until SIGINT/SIGTERM, or until ``stop`` is set (see
    :func:`~jarvismem.integrations.asgi.serve_asgi`). When the socket is on a
    loopback address, requests with another Host header are refused
    (DNS-rebinding protection).
    """
    host = sock.getsockname()[0]
    app = server.streamable_http_app(host=host)
    await serve_asgi(app, sock, log_level=log_level, on_ready=on_ready, stop=stop)
