"""Athena state per agent: a bounded set of live AthenaMemory objects plus a sweeper.

Each live agent holds an open outbox file and a delivery task, so their number
is bounded (least recently used first out). An evicted agent is closed in the
background; records it had not delivered stay in its outbox file, and a sweeper
delivers them one agent at a time (so open files stay bounded), or the agent's
next use does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from jarvismem.backends.outbox import Outbox
from jarvismem.backends.redis import RedisBackend
from jarvismem.keys import KeySpace
from jarvismem.redaction import Redactor
from jarvismem.resilience import Backoff
from jarvismem.settings import Settings
from jarvismem.tiers.athena import CLOSE_GRACE_SECONDS, AthenaMemory
from jarvismem.tiers.athena.config import AthenaTierConfig, athena_user_id

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient

log = logging.getLogger(__name__)

ATHENA_RECENT_AGENTS = 256
"""Agents whose Athena state (an open outbox file and a delivery task) stays live (LRU).

The least recently used agent past this bound has its AthenaMemory closed; the
records it had not delivered stay in its outbox file and a background sweeper
delivers them (one agent at a time), or its next use does.
"""

SWEEP_BACKOFF = Backoff(base=1.0, cap=30.0, jitter="none")
"""Pause between sweeper passes that delivered nothing: 1 s doubling to 30 s.

One sweeper per process, so there is no crowd to spread with jitter.
"""


def log_task_failure(task: asyncio.Future[Any]) -> None:
    """Done-callback for background tasks nobody awaits: log what they raised."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.warning("background task failed: %s: %s", type(exc).__name__, exc)


class AthenaFactory:
    """Builds an agent's AthenaMemory and its outbox from the engine's clients (no I/O).

    ``redis``: the runtime's backend (session cache and delivery markers), or None.

    A separate object (not a method of the engine) so that the agents' table
    does not hold the engine: an engine nobody uses is freed at once.
    """

    def __init__(
        self,
        client: AthenaClient,
        redis: RedisBackend | None,
        *,
        keyspace: KeySpace,
        settings: Settings,
        redactor: Redactor,
    ) -> None:
        self.client = client
        self.redis = redis
        self.keyspace = keyspace
        # The tier's tunables under these settings, mapped once for every agent.
        self.config = AthenaTierConfig.from_settings(settings)
        self.redactor = redactor

    def agent_id(self, agent_id: str) -> str:
        """The agent id sent to Athena: the agent's own (the namespace is in the user id)."""
        return agent_id

    def user_id(self, agent_id: str) -> str:
        """The Athena user id of the agent's session: ``ATHENA_USER_ID.<namespace>``,
        plus ``.<agent>`` with ``ATHENA_ISOLATE_AGENTS``.

        The server isolates mid-term memory (context chains, search) by (tenant,
        user), not by agent: two namespaces, or agents that must not share
        memory, need different user ids.
        """
        cfg = self.config
        return athena_user_id(
            cfg.user_id, self.keyspace.namespace, agent_id if cfg.isolate_agents else None
        )

    def outbox(self, agent_id: str) -> Outbox:
        """A new Outbox on the agent's Athena destination file (caller owns it).

        One file per (tenant, user, Athena agent id, server): records queued for
        one tenant or server are never replayed into another's session.
        """
        cfg = self.config
        destination = KeySpace.athena_destination(
            cfg.tenant_id, self.user_id(agent_id), self.agent_id(agent_id), self.client.base_url
        )
        path = cfg.outbox_dir / self.keyspace.athena_outbox_file(destination)
        # Bounded in bytes too: a turn may carry ~1 MB of text, so a count
        # alone would let an Athena outage fill the disk.
        return Outbox(
            path,
            max_entries=cfg.outbox_max_entries,
            max_bytes=cfg.outbox_max_bytes,
            fsync=cfg.outbox_fsync,
        )

    def __call__(self, agent_id: str) -> AthenaMemory:
        """A new (not started) AthenaMemory of the agent, owning a new outbox."""
        return AthenaMemory(
            self.agent_id(agent_id),
            self.client,
            self.redis,
            keyspace=self.keyspace,
            config=self.config.replace(user_id=self.user_id(agent_id)),
            outbox=self.outbox(agent_id),
            owns_outbox=True,
            redactor=self.redactor,
        )


