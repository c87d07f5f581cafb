"""``MemoryRuntime``, the one owner, and ``UnifiedMemory``, the view of it a kernel awaits.

A runtime owns the clients, the per-workflow state, the outboxes and the
background work of a process; ``runtime.memory(wf, step, agent)`` hands out a
view that composes the four tiers for one (workflow, step, agent). They live in
one module because each makes the other: the drop-in ``UnifiedMemory(wf, step,
agent, redis_store, blob_storage, athena_client)`` builds its own runtime. A tier is active
only when its backend is given (the degradation matrix in docs/reliability.md); an
absent backend makes it a no-op. A *failing* backend never raises into the
kernel: writes go to a durable local outbox and are replayed in order, reads
return the tier's empty default, and the failure shows in ``health()`` and in
the bundle's ``degraded`` entry.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from jarvismem import telemetry
from jarvismem.backends.blob.base import BlobStorage
from jarvismem.backends.embeddings.factory import create_embedder
from jarvismem.backends.llm import Summarizer, as_summarizer
from jarvismem.backends.outbox import Outbox
from jarvismem.backends.redis import RedisBackend
from jarvismem.bundle import Bundle, read_bundle
from jarvismem.defaults import LEDGER_TAIL, PROMPT_BUDGET_CHARS, RECALL_CONTENT_MAX_CHARS
from jarvismem.engine.athena_agents import AthenaAgents, AthenaFactory
from jarvismem.engine.clients import open_clients
from jarvismem.engine.options import Lifecycle, RecallSetup
from jarvismem.engine.poller import poll_outboxes
from jarvismem.engine.summarizer import OnDemandSummarizer
from jarvismem.engine.workflow import WorkflowState
from jarvismem.errors import (
    BackendUnavailableError,
    ConfigError,
    InvalidPayloadError,
    PayloadTooLargeError,
    RecallStoreMissingError,
)
from jarvismem.health import engine_health, memory_health
from jarvismem.keys import KeySpace, destination_digest, validate_id, validate_turn_id
from jarvismem.payload import PayloadPolicy, max_field_chars_for, turn_record_max_bytes
from jarvismem.recall.models import MemoryEntry, RecallResult
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.recall.prompt import (
    Preflight,
    capture_conversation,
    recall_for_turn,
    redact_results,
)
from jarvismem.recall.prompt import preflight as build_preflight
from jarvismem.recall.redis_store import RedisRecallStore
from jarvismem.recall.stores import RecallStore
from jarvismem.records import encode_fields, entry_tokens
from jarvismem.redaction import (
    REDACTED,
    Redactor,
    key_matcher_for,
    never_secret,
    no_redaction,
    redact_json_text,
    redactor_for,
)
from jarvismem.settings import Settings, default_settings, load_settings
from jarvismem.spaces.store import SpacesStore
from jarvismem.tiers.athena import AthenaMemory, TurnOrigin
from jarvismem.tiers.checkpoints import CLOCK, Checkpoint, new_op_id, validate_checkpoint
from jarvismem.tiers.durable import DurableWriter
from jarvismem.tiers.episodic import AppendResult, EpisodicLedger
from jarvismem.tiers.longterm import LongTermMemory
from jarvismem.tiers.pending import newer_checkpoint, outstanding_records, queued_checkpoint
from jarvismem.tiers.working import ScratchpadBounds, ScratchpadLinks, WorkingScratchpad

if TYPE_CHECKING:
    # Imported where used: the Athena client brings httpx, hybrid recall numpy,
    # and a process that configures neither should not load them.
    from jarvismem.backends.athena import AthenaClient
    from jarvismem.recall.hybrid import HybridRecallStore

log = telemetry.logger(__name__)

# Checkpoint states up to this size are redacted on the event loop (~0.1 ms at
# this size); larger ones on a worker thread.
_INLINE_REDACT_CHARS = 16_384


class MemoryRuntime:
    """The one owner of a process's memory: clients, workflow state, outboxes, tasks.

    It holds one Redis client (one pool), one blob storage client, one Athena
    HTTP client, the summarizer, the recall store and policy, the per-workflow
    state every view of a workflow shares (ledger, durable writers with their
    outboxes, the compactor), the Athena state per agent, and the outbox
    poller; :meth:`memory` hands out views of it. :meth:`from_env` builds the
    clients from settings too.

    Args:
        settings: the configuration; None reads the environment (once per process).
        redis, blob, athena: the backend clients; None leaves their tiers off. The
            Redis client takes ``settings``' durability level (``REDIS_DURABILITY``),
            or raises :class:`~jarvismem.errors.ConfigError` if it carries another.
        summarizer: the long-term summarizer; by default the settings' one, made
            when compaction first needs it. JarvisCore's LLM client shape
            (``async generate(prompt=, temperature=, max_tokens=)``) is taken too
            (see :func:`~jarvismem.backends.llm.as_summarizer`).
        redactor: applied before anything is stored; by default per ``settings``.
        recall: the recall store and policy (:class:`~jarvismem.engine.options.RecallSetup`);
            by default BM25 in Redis (with Redis), wrapped in a
            :class:`~jarvismem.recall.hybrid.HybridRecallStore` (vectors in Redis beside
            the index) when ``RECALL_EMBEDDER`` names an embedder, made on first use,
            and :class:`MemoryPolicy`'s defaults.
        lifecycle: who closes the clients and how long the parts live
            (:class:`~jarvismem.engine.options.Lifecycle`: ``owns_clients``,
            ``background``, and the LRU bounds of per-workflow and per-agent state).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        redis: Any = None,
        blob: BlobStorage | None = None,
        athena: AthenaClient | None = None,
        summarizer: Summarizer | object | None = None,
        redactor: Redactor | None = None,
        recall: RecallSetup | None = None,
        lifecycle: Lifecycle | None = None,
    ) -> None:
        recall = recall if recall is not None else RecallSetup()
        lifecycle = lifecycle if lifecycle is not None else Lifecycle()
        if not isinstance(recall, RecallSetup):
            raise TypeError(f"recall must be a RecallSetup, got {type(recall).__name__}")
        if not isinstance(lifecycle, Lifecycle):
            raise TypeError(f"lifecycle must be a Lifecycle, got {type(lifecycle).__name__}")
        self.lifecycle = lifecycle
        owns_clients, background = lifecycle.owns_clients, lifecycle.background
        if settings is None:
            settings = default_settings()
        # Every client, however it came in, follows REDIS_DURABILITY; a backend
        # passed in is used as is (or refused if its level disagrees).
        self.backend: RedisBackend | None = (
            None if redis is None else RedisBackend.adopt(redis, settings)
        )
        self.settings = settings
        self.keyspace = KeySpace(settings.jarvismem_namespace)
        # The redis-py client itself, for callers that talk to Redis directly.
        self.redis: Any = None if self.backend is None else self.backend.client
        self.blob = blob
        self.athena = athena
        self.owns_clients = owns_clients
        self.background = background
        self._own_summarizer: OnDemandSummarizer | None = None
        if summarizer is None:
            summarizer = self._own_summarizer = OnDemandSummarizer(settings, keep=background)
        else:
            summarizer = as_summarizer(summarizer)
        self.summarizer: Summarizer = summarizer  # type: ignore[assignment]
        names = settings.redaction_key_names
        if redactor is None:
            redactor = redactor_for(names) if settings.redaction_enabled else no_redaction
        self.redactor = redactor
        # Which dict keys name a secret (REDACTION_KEYS): their values are
        # hidden whatever their type, in turns, checkpoints and spaces.
        self.is_secret_key: Callable[[str], bool] = (
            key_matcher_for(names) if settings.redaction_enabled else never_secret
        )
        # Built once: every write path of every view cleans with this one value.
        self.payload_policy = PayloadPolicy(
            redact=self.redactor,
            is_secret_key=self.is_secret_key,
            max_chars=settings.max_turn_field_chars,
            max_depth=settings.max_payload_depth,
        )
        self.scratchpad_bounds = ScratchpadBounds(
            tail_bytes=settings.scratchpad_tail_bytes,
            budget_chars=settings.scratchpad_budget_chars,
        )
        self._recall_store = recall.store
        self._recall_made = recall.store is not None
        self._hybrid: HybridRecallStore | None = None
        self.policy = recall.policy
        # Per-workflow state lives while a view, a draining writer or a running
        # compaction uses it, plus the `recent_workflows` most recently used ones:
        # a long-lived runtime serving many workflows does not grow without bound.
        self.recent_workflows = lifecycle.recent_workflows
        self._workflows: weakref.WeakValueDictionary[str, WorkflowState] = (
            weakref.WeakValueDictionary()
        )
        self._recent: OrderedDict[str, WorkflowState] = OrderedDict()
        self._outboxes: weakref.WeakValueDictionary[tuple[str, str], Outbox] = (
            weakref.WeakValueDictionary()
        )
        self.athena_agents: AthenaAgents | None = None
        if athena is not None:
            factory = AthenaFactory(
                athena,
                self.backend,
                keyspace=self.keyspace,
                settings=settings,
                redactor=self.redactor,
            )
            self.athena_agents = AthenaAgents(factory, max_live=lifecycle.live_athena_agents)
        self._poller: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def from_env(
        cls,
        settings: Settings | None = None,
        *,
        require_redis: bool = False,
        warn_degraded: bool = True,
        connect_retries: int | None = None,
        background: bool = True,
        **overrides: Any,
    ) -> Self:
        """Build and connect every configured backend from settings/environment.

        ``overrides`` are settings fields applied over the environment (only
        when ``settings`` is None). With nothing configured it runs on the
        embedded defaults (the embedded Redis server, persistent, and a local
        blob folder). A configured Redis that does not answer at start-up does
        not stop the runtime: it starts degraded (one WARNING), writes queue in
        the local outbox, reads serve what the outbox holds, and everything
        replays once Redis answers (the client reconnects on its own).
        ``require_redis=True`` instead waits ``REDIS_CONNECT_RETRIES`` attempts
        and raises :class:`~jarvismem.errors.BackendUnavailableError` (tools
        that can do nothing without Redis). ``warn_degraded=False`` logs the
        degraded start at INFO instead of WARNING, for callers that report each
        backend's state themselves (``jarvismem status``). ``background=False``
        starts no outbox poller (a reader that must not replay, such as
        ``jarvismem ui``).
        """
        if settings is None:
            settings = load_settings(**overrides) if overrides else default_settings()
        redis, blob, athena = await open_clients(
            settings,
            require_redis=require_redis,
            warn_degraded=warn_degraded,
            connect_retries=connect_retries,
        )
        return cls(
            settings,
            redis=redis,
            blob=blob,
            athena=athena,
            lifecycle=Lifecycle(owns_clients=True, background=background),
        )

    def memory(self, workflow_id: str, step_id: str, agent_id: str) -> UnifiedMemory:
        """A cheap per-(workflow, step, agent) view; no I/O."""
        return UnifiedMemory(workflow_id, step_id, agent_id, runtime=self)

    async def health(self, *, write_check: bool = False) -> dict[str, Any]:
        """Reachability and latency of every backend, plus outbox state.

        ``write_check=True`` also proves write access and credentials on every
        backend (see :func:`jarvismem.health.engine_health`).
        """
        return await engine_health(self, write_check=write_check)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun."""
        return self._closed

    @property
    def in_process(self) -> bool:
        """True when Redis is the ephemeral in-process stand-in (``REDIS_URL=memory://``)."""
        return self.backend is not None and self.backend.in_process

    @property
    def recall_store(self) -> RecallStore | None:
        """Where remembered facts go (made on first use; None without Redis or one given)."""
        if not self._recall_made:
            self._recall_made = True
            self._recall_store = self._default_recall_store()
        return self._recall_store

    def _default_recall_store(self) -> RecallStore | None:
        """BM25 in Redis, hybrid with vectors when ``RECALL_EMBEDDER`` names an embedder."""
        if self.backend is None:
            return None
        s = self.settings
        lexical = RedisRecallStore(
            self.backend,
            self.keyspace,
            indexed_metadata=s.recall_indexed_metadata_keys,
            # Recall reads keep the deadline of the ledger's (a stalled Redis).
            timeout=s.tier_timeout_episodic,
        )
        embedder = create_embedder(s)
        if embedder is None:
            return lexical
        # The runtime made the embedder, so the store owns it: close() stops the
        # background embedding (pending entries stay in Redis) and closes it.
        from jarvismem.recall.hybrid import HybridPolicy, HybridRecallStore
        from jarvismem.recall.vectors import RedisVectorStore

        self._hybrid = HybridRecallStore(
            lexical,
            embedder,
            vectors=RedisVectorStore(self.backend, self.keyspace, timeout=s.tier_timeout_episodic),
            policy=HybridPolicy(batch_size=s.embeddings_batch),
            owns_embedder=True,
            # A runtime without background work (the inspector) embeds nothing:
            # its recalls read, they never write vectors.
            background=self.background,
        )
        return self._hybrid

    # --- shared per-workflow machinery ----------------------------------------------------

    def workflow(self, workflow_id: str) -> WorkflowState:
        """The shared state of a workflow (created on first use)."""
        state = self._workflows.get(workflow_id)
        if state is None:
            validate_id(workflow_id, "workflow_id")
            state = WorkflowState(
                workflow_id,
                settings=self.settings,
                redis=self.backend,
                blob=self.blob,
                policy=self.payload_policy,
                summarizer=self.summarizer,
                redis_outbox=None if self.backend is None else self.outbox("redis", workflow_id),
                blob_outbox=None if self.blob is None else self.outbox("blob", workflow_id),
            )
            self._workflows[workflow_id] = state
        self._recent[workflow_id] = state
        self._recent.move_to_end(workflow_id)
        if len(self._recent) > self.recent_workflows:
            self._recent.popitem(last=False)
        return state

    def destination(self, kind: str) -> str | None:
        """Digest of the backend a kind of outbox delivers to (names its files)."""
        address = self.destination_address(kind)
        return None if address is None else destination_digest(kind, address)

    def destination_address(self, kind: str) -> str | None:
        """Secret-free address of the backend a kind of outbox delivers to (None: none)."""
        if kind == "redis" and self.backend is not None:
            return self.backend.destination
        if kind == "blob" and self.blob is not None:
            return str(getattr(self.blob, "destination", None) or self.blob.name)
        return None

    def outbox(self, kind: str, workflow_id: str) -> Outbox:
        """The runtime's outbox object for ``kind`` records of a workflow (no I/O).

        Redis and blob outboxes are keyed by the digest of their backend's
        address, so records queued for one server can only replay into it.
        """
        key = (kind, workflow_id)
        box = self._outboxes.get(key)
        if box is None:
            s = self.settings
            dst = self.destination(kind)
            root = Path(s.outbox_path)
            box = Outbox(
                root / self.keyspace.outbox_file(kind, workflow_id, dst),
                max_entries=s.outbox_max_entries,
                max_bytes=s.outbox_max_bytes,
                fsync=s.outbox_fsync_effective,
                destination=dst,
                destination_file=None
                if dst is None
                else root / self.keyspace.outbox_destination_file(kind, dst),
                destination_info=None
                if dst is None
                else {"kind": kind, "address": self.destination_address(kind) or ""},
                # Before outboxes were keyed by destination, this was the file.
                legacy_path=root / self.keyspace.outbox_file(kind, workflow_id),
            )
            self._outboxes[key] = box
        return box

    def open_writers(self) -> list[DurableWriter]:
        """The durable writers of every workflow state alive in this runtime."""
        return [w for state in list(self._workflows.values()) for w in state.writers]

    def redis_writers(self) -> list[DurableWriter]:
        """The Redis durable writers (ledger, checkpoints, summaries, spaces) alive here."""
        states = list(self._workflows.values())
        return [s.redis_writer for s in states if s.redis_writer is not None]

    # --- Athena, per agent ----------------------------------------------------------------

    async def athena_memory(self, agent_id: str) -> AthenaMemory | None:
        """The agent's AthenaMemory (one cached session per tenant/user/agent).

        Waits for the first session attempt; Athena errors (even refused
        credentials) are not raised but kept in its ``health()`` and retried.
        None when Athena is not configured.
        """
        agents = self.athena_agents
        if agents is None:
            return None
        if agents.live(agent_id) is None:
            validate_id(agent_id, "agent_id")
        return await agents.get(agent_id)

    def athena_memory_nowait(self, agent_id: str) -> AthenaMemory | None:
        """The agent's AthenaMemory, created (no I/O to Athena) and started if needed.

        None when Athena is not configured.
        Writes may be queued at once; the session is resolved in the background.
        """
        agents = self.athena_agents
        if agents is None:
            return None
        if agents.live(agent_id) is None:
            validate_id(agent_id, "agent_id")
        return agents.get_nowait(agent_id)

    async def athena_memory_for_write(self, agent_id: str) -> AthenaMemory | None:
        """:meth:`athena_memory_nowait` for a write path (``log_turn``).

        While evicted agents are being closed it yields to the event loop once:
        a tight loop of writes that never waits (small local appends) would
        otherwise never let them run, and their open files would pile up.
        """
        memory = self.athena_memory_nowait(agent_id)
        if self.athena_agents is not None and self.athena_agents.retiring:
            await asyncio.sleep(0)
        return memory

    def athena_outbox(self, agent_id: str) -> Outbox:
        """The durable outbox of the agent's Athena destination.

        One file per (tenant, user, Athena agent id, server): records queued for
        one tenant or server are never replayed into another's session. The live
        AthenaMemory's outbox when there is one, else a new Outbox (caller owns it).
        """
        if self.athena_agents is None:
            raise ConfigError("Athena is not configured: set ATHENA_URL")
        memory = self.athena_agents.live(agent_id)
        if memory is not None:
            return memory.outbox
        return self.athena_agents.factory.outbox(agent_id)

    def athena_agent_id(self, agent_id: str) -> str:
        """The agent id sent to Athena: the agent's own (the namespace goes into the user id)."""
        if self.athena_agents is None:
            raise ConfigError("Athena is not configured: set ATHENA_URL")
        return self.athena_agents.factory.agent_id(agent_id)

    # --- lifecycle ------------------------------------------------------------------------

    def ensure_background(self) -> None:
        """Start the outbox poller on the running loop (first awaited call; cheap after).

        The constructor cannot start it (it may run outside a loop, as the
        drop-in ``UnifiedMemory(...)`` constructor does). A runtime built with
        ``background=False`` starts none: its writers notice records other
        processes left on their own next write.
        """
        if self._poller is None and self.background and not self._closed:
            self._poller = asyncio.get_running_loop().create_task(
                poll_outboxes(self.open_writers, self.settings.outbox_poll_seconds),
                name="jarvismem-outbox-poll",
            )

    async def close(self) -> None:
        """Drain what can be drained, then close writers and owned clients."""
        if self._closed:
            return
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
        agents = self.athena_agents
        if agents is not None:
            agents.stop()
        states = list(self._workflows.values())
        for state in states:
            for writer in state.writers:
                if writer.degraded:
                    await writer.flush(timeout=2.0, stop_at_failure=True)
        if agents is not None:
            await agents.close()
        for state in states:
            await state.close()
        for box in list(self._outboxes.values()):
            await box.close()
        self._recent.clear()
        if self._hybrid is not None:  # before Redis closes: it stops the embedding tasks
            await self._hybrid.aclose()
        if self._own_summarizer is not None:
            await self._own_summarizer.aclose()
        if self.owns_clients:
            if self.athena is not None:
                await self.athena.aclose()
            if self.blob is not None:
                await self.blob.close()
            if self.backend is not None:
                await self.backend.aclose()
            if self._own_summarizer is None:
                aclose = getattr(self.summarizer, "aclose", None)
                if aclose is not None:
                    await aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class UnifiedMemory:
    """Tiered memory of one agent at one step of one workflow: a view of a runtime.

    ``MemoryRuntime.memory(...)`` (or ``runtime=``) makes it a view of that
    runtime. The drop-in form ``UnifiedMemory(workflow_id, step_id, agent_id,
    redis_store=None, blob_storage=None, athena_client=None)`` builds a runtime
    of its own around the given clients (which it never closes), configured by
    ``settings`` (default: read from the environment once per process); that
    runtime runs no background task (see ``background`` of :class:`MemoryRuntime`).
    """

    def __init__(
        self,
        workflow_id: str,
        step_id: str,
        agent_id: str,
        redis_store: Any = None,
        blob_storage: BlobStorage | None = None,
        athena_client: AthenaClient | None = None,
        *,
        runtime: MemoryRuntime | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.workflow_id = validate_id(workflow_id, "workflow_id")
        self.step_id = validate_id(step_id, "step_id")
        self.agent_id = validate_id(agent_id, "agent_id")
        self._owns_runtime = runtime is None
        if runtime is None:
            # A runtime of its own around the caller's clients; it never closes
            # them, and callers do not close it: no background task, no kept client.
            runtime = MemoryRuntime(
                settings,
                redis=redis_store,
                blob=blob_storage,
                athena=athena_client,
                lifecycle=Lifecycle(background=False),
            )
        elif (
            redis_store is not None
            or blob_storage is not None
            or athena_client is not None
            or settings is not None
        ):
            raise TypeError("pass either backends (and settings) or runtime=, not both")
        self.runtime = rt = runtime
        self._policy = rt.payload_policy
        _check_append_limit(rt.blob, self._policy.max_chars)
        # Validates the id and creates the state now; the view keeps no reference
        # to it (see _wf), so an idle view costs what the view itself holds.
        wf = rt.workflow(self.workflow_id)
        self.working: WorkingScratchpad | None = None
        if rt.blob is not None:
            self.working = WorkingScratchpad(
                rt.blob,
                rt.keyspace,
                self.workflow_id,
                self.step_id,
                self.agent_id,
                policy=self._policy,
                bounds=rt.scratchpad_bounds,
                links=ScratchpadLinks(append=self._durable_append, goals=wf.goals),
            )
        self._spaces: SpacesStore | None = None
        # KeySpace.turn_field of (step, agent, turn) minus the turn: the ids are
        # validated above, so log_turn only appends the validated turn id.
        self._turn_prefix = KeySpace.turn_field(self.step_id, self.agent_id, "0")[:-1]
        # The step's current goal as the user last stated it (log_turn/capture):
        # the bundle ranks Athena's mid-term chains against it.
        self._goal: str | None = None

    @property
    def _wf(self) -> WorkflowState:
        """The workflow's shared state, from the runtime each time.

        Not kept on the view: the runtime holds the recently used workflows
        (an LRU) and any other only while something uses it, so thousands of
        idle views do not pin thousands of workflow states; a state the runtime
        let go is made again on next use (its outboxes are files, its counters
        in Redis; its goal listing is listed afresh, and a view made before
        keeps the old one, refreshed within ``GOALS_LISTING_MAX_AGE``).
        """
        return self.runtime.workflow(self.workflow_id)

    @property
    def episodic(self) -> EpisodicLedger | None:
        """The episodic ledger tier (None without Redis)."""
        return self._wf.ledger

    @property
    def ltm(self) -> LongTermMemory | None:
        """The long-term summary tier (None without Redis or blob storage)."""
        return self._wf.ltm

    async def _durable_append(self, path: str, data: bytes) -> bool:
        return await self._wf.durable_append(path, data)

    # --- the hot path ------------------------------------------------------------------

    @telemetry.log_turn
    async def log_turn(
        self,
        turn_id: str | int,
        thought: Any,
        action: Any,
        result: Any,
        tokens: int = 0,
        *,
        user_message: str | None = None,
    ) -> None:
        """Record one turn in every active tier. Exactly-once per turn id.

        ``user_message``: what the user said this turn. Athena gets it as a
        ``message`` event with role ``user`` (the server forms mid-term memory
        from user messages only) before the turn's thought, action and result
        (role ``agent``); it also becomes the goal the bundle ranks Athena's
        mid-term chains against.

        Raises only for bad input (a specific error, before anything is
        written); a backend outage queues the turn durably instead.
        """
        turn = validate_turn_id(turn_id)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError("tokens must be a non-negative int")
        user_message = self._user_text(user_message)
        self.runtime.ensure_background()
        thought = self._clean(thought, "thought")
        action = self._clean(action, "action")
        result = self._clean(result, "result")
        ts = time.time()
        wf = self._wf
        args: list[str] | None = None
        appended: AppendResult | None = None
        # One write after the other, ledger first: the scratchpad never holds a
        # turn the ledger (or its outbox) does not. Running the local writes in a
        # task beside the ledger's round trip measured no faster (docs/performance.md).
        if wf.redis_writer is not None:
            entry = {
                "turn_id": turn,
                "step_id": self.step_id,
                "agent_id": self.agent_id,
                "ts": ts,
                "thought": thought,
                "action": action,
                "result": result,
                "tokens": tokens,
            }
            args = encode_fields(entry)
            record: dict[str, Any] = {"op": "turn", "args": args, "field": self._turn_prefix + turn}
            if wf.compactor is not None:
                # What the ledger's script adds to the compaction counters.
                record["tokens"] = entry_tokens(entry)
            appended = await wf.redis_writer.submit(record)
        if self.working is not None:
            if args is not None:
                # The ledger's JSON of each field is reused for the scratchpad line.
                await self.working.append_turn_encoded(turn, args, ts)
            else:
                turn_data = {
                    "thought": thought,
                    "action": action,
                    "result": result,
                    "tokens": tokens,
                }
                await self.working.append_turn(turn, turn_data, ts)
        if self.runtime.athena is not None:
            await self._athena_turn(turn, thought, action, result, user_message)
        # No counters when the turn was queued (the replay counts it) or a duplicate.
        if wf.compactor is not None and isinstance(appended, AppendResult) and appended.counters:
            wf.compactor.note_counters(*appended.counters)

    def _user_text(self, user_message: str | None) -> str | None:
        """A user message checked, redacted and bounded like a turn field; noted as the goal."""
        if user_message is None:
            return None
        if not isinstance(user_message, str):
            raise InvalidPayloadError(
                f"user_message must be a string, got {type(user_message).__name__}"
            )
        cleaned = self._clean(user_message, "user_message")
        if isinstance(cleaned, str) and cleaned.strip():
            self._goal = cleaned
        return cleaned if isinstance(cleaned, str) else None

    async def _athena_turn(
        self, turn: str, thought: Any, action: Any, result: Any, user_message: str | None = None
    ) -> None:
        """Queue the turn for Athena; never waits for the network and never raises.

        Athena is a best-effort tier and the turn is in the ledger already: a
        failure here (a local disk error, a full outbox) is counted and shown in
        ``health()`` by the Athena tier, never raised into the kernel. The turn's
        identity makes its idempotency keys, so a re-logged turn reaches Athena once.
        """
        try:
            athena = await self.runtime.athena_memory_for_write(self.agent_id)
            if athena is not None:
                # The values were redacted by _clean already.
                await athena.record_turn(
                    turn,
                    thought,
                    action,
                    result,
                    redacted=True,
                    origin=TurnOrigin(self.workflow_id, self.step_id, self.agent_id),
                    user_message=user_message,
                )
        except Exception as exc:  # the last guard: log_turn must not fail because of Athena
            log.warning("Athena copy of turn %s not queued: %s: %s", turn, type(exc).__name__, exc)

    def _clean(self, value: Any, name: str) -> Any:
        """Redact, bound and check one turn field (the size policy of ``jarvismem.payload``).

        Raises ``InvalidPayloadError`` naming the field (too deep, not JSON)
        before anything is written.
        """
        return self._policy.clean(value, name)

    # --- checkpoints -----------------------------------------------------------------------

    async def save_checkpoint(
        self, state_json: str, *, expected_rev: int | None = None
    ) -> int | None:
        """Save this step's resumable state; returns the revision this save wrote.

        An int is always a revision this save wrote itself, never another's.
        With ``expected_rev``, a save based on a stale revision raises
        :class:`~jarvismem.errors.CheckpointConflictError` and one that cannot be
        checked now (Redis down or stalled) raises
        :class:`~jarvismem.errors.BackendUnavailableError`; nothing is queued.
        Without it, ``None`` means no revision is known to this call: the save
        was queued durably (Redis unavailable; it lands when replayed unless a
        newer save is stored by then), or it was superseded (a save newer than
        this one is already stored, so this one is not), or there is no Redis.
        Load the checkpoint to learn the current revision.
        """
        max_bytes = self.runtime.settings.max_checkpoint_bytes
        state = validate_checkpoint(state_json, max_bytes)
        if isinstance(expected_rev, bool) or not (
            expected_rev is None or isinstance(expected_rev, int)
        ):
            raise InvalidPayloadError("expected_rev must be an int or None")
        wf = self._wf
        writer = wf.redis_writer
        if writer is None:
            return None
        if self.runtime.settings.redact_checkpoints:
            # Checkpoints go into the bundle, hence the prompt: secrets are
            # hidden unless REDACT_CHECKPOINTS=false (exact state needed).
            # Redacting can lengthen the state ("[REDACTED]"), so it is
            # checked against the limit again.
            state = validate_checkpoint(await self._redact_state(state), max_bytes)
        self.runtime.ensure_background()
        store = wf.checkpoints(self.step_id)
        if expected_rev is not None:
            if await writer.notice():
                raise BackendUnavailableError(
                    "Redis is unavailable: a conditional checkpoint save cannot be checked now"
                )
            # Translated errors (BackendUnavailableError, CheckpointConflictError)
            # and a bounded wait: a stalled Redis cannot hang the caller.
            try:
                async with asyncio.timeout(writer.timeout):
                    return await store.save_validated(state, expected_rev=expected_rev)
            except TimeoutError:
                raise BackendUnavailableError(
                    f"checkpoint save: Redis did not answer within {writer.timeout:g}s "
                    "(the save may or may not have landed; it is safe to retry)"
                ) from None
        # The stamp is taken now, when the save is made: queued or not, it
        # orders against every other save by when it was acknowledged.
        record = {
            "op": "checkpoint",
            "step": self.step_id,
            "state": state,
            "ts": time.time(),
            "stamp": CLOCK.next(),
            "opid": new_op_id(),
        }
        result = await writer.submit(record)
        return None if result is None else int(result)

    async def _redact_state(self, state: str) -> str:
        """Checkpoint state redacted by structure when it is JSON (see redact_json_text).

        A large state is parsed and redacted on a worker thread: up to
        MAX_CHECKPOINT_BYTES of JSON would hold the event loop for tens of ms.
        """
        rt = self.runtime
        if len(state) <= _INLINE_REDACT_CHARS:
            return redact_json_text(state, rt.redactor, rt.is_secret_key)
        return await asyncio.to_thread(redact_json_text, state, rt.redactor, rt.is_secret_key)

    async def load_checkpoint(self) -> str | None:
        """This step's last saved state, or None."""
        record = await self.load_checkpoint_record()
        return None if record is None else record.state

    async def load_checkpoint_record(self) -> Checkpoint | None:
        """State with its revision and time; None when absent or Redis is down."""
        wf = self._wf
        writer = wf.redis_writer
        if writer is None:
            return None
        self.runtime.ensure_background()
        timeout = self.runtime.settings.tier_timeout_checkpoint
        queued = queued_checkpoint(await outstanding_records(writer, timeout), self.step_id)
        try:
            async with asyncio.timeout(timeout):
                stored = await wf.checkpoints(self.step_id).load()
        except Exception as exc:
            log.warning("checkpoint unavailable: %s", type(exc).__name__)
            stored = None
        return newer_checkpoint(stored, queued)

    # --- cognitive spaces ---------------------------------------------------------------------

    @property
    def spaces(self) -> SpacesStore | None:
        """The agent's cognitive spaces (world beliefs, task agenda); lazy, no I/O until used."""
        if self._spaces is None and self.runtime.backend is not None:
            self._spaces = SpacesStore(
                self.runtime.backend,
                self.runtime.keyspace,
                self.workflow_id,
                self.agent_id,
                ttl_seconds=self.runtime.settings.ttl_seconds,
                timeout=self.runtime.settings.tier_timeout_checkpoint,
                policy=self._policy,
            )
        return self._spaces

    # --- recall: facts remembered into the prompt by policy -------------------------------

    async def remember(
        self,
        content: str,
        *,
        entry_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        occurred_at: int | str | datetime | None = None,
        policy: MemoryPolicy | None = None,
    ) -> MemoryEntry:
        """Store a fact for later recall (an upsert when ``entry_id`` is given).

        ``occurred_at``: when the fact happened (epoch ms, ISO 8601, a datetime;
        zone-less = UTC); its day becomes searchable ("in May 2023"). ``None``:
        when it is written (an upsert keeps the entry's earlier ``occurred_at``).
        Scope and namespace come from the runtime's :class:`MemoryPolicy`
        (``policy`` overrides it for this call); raises ``RecallStoreMissingError``
        when no recall store is configured and
        :class:`~jarvismem.errors.PayloadTooLargeError` for content longer than
        ``RECALL_CONTENT_MAX_CHARS`` (checked before the redactor reads it all).
        """
        if isinstance(content, str) and len(content) > RECALL_CONTENT_MAX_CHARS:
            raise PayloadTooLargeError(
                f"content is {len(content)} characters; a remembered fact may hold at most "
                f"{RECALL_CONTENT_MAX_CHARS}"
            )
        store = self._recall_store()
        request = (policy or self.runtime.policy).write_request(
            agent_id=self.agent_id,
            content=self.runtime.redactor(content),
            session_id=session_id,
            context=context,
            entry_id=entry_id,
            metadata=None if metadata is None else self._redacted_metadata(metadata),
            occurred_at=occurred_at,
        )
        return await store.write(request)

    def _redacted_metadata(self, metadata: Mapping[str, str]) -> dict[str, str]:
        """Entry metadata with secret-named values hidden and the rest redacted."""
        rt = self.runtime
        return {
            key: REDACTED
            if rt.is_secret_key(key) and value
            else (rt.redactor(value) if isinstance(value, str) else value)
            for key, value in metadata.items()
        }

    async def recall(
        self,
        query: str,
        *,
        limit: int | None = None,
        filter: Mapping[str, str] | None = None,
        min_score: float | None = None,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        policy: MemoryPolicy | None = None,
    ) -> list[RecallResult]:
        """The ``limit`` (default: the policy's ``max_entries``) most relevant remembered
        facts, each with its ``score`` ([] when the policy is disabled).
        ``policy``: instead of the runtime's, for this call.

        Matches come first by score; when fewer than ``limit`` match, the newest
        other entries fill the list with score 0 (the *recency fill*), so the
        list is ``limit`` long whenever the scope holds that many entries.
        ``filter``: metadata that every result must carry (key: value, all must
        match; values are redacted like stored metadata before comparing).
        ``min_score``: leave out weaker results; above 0 it also leaves out the fill.

        Their content is redacted with the runtime's redactor: an entry stored
        before a pattern existed does not hand its secret back to the agent.
        """
        results = await recall_for_turn(
            self.runtime.recall_store,
            policy or self.runtime.policy,
            agent_id=self.agent_id,
            query=query,
            session_id=session_id,
            context=context,
            limit=limit,
            filter=None if filter is None else self._redacted_metadata(filter),
            min_score=0.0 if min_score is None else min_score,
        )
        return redact_results(results, self.runtime.redactor)

    async def preflight(
        self,
        instructions: str,
        user_message: str,
        *,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        ledger_tail: int = LEDGER_TAIL,
        budget_chars: int = PROMPT_BUDGET_CHARS,
    ) -> Preflight:
        """The exact chat messages of the next LLM call and which memory went in.

        Rehydrates the bundle, recalls by policy, and assembles the prompt;
        calls no LLM.
        """
        bundle = await self.rehydrate_bundle(ledger_tail, query=user_message)
        recalled = await self.recall(user_message, session_id=session_id, context=context)
        return build_preflight(
            instructions,
            user_message,
            bundle=bundle,
            recalled=recalled,
            policy=self.runtime.policy,
            budget_chars=budget_chars,
            redactor=self.runtime.redactor,
            is_secret_key=self.runtime.is_secret_key,
        )

    async def capture(
        self,
        user: str,
        assistant: str,
        *,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        turn_id: str | int | None = None,
    ) -> MemoryEntry | None:
        """After a turn: store ``"User: …\nAssistant: …"`` when the policy captures conversation.

        With Athena configured, the exchange also goes to Athena (whatever the
        policy): the user's message as a ``message`` event with role ``user``,
        the reply with role ``agent``. ``turn_id``: the turn it belongs to; its
        user message then reaches Athena once even if ``log_turn`` carried it too.
        """
        user = self.runtime.redactor(user)
        assistant = self.runtime.redactor(assistant)
        if isinstance(user, str) and user.strip():
            self._goal = user
        if self.runtime.athena is not None:
            await self._athena_conversation(user, assistant, turn_id)
        return await capture_conversation(
            self.runtime.recall_store,
            self.runtime.policy,
            agent_id=self.agent_id,
            user=user,
            assistant=assistant,
            session_id=session_id,
            context=context,
        )

    async def _athena_conversation(
        self, user: str, assistant: str, turn_id: str | int | None
    ) -> None:
        """Queue the exchange for Athena; like :meth:`_athena_turn`, never raises."""
        try:
            turn = None if turn_id is None else validate_turn_id(turn_id)
            athena = await self.runtime.athena_memory_for_write(self.agent_id)
            if athena is not None:
                await athena.record_interaction(
                    user,
                    assistant,
                    turn_id=turn,
                    workflow_id=self.workflow_id,
                    step_id=self.step_id,
                    redacted=True,
                )
        except Exception as exc:  # Athena is best effort: capture must not fail because of it
            log.warning("Athena copy of a conversation not queued: %s: %s", type(exc).__name__, exc)

    def _recall_store(self) -> RecallStore:
        store = self.runtime.recall_store
        if store is None:
            raise RecallStoreMissingError(
                "no recall store: give the runtime Redis or pass recall=RecallSetup(store=...)"
            )
        return store

    # --- recovery ----------------------------------------------------------------------------

    @telemetry.rehydrate_bundle
    async def rehydrate_bundle(
        self, ledger_tail: int = LEDGER_TAIL, *, query: str | None = None
    ) -> Bundle:
        """Everything needed to carry on after a crash, read from all tiers at once.

        ``query``: the current goal; Athena's mid-term chains are ranked against
        it (default: the user message this view last logged or captured; with
        neither, the newest chains).

        See :class:`~jarvismem.bundle.Bundle` for its keys: ``ltm_summary``,
        ``recent_turns``, ``checkpoint``, ``scratchpad``, ``athena_context``,
        ``spaces`` (empty defaults None, [], None, "", None, None) and
        ``degraded`` ({tier: reason} for tiers that failed or timed out).
        """
        rt = self.runtime
        if isinstance(ledger_tail, bool) or not isinstance(ledger_tail, int) or ledger_tail < 0:
            raise ValueError("ledger_tail must be a non-negative int")
        rt.ensure_background()
        return await read_bundle(
            self._wf,
            self.step_id,
            ledger_tail,
            settings=rt.settings,
            working=self.working,
            athena=None if rt.athena is None else partial(rt.athena_memory, self.agent_id),
            spaces=self.spaces,
            athena_query=query if query is not None else self._goal,
        )

    async def health(self) -> dict[str, Any]:
        """Per-tier state: active, backend, reachable, latency, outbox, reasons."""
        return await memory_health(self.runtime, self._wf, self.working)

    async def compact_now(self) -> dict[str, Any]:
        """Run long-term compaction for this workflow now (waits for it)."""
        if self._wf.compactor is None:
            return {"compacted": False, "reason": "long-term tier inactive (needs Redis and blob)"}
        result = await self._wf.compactor.compact()
        return dict(result) if isinstance(result, dict) else result.__dict__

    async def close(self) -> None:
        """Close a view built from backends directly (drains its outboxes).

        A view handed out by a runtime leaves the runtime open.
        """
        if self._owns_runtime:
            await self.runtime.close()

    async def __aenter__(self) -> UnifiedMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _check_append_limit(blob: BlobStorage | None, max_chars: int) -> None:
    """Refuse a field limit whose turn records could exceed the blob store's largest append.

    Such a record would fail on the scratchpad append after the ledger write
    (Azure: one append block, 4 MiB). Settings check this for the Azure
    backend; this covers any store handed to a view.
    """
    limit = getattr(blob, "max_append_bytes", None)
    if isinstance(limit, int) and turn_record_max_bytes(max_chars) > limit:
        raise ConfigError(
            f"MAX_TURN_FIELD_CHARS={max_chars} allows turn records larger than the "
            f"{limit}-byte largest append of the {getattr(blob, 'name', 'given')} blob store; "
            f"use at most {max_field_chars_for(limit)}"
        )
