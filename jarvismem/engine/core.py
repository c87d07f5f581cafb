"""``MemoryEngine``: the long-lived owner of a process's clients and shared state.

One engine holds one Redis client (one pool), one blob storage client, one
Athena HTTP client, one summarizer, the recall store and policy, and the
per-workflow machinery every view of a workflow shares (ledger, durable
writers with their outboxes, the compactor), plus the Athena state per agent
and the outbox poller. It is built from clients that are given to it; turning
settings into connected clients is :meth:`jarvismem.runtime.MemoryRuntime.from_env`'s job.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.backends.embeddings.factory import create_embedder
from jarvismem.backends.embeddings.protocol import Embedder
from jarvismem.backends.llm import Summarizer, as_summarizer, create_summarizer
from jarvismem.backends.outbox import Outbox
from jarvismem.backends.redis import adopt_redis, is_in_process, redis_destination
from jarvismem.engine.athena_agents import ATHENA_RECENT_AGENTS, AthenaAgents, AthenaFactory
from jarvismem.engine.poller import PolledEngine, poll_outboxes
from jarvismem.engine.workflow import WorkflowState
from jarvismem.errors import ConfigError
from jarvismem.keys import KeySpace, destination_digest, validate_id
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.recall.redis_store import RedisRecallStore
from jarvismem.recall.stores import RecallStore
from jarvismem.redaction import (
    Redactor,
    key_matcher_for,
    never_secret,
    no_redaction,
    redactor_for,
)
from jarvismem.settings import Settings
from jarvismem.tiers.athena import AthenaMemory
from jarvismem.tiers.durable import DurableWriter

if TYPE_CHECKING:
    # Imported where used: the Athena client brings httpx, hybrid recall numpy,
    # and a process that configures neither should not load them.
    from jarvismem.backends.athena import AthenaClient
    from jarvismem.recall.hybrid import HybridRecallStore

RECENT_WORKFLOWS = 256
"""Workflow states kept alive after their last view is gone (LRU)."""

# One summarizer per settings object per process. Views built directly from
# clients (``UnifiedMemory(wf, step, agent, redis, blob)``) each get a private
# engine; without this cache, creating a view per step would create an LLM
# HTTP client per step. Keyed by id(), with the object kept to detect reuse.
_shared_summarizers: dict[int, tuple[Settings, Summarizer]] = {}


def shared_summarizer(settings: Settings) -> Summarizer:
    """One summarizer (and so one LLM HTTP client) per settings object per process."""
    cached = _shared_summarizers.get(id(settings))
    if cached is None or cached[0] is not settings:
        cached = (settings, create_summarizer(settings))
        _shared_summarizers[id(settings)] = cached
    return cached[1]


# The same for the recall embedder (RECALL_EMBEDDER): a drop-in view's private engine
# would otherwise load the offline model's weights, or open an HTTP client, per view.
_shared_embedders: dict[int, tuple[Settings, Embedder | None]] = {}


def shared_embedder(settings: Settings) -> Embedder | None:
    """One recall embedder per settings object per process (None: lexical recall)."""
    cached = _shared_embedders.get(id(settings))
    if cached is None or cached[0] is not settings:
        cached = (settings, create_embedder(settings))
        _shared_embedders[id(settings)] = cached
    return cached[1]


class MemoryEngine:
    """Owns the clients and shared state behind every memory view of a process.

    Args:
        settings: the configuration (limits, timeouts, paths, namespace); None
            takes :meth:`fallback_settings` (none for a bare engine: it is
            configured explicitly; :class:`~jarvismem.runtime.MemoryRuntime`
            reads the environment).
        redis, blob, athena: the backend clients; None leaves their tiers off. The
            Redis client takes ``settings``' durability level (``REDIS_DURABILITY``),
            or raises :class:`~jarvismem.errors.ConfigError` if it carries another.
        summarizer: the long-term summarizer; by default one from ``settings``
            (a new one when the engine owns its clients, else the process's shared one).
            JarvisCore's LLM client shape (``async generate(prompt=, temperature=,
            max_tokens=)``) is taken too (see :func:`~jarvismem.backends.llm.as_summarizer`).
        redactor: applied before anything is stored; by default per ``settings``.
        recall_store: where remembered facts go; by default BM25 in Redis (with Redis),
            wrapped in a :class:`~jarvismem.recall.hybrid.HybridRecallStore` (vectors
            in Redis beside the index) when ``RECALL_EMBEDDER`` names an embedder.
        policy: the recall policy; by default :class:`MemoryPolicy`'s defaults.
        owns_clients: close the clients (and summarizer) in :meth:`close`.
        recent_workflows, live_athena_agents: LRU bounds of the per-workflow and
            per-agent state kept alive without a user.
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
        recall_store: RecallStore | None = None,
        policy: MemoryPolicy | None = None,
        owns_clients: bool = False,
        recent_workflows: int = RECENT_WORKFLOWS,
        live_athena_agents: int = ATHENA_RECENT_AGENTS,
    ) -> None:
        if settings is None:
            settings = self.fallback_settings()
        if redis is not None:
            # Every client, however it came in, follows REDIS_DURABILITY (or is refused).
            adopt_redis(redis, settings)
        self.settings = settings
        self.keyspace = KeySpace(settings.jarvismem_namespace)
        self.redis = redis
        self.blob = blob
        self.athena = athena
        if summarizer is not None:
            summarizer = as_summarizer(summarizer)
        else:
            summarizer = (
                create_summarizer(settings) if owns_clients else shared_summarizer(settings)
            )
        self.summarizer = summarizer
        names = settings.redaction_key_names
        if redactor is None:
            redactor = redactor_for(names) if settings.redaction_enabled else no_redaction
        self.redactor = redactor
        # Which dict keys name a secret (REDACTION_KEYS): their values are
        # hidden whatever their type, in turns, checkpoints and spaces.
        self.is_secret_key: Callable[[str], bool] = (
            key_matcher_for(names) if settings.redaction_enabled else never_secret
        )
        self._hybrid: HybridRecallStore | None = None
        if recall_store is None and redis is not None:
            # The embedded default: BM25 over an inverted index in Redis.
            recall_store = RedisRecallStore(
                redis,
                self.keyspace,
                indexed_metadata=settings.recall_indexed_metadata_keys,
                # Recall reads keep the deadline of the ledger's (a stalled Redis).
                timeout=settings.tier_timeout_episodic,
            )
            embedder = create_embedder(settings) if owns_clients else shared_embedder(settings)
            if embedder is not None:
                from jarvismem.recall.hybrid import HybridRecallStore
                from jarvismem.recall.vectors import RedisVectorStore

                # Meaning as well as words; the engine made this store, so close()
                # stops its background embedding (pending entries stay in Redis).
                self._hybrid = HybridRecallStore(
                    recall_store,
                    embedder,
                    vectors=RedisVectorStore(
                        redis, self.keyspace, timeout=settings.tier_timeout_episodic
                    ),
                    batch_size=settings.embeddings_batch,
                    owns_embedder=owns_clients,
                )
                recall_store = self._hybrid
        self.recall_store = recall_store
        self.policy = policy if policy is not None else MemoryPolicy()
        self.owns_clients = owns_clients
        # Per-workflow state lives while a view, a draining writer or a running
        # compaction uses it, plus the `recent_workflows` most recently used ones:
        # a long-lived engine serving many workflows does not grow without bound.
        self.recent_workflows = recent_workflows
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
                athena, redis, keyspace=self.keyspace, settings=settings, redactor=self.redactor
            )
            self.athena_agents = AthenaAgents(factory, max_live=live_athena_agents)
        self._poller: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def fallback_settings(cls) -> Settings:
        """The settings of an engine built without any: a bare engine has none.

        Raises :class:`~jarvismem.errors.ConfigError`. Reading the environment
        is an entry point's decision, so a subclass that is one (the runtime
        facade) overrides this.
        """
        raise ConfigError(f"{cls.__name__} needs settings (pass a Settings object)")

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun."""
        return self._closed

    @property
    def in_process(self) -> bool:
        """True when Redis is the ephemeral in-process stand-in (``REDIS_URL=memory://``)."""
        return self.redis is not None and is_in_process(self.redis)

    # --- shared per-workflow machinery ----------------------------------------------------

    def workflow(self, workflow_id: str) -> WorkflowState:
        """The shared state of a workflow (created on first use)."""
        state = self._workflows.get(workflow_id)
        if state is None:
            validate_id(workflow_id, "workflow_id")
            state = WorkflowState(
                workflow_id,
                settings=self.settings,
                keyspace=self.keyspace,
                redis=self.redis,
                blob=self.blob,
                redactor=self.redactor,
                summarizer=self.summarizer,
                redis_outbox=None if self.redis is None else self.outbox("redis", workflow_id),
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
        if kind == "redis" and self.redis is not None:
            return destination_digest("redis", redis_destination(self.redis))
        if kind == "blob" and self.blob is not None:
            where = getattr(self.blob, "destination", None) or self.blob.name
            return destination_digest("blob", str(where))
        return None

    def destination_address(self, kind: str) -> str | None:
        """Secret-free address of the backend a kind of outbox delivers to (None: none)."""
        if kind == "redis" and self.redis is not None:
            return redis_destination(self.redis)
        if kind == "blob" and self.blob is not None:
            return str(getattr(self.blob, "destination", None) or self.blob.name)
        return None

    def outbox(self, kind: str, workflow_id: str) -> Outbox:
        """The process's outbox object for ``kind`` records of a workflow (no I/O).

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
        """The durable writers of every workflow state alive in this process."""
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
        drop-in ``UnifiedMemory(...)`` constructor does).
        """
        if self._poller is None and not self._closed:
            ref: weakref.ref[PolledEngine] = weakref.ref(self)
            self._poller = asyncio.get_running_loop().create_task(
                poll_outboxes(ref, self.settings.outbox_poll_seconds),
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
        if self.owns_clients:
            if self.athena is not None:
                await self.athena.aclose()
            if self.blob is not None:
                await self.blob.close()
            if self.redis is not None:
                await self.redis.aclose()
            aclose = getattr(self.summarizer, "aclose", None)
            if aclose is not None:
                await aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