class AthenaAgents:
    """The live AthenaMemory of each recently used agent, bounded by ``max_live`` (LRU).

    Agent ids are taken as given (the engine validates them).
    """

    def __init__(
        self,
        factory: AthenaFactory,
        *,
        max_live: int = ATHENA_RECENT_AGENTS,
        sweep_backoff: Backoff = SWEEP_BACKOFF,
    ) -> None:
        self.factory = factory
        self.max_live = max_live
        self.sweep_backoff = sweep_backoff
        # The start task of each live AthenaMemory (done once its session was
        # tried), in LRU order, and the memory itself, usable before that.
        self._started: OrderedDict[str, asyncio.Task[AthenaMemory]] = OrderedDict()
        self._live: dict[str, AthenaMemory] = {}
        # Evicted agents that left records behind, for the sweeper; retirements
        # and the sweeper run as tasks kept here until done.
        self._unsent: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._sweeping = False
        self._closed = False

    def live(self, agent_id: str) -> AthenaMemory | None:
        """The agent's live AthenaMemory, if it has one (no creation, no LRU touch)."""
        return self._live.get(agent_id)

    @property
    def retiring(self) -> bool:
        """True while evicted agents are still being closed."""
        return bool(self._tasks)

    def started(self) -> list[tuple[str, AthenaMemory]]:
        """The live agents whose session was tried without error, LRU order (for health)."""
        return [
            (agent_id, task.result())
            for agent_id, task in self._started.items()
            if task.done() and not task.cancelled() and task.exception() is None
        ]

    def get_nowait(self, agent_id: str) -> AthenaMemory:
        """The agent's AthenaMemory, created (no I/O to Athena) and started if needed.

        Writes may be queued at once; the session is resolved in the background.
        Past ``max_live`` agents, the least recently used one is retired.
        """
        memory = self._live.get(agent_id)
        if memory is not None:
            self._started.move_to_end(agent_id)
            return memory
        # No I/O here: the outbox is read by the delivery task, and a disk
        # error on a write is counted by AthenaMemory (never raised).
        memory = self.factory(agent_id)
        self._live[agent_id] = memory
        self._started[agent_id] = memory.start()
        while len(self._started) > self.max_live:
            old, _ = self._started.popitem(last=False)
            self._spawn(self._retire(old, self._live.pop(old)))
        return memory

    async def get(self, agent_id: str) -> AthenaMemory:
        """:meth:`get_nowait`, then wait for its first session attempt."""
        memory = self.get_nowait(agent_id)
        task = self._started.get(agent_id)
        if task is not None and not task.done():
            await asyncio.wait({task})
        return memory

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(log_task_failure)

    async def _retire(self, agent_id: str, memory: AthenaMemory) -> None:
        """Close an evicted agent's Athena state; leftover records go to the sweeper."""
        # An evicted memory with a request in flight lets it finish: at most
        # ATHENA_CONCURRENT_WRITES of them at once, so open files stay bounded.
        await memory.close()
        if len(memory.outbox) and not self._closed:
            self._unsent.add(agent_id)
            if self._sweeper is None or self._sweeper.done():
                self._sweeper = asyncio.ensure_future(self._sweep())
                self._sweeper.add_done_callback(log_task_failure)

    async def _sweep(self) -> None:
        """Deliver what evicted agents left behind, one agent at a time (bounded files).

        An agent that is live again is its own memory's business. While Athena
        fails, passes back off (``sweep_backoff``); records stay on disk meanwhile.
        """
        idle_passes = 0
        while self._unsent and not self._closed:
            progress = False
            for agent_id in list(self._unsent):
                if self._closed:
                    return
                if agent_id in self._live:
                    self._unsent.discard(agent_id)
                    continue
                try:
                    memory = self.factory(agent_id)
                except OSError as exc:
                    log.warning("Athena sweep of agent %s: %s", agent_id, exc)
                    continue
                self._sweeping = True
                try:
                    # No timeout: the client's own bounds each request, and a
                    # flush cut by a timeout would cancel a request in flight.
                    await memory.flush()
                except Exception as exc:  # keep sweeping the others
                    log.warning("Athena sweep of agent %s failed: %s", agent_id, exc)
                finally:
                    self._sweeping = False
                    await memory.close()
                if not len(memory.outbox):
                    self._unsent.discard(agent_id)
                    progress = True
                elif memory.health()["consecutive_failures"]:
                    break  # Athena is failing: back off rather than try every agent
            if self._unsent:
                if progress:
                    idle_passes = 0
                    await asyncio.sleep(0)
                else:
                    await asyncio.sleep(self.sweep_backoff.delay(idle_passes))
                    idle_passes += 1

    def stop(self) -> None:
        """From now on, evicted agents' leftovers are not swept (the engine is closing)."""
        self._closed = True

    async def close(self) -> None:
        """Stop the sweeper (letting a request in flight finish), close every agent."""
        self.stop()
        sweeper = self._sweeper
        if sweeper is not None:
            if self._sweeping:
                # Mid-flush: a request in flight is let finish (never cancelled);
                # the sweeper stops after it (it checks _closed).
                await asyncio.wait({sweeper}, timeout=CLOSE_GRACE_SECONDS)
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
        await asyncio.gather(*(memory.close() for memory in list(self._live.values())))
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
