"""The Athena tier's tunables: one frozen object, passed down by whoever builds the tier.

Defaults shared with the settings (tenant, user, workflow TTL, outbox bounds)
come from :mod:`jarvismem.defaults`; the tunables only this tier has are module
constants here. :meth:`AthenaTierConfig.from_settings` maps a :class:`Settings`
onto them, so the tier itself never reads the environment.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jarvismem import defaults
from jarvismem.keys import MAX_ID_LENGTH
from jarvismem.settings import Settings

__all__ = [
    "ATHENA_CONCURRENT_WRITES",
    "CLAIM_LEASE_SECONDS",
    "CLOSE_GRACE_SECONDS",
    "KERNEL_BUSY_GAP",
    "MARKER_TIMEOUT",
    "SESSION_CONFIRM_DELAY",
    "AthenaTierConfig",
    "athena_user_id",
]

KERNEL_BUSY_GAP = 0.05
"""Seconds after a write during which delivery yields to the kernel."""

CLAIM_LEASE_SECONDS = 60.0
"""Lease of a delivery claim: longer than one send with its retries; a deliverer
that died mid-send delays that event's redelivery by at most this long."""

MARKER_TIMEOUT = 2.0
"""Seconds a claim or mark may take before delivery goes on without it (at-least-once)."""

CLOSE_GRACE_SECONDS = 60.0
"""How long close() lets an Athena request in flight finish. Requests are never
cancelled mid-flight: that could deliver an event and still replay it, and a
cancelled request can leave a dead connection in the HTTP pool for good."""

SESSION_CONFIRM_DELAY = 0.5
"""Seconds to wait before asking again about a session the server answered 404 for.

The server answers 404 "session not found" for ANY datastore error on a session
lookup, so one 404 is not proof that the session is gone: the request is tried
once more after this pause (and the server's health is checked) before a new
session replaces it."""

ATHENA_CONCURRENT_WRITES = 32
"""Session creations and deliveries in flight per client (below the HTTP pool's
100 connections, so a write never queues inside the pool; waiting for this
limit can be cancelled safely, waiting inside the pool cannot)."""


@dataclass(frozen=True, slots=True)
class AthenaTierConfig:
    """Everything about one agent's Athena tier that is not a collaborator.

    Attributes:
        tenant_id, user_id: Athena tenant and user of the session, as sent
            (the engine's factory maps the namespace, and the agent when
            ``isolate_agents``, into ``user_id``: see :func:`athena_user_id`).
        isolate_agents: the factory appends the agent to the user id.
        include_graph_hits: keep ``ltm_node`` search hits (unscoped on the server).
        confirm_delay: pause before confirming a 404 on a session, s.
        failure_threshold: consecutive delivery failures that open the circuit.
        cooldown: seconds the circuit stays open before one trial delivery.
        retry_base, retry_cap: exponential backoff between failed deliveries, s.
        session_lock_ttl: expiry of the session-creation lock, s (a crashed
            creator cannot block others longer than this).
        dedupe_ttl: how long Redis remembers that an event was sent, s.
        outbox_dir, outbox_max_entries, outbox_max_bytes, outbox_fsync: the
            default outbox, used only when no outbox is handed to the memory.
    """

    tenant_id: str = defaults.ATHENA_TENANT_ID
    user_id: str = defaults.ATHENA_USER_ID
    isolate_agents: bool = defaults.ATHENA_ISOLATE_AGENTS
    include_graph_hits: bool = defaults.ATHENA_INCLUDE_GRAPH_HITS
    # The tier's own tunables: defined here once (no setting or other
    # constructor shares them).
    failure_threshold: int = 5
    cooldown: float = 30.0
    retry_base: float = 0.5
    retry_cap: float = 30.0
    session_lock_ttl: float = 30.0
    confirm_delay: float = SESSION_CONFIRM_DELAY
    dedupe_ttl: int = defaults.CONTEXT_TTL_SECONDS
    outbox_dir: Path = defaults.OUTBOX_PATH
    outbox_max_entries: int = defaults.OUTBOX_MAX_ENTRIES
    outbox_max_bytes: int | None = defaults.OUTBOX_MAX_BYTES
    outbox_fsync: bool = defaults.FSYNC_APPENDS

    @classmethod
    def from_settings(cls, settings: Settings) -> AthenaTierConfig:
        """The tier's config under ``settings`` (tenant, user, workflow TTL, outbox)."""
        return cls(
            tenant_id=settings.athena_tenant_id,
            user_id=settings.athena_user_id,
            isolate_agents=settings.athena_isolate_agents,
            include_graph_hits=settings.athena_include_graph_hits,
            dedupe_ttl=settings.ttl_seconds,
            outbox_dir=Path(settings.outbox_path),
            outbox_max_entries=settings.outbox_max_entries,
            outbox_max_bytes=settings.outbox_max_bytes,
            outbox_fsync=settings.outbox_fsync_effective,
        )

    def replace(self, **changes: Any) -> AthenaTierConfig:
        """A copy with ``changes`` (field names; an unknown name raises TypeError)."""
        return dataclasses.replace(self, **changes) if changes else self


def athena_user_id(user_id: str, namespace: str, agent_id: str | None = None) -> str:
    """The Athena ``user_id`` of a (user, namespace[, agent]): ``user.namespace[.agent]``.

    The server isolates mid-term memory (context chains, search) by (tenant,
    user) only, so the namespace, and the agent when agents must not share
    memory, have to be part of the user id. A combination longer than an id may
    be is replaced by ``u-`` and a stable digest of it.
    """
    combined = f"{user_id}.{namespace}" if agent_id is None else f"{user_id}.{namespace}.{agent_id}"
    if len(combined) <= MAX_ID_LENGTH:
        return combined
    return "u-" + hashlib.sha256(combined.encode()).hexdigest()[:40]
